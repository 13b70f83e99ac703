//! Seccomp profiles compiled to BPF with seccompiler, for the kernel to run at every system
//! call of a container.
//!
//! One seccompiler filter has one action for what matches, another for the rest, so a profile
//! is loaded as a stack of filters, which the kernel runs all, taking the strictest result
//! (and, of two errnos, the last loaded filter's): first a filter that lets through every
//! system call the profile names (under its argument conditions) and gives the rest the
//! profile's default; then, for each other outcome its entries have (an errno, a kill), a
//! filter that gives that outcome to its entries and lets everything else through. A system
//! call a profile names but this architecture lacks is passed over, as libseccomp does.

use std::collections::BTreeMap;
use std::str::FromStr;

use podvisor_core::seccomp::{Action, Arg, Op, Outcome, Resolved};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use crate::process::sys::BpfInstruction;

/// Why a profile could not be compiled.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CompileError(String);

/// The filters of `profile`, in the order they are to be loaded.
pub fn compile(profile: &Resolved) -> Result<Vec<Vec<BpfInstruction>>, CompileError> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| CompileError(format!("seccomp on this architecture: {e}")))?;
    let mut filters = Vec::new();
    let named: Vec<&podvisor_core::seccomp::Rule> = profile.rules.iter().collect();
    // The base: what any entry names goes through; the rest gets the default (a profile
    // that allows by default needs no base).
    if profile.default.action != Action::Allow {
        filters.push(filter(
            &named,
            action(profile.default),
            SeccompAction::Allow,
            arch,
        )?);
    }
    let mut others: Vec<Outcome> = profile
        .rules
        .iter()
        .map(|r| r.outcome)
        .filter(|o| o.action != Action::Allow)
        .collect();
    others.sort();
    others.dedup();
    for outcome in others {
        let rules: Vec<_> = named
            .iter()
            .copied()
            .filter(|r| r.outcome == outcome)
            .collect();
        filters.push(filter(&rules, SeccompAction::Allow, action(outcome), arch)?);
    }
    Ok(filters)
}

/// A filter whose `matched` rules get `on_match` and everything else `mismatch`.
fn filter(
    rules: &[&podvisor_core::seccomp::Rule],
    mismatch: SeccompAction,
    on_match: SeccompAction,
    arch: TargetArch,
) -> Result<Vec<BpfInstruction>, CompileError> {
    // Per system call: its conditional rules, or none for "always" (an entry without
    // conditions matches whatever the others say).
    let mut by_number: BTreeMap<i64, Option<Vec<SeccompRule>>> = BTreeMap::new();
    for rule in rules {
        let Ok(sysno) = syscalls::Sysno::from_str(&rule.name) else {
            continue;
        };
        let entry = by_number
            .entry(sysno.id() as i64)
            .or_insert(Some(Vec::new()));
        if rule.args.is_empty() {
            *entry = None;
        } else if let Some(list) = entry {
            list.push(conditions(&rule.name, &rule.args)?);
        }
    }
    let map = by_number
        .into_iter()
        .map(|(n, r)| (n, r.unwrap_or_default()))
        .collect();
    let filter = SeccompFilter::new(map, mismatch, on_match, arch)
        .map_err(|e| CompileError(format!("seccomp filter: {e}")))?;
    let program: BpfProgram = filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| CompileError(format!("seccomp filter: {e}")))?;
    Ok(program.iter().map(|i| (i.code, i.jt, i.jf, i.k)).collect())
}

/// A rule of all of `args`.
fn conditions(name: &str, args: &[Arg]) -> Result<SeccompRule, CompileError> {
    let mut list = Vec::new();
    for a in args {
        let (op, value) = match a.op {
            Op::Equal => (SeccompCmpOp::Eq, a.value),
            Op::NotEqual => (SeccompCmpOp::Ne, a.value),
            Op::LessThan => (SeccompCmpOp::Lt, a.value),
            Op::LessOrEqual => (SeccompCmpOp::Le, a.value),
            Op::GreaterThan => (SeccompCmpOp::Gt, a.value),
            Op::GreaterOrEqual => (SeccompCmpOp::Ge, a.value),
            Op::MaskedEqual => (SeccompCmpOp::MaskedEq(a.value), a.value_two),
        };
        let index = u8::try_from(a.index).unwrap_or(u8::MAX);
        let c = SeccompCondition::new(index, SeccompCmpArgLen::Qword, op, value)
            .map_err(|e| CompileError(format!("seccomp: {name}'s argument {}: {e}", a.index)))?;
        list.push(c);
    }
    SeccompRule::new(list).map_err(|e| CompileError(format!("seccomp: {name}: {e}")))
}

fn action(o: Outcome) -> SeccompAction {
    match o.action {
        Action::Allow => SeccompAction::Allow,
        Action::Errno => SeccompAction::Errno(o.errno),
        Action::KillThread => SeccompAction::KillThread,
        Action::KillProcess => SeccompAction::KillProcess,
        Action::Trap => SeccompAction::Trap,
        Action::Trace => SeccompAction::Trace(o.errno),
        Action::Log => SeccompAction::Log,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use podvisor_core::seccomp::{runtime_default, Target};

    #[test]
    fn the_default_profile_compiles_to_two_filters() {
        let caps: Vec<String> = vec!["CAP_CHOWN".into()];
        let target = Target {
            caps: &caps,
            arch: "amd64",
            kernel: (6, 1),
        };
        let filters = compile(&runtime_default("amd64").resolve(&target)).unwrap();
        // The base, and clone3's ENOSYS.
        assert_eq!(filters.len(), 2);
        assert!(
            filters[0].len() > 300 && filters[0].len() < 4096,
            "{}",
            filters[0].len()
        );
    }
}
