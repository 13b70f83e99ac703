//! Drawing the model with ratatui: the list of pods and containers, the log pane, the events
//! pane, the status line, and the help and describe overlays. Colours only when `color`
//! (`NO_COLOR` unset); selection and focus also show without them (reverse video, titles).

use ratatui::layout::{Constraint, Direction, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Clear, Paragraph, Row, Table, Wrap};
use ratatui::Frame;

use super::model::{Focus, Model, Typing, COLUMNS};

/// The keys, for `?`.
pub const HELP: &str = "\
podvisor top: every running pod it can see, pushed by their watches

  list            ↑/↓ j/k move, g/G first/last, s sort (name, restarts, cpu, memory)
                  / filter, Enter or l log, p previous log, e events, d describe
                  r restart container, R restart pod, x stop pod (each asks y/n)
  log             ↑/↓ PgUp/PgDn scroll, g/G top/bottom, f follow, w wrap
                  / search, n/N next/previous match, p current/previous instance
  events          ↑/↓ scroll
  anywhere        Tab next pane, Esc back to the list, ? this help, q or Ctrl-C quit

Quitting never touches the pods.";

struct Styles {
    warn: Style,
    error: Style,
    dim: Style,
    header: Style,
    mark: Style,
}

impl Styles {
    fn new(color: bool) -> Styles {
        if color {
            Styles {
                warn: Style::default().fg(Color::Yellow),
                error: Style::default().fg(Color::Red),
                dim: Style::default().fg(Color::DarkGray),
                header: Style::default().add_modifier(Modifier::BOLD),
                mark: Style::default().fg(Color::Black).bg(Color::Yellow),
            }
        } else {
            Styles {
                warn: Style::default(),
                error: Style::default(),
                dim: Style::default(),
                header: Style::default().add_modifier(Modifier::BOLD),
                mark: Style::default().add_modifier(Modifier::UNDERLINED),
            }
        }
    }
}

fn pane(title: String, focused: bool) -> Block<'static> {
    let title = if focused { format!("[{title}]") } else { title };
    Block::default().borders(Borders::ALL).title(title)
}

/// Draws everything.
pub fn draw(f: &mut Frame, m: &Model, now: f64, color: bool) {
    let st = Styles::new(color);
    let area = f.area();
    let [main, status] = Layout::default()
        .direction(Direction::Vertical)
        .constraints([Constraint::Min(3), Constraint::Length(1)])
        .areas(area);
    let [list, bottom] = Layout::default()
        .direction(Direction::Vertical)
        .constraints([Constraint::Percentage(45), Constraint::Percentage(55)])
        .areas(main);
    let split = if area.width >= 100 {
        Direction::Horizontal
    } else {
        Direction::Vertical
    };
    let [logs, events] = Layout::default()
        .direction(split)
        .constraints([Constraint::Percentage(60), Constraint::Percentage(40)])
        .areas(bottom);
    let rows = m.rows(now);
    let selected = m.selected_index(&rows);
    draw_list(f, m, &rows, selected, list, &st);
    draw_log(f, m, logs, &st);
    // The events of the selected row's pod.
    let pod = selected.map(|i| &rows[i].dir);
    draw_events(f, m, pod, events, &st);
    draw_status(f, m, status, &st);
    if m.help {
        overlay(f, area, "help", HELP);
    }
    if let Some(text) = &m.describe {
        overlay(f, area, "describe (any key closes)", text);
    }
}

fn overlay(f: &mut Frame, area: Rect, title: &str, text: &str) {
    let inner = Rect {
        x: area.x + 1,
        y: area.y + 1,
        width: area.width.saturating_sub(2),
        height: area.height.saturating_sub(2),
    };
    f.render_widget(Clear, inner);
    f.render_widget(
        Paragraph::new(text.to_string())
            .block(pane(title.to_string(), true))
            .wrap(Wrap { trim: false }),
        inner,
    );
}

