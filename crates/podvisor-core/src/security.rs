//! What a container's process runs as and may do: its user and groups, its capabilities,
//! `no_new_privs` and its seccomp profile, as the kubelet works them out of the pod's and the
//! container's `securityContext` and containerd hands them to runc. A leaf the spec layer
//! fills and the shell applies; pure data and arithmetic.
//!
//! Sources: the kubelet's `securitycontext.DetermineEffectiveSecurityContext` and
//! `AddNoNewPrivileges` (pkg/securitycontext), `determineEffectiveSecurityContext` and
//! `verifyRunAsNonRoot` (pkg/kubelet/kuberuntime); containerd's CRI `WithCapabilities`,
//! `WithUser`, `WithAdditionalGIDs`, `WithSupplementalGroups` (pkg/cri/opts) and its default
//! capability set (pkg/oci).

/// Linux's capabilities by number, without the `CAP_` prefix.
pub const CAPABILITIES: [&str; 41] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// The capabilities a container of a runtime gets by default (containerd's and Docker's 14).
pub const RUNTIME_DEFAULT_CAPS: [&str; 14] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "FSETID",
    "FOWNER",
    "MKNOD",
    "NET_RAW",
    "SETGID",
    "SETUID",
    "SETFCAP",
    "SETPCAP",
    "NET_BIND_SERVICE",
    "SYS_CHROOT",
    "KILL",
    "AUDIT_WRITE",
];

/// A set of capabilities, bit N for capability N.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub struct CapSet(pub u64);

impl CapSet {
    /// The capability named `name` (`CAP_` prefix and case as containerd takes them: the
    /// prefix is added, so `NET_ADMIN` and `net_admin` are one; `CAP_NET_ADMIN` is not a
    /// capability name the API knows).
    pub fn number(name: &str) -> Option<u32> {
        let upper = name.to_ascii_uppercase();
        CAPABILITIES
            .iter()
            .position(|c| *c == upper)
            .map(|n| n as u32)
    }

    /// Every capability up to `last` (the host's `cap_last_cap`).
    pub fn all(last: u32) -> CapSet {
        CapSet(if last >= 63 {
            u64::MAX
        } else {
            (1u64 << (last + 1)) - 1
        })
    }

    /// The runtime's default set.
    pub fn runtime_default() -> CapSet {
        let mut s = CapSet::default();
        for name in RUNTIME_DEFAULT_CAPS {
            s.insert(CapSet::number(name).unwrap_or(0));
        }
        s
    }

    pub fn insert(&mut self, n: u32) {
        if n < 64 {
            self.0 |= 1 << n;
        }
    }

    pub fn remove(&mut self, n: u32) {
        if n < 64 {
            self.0 &= !(1 << n);
        }
    }

    pub fn contains(self, n: u32) -> bool {
        n < 64 && self.0 & (1 << n) != 0
    }

    /// The names in the set, in number order.
    pub fn names(self) -> Vec<&'static str> {
        (0..CAPABILITIES.len() as u32)
            .filter(|&n| self.contains(n))
            .map(|n| CAPABILITIES[n as usize])
            .collect()
    }
}

/// Which groups a process gets besides those the manifest names (`supplementalGroupsPolicy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub enum GroupsPolicy {
    /// Also the groups the user is a member of in the root's `/etc/group` (the default).
    #[default]
    Merge,
    /// Only the primary group and the groups the manifest names.
    Strict,
}

/// A seccomp profile as the kubelet asks the runtime for it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub enum Seccomp {
    Unconfined,
    /// The runtime's default profile.
    RuntimeDefault,
    /// A profile file, relative to the profiles' directory.
    Localhost(String),
}

/// The user the root filesystem's configuration runs a container as, when the manifest says
/// none: an image's `User`, or root for the host's root.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub struct ImageUser {
    /// Its uid when it is numeric (or resolved).
    pub uid: Option<i64>,
    /// Its name as written, when it is not a number.
    pub name: String,
}

impl ImageUser {
    /// Root: what a container runs as without a user of its own.
    pub fn root() -> ImageUser {
        ImageUser {
            uid: Some(0),
            name: String::new(),
        }
    }
}

/// What one container's process runs as and may do.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub struct SecurityPlan {
    /// `runAsUser` (the container's, else the pod's); `None`: the image's user.
    pub run_as_user: Option<u32>,
    /// `runAsGroup` (the container's, else the pod's); `None`: the user's primary group.
    pub run_as_group: Option<u32>,
    /// `runAsNonRoot` (the container's, else the pod's).
    pub run_as_non_root: bool,
    /// `fsGroup`, then `supplementalGroups`, in the kubelet's order.
    pub supplemental_groups: Vec<u32>,
    pub groups_policy: GroupsPolicy,
    /// `privileged`: every capability, no seccomp, the host's devices, a writable /sys.
    pub privileged: bool,
    /// The bounding set (and, for root, the effective and permitted sets).
    pub capabilities: CapSet,
    /// `allowPrivilegeEscalation: false`.
    pub no_new_privs: bool,
    pub seccomp: Seccomp,
    /// `readOnlyRootFilesystem`.
    pub read_only_root: bool,
}

impl Default for SecurityPlan {
    /// A container without any securityContext, as a runtime starts it.
    fn default() -> SecurityPlan {
        SecurityPlan {
            run_as_user: None,
            run_as_group: None,
            run_as_non_root: false,
            supplemental_groups: Vec::new(),
            groups_policy: GroupsPolicy::Merge,
            privileged: false,
            capabilities: CapSet::runtime_default(),
            no_new_privs: false,
            seccomp: Seccomp::Unconfined,
            read_only_root: false,
        }
    }
}

