//! `podvisor get pods` (and `ps`), as `kubectl get pods` lists them: every pod under the
//! default base, running or ended (with its final status, until `podvisor delete` removes it);
//! and `podvisor delete POD`, which removes an ended pod's state dir.

use std::collections::BTreeMap;
use std::time::Duration;

use super::exit_code;
use crate::client::{self, ClientError};
use crate::state::{self, StateDir};
use crate::status::print::{columns, now_secs, pod_head, pod_row};
use crate::status::ApiPod;

/// `podvisor get`'s arguments.
#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// What to list: pods (pod, po)
    #[arg(value_parser = ["pods", "pod", "po"], value_name = "pods")]
    resource: String,
    #[command(flatten)]
    list: ListArgs,
}

/// `podvisor ps`' and `get pods`' own arguments.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only these pods (NAME or NAMESPACE/NAME)
    #[arg(value_name = "POD")]
    pods: Vec<String>,
    /// Only the pods of this namespace
    #[arg(
        short,
        long,
        value_name = "NAMESPACE",
        conflicts_with = "all_namespaces"
    )]
    namespace: Option<String>,
    /// The pods of every namespace, with a NAMESPACE column (the default lists every pod too,
    /// as podvisor has no current namespace)
    #[arg(short = 'A', long)]
    all_namespaces: bool,
    /// Output format
    #[arg(short, long, value_name = "FORMAT", value_parser = ["wide", "json", "yaml", "name"])]
    output: Option<String>,
    /// After the list, print a pod's row again each time it changes (Ctrl-C to end)
    #[arg(short, long)]
    watch: bool,
}

/// `podvisor delete`'s arguments.
#[derive(Debug, clap::Args)]
pub struct DeleteArgs {
    /// The pod's namespace
    #[arg(short, long, value_name = "NAMESPACE")]
    namespace: Option<String>,
    /// The ended pods to remove (NAME or NAMESPACE/NAME)
    #[arg(value_name = "POD", required = true)]
    pods: Vec<String>,
}

/// A pod under the base: its state dir and, when it can be read, the pod.
struct Listed {
    namespace: String,
    name: String,
    pod: Option<ApiPod>,
}

pub fn get(a: GetArgs) -> i32 {
    ps(a.list)
}

pub fn ps(a: ListArgs) -> i32 {
    exit_code((|| {
        let pods = list(&a);
        match a.output.as_deref() {
            Some("json" | "yaml") => return print_list(&pods, a.output.as_deref()),
            Some("name") => {
                let out: String = pods.iter().map(|p| format!("pod/{}\n", p.name)).collect();
                super::write_out(&out);
                return Ok(());
            }
            _ => {}
        }
        let wide = a.output.as_deref() == Some("wide");
        let rows = rows(&pods, wide, a.all_namespaces);
        if rows.is_empty() && !a.watch {
            eprintln!("No resources found");
            return Ok(());
        }
        let mut head: Vec<String> = pod_head(wide).iter().map(|h| h.to_string()).collect();
        if a.all_namespaces {
            head.insert(0, "NAMESPACE".into());
        }
        let mut table = vec![head];
        table.extend(rows.values().cloned());
        super::write_out(&columns(&table));
        if a.watch {
            watch(&a, wide, rows);
        }
        Ok(())
    })())
}

/// Prints a row again whenever it changes (ages aside), once a second.
fn watch(a: &ListArgs, wide: bool, mut shown: BTreeMap<String, Vec<String>>) {
    let without_age = |r: &Vec<String>| {
        let age = if a.all_namespaces { 5 } else { 4 };
        (r.iter().enumerate())
            .filter(|(i, _)| *i != age)
            .map(|(_, c)| c.clone())
            .collect::<Vec<_>>()
    };
    loop {
        std::thread::sleep(Duration::from_secs(1));
        for (key, row) in rows(&list(a), wide, a.all_namespaces) {
            let changed = shown
                .get(&key)
                .is_none_or(|r| without_age(r) != without_age(&row));
            if changed {
                super::write_out(&columns(std::slice::from_ref(&row)));
                shown.insert(key, row);
            }
        }
    }
}

/// The pods under the default base that `a` selects, by namespace and name.
fn list(a: &ListArgs) -> Vec<Listed> {
    let mut found: Vec<Listed> = state::under(&state::base())
        .into_iter()
        .filter(client::holds_pod)
        .map(|d| {
            let label = client::pod_label(&d);
            let (namespace, name) = label.split_once('/').unwrap_or(("", &label));
            Listed {
                namespace: namespace.to_string(),
                name: name.to_string(),
                pod: client::pod_text(d.path())
                    .ok()
                    .and_then(|t| serde_json::from_str(&t).ok()),
            }
        })
        .filter(|p| a.namespace.as_ref().is_none_or(|ns| *ns == p.namespace))
        .collect();
    if !a.pods.is_empty() {
        found.retain(|p| {
            let full = format!("{}/{}", p.namespace, p.name);
            a.pods.iter().any(|w| *w == p.name || *w == full)
        });
    }
    found
}

