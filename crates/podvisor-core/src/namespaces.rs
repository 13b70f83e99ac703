//! The namespaces a pod's containers share or have of their own, as the kubelet asks a
//! container runtime for them (CRI `NamespaceOption`) and containerd makes them: a UTS and an
//! IPC namespace per pod, a PID namespace per container (or per pod), the host's network.
//! Also which sysctls a pod may set in them (the kubelet's `sysctl` allowlist). Pure data.
//!
//! Sources: the kubelet's `GeneratePodHostNameAndDomain` and `truncatePodHostnameIfNeeded`
//! (pkg/kubelet/kubelet_pods.go), `NamespacesForPod` (pkg/kubelet/kuberuntime/util/util.go),
//! its safe sysctls (pkg/kubelet/sysctl/safe_sysctls.go) and namespaced groups
//! (pkg/kubelet/sysctl/namespace.go); containerd's CRI sandbox spec (a pod on the node's
//! network keeps the node's UTS namespace).

/// The cluster domain of a pod's FQDN (`setHostnameAsFQDN`): kubeadm's default for the
/// kubelet's `clusterDomain`.
pub const CLUSTER_DOMAIN: &str = "cluster.local";

/// The longest FQDN the kubelet sets as a hostname.
pub const MAX_FQDN: usize = 64;

/// A pod's namespaces.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub struct PodNamespaces {
    /// A UTS namespace of the pod's own with this hostname; `None`: the host's (a pod on the
    /// host's network, `hostNetwork: true`, keeps the node's name, as containerd does).
    pub hostname: Option<String>,
    /// An IPC namespace of the pod's own (`hostIPC: false`).
    pub own_ipc: bool,
    pub pid: PidNamespace,
    /// Sysctls to set in the pod's namespaces, in order.
    pub sysctls: Vec<(String, String)>,
}

impl PodNamespaces {
    /// The namespaces in words (`explain`), as root makes them.
    pub fn summary(&self) -> String {
        let uts = match &self.hostname {
            Some(h) => format!("the pod's (hostname {h})"),
            None => "the host's (hostNetwork)".to_string(),
        };
        let ipc = if self.own_ipc {
            "the pod's"
        } else {
            "the host's"
        };
        let pid = match self.pid {
            PidNamespace::Container => "one per container (its main process is PID 1)",
            PidNamespace::Pod => "the pod's (shareProcessNamespace, under podvisor's PID 1)",
            PidNamespace::Host => "the host's",
        };
        format!("uts {uts}; ipc {ipc}; pid {pid}; network the host's")
    }
}

/// Whose PID namespace a container's processes are in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub enum PidNamespace {
    /// One per container: its main process is PID 1 (the kubelet's default).
    Container,
    /// One for the pod (`shareProcessNamespace: true`): a PID 1 of the pod's own reaps.
    Pod,
    /// The host's (`hostPID: true`).
    Host,
}

/// The pod's hostname and domain: `hostname` or the pod's name (cut to 63 characters without
/// a trailing `-` or `.`), and with a `subdomain` the domain `SUB.NAMESPACE.svc.CLUSTER`.
pub fn hostname_and_domain(
    name: &str,
    namespace: &str,
    hostname: Option<&str>,
    subdomain: Option<&str>,
) -> (String, Option<String>) {
    let mut host = hostname
        .filter(|h| !h.is_empty())
        .unwrap_or(name)
        .to_string();
    if host.len() > 63 {
        host.truncate(63);
        while host.ends_with(['-', '.']) {
            host.pop();
        }
    }
    let domain = subdomain
        .filter(|s| !s.is_empty())
        .map(|s| format!("{s}.{namespace}.svc.{CLUSTER_DOMAIN}"));
    (host, domain)
}

/// The namespace a sysctl lives in (the kubelet's `NamespacedBy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SysctlNamespace {
    Ipc,
    Net,
}

/// The kubelet's safe sysctls: allowed without `--allowed-unsafe-sysctls`.
const SAFE: [&str; 12] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
];

/// A sysctl's name with dots (`net/ipv4/ip_forward` as `net.ipv4.ip_forward`).
pub fn sysctl_dots(name: &str) -> String {
    name.replace('/', ".")
}

