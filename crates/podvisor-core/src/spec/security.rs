//! The pod's and the containers' `securityContext`: planned for the runtime (the container's
//! fields win over the pod's, as the kubelet's `DetermineEffectiveSecurityContext`), and
//! checked with the API server's messages (pkg/apis/core/validation). What podvisor cannot
//! enforce is refused here, by field, so that nothing of a security context is dropped
//! silently.

use k8s_openapi::api::core::v1::{
    Container, PodSecurityContext, PodSpec, SeccompProfile, SecurityContext,
};

use super::plan::HostFacts;
use super::validate::dns_label;
use super::Problems;
use crate::namespaces::{hostname_and_domain, PidNamespace, PodNamespaces};
use crate::security::{CapSet, GroupsPolicy, Seccomp, SecurityPlan, VolumeOwnership};

/// The largest user or group id the API accepts.
const MAX_ID: i64 = 2_147_483_647;

/// What container `c` runs as and may do.
pub fn plan(spec: &PodSpec, c: &Container, host: &HostFacts) -> SecurityPlan {
    let pod = spec.security_context.clone().unwrap_or_default();
    let sc = c.security_context.clone().unwrap_or_default();
    let id = |v: Option<i64>| v.map(|v| v.clamp(0, MAX_ID) as u32);
    let privileged = sc.privileged.unwrap_or(false);
    let capabilities = if privileged {
        host.all_capabilities
    } else {
        capabilities(&sc, host.all_capabilities)
    };
    let seccomp = match (
        privileged,
        sc.seccomp_profile.as_ref().or(pod.seccomp_profile.as_ref()),
    ) {
        // containerd gives a privileged container no seccomp filter.
        (true, _) => Seccomp::Unconfined,
        (false, Some(p)) => seccomp(p),
        // The kubelet's --seccomp-default: RuntimeDefault where nothing is said.
        (false, None) if host.seccomp_default => Seccomp::RuntimeDefault,
        (false, None) => Seccomp::Unconfined,
    };
    let mut supplemental_groups: Vec<u32> = Vec::new();
    for g in pod
        .fs_group
        .into_iter()
        .chain(pod.supplemental_groups.iter().flatten().copied())
    {
        let g = g.clamp(0, MAX_ID) as u32;
        if !supplemental_groups.contains(&g) {
            supplemental_groups.push(g);
        }
    }
    SecurityPlan {
        run_as_user: id(sc.run_as_user.or(pod.run_as_user)),
        run_as_group: id(sc.run_as_group.or(pod.run_as_group)),
        run_as_non_root: sc.run_as_non_root.or(pod.run_as_non_root).unwrap_or(false),
        supplemental_groups,
        groups_policy: match pod.supplemental_groups_policy.as_deref() {
            Some("Strict") => GroupsPolicy::Strict,
            _ => GroupsPolicy::Merge,
        },
        privileged,
        capabilities,
        // The kubelet's AddNoNewPrivileges: only an explicit false sets it.
        no_new_privs: !privileged && sc.allow_privilege_escalation == Some(false),
        seccomp,
        read_only_root: sc.read_only_root_filesystem.unwrap_or(false),
    }
}

/// The pod's volumes' group ownership (`fsGroup`, `fsGroupChangePolicy`).
pub fn volume_ownership(spec: &PodSpec) -> VolumeOwnership {
    let pod = spec.security_context.clone().unwrap_or_default();
    VolumeOwnership {
        fs_group: pod.fs_group.map(|g| g.clamp(0, MAX_ID) as u32),
        only_on_root_mismatch: pod.fs_group_change_policy.as_deref() == Some("OnRootMismatch"),
    }
}

/// containerd's CRI `WithCapabilities` on the runtime's default set: `ALL` in `add` first
/// (every capability podvisor holds), then `ALL` in `drop` (none), then each added one, then
/// each dropped one.
fn capabilities(sc: &SecurityContext, all: CapSet) -> CapSet {
    let caps = sc.capabilities.clone().unwrap_or_default();
    let add = caps.add.unwrap_or_default();
    let drop = caps.drop.unwrap_or_default();
    let is_all = |c: &String| c.eq_ignore_ascii_case("ALL");
    let mut set = CapSet::runtime_default();
    if add.iter().any(is_all) {
        set = all;
    }
    if drop.iter().any(is_all) {
        set = CapSet::default();
    }
    for n in add.iter().filter_map(|c| CapSet::number(c)) {
        set.insert(n);
    }
    for n in drop.iter().filter_map(|c| CapSet::number(c)) {
        set.remove(n);
    }
    set
}

fn seccomp(p: &SeccompProfile) -> Seccomp {
    match p.type_.as_str() {
        "RuntimeDefault" => Seccomp::RuntimeDefault,
        "Localhost" => Seccomp::Localhost(p.localhost_profile.clone().unwrap_or_default()),
        _ => Seccomp::Unconfined,
    }
}

