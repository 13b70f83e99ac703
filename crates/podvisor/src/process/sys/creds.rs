//! What a container's process becomes just before exec: its user and groups, its capability
//! sets, `no_new_privs` and its seccomp filters, set by the child (between clone and exec) in
//! runc's order (`finalizeNamespace` and `standard_init_linux.go`), with raw system calls only:
//! the child shares podvisor's memory, and glibc's `setuid` family would signal podvisor's
//! other threads (its "setxid" broadcast).
//!
//! The order, and why:
//! 1. `no_new_privs`, when asked for.
//! 2. Without `no_new_privs`, the seccomp filters now, while the process still has
//!    CAP_SYS_ADMIN (loading a filter needs it or `no_new_privs`).
//! 3. stdout and stderr handed to the user (a pipe podvisor made is root's), so that the
//!    program may reopen `/dev/stdout`.
//! 4. The bounding set dropped to the container's capabilities while it may still drop them
//!    (CAP_SETPCAP).
//! 5. Groups, gid, uid, keeping the permitted capabilities across the change
//!    (`PR_SET_KEEPCAPS`); then the effective and permitted sets set, the inheritable and
//!    ambient ones emptied. A non-root program keeps none of them across its exec (it has no
//!    file capabilities); root keeps the bounding set.
//! 6. The parent-death signal again: a change of credentials clears it.
//! 7. With `no_new_privs`, the seccomp filters last, as close to exec as can be.

use std::io;

/// One classic BPF instruction: code, jump if true, jump if false, value. Laid out as the
/// kernel's `struct sock_filter` (linux/filter.h), so that a filter compiled once for the run is
/// loaded from where it lies: nothing is copied for each process that gets it (a profile is
/// some 12 KiB, and an exec probe starts a process every period). It goes to a keeper as the
/// tuple `(code, jt, jf, k)`.
#[repr(C)]
#[cfg_attr(feature = "full", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "full",
    serde(from = "(u16, u8, u8, u32)", into = "(u16, u8, u8, u32)")
)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BpfInstruction {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

const _: () = assert!(
    std::mem::size_of::<BpfInstruction>() == std::mem::size_of::<libc::sock_filter>()
        && std::mem::align_of::<BpfInstruction>() == std::mem::align_of::<libc::sock_filter>()
        && std::mem::offset_of!(BpfInstruction, jt) == std::mem::offset_of!(libc::sock_filter, jt)
        && std::mem::offset_of!(BpfInstruction, jf) == std::mem::offset_of!(libc::sock_filter, jf)
        && std::mem::offset_of!(BpfInstruction, k) == std::mem::offset_of!(libc::sock_filter, k)
);

impl From<(u16, u8, u8, u32)> for BpfInstruction {
    fn from((code, jt, jf, k): (u16, u8, u8, u32)) -> BpfInstruction {
        BpfInstruction { code, jt, jf, k }
    }
}

impl From<BpfInstruction> for (u16, u8, u8, u32) {
    fn from(i: BpfInstruction) -> (u16, u8, u8, u32) {
        (i.code, i.jt, i.jf, i.k)
    }
}

/// The credentials and restrictions a container's process gets.
#[cfg_attr(feature = "full", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "full", serde(deny_unknown_fields))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// The capabilities it may have (bit N for capability N): its bounding set, and its
    /// effective and permitted sets until exec.
    pub capabilities: u64,
    /// The highest capability of this kernel (the bounding set is dropped up to it).
    pub cap_last: u32,
    /// Take on `uid`, `gid`, `groups` and `capabilities`. Without it (podvisor runs as a user,
    /// without user namespaces) the process keeps podvisor's identity and its (absent)
    /// capabilities; `no_new_privs` and seccomp still apply.
    pub change_identity: bool,
    /// Set its supplementary groups (not in a user namespace that podvisor made without
    /// root: the kernel denies setgroups there, as an unprivileged gid map requires).
    pub set_groups: bool,
    pub no_new_privs: bool,
    /// Seccomp filters, loaded in this order (the kernel runs them all, the strictest result
    /// wins; of equal ones, the last loaded's errno).
    /// Shared by the containers of one profile: compiled once for the run.
    pub seccomp: std::sync::Arc<Vec<Vec<BpfInstruction>>>,
}

