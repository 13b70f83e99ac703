//! `podvisor image`: the image store of this user (docs/images.md), as `crictl images` and
//! `docker load` show it.

use std::path::PathBuf;

use crate::image::{self, ImageRecord, Store};

use super::{write_err, write_out};

/// `podvisor image`'s subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum ImageCommand {
    /// Pull images from their registries (plain HTTP only on the loopback; credentials from
    /// docker's config.json)
    Pull {
        #[arg(value_name = "IMAGE", required = true)]
        images: Vec<String>,
        /// Registry settings: DIR/HOST/hosts.toml, as containerd's config_path (default
        /// /etc/podvisor/certs.d, for others than root $XDG_CONFIG_HOME/podvisor/certs.d)
        #[arg(long, value_name = "DIR")]
        registry_config: Option<PathBuf>,
    },
    /// Add images from a `docker save` archive or an OCI image layout (a directory, or an
    /// archive of one; gzip-compressed archives too)
    Load {
        /// The archive or layout directory (none, or -: an archive on stdin, as `docker save
        /// IMAGE | podvisor image load`)
        #[arg(short, long, value_name = "FILE")]
        input: Option<PathBuf>,
        #[arg(value_name = "FILE", conflicts_with = "input")]
        file: Option<PathBuf>,
    },
    /// List the images, as `crictl images` does
    #[command(visible_alias = "list")]
    Ls {
        /// Only the image IDs
        #[arg(short, long)]
        quiet: bool,
    },
    /// An image's record and config, as JSON
    Inspect {
        #[arg(value_name = "IMAGE", required = true)]
        images: Vec<String>,
    },
    /// Remove every image that no running pod uses (as `crictl rmi --prune`)
    Prune,
    /// Remove images by name or ID; what no other image uses is deleted
    #[command(visible_alias = "remove")]
    Rm {
        #[arg(value_name = "IMAGE", required = true)]
        images: Vec<String>,
    },
}

/// `podvisor image`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ImageArgs {
    #[command(subcommand)]
    command: ImageCommand,
}

pub fn main(a: ImageArgs) -> i32 {
    let store = match Store::open() {
        Ok(s) => s,
        Err(e) => {
            write_err(&format!("error: {e}\n"));
            return 1;
        }
    };
    let done = match a.command {
        ImageCommand::Load { input, file } => match input.or(file) {
            Some(path) if path.as_os_str() != "-" => load(&store, &path),
            _ => load_stdin(&store),
        },
        ImageCommand::Pull {
            images,
            registry_config,
        } => {
            let options = image::pull::PullOptions {
                hosts_dir: registry_config.unwrap_or_else(image::hosts::default_dir),
                secrets: Vec::new(),
                progress: true,
            };
            pull(&store, &images, &options)
        }
        ImageCommand::Ls { quiet } => list(&store, quiet),
        ImageCommand::Inspect { images } => inspect(&store, &images),
        ImageCommand::Rm { images } => remove(&store, &images),
        ImageCommand::Prune => prune(&store),
    };
    match done {
        Ok(()) => 0,
        Err(message) => {
            write_err(&format!("error: {message}\n"));
            1
        }
    }
}

fn load(store: &Store, path: &std::path::Path) -> Result<(), String> {
    let loaded = image::load::load(store, path).map_err(|e| e.to_string())?;
    for i in loaded {
        if i.name == i.id {
            write_out(&format!("Loaded image ID: {}\n", i.id));
        } else {
            write_out(&format!("Loaded image: {}\n", i.name));
        }
    }
    Ok(())
}

fn pull(store: &Store, names: &[String], options: &image::pull::PullOptions) -> Result<(), String> {
    for name in names {
        let pulled = image::pull::pull(store, name, options).map_err(|e| e.to_string())?;
        write_out(&format!(
            "Pulled {} ({}, {} fetched in {:.1?})\n",
            pulled.image.name,
            pulled.image.image_id(),
            human_size(pulled.fetched),
            pulled.took
        ));
    }
    Ok(())
}

/// An archive on stdin, kept in the store's directory while it is loaded.
fn load_stdin(store: &Store) -> Result<(), String> {
    use std::io::IsTerminal;
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        return Err(
            "image load: name the archive or layout (FILE or -i FILE), or pipe one in".into(),
        );
    }
    let path = store
        .root()
        .join(format!("stdin-{}.tar", std::process::id()));
    let copied =
        std::fs::File::create(&path).and_then(|mut f| std::io::copy(&mut stdin.lock(), &mut f));
    let loaded = match copied {
        Ok(0) => Err("image load: stdin is empty".to_string()),
        Ok(_) => load(store, &path),
        Err(e) => Err(format!("image load: {}: {e}", path.display())),
    };
    let _ = std::fs::remove_file(&path);
    loaded
}

