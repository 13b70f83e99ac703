//! What each container runs as and may do, worked out when the run begins from its
//! `SecurityPlan` (the core's) and the root it runs on: its uid, gid and groups as containerd
//! resolves them in the root's `/etc/passwd` and `/etc/group`, its capabilities, and its
//! seccomp filters compiled (`seccomp`). The child applies them (`process::sys::Credentials`).
//! What cannot be enforced here refuses the run, by container and field.
//!
//! Groups, as containerd's CRI: the primary gid (`runAsGroup`, else the user's in
//! `/etc/passwd`, else 0), with `supplementalGroupsPolicy: Merge` the groups of
//! `/etc/group` that list the user's name, then `fsGroup` and `supplementalGroups`.

pub mod seccomp;
pub mod subids;
pub mod users;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use podvisor_core::seccomp::{Profile, Target};
use podvisor_core::security::{CapSet, GroupsPolicy, ImageUser, Seccomp, SecurityPlan};

use crate::cgroup::Unenforceable;
use crate::process::sys::{self, Credentials};

/// What the host is, for the credentials podvisor can give.
#[derive(Debug, Clone)]
pub struct Host {
    /// podvisor runs as root.
    pub root: bool,
    /// Without root, containers are made in user namespaces (uid 0 inside is this user).
    pub user_namespaces: bool,
    /// ... with these ids (the subordinate ids of `/etc/subuid` and `/etc/subgid`).
    pub user_map: subids::UserMap,
    /// `/proc/sys/kernel/cap_last_cap`.
    pub cap_last: u32,
    /// The kernel's (major, minor).
    pub kernel: (u32, u32),
    /// Where `Localhost` seccomp profiles are (`--seccomp-profile-root`).
    pub seccomp_profiles: PathBuf,
}

impl Host {
    /// This host, with `Localhost` profiles under `seccomp_profiles`.
    pub fn this(user_namespaces: Option<subids::UserMap>, seccomp_profiles: PathBuf) -> Host {
        Host {
            root: sys::getuid() == 0,
            user_namespaces: user_namespaces.is_some(),
            user_map: user_namespaces.unwrap_or(subids::UserMap::One { why: String::new() }),
            cap_last: cap_last(),
            kernel: kernel_version(),
            seccomp_profiles,
        }
    }
}

/// The highest capability this kernel knows.
pub fn cap_last() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(40)
}

/// The capabilities this process holds (`CapEff` in `/proc/self/status`).
pub fn held_capabilities() -> CapSet {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    CapSet(eff)
}

