//! The users and groups of a root filesystem (`/etc/passwd`, `/etc/group`), read as runtimes
//! read them to resolve a container's user: a uid's name and primary group, and the groups a
//! name is a member of.

use std::path::{Path, PathBuf};

/// Where a root keeps its users: its `/etc/passwd` and `/etc/group`, each where it is found
/// (in an image, each may come from another layer), `None` where the root has none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Etc {
    pub passwd: Option<PathBuf>,
    pub group: Option<PathBuf>,
}

impl Etc {
    /// The files of a root that is one directory tree (the host's `/`).
    pub fn of_root(root: &Path) -> Etc {
        Etc {
            passwd: Some(root.join("etc/passwd")),
            group: Some(root.join("etc/group")),
        }
    }

    /// Where the users are named, for messages.
    pub fn passwd_name(&self) -> String {
        match &self.passwd {
            Some(p) => p.display().to_string(),
            None => "/etc/passwd (the root has none)".into(),
        }
    }
}

/// One line of `/etc/passwd`: name, uid, gid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

/// One line of `/etc/group`: name, gid, members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub name: String,
    pub gid: u32,
    pub members: Vec<String>,
}

/// The users of a `passwd` file (none when there is no such file); lines that are not
/// `name:x:uid:gid:...` are passed over, as libc does.
pub fn users(passwd: &Path) -> Vec<User> {
    lines(passwd)
        .filter_map(|f| {
            Some(User {
                name: f.first()?.to_string(),
                uid: f.get(2)?.parse().ok()?,
                gid: f.get(3)?.parse().ok()?,
            })
        })
        .collect()
}

/// The groups of a `group` file.
pub fn groups(group: &Path) -> Vec<Group> {
    lines(group)
        .filter_map(|f| {
            Some(Group {
                name: f.first()?.to_string(),
                gid: f.get(2)?.parse().ok()?,
                members: f
                    .get(3)
                    .map(|m| {
                        m.split(',')
                            .filter(|s| !s.is_empty())
                            .map(String::from)
                            .collect()
                    })
                    .unwrap_or_default(),
            })
        })
        .collect()
}

/// The `:`-separated fields of each line of a file, comments and blank lines left out.
fn lines(path: &Path) -> impl Iterator<Item = Vec<String>> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split(':').map(String::from).collect())
        .collect::<Vec<_>>()
        .into_iter()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TempDir;

    #[test]
    fn passwd_and_group_lines() {
        let dir = TempDir::new("users");
        std::fs::create_dir_all(dir.join("etc")).unwrap();
        std::fs::write(
            dir.join("etc/passwd"),
            "root:x:0:0:root:/root:/bin/sh\n# a comment\nbad line\nweb:x:1000:1001::/home/web:/bin/sh\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("etc/group"),
            "root:x:0:\nweb:x:1001:\naudio:x:29:web,other\nvideo:x:44:\n",
        )
        .unwrap();
        let etc = Etc::of_root(&dir);
        let u = users(etc.passwd.as_deref().unwrap());
        assert_eq!(u.len(), 2);
        assert_eq!((u[1].uid, u[1].gid), (1000, 1001));
        let g = groups(etc.group.as_deref().unwrap());
        assert_eq!(g[2].members, ["web", "other"]);
        assert!(users(&dir.join("nowhere/etc/passwd")).is_empty());
    }
}
