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
//!
//! seccompiler tests the system call's number against each entry in turn (five instructions
//! an entry): the RuntimeDefault profile's 300-odd entries make a program of 1,500
//! instructions, which the kernel checks, compiles and, to cache the system calls it always
//! allows, runs for every system call number at every container start (hundreds of
//! instructions each). So the entries without conditions go in front of it as a binary
//! search over ranges of numbers (`ranges_first`: 232 instructions in all, about 15 run for a
//! number), and seccompiler's program decides only the rest.

use std::collections::BTreeMap;
use std::str::FromStr;

use podvisor_core::seccomp::{Action, Arg, Op, Outcome, Resolved};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use crate::process::sys::BpfInstruction;

/// One instruction as this compiler writes it: code, jump if true, jump if false, value.
type Insn = (u16, u8, u8, u32);

/// Why a profile could not be compiled.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CompileError(String);

/// The filters of `profile`, in the order they are to be loaded.
pub fn compile(profile: &Resolved) -> Result<Vec<Vec<BpfInstruction>>, CompileError> {
    let filters = compile_with(profile, true)?;
    Ok(filters
        .into_iter()
        .map(|f| f.into_iter().map(BpfInstruction::from).collect())
        .collect())
}

/// `compile`, with the entries without conditions searched first (`ranges_first`) or not.
fn compile_with(profile: &Resolved, search: bool) -> Result<Vec<Vec<Insn>>, CompileError> {
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
            search,
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
        filters.push(filter(
            &rules,
            SeccompAction::Allow,
            action(outcome),
            arch,
            search,
        )?);
    }
    Ok(filters)
}

/// A filter whose `matched` rules get `on_match` and everything else `mismatch`; with
/// `search`, those without conditions are found first (`ranges_first`).
fn filter(
    rules: &[&podvisor_core::seccomp::Rule],
    mismatch: SeccompAction,
    on_match: SeccompAction,
    arch: TargetArch,
    search: bool,
) -> Result<Vec<Insn>, CompileError> {
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
    // With `search`, those without conditions go to the search (`always`), the rest to
    // seccompiler (`rest`); `full` is all of them, should the search not fit.
    let (mut always, mut rest, mut full) = (Vec::new(), BTreeMap::new(), BTreeMap::new());
    for (n, rules) in by_number {
        match (search, rules, u32::try_from(n)) {
            (true, None, Ok(number)) => {
                always.push(number);
                full.insert(n, Vec::new());
            }
            (_, rules, _) => {
                let rules = rules.unwrap_or_default();
                rest.insert(n, rules.clone());
                full.insert(n, rules);
            }
        }
    }
    let program = seccompiler_program(rest, mismatch.clone(), on_match.clone(), arch)?;
    match ranges_first(&program, &always, u32::from(on_match.clone())) {
        Some(program) => Ok(program),
        None => seccompiler_program(full, mismatch, on_match, arch),
    }
}

/// seccompiler's program for `map`: its entries get `on_match`, the rest `mismatch`.
fn seccompiler_program(
    map: BTreeMap<i64, Vec<SeccompRule>>,
    mismatch: SeccompAction,
    on_match: SeccompAction,
    arch: TargetArch,
) -> Result<Vec<Insn>, CompileError> {
    let filter = SeccompFilter::new(map, mismatch, on_match, arch)
        .map_err(|e| CompileError(format!("seccomp filter: {e}")))?;
    let program: BpfProgram = filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| CompileError(format!("seccomp filter: {e}")))?;
    Ok(program.iter().map(|i| (i.code, i.jt, i.jf, i.k)).collect())
}

// Classic BPF as the kernel's linux/filter.h has it.
const LD_W_ABS: u16 = 0x20;
const JMP_JA: u16 = 0x05;
const JMP_JEQ_K: u16 = 0x15;
const JMP_JGT_K: u16 = 0x25;
const JMP_JGE_K: u16 = 0x35;
const RET_K: u16 = 0x06;
/// Where `seccomp_data` holds the system call's number and the architecture.
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;

