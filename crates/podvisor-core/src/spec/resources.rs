//! Container resources as a runtime applies them: Kubernetes quantities parsed exactly as the
//! API server's grammar allows, requests defaulted from limits (`SetDefaults_Pod`), the pod's
//! effective requests and limits with init containers and sidecars (KEP-753), and the kubelet's
//! cgroup arithmetic (pkg/kubelet/cm/helpers_linux.go). Pure: the shell writes the numbers.

use k8s_openapi::api::core::v1::ResourceRequirements;

use crate::lifecycle::Kind;

/// What one container asks for, requests already defaulted from limits. CPU in millicores,
/// memory in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub struct Resources {
    pub cpu_request: Option<u64>,
    pub cpu_limit: Option<u64>,
    pub memory_request: Option<u64>,
    pub memory_limit: Option<u64>,
}

impl Resources {
    /// From a container's `resources` (valid: validation refused what does not parse).
    pub fn of(r: Option<&ResourceRequirements>) -> Resources {
        let mut out = Resources::as_written(r);
        // A limit without a request makes the request equal to it (SetDefaults_Pod).
        out.cpu_request = out.cpu_request.or(out.cpu_limit);
        out.memory_request = out.memory_request.or(out.memory_limit);
        out
    }

    /// `resources` as written, no request defaulted.
    fn as_written(r: Option<&ResourceRequirements>) -> Resources {
        let get = |map: Option<&std::collections::BTreeMap<String, _>>, name: &str, milli| {
            map.and_then(|m| m.get(name))
                .and_then(
                    |q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity| {
                        Quantity::parse(&q.0).ok()
                    },
                )
                .map(|q| if milli { q.milli() } else { q.value() })
        };
        let limits = r.and_then(|r| r.limits.as_ref());
        let requests = r.and_then(|r| r.requests.as_ref());
        // A zero limit is no limit (no quota; runc's 0 is unset).
        let cpu_limit = get(limits, "cpu", true).filter(|v| *v > 0);
        let memory_limit = get(limits, "memory", false).filter(|v| *v > 0);
        Resources {
            cpu_request: get(requests, "cpu", true),
            cpu_limit,
            memory_request: get(requests, "memory", false),
            memory_limit,
        }
    }
}

/// The pod's requests and limits when its spec sets `resources` (KEP-2837, pod-level
/// resources; `None` when it sets no cpu or memory): what it sets wins; a limit it does not
/// set comes from the containers (when every one has one); a request it does not set comes
/// from the containers when every one has one, else it is the pod's limit.
pub fn pod_level(
    spec: Option<&ResourceRequirements>,
    containers: &[(Kind, Resources)],
) -> Option<Resources> {
    let set = Resources::as_written(spec);
    if set == Resources::default() {
        return None;
    }
    let derived = pod_effective(containers);
    let all = |pick: &dyn Fn(&Resources) -> Option<u64>| {
        containers.iter().all(|(_, r)| pick(r).is_some())
    };
    let cpu_limit = set.cpu_limit.or(derived.cpu_limit);
    let memory_limit = set.memory_limit.or(derived.memory_limit);
    let from_containers = |pick: &dyn Fn(&Resources) -> Option<u64>, derived: Option<u64>| {
        all(pick).then_some(derived).flatten()
    };
    Some(Resources {
        cpu_request: set
            .cpu_request
            .or(from_containers(&|r| r.cpu_request, derived.cpu_request))
            .or(cpu_limit),
        cpu_limit,
        memory_request: set
            .memory_request
            .or(from_containers(
                &|r| r.memory_request,
                derived.memory_request,
            ))
            .or(memory_limit),
        memory_limit,
    })
}

/// What a pod spec allocates: each container's resources in the kubelet's order (init
/// containers and sidecars, then the regular ones), with the limits pod-level resources imply,
/// and the pod's (pod-level when the spec sets them, else the containers' effective sum).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    pub containers: Vec<(Kind, Resources)>,
    pub pod: Resources,
    /// The spec sets pod-level `resources` (KEP-2837).
    pub pod_level: bool,
}

/// The allocation of `spec` (valid: validation refused what does not parse).
pub fn allocate(spec: &k8s_openapi::api::core::v1::PodSpec) -> Allocation {
    let mut containers: Vec<(Kind, Resources)> = super::containers_in_order(spec, "")
        .map(|(_, kind, c)| (kind, Resources::of(c.resources.as_ref())))
        .collect();
    let level = pod_level(spec.resources.as_ref(), &containers);
    let pod = level.unwrap_or_else(|| pod_effective(&containers));
    if level.is_some() {
        for (_, r) in &mut containers {
            implied_limits(r, &pod);
        }
    }
    Allocation {
        containers,
        pod,
        pod_level: level.is_some(),
    }
}

