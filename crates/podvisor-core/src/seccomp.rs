//! Seccomp profiles as runtimes write them (the OCI runtime spec's `linux.seccomp`, the JSON
//! of Docker's and containerd's profiles and of the kubelet's `Localhost` profiles), the
//! runtime's default profile, and a profile resolved for one container: its conditional
//! entries (`includes`, `excludes`: capabilities, architectures, kernel version) decided.
//! Pure data; the shell compiles a resolved profile to BPF and loads it.
//!
//! The default profile reproduces containerd's `DefaultProfile` (contrib/seccomp): a list of
//! allowed system calls, more with CAP_SYS_ADMIN and the other capabilities that guard them,
//! `clone` without namespace flags, `clone3` failing with ENOSYS (so that libc falls back to
//! `clone`), everything else EPERM.

use serde::{Deserialize, Serialize};

/// What the kernel does with a system call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Action {
    #[serde(rename = "SCMP_ACT_ALLOW")]
    Allow,
    /// Fails with the entry's (or the profile's) `errnoRet`, EPERM when none.
    #[serde(rename = "SCMP_ACT_ERRNO")]
    Errno,
    #[serde(rename = "SCMP_ACT_KILL", alias = "SCMP_ACT_KILL_THREAD")]
    KillThread,
    #[serde(rename = "SCMP_ACT_KILL_PROCESS")]
    KillProcess,
    #[serde(rename = "SCMP_ACT_TRAP")]
    Trap,
    #[serde(rename = "SCMP_ACT_TRACE")]
    Trace,
    #[serde(rename = "SCMP_ACT_LOG")]
    Log,
}

/// How an argument is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    #[serde(rename = "SCMP_CMP_NE")]
    NotEqual,
    #[serde(rename = "SCMP_CMP_LT")]
    LessThan,
    #[serde(rename = "SCMP_CMP_LE")]
    LessOrEqual,
    #[serde(rename = "SCMP_CMP_EQ")]
    Equal,
    #[serde(rename = "SCMP_CMP_GE")]
    GreaterOrEqual,
    #[serde(rename = "SCMP_CMP_GT")]
    GreaterThan,
    /// `(arg & value) == valueTwo`.
    #[serde(rename = "SCMP_CMP_MASKED_EQ")]
    MaskedEqual,
}

/// A condition on one argument; an entry's conditions must all hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Arg {
    pub index: u32,
    pub value: u64,
    #[serde(default)]
    pub value_two: u64,
    pub op: Op,
}

/// When an entry applies.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Filter {
    /// Capabilities (`CAP_…`) the container must have (`includes`) or must not (`excludes`).
    #[serde(default)]
    pub caps: Vec<String>,
    /// Architectures (`amd64`, `arm64`, …).
    #[serde(default)]
    pub arches: Vec<String>,
    /// `includes` only: the lowest kernel, `MAJOR.MINOR`.
    #[serde(default)]
    pub min_kernel: Option<String>,
}

/// One entry of a profile: system calls, what happens to them, and under what conditions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Syscall {
    #[serde(default)]
    pub names: Vec<String>,
    /// Docker's older form: one name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub action: Action,
    #[serde(default)]
    pub args: Vec<Arg>,
    #[serde(default)]
    pub errno_ret: Option<u32>,
    #[serde(default)]
    pub includes: Filter,
    #[serde(default)]
    pub excludes: Filter,
}

/// A whole profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Profile {
    pub default_action: Action,
    #[serde(default)]
    pub default_errno_ret: Option<u32>,
    #[serde(default)]
    pub syscalls: Vec<Syscall>,
}

/// What a resolved entry does: the action, with its errno for `Errno`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Outcome {
    pub action: Action,
    pub errno: u32,
}

/// A system call's rule in a resolved profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub name: String,
    pub outcome: Outcome,
    /// All must hold; none: always.
    pub args: Vec<Arg>,
}

/// A profile for one container: its default, and its rules in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub default: Outcome,
    pub rules: Vec<Rule>,
}

/// What decides a profile's conditional entries for one container.
#[derive(Debug, Clone)]
pub struct Target<'a> {
    /// The container's capabilities (bounding set), as `CAP_…` names.
    pub caps: &'a [String],
    /// Go's name of this machine's architecture (`amd64`, `arm64`).
    pub arch: &'a str,
    /// This kernel's (major, minor).
    pub kernel: (u32, u32),
}

