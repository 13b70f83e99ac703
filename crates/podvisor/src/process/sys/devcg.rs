//! A cgroup v2 device program: loaded with bpf(2) (`BPF_PROG_TYPE_CGROUP_DEVICE`) and attached
//! to a container's cgroup, as runc attaches its device filter. The program itself is made in
//! `podvisor_core::devices`.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_ATTACH: libc::c_long = 8;
const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
const BPF_CGROUP_DEVICE: u32 = 6;
/// Programs of the cgroups above run too, and one may be attached beside others.
const BPF_F_ALLOW_MULTI: u32 = 2;

/// The head of `union bpf_attr` for `BPF_PROG_LOAD` (the fields after these stay zero).
#[repr(C)]
#[derive(Default)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// `union bpf_attr` for `BPF_PROG_ATTACH`.
#[repr(C)]
#[derive(Default)]
struct ProgAttach {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
    replace_bpf_fd: u32,
}

/// Loads `program` (eBPF instructions as the kernel reads them) and attaches it to the
/// cgroup directory `dir`: from then on every open and mknod of a device in that cgroup asks
/// it. The cgroup holds the program; its descriptor here is closed.
pub fn attach_device_program(dir: &Path, program: &[u64]) -> io::Result<()> {
    let cgroup = std::fs::File::open(dir)?;
    let license = c"Apache";
    let mut name = [0u8; 16];
    name[..9].copy_from_slice(b"podvisor\0");
    let load = ProgLoad {
        prog_type: BPF_PROG_TYPE_CGROUP_DEVICE,
        insn_cnt: program.len() as u32,
        insns: program.as_ptr() as u64,
        license: license.as_ptr() as u64,
        prog_name: name,
        ..ProgLoad::default()
    };
    // SAFETY: bpf(2) reads `load`, whose pointers (the instructions, the license) stay
    // valid across the call.
    let fd = unsafe { bpf(BPF_PROG_LOAD, &load) }?;
    // SAFETY: BPF_PROG_LOAD returns a new descriptor, owned here from now on.
    let prog = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let attach = ProgAttach {
        target_fd: cgroup.as_raw_fd() as u32,
        attach_bpf_fd: prog.as_raw_fd() as u32,
        attach_type: BPF_CGROUP_DEVICE,
        attach_flags: BPF_F_ALLOW_MULTI,
        ..ProgAttach::default()
    };
    // SAFETY: bpf(2) reads `attach`, which names two descriptors open across the call.
    unsafe { bpf(BPF_PROG_ATTACH, &attach) }?;
    Ok(())
}

/// bpf(2) with command `cmd` on `attr` (`union bpf_attr`, of its size).
///
/// # Safety
/// `attr` must be the command's attribute, and what its pointers and descriptors name valid
/// across the call.
unsafe fn bpf<T>(cmd: libc::c_long, attr: &T) -> io::Result<libc::c_long> {
    // SAFETY: the caller's word; the kernel reads `size_of::<T>()` bytes of `attr`.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *const T,
            std::mem::size_of::<T>(),
        )
    };
    match ret {
        r if r < 0 => Err(io::Error::last_os_error()),
        r => Ok(r),
    }
}
