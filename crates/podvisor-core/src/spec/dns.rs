//! A pod's name resolution: its `/etc/hosts` (`hostAliases`) and its `/etc/resolv.conf`
//! (`dnsPolicy`, `dnsConfig`), made from the host's files as the kubelet composes them
//! (`ensureHostsFile` in pkg/kubelet/kubelet_pods.go, `GetPodDNS` in
//! pkg/kubelet/network/dns) and the runtime writes them (containerd: a `search` line, one
//! `nameserver` line each, an `options` line; the host's file as it is when all three are
//! empty).
//!
//! Every pod of podvisor is on the host's network, so its hosts file is the host's under the
//! kubelet's header for such a pod, and `ClusterFirst` resolves as for a `hostNetwork` pod:
//! with the host's servers. There is no cluster DNS server: `ClusterFirstWithHostNet` falls
//! back to the host's too, with the kubelet's `MissingClusterDNS` warning.

use k8s_openapi::api::core::v1::PodSpec;

/// The kubelet's header of a hosts file for a pod on the host's network.
pub const HOSTS_HEADER: &str = "# Kubernetes-managed hosts file (host network).\n";

/// What libc reads of resolv.conf (the API server's limits, `MaxDNSNameservers`,
/// `MaxDNSSearchPaths`, `MaxDNSSearchListChars`): at most 3 servers, 32 search domains, 2048
/// characters of search line; and a search domain longer than a DNS name (253) is left out.
pub const MAX_NAMESERVERS: usize = 3;
pub const MAX_SEARCHES: usize = 32;
pub const MAX_SEARCH_CHARS: usize = 2048;
const MAX_SEARCH_LEN: usize = 253;

/// `spec.dnsPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub enum DnsPolicy {
    /// The API server's default. On the host's network (every podvisor pod), as `Default`.
    #[default]
    ClusterFirst,
    /// The cluster's DNS server, which podvisor does not have: as `Default`, with a warning.
    ClusterFirstWithHostNet,
    /// The host's resolv.conf.
    Default,
    /// Only what `dnsConfig` says.
    None,
}

impl DnsPolicy {
    /// The manifest's value (validation refused any other); none or "" is `ClusterFirst`,
    /// as the API server defaults it.
    pub fn of(s: Option<&str>) -> DnsPolicy {
        match s {
            Some("ClusterFirstWithHostNet") => DnsPolicy::ClusterFirstWithHostNet,
            Some("Default") => DnsPolicy::Default,
            Some("None") => DnsPolicy::None,
            _ => DnsPolicy::ClusterFirst,
        }
    }
}

/// One `hostAliases` entry: a line of the hosts file.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub struct HostAlias {
    pub ip: String,
    pub hostnames: Vec<String>,
}

/// `spec.dnsConfig`: added to what the policy gives.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub struct DnsConfig {
    pub nameservers: Vec<String>,
    pub searches: Vec<String>,
    /// Name and value (`ndots`, `Some("2")`); an option without a value is its name alone.
    pub options: Vec<(String, Option<String>)>,
}

/// The pod's name resolution fields.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub struct PodDns {
    pub host_aliases: Vec<HostAlias>,
    pub policy: DnsPolicy,
    pub config: Option<DnsConfig>,
}

/// A resolv.conf made for a pod, and what the kubelet would warn about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvConf {
    pub text: String,
    pub warnings: Vec<DnsWarning>,
}

/// A Warning event of the pod, as the kubelet's DNS configurer records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsWarning {
    pub reason: &'static str,
    pub message: String,
}

/// The servers, search domains and options of a resolv.conf.
#[derive(Debug, Default)]
struct Resolver {
    servers: Vec<String>,
    searches: Vec<String>,
    options: Vec<String>,
}

impl PodDns {
    /// The manifest's fields (validated).
    pub fn of(spec: &PodSpec) -> PodDns {
        let host_aliases = (spec.host_aliases.iter().flatten())
            .map(|a| HostAlias {
                ip: a.ip.clone(),
                hostnames: a.hostnames.clone().unwrap_or_default(),
            })
            .collect();
        let config = spec.dns_config.as_ref().map(|c| DnsConfig {
            nameservers: c.nameservers.clone().unwrap_or_default(),
            searches: c.searches.clone().unwrap_or_default(),
            options: (c.options.iter().flatten())
                .map(|o| (o.name.clone().unwrap_or_default(), o.value.clone()))
                .collect(),
        });
        PodDns {
            host_aliases,
            policy: DnsPolicy::of(spec.dns_policy.as_deref()),
            config,
        }
    }

    /// Whether the pod's files say what the host's do not: a container on the host's root
    /// gets the pod's files only then (a container of an image always gets them).
    pub fn differs_from_host(&self) -> bool {
        !self.host_aliases.is_empty() || self.config.is_some() || self.policy == DnsPolicy::None
    }

