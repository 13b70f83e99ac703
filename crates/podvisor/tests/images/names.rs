//! The pod's `/etc/hosts`, `/etc/hostname` and `/etc/resolv.conf` in a container of an image:
//! always the pod's (bound over the image's), with its `hostAliases` and as `dnsPolicy: None`
//! and `dnsConfig` make its resolv.conf.

use serde_json::json;

use super::layout::{Compression, Entry, Layout};
use super::Images;
use crate::harness::*;

#[test]
fn a_container_of_an_image_gets_the_pods_hosts_hostname_and_resolv_conf() {
    let bb = require!();
    let t = Images::new();
    let layout = Layout::new(t.dir.file("layout"))
        .layer(
            Compression::Gzip,
            &[
                Entry::Dir("bin"),
                Entry::File("bin/busybox", &bb, 0o755),
                Entry::Symlink("bin/sh", "busybox"),
                Entry::Dir("etc"),
                Entry::File("etc/hosts", b"10.9.9.9\timage-only\n", 0o644),
                Entry::File("etc/resolv.conf", b"nameserver 10.9.9.9\n", 0o644),
            ],
        )
        .finish(
            "registry.test/names:v1",
            json!({"config": {"Env": ["PATH=/bin"]}}),
        );
    assert_eq!(t.load(&layout).code(), 0);
    let run = t.run(
        "names",
        "  restartPolicy: Never
  hostname: web-0
  hostAliases: [{ip: 10.1.2.3, hostnames: [foo.remote, bar.remote]}]
  dnsPolicy: None
  dnsConfig:
    nameservers: [192.0.2.53]
    searches: [ns1.svc.example.test]
    options: [{name: ndots, value: '2'}, {name: edns0}]
  containers:
  - name: app
    image: registry.test/names:v1
    command: [sh, -c, 'cat /etc/hosts; echo ---; cat /etc/hostname /etc/resolv.conf']
",
    );
    let logs = t.out(&["logs", "names", "app"]);
    assert_eq!(run.code(), 0, "{run:?}\n{logs:?}");
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap();
    assert_eq!(
        logs.stdout + "\n",
        format!("# Kubernetes-managed hosts file (host network).\n{hosts}\n# Entries added by HostAliases.\n10.1.2.3\tfoo.remote\tbar.remote\n---\nweb-0\nsearch ns1.svc.example.test\nnameserver 192.0.2.53\noptions ndots:2 edns0\n")
    );
}