/// With pod-level limits, a container that sets none is limited to the pod's in its own
/// cgroup, as the kubelet does for runtimes that read it (KEP-2837).
pub fn implied_limits(container: &mut Resources, pod: &Resources) {
    container.cpu_limit = container.cpu_limit.or(pod.cpu_limit);
    container.memory_limit = container.memory_limit.or(pod.memory_limit);
}

/// The pod's effective requests and limits (kubelet `PodRequests`/`PodLimits` with sidecars):
/// walking the init containers in order, a regular init container needs its own amount plus
/// the sidecars started before it; the pod needs the largest such need or the sum of its
/// regular containers and all sidecars, whichever is larger. A limit exists only when every
/// container has one (otherwise the pod's cgroup is not limited, as the kubelet's
/// `ResourceConfigForPod` leaves it).
pub fn pod_effective(containers: &[(Kind, Resources)]) -> Resources {
    let total = |pick: &dyn Fn(&Resources) -> Option<u64>, all_needed: bool| -> Option<u64> {
        if all_needed && containers.iter().any(|(_, r)| pick(r).is_none()) {
            return None;
        }
        let mut sidecars = 0u64;
        let mut init_peak = 0u64;
        let mut regular = 0u64;
        let mut any = false;
        for (kind, r) in containers {
            let v = pick(r);
            any |= v.is_some();
            let v = v.unwrap_or(0);
            match kind {
                Kind::Init => init_peak = init_peak.max(v.saturating_add(sidecars)),
                Kind::Sidecar => {
                    sidecars = sidecars.saturating_add(v);
                    init_peak = init_peak.max(sidecars);
                }
                Kind::Main => regular = regular.saturating_add(v),
            }
        }
        any.then(|| init_peak.max(regular.saturating_add(sidecars)))
    };
    Resources {
        cpu_request: total(&|r| r.cpu_request, false),
        cpu_limit: total(&|r| r.cpu_limit, true),
        memory_request: total(&|r| r.memory_request, false),
        memory_limit: total(&|r| r.memory_limit, true),
    }
}

/// The CFS period the kubelet uses: 100 ms.
pub const CPU_PERIOD_US: u64 = 100_000;
/// The smallest quota the kernel takes (`MinQuotaPeriod`, 1 ms).
const MIN_QUOTA_US: u64 = 1_000;
/// cgroup v1 `cpu.shares` bounds (`MinShares`, `MaxShares`).
const MIN_SHARES: u64 = 2;
const MAX_SHARES: u64 = 262_144;

/// `cpu.shares` for a CPU request (`MilliCPUToShares`): 1024 per core, never below 2.
pub fn cpu_shares(request_milli: Option<u64>) -> u64 {
    let shares = request_milli.unwrap_or(0).saturating_mul(1024) / 1000;
    shares.clamp(MIN_SHARES, MAX_SHARES)
}

/// cgroup v2 `cpu.weight` from shares (`CpuSharesToCpuWeight`).
pub fn cpu_weight(shares: u64) -> u64 {
    1 + ((shares.saturating_sub(2)) * 9999) / 262_142
}

/// The CFS quota in µs per `CPU_PERIOD_US` for a CPU limit (`MilliCPUToQuota`); `None`: no
/// quota. A quota below 1 ms is raised to 1 ms.
pub fn cpu_quota(limit_milli: Option<u64>) -> Option<u64> {
    let limit = limit_milli.filter(|l| *l > 0)?;
    Some((limit.saturating_mul(CPU_PERIOD_US) / 1000).max(MIN_QUOTA_US))
}

/// A Kubernetes quantity, exactly: an integer number of thousandths (the API keeps milli
/// precision for CPU; memory is rounded up to whole bytes as `Quantity.Value()` does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Quantity {
    thousandths: u128,
}

/// Why a quantity string is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The API server's message for a string outside the grammar.
    #[error("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")]
    Syntax,
    #[error("must be greater than or equal to 0")]
    Negative,
    #[error("quantity is too large")]
    TooLarge,
}

