//! Without root: the users and groups a container may run as, from the subordinate ids
//! `/etc/subuid` and `/etc/subgid` give podvisor's user (subuid(5)), as rootless podman maps
//! them: in the run's user namespace uid 0 is this user and uids 1 to N are its N
//! subordinate ids (the same for groups), the maps written by `newuidmap` / `newgidmap`.

use std::os::fd::OwnedFd;
use std::path::Path;

use crate::process::sys::{self, IdMapLine};

/// Which ids a rootless container's user namespace has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserMap {
    /// Only 0 (this user and its group); `why` says why there are no others.
    One { why: String },
    /// uids 0 to `uids` and gids 0 to `gids`.
    Range { uids: u32, gids: u32 },
}

/// The first range of `file` (`name:start:count`, or `uid:start:count`) that belongs to the
/// user `name` or `id`: (start, count).
pub fn sub_ids(file: &Path, name: &str, id: u32) -> Option<(u32, u32)> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines().find_map(|line| {
        let mut f = line.trim().split(':');
        let (who, start, count) = (f.next()?, f.next()?, f.next()?);
        if who != name && who.parse() != Ok(id) {
            return None;
        }
        let (start, count) = (start.parse().ok()?, count.parse().ok()?);
        (count > 0).then_some((start, count))
    })
}

/// This user's map, with the user namespace that holds it when there are subordinate ids
/// (`/etc/subuid` and `/etc/subgid` under `etc`, users from `etc/passwd`).
pub fn map_this_user(etc: &Path) -> (UserMap, Option<OwnedFd>) {
    let (uid, gid) = (sys::getuid(), sys::getgid());
    let name = super::users::users(&etc.join("passwd"))
        .into_iter()
        .find(|u| u.uid == uid)
        .map_or_else(|| uid.to_string(), |u| u.name);
    let one = |why: String| (UserMap::One { why }, None);
    let Some((uid_start, uids)) = sub_ids(&etc.join("subuid"), &name, uid) else {
        return one(format!(
            "{} gives {name} (uid {uid}) no subordinate uids",
            etc.join("subuid").display()
        ));
    };
    let Some((gid_start, gids)) = sub_ids(&etc.join("subgid"), &name, uid) else {
        return one(format!(
            "{} gives {name} (uid {uid}) no subordinate gids",
            etc.join("subgid").display()
        ));
    };
    let lines = |own: u32, start: u32, count: u32| {
        [
            IdMapLine {
                inside: 0,
                outside: own,
                count: 1,
            },
            IdMapLine {
                inside: 1,
                outside: start,
                count,
            },
        ]
    };
    match sys::mapped_user_namespace(&lines(uid, uid_start, uids), &lines(gid, gid_start, gids)) {
        Ok(fd) => (UserMap::Range { uids, gids }, Some(fd)),
        Err(e) => one(format!(
            "{name}'s subordinate ids could not be mapped ({e}; newuidmap and newgidmap come with Debian's uidmap package)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TempDir;

    #[test]
    fn a_users_range_is_found_by_name_or_uid() {
        let dir = TempDir::new("subids");
        let file = dir.join("subuid");
        std::fs::write(
            &file,
            "alice:100000:65536\n# no\n1001:200000:1000\nbob:x:1\nzero:5:0\n",
        )
        .unwrap();
        assert_eq!(sub_ids(&file, "alice", 1000), Some((100000, 65536)));
        assert_eq!(sub_ids(&file, "carol", 1001), Some((200000, 1000)));
        assert_eq!(sub_ids(&file, "bob", 7), None);
        assert_eq!(sub_ids(&file, "zero", 8), None);
        assert_eq!(sub_ids(&dir.join("none"), "alice", 1000), None);
    }
}