/// The pod's `securityContext` and each container's, with the API server's checks and
/// podvisor's refusals of what it cannot enforce.
pub(super) fn validate(spec: &PodSpec, p: &mut Problems<'_>) {
    if let Some(sc) = &spec.security_context {
        validate_pod(sc, p);
    }
    validate_namespaces(spec, p);
    if spec.host_users == Some(false) {
        p.push(
            "hostUsers",
            "Unsupported value: false: podvisor runs a pod in the host's user namespace (user namespaces for pods are not implemented); remove hostUsers",
        );
    }
    let init = spec.init_containers.iter().flatten().enumerate();
    let init = init.map(|(i, c)| (format!("initContainers[{i}]"), c));
    let main = spec.containers.iter().enumerate();
    let main = main.map(|(i, c)| (format!("containers[{i}]"), c));
    for (path, c) in init.chain(main) {
        if let Some(sc) = &c.security_context {
            validate_container(sc, &format!("{path}.securityContext"), p);
        }
    }
}

fn validate_pod(sc: &PodSecurityContext, p: &mut Problems<'_>) {
    let at = |f: &str| format!("securityContext.{f}");
    for (field, v) in [
        ("runAsUser", sc.run_as_user),
        ("runAsGroup", sc.run_as_group),
        ("fsGroup", sc.fs_group),
    ] {
        check_id(v, &at(field), p);
    }
    for (i, g) in sc.supplemental_groups.iter().flatten().enumerate() {
        check_id(Some(*g), &at(&format!("supplementalGroups[{i}]")), p);
    }
    one_of(
        sc.supplemental_groups_policy.as_deref(),
        &["Merge", "Strict"],
        &at("supplementalGroupsPolicy"),
        p,
    );
    one_of(
        sc.fs_group_change_policy.as_deref(),
        &["OnRootMismatch", "Always"],
        &at("fsGroupChangePolicy"),
        p,
    );
    if let Some(s) = &sc.seccomp_profile {
        validate_seccomp(s, &at("seccompProfile"), p);
    }
    for (i, s) in sc.sysctls.iter().flatten().enumerate() {
        if s.name.is_empty() || s.name.len() > 253 {
            p.push(
                &at(&format!("sysctls[{i}].name")),
                format!("Invalid value: {:?}: must have at most 253 characters and match regex ^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$", s.name),
            );
        }
    }
    refuse_lsm(
        sc.app_armor_profile.as_ref().map(|a| a.type_.as_str()),
        sc.se_linux_options.is_some(),
        "securityContext",
        p,
    );
}

fn validate_container(sc: &SecurityContext, at: &str, p: &mut Problems<'_>) {
    let field = |f: &str| format!("{at}.{f}");
    check_id(sc.run_as_user, &field("runAsUser"), p);
    check_id(sc.run_as_group, &field("runAsGroup"), p);
    if sc.allow_privilege_escalation == Some(false) {
        if sc.privileged == Some(true) {
            p.push(
                at,
                "Invalid value: \"privileged: true, allowPrivilegeEscalation: false\": cannot set `allowPrivilegeEscalation` to false and `privileged` to true",
            );
        }
        let adds = sc.capabilities.as_ref().and_then(|c| c.add.as_ref());
        // The API server compares the exact string, as written with the prefix.
        if adds.into_iter().flatten().any(|c| c == "CAP_SYS_ADMIN") {
            p.push(
                at,
                "Invalid value: \"capabilities.add: CAP_SYS_ADMIN, allowPrivilegeEscalation: false\": cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN",
            );
        }
    }
    if let Some(caps) = &sc.capabilities {
        for (list, names) in [("add", &caps.add), ("drop", &caps.drop)] {
            for (i, name) in names.iter().flatten().enumerate() {
                if !name.eq_ignore_ascii_case("ALL") && CapSet::number(name).is_none() {
                    p.push(
                        &field(&format!("capabilities.{list}[{i}]")),
                        format!(
                            "Unsupported value: {name:?}: not a capability (names are written without CAP_, e.g. \"NET_ADMIN\"; containerd adds the prefix, and runc refuses what it does not know)"
                        ),
                    );
                }
            }
        }
    }
    if let Some(s) = &sc.seccomp_profile {
        validate_seccomp(s, &field("seccompProfile"), p);
    }
    match sc.proc_mount.as_deref() {
        None | Some("Default") => {}
        Some("Unmasked") => p.push(
            &field("procMount"),
            "Unsupported value: \"Unmasked\": `hostUsers` must be false to use `Unmasked`, and podvisor does not run pods in user namespaces",
        ),
        Some(v) => p.push(
            &field("procMount"),
            format!("Unsupported value: {v:?}: supported values: \"Default\", \"Unmasked\""),
        ),
    }
    refuse_lsm(
        sc.app_armor_profile.as_ref().map(|a| a.type_.as_str()),
        sc.se_linux_options.is_some(),
        at,
        p,
    );
}