impl Quantity {
    /// Parses `500m`, `1.5`, `128Mi`, `1G`, `1e3`, `+2`: a sign, a decimal number, and one
    /// suffix (binary `Ki`…`Ei`, decimal `n u m k M G T P E`, or an exponent `e3`/`E-2`).
    pub fn parse(s: &str) -> Result<Quantity, QuantityError> {
        let (negative, body) = match s.as_bytes().first() {
            Some(b'-') => (true, &s[1..]),
            Some(b'+') => (false, &s[1..]),
            _ => (false, s),
        };
        let digits_end = body
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(body.len());
        let (number, suffix) = body.split_at(digits_end);
        let (int, frac) = number.split_once('.').unwrap_or((number, ""));
        if (int.is_empty() && frac.is_empty()) || frac.contains('.') {
            return Err(QuantityError::Syntax);
        }
        // value = mantissa / 10^scale × 2^bin × 10^dec
        let mut mantissa: u128 = 0;
        for b in int.bytes().chain(frac.bytes()) {
            mantissa = mantissa
                .checked_mul(10)
                .and_then(|m| m.checked_add(u128::from(b - b'0')))
                .ok_or(QuantityError::TooLarge)?;
        }
        let scale = frac.len() as i32;
        let (bin, dec): (u32, i32) = match suffix {
            "" => (0, 0),
            "Ki" => (10, 0),
            "Mi" => (20, 0),
            "Gi" => (30, 0),
            "Ti" => (40, 0),
            "Pi" => (50, 0),
            "Ei" => (60, 0),
            "n" => (0, -9),
            "u" => (0, -6),
            "m" => (0, -3),
            "k" => (0, 3),
            "M" => (0, 6),
            "G" => (0, 9),
            "T" => (0, 12),
            "P" => (0, 15),
            "E" => (0, 18),
            _ => {
                let exp = suffix
                    .strip_prefix(['e', 'E'])
                    .ok_or(QuantityError::Syntax)?;
                let valid = !exp.is_empty()
                    && exp
                        .trim_start_matches(['+', '-'])
                        .bytes()
                        .all(|b| b.is_ascii_digit())
                    && exp.len() - exp.trim_start_matches(['+', '-']).len() <= 1
                    && !exp.trim_start_matches(['+', '-']).is_empty();
                if !valid {
                    return Err(QuantityError::Syntax);
                }
                let e: i32 = exp.parse().map_err(|_| QuantityError::TooLarge)?;
                if !(-40..=40).contains(&e) {
                    return Err(QuantityError::TooLarge);
                }
                (0, e)
            }
        };
        if negative && mantissa != 0 {
            return Err(QuantityError::Negative);
        }
        // Thousandths, rounded up: mantissa × 2^bin × 10^(dec + 3 − scale).
        let mut v = mantissa
            .checked_mul(1u128 << bin)
            .ok_or(QuantityError::TooLarge)?;
        let exp10 = dec + 3 - scale;
        if exp10 >= 0 {
            v = v
                .checked_mul(
                    10u128
                        .checked_pow(exp10 as u32)
                        .ok_or(QuantityError::TooLarge)?,
                )
                .ok_or(QuantityError::TooLarge)?;
        } else {
            let d = 10u128
                .checked_pow((-exp10) as u32)
                .ok_or(QuantityError::TooLarge)?;
            v = v.div_ceil(d);
        }
        if v > u128::from(u64::MAX) {
            return Err(QuantityError::TooLarge);
        }
        Ok(Quantity { thousandths: v })
    }

    /// The value in thousandths (millicores for CPU).
    pub fn milli(self) -> u64 {
        self.thousandths as u64
    }

