//! Image names as the kubelet and containerd read them: `busybox` is
//! `docker.io/library/busybox:latest`, a digest pins the content.

use super::ImageError;

/// The fully qualified form of an image name (`docker.io/library/busybox:latest`,
/// `registry:5000/app@sha256:…`).
///
/// The grammar is docker/distribution's (reference/regexp.go), as containerd and the kubelet
/// read it, with Go's ASCII `\w` in tags. It is parsed here by hand: the regex of the
/// `oci-spec` crate for it (a Unicode `\w{0,127}`) takes about 100 ms and 10 MB to compile,
/// once in every process that reads a name — every `podvisor run` of a pod of images. The
/// tests hold this parser to that crate's on the same names.
pub fn normalize(name: &str) -> Result<String, ImageError> {
    let bad = |why: &str| ImageError::Name {
        name: name.to_string(),
        why: why.to_string(),
    };
    if name.is_empty() {
        return Err(bad("empty"));
    }
    if name != name.trim() {
        return Err(bad("it has leading or trailing spaces"));
    }
    let r = Parsed::of(name).map_err(bad)?;
    Ok(r.whole())
}

/// A name split as the grammar reads it, with Docker Hub's defaults.
struct Parsed<'a> {
    domain: &'a str,
    /// `library/` goes before a Docker Hub name of one component.
    library: bool,
    path: &'a str,
    tag: Option<&'a str>,
    digest: Option<&'a str>,
}

const INVALID: &str = "invalid reference format";

impl<'a> Parsed<'a> {
    fn of(name: &'a str) -> Result<Parsed<'a>, &'static str> {
        let (rest, digest) = match name.split_once('@') {
            Some((rest, d)) => (rest, Some(d)),
            None => (name, None),
        };
        // A tag follows the last ':' that comes after the last '/' (before it: a port).
        let slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (named, tag) = match rest[slash..].rfind(':') {
            Some(i) => (&rest[..slash + i], Some(&rest[slash + i + 1..])),
            None => (rest, None),
        };
        if tag.is_some_and(|t| !is_tag(t)) || digest.is_some_and(|d| !is_digest(d)) {
            return Err(INVALID);
        }
        let components: Vec<&str> = named.split('/').collect();
        let (first, others) = components.split_first().ok_or(INVALID)?;
        let first_ok = is_component(first) || (!others.is_empty() && is_domain(first));
        if !first_ok || !others.iter().all(|c| is_component(c)) {
            return Err(INVALID);
        }
        // The domain: a first component that looks like one (a '.', a ':' or `localhost`).
        let (mut domain, path) = match named.split_once('/') {
            Some((d, p)) if d.contains('.') || d.contains(':') || d == "localhost" => (d, p),
            _ => ("docker.io", named),
        };
        if domain == "index.docker.io" {
            domain = "docker.io";
        }
        let library = domain == "docker.io" && !path.contains('/');
        let repository = path.len() + if library { "library/".len() } else { 0 };
        if repository > 255 {
            return Err("repository name must not be more than 255 characters");
        }
        if let Some(d) = digest {
            let expected = match d.split_once(':').map(|(a, _)| a) {
                Some("sha256") => 64,
                Some("sha384") => 96,
                Some("sha512") => 128,
                _ => return Err("unsupported digest algorithm"),
            };
            if d.len() - d.find(':').unwrap_or(0) - 1 != expected {
                return Err("invalid checksum digest length");
            }
        }
        let tag = match (tag, digest) {
            (None, None) => Some("latest"),
            (t, _) => t,
        };
        Ok(Parsed {
            domain,
            library,
            path,
            tag,
            digest,
        })
    }

    fn whole(&self) -> String {
        let mut s = format!("{}/", self.domain);
        if self.library {
            s.push_str("library/");
        }
        s.push_str(self.path);
        if let Some(t) = self.tag {
            s.push(':');
            s.push_str(t);
        }
        if let Some(d) = self.digest {
            s.push('@');
            s.push_str(d);
        }
        s
    }
}

