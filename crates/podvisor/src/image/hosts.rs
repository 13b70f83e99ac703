//! Where a registry's images come from, as containerd reads its `config_path`:
//! `DIR/HOST/hosts.toml` (else `DIR/_default/hosts.toml`), with `server` (the registry itself)
//! and `[host."URL"]` entries tried first, in order (mirrors), each with `capabilities`, `ca`
//! (a file or a list, relative to the hosts.toml's directory) and `skip_verify`. DIR is
//! `--registry-config`, by default `/etc/podvisor/certs.d` (root) or
//! `$XDG_CONFIG_HOME/podvisor/certs.d`.

use std::path::{Path, PathBuf};

use super::ImageError;

/// One place to pull from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `host[:port]`, as a reference names a registry.
    pub host: String,
    /// Plain HTTP.
    pub http: bool,
    /// CA certificates (PEM) to trust besides the system's.
    pub ca: Vec<PathBuf>,
    pub skip_verify: bool,
}

/// The default settings directory.
pub fn default_dir() -> PathBuf {
    crate::state::config_dir("certs.d")
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct HostsFile {
    server: Option<String>,
    #[serde(default)]
    host: toml::Table,
    #[serde(default)]
    ca: Option<toml::Value>,
    #[serde(default)]
    skip_verify: bool,
    #[serde(default)]
    capabilities: Option<Vec<String>>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct HostEntry {
    #[serde(default)]
    capabilities: Option<Vec<String>>,
    #[serde(default)]
    ca: Option<toml::Value>,
    #[serde(default)]
    skip_verify: bool,
    #[serde(default)]
    header: Option<toml::Table>,
    #[serde(default)]
    override_path: bool,
}

/// The endpoints to try for `registry` (`docker.io`, `127.0.0.1:5000`), in order: its
/// mirrors that can pull, then the registry itself. Without settings: the registry, over
/// plain HTTP only on the loopback.
pub fn endpoints(dir: &Path, registry: &str) -> Result<Vec<Endpoint>, ImageError> {
    let file = [registry, "_default"]
        .iter()
        .map(|h| dir.join(h).join("hosts.toml"))
        .find(|p| p.is_file());
    let default = Endpoint {
        host: registry.to_string(),
        http: loopback(registry),
        ca: Vec::new(),
        skip_verify: false,
    };
    let Some(file) = file else {
        return Ok(vec![default]);
    };
    let bad = |why: String| ImageError::Invalid(format!("{}: {why}", file.display()));
    let text = std::fs::read_to_string(&file).map_err(|e| ImageError::io(&file, e))?;
    let parsed: HostsFile = toml::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let base = file.parent().unwrap_or(Path::new("/"));
    let mut out = Vec::new();
    for (url, entry) in &parsed.host {
        let entry: HostEntry = entry
            .clone()
            .try_into()
            .map_err(|e: toml::de::Error| bad(format!("host {url:?}: {e}")))?;
        let _ = (&entry.header, entry.override_path);
        let pulls = entry
            .capabilities
            .as_ref()
            .is_none_or(|c| c.iter().any(|c| c == "pull"));
        if !pulls {
            continue;
        }
        out.push(endpoint(url, entry.ca.as_ref(), entry.skip_verify, base).map_err(bad)?);
    }
    let server_pulls = (parsed.capabilities.as_ref()).is_none_or(|c| c.iter().any(|c| c == "pull"));
    match parsed.server {
        Some(url) if server_pulls => {
            out.push(endpoint(&url, parsed.ca.as_ref(), parsed.skip_verify, base).map_err(bad)?)
        }
        Some(_) => {}
        None => out.push(default),
    }
    Ok(out)
}

fn endpoint(
    url: &str,
    ca: Option<&toml::Value>,
    skip_verify: bool,
    base: &Path,
) -> Result<Endpoint, String> {
    let (http, rest) = match url.split_once("://") {
        Some(("http", rest)) => (true, rest),
        Some(("https", rest)) => (false, rest),
        Some((scheme, _)) => return Err(format!("{url:?}: scheme {scheme:?}: http or https")),
        None => (false, url),
    };
    let host = rest.split('/').next().unwrap_or(rest).to_string();
    if host.is_empty() {
        return Err(format!("{url:?}: no host"));
    }
    let ca = match ca {
        None => Vec::new(),
        Some(toml::Value::String(p)) => vec![base.join(p)],
        Some(toml::Value::Array(list)) => list
            .iter()
            .map(|v| v.as_str().map(|p| base.join(p)))
            .collect::<Option<_>>()
            .ok_or_else(|| format!("{url:?}: ca: a path or a list of paths"))?,
        Some(_) => return Err(format!("{url:?}: ca: a path or a list of paths")),
    };
    Ok(Endpoint {
        host,
        http,
        ca,
        skip_verify,
    })
}

/// A registry on the loopback (`localhost`, `127.0.0.0/8`, `::1`), which Docker and containerd
/// reach over plain HTTP.
pub fn loopback(registry: &str) -> bool {
    let host = match registry.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => registry,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TempDir;

    #[test]
    fn mirrors_first_then_the_server_as_containerd_reads_them() {
        let dir = TempDir::new("hosts");
        std::fs::create_dir_all(dir.join("docker.io")).unwrap();
        std::fs::write(
            dir.join("docker.io/hosts.toml"),
            "server = \"https://registry-1.docker.io\"\n\n[host.\"http://127.0.0.1:5000\"]\n  capabilities = [\"pull\", \"resolve\"]\n\n[host.\"https://push.example\"]\n  capabilities = [\"push\"]\n\n[host.\"https://mirror.example:8443/v2\"]\n  ca = \"mirror.pem\"\n  skip_verify = true\n",
        )
        .unwrap();
        let e = endpoints(&dir, "docker.io").unwrap();
        let hosts: Vec<(&str, bool)> = e.iter().map(|e| (e.host.as_str(), e.http)).collect();
        assert_eq!(
            hosts,
            [
                ("127.0.0.1:5000", true),
                ("mirror.example:8443", false),
                ("registry-1.docker.io", false)
            ]
        );
        assert_eq!(e[1].ca, [dir.join("docker.io/mirror.pem")]);
        assert!(e[1].skip_verify);
        // No settings for that registry: itself, HTTPS unless on the loopback.
        let plain = endpoints(&dir, "quay.io").unwrap();
        assert_eq!(plain.len(), 1);
        assert!(!plain[0].http);
        assert!(endpoints(&dir, "localhost:5000").unwrap()[0].http);
        std::fs::write(dir.join("docker.io/hosts.toml"), "servr = 1\n").unwrap();
        let err = endpoints(&dir, "docker.io").unwrap_err().to_string();
        assert!(err.contains("hosts.toml") && err.contains("servr"), "{err}");
    }
}