/// The table's rows by `NAMESPACE/NAME`; a pod that cannot be read (its run was killed) is
/// `Unknown`.
fn rows(pods: &[Listed], wide: bool, namespaces: bool) -> BTreeMap<String, Vec<String>> {
    let now = now_secs();
    pods.iter()
        .map(|p| {
            let mut row = match &p.pod {
                Some(pod) => pod_row(pod, wide, now),
                None => {
                    let mut r = vec![p.name.clone(), "-".into(), "Unknown".into()];
                    r.extend(["-".into(), "<unknown>".into()]);
                    if wide {
                        r.extend(["<none>".into(), "<none>".into()]);
                    }
                    r
                }
            };
            if namespaces {
                row.insert(0, p.namespace.clone());
            }
            (format!("{}/{}", p.namespace, p.name), row)
        })
        .collect()
}

/// `-o json|yaml`: a v1 List of the pods, as kubectl prints one.
fn print_list(pods: &[Listed], format: Option<&str>) -> Result<(), ClientError> {
    let items: Vec<&ApiPod> = pods.iter().filter_map(|p| p.pod.as_ref()).collect();
    let list = serde_json::json!({
        "apiVersion": "v1",
        "items": items,
        "kind": "List",
        "metadata": {"resourceVersion": ""},
    });
    let out = match format {
        Some("yaml") => serde_saphyr::to_string(&list)
            .map_err(|e| ClientError(format!("cannot write YAML: {e}")))?,
        _ => format!(
            "{}\n",
            serde_json::to_string_pretty(&list).unwrap_or_default()
        ),
    };
    super::write_out(&out);
    Ok(())
}

/// Removes ended pods' state dirs (logs, record, last status and events), as `kubectl delete`
/// removes a pod that has ended, and the cgroups a run killed with -9 left; a running pod is
/// refused (`podvisor stop` deletes it), and so is one whose containers live on under keepers.
pub fn delete(a: DeleteArgs) -> i32 {
    exit_code((|| {
        for wanted in &a.pods {
            let dir = client::find_pod(None, Some(wanted), a.namespace.as_deref())?;
            let state = StateDir::new(&dir);
            let running = || {
                ClientError(format!(
                    "pod {wanted:?} is running: `podvisor stop {wanted}` stops and deletes it"
                ))
            };
            // Held until the pod is gone: a run of it started meanwhile is turned away, and
            // its new cgroups (of the same names) are not taken for the old run's.
            let _lock = match state.lock() {
                Ok(lock) => lock,
                Err(state::LockError::InUse(_)) => return Err(running()),
                Err(e) => return Err(ClientError(format!("{}: {e}", dir.display()))),
            };
            if client::answers(&state) {
                return Err(running());
            }
            // Live restore: containers a killed run left to its keepers still run.
            if client::kept(&state) {
                return Err(ClientError(format!(
                    "containers of pod {wanted:?} still run under its keepers (--live-restore): run its manifest again, then `podvisor stop {wanted}`"
                )));
            }
            // A mount below it (none of podvisor's: a pod's are made in its own namespaces) is
            // not reached through: its files are not the pod's to remove.
            let canonical = std::fs::canonicalize(&dir).unwrap_or_else(|_| dir.clone());
            if let Some(m) = crate::mountinfo::read()
                .into_iter()
                .find(|m| m.point.starts_with(&canonical) && m.point != canonical)
            {
                return Err(ClientError(format!(
                    "pod {wanted:?}: {} is mounted below its state dir {}: unmount it first",
                    m.point.display(),
                    dir.display()
                )));
            }
            // What a run killed with -9 left (the next run would remove it first): the pod's
            // cgroups, with what is still in them, as the kubelet removes an orphaned pod's.
            crate::cgroup::remove_left(&dir).map_err(|e| {
                ClientError(format!(
                    "pod {wanted:?}: its cgroups cannot be removed: {e}"
                ))
            })?;
            std::fs::remove_dir_all(&dir)
                .map_err(|e| ClientError(format!("{}: {e}", dir.display())))?;
            println!("pod \"{}\" deleted", state.name());
        }
        Ok(())
    })())
}
