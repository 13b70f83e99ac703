//! `podvisor status [-o wide|json|yaml|describe] [-w]` and `podvisor describe`: the running
//! pod as `kubectl get pod` and `kubectl describe pod` show it, from the status API.

use std::path::PathBuf;

use super::exit_code;
use crate::client::{self, ClientError};
use crate::status::print::{describe, table};
use crate::status::ApiPod;

/// `podvisor status`' and `podvisor describe`'s arguments.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    target: super::PodTarget,
    /// Output format
    #[arg(short, long, value_enum, value_name = "FORMAT")]
    output: Option<Format>,
    /// Print again on every change (Ctrl-C to end)
    #[arg(short, long)]
    watch: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    #[value(skip)]
    Table,
    Wide,
    Json,
    Yaml,
    Describe,
}

pub fn main(a: StatusArgs, describe: bool) -> i32 {
    let default = if describe {
        Format::Describe
    } else {
        Format::Table
    };
    let format = a.output.unwrap_or(default);
    exit_code((|| {
        let dir = a.target.find()?;
        run(dir, format, a.watch)
    })())
}

fn run(dir: PathBuf, format: Format, watch: bool) -> Result<(), ClientError> {
    if !watch {
        let text = client::pod_text(&dir)?;
        let pod = read(&text)?;
        let out = match format {
            Format::Describe => {
                let events = client::events_text(&dir)?;
                describe(&pod, &events)
            }
            Format::Json => format!("{}\n", pretty(&pod)),
            _ => render(&pod, format, true),
        };
        super::write_out(&out);
        return Ok(());
    }
    let mut first = true;
    client::watch_status(&dir, |line| {
        // One object per line while watching (`jq` and scripts read them as they come).
        let out = match format {
            Format::Json => format!("{line}\n"),
            _ => {
                let pod = read(line).map_err(|e| std::io::Error::other(e.0))?;
                match format {
                    Format::Yaml => format!("---\n{}", yaml(&pod)),
                    Format::Describe => format!("{}\n", describe(&pod, "")),
                    _ => render(&pod, format, first),
                }
            }
        };
        first = false;
        let mut stdout = std::io::stdout().lock();
        std::io::Write::write_all(&mut stdout, out.as_bytes())?;
        std::io::Write::flush(&mut stdout)
    })
}

/// The pod from the API's answer.
fn read(text: &str) -> Result<ApiPod, ClientError> {
    serde_json::from_str(text)
        .map_err(|e| ClientError(format!("the pod's answer is not a v1 Pod: {e}")))
}

fn pretty(pod: &ApiPod) -> String {
    serde_json::to_string_pretty(pod).unwrap_or_default()
}

fn yaml(pod: &ApiPod) -> String {
    serde_saphyr::to_string(pod).unwrap_or_else(|e| format!("# cannot write YAML: {e}\n"))
}

fn render(pod: &ApiPod, format: Format, header: bool) -> String {
    match format {
        Format::Json => format!("{}\n", pretty(pod)),
        Format::Yaml => yaml(pod),
        _ => table(pod, format == Format::Wide, header),
    }
}