    /// The value rounded up to a whole number (bytes for memory).
    pub fn value(self) -> u64 {
        self.thousandths.div_ceil(1000) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Result<u64, QuantityError> {
        Quantity::parse(s).map(Quantity::milli)
    }

    /// `resources` with these limits and requests (`name=quantity`).
    fn reqs(limits: &[(&str, &str)], requests: &[(&str, &str)]) -> ResourceRequirements {
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity as Q;
        let map = |kv: &[(&str, &str)]| {
            (!kv.is_empty()).then(|| {
                kv.iter()
                    .map(|(k, v)| (k.to_string(), Q(v.to_string())))
                    .collect()
            })
        };
        ResourceRequirements {
            limits: map(limits),
            requests: map(requests),
            ..Default::default()
        }
    }

    #[test]
    fn pod_level_resources_as_kep_2837_derives_them() {
        const MI: u64 = 1 << 20;
        let none = Resources::default();
        let main = |r: Resources| (Kind::Main, r);
        // No cpu or memory at the pod level: none.
        assert_eq!(pod_level(None, &[main(none)]), None);
        // A pod limit, no requests anywhere: the request is the limit.
        let pod = reqs(&[("memory", "100Mi")], &[]);
        let got = pod_level(Some(&pod), &[main(none), main(none)]).unwrap();
        assert_eq!(
            (got.memory_request, got.memory_limit),
            (Some(100 * MI), Some(100 * MI))
        );
        // Every container has a request: the pod's is their sum.
        let with = Resources::of(Some(&reqs(&[], &[("memory", "30Mi")])));
        let got = pod_level(Some(&pod), &[main(with), main(with)]).unwrap();
        assert_eq!(got.memory_request, Some(60 * MI));
        // Only a pod request: no limit unless every container has one.
        let pod = reqs(&[], &[("cpu", "500m")]);
        let got = pod_level(Some(&pod), &[main(none)]).unwrap();
        assert_eq!((got.cpu_request, got.cpu_limit), (Some(500), None));
        let limited = Resources::of(Some(&reqs(&[("cpu", "200m")], &[])));
        let got = pod_level(Some(&pod), &[main(limited), main(limited)]).unwrap();
        assert_eq!((got.cpu_request, got.cpu_limit), (Some(500), Some(400)));
        // A container without a limit gets the pod's in its own cgroup.
        let mut c = none;
        implied_limits(
            &mut c,
            &Resources {
                memory_limit: Some(MI),
                ..none
            },
        );
        assert_eq!(c.memory_limit, Some(MI));
    }

    #[test]
    fn quantities_parse_exactly() {
        assert_eq!(q("500m"), Ok(500));
        assert_eq!(q("1.5"), Ok(1500));
        assert_eq!(q("+2"), Ok(2000));
        assert_eq!(q("0.1"), Ok(100));
        assert_eq!(q(".5"), Ok(500));
        assert_eq!(q("1e3"), Ok(1_000_000));
        assert_eq!(q("1E-3"), Ok(1));
        assert_eq!(q("1u"), Ok(1), "rounded up to a thousandth");
        assert_eq!(Quantity::parse("64Mi").map(Quantity::value), Ok(64 << 20));
        assert_eq!(
            Quantity::parse("1G").map(Quantity::value),
            Ok(1_000_000_000)
        );
        assert_eq!(Quantity::parse("1.5Ki").map(Quantity::value), Ok(1536));
        assert_eq!(Quantity::parse("0.5").map(Quantity::value), Ok(1));
        assert_eq!(q("-0"), Ok(0));
        for bad in [
            "64Q", "", "m", "1..2", "1.2.3", "inf", "nan", "1e", "1e+", "1Mi2", "1 Mi", "0x10",
            "1e+-2",
        ] {
            assert_eq!(q(bad), Err(QuantityError::Syntax), "{bad:?}");
        }
        assert_eq!(q("-1"), Err(QuantityError::Negative));
        assert_eq!(q("1e40"), Err(QuantityError::TooLarge));
        assert_eq!(
            q("99999999999999999999999999999999999999999"),
            Err(QuantityError::TooLarge)
        );
    }

    #[test]
    fn the_kubelets_cpu_arithmetic() {
        assert_eq!(cpu_shares(None), 2);
        assert_eq!(cpu_shares(Some(0)), 2);
        assert_eq!(cpu_shares(Some(1)), 2);
        assert_eq!(cpu_shares(Some(100)), 102);
        assert_eq!(cpu_shares(Some(1000)), 1024);
        assert_eq!(cpu_shares(Some(1_000_000)), 262_144);
        assert_eq!(cpu_weight(2), 1);
        assert_eq!(cpu_weight(1024), 39);
        assert_eq!(cpu_weight(262_144), 10_000);
        assert_eq!(cpu_quota(None), None);
        assert_eq!(cpu_quota(Some(0)), None);
        assert_eq!(cpu_quota(Some(100)), Some(10_000));
        assert_eq!(
            cpu_quota(Some(1)),
            Some(1_000),
            "raised to the kernel's 1 ms"
        );
        assert_eq!(cpu_quota(Some(2500)), Some(250_000));
    }

    #[test]
    fn requests_default_to_limits() {
        let r: ResourceRequirements = serde_json::from_value(serde_json::json!({
            "limits": {"cpu": "500m", "memory": "64Mi"},
            "requests": {"cpu": "100m"}
        }))
        .unwrap();
        assert_eq!(
            Resources::of(Some(&r)),
            Resources {
                cpu_request: Some(100),
                cpu_limit: Some(500),
                memory_request: Some(64 << 20),
                memory_limit: Some(64 << 20),
            }
        );
        assert_eq!(Resources::of(None), Resources::default());
    }

    #[test]
    fn the_pods_effective_amounts_count_init_containers_and_sidecars() {
        let mem = |m| Resources {
            memory_request: Some(m),
            memory_limit: Some(m),
            ..Resources::default()
        };
        // init 100, sidecar 50, init 80 (+50 = 130), mains 40 + 30 (+50 sidecar = 120).
        let pod = pod_effective(&[
            (Kind::Init, mem(100)),
            (Kind::Sidecar, mem(50)),
            (Kind::Init, mem(80)),
            (Kind::Main, mem(40)),
            (Kind::Main, mem(30)),
        ]);
        assert_eq!(pod.memory_request, Some(130));
        assert_eq!(pod.memory_limit, Some(130));
        assert_eq!(pod.cpu_request, None);
        // One container without a limit: the pod has none; requests still add up.
        let pod = pod_effective(&[(Kind::Main, mem(40)), (Kind::Main, Resources::default())]);
        assert_eq!(pod.memory_limit, None);
        assert_eq!(pod.memory_request, Some(40));
    }
}
