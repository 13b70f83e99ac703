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
    }
}
