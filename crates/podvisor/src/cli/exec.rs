//! `podvisor exec [POD] [-c CONTAINER] [-i] -- CMD...`: a command in a running container, as
//! `kubectl exec` runs one. Its stdout and stderr (and with `-i` its stdin) are this
//! command's own, handed to the run over the status API's socket; the run starts it with the
//! container's namespaces, cgroups, user, groups, capabilities, no_new_privs, seccomp filter,
//! environment and working directory, as CRI exec does.

use std::os::fd::RawFd;
use std::path::PathBuf;

use crate::client::{self, ClientError};
use crate::status::ApiPod;

/// `podvisor exec`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ExecArgs {
    /// The pod's state dir (default: found by POD under the default base)
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// The container (default: the pod's `kubectl.kubernetes.io/default-container`, else its
    /// first container)
    #[arg(short, long, value_name = "NAME")]
    container: Option<String>,
    /// Pass this command's stdin to the container's command
    #[arg(short = 'i', long)]
    stdin: bool,
    /// Allocate a terminal (not supported: with -i the command reads your terminal as it is)
    #[arg(short, long)]
    tty: bool,
    /// The pod's namespace
    #[arg(short, long, value_name = "NAMESPACE")]
    namespace: Option<String>,
    /// The pod, `NAME` or `NAMESPACE/NAME` (default: the only running pod)
    #[arg(value_name = "POD")]
    pod: Option<String>,
    /// The command and its arguments
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

/// What the run answers once the command ended.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Answer {
    exit_code: i32,
    error: Option<String>,
}

pub fn main(a: ExecArgs) -> i32 {
    match exec(a) {
        Ok(code) => code,
        Err(ClientError(msg)) => {
            eprintln!("error: {msg}");
            1
        }
    }
}

fn exec(a: ExecArgs) -> Result<i32, ClientError> {
    if a.tty {
        return Err(ClientError(
            "podvisor exec cannot allocate a terminal (-t) yet; with -i the command reads this one as it is".into(),
        ));
    }
    let dir = client::find_pod(a.state_dir, a.pod.as_deref(), a.namespace.as_deref())?;
    let container = match a.container {
        Some(c) => c,
        None => {
            let pod: ApiPod = serde_json::from_str(&client::call(&dir, "GET", "/status")?)
                .map_err(|e| ClientError(format!("the run's status: {e}")))?;
            client::default_container(&pod)?
        }
    };
    let mut path = format!("/exec?container={}", client::percent_encode(&container));
    for arg in &a.command {
        path.push_str("&command=");
        path.push_str(&client::percent_encode(arg));
    }
    let fds: &[RawFd] = if a.stdin { &[0, 1, 2] } else { &[1, 2] };
    let r = client::request_with_fds(&dir, "POST", &path, fds)?;
    let code = r.code;
    let text = r.text()?;
    if code != 200 {
        return Err(ClientError(text.trim_end().to_string()));
    }
    let answer: Answer = serde_json::from_str(&text)
        .map_err(|e| ClientError(format!("the run's answer {:?}: {e}", text.trim_end())))?;
    if let Some(why) = answer.error {
        eprintln!("error: {why}");
    }
    if answer.exit_code != 0 {
        // As kubectl says it.
        eprintln!("command terminated with exit code {}", answer.exit_code);
    }
    Ok(answer.exit_code)
}
