//! Which devices a container may make and open: the rules of its device cgroup, as runc sets
//! them over containerd's spec (libcontainer/specconv: a spec's `deny all` first, then runc's
//! `AllowedDevices`; a privileged container allows all). Written for cgroup v1 as lines of
//! `devices.allow` and `devices.deny`, and for v2 as the eBPF program of type
//! `BPF_PROG_TYPE_CGROUP_DEVICE` the kernel asks at each open and mknod of a device.

/// Make a node (`m`), read (`r`), write (`w`): the kernel's `BPF_DEVCG_ACC_*` bits.
pub const MKNOD: u8 = 1;
pub const READ: u8 = 2;
pub const WRITE: u8 = 4;
const ALL_ACCESS: u8 = MKNOD | READ | WRITE;

/// A device type of a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `a`: every device, of both types.
    All,
    /// `c`
    Char,
    /// `b`
    Block,
}

/// One allow rule: devices of `kind` with these numbers (`None`: any) may be accessed so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub kind: Kind,
    pub major: Option<u32>,
    pub minor: Option<u32>,
    pub access: u8,
}

const fn char_dev(major: u32, minor: Option<u32>, access: u8) -> Rule {
    Rule {
        kind: Kind::Char,
        major: Some(major),
        minor,
        access,
    }
}

/// runc's `AllowedDevices`: any node may be made; null, random, full, tty, zero, urandom, the
/// pseudo-terminals (`136:*`), ptmx and /dev/net/tun may be opened.
pub const DEFAULT_RULES: [Rule; 11] = [
    Rule {
        kind: Kind::Char,
        major: None,
        minor: None,
        access: MKNOD,
    },
    Rule {
        kind: Kind::Block,
        major: None,
        minor: None,
        access: MKNOD,
    },
    char_dev(1, Some(3), ALL_ACCESS),
    char_dev(1, Some(8), ALL_ACCESS),
    char_dev(1, Some(7), ALL_ACCESS),
    char_dev(5, Some(0), ALL_ACCESS),
    char_dev(1, Some(5), ALL_ACCESS),
    char_dev(1, Some(9), ALL_ACCESS),
    char_dev(136, None, ALL_ACCESS),
    char_dev(5, Some(2), ALL_ACCESS),
    char_dev(10, Some(200), ALL_ACCESS),
];

/// Every device, every access: a privileged container's one rule.
pub const ALLOW_ALL: Rule = Rule {
    kind: Kind::All,
    major: None,
    minor: None,
    access: ALL_ACCESS,
};

/// A container's allow rules (everything else is denied).
pub fn rules(privileged: bool) -> &'static [Rule] {
    match privileged {
        true => std::slice::from_ref(&ALLOW_ALL),
        false => &DEFAULT_RULES,
    }
}

impl Rule {
    /// The rule as cgroup v1's `devices.allow` reads it: `c 1:3 rwm`, `b *:* m`, `a`.
    pub fn v1_line(&self) -> String {
        let kind = match self.kind {
            Kind::All => return "a".to_string(),
            Kind::Char => 'c',
            Kind::Block => 'b',
        };
        let number = |n: Option<u32>| n.map_or_else(|| "*".to_string(), |n| n.to_string());
        let mut access = String::new();
        for (bit, ch) in [(READ, 'r'), (WRITE, 'w'), (MKNOD, 'm')] {
            if self.access & bit != 0 {
                access.push(ch);
            }
        }
        format!(
            "{kind} {}:{} {access}",
            number(self.major),
            number(self.minor)
        )
    }
}

/// One eBPF instruction as the kernel reads it (`struct bpf_insn`, little-endian): the
/// opcode, the destination and source registers, an offset and an immediate.
fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
    u64::from(code)
        | (u64::from(dst & 0xf) | (u64::from(src & 0xf) << 4)) << 8
        | u64::from(off as u16) << 16
        | u64::from(imm as u32) << 32
}

/// Opcodes: a 32-bit load from memory, 64-bit `&=`, `>>=` and `=` of an immediate, `=` of a
/// register, a jump if not equal to an immediate, exit.
const LDX_W: u8 = 0x61;
const AND_K: u8 = 0x57;
const RSH_K: u8 = 0x77;
const MOV_K: u8 = 0xb7;
const MOV_X: u8 = 0xbf;
const JNE_K: u8 = 0x55;
const EXIT: u8 = 0x95;

/// The kernel's device types in the program's context (`BPF_DEVCG_DEV_*`).
const BPF_BLOCK: i32 = 1;
const BPF_CHAR: i32 = 2;