const EPERM: u32 = 1;
const ENOSYS: u32 = 38;

impl Profile {
    /// The profile for `target`: entries whose conditions do not hold are left out.
    pub fn resolve(&self, target: &Target<'_>) -> Resolved {
        let default_errno = self.default_errno_ret.unwrap_or(EPERM);
        let outcome = |action: Action, errno: Option<u32>| Outcome {
            action,
            errno: if action == Action::Errno {
                errno.unwrap_or(default_errno)
            } else {
                0
            },
        };
        let mut rules = Vec::new();
        for s in self.syscalls.iter().filter(|s| applies(s, target)) {
            for name in s.names.iter().chain(&s.name) {
                rules.push(Rule {
                    name: name.clone(),
                    outcome: outcome(s.action, s.errno_ret),
                    args: s.args.clone(),
                });
            }
        }
        Resolved {
            default: outcome(self.default_action, None),
            rules,
        }
    }
}

fn applies(s: &Syscall, t: &Target<'_>) -> bool {
    let has = |c: &String| t.caps.iter().any(|x| x == c);
    let inc = &s.includes;
    let exc = &s.excludes;
    let kernel_ok = inc.min_kernel.as_deref().is_none_or(|k| {
        let mut parts = k.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        let want = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        t.kernel >= want
    });
    inc.caps.iter().all(has)
        && (inc.arches.is_empty() || inc.arches.iter().any(|a| a == t.arch))
        && kernel_ok
        && !exc.caps.iter().any(has)
        && !exc.arches.iter().any(|a| a == t.arch)
}

