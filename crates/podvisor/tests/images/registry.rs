//! A registry for the pull tests: Debian's docker-registry on the loopback, images pushed to
//! it by the Docker engine here, certificates for TLS.

use std::path::{Path, PathBuf};

use super::Images;
use crate::harness::*;

/// Debian's docker-registry (the CNCF distribution registry) on a loopback port of its own,
/// stopped when dropped.
pub(super) struct Registry {
    child: std::process::Child,
    pub(super) addr: String,
    _dir: TempDir,
}

impl Registry {
    pub(super) fn start() -> Result<Registry, String> {
        Registry::serve(None, "")
    }

    /// A registry on its own loopback port: storing in `data` (shared with another) when
    /// given, with `extra` settings (TLS, auth) at the end of its config.
    pub(super) fn serve(data: Option<&Path>, extra: &str) -> Result<Registry, String> {
        if !have("docker-registry", "the image pull tests") {
            return Err("docker-registry not installed (apt-get install docker-registry)".into());
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        let addr = format!("127.0.0.1:{port}");
        let dir = TempDir::new();
        let data = data.map_or_else(|| dir.file("data"), Path::to_path_buf);
        let config = dir.file("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog: {{level: error}}\nstorage: {{filesystem: {{rootdirectory: {}}}}}\nhttp:\n  addr: {addr}\n{extra}",
                data.display()
            ),
        )
        .unwrap();
        let child = std::process::Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| format!("docker-registry: {e}"))?;
        let registry = Registry {
            child,
            addr,
            _dir: dir,
        };
        wait_until("the registry listens", || {
            std::net::TcpStream::connect(&registry.addr).is_ok()
        });
        Ok(registry)
    }

    pub(super) fn data(&self) -> PathBuf {
        self._dir.file("data")
    }

    pub(super) fn port(&self) -> &str {
        self.addr.rsplit(':').next().unwrap()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Builds a FROM-scratch busybox image that prints `word`, pushes it as `reference` and
/// removes it from the engine.
pub(super) fn push(t: &Images, reference: &str, word: &str) {
    let ctx = t.dir.file(&format!("ctx-{word}"));
    std::fs::create_dir_all(ctx.join("bin")).unwrap();
    std::fs::copy("/bin/busybox", ctx.join("bin/busybox")).unwrap();
    std::fs::write(
        ctx.join("Dockerfile"),
        format!("FROM scratch\nCOPY bin /bin\nCMD [\"/bin/busybox\", \"echo\", \"{word}\"]\n"),
    )
    .unwrap();
    push_context(&ctx, reference);
}

/// Builds the image of the Docker context `ctx`, pushes it as `reference` and removes it from
/// the engine. Without the build cache: tests build at once, and one's `rmi` can remove a cached
/// parent another's build is using ("unknown parent image ID").
pub(super) fn push_context(ctx: &Path, reference: &str) {
    let built = Run::new("docker")
        .args(["build", "-q", "--no-cache", "-t", reference])
        .arg(ctx)
        .output();
    let pushed = Run::new("docker").args(["push", "-q", reference]).output();
    let removed = Run::new("docker").args(["rmi", "-f", reference]).output();
    assert_eq!(built.code(), 0, "{built:?}");
    assert_eq!(pushed.code(), 0, "{pushed:?}");
    assert_eq!(removed.code(), 0, "{removed:?}");
}

/// A CA and a certificate for `localhost` signed by it: `ca.crt`, `tls.crt`, `tls.key` in `dir`.
pub(super) fn certificates(dir: &Path) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
    let cert = params.signed_by(&key, &issuer).unwrap();
    std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
    std::fs::write(dir.join("ca.crt"), ca.pem()).unwrap();
}
