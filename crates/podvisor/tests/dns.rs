//! The pod's `/etc/hosts` and `/etc/resolv.conf` through the binary, on the host's root:
//! `hostAliases` and `dnsConfig` are bound over the host's files in each container's private
//! root (and the host's files stay as they are), a pod that asks for neither keeps the
//! host's files, `ClusterFirstWithHostNet` warns as a kubelet without cluster DNS does, a
//! pod that would share the host's root itself is refused, and bad values are refused at
//! their line. Containers of images: `images::names`.

use crate::harness::*;

fn pod(annotations: &str, spec: &str) -> String {
    format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: names, namespace: ns, annotations: {{podvisor.io/root-from: host{annotations}}}}}\nspec:\n  restartPolicy: Never\n  terminationGracePeriodSeconds: 1\n{spec}")
}

const SHOW: &str = "  containers:
  - name: app
    command: [sh, -c, 'cat /etc/hosts; echo ---; cat /etc/resolv.conf']
";

/// The host's `nameserver` lines' addresses.
fn host_servers() -> Vec<String> {
    (std::fs::read_to_string("/etc/resolv.conf")
        .unwrap_or_default()
        .lines())
    .filter_map(|l| l.trim().strip_prefix("nameserver"))
    .filter_map(|rest| rest.split_whitespace().next().map(str::to_string))
    .collect()
}

#[test]
fn host_aliases_and_dns_config_are_bound_over_the_hosts_files() {
    if !is_root() {
        skip("the files are bound in a private root (as root; a user gets one only in a user namespace)");
        return;
    }
    let hosts_before = std::fs::read_to_string("/etc/hosts").unwrap();
    let resolv_before = std::fs::read_to_string("/etc/resolv.conf").unwrap();
    // Started by podvisor, and by keepers.
    for extra in [&[][..], &["--live-restore"][..]] {
        bound_over_the_hosts_files(extra, &hosts_before, &resolv_before);
    }
}

fn bound_over_the_hosts_files(extra: &[&str], hosts_before: &str, resolv_before: &str) {
    let r = PodRun::new(&pod(
        "",
        &format!(
            "  hostAliases:
  - ip: 10.1.2.3
    hostnames: [foo.remote, bar.remote]
  - ip: '2001:db8::5'
    hostnames: [six.remote]
  dnsPolicy: ClusterFirstWithHostNet
  dnsConfig:
    nameservers: [192.0.2.53]
    searches: [ns1.svc.example.test, example.test.]
    options: [{{name: ndots, value: '2'}}, {{name: single-request}}]
{SHOW}"
        ),
    ));
    let mut p = r.cmd(extra).start();
    let status = p.wait();
    p.drain();
    p.assert_no_leftovers();
    assert_eq!(status.code(), Some(0), "{extra:?}: {:?}", p.stderr);
    let said = r.log_lines("app", 1).join("\n") + "\n";
    let (hosts, resolv) = said.split_once("---\n").unwrap();
    let want = format!("# Kubernetes-managed hosts file (host network).\n{hosts_before}\n# Entries added by HostAliases.\n10.1.2.3\tfoo.remote\tbar.remote\n2001:db8::5\tsix.remote\n");
    assert_eq!(hosts, want, "{extra:?}");
    // The host's servers first, ours after; the search line is ours alone (the host here has
    // none, or it comes first).
    let mut servers = host_servers();
    servers.dedup();
    servers.push("192.0.2.53".into());
    let kept: Vec<&String> = servers.iter().take(3).collect();
    for s in &kept {
        assert!(resolv.contains(&format!("nameserver {s}\n")), "{resolv}");
    }
    assert!(
        resolv.contains(" ns1.svc.example.test example.test.\n")
            || resolv.starts_with("search ns1.svc.example.test example.test.\n"),
        "{resolv}"
    );
    assert!(
        resolv.lines().last().unwrap().contains("ndots:2"),
        "{resolv}"
    );
    assert!(resolv.contains("single-request"), "{resolv}");
    // The kubelet's warnings: no cluster DNS, and more servers than libc reads if the host has
    // three of its own.
    let warnings: Vec<String> = (r.events().into_iter())
        .filter(|e| e["object"] == "pod" && e["type"] == "Warning")
        .map(|e| e["reason"].as_str().unwrap().to_string())
        .collect();
    let mut want = vec!["MissingClusterDNS".to_string()];
    if servers.len() > 3 {
        want.push("DNSConfigForming".into());
    }
    assert_eq!(warnings, want, "{:#?}", r.events());
    // The host's files are untouched.
    assert_eq!(std::fs::read_to_string("/etc/hosts").unwrap(), hosts_before);
    assert_eq!(
        std::fs::read_to_string("/etc/resolv.conf").unwrap(),
        resolv_before
    );
}

