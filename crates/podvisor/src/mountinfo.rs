//! The kernel's mount table as this process sees it (`/proc/self/mountinfo`, proc(5)): one
//! parser for the cgroup layout and for what the containers' roots carry of the host's.
//! It only reads.

use std::path::PathBuf;

/// One line of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub id: String,
    pub parent: String,
    /// The path within its filesystem that is mounted (a bind or a cgroup namespace's root).
    pub root: PathBuf,
    pub point: PathBuf,
    pub fs_type: String,
    pub super_options: String,
    /// Its optional fields: its propagation (`shared:N`, `master:N`, `propagate_from:N`,
    /// `unbindable`), none for a private mount.
    pub optional: Vec<String>,
}

impl Mount {
    /// Whether mounts made below it reach other mounts: it is shared, or the slave of one
    /// (containerd's `ensureSharedOrSlave`).
    pub fn passes_mounts_on(&self) -> bool {
        (self.optional.iter()).any(|f| f.starts_with("shared:") || f.starts_with("master:"))
    }
}

/// The mount of `mounts` that holds `path` (absolute, its links resolved): the last one (the
/// top of a stack) at the longest mount point that `path` is under.
pub fn holding<'a>(mounts: &'a [Mount], path: &std::path::Path) -> Option<&'a Mount> {
    (mounts.iter())
        .filter(|m| path.starts_with(&m.point))
        .max_by_key(|m| m.point.as_os_str().len())
}

/// This process's mounts, in the kernel's order (a later mount at a point stacks on an earlier
/// one); none when the table cannot be read.
pub fn read() -> Vec<Mount> {
    parse(&std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default())
}

/// The table's text as mounts; a line that does not parse is skipped.
pub fn parse(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|l| {
            // Fields, then optional fields, " - ", then the filesystem's.
            let (left, right) = l.split_once(" - ")?;
            let f: Vec<&str> = left.split(' ').collect();
            let r: Vec<&str> = right.split(' ').collect();
            Some(Mount {
                id: f.first()?.to_string(),
                parent: f.get(1)?.to_string(),
                root: PathBuf::from(unescape(f.get(3)?)),
                point: PathBuf::from(unescape(f.get(4)?)),
                fs_type: r.first()?.to_string(),
                super_options: r.get(2)?.to_string(),
                optional: f.iter().skip(6).map(|s| s.to_string()).collect(),
            })
        })
        .collect()
}

/// A path with its octal escapes (`\040` is a space) decoded.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c));
        if octal {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_with_optional_fields_and_escapes() {
        let text = "\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
35 27 0:32 /ns /sys/fs/cgroup/memory rw shared:9 - cgroup cgroup rw,memory
40 27 0:40 / /mnt/with\\040space rw - tmpfs tmpfs rw
garbage
";
        let m = parse(text);
        assert_eq!(m.len(), 3);
        assert_eq!(m[1].root, PathBuf::from("/ns"));
        assert_eq!(m[1].fs_type, "cgroup");
        assert_eq!(m[1].super_options, "rw,memory");
        assert_eq!(m[2].point, PathBuf::from("/mnt/with space"));
        assert_eq!(m[2].parent, "27");
        assert_eq!(m[1].optional, ["shared:9"]);
        assert!(m[1].passes_mounts_on() && !m[0].passes_mounts_on());
    }

    #[test]
    fn the_mount_holding_a_path_is_the_top_of_the_deepest_stack() {
        let text = "\
1 0 8:1 / / rw - ext4 /dev/sda rw
2 1 0:5 / /srv rw master:3 - tmpfs t rw
3 1 0:6 / /srv rw shared:4 - tmpfs t rw
4 1 0:7 / /srvx rw - tmpfs t rw
";
        let m = parse(text);
        let at = |p: &str| holding(&m, std::path::Path::new(p)).map(|m| m.id.as_str());
        assert_eq!(at("/srv/a/b"), Some("3"));
        assert_eq!(at("/srvx"), Some("4"));
        assert_eq!(at("/srvy"), Some("1"));
    }
}