/// The pod's namespaces: its own UTS namespace (the host's on the host's network), IPC
/// namespace (`hostIPC`) and PID namespaces (`hostPID`, `shareProcessNamespace`), and the
/// sysctls to set there (admitted by the shell, which knows `--allowed-unsafe-sysctls`).
pub fn namespaces(spec: &PodSpec, name: &str, namespace: &str) -> PodNamespaces {
    let hostname = (spec.host_network != Some(true)).then(|| {
        let (host, domain) = hostname_and_domain(
            name,
            namespace,
            spec.hostname.as_deref(),
            spec.subdomain.as_deref(),
        );
        match (spec.set_hostname_as_fqdn, domain) {
            (Some(true), Some(domain)) => format!("{host}.{domain}"),
            _ => host,
        }
    });
    let pid = if spec.host_pid == Some(true) {
        PidNamespace::Host
    } else if spec.share_process_namespace == Some(true) {
        PidNamespace::Pod
    } else {
        PidNamespace::Container
    };
    let sysctls = spec.security_context.iter();
    let sysctls = sysctls.flat_map(|sc| sc.sysctls.iter().flatten());
    PodNamespaces {
        hostname,
        own_ipc: spec.host_ipc != Some(true),
        pid,
        sysctls: sysctls.map(|s| (s.name.clone(), s.value.clone())).collect(),
    }
}

/// `hostname`, `subdomain` and the PID namespace fields, as the API server checks them.
fn validate_namespaces(spec: &PodSpec, p: &mut Problems<'_>) {
    for (field, v) in [("hostname", &spec.hostname), ("subdomain", &spec.subdomain)] {
        if let Some(v) = v.as_deref().filter(|v| !v.is_empty()) {
            if let Some(why) = dns_label(v) {
                p.push(field, format!("Invalid value: {v:?}: {why}"));
            }
        }
    }
    if spec.share_process_namespace == Some(true) && spec.host_pid == Some(true) {
        p.push(
            "securityContext.shareProcessNamespace",
            "Invalid value: true: ShareProcessNamespace and HostPID cannot both be enabled",
        );
    }
}

/// `runAsUser`, `runAsGroup`, `fsGroup`, a supplemental group: the API's range.
fn check_id(v: Option<i64>, at: &str, p: &mut Problems<'_>) {
    if let Some(v) = v.filter(|v| !(0..=MAX_ID).contains(v)) {
        p.push(
            at,
            format!("Invalid value: {v}: must be between 0 and {MAX_ID}, inclusive"),
        );
    }
}

/// `field.NotSupported` unless `v` is one of `allowed`.
pub(crate) fn one_of(v: Option<&str>, allowed: &[&str], at: &str, p: &mut Problems<'_>) {
    if let Some(v) = v.filter(|v| !allowed.contains(v)) {
        let list: Vec<String> = allowed.iter().map(|a| format!("{a:?}")).collect();
        p.push(
            at,
            format!(
                "Unsupported value: {v:?}: supported values: {}",
                list.join(", ")
            ),
        );
    }
}

/// The API server's `validateSeccompProfileField`.
fn validate_seccomp(s: &SeccompProfile, at: &str, p: &mut Problems<'_>) {
    let localhost = |f: &str| format!("{at}.{f}");
    match s.type_.as_str() {
        "Localhost" => match s.localhost_profile.as_deref() {
            None | Some("") => p.push(
                &localhost("localhostProfile"),
                "Required value: must be set when seccomp type is Localhost",
            ),
            Some(path) if path.starts_with('/') => p.push(
                &localhost("localhostProfile"),
                format!("Invalid value: {path:?}: must be a relative path"),
            ),
            Some(path) if path.split('/').any(|part| part == "..") => p.push(
                &localhost("localhostProfile"),
                format!("Invalid value: {path:?}: must not contain '..'"),
            ),
            Some(_) => {}
        },
        "RuntimeDefault" | "Unconfined" => {
            if let Some(path) = &s.localhost_profile {
                p.push(
                    &localhost("localhostProfile"),
                    format!("Invalid value: {path:?}: can only be set when seccomp type is Localhost"),
                );
            }
        }
        other => p.push(
            &localhost("type"),
            format!("Unsupported value: {other:?}: supported values: \"Localhost\", \"RuntimeDefault\", \"Unconfined\""),
        ),
    }
}

/// AppArmor and SELinux: podvisor applies neither, so a profile or a label it is asked for is
/// refused rather than dropped (AppArmor `Unconfined` asks for nothing).
fn refuse_lsm(apparmor: Option<&str>, selinux: bool, at: &str, p: &mut Problems<'_>) {
    let field = |f: &str| {
        if at.is_empty() {
            f.to_string()
        } else {
            format!("{at}.{f}")
        }
    };
    if let Some(kind) = apparmor.filter(|k| *k != "Unconfined") {
        p.push(
            &field("appArmorProfile.type"),
            format!("Unsupported value: {kind:?}: podvisor does not apply AppArmor profiles (only \"Unconfined\" can be enforced)"),
        );
    }
    if selinux {
        p.push(
            &field("seLinuxOptions"),
            "Unsupported value: podvisor does not apply SELinux labels; remove seLinuxOptions",
        );
    }
}