impl SecurityPlan {
    /// What the container runs as and may do, in words (`explain`): (what, how) pairs.
    pub fn summary(&self) -> Vec<(&'static str, String)> {
        let user = match (self.run_as_user, self.run_as_group) {
            (None, None) => "the root's default user (root)".to_string(),
            (u, g) => {
                let u = u.map_or("the root's default user".into(), |u| format!("uid {u}"));
                let g = g.map_or(String::new(), |g| format!(", gid {g}"));
                format!("{u}{g}")
            }
        };
        let groups: Vec<String> = self
            .supplemental_groups
            .iter()
            .map(u32::to_string)
            .collect();
        let groups = match groups.is_empty() {
            true => String::new(),
            false => format!(", supplementary groups {}", groups.join(" ")),
        };
        let caps = if self.privileged {
            "every capability the runtime holds (privileged)".to_string()
        } else if self.capabilities == CapSet::runtime_default() {
            "the runtime's default 14".to_string()
        } else if self.capabilities == CapSet::default() {
            "none".to_string()
        } else {
            self.capabilities.names().join(" ")
        };
        let seccomp = match &self.seccomp {
            Seccomp::Unconfined => "Unconfined (RuntimeDefault with --seccomp-default)".to_string(),
            Seccomp::RuntimeDefault => "RuntimeDefault (containerd's profile)".to_string(),
            Seccomp::Localhost(f) => format!("Localhost {f}"),
        };
        let mut out = vec![
            ("runs as", format!("{user}{groups}")),
            ("capabilities", caps),
            (
                "no_new_privs",
                if self.no_new_privs { "yes" } else { "no" }.into(),
            ),
            ("seccomp", seccomp),
        ];
        if self.run_as_non_root {
            out.push(("runAsNonRoot", "checked before each start".into()));
        }
        if self.read_only_root {
            out.push(("root", "read-only".into()));
        }
        out
    }

    /// What `runAsNonRoot` checks at each start, if it is set.
    pub fn non_root(&self, image: ImageUser) -> Option<NonRoot> {
        self.run_as_non_root.then_some(NonRoot {
            run_as_user: self.run_as_user,
            image,
        })
    }
}

/// `runAsNonRoot`: what the kubelet checks before it creates the container.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub struct NonRoot {
    /// `runAsUser`, when set.
    pub run_as_user: Option<u32>,
    /// The user the root runs it as otherwise.
    pub image: ImageUser,
}

impl NonRoot {
    /// The kubelet's `verifyRunAsNonRoot`: why the container may not start (its message, with
    /// `pod` as the kubelet writes a pod: `NAME_NAMESPACE(UID)`).
    pub fn verify(&self, pod: &str, container: &str) -> Result<(), String> {
        if let Some(uid) = self.run_as_user {
            if uid == 0 {
                return Err(format!(
                    "container's runAsUser breaks non-root policy (pod: {pod:?}, container: {container})"
                ));
            }
            return Ok(());
        }
        match self.image.uid {
            None if !self.image.name.is_empty() => Err(format!(
                "container has runAsNonRoot and image has non-numeric user ({}), cannot verify user is non-root (pod: {pod:?}, container: {container})",
                self.image.name
            )),
            Some(0) => Err(format!(
                "container has runAsNonRoot and image will run as root (pod: {pod:?}, container: {container})"
            )),
            _ => Ok(()),
        }
    }
}

/// The pod-level part: volumes' group ownership.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub struct VolumeOwnership {
    /// `fsGroup`: volumes that support ownership are made group-owned by it, and setgid.
    pub fs_group: Option<u32>,
    /// `fsGroupChangePolicy: OnRootMismatch`: only when the volume's root is not already so.
    pub only_on_root_mismatch: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_names_and_the_default_set() {
        assert_eq!(CapSet::number("NET_ADMIN"), Some(12));
        assert_eq!(CapSet::number("net_bind_service"), Some(10));
        assert_eq!(CapSet::number("CAP_NET_ADMIN"), None);
        let d = CapSet::runtime_default();
        assert_eq!(d.names().len(), 14);
        assert_eq!(d.0, 0x00000000a80425fb, "containerd's default CapBnd");
        assert_eq!(CapSet::all(40).0, 0x000001ffffffffff);
    }

    #[test]
    fn run_as_non_root_as_the_kubelet_verifies_it() {
        let pod = "web_default(0b1c)";
        let mut plan = SecurityPlan {
            run_as_non_root: true,
            ..SecurityPlan::default()
        };
        let check = |plan: &SecurityPlan, image: ImageUser| {
            plan.non_root(image).expect("set").verify(pod, "app")
        };
        assert_eq!(
            check(&plan, ImageUser::root()),
            Err("container has runAsNonRoot and image will run as root (pod: \"web_default(0b1c)\", container: app)".into())
        );
        let named = ImageUser {
            uid: None,
            name: "nobody".into(),
        };
        assert!(check(&plan, named)
            .unwrap_err()
            .starts_with("container has runAsNonRoot and image has non-numeric user (nobody)"));
        plan.run_as_user = Some(0);
        assert!(check(&plan, ImageUser::root())
            .unwrap_err()
            .starts_with("container's runAsUser breaks non-root policy"));
        plan.run_as_user = Some(1000);
        assert_eq!(check(&plan, ImageUser::root()), Ok(()));
        plan.run_as_non_root = false;
        assert!(plan.non_root(ImageUser::root()).is_none());
    }
}