/// `program` (seccompiler's) with, after its architecture check, a binary search of
/// `numbers` that returns `on_match` for each of them; every other system call goes on to
/// the rest of `program`. `None` when `program` does not begin with the check as seccompiler
/// writes it.
fn ranges_first(program: &[Insn], numbers: &[u32], on_match: u32) -> Option<Vec<Insn>> {
    let checks_arch = program.len() > 3
        && program[0] == (LD_W_ABS, 0, 0, DATA_ARCH)
        && (program[1].0, program[1].1, program[1].2) == (JMP_JEQ_K, 1, 0)
        && program[2] == (RET_K, 0, 0, libc::SECCOMP_RET_KILL_PROCESS);
    if numbers.is_empty() {
        return Some(program.to_vec());
    }
    if !checks_arch {
        return None;
    }
    let mut sorted = numbers.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut ranges: Vec<(u32, u32)> = Vec::new();
    for n in sorted {
        match ranges.last_mut() {
            Some((_, hi)) if *hi + 1 == n => *hi = n,
            _ => ranges.push((n, n)),
        }
    }
    let mut search = Vec::new();
    let mut misses = Vec::new();
    search_ranges(&ranges, on_match, &mut search, &mut misses);
    // A miss goes on after the search.
    let end = search.len();
    for at in misses {
        search[at].3 = (end - at - 1) as u32;
    }
    let mut out = Vec::with_capacity(program.len() + search.len() + 1);
    out.extend_from_slice(&program[..3]);
    out.push((LD_W_ABS, 0, 0, DATA_NR));
    out.extend(search);
    out.extend_from_slice(&program[3..]);
    Some(out)
}