/// `Credentials` as the child reads them: pointers into the parent's prepared data.
pub(super) struct CredsSpec {
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) groups: *const libc::gid_t,
    pub(super) group_count: usize,
    pub(super) capabilities: u64,
    pub(super) cap_last: u32,
    pub(super) change_identity: bool,
    pub(super) set_groups: bool,
    pub(super) no_new_privs: bool,
    pub(super) filters: *const libc::sock_fprog,
    pub(super) filter_count: usize,
}

/// What the parent keeps alive for `CredsSpec` until the child has exec'd.
pub(super) struct PreparedCreds {
    fprogs: Vec<libc::sock_fprog>,
    /// Owns what `fprogs` point at (its shared `seccomp`).
    creds: Credentials,
}

impl PreparedCreds {
    pub(super) fn new(creds: &Credentials) -> io::Result<PreparedCreds> {
        let creds = creds.clone();
        let mut fprogs = Vec::with_capacity(creds.seccomp.len());
        for p in creds.seccomp.iter() {
            let len = u16::try_from(p.len()).map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidInput, "a seccomp filter is too long")
            })?;
            fprogs.push(libc::sock_fprog {
                len,
                // The layout is `sock_filter`'s (see `BpfInstruction`); the kernel only reads
                // the program, which `creds` keeps alive.
                filter: p.as_ptr().cast::<libc::sock_filter>().cast_mut(),
            });
        }
        Ok(PreparedCreds { fprogs, creds })
    }

    /// The child's view; valid while `self` lives and is not moved.
    pub(super) fn spec(&self) -> CredsSpec {
        CredsSpec {
            uid: self.creds.uid,
            gid: self.creds.gid,
            groups: self.creds.groups.as_ptr(),
            group_count: self.creds.groups.len(),
            capabilities: self.creds.capabilities,
            cap_last: self.creds.cap_last,
            change_identity: self.creds.change_identity,
            set_groups: self.creds.set_groups,
            no_new_privs: self.creds.no_new_privs,
            filters: self.fprogs.as_ptr(),
            filter_count: self.fprogs.len(),
        }
    }
}

/// A step of the child that failed: what it was.
type Failed = (&'static std::ffi::CStr, *const libc::c_char);

fn check(ret: libc::c_long, step: &'static std::ffi::CStr) -> Result<(), Failed> {
    match ret {
        -1 => Err((step, std::ptr::null())),
        _ => Ok(()),
    }
}

/// Steps 1 to 6 (see the module's doc), in the child, after its mounts and before its signal
/// mask is given back.
///
/// # Safety
/// In the child between clone and exec, on the parent's prepared `c`.
pub(super) unsafe fn become_user(c: &CredsSpec) -> Result<(), Failed> {
    // SAFETY: prctl, fchown, capset and the set*id system calls with plain values and the
    // parent's live arrays.
    unsafe {
        if c.no_new_privs {
            let ret = libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
            check(ret.into(), c"set no_new_privs")?;
        } else {
            load_filters(c)?;
        }
        if !c.change_identity {
            return Ok(());
        }
        if c.uid != 0 {
            for fd in [1, 2] {
                // Pipes of podvisor's: the user's now. /dev/null and terminals are left, and,
                // as runc does, a pipe whose owner or new owner its user namespace does not
                // map (EPERM, EINVAL: a rootless exec's pipe made by another user).
                let mut st: libc::stat = std::mem::zeroed();
                if libc::fstat(fd, &mut st) == 0
                    && st.st_mode & libc::S_IFMT == libc::S_IFIFO
                    && libc::fchown(fd, c.uid, c.gid) == -1
                {
                    let errno = *libc::__errno_location();
                    if errno != libc::EPERM && errno != libc::EINVAL && errno != libc::EROFS {
                        return Err((c"hand its stdio to its user", std::ptr::null()));
                    }
                }
            }
        }
        for cap in 0..=c.cap_last.min(63) {
            if c.capabilities & (1u64 << cap) == 0 {
                let ret = libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0);
                check(ret.into(), c"drop from its bounding set")?;
            }
        }
        check(
            libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0).into(),
            c"keep capabilities",
        )?;
        if c.set_groups {
            let ret = libc::syscall(libc::SYS_setgroups, c.group_count, c.groups);
            check(ret, c"set its groups")?;
        }
        let ret = libc::syscall(libc::SYS_setresgid, c.gid, c.gid, c.gid);
        check(ret, c"set its gid")?;
        let ret = libc::syscall(libc::SYS_setresuid, c.uid, c.uid, c.uid);
        check(ret, c"set its uid")?;
        check(
            libc::prctl(libc::PR_SET_KEEPCAPS, 0, 0, 0, 0).into(),
            c"keep capabilities",
        )?;
        set_capabilities(c.capabilities)?;
        let clear = libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong;
        // A kernel without ambient capabilities (before 4.3) has none to clear.
        if libc::prctl(libc::PR_CAP_AMBIENT, clear, 0, 0, 0) == -1
            && *libc::__errno_location() != libc::EINVAL
        {
            return Err((c"clear its ambient capabilities", std::ptr::null()));
        }
        let pdeath = libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        check(pdeath.into(), c"prctl")?;
    }
    Ok(())
}