fn draw_list(
    f: &mut Frame,
    m: &Model,
    rows: &[super::model::Row],
    selected: Option<usize>,
    area: Rect,
    st: &Styles,
) {
    let n = Model::columns(area.width);
    let height = area.height.saturating_sub(3) as usize;
    // Keep the selection in view.
    let first = selected.map_or(0, |s| s.saturating_sub(height.saturating_sub(1)));
    let body: Vec<Row> = rows
        .iter()
        .enumerate()
        .skip(first)
        .take(height.max(1))
        .map(|(i, r)| {
            let mut style = if r.warn { st.warn } else { Style::default() };
            if r.container.is_none() {
                style = style.add_modifier(Modifier::BOLD);
            }
            if Some(i) == selected {
                style = style.add_modifier(Modifier::REVERSED);
            }
            Row::new(r.cells.iter().take(n).cloned().map(Cell::from)).style(style)
        })
        .collect();
    let widths = [
        Constraint::Min(16),
        Constraint::Length(7),
        Constraint::Min(18),
        Constraint::Length(8),
        Constraint::Length(7),
        Constraint::Length(18),
        Constraint::Length(7),
        Constraint::Length(8),
    ];
    let title = format!(
        "pods {} (sort: {}{})",
        m.pods.len(),
        m.sort.as_str(),
        if m.filter.is_empty() {
            String::new()
        } else {
            format!(", filter: {}", m.filter)
        }
    );
    let table = Table::new(body, &widths[..n])
        .header(Row::new(COLUMNS.iter().take(n).map(|c| Cell::from(*c))).style(st.header))
        .block(pane(title, m.focus == Focus::List));
    f.render_widget(table, area);
}

fn draw_log(f: &mut Frame, m: &Model, area: Rect, st: &Styles) {
    let Some(log) = &m.log else {
        let p = Paragraph::new("Enter on a container shows its log").style(st.dim);
        f.render_widget(p.block(pane("log".into(), m.focus == Focus::Logs)), area);
        return;
    };
    let height = area.height.saturating_sub(2) as usize;
    let first = log.first_shown(height);
    let current = log.current.map(|c| log.matches[c]);
    let lines: Vec<Line> = log.lines[first..]
        .iter()
        .take(height)
        .enumerate()
        .map(|(k, (stream, text))| {
            let i = first + k;
            let mut style = if stream == "stderr" {
                st.error
            } else {
                Style::default()
            };
            if Some(i) == current {
                style = st.mark;
            } else if !log.query.is_empty() && log.matches.binary_search(&i).is_ok() {
                style = style.add_modifier(Modifier::UNDERLINED);
            }
            Line::from(Span::styled(text.clone(), style))
        })
        .collect();
    let title = format!(
        "log {} #{}{}{}{}",
        log.container,
        log.instance,
        if log.previous { " (previous)" } else { "" },
        if log.follow { " following" } else { "" },
        if log.query.is_empty() {
            String::new()
        } else {
            format!(
                " /{} {}",
                log.query,
                match log.current {
                    Some(c) => format!("{}/{}", c + 1, log.matches.len()),
                    None => "no match".into(),
                }
            )
        }
    );
    let mut p = Paragraph::new(lines).block(pane(title, m.focus == Focus::Logs));
    if log.wrap {
        p = p.wrap(Wrap { trim: false });
    }
    f.render_widget(p, area);
}

fn draw_events(
    f: &mut Frame,
    m: &Model,
    pod: Option<&std::path::PathBuf>,
    area: Rect,
    st: &Styles,
) {
    let events = m.events(pod);
    let height = area.height.saturating_sub(2) as usize;
    let lines: Vec<Line> = events
        .iter()
        .skip(m.events_scroll)
        .take(height)
        .map(|e| {
            let clock = e.time.get(11..19).unwrap_or(&e.time);
            let style = if e.type_ == "Warning" {
                st.warn
            } else {
                Style::default()
            };
            Line::from(Span::styled(
                format!("{clock} {} {}: {}", e.reason, e.object, e.message),
                style,
            ))
        })
        .collect();
    let p = Paragraph::new(lines).block(pane(
        format!("events {}", events.len()),
        m.focus == Focus::Events,
    ));
    f.render_widget(p, area);
}

fn draw_status(f: &mut Frame, m: &Model, area: Rect, st: &Styles) {
    let text = if let Some(t) = m.typing {
        let what = match t {
            Typing::Filter => "filter",
            Typing::Search => "search",
        };
        Line::from(format!("{what}: {}_", m.input))
    } else if let Some(a) = &m.confirm {
        Line::from(Span::styled(a.question(&m.pod_name(a.dir())), st.mark))
    } else if let Some(msg) = &m.message {
        Line::from(msg.clone())
    } else {
        Line::from(Span::styled(
            "? help  / filter  s sort  Enter log  e events  d describe  r/R restart  x stop  q quit",
            st.dim,
        ))
    };
    f.render_widget(Paragraph::new(text), area);
}