fn list(store: &Store, quiet: bool) -> Result<(), String> {
    let images = store.list().map_err(|e| e.to_string())?;
    if quiet {
        let mut ids: Vec<String> = images.iter().map(|i| i.id.clone()).collect();
        ids.dedup();
        write_out(&ids.iter().map(|i| format!("{i}\n")).collect::<String>());
        return Ok(());
    }
    let rows: Vec<[String; 4]> = images
        .iter()
        .map(|i| {
            let (repo, tag) = repo_and_tag(i);
            [repo, tag, short_id(i), human_size(i.size)]
        })
        .collect();
    let header = ["IMAGE", "TAG", "IMAGE ID", "SIZE"].map(String::from);
    let mut widths = [0usize; 4];
    for row in std::iter::once(&header).chain(&rows) {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(cells.join("   ").trim_end());
        out.push('\n');
    }
    write_out(&out);
    Ok(())
}

fn repo_and_tag(i: &ImageRecord) -> (String, String) {
    if i.name == i.id {
        return ("<none>".into(), "<none>".into());
    }
    let repo = image::reference::repository(&i.name).to_string();
    let rest = &i.name[repo.len()..];
    let tag = rest.strip_prefix(':').unwrap_or("<none>");
    (repo, tag.split('@').next().unwrap_or(tag).to_string())
}

fn short_id(i: &ImageRecord) -> String {
    i.id.trim_start_matches("sha256:")
        .chars()
        .take(13)
        .collect()
}

/// Sizes as crictl and docker print them: decimal units, 3–4 significant digits.
fn human_size(bytes: u64) -> String {
    let units = ["B", "kB", "MB", "GB", "TB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1000.0 && u < units.len() - 1 {
        v /= 1000.0;
        u += 1;
    }
    // Four significant digits (Go's `%.4g`), trailing zeros dropped.
    let decimals = match v {
        v if v < 10.0 => 3,
        v if v < 100.0 => 2,
        v if v < 1000.0 => 1,
        _ => 0,
    };
    let text = format!("{v:.decimals$}");
    let text = match text.contains('.') {
        true => text.trim_end_matches('0').trim_end_matches('.'),
        false => &text,
    };
    format!("{text}{}", units[u])
}

fn inspect(store: &Store, names: &[String]) -> Result<(), String> {
    let mut all = Vec::new();
    for name in names {
        let found = store
            .find(name)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| image::ImageError::NotFound(name.clone()).to_string())?;
        let config: serde_json::Value =
            serde_json::from_slice(&store.read_blob(&found.id).map_err(|e| e.to_string())?)
                .map_err(|e| format!("config {}: {e}", found.id))?;
        all.push(serde_json::json!({
            "name": found.name,
            "id": found.id,
            "imageID": found.image_id(),
            "manifest": found.manifest,
            "size": found.size,
            "layers": found.layers,
            "config": config,
        }));
    }
    let text = serde_json::to_string_pretty(&all).map_err(|e| e.to_string())?;
    write_out(&format!("{text}\n"));
    Ok(())
}

/// The images the running pods under the state base run from (normalized names).
fn in_use() -> Result<std::collections::BTreeSet<String>, String> {
    let mut used = std::collections::BTreeSet::new();
    for dir in crate::state::under(&crate::state::base()) {
        if !dir.is_running() {
            continue;
        }
        let text = crate::client::pod_text(dir.path()).map_err(|e| {
            format!(
                "{}: {}: not pruning while it cannot be asked",
                dir.path().display(),
                e.0
            )
        })?;
        let pod: crate::status::ApiPod = serde_json::from_str(&text)
            .map_err(|e| format!("{}: not a v1 Pod: {e}", dir.path().display()))?;
        let status = pod.status.unwrap_or_default();
        let statuses = (status.init_container_statuses.iter().flatten())
            .chain(status.container_statuses.iter().flatten());
        used.extend(statuses.filter_map(|c| image::normalize(&c.image).ok()));
        // Its image volumes' images too.
        let volumes = pod.spec.iter().flat_map(|s| s.volumes.iter().flatten());
        let references = volumes.filter_map(|v| v.image.as_ref()?.reference.as_deref());
        used.extend(references.filter_map(|r| image::normalize(r).ok()));
    }
    Ok(used)
}

fn prune(store: &Store) -> Result<(), String> {
    let _lock = store.lock().map_err(|e| e.to_string())?;
    let used = in_use()?;
    let images = store.list().map_err(|e| e.to_string())?;
    for i in images.iter().filter(|i| !used.contains(&i.name)) {
        store.remove(&i.name).map_err(|e| e.to_string())?;
        write_out(&format!("Deleted: {}\n", i.name));
    }
    Ok(())
}

fn remove(store: &Store, names: &[String]) -> Result<(), String> {
    let _lock = store.lock().map_err(|e| e.to_string())?;
    let mut missing = Vec::new();
    for name in names {
        match store.remove(name).map_err(|e| e.to_string())? {
            Some(i) => write_out(&format!("Deleted: {}\n", i.name)),
            None => missing.push(name.clone()),
        }
    }
    match missing.is_empty() {
        true => Ok(()),
        false => Err(format!(
            "no such image: {} (`podvisor image ls` lists them)",
            missing.join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::human_size;

    #[test]
    fn sizes_read_as_crictl_prints_them() {
        assert_eq!(human_size(999), "999B");
        assert_eq!(human_size(1_234_567), "1.235MB");
        assert_eq!(human_size(4_200_000), "4.2MB");
        assert_eq!(human_size(12_345), "12.35kB");
    }
}