    /// The pod's hosts file: the kubelet's header, the host's file, then a section of the
    /// aliases, one line per entry (its address, then its names, tab-separated).
    pub fn hosts(&self, host_file: &str) -> String {
        let mut out = String::with_capacity(HOSTS_HEADER.len() + host_file.len());
        out.push_str(HOSTS_HEADER);
        out.push_str(host_file);
        if !self.host_aliases.is_empty() {
            out.push_str("\n# Entries added by HostAliases.\n");
            for a in &self.host_aliases {
                out.push_str(&a.ip);
                for name in &a.hostnames {
                    out.push('\t');
                    out.push_str(name);
                }
                out.push('\n');
            }
        }
        out
    }

    /// The pod's resolv.conf, from the host's (`host_file`).
    pub fn resolv_conf(&self, host_file: &str) -> ResolvConf {
        let mut warnings = Vec::new();
        let mut r = match self.policy {
            DnsPolicy::None => Resolver::default(),
            DnsPolicy::ClusterFirstWithHostNet => {
                warnings.push(DnsWarning {
                    reason: "MissingClusterDNS",
                    message: "podvisor has no cluster DNS server to give a pod with the \"ClusterFirstWithHostNet\" policy: falling back to the \"Default\" policy (the host's resolv.conf)".into(),
                });
                Resolver::parse(host_file)
            }
            DnsPolicy::ClusterFirst | DnsPolicy::Default => Resolver::parse(host_file),
        };
        if let Some(c) = &self.config {
            r.add(c);
        }
        if r.servers.len() > MAX_NAMESERVERS {
            r.servers.truncate(MAX_NAMESERVERS);
            warnings.push(DnsWarning {
                reason: "DNSConfigForming",
                message: format!(
                    "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: {}",
                    r.servers.join(" ")
                ),
            });
        }
        if r.fit_searches() {
            warnings.push(DnsWarning {
                reason: "DNSConfigForming",
                message: format!(
                    "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: {}",
                    r.searches.join(" ")
                ),
            });
        }
        let text = match r.servers.is_empty() && r.searches.is_empty() && r.options.is_empty() {
            true => host_file.to_string(),
            false => r.render(),
        };
        ResolvConf { text, warnings }
    }
}