/// The kernel's (major, minor), from `/proc/sys/kernel/osrelease`.
fn kernel_version() -> (u32, u32) {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// Where `Localhost` seccomp profiles are by default: `/etc/podvisor/seccomp` for root,
/// `$XDG_CONFIG_HOME/podvisor/seccomp` (`~/.config/podvisor/seccomp`) for others.
pub fn default_seccomp_profiles() -> PathBuf {
    crate::state::config_dir("seccomp")
}

/// Container `name`'s credentials on a root whose users are named in `etc`, for a root that
/// runs it as `image` when the plan names no user.
pub fn credentials(
    name: &str,
    plan: &SecurityPlan,
    etc: &users::Etc,
    image: &ImageUser,
    host: &Host,
    compiled: &mut Compiled,
) -> Result<Credentials, Unenforceable> {
    let refuse = |field: &'static str, needs: &'static str, why: String| Unenforceable {
        container: name.to_string(),
        field,
        needs,
        why,
    };
    let users = etc.passwd.as_deref().map(users::users).unwrap_or_default();
    if !host.root && !host.user_namespaces {
        return as_this_user(name, plan, host, compiled);
    }
    let uid = match (plan.run_as_user, image.uid) {
        (Some(uid), _) => uid,
        (None, Some(uid)) => uid.clamp(0, i64::from(u32::MAX)) as u32,
        (None, None) => match users.iter().find(|u| u.name == image.name) {
            Some(u) => u.uid,
            None => {
                let why = format!("no user {:?} in {}", image.name, etc.passwd_name());
                return Err(refuse("user", "the image's user", why));
            }
        },
    };
    let user = users.iter().find(|u| u.uid == uid);
    let gid = plan.run_as_group.or(user.map(|u| u.gid)).unwrap_or(0);
    let mut groups = vec![gid];
    if plan.groups_policy == GroupsPolicy::Merge {
        if let Some(u) = user {
            let listed = etc.group.as_deref().map(users::groups);
            let member = listed
                .into_iter()
                .flatten()
                .filter(|g| g.name != u.name && g.members.contains(&u.name));
            groups.extend(member.map(|g| g.gid));
        }
    }
    groups.extend(&plan.supplemental_groups);
    let mut seen = Vec::new();
    groups.retain(|g| {
        let new = !seen.contains(g);
        seen.push(*g);
        new
    });
    let cap_last = host.cap_last;
    let capabilities = plan.capabilities.0 & CapSet::all(cap_last).0;
    if !host.root {
        in_user_map(&host.user_map, uid, gid, &groups).map_err(|(field, why)| Unenforceable {
            container: name.to_string(),
            field,
            needs: "another user",
            why,
        })?;
    }
    let seccomp = compiled.filters(name, plan, host, CapSet(capabilities))?;
    Ok(Credentials {
        uid,
        gid,
        groups,
        capabilities,
        cap_last,
        change_identity: true,
        set_groups: host.root || matches!(host.user_map, subids::UserMap::Range { .. }),
        no_new_privs: plan.no_new_privs,
        seccomp,
    })
}

/// Without root, whether the user namespace has `uid`, `gid` and `groups`: `Err` names the
/// field and says why not.
fn in_user_map(
    map: &subids::UserMap,
    uid: u32,
    gid: u32,
    groups: &[u32],
) -> Result<(), (&'static str, String)> {
    let my_uid = sys::getuid();
    match map {
        subids::UserMap::One { why } => {
            let why = format!(
                "podvisor runs as uid {my_uid} without root: a container's user namespace maps only its uid and gid, as 0 ({why})"
            );
            if uid != 0 || gid != 0 {
                return Err(("securityContext.runAsUser", why));
            }
            if groups.iter().any(|g| *g != gid) {
                return Err(("securityContext.supplementalGroups", why));
            }
        }
        subids::UserMap::Range { uids, gids } => {
            if uid > *uids {
                return Err((
                    "securityContext.runAsUser",
                    format!("podvisor runs as uid {my_uid} without root: its user namespace maps uids 0 to {uids} (0 is uid {my_uid}, the others its subordinate uids in /etc/subuid), not {uid}"),
                ));
            }
            if let Some(g) = std::iter::once(&gid).chain(groups).find(|g| **g > *gids) {
                return Err((
                    "securityContext.runAsGroup",
                    format!("podvisor runs as uid {my_uid} without root: its user namespace maps gids 0 to {gids} (0 is its group, the others its subordinate gids in /etc/subgid), not {g}"),
                ));
            }
        }
    }
    Ok(())
}

/// Without root or user namespaces: the container keeps podvisor's user, groups and (absent)
/// capabilities (`groups` says which, for the status; they are not set); a `runAsUser` or
/// `runAsGroup` of another is refused. `no_new_privs` and seccomp still apply.
fn as_this_user(
    name: &str,
    plan: &SecurityPlan,
    host: &Host,
    compiled: &mut Compiled,
) -> Result<Credentials, Unenforceable> {
    let (uid, gid) = (sys::getuid(), sys::getgid());
    let other = plan.run_as_user.is_some_and(|u| u != uid)
        || plan.run_as_group.is_some_and(|g| g != gid)
        || !plan.supplemental_groups.is_empty();
    if other {
        return Err(Unenforceable {
            container: name.to_string(),
            field: "securityContext.runAsUser",
            needs: "another user",
            why: format!("podvisor runs as uid {uid} without root or user namespaces: containers run as this user, with its groups"),
        });
    }
    // Its groups as CRI reports them: the primary first, then the supplementary ones.
    let mut groups = vec![gid];
    groups.extend(sys::getgroups().into_iter().filter(|g| *g != gid));
    Ok(Credentials {
        uid,
        gid,
        groups,
        capabilities: 0,
        cap_last: host.cap_last,
        change_identity: false,
        set_groups: false,
        no_new_privs: plan.no_new_privs,
        seccomp: compiled.filters(name, plan, host, CapSet(0))?,
    })
}

/// The seccomp filters compiled for a run, one copy per profile and bounding set, shared by
/// the containers that have them (a profile is some 12 KiB of BPF).
#[derive(Debug, Default)]
pub struct Compiled(HashMap<(Seccomp, u64), Arc<Vec<Vec<sys::BpfInstruction>>>>);

impl Compiled {
    /// The filters of a container whose bounding set is `caps`.
    fn filters(
        &mut self,
        name: &str,
        plan: &SecurityPlan,
        host: &Host,
        caps: CapSet,
    ) -> Result<Arc<Vec<Vec<sys::BpfInstruction>>>, Unenforceable> {
        let key = (plan.seccomp.clone(), caps.0);
        if let Some(f) = self.0.get(&key) {
            return Ok(f.clone());
        }
        let f = Arc::new(filters(name, plan, host, caps)?);
        self.0.insert(key, f.clone());
        Ok(f)
    }
}

/// The seccomp filters of a container whose bounding set is `caps`.
fn filters(
    name: &str,
    plan: &SecurityPlan,
    host: &Host,
    caps: CapSet,
) -> Result<Vec<Vec<sys::BpfInstruction>>, Unenforceable> {
    let refuse = |why: String| Unenforceable {
        container: name.to_string(),
        field: "securityContext.seccompProfile",
        needs: "its seccomp profile",
        why,
    };
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let profile = match &plan.seccomp {
        Seccomp::Unconfined => return Ok(Vec::new()),
        Seccomp::RuntimeDefault => podvisor_core::seccomp::runtime_default(arch),
        Seccomp::Localhost(file) => {
            let path = host.seccomp_profiles.join(file);
            let text = std::fs::read_to_string(&path)
                .map_err(|e| refuse(format!("{}: {e}", path.display())))?;
            serde_json::from_str::<Profile>(&text)
                .map_err(|e| refuse(format!("{}: not a seccomp profile: {e}", path.display())))?
        }
    };
    let caps: Vec<String> = caps.names().iter().map(|c| format!("CAP_{c}")).collect();
    let target = Target {
        caps: &caps,
        arch,
        kernel: host.kernel,
    };
    seccomp::compile(&profile.resolve(&target)).map_err(|e| refuse(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TempDir;
    use std::path::Path;

    fn host() -> Host {
        Host {
            root: true,
            user_namespaces: false,
            user_map: subids::UserMap::One { why: String::new() },
            cap_last: 40,
            kernel: (6, 1),
            seccomp_profiles: PathBuf::from("/nonexistent"),
        }
    }

    /// Container `app`'s credentials under `plan`, its root at `root`, as root on `host()`.
    fn credentials_in(plan: &SecurityPlan, root: &Path) -> Result<Credentials, Unenforceable> {
        credentials(
            "app",
            plan,
            &users::Etc::of_root(root),
            &ImageUser::root(),
            &host(),
            &mut Compiled::default(),
        )
    }

    #[test]
    fn users_and_groups_as_containerd_resolves_them() {
        let dir = TempDir::new("creds");
        std::fs::create_dir_all(dir.join("etc")).unwrap();
        std::fs::write(
            dir.join("etc/passwd"),
            "root:x:0:0::/:/bin/sh\nweb:x:1000:1001::/:/bin/sh\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("etc/group"),
            "web:x:1001:\naudio:x:29:web\nvideo:x:44:\n",
        )
        .unwrap();
        let mut plan = SecurityPlan {
            run_as_user: Some(1000),
            supplemental_groups: vec![2000, 29],
            ..SecurityPlan::default()
        };
        let c = credentials_in(&plan, &dir).unwrap();
        assert_eq!(
            (c.uid, c.gid, c.groups.clone()),
            (1000, 1001, vec![1001, 29, 2000])
        );
        assert_eq!(c.capabilities, CapSet::runtime_default().0);
        plan.groups_policy = GroupsPolicy::Strict;
        plan.run_as_group = Some(3000);
        let c = credentials_in(&plan, &dir).unwrap();
        assert_eq!((c.gid, c.groups), (3000, vec![3000, 2000, 29]));
        // A uid the root does not know: gid 0.
        plan.run_as_user = Some(4242);
        plan.run_as_group = None;
        let c = credentials_in(&plan, &dir).unwrap();
        assert_eq!((c.uid, c.gid), (4242, 0));
    }

    #[test]
    fn a_localhost_profile_that_is_missing_refuses_the_run() {
        let plan = SecurityPlan {
            seccomp: Seccomp::Localhost("profiles/audit.json".into()),
            ..SecurityPlan::default()
        };
        let e = credentials_in(&plan, Path::new("/")).unwrap_err();
        assert!(
            e.to_string().contains("/nonexistent/profiles/audit.json"),
            "{e}"
        );
    }
}
