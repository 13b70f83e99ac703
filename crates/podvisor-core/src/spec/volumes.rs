//! The pod's volumes as podvisor provides them: what each kind becomes (`VolumePlan`), how a
//! container mounts them (`MountPlan`), and the files of configMap, secret, downwardAPI and
//! projected volumes made from the manifest.

use super::env::{field_value, resource_field};
use super::plan::PodFacts;
use super::Manifest;

/// A `hostPath` volume's `type` (pkg/volume/hostpath): what the path must be before the pod
/// starts, or what to make there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub enum HostPathType {
    /// `""`: no check.
    Unset,
    DirectoryOrCreate,
    Directory,
    FileOrCreate,
    File,
    Socket,
    CharDevice,
    BlockDevice,
}

impl HostPathType {
    /// The API's spelling; `None` for one it does not have.
    pub fn parse(s: &str) -> Option<HostPathType> {
        Some(match s {
            "" => HostPathType::Unset,
            "DirectoryOrCreate" => HostPathType::DirectoryOrCreate,
            "Directory" => HostPathType::Directory,
            "FileOrCreate" => HostPathType::FileOrCreate,
            "File" => HostPathType::File,
            "Socket" => HostPathType::Socket,
            "CharDevice" => HostPathType::CharDevice,
            "BlockDevice" => HostPathType::BlockDevice,
            _ => return None,
        })
    }
}

/// One `volumeMounts` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub struct MountPlan {
    pub volume: String,
    /// Where the container sees it (absolute).
    pub path: String,
    pub sub_path: Option<String>,
    pub read_only: bool,
    /// `mountPropagation`.
    #[cfg_attr(feature = "spec", serde(default))]
    pub propagation: Propagation,
    /// `recursiveReadOnly`.
    #[cfg_attr(feature = "spec", serde(default))]
    pub recursive_read_only: RecursiveReadOnly,
}

/// `mountPropagation`: whether mounts made on the host below the volume's source reach the
/// container (`HostToContainer`: its mount is a slave of the host's), and the container's
/// reach the host too (`Bidirectional`, privileged containers only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub enum Propagation {
    #[default]
    None,
    HostToContainer,
    Bidirectional,
}

impl Propagation {
    /// The manifest's value (validation refused any other); none is `None`.
    pub fn of(s: Option<&str>) -> Propagation {
        match s {
            Some("HostToContainer") => Propagation::HostToContainer,
            Some("Bidirectional") => Propagation::Bidirectional,
            _ => Propagation::None,
        }
    }
}

/// `recursiveReadOnly` of a read-only mount: whether the mounts below it are read-only too
/// (`Enabled`: they are, or the container does not start; `IfPossible`: where the kernel can
/// make them so), or only the mount itself (`Disabled`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub enum RecursiveReadOnly {
    #[default]
    Disabled,
    IfPossible,
    Enabled,
}

impl RecursiveReadOnly {
    /// The manifest's value (validation refused any other); none is `Disabled`.
    pub fn of(s: Option<&str>) -> RecursiveReadOnly {
        match s {
            Some("IfPossible") => RecursiveReadOnly::IfPossible,
            Some("Enabled") => RecursiveReadOnly::Enabled,
            _ => RecursiveReadOnly::Disabled,
        }
    }

    /// Whether a mount (`read_only` or not) is read-only below it too, as the kubelet
    /// resolves the mode, `kernel_can` saying whether this kernel makes recursive read-only
    /// mounts: `IfPossible` where it can and the mount is read-only; `None`: `Enabled` where it
    /// cannot (the container does not start, and the kubelet reports `Disabled`).
    pub fn resolve(self, read_only: bool, kernel_can: bool) -> Option<bool> {
        match self {
            RecursiveReadOnly::Disabled => Some(false),
            RecursiveReadOnly::IfPossible => Some(read_only && kernel_can),
            RecursiveReadOnly::Enabled => kernel_can.then_some(true),
        }
    }
}

