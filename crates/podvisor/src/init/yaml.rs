//! The YAML that `podvisor init --supervision FILE` reads: enough of YAML for a Supervision
//! document, and no more, because the PID 1 build links no YAML or serde crate (README: "The
//! PID 1 build").
//!
//! Accepted: one document (an optional `---` first), block mappings and block sequences by
//! indentation, flow mappings `{a: b}` and flow sequences `[a, b]` on one line (nested too),
//! plain, 'single-quoted' and "double-quoted" scalars, and comments. Anything else (anchors,
//! aliases, tags, block scalars `|` `>`, flows over several lines, a second document) is
//! refused with its line and column, as are duplicate keys and bad indentation: never guessed.

use std::fmt;

/// Where something was written: 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pos {
    pub line: usize,
    pub col: usize,
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

/// A YAML node with the position it starts at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Scalar(String, Pos),
    Seq(Vec<Node>, Pos),
    Map(Vec<(String, Pos, Node)>, Pos),
}

impl Node {
    pub fn pos(&self) -> Pos {
        match self {
            Node::Scalar(_, p) | Node::Seq(_, p) | Node::Map(_, p) => *p,
        }
    }
}

/// A place in the text and what is wrong there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YamlError {
    pub pos: Pos,
    pub message: String,
}

/// One significant line: its number, indentation and content (comment removed).
struct Line<'a> {
    n: usize,
    indent: usize,
    text: &'a str,
}

/// Parses a whole document.
pub fn parse(text: &str) -> Result<Node, YamlError> {
    let mut lines = Vec::new();
    let mut started = false;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let content = strip_comment(raw);
        let trimmed = content.trim_end();
        if trimmed.trim().is_empty() {
            continue;
        }
        if trimmed == "---" {
            if started {
                return Err(err(
                    n,
                    1,
                    "a second document: the file holds one Supervision",
                ));
            }
            started = true;
            continue;
        }
        if trimmed == "..." {
            break;
        }
        started = true;
        let indent = trimmed.len() - trimmed.trim_start().len();
        if trimmed[..indent].contains('\t') {
            return Err(err(n, 1, "tabs cannot indent YAML"));
        }
        lines.push(Line {
            n,
            indent,
            text: trimmed,
        });
    }
    let Some(first) = lines.first() else {
        return Err(err(1, 1, "the file is empty"));
    };
    let indent = first.indent;
    let mut at = 0;
    let node = block(&lines, &mut at, indent)?;
    if let Some(extra) = lines.get(at) {
        return Err(err(extra.n, extra.indent + 1, "bad indentation"));
    }
    Ok(node)
}

fn err(line: usize, col: usize, message: &str) -> YamlError {
    YamlError {
        pos: Pos { line, col },
        message: message.to_string(),
    }
}

/// The line without its comment: a `#` at its start or after a blank, outside quoted
/// scalars (a quote opens one only where a scalar can begin, after `:`, `,`, `[`, `{` or `-`).
fn strip_comment(line: &str) -> &str {
    let mut quote: Option<char> = None;
    let mut escaped = false;
    let mut prev = ' ';
    let mut last_sig: Option<char> = None;
    for (i, ch) in line.char_indices() {
        match quote {
            Some('"') if escaped => escaped = false,
            Some('"') if ch == '\\' => escaped = true,
            Some(q) if ch == q => quote = None,
            Some(_) => {}
            None if (ch == '\'' || ch == '"')
                && matches!(last_sig, None | Some(':' | ',' | '[' | '{' | '-')) =>
            {
                quote = Some(ch)
            }
            None if ch == '#' && (prev == ' ' || prev == '\t') => return &line[..i],
            None => {}
        }
        if !ch.is_whitespace() {
            last_sig = Some(ch);
        }
        prev = ch;
    }
    line
}