impl Resolver {
    /// A resolv.conf as the kubelet reads one: `nameserver` lines add up, the last `search`
    /// line wins (each domain without its trailing dot), the last `options` line wins;
    /// comments and other lines are left out.
    fn parse(text: &str) -> Resolver {
        let mut r = Resolver::default();
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            let mut fields = line.split_whitespace();
            match fields.next() {
                Some("nameserver") => r.servers.extend(fields.next().map(str::to_string)),
                Some("search") => {
                    r.searches = fields
                        .map(|s| s.strip_suffix('.').unwrap_or(s))
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect()
                }
                Some("options") => r.options = fields.map(str::to_string).collect(),
                _ => {}
            }
        }
        r
    }

    /// `dnsConfig` added: servers and domains not there yet after those there; an option of
    /// the same name replaced where it stands, a new one after the others.
    fn add(&mut self, c: &DnsConfig) {
        for s in &c.nameservers {
            if !self.servers.contains(s) {
                self.servers.push(s.clone());
            }
        }
        for s in &c.searches {
            if !self.searches.contains(s) {
                self.searches.push(s.clone());
            }
        }
        for (name, value) in &c.options {
            let option = match value.as_deref() {
                Some(v) if !v.is_empty() => format!("{name}:{v}"),
                _ => name.clone(),
            };
            let same = |o: &String| o.split(':').next() == Some(name.as_str());
            match self.options.iter_mut().find(|o| same(o)) {
                Some(o) => *o = option,
                None => self.options.push(option),
            }
        }
    }

    /// The search line within libc's limits (`formDNSSearchFitsLimits`): the first 32
    /// domains, none longer than a DNS name, then the last ones dropped until the line fits
    /// 2048 characters. Whether any was left out.
    fn fit_searches(&mut self) -> bool {
        let before = self.searches.len();
        self.searches.truncate(MAX_SEARCHES);
        self.searches.retain(|s| s.len() <= MAX_SEARCH_LEN);
        while self.searches.iter().map(|s| s.len() + 1).sum::<usize>() > MAX_SEARCH_CHARS + 1 {
            self.searches.pop();
        }
        self.searches.len() != before
    }

    /// The file as the runtime writes it.
    fn render(&self) -> String {
        let mut out = String::new();
        if !self.searches.is_empty() {
            out.push_str(&format!("search {}\n", self.searches.join(" ")));
        }
        for s in &self.servers {
            out.push_str(&format!("nameserver {s}\n"));
        }
        if !self.options.is_empty() {
            out.push_str(&format!("options {}\n", self.options.join(" ")));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = "# made by hand\nnameserver 10.0.0.2\nnameserver 10.0.0.3\nsearch corp.example. lab.example\noptions ndots:2 edns0\n";

    fn dns(policy: DnsPolicy, config: Option<DnsConfig>) -> PodDns {
        PodDns {
            host_aliases: Vec::new(),
            policy,
            config,
        }
    }

    #[test]
    fn the_hosts_file_is_the_hosts_under_the_header_with_the_aliases_after_it() {
        let mut d = PodDns::default();
        assert_eq!(
            d.hosts("127.0.0.1 localhost\n"),
            "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n"
        );
        d.host_aliases = vec![
            HostAlias {
                ip: "10.1.2.3".into(),
                hostnames: vec!["foo.remote".into(), "bar.remote".into()],
            },
            HostAlias {
                ip: "::1".into(),
                hostnames: vec!["six.local".into()],
            },
        ];
        assert_eq!(
            d.hosts("127.0.0.1 localhost\n"),
            "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n\n# Entries added by HostAliases.\n10.1.2.3\tfoo.remote\tbar.remote\n::1\tsix.local\n"
        );
        assert!(d.differs_from_host());
    }

    #[test]
    fn default_and_cluster_first_give_the_hosts_servers_in_the_runtimes_form() {
        for policy in [DnsPolicy::Default, DnsPolicy::ClusterFirst] {
            let r = dns(policy, None).resolv_conf(HOST);
            assert_eq!(
                r.text,
                "search corp.example lab.example\nnameserver 10.0.0.2\nnameserver 10.0.0.3\noptions ndots:2 edns0\n"
            );
            assert!(r.warnings.is_empty());
            assert!(!dns(policy, None).differs_from_host());
        }
        // Nothing to say: the host's file as it is.
        let empty = "# no servers\n";
        assert_eq!(dns(DnsPolicy::Default, None).resolv_conf(empty).text, empty);
    }

    #[test]
    fn cluster_first_with_host_net_falls_back_with_the_kubelets_warning() {
        let r = dns(DnsPolicy::ClusterFirstWithHostNet, None).resolv_conf(HOST);
        assert!(r.text.contains("nameserver 10.0.0.2\n"), "{}", r.text);
        assert_eq!(r.warnings.len(), 1);
        assert_eq!(r.warnings[0].reason, "MissingClusterDNS");
    }

    #[test]
    fn dns_config_adds_to_the_policy_and_none_keeps_only_it() {
        let config = DnsConfig {
            nameservers: vec!["10.0.0.3".into(), "1.1.1.1".into()],
            searches: vec![
                "lab.example".into(),
                "ns1.svc.cluster-domain.example".into(),
            ],
            options: vec![
                ("ndots".into(), Some("5".into())),
                ("single-request".into(), None),
            ],
        };
        let r = dns(DnsPolicy::Default, Some(config.clone())).resolv_conf(HOST);
        assert_eq!(
            r.text,
            "search corp.example lab.example ns1.svc.cluster-domain.example\nnameserver 10.0.0.2\nnameserver 10.0.0.3\nnameserver 1.1.1.1\noptions ndots:5 edns0 single-request\n"
        );
        assert!(r.warnings.is_empty());
        let r = dns(DnsPolicy::None, Some(config)).resolv_conf(HOST);
        assert_eq!(
            r.text,
            "search lab.example ns1.svc.cluster-domain.example\nnameserver 10.0.0.3\nnameserver 1.1.1.1\noptions ndots:5 single-request\n"
        );
    }

    #[test]
    fn past_libcs_limits_servers_and_domains_are_left_out_with_a_warning() {
        let config = DnsConfig {
            nameservers: vec!["10.9.9.9".into(), "10.9.9.8".into()],
            searches: (0..40).map(|i| format!("d{i}.example")).collect(),
            options: Vec::new(),
        };
        let r = dns(DnsPolicy::Default, Some(config)).resolv_conf(HOST);
        assert!(r.text.contains("nameserver 10.9.9.9\n"), "{}", r.text);
        assert!(!r.text.contains("10.9.9.8"), "{}", r.text);
        let search = r.text.lines().next().unwrap();
        assert_eq!(search.split(' ').count(), 1 + MAX_SEARCHES, "{search}");
        let reasons: Vec<_> = r.warnings.iter().map(|w| w.reason).collect();
        assert_eq!(reasons, ["DNSConfigForming", "DNSConfigForming"]);
        assert!(r.warnings[0]
            .message
            .ends_with("10.0.0.2 10.0.0.3 10.9.9.9"));
        // A line too long loses its last domains until it fits.
        let long = DnsConfig {
            searches: (0..20).map(|i| format!("{i:0>120}")).collect(),
            ..DnsConfig::default()
        };
        let r = dns(DnsPolicy::None, Some(long)).resolv_conf("");
        let line = r.text.lines().next().unwrap();
        assert!(
            line.len() - "search ".len() <= MAX_SEARCH_CHARS,
            "{}",
            line.len()
        );
        assert_eq!(line.split(' ').count() - 1, 16);
    }
}