/// Step 7: the filters, when `no_new_privs` let them wait until now.
///
/// # Safety
/// In the child between clone and exec, on the parent's prepared `c`.
pub(super) unsafe fn last_filters(c: &CredsSpec) -> Result<(), Failed> {
    if c.no_new_privs {
        // SAFETY: as `load_filters`.
        unsafe { load_filters(c) }
    } else {
        Ok(())
    }
}

/// Loads each filter with `seccomp(SECCOMP_SET_MODE_FILTER)`.
///
/// # Safety
/// `c.filters` points at `c.filter_count` programs the parent keeps alive.
unsafe fn load_filters(c: &CredsSpec) -> Result<(), Failed> {
    for i in 0..c.filter_count {
        // SAFETY: a `sock_fprog` of the parent's, pointing at its live instructions.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                0,
                c.filters.add(i),
            )
        };
        check(ret, c"load its seccomp filter")?;
    }
    Ok(())
}

/// `capset(2)`, version 3: effective and permitted `caps`, no inheritable.
///
/// # Safety
/// In the child (sets this process's capabilities).
unsafe fn set_capabilities(caps: u64) -> Result<(), Failed> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let low = caps as u32;
    let high = (caps >> 32) as u32;
    let data = [
        Data {
            effective: low,
            permitted: low,
            inheritable: 0,
        },
        Data {
            effective: high,
            permitted: high,
            inheritable: 0,
        },
    ];
    // SAFETY: capset with a version-3 header and its two data words, on the stack.
    let ret = unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
    check(ret, c"set its capabilities")
}

#[cfg(all(test, feature = "full"))]
mod tests {
    use super::*;

    #[test]
    fn an_instruction_goes_to_a_keeper_as_the_tuple_it_was() {
        // A keeper of the release before reads `(code, jt, jf, k)` as a JSON array.
        let i = BpfInstruction::from((0x15, 1, 0, 0xc000_003e));
        let text = serde_json::to_string(&i).unwrap();
        assert_eq!(text, "[21,1,0,3221225534]");
        assert_eq!(serde_json::from_str::<BpfInstruction>(&text).unwrap(), i);
    }

    #[test]
    fn a_prepared_filter_is_the_shared_program_itself() {
        let program: Vec<BpfInstruction> = vec![
            (0x20, 0, 0, 4).into(),
            (0x06, 0, 0, libc::SECCOMP_RET_ALLOW).into(),
        ];
        let creds = Credentials {
            uid: 0,
            gid: 0,
            groups: vec![1, 2],
            capabilities: 0,
            cap_last: 40,
            change_identity: true,
            set_groups: true,
            no_new_privs: true,
            seccomp: std::sync::Arc::new(vec![program]),
        };
        let prepared = PreparedCreds::new(&creds).unwrap();
        let spec = prepared.spec();
        assert_eq!(spec.filter_count, 1);
        // SAFETY: `spec.filters` points at the one `sock_fprog` `prepared` holds.
        let fprog = unsafe { &*spec.filters };
        assert_eq!(fprog.len, 2);
        assert_eq!(
            fprog.filter.cast_const().cast::<BpfInstruction>(),
            creds.seccomp[0].as_ptr(),
            "no copy"
        );
        // SAFETY: the program's two instructions, alive in `creds`.
        let second = unsafe { *fprog.filter.add(1) };
        assert_eq!((second.code, second.k), (0x06, libc::SECCOMP_RET_ALLOW));
    }
}