/// The system calls every container may make under the runtime's default profile.
const ALLOWED: &[&str] = &[
    "accept",
    "accept4",
    "access",
    "adjtimex",
    "alarm",
    "bind",
    "brk",
    "capget",
    "capset",
    "chdir",
    "chmod",
    "chown",
    "chown32",
    "clock_adjtime",
    "clock_adjtime64",
    "clock_getres",
    "clock_getres_time64",
    "clock_gettime",
    "clock_gettime64",
    "clock_nanosleep",
    "clock_nanosleep_time64",
    "close",
    "close_range",
    "connect",
    "copy_file_range",
    "creat",
    "dup",
    "dup2",
    "dup3",
    "epoll_create",
    "epoll_create1",
    "epoll_ctl",
    "epoll_ctl_old",
    "epoll_pwait",
    "epoll_pwait2",
    "epoll_wait",
    "epoll_wait_old",
    "eventfd",
    "eventfd2",
    "execve",
    "execveat",
    "exit",
    "exit_group",
    "faccessat",
    "faccessat2",
    "fadvise64",
    "fadvise64_64",
    "fallocate",
    "fanotify_mark",
    "fchdir",
    "fchmod",
    "fchmodat",
    "fchown",
    "fchown32",
    "fchownat",
    "fcntl",
    "fcntl64",
    "fdatasync",
    "fgetxattr",
    "flistxattr",
    "flock",
    "fork",
    "fremovexattr",
    "fsetxattr",
    "fstat",
    "fstat64",
    "fstatat64",
    "fstatfs",
    "fstatfs64",
    "fsync",
    "ftruncate",
    "ftruncate64",
    "futex",
    "futex_time64",
    "futex_waitv",
    "futimesat",
    "getcpu",
    "getcwd",
    "getdents",
    "getdents64",
    "getegid",
    "getegid32",
    "geteuid",
    "geteuid32",
    "getgid",
    "getgid32",
    "getgroups",
    "getgroups32",
    "getitimer",
    "getpeername",
    "getpgid",
    "getpgrp",
    "getpid",
    "getppid",
    "getpriority",
    "getrandom",
    "getresgid",
    "getresgid32",
    "getresuid",
    "getresuid32",
    "getrlimit",
    "get_robust_list",
    "getrusage",
    "getsid",
    "getsockname",
    "getsockopt",
    "get_thread_area",
    "gettid",
    "gettimeofday",
    "getuid",
    "getuid32",
    "getxattr",
    "inotify_add_watch",
    "inotify_init",
    "inotify_init1",
    "inotify_rm_watch",
    "io_cancel",
    "ioctl",
    "io_destroy",
    "io_getevents",
    "io_pgetevents",
    "io_pgetevents_time64",
    "ioprio_get",
    "ioprio_set",
    "io_setup",
    "io_submit",
    "io_uring_enter",
    "io_uring_register",
    "io_uring_setup",
    "ipc",
    "kill",
    "landlock_add_rule",
    "landlock_create_ruleset",
    "landlock_restrict_self",
    "lchown",
    "lchown32",
    "lgetxattr",
    "link",
    "linkat",
    "listen",
    "listxattr",
    "llistxattr",
    "_llseek",
    "lremovexattr",
    "lseek",
    "lsetxattr",
    "lstat",
    "lstat64",
    "madvise",
    "membarrier",
    "memfd_create",
    "memfd_secret",
    "mincore",
    "mkdir",
    "mkdirat",
    "mknod",
    "mknodat",
    "mlock",
    "mlock2",
    "mlockall",
    "mmap",
    "mmap2",
    "mprotect",
    "mq_getsetattr",
    "mq_notify",
    "mq_open",
    "mq_timedreceive",
    "mq_timedreceive_time64",
    "mq_timedsend",
    "mq_timedsend_time64",
    "mq_unlink",
    "mremap",
    "msgctl",
    "msgget",
    "msgrcv",
    "msgsnd",
    "msync",
    "munlock",
    "munlockall",
    "munmap",
    "nanosleep",
    "newfstatat",
    "_newselect",
    "open",
    "openat",
    "openat2",
    "pause",
    "pidfd_open",
    "pidfd_send_signal",
    "pipe",
    "pipe2",
    "poll",
    "ppoll",
    "ppoll_time64",
    "prctl",
    "pread64",
    "preadv",
    "preadv2",
    "prlimit64",
    "process_mrelease",
    "pselect6",
    "pselect6_time64",
    "pwrite64",
    "pwritev",
    "pwritev2",
    "read",
    "readahead",
    "readlink",
    "readlinkat",
    "readv",
    "recv",
    "recvfrom",
    "recvmmsg",
    "recvmmsg_time64",
    "recvmsg",
    "remap_file_pages",
    "removexattr",
    "rename",
    "renameat",
    "renameat2",
    "restart_syscall",
    "rmdir",
    "rseq",
    "rt_sigaction",
    "rt_sigpending",
    "rt_sigprocmask",
    "rt_sigqueueinfo",
    "rt_sigreturn",
    "rt_sigsuspend",
    "rt_sigtimedwait",
    "rt_sigtimedwait_time64",
    "rt_tgsigqueueinfo",
    "sched_getaffinity",
    "sched_getattr",
    "sched_getparam",
    "sched_get_priority_max",
    "sched_get_priority_min",
    "sched_getscheduler",
    "sched_rr_get_interval",
    "sched_rr_get_interval_time64",
    "sched_setaffinity",
    "sched_setattr",
    "sched_setparam",
    "sched_setscheduler",
    "sched_yield",
    "seccomp",
    "select",
    "semctl",
    "semget",
    "semop",
    "semtimedop",
    "semtimedop_time64",
    "send",
    "sendfile",
    "sendfile64",
    "sendmmsg",
    "sendmsg",
    "sendto",
    "setfsgid",
    "setfsgid32",
    "setfsuid",
    "setfsuid32",
    "setgid",
    "setgid32",
    "setgroups",
    "setgroups32",
    "setitimer",
    "setpgid",
    "setpriority",
    "setregid",
    "setregid32",
    "setresgid",
    "setresgid32",
    "setresuid",
    "setresuid32",
    "setreuid",
    "setreuid32",
    "setrlimit",
    "set_robust_list",
    "setsid",
    "setsockopt",
    "set_thread_area",
    "set_tid_address",
    "setuid",
    "setuid32",
    "setxattr",
    "shmat",
    "shmctl",
    "shmdt",
    "shmget",
    "shutdown",
    "sigaltstack",
    "signalfd",
    "signalfd4",
    "sigprocmask",
    "sigreturn",
    "socket",
    "socketcall",
    "socketpair",
    "splice",
    "stat",
    "stat64",
    "statfs",
    "statfs64",
    "statx",
    "symlink",
    "symlinkat",
    "sync",
    "sync_file_range",
    "syncfs",
    "sysinfo",
    "tee",
    "tgkill",
    "time",
    "timer_create",
    "timer_delete",
    "timer_getoverrun",
    "timer_gettime",
    "timer_gettime64",
    "timer_settime",
    "timer_settime64",
    "timerfd_create",
    "timerfd_gettime",
    "timerfd_gettime64",
    "timerfd_settime",
    "timerfd_settime64",
    "times",
    "tkill",
    "truncate",
    "truncate64",
    "ugetrlimit",
    "umask",
    "uname",
    "unlink",
    "unlinkat",
    "utime",
    "utimensat",
    "utimensat_time64",
    "utimes",
    "vfork",
    "vmsplice",
    "wait4",
    "waitid",
    "waitpid",
    "write",
    "writev",
];