/// The namespace of a sysctl, if it is known to be namespaced.
pub fn namespaced_by(name: &str) -> Option<SysctlNamespace> {
    if name == "kernel.sem" {
        return Some(SysctlNamespace::Ipc);
    }
    for (prefix, ns) in [
        ("kernel.shm", SysctlNamespace::Ipc),
        ("kernel.msg", SysctlNamespace::Ipc),
        ("fs.mqueue.", SysctlNamespace::Ipc),
        ("net.", SysctlNamespace::Net),
    ] {
        if name.starts_with(prefix) {
            return Some(ns);
        }
    }
    None
}

/// The kubelet's admission of one sysctl (`validateSysctl`): allowed when it is safe or
/// matches an `--allowed-unsafe-sysctls` pattern (a name, or a prefix ending in `*`), and
/// not in a namespace the pod shares with the host. podvisor's pods are always on the host's
/// network, so every `net.` sysctl is refused as on a `hostNetwork` pod. `Err`: the
/// kubelet's message (after "forbidden sysctl: ").
pub fn admit_sysctl(
    name: &str,
    allowed_unsafe: &[String],
    host_ipc: bool,
) -> Result<SysctlNamespace, String> {
    let name = sysctl_dots(name);
    let listed = SAFE.contains(&name.as_str())
        || allowed_unsafe.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => name.starts_with(&sysctl_dots(prefix)),
            None => sysctl_dots(p) == name,
        });
    let ns = namespaced_by(&name).filter(|_| listed);
    match ns {
        None => Err(format!("{name:?} not allowlisted")),
        Some(SysctlNamespace::Ipc) if host_ipc => {
            Err(format!("{name:?} not allowed with host ipc enabled"))
        }
        Some(SysctlNamespace::Net) => Err(format!("{name:?} not allowed with host net enabled")),
        Some(ns) => Ok(ns),
    }
}

/// Why an `--allowed-unsafe-sysctls` pattern is refused (the kubelet's `NewAllowlist`).
pub fn unsafe_pattern_problem(pattern: &str) -> Option<String> {
    let dots = sysctl_dots(pattern);
    let name = dots.strip_suffix('*').unwrap_or(&dots);
    namespaced_by(name)
        .is_none()
        .then(|| format!("the sysctl {pattern:?} is not known to be namespaced"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hostname_is_the_pods_name_cut_to_a_label() {
        assert_eq!(
            hostname_and_domain("web", "ns", None, None),
            ("web".into(), None)
        );
        assert_eq!(
            hostname_and_domain("web", "ns", Some("front"), Some("svc")),
            ("front".into(), Some("svc.ns.svc.cluster.local".into()))
        );
        let long = format!("{}-{}", "a".repeat(62), "b");
        assert_eq!(
            hostname_and_domain(&long, "ns", None, None).0,
            "a".repeat(62)
        );
    }

    #[test]
    fn sysctls_as_the_kubelet_admits_them() {
        let none: Vec<String> = vec![];
        assert_eq!(
            admit_sysctl("kernel.shm_rmid_forced", &none, false),
            Ok(SysctlNamespace::Ipc)
        );
        assert_eq!(
            admit_sysctl("kernel/shm_rmid_forced", &none, true),
            Err("\"kernel.shm_rmid_forced\" not allowed with host ipc enabled".into())
        );
        assert_eq!(
            admit_sysctl("net.ipv4.tcp_syncookies", &none, false),
            Err("\"net.ipv4.tcp_syncookies\" not allowed with host net enabled".into())
        );
        assert_eq!(
            admit_sysctl("kernel.msgmax", &none, false),
            Err("\"kernel.msgmax\" not allowlisted".into())
        );
        let allowed = vec!["kernel.msg*".to_string(), "kernel.sem".to_string()];
        assert_eq!(
            admit_sysctl("kernel.msgmax", &allowed, false),
            Ok(SysctlNamespace::Ipc)
        );
        assert_eq!(
            admit_sysctl("kernel.sem", &allowed, false),
            Ok(SysctlNamespace::Ipc)
        );
        assert!(admit_sysctl("kernel.pid_max", &["kernel.pid_max".into()], false).is_err());
        assert!(unsafe_pattern_problem("kernel.pid_max").is_some());
        assert!(unsafe_pattern_problem("fs.mqueue.*").is_none());
    }
}