/// `[a-z0-9]+` runs joined by one separator each: `.`, `_`, `__` or dashes.
fn is_component(c: &str) -> bool {
    let b = c.as_bytes();
    let alnum = |x: &u8| x.is_ascii_lowercase() || x.is_ascii_digit();
    if b.is_empty() || !alnum(&b[0]) || !alnum(&b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(&b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(&b[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        let dashes = sep.bytes().all(|x| x == b'-');
        if !(dashes || sep == "." || sep == "_" || sep == "__") {
            return false;
        }
    }
    true
}

/// Host labels (`[a-zA-Z0-9]`, dashes inside) joined by dots, then an optional `:PORT`.
fn is_domain(d: &str) -> bool {
    let (host, port) = match d.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (d, None),
    };
    let label = |l: &str| {
        let b = l.as_bytes();
        !b.is_empty()
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter().all(|x| x.is_ascii_alphanumeric() || *x == b'-')
    };
    let port_ok = port.is_none_or(|p| !p.is_empty() && p.bytes().all(|x| x.is_ascii_digit()));
    host.split('.').all(label) && port_ok
}

/// `[\w][\w.-]{0,127}`, `\w` being ASCII letters, digits and `_`.
fn is_tag(t: &str) -> bool {
    let word = |x: u8| x.is_ascii_alphanumeric() || x == b'_';
    let b = t.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && word(b[0])
        && b.iter().all(|x| word(*x) || *x == b'.' || *x == b'-')
}

/// `ALGORITHM:HEX`: `[A-Za-z][A-Za-z0-9]*` parts joined by `-_+.`, then 32 or more hex digits.
fn is_digest(d: &str) -> bool {
    let Some((algorithm, hex)) = d.split_once(':') else {
        return false;
    };
    let part = |p: &str| {
        let b = p.as_bytes();
        !b.is_empty() && b[0].is_ascii_alphabetic() && b.iter().all(u8::is_ascii_alphanumeric)
    };
    let parts_ok = algorithm.split(['-', '_', '+', '.']).all(part);
    parts_ok && hex.len() >= 32 && hex.bytes().all(|x| x.is_ascii_hexdigit())
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

    /// Names of every shape, good and bad: the answer is the `oci-spec` crate's (its regex is
    /// the grammar's), but for Unicode word characters in tags, which Go's `\w` (and so
    /// containerd) refuses.
    #[test]
    fn the_parser_agrees_with_the_grammars_regex() {
        let hex64 = "f".repeat(64);
        let mut names: Vec<String> = [
            "busybox",
            "busybox:1.36",
            "org/app",
            "a/b/c/d:e",
            "localhost/app",
            "localhost:5000/app:v1",
            "test.com:tag",
            "test.com:5000",
            "test.com/repo:tag",
            "test:5000/repo",
            "lowercase:Uppercase",
            "sub-dom1.foo.com/bar/baz/quux:some-long-tag",
            "b.gcr.io/test.example.com/my-app:test.example.com",
            "xn--n3h.com/myimage:xn--n3h.com",
            "foo_bar.com:8080",
            "foo/foo_bar.com:8080",
            "opensuse/leap:15.3",
            "index.docker.io/library/busybox",
            "index.docker.io/busybox",
            "docker.io/busybox",
            "REGISTRY.io/app",
            "Registry:5000/app",
            "app/Upper",
            "Upper",
            "a..b",
            "a._b",
            "a__b",
            "a___b",
            "a-b",
            "a--b",
            "a-.b",
            "-a",
            "a-",
            ".a",
            "a.",
            "_a",
            "a_",
            "a//b",
            "/a",
            "a/",
            "a:",
            ":tag",
            "a:-tag",
            "a:_tag",
            "a:.tag",
            "a:t!g",
            "a@",
            "a@sha256",
            "a@sha256:abc",
            "a@md5:ffffffffffffffffffffffffffffffff",
            "a@sha256+b64u:ffffffffffffffffffffffffffffffff",
            "host:port/a",
            "host:/a",
            "ho_st:5000/a",
            "-host.com/a",
            "host-.com/a",
            "h.c/a:1@sha256:xyz",
            "127.0.0.1:5000/a/b:c",
            "[::1]:5000/a",
            "a:b:c",
            "a/b:c:d",
            "a b",
            "a:b c",
            "x.y.z",
            "x.y.z/w",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        names.push(format!("test:5000/repo@sha256:{hex64}"));
        names.push(format!("test:5000/repo:tag@sha256:{hex64}"));
        names.push(format!("a@sha512:{}", "f".repeat(128)));
        names.push(format!("a@sha384:{}", "f".repeat(96)));
        names.push(format!("a@sha256:{}", "f".repeat(63)));
        names.push(format!("a@sha256:{}", "F".repeat(64)));
        names.push(format!("a:{}", "t".repeat(128)));
        names.push(format!("a:{}", "t".repeat(129)));
        names.push(format!("{}/a", "h".repeat(300)));
        names.push("a/".repeat(127) + "b");
        names.push("a/".repeat(128) + "b");
        for n in &names {
            let theirs: Result<oci_spec::distribution::Reference, _> = n.parse();
            let ours = Parsed::of(n).map(|p| p.whole());
            match (&theirs, &ours) {
                (Ok(t), Ok(o)) => assert_eq!(&t.whole(), o, "{n}"),
                (Err(t), Err(o)) => assert_eq!(&t.to_string(), o, "{n}"),
                _ => panic!("{n}: oci-spec {theirs:?}, ours {ours:?}"),
            }
        }
        // Go's \w is ASCII: a tag in other letters is refused (oci-spec's regex takes it).
        assert!(normalize("app:vé").is_err());
    }
}