/// System calls a capability unlocks under the default profile.
const BY_CAPABILITY: &[(&str, &[&str])] = &[
    ("CAP_DAC_READ_SEARCH", &["open_by_handle_at"]),
    (
        "CAP_SYS_ADMIN",
        &[
            "bpf",
            "clone",
            "clone3",
            "fanotify_init",
            "fsconfig",
            "fsmount",
            "fsopen",
            "fspick",
            "lookup_dcookie",
            "mount",
            "mount_setattr",
            "move_mount",
            "name_to_handle_at",
            "open_tree",
            "perf_event_open",
            "quotactl",
            "quotactl_fd",
            "setdomainname",
            "sethostname",
            "setns",
            "syslog",
            "umount",
            "umount2",
            "unshare",
        ],
    ),
    ("CAP_SYS_BOOT", &["reboot"]),
    ("CAP_SYS_CHROOT", &["chroot"]),
    (
        "CAP_SYS_MODULE",
        &["delete_module", "init_module", "finit_module"],
    ),
    ("CAP_SYS_PACCT", &["acct"]),
    (
        "CAP_SYS_PTRACE",
        &[
            "kcmp",
            "pidfd_getfd",
            "process_madvise",
            "process_vm_readv",
            "process_vm_writev",
            "ptrace",
        ],
    ),
    ("CAP_SYS_RAWIO", &["iopl", "ioperm"]),
    (
        "CAP_SYS_TIME",
        &["settimeofday", "stime", "clock_settime", "clock_settime64"],
    ),
    ("CAP_SYS_TTY_CONFIG", &["vhangup"]),
    ("CAP_SYSLOG", &["syslog"]),
    ("CAP_BPF", &["bpf"]),
    ("CAP_PERFMON", &["perf_event_open"]),
];

/// The namespace flags `clone` may not use without CAP_SYS_ADMIN: NEWNS, NEWUTS, NEWIPC,
/// NEWUSER, NEWPID, NEWNET, NEWCGROUP.
const CLONE_NAMESPACES: u64 =
    0x0002_0000 | 0x0400_0000 | 0x0800_0000 | 0x1000_0000 | 0x2000_0000 | 0x4000_0000 | 0x0200_0000;