/// A block (mapping or sequence) whose lines are indented by exactly `indent`.
fn block(lines: &[Line<'_>], at: &mut usize, indent: usize) -> Result<Node, YamlError> {
    let first = &lines[*at];
    let pos = Pos {
        line: first.n,
        col: indent + 1,
    };
    let body = &first.text[indent..];
    if body == "-" || body.starts_with("- ") {
        let mut items = Vec::new();
        while let Some(l) = lines.get(*at) {
            if l.indent < indent {
                break;
            }
            let body = &l.text[indent..];
            let item = body == "-" || body.starts_with("- ");
            if l.indent == indent && !item {
                // The next key of the mapping this sequence is the value of (`key:\n- a\nnext:`,
                // as kubectl and most emitters write sequences); a caller that expects no more
                // lines refuses it.
                break;
            }
            if l.indent != indent {
                return Err(err(l.n, l.indent + 1, "bad indentation in a sequence"));
            }
            let rest = body[1..].trim_start();
            let col = l.text.len() - rest.len() + 1;
            *at += 1;
            if rest.is_empty() {
                items.push(nested(lines, at, indent, l.n, col)?);
            } else if !rest.starts_with(['{', '[', '"', '\''])
                && (rest.contains(": ") || rest.ends_with(':'))
            {
                return Err(err(l.n, col, "a mapping inside a block sequence is not supported by podvisor init's reader: write it as a flow mapping {a: b}"));
            } else {
                items.push(inline(rest, l.n, col)?);
            }
        }
        return Ok(Node::Seq(items, pos));
    }
    let mut entries: Vec<(String, Pos, Node)> = Vec::new();
    while let Some(l) = lines.get(*at) {
        if l.indent < indent {
            break;
        }
        if l.indent > indent {
            return Err(err(l.n, l.indent + 1, "bad indentation"));
        }
        let body = &l.text[indent..];
        let key_pos = Pos {
            line: l.n,
            col: indent + 1,
        };
        let (key, rest) = split_key(body).ok_or_else(|| {
            err(
                l.n,
                indent + 1,
                "expected `key: value` (podvisor init's reader takes maps, lists and scalars)",
            )
        })?;
        let key = scalar(key, l.n, indent + 1)?;
        if entries.iter().any(|(k, _, _)| *k == key) {
            return Err(err(l.n, indent + 1, &format!("duplicate key {key:?}")));
        }
        *at += 1;
        let value = if rest.is_empty() {
            // A nested block, or a sequence at the same indentation (`key:\n- a`).
            match lines.get(*at) {
                Some(next)
                    if next.indent == indent
                        && (next.text[indent..] == *"-"
                            || next.text[indent..].starts_with("- ")) =>
                {
                    block(lines, at, indent)?
                }
                _ => nested(lines, at, indent, l.n, body.len() + indent + 1)?,
            }
        } else {
            let col = l.text.len() - rest.len() + 1;
            inline(rest, l.n, col)?
        };
        entries.push((key, key_pos, value));
    }
    Ok(Node::Map(entries, pos))
}

/// The block under a line that ended with `key:` or `-`; an empty value if there is none.
fn nested(
    lines: &[Line<'_>],
    at: &mut usize,
    parent: usize,
    line: usize,
    col: usize,
) -> Result<Node, YamlError> {
    match lines.get(*at) {
        Some(next) if next.indent > parent => block(lines, at, next.indent),
        _ => Ok(Node::Scalar(String::new(), Pos { line, col })),
    }
}

/// `key: rest` or `key:` at the start of `body`: the key's text and the rest (trimmed).
fn split_key(body: &str) -> Option<(&str, &str)> {
    let mut quote: Option<char> = None;
    for (i, ch) in body.char_indices() {
        match quote {
            Some(q) if ch == q => quote = None,
            Some(_) => {}
            None if (ch == '\'' || ch == '"') && i == 0 => quote = Some(ch),
            None if ch == ':' => {
                let rest = &body[i + 1..];
                if rest.is_empty() || rest.starts_with(' ') {
                    return Some((body[..i].trim_end(), rest.trim()));
                }
            }
            None if ch == '{' || ch == '[' => return None,
            None => {}
        }
    }
    None
}

/// A value written on the key's line: a flow collection or a scalar.
fn inline(text: &str, line: usize, col: usize) -> Result<Node, YamlError> {
    let mut p = Flow {
        s: text,
        i: 0,
        line,
        col,
    };
    let node = p.value()?;
    p.blank();
    if p.i < text.len() {
        return Err(p.err("unexpected text after the value"));
    }
    Ok(node)
}

/// A one-line flow value being read.
struct Flow<'a> {
    s: &'a str,
    i: usize,
    line: usize,
    col: usize,
}

impl Flow<'_> {
    fn pos(&self) -> Pos {
        Pos {
            line: self.line,
            col: self.col + self.i,
        }
    }

    fn err(&self, message: &str) -> YamlError {
        YamlError {
            pos: self.pos(),
            message: message.to_string(),
        }
    }

    fn blank(&mut self) {
        while self.s[self.i..].starts_with(' ') {
            self.i += 1;
        }
    }

    fn peek(&self) -> Option<char> {
        self.s[self.i..].chars().next()
    }

    fn value(&mut self) -> Result<Node, YamlError> {
        self.blank();
        let pos = self.pos();
        match self.peek() {
            Some('{') => {
                self.i += 1;
                let mut entries: Vec<(String, Pos, Node)> = Vec::new();
                loop {
                    self.blank();
                    if self.peek() == Some('}') {
                        self.i += 1;
                        return Ok(Node::Map(entries, pos));
                    }
                    let key_pos = self.pos();
                    let key = match self.value()? {
                        Node::Scalar(k, _) => k,
                        _ => return Err(YamlError {
                            pos: key_pos,
                            message: "a key must be a scalar".into(),
                        }),
                    };
                    self.blank();
                    if self.peek() != Some(':') {
                        return Err(self.err("expected `:` after the key"));
                    }
                    self.i += 1;
                    if entries.iter().any(|(k, _, _)| *k == key) {
                        return Err(YamlError {
                            pos: key_pos,
                            message: format!("duplicate key {key:?}"),
                        });
                    }
                    let v = self.value()?;
                    entries.push((key, key_pos, v));
                    self.blank();
                    match self.peek() {
                        Some(',') => self.i += 1,
                        Some('}') => {}
                        _ => return Err(self.err("expected `,` or `}` (a flow mapping ends on its line)")),
                    }
                }
            }
            Some('[') => {
                self.i += 1;
                let mut items = Vec::new();
                loop {
                    self.blank();
                    if self.peek() == Some(']') {
                        self.i += 1;
                        return Ok(Node::Seq(items, pos));
                    }
                    items.push(self.value()?);
                    self.blank();
                    match self.peek() {
                        Some(',') => self.i += 1,
                        Some(']') => {}
                        _ => return Err(self.err("expected `,` or `]` (a flow sequence ends on its line)")),
                    }
                }
            }
            Some('\'' | '"') => {
                let rest = &self.s[self.i..];
                let end = quoted_end(rest).ok_or_else(|| self.err("a quoted string that does not end on its line"))?;
                let text = scalar(&rest[..end], self.line, pos.col)?;
                self.i += end;
                Ok(Node::Scalar(text, pos))
            }
            Some('&' | '*' | '!' | '|' | '>' | '%' | '@' | '`') => Err(self.err(
                "anchors, aliases, tags and block scalars are not supported by podvisor init's reader",
            )),
            _ => {
                let rest = &self.s[self.i..];
                // A plain scalar ends at `,`, `}` or `]`, or at a `:` that ends a key.
                let bytes = rest.as_bytes();
                let end = (0..bytes.len())
                    .find(|&k| {
                        matches!(bytes[k], b',' | b'}' | b']')
                            || (bytes[k] == b':'
                                && matches!(bytes.get(k + 1), None | Some(b' ' | b',' | b'}' | b']')))
                    })
                    .unwrap_or(rest.len());
                let text = rest[..end].trim_end();
                if text.is_empty() {
                    return Err(self.err("expected a value"));
                }
                self.i += text.len();
                Ok(Node::Scalar(text.to_string(), pos))
            }
        }
    }
}

