//! `podvisor explain [-o json] [--start-time DUR] FILE`: per container, the lifecycle timing the
//! spec implies and the settings that will hurt, with their fix.

use std::time::Duration;

use podvisor_core::spec::explain::explain;

use super::manifest::{duration, load};

/// `podvisor explain`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// JSON instead of text
    #[arg(short, long, value_name = "FORMAT", value_parser = ["json"])]
    output: Option<String>,
    /// How long the app takes to start (the probes are checked against it)
    #[arg(long, value_name = "DUR", value_parser = duration)]
    start_time: Option<Duration>,
    #[command(flatten)]
    node: super::node::NodeArgs,
    /// The pod manifest (- for stdin)
    file: String,
}

pub fn main(a: ExplainArgs) -> i32 {
    let manifest = match load(&a.file) {
        Ok(m) => m,
        Err(code) => return code,
    };
    let node = match a.node.node() {
        Ok(n) => n,
        Err(code) => return code,
    };
    let mut e = explain(&manifest, node.backoff, a.start_time);
    e.backoff_from = node.backoff_from;
    if a.output.is_some() {
        super::write_out(&format!("{:#}\n", e.to_json()));
    } else {
        super::write_out(&e.to_text());
    }
    0
}