/// Appends the search of `ranges` (sorted, apart) for the number in the accumulator: each
/// path ends in `RET on_match` or in a jump whose place is pushed on `misses` (its offset is
/// set once the search's end is known). Only `JA` jumps far, so no 8-bit offset overflows.
fn search_ranges(
    ranges: &[(u32, u32)],
    on_match: u32,
    out: &mut Vec<Insn>,
    misses: &mut Vec<usize>,
) {
    if let [(lo, hi)] = ranges {
        out.push((JMP_JGE_K, 0, 2, *lo)); // below: the miss
        out.push((JMP_JGT_K, 1, 0, *hi)); // above: the miss
        out.push((RET_K, 0, 0, on_match));
        misses.push(out.len());
        out.push((JMP_JA, 0, 0, 0));
        return;
    }
    let (low, high) = ranges.split_at(ranges.len() / 2);
    // From the first of the higher half up: jump over the lower half's search.
    out.push((JMP_JGE_K, 0, 1, high[0].0));
    let over = out.len();
    out.push((JMP_JA, 0, 0, 0));
    search_ranges(low, on_match, out, misses);
    out[over].3 = (out.len() - over - 1) as u32;
    search_ranges(high, on_match, out, misses);
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
    fn the_default_profile_compiles_to_two_small_filters() {
        let caps: Vec<String> = vec!["CAP_CHOWN".into()];
        let target = Target {
            caps: &caps,
            arch: "amd64",
            kernel: (6, 1),
        };
        let profile = runtime_default("amd64").resolve(&target);
        let filters = compile(&profile).unwrap();
        // The base, and clone3's ENOSYS.
        assert_eq!(filters.len(), 2);
        let plain = compile_with(&profile, false).unwrap();
        assert!(plain[0].len() > 1000, "{}", plain[0].len());
        // The entries without conditions searched as ranges: a fraction of seccompiler's.
        assert!(
            filters[0].len() > 100 && filters[0].len() < plain[0].len() / 3,
            "{} against {}",
            filters[0].len(),
            plain[0].len()
        );
    }

    /// Runs a classic BPF program (the instructions seccompiler and `ranges_first` write) on
    /// `data`, a `struct seccomp_data`, as the kernel does; the action it returns.
    fn run<I: Copy + Into<Insn>>(program: &[I], data: &[u8; 64]) -> u32 {
        let (mut a, mut pc) = (0u32, 0usize);
        let mut steps = 0;
        loop {
            steps += 1;
            assert!(steps < 10_000, "the program does not end");
            let (code, jt, jf, k) = program[pc].into();
            pc += 1;
            let jump = |taken: bool| usize::from(if taken { jt } else { jf });
            match code {
                LD_W_ABS => {
                    let at = k as usize;
                    a = u32::from_ne_bytes(data[at..at + 4].try_into().unwrap());
                }
                0x54 => a &= k, // BPF_ALU | BPF_AND | BPF_K
                JMP_JA => pc += k as usize,
                JMP_JEQ_K => pc += jump(a == k),
                JMP_JGT_K => pc += jump(a > k),
                JMP_JGE_K => pc += jump(a >= k),
                0x45 => pc += jump(a & k != 0), // BPF_JMP | BPF_JSET | BPF_K
                RET_K => return k,
                other => panic!("instruction {other:#x} at {}", pc - 1),
            }
        }
    }

    fn data(nr: u32, arch: u32, args: u64) -> [u8; 64] {
        let mut d = [0u8; 64];
        d[0..4].copy_from_slice(&nr.to_ne_bytes());
        d[4..8].copy_from_slice(&arch.to_ne_bytes());
        for i in 0..6 {
            let at = 16 + 8 * i;
            d[at..at + 8].copy_from_slice(&args.to_ne_bytes());
        }
        d
    }

    /// Every filter decides every system call as seccompiler's program alone does: each
    /// number (and the x32 ones, and another architecture's), with arguments that meet the
    /// profiles' conditions and that do not.
    #[test]
    fn the_search_decides_as_seccompilers_program() {
        use podvisor_core::seccomp::{Arg, Op, Outcome, Rule};
        let caps = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let mut profiles = Vec::new();
        for held in [
            caps(&[]),
            caps(&[
                "CAP_SYS_ADMIN",
                "CAP_SYS_PTRACE",
                "CAP_SYS_BOOT",
                "CAP_SYS_MODULE",
            ]),
        ] {
            let target = Target {
                caps: &held,
                arch: "amd64",
                kernel: (6, 1),
            };
            profiles.push(runtime_default("amd64").resolve(&target));
        }
        let rule = |name: &str, outcome: Outcome, args: Vec<Arg>| Rule {
            name: name.into(),
            outcome,
            args,
        };
        let allow = Outcome {
            action: Action::Allow,
            errno: 0,
        };
        let errno = |e| Outcome {
            action: Action::Errno,
            errno: e,
        };
        let arg = |index, op, value, value_two| Arg {
            index,
            value,
            value_two,
            op,
        };
        profiles.push(Resolved {
            default: errno(38),
            rules: vec![
                rule("read", allow, vec![]),
                rule("write", allow, vec![]),
                rule("openat", allow, vec![]),
                rule("close", allow, vec![]),
                rule("personality", allow, vec![arg(0, Op::Equal, 8, 0)]),
                rule("personality", allow, vec![]),
                rule(
                    "clone",
                    allow,
                    vec![arg(0, Op::MaskedEqual, 0x1000_0000, 0)],
                ),
                rule("mkdir", errno(13), vec![]),
                rule("kill", errno(1), vec![arg(1, Op::GreaterThan, 9, 0)]),
                rule(
                    "reboot",
                    Outcome {
                        action: Action::KillProcess,
                        errno: 0,
                    },
                    vec![],
                ),
            ],
        });
        let x86_64 = 0xc000_003e;
        let i386 = 0x4000_0003;
        let numbers = (0..600).chain([0x4000_0000, 0x4000_0001, 0x4000_0101, u32::MAX]);
        let numbers: Vec<u32> = numbers.collect();
        let args = [0, 8, 9, 10, 0x2_0008, 0x1000_0000, 0xffff_ffff, u64::MAX];
        for (p, profile) in profiles.iter().enumerate() {
            let searched = compile(profile).unwrap();
            let plain = compile_with(profile, false).unwrap();
            assert_eq!(searched.len(), plain.len());
            for (f, (s, q)) in searched.iter().zip(&plain).enumerate() {
                for &nr in &numbers {
                    for arch in [x86_64, i386] {
                        for &value in &args {
                            let d = data(nr, arch, value);
                            assert_eq!(
                                run(s, &d),
                                run(q, &d),
                                "profile {p}, filter {f}: system call {nr:#x}, arch {arch:#x}, arguments {value:#x}"
                            );
                        }
                    }
                }
            }
        }
    }
}