/// The runtime's default profile (containerd's), for a machine of architecture `arch`.
pub fn runtime_default(arch: &str) -> Profile {
    let allow = |names: &[&str], includes: Filter, excludes: Filter, args: Vec<Arg>| Syscall {
        names: names.iter().map(|n| n.to_string()).collect(),
        name: None,
        action: Action::Allow,
        args,
        errno_ret: None,
        includes,
        excludes,
    };
    let none = Filter::default;
    let caps = |c: &str| Filter {
        caps: vec![c.to_string()],
        ..Filter::default()
    };
    let mut syscalls = vec![allow(ALLOWED, none(), none(), Vec::new())];
    // personality: only PER_LINUX, PER_LINUX32, UNAME26 and their combination, and the query.
    for value in [0x0, 0x0008, 0x20000, 0x20008, 0xffff_ffff] {
        let arg = Arg {
            index: 0,
            value,
            value_two: 0,
            op: Op::Equal,
        };
        syscalls.push(allow(&["personality"], none(), none(), vec![arg]));
    }
    let min_kernel = Filter {
        min_kernel: Some("4.8".into()),
        ..Filter::default()
    };
    syscalls.push(allow(&["ptrace"], min_kernel, none(), Vec::new()));
    let by_arch: &[&str] = match arch {
        "amd64" => &["arch_prctl", "modify_ldt"],
        "arm64" => &[
            "arm_fadvise64_64",
            "arm_sync_file_range",
            "sync_file_range2",
            "breakpoint",
            "cacheflush",
            "set_tls",
        ],
        "riscv64" => &["riscv_flush_icache"],
        _ => &[],
    };
    syscalls.push(allow(by_arch, none(), none(), Vec::new()));
    for (cap, names) in BY_CAPABILITY {
        syscalls.push(allow(names, caps(cap), none(), Vec::new()));
    }
    // Without CAP_SYS_ADMIN: clone without namespace flags (its flags are argument 1 on
    // s390x), and clone3, whose flags are in memory, fails with ENOSYS.
    let flags = Arg {
        index: if arch == "s390x" { 1 } else { 0 },
        value: CLONE_NAMESPACES,
        value_two: 0,
        op: Op::MaskedEqual,
    };
    syscalls.push(allow(
        &["clone"],
        none(),
        caps("CAP_SYS_ADMIN"),
        vec![flags],
    ));
    syscalls.push(Syscall {
        names: vec!["clone3".into()],
        name: None,
        action: Action::Errno,
        args: Vec::new(),
        errno_ret: Some(ENOSYS),
        includes: none(),
        excludes: caps("CAP_SYS_ADMIN"),
    });
    Profile {
        default_action: Action::Errno,
        default_errno_ret: None,
        syscalls,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target<'a>(caps: &'a [String]) -> Target<'a> {
        Target {
            caps,
            arch: "amd64",
            kernel: (6, 1),
        }
    }

    fn outcome_of<'a>(r: &'a Resolved, name: &str) -> Vec<&'a Rule> {
        r.rules.iter().filter(|x| x.name == name).collect()
    }

    #[test]
    fn the_default_profile_depends_on_capabilities() {
        let plain = runtime_default("amd64").resolve(&target(&[]));
        assert_eq!(
            plain.default,
            Outcome {
                action: Action::Errno,
                errno: EPERM
            }
        );
        assert!(outcome_of(&plain, "mount").is_empty());
        assert_eq!(outcome_of(&plain, "arch_prctl").len(), 1);
        let clone3 = outcome_of(&plain, "clone3");
        assert_eq!(clone3[0].outcome.errno, ENOSYS);
        let clone = outcome_of(&plain, "clone");
        assert_eq!(clone.len(), 1);
        assert_eq!(clone[0].args[0].op, Op::MaskedEqual);
        let admin = ["CAP_SYS_ADMIN".to_string()];
        let admin = runtime_default("amd64").resolve(&target(&admin));
        assert_eq!(outcome_of(&admin, "mount").len(), 1);
        assert!(outcome_of(&admin, "clone")[0].args.is_empty());
        assert!(outcome_of(&admin, "clone3")[0].outcome.action == Action::Allow);
    }

    #[test]
    fn a_docker_profile_reads() {
        let json = r#"{
            "defaultAction": "SCMP_ACT_ERRNO",
            "defaultErrnoRet": 1,
            "architectures": ["SCMP_ARCH_X86_64"],
            "syscalls": [
                {"names": ["read", "write"], "action": "SCMP_ACT_ALLOW"},
                {"name": "mkdir", "action": "SCMP_ACT_ERRNO", "errnoRet": 13, "comment": "no"},
                {"names": ["personality"], "action": "SCMP_ACT_ALLOW",
                 "args": [{"index": 0, "value": 8, "op": "SCMP_CMP_EQ"}]},
                {"names": ["reboot"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_BOOT"]}}
            ]
        }"#;
        let p: Profile = serde_json::from_str(json).unwrap();
        let r = p.resolve(&target(&[]));
        assert_eq!(r.rules.len(), 4);
        assert_eq!(outcome_of(&r, "mkdir")[0].outcome.errno, 13);
        assert!(outcome_of(&r, "reboot").is_empty());
    }
}