/// A pod volume as podvisor provides it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub enum VolumePlan {
    /// A directory of the pod's own, empty at pod start (and at a whole-pod restart).
    EmptyDir {
        name: String,
        /// `medium: Memory`: a tmpfs (its pages count against the memory of the cgroup
        /// that writes them).
        memory: bool,
        /// `sizeLimit` in bytes, as written: past it the pod is evicted.
        size_limit: Option<(u64, String)>,
    },
    /// A path of the host, checked (or made) by its `type` before the pod starts.
    HostPath {
        name: String,
        path: String,
        kind: HostPathType,
    },
    /// Files made from a ConfigMap's or Secret's keys: (relative path, content, mode).
    Files {
        name: String,
        files: Vec<(String, Vec<u8>, u32)>,
    },
    /// An image's files, read-only (`volumes[].image`): `reference` as written, `pull_policy`
    /// as written (`None`: the API server's default, by its tag).
    Image {
        name: String,
        reference: String,
        pull_policy: Option<String>,
    },
}

impl VolumePlan {
    pub fn name(&self) -> &str {
        match self {
            VolumePlan::EmptyDir { name, .. }
            | VolumePlan::HostPath { name, .. }
            | VolumePlan::Files { name, .. }
            | VolumePlan::Image { name, .. } => name,
        }
    }
}

/// What podvisor provides for a volume: emptyDir, hostPath, configMap, secret, downwardAPI,
/// projected and image; other kinds are left out (validation has said so).
pub(super) fn volume_plan(
    v: &k8s_openapi::api::core::v1::Volume,
    manifest: &Manifest,
    pod: &PodFacts<'_>,
) -> Option<VolumePlan> {
    let name = v.name.clone();
    if let Some(e) = &v.empty_dir {
        let size_limit = e.size_limit.as_ref().and_then(|q| {
            let bytes = super::resources::Quantity::parse(&q.0).ok()?.value();
            (bytes > 0).then(|| (bytes, q.0.clone()))
        });
        return Some(VolumePlan::EmptyDir {
            name,
            memory: e.medium.as_deref() == Some("Memory"),
            size_limit,
        });
    }
    if let Some(i) = &v.image {
        return Some(VolumePlan::Image {
            name,
            reference: i.reference.clone().unwrap_or_default(),
            pull_policy: i.pull_policy.clone(),
        });
    }
    if let Some(h) = &v.host_path {
        return Some(VolumePlan::HostPath {
            name,
            path: h.path.clone(),
            kind: HostPathType::parse(h.type_.as_deref().unwrap_or(""))?,
        });
    }
    // Keys as files (or the listed `items` at their paths), with the default mode 0644.
    let files = |all: Vec<(String, Vec<u8>)>,
                 items: Option<&Vec<k8s_openapi::api::core::v1::KeyToPath>>,
                 mode: Option<i32>| {
        let mode = mode.map_or(0o644, |m| m as u32 & 0o777);
        match items {
            Some(items) => items
                .iter()
                .filter_map(|it| {
                    let (_, data) = all.iter().find(|(k, _)| *k == it.key)?;
                    let m = it.mode.map_or(mode, |m| m as u32 & 0o777);
                    Some((it.path.clone(), data.clone(), m))
                })
                .collect(),
            None => all.into_iter().map(|(k, d)| (k, d, mode)).collect(),
        }
    };
    if let Some(c) = &v.config_map {
        let all = config_map_entries(manifest, &c.name);
        return Some(VolumePlan::Files {
            name,
            files: files(all, c.items.as_ref(), c.default_mode),
        });
    }
    if let Some(sec) = &v.secret {
        let all = secret_entries(manifest, sec.secret_name.as_deref().unwrap_or(""));
        return Some(VolumePlan::Files {
            name,
            files: files(all, sec.items.as_ref(), sec.default_mode),
        });
    }
    if let Some(d) = &v.downward_api {
        let mode = d.default_mode.map_or(0o644, |m| m as u32 & 0o777);
        return Some(VolumePlan::Files {
            name,
            files: downward_files(d.items.iter().flatten(), mode, manifest, pod),
        });
    }
    if let Some(p) = &v.projected {
        // Every source's files in one directory, later sources over earlier ones' paths.
        let mode = p.default_mode.map_or(0o644, |m| m as u32 & 0o777);
        let mut out: Vec<(String, Vec<u8>, u32)> = Vec::new();
        for source in p.sources.iter().flatten() {
            let mut add = |more: Vec<(String, Vec<u8>, u32)>| {
                for f in more {
                    out.retain(|o| o.0 != f.0);
                    out.push(f);
                }
            };
            if let Some(c) = &source.config_map {
                let all = config_map_entries(manifest, &c.name);
                add(files(all, c.items.as_ref(), Some(mode as i32)));
            }
            if let Some(sec) = &source.secret {
                let all = secret_entries(manifest, &sec.name);
                add(files(all, sec.items.as_ref(), Some(mode as i32)));
            }
            if let Some(d) = &source.downward_api {
                add(downward_files(
                    d.items.iter().flatten(),
                    mode,
                    manifest,
                    pod,
                ));
            }
        }
        return Some(VolumePlan::Files { name, files: out });
    }
    None
}

