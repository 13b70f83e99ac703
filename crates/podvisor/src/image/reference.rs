//! Image names as the kubelet and containerd read them: `busybox` is
//! `docker.io/library/busybox:latest`, a digest pins the content.

use super::ImageError;

/// The fully qualified form of an image name (`docker.io/library/busybox:latest`,
/// `registry:5000/app@sha256:…`).
pub fn normalize(name: &str) -> Result<String, ImageError> {
    let bad = |why: String| ImageError::Name {
        name: name.to_string(),
        why,
    };
    if name.is_empty() {
        return Err(bad("empty".into()));
    }
    if name != name.trim() {
        return Err(bad("it has leading or trailing spaces".into()));
    }
    let r: oci_spec::distribution::Reference = name.parse().map_err(|e| bad(format!("{e}")))?;
    Ok(r.whole())
}

/// Whether a name pins its content by digest.
pub fn has_digest(name: &str) -> bool {
    name.contains('@')
}

/// The repository of a normalized name (without tag or digest): `docker.io/library/busybox`.
pub fn repository(normalized: &str) -> &str {
    let no_digest = normalized.split('@').next().unwrap_or(normalized);
    match no_digest.rfind(':') {
        Some(i) if !no_digest[i..].contains('/') => &no_digest[..i],
        _ => no_digest,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_normalized_as_containerd_does() {
        let n = |s| normalize(s).unwrap();
        assert_eq!(n("busybox"), "docker.io/library/busybox:latest");
        assert_eq!(n("busybox:1.36"), "docker.io/library/busybox:1.36");
        assert_eq!(n("org/app"), "docker.io/org/app:latest");
        assert_eq!(n("localhost:5000/app:v1"), "localhost:5000/app:v1");
        assert_eq!(repository("localhost:5000/app:v1"), "localhost:5000/app");
        assert_eq!(repository("localhost:5000/app"), "localhost:5000/app");
        assert!(normalize("Busy Box").is_err());
        assert!(normalize("").is_err());
    }
}