/// The cgroup v2 device program of `rules`: it returns 1 (allowed) for an access one rule
/// allows and 0 otherwise. The context (`struct bpf_cgroup_dev_ctx`) is in r1: the type in the
/// low 16 bits and the access in the high 16 bits of its first word, then major and minor.
pub fn bpf_program(rules: &[Rule]) -> Vec<u64> {
    let mut p = vec![
        insn(LDX_W, 2, 1, 0, 0),
        insn(AND_K, 2, 0, 0, 0xffff),
        insn(LDX_W, 3, 1, 0, 0),
        insn(RSH_K, 3, 0, 0, 16),
        insn(LDX_W, 4, 1, 4, 0),
        insn(LDX_W, 5, 1, 8, 0),
    ];
    for rule in rules {
        // Each check jumps past the rest of the rule's block when it does not match: the
        // offsets are filled in once the block's length is known.
        let mut block = Vec::new();
        match rule.kind {
            Kind::All => {}
            Kind::Char => block.push((true, insn(JNE_K, 2, 0, 0, BPF_CHAR))),
            Kind::Block => block.push((true, insn(JNE_K, 2, 0, 0, BPF_BLOCK))),
        }
        if rule.access & ALL_ACCESS != ALL_ACCESS {
            // The access asked for must hold no bit the rule leaves out.
            block.push((false, insn(MOV_X, 1, 3, 0, 0)));
            let denied = i32::from(!rule.access & ALL_ACCESS);
            block.push((false, insn(AND_K, 1, 0, 0, denied)));
            block.push((true, insn(JNE_K, 1, 0, 0, 0)));
        }
        if let Some(major) = rule.major {
            block.push((true, insn(JNE_K, 4, 0, 0, major as i32)));
        }
        if let Some(minor) = rule.minor {
            block.push((true, insn(JNE_K, 5, 0, 0, minor as i32)));
        }
        block.push((false, insn(MOV_K, 0, 0, 0, 1)));
        block.push((false, insn(EXIT, 0, 0, 0, 0)));
        let len = block.len();
        // No check: the rule matches every access.
        let matches_all = !block.iter().any(|(jump, _)| *jump);
        for (i, (jump, code)) in block.into_iter().enumerate() {
            let skip = (len - 1 - i) as u64 & 0xffff;
            p.push(match jump {
                true => code | skip << 16,
                false => code,
            });
        }
        if matches_all {
            // Nothing after it could run, and the kernel's verifier refuses a program with
            // instructions that cannot be reached.
            return p;
        }
    }
    p.push(insn(MOV_K, 0, 0, 0, 0));
    p.push(insn(EXIT, 0, 0, 0, 0));
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_lines_are_runcs() {
        let lines: Vec<String> = rules(false).iter().map(Rule::v1_line).collect();
        assert_eq!(
            lines,
            [
                "c *:* m",
                "b *:* m",
                "c 1:3 rwm",
                "c 1:8 rwm",
                "c 1:7 rwm",
                "c 5:0 rwm",
                "c 1:5 rwm",
                "c 1:9 rwm",
                "c 136:* rwm",
                "c 5:2 rwm",
                "c 10:200 rwm"
            ]
        );
        assert_eq!(rules(true)[0].v1_line(), "a");
    }

    /// Runs a device program on one access, as the kernel would (the few opcodes it uses).
    fn run(program: &[u64], kind: i32, access: u8, major: u32, minor: u32) -> u64 {
        let ctx = [((u32::from(access)) << 16) | kind as u32, major, minor];
        let mut r = [0u64; 11];
        let mut pc = 0usize;
        loop {
            let i = program[pc];
            let (code, dst, src) = (
                i as u8,
                ((i >> 8) & 0xf) as usize,
                ((i >> 12) & 0xf) as usize,
            );
            let off = (i >> 16) as u16 as i16;
            let imm = (i >> 32) as u32 as i32;
            pc += 1;
            match code {
                LDX_W => {
                    assert_eq!(src, 1, "loads come from the context");
                    r[dst] = u64::from(ctx[off as usize / 4]);
                }
                AND_K => r[dst] &= imm as i64 as u64,
                RSH_K => r[dst] >>= imm,
                MOV_K => r[dst] = imm as i64 as u64,
                MOV_X => r[dst] = r[src],
                JNE_K => {
                    if r[dst] != imm as i64 as u64 {
                        pc = (pc as i64 + i64::from(off)) as usize;
                    }
                }
                EXIT => return r[0],
                other => panic!("opcode {other:#x}"),
            }
        }
    }

    #[test]
    fn the_program_allows_what_the_rules_allow_and_nothing_else() {
        let p = bpf_program(rules(false));
        let rwm = READ | WRITE;
        // null, the pseudo-terminals, tun: read and write.
        assert_eq!(run(&p, BPF_CHAR, rwm, 1, 3), 1);
        assert_eq!(run(&p, BPF_CHAR, READ, 136, 7), 1);
        assert_eq!(run(&p, BPF_CHAR, WRITE, 10, 200), 1);
        // Any node may be made, none other opened: a disk, loop-control, kmsg.
        assert_eq!(run(&p, BPF_BLOCK, MKNOD, 8, 0), 1);
        assert_eq!(run(&p, BPF_CHAR, MKNOD, 10, 237), 1);
        assert_eq!(run(&p, BPF_BLOCK, READ, 8, 0), 0);
        assert_eq!(run(&p, BPF_BLOCK, READ | MKNOD, 8, 0), 0);
        assert_eq!(run(&p, BPF_CHAR, rwm, 10, 237), 0);
        assert_eq!(run(&p, BPF_CHAR, READ, 1, 11), 0);
        // A number of a char rule, as a block device.
        assert_eq!(run(&p, BPF_BLOCK, READ, 1, 3), 0);
        let all = bpf_program(rules(true));
        assert_eq!(run(&all, BPF_BLOCK, READ | WRITE, 8, 0), 1);
        assert_eq!(run(&all, BPF_CHAR, MKNOD, 10, 237), 1);
        // The loads, then the one answer: no instruction that cannot be reached (the
        // verifier refuses those).
        assert_eq!(all.len(), 8);
        assert_eq!(bpf_program(&[]).len(), 8);
        let after_all = bpf_program(&[ALLOW_ALL, DEFAULT_RULES[2]]);
        assert_eq!(after_all, all);
    }
}