/// A Secret's keys, decoded.
fn secret_entries(manifest: &Manifest, name: &str) -> Vec<(String, Vec<u8>)> {
    manifest
        .secret_data(name)
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.into_bytes()))
        .collect()
}

/// A ConfigMap's keys, `data` then `binaryData`.
fn config_map_entries(manifest: &Manifest, name: &str) -> Vec<(String, Vec<u8>)> {
    let m = manifest.config_map(name);
    let mut all: Vec<(String, Vec<u8>)> = m
        .and_then(|m| m.data.as_ref())
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
        .collect();
    all.extend(
        m.and_then(|m| m.binary_data.as_ref())
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.0.clone())),
    );
    all
}

/// downwardAPI items as files: a `fieldRef` (labels and annotations as `key="value"` lines) or
/// a `resourceFieldRef` of the container it names, each with its mode or `mode`.
fn downward_files<'a>(
    items: impl Iterator<Item = &'a k8s_openapi::api::core::v1::DownwardAPIVolumeFile>,
    mode: u32,
    manifest: &Manifest,
    pod: &PodFacts<'_>,
) -> Vec<(String, Vec<u8>, u32)> {
    let spec = &manifest.workload.spec;
    items
        .filter_map(|it| {
            let value = if let Some(f) = &it.field_ref {
                field_value(&f.field_path, pod)?
            } else {
                let r = it.resource_field_ref.as_ref()?;
                let c = spec
                    .containers
                    .iter()
                    .chain(spec.init_containers.iter().flatten())
                    .find(|c| Some(c.name.as_str()) == r.container_name.as_deref())?;
                resource_field(r, c, manifest, pod)
            };
            let m = it.mode.map_or(mode, |m| m as u32 & 0o777);
            Some((it.path.clone(), value.into_bytes(), m))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::RecursiveReadOnly::{self, Disabled, Enabled, IfPossible};

    #[test]
    fn recursive_read_only_resolves_as_the_kubelet_resolves_it() {
        let table: [(RecursiveReadOnly, bool, bool, Option<bool>); 8] = [
            (Disabled, true, true, Some(false)),
            (Disabled, true, false, Some(false)),
            (IfPossible, true, true, Some(true)),
            (IfPossible, true, false, Some(false)),
            (IfPossible, false, true, Some(false)),
            (Enabled, true, true, Some(true)),
            (Enabled, true, false, None),
            (Enabled, false, false, None),
        ];
        for (mode, read_only, kernel_can, want) in table {
            assert_eq!(
                mode.resolve(read_only, kernel_can),
                want,
                "{mode:?} {read_only} {kernel_can}"
            );
        }
        assert_eq!(RecursiveReadOnly::of(Some("IfPossible")), IfPossible);
        assert_eq!(RecursiveReadOnly::of(None), Disabled);
    }
}