/// Where the quoted string at the start of `s` ends (just after its closing quote).
fn quoted_end(s: &str) -> Option<usize> {
    let q = s.chars().next()?;
    let mut chars = s.char_indices().skip(1).peekable();
    while let Some((i, ch)) = chars.next() {
        if q == '"' && ch == '\\' {
            chars.next();
        } else if ch == q {
            if q == '\'' && chars.peek().is_some_and(|(_, c)| *c == '\'') {
                chars.next();
                continue;
            }
            return Some(i + 1);
        }
    }
    None
}

/// A scalar's text: quotes removed and escapes resolved.
fn scalar(text: &str, line: usize, col: usize) -> Result<String, YamlError> {
    if let Some(inner) = text.strip_prefix('\'').and_then(|t| t.strip_suffix('\'')) {
        return Ok(inner.replace("''", "'"));
    }
    if let Some(inner) = text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        let mut out = String::new();
        let mut chars = inner.chars();
        while let Some(ch) = chars.next() {
            if ch != '\\' {
                out.push(ch);
                continue;
            }
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(c @ ('"' | '\\' | '/')) => out.push(c),
                _ => {
                    return Err(err(
                        line,
                        col,
                        "an escape podvisor init's reader does not know",
                    ))
                }
            }
        }
        return Ok(out);
    }
    if text.starts_with(['&', '*', '!', '|', '>']) {
        return Err(err(
            line,
            col,
            "anchors, aliases, tags and block scalars are not supported by podvisor init's reader",
        ));
    }
    Ok(text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(n: &Node) -> Vec<&str> {
        match n {
            Node::Map(e, _) => e.iter().map(|(k, _, _)| k.as_str()).collect(),
            _ => vec![],
        }
    }

    fn get<'a>(n: &'a Node, key: &str) -> &'a Node {
        match n {
            Node::Map(e, _) => &e.iter().find(|(k, _, _)| k == key).unwrap().2,
            _ => panic!("not a map"),
        }
    }

    fn text(n: &Node) -> &str {
        match n {
            Node::Scalar(s, _) => s,
            _ => panic!("not a scalar: {n:?}"),
        }
    }

    #[test]
    fn reads_sequences_written_at_their_keys_indentation() {
        let n = parse("spec:\n  containers:\n  - app\n  - web\n  env:\n    A: b\n").unwrap();
        let spec = get(&n, "spec");
        assert_eq!(keys(spec), ["containers", "env"]);
        match get(spec, "containers") {
            Node::Seq(items, _) => assert_eq!(items.len(), 2),
            other => panic!("{other:?}"),
        }
        let e = parse("- a\nb: c\n").unwrap_err();
        assert_eq!((e.pos.line, e.message.as_str()), (2, "bad indentation"));
    }

    #[test]
    fn reads_the_spec_example() {
        let doc = "---\napiVersion: podvisor.io/v1alpha1\nkind: Supervision\nmetadata: {name: default}\nspec:\n  stagedInstrumentation:        # seed 000\n    enabled: true\n    containers: [app, 'side car']\n    env: {LD_PRELOAD: /opt/agent/libagent.so, \"X\": \"a\\\"b # c\"}\n    debugAfterRestarts: 3\n    list:\n    - one\n    - {k: v}\n";
        let n = parse(doc).unwrap();
        assert_eq!(keys(&n), ["apiVersion", "kind", "metadata", "spec"]);
        let s = get(get(&n, "spec"), "stagedInstrumentation");
        assert_eq!(text(get(s, "enabled")), "true");
        assert_eq!(get(s, "enabled").pos(), Pos { line: 7, col: 14 });
        match get(s, "containers") {
            Node::Seq(items, _) => {
                assert_eq!(
                    items.iter().map(text).collect::<Vec<_>>(),
                    ["app", "side car"]
                )
            }
            other => panic!("{other:?}"),
        }
        let env = get(s, "env");
        assert_eq!(text(get(env, "LD_PRELOAD")), "/opt/agent/libagent.so");
        assert_eq!(text(get(env, "X")), "a\"b # c");
        match get(s, "list") {
            Node::Seq(items, _) => assert_eq!(items.len(), 2),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn refuses_what_it_does_not_read_with_a_position() {
        let cases = [
            ("a: 1\na: 2\n", 2, 1, "duplicate key \"a\""),
            ("a: &x 1\n", 1, 4, "anchors"),
            ("a: |\n  text\n", 1, 4, "anchors"),
            ("a: {b: 1\n", 1, 9, "expected `,` or `}`"),
            ("a: 1\n  b: 2\n", 2, 3, "bad indentation"),
            ("a: 1\n---\nb: 2\n", 2, 1, "a second document"),
            ("just text\n", 1, 1, "expected `key: value`"),
            ("", 1, 1, "the file is empty"),
        ];
        for (doc, line, col, what) in cases {
            let e = parse(doc).unwrap_err();
            assert_eq!((e.pos.line, e.pos.col), (line, col), "{doc:?}: {e:?}");
            assert!(e.message.contains(what), "{doc:?}: {e:?}");
        }
    }
}