#[test]
fn a_pod_that_asks_for_nothing_keeps_the_hosts_files_and_none_keeps_only_its_own() {
    if !is_root() {
        skip("the files are bound in a private root (root only, see above)");
        return;
    }
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap();
    let resolv = std::fs::read_to_string("/etc/resolv.conf").unwrap();
    // An empty `dnsPolicy` is the API's default, `ClusterFirst`.
    for policy in ["", "  dnsPolicy: ''\n"] {
        let plain = PodRun::new(&pod("", &format!("{policy}{SHOW}")));
        let out = plain.cmd(&[]).output();
        assert_eq!(out.code(), 0, "{policy:?}: {out:?}");
        assert_eq!(
            plain.log_lines("app", 1).join("\n") + "\n",
            format!("{hosts}---\n{resolv}"),
            "{policy:?}"
        );
    }
    let none = PodRun::new(&pod(
        "",
        &format!(
            "  dnsPolicy: None
  dnsConfig: {{nameservers: [192.0.2.1, '2001:db8::53'], searches: [.]}}
{SHOW}"
        ),
    ));
    let out = none.cmd(&[]).output();
    assert_eq!(out.code(), 0, "{out:?}");
    let said = none.log_lines("app", 1).join("\n") + "\n";
    // Only its hosts file's header tells it from the host's.
    assert_eq!(
        said,
        format!("# Kubernetes-managed hosts file (host network).\n{hosts}---\nsearch .\nnameserver 192.0.2.1\nnameserver 2001:db8::53\n")
    );
}

#[test]
fn a_pod_sharing_the_hosts_root_itself_is_refused_and_bad_values_at_their_line() {
    let r = PodRun::new(&pod(
        ", podvisor.io/host-root: writable",
        &format!("  hostAliases: [{{ip: 10.1.2.3, hostnames: [foo.remote]}}]\n{SHOW}"),
    ));
    let out = r.cmd(&[]).output();
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(
        out.stderr
            .contains("container \"app\": hostAliases needs a root of its own"),
        "{}",
        out.stderr
    );
    let bad = PodRun::new(&pod(
        "",
        &format!(
            "  hostAliases:
  - ip: 10.1.2
    hostnames: [Foo_Bar]
  dnsPolicy: None
  dnsConfig:
    nameservers: [1.1.1.1, 1.0.0.1, 8.8.8.8, 8.8.4.4]
    searches: [a..b, _srv.example, .]
    options: [{{value: '1'}}]
{SHOW}"
        ),
    ));
    let out = bad.cmd(&[]).output();
    assert_eq!(out.code(), 2, "{out:?}");
    for said in [
        "pod.yaml:8:5: spec.hostAliases[0].ip: Invalid value: \"10.1.2\": must be a valid IP address",
        "pod.yaml:9:17: spec.hostAliases[0].hostnames[0]: Invalid value: \"Foo_Bar\": a lowercase RFC 1123 subdomain",
        "pod.yaml:12:5: spec.dnsConfig.nameservers: Invalid value: [\"1.1.1.1\", \"1.0.0.1\", \"8.8.8.8\", \"8.8.4.4\"]: must not have more than 3 nameservers",
        "pod.yaml:13:16: spec.dnsConfig.searches[0]: Invalid value: \"a..b\"",
        "pod.yaml:14:15: spec.dnsConfig.options[0]: Required value",
    ] {
        assert!(out.stderr.contains(said), "{said}\n{}", out.stderr);
    }
    assert!(!out.stderr.contains("_srv.example"), "{}", out.stderr);
    let missing = PodRun::new(&pod("", &format!("  dnsPolicy: None\n{SHOW}")));
    let out = missing.cmd(&[]).output();
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(
        out.stderr.contains(
            "spec.dnsConfig: Required value: must provide `dnsConfig` when `dnsPolicy` is None"
        ),
        "{}",
        out.stderr
    );
}
