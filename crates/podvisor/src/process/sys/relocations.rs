//! The relocation tables of this program, given back once the loader has applied them.
//!
//! A position-independent executable carries a table of relocations (`.rela.dyn`: 24 bytes for
//! each pointer the loader fills in at start; 20,000 and more in podvisor's shipped build, about
//! 480 KiB). The loader reads all of it before `main` and nothing reads it again, yet its pages
//! stay mapped, and resident, for as long as the process lives: a fifth of what a long-running
//! `podvisor run` holds of its own file. They are read-only pages of the file, never written,
//! so `madvise(MADV_DONTNEED)` only takes them out of this process's page tables: were anything
//! to read them again, it would fault them back in from the file, unchanged.

use std::io;

// The dynamic section's tags of relocation tables (elf.h).
const DT_NULL: i64 = 0;
const DT_PLTRELSZ: i64 = 2;
const DT_RELA: i64 = 7;
const DT_RELASZ: i64 = 8;
const DT_REL: i64 = 17;
const DT_RELSZ: i64 = 18;
const DT_JMPREL: i64 = 23;
const DT_RELRSZ: i64 = 35;
const DT_RELR: i64 = 36;

/// An entry of the dynamic section (`Elf64_Dyn`).
#[repr(C)]
struct Dyn {
    tag: i64,
    value: u64,
}

/// Gives back the pages that hold only this program's relocation tables; returns how many
/// bytes were given back (0 for a program without them, such as a static non-PIE one).
pub fn forget_relocations() -> io::Result<usize> {
    let tables = relocation_tables();
    let mut given = 0;
    // SAFETY: getauxval only reads the auxiliary vector.
    let page = unsafe { libc::getauxval(libc::AT_PAGESZ) } as usize;
    if page == 0 {
        return Ok(0);
    }
    for (start, len) in tables {
        let first = start.div_ceil(page) * page;
        let end = (start + len) / page * page;
        if end <= first {
            continue;
        }
        // SAFETY: the range is whole pages of a read-only, file-backed segment of this program
        // (`relocation_tables` checks it), which nothing writes; MADV_DONTNEED on them only
        // unmaps them, and a later read faults in the same bytes from the file.
        let ret =
            unsafe { libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_DONTNEED) };
        if ret == -1 {
            return Err(io::Error::last_os_error());
        }
        given += end - first;
    }
    Ok(given)
}

/// Where this program's relocation tables are in memory (address, length): only those that
/// lie wholly inside one of its loaded segments that is not writable.
fn relocation_tables() -> Vec<(usize, usize)> {
    // SAFETY: getauxval only reads the auxiliary vector.
    let (phdr, phnum) = unsafe {
        (
            libc::getauxval(libc::AT_PHDR) as usize,
            libc::getauxval(libc::AT_PHNUM) as usize,
        )
    };
    if phdr == 0 || phnum == 0 {
        return Vec::new();
    }
    // SAFETY: AT_PHDR and AT_PHNUM are where the kernel mapped this program's program headers
    // and how many there are; they stay mapped (in its first segment) for its whole life.
    let headers: &[libc::Elf64_Phdr] =
        unsafe { std::slice::from_raw_parts(phdr as *const libc::Elf64_Phdr, phnum) };
    // Where the program was loaded: the headers' address less the address they name.
    let Some(bias) = (headers.iter().find(|h| h.p_type == libc::PT_PHDR))
        .map(|h| phdr.wrapping_sub(h.p_vaddr as usize))
    else {
        return Vec::new();
    };
    let Some(dynamic) = headers.iter().find(|h| h.p_type == libc::PT_DYNAMIC) else {
        return Vec::new();
    };
    let (mut rela, mut rel, mut jmprel, mut relr) = ((0, 0), (0, 0), (0, 0), (0, 0));
    let mut entry = bias.wrapping_add(dynamic.p_vaddr as usize) as *const Dyn;
    let entries = dynamic.p_memsz as usize / std::mem::size_of::<Dyn>();
    for _ in 0..entries {
        // SAFETY: `entry` is within the dynamic section (PT_DYNAMIC, `entries` of them), which
        // is mapped for the program's whole life; it is only read.
        let Dyn { tag, value } = unsafe { std::ptr::read(entry) };
        let value = value as usize;
        match tag {
            DT_NULL => break,
            DT_RELA => rela.0 = value,
            DT_RELASZ => rela.1 = value,
            DT_REL => rel.0 = value,
            DT_RELSZ => rel.1 = value,
            DT_JMPREL => jmprel.0 = value,
            DT_PLTRELSZ => jmprel.1 = value,
            DT_RELR => relr.0 = value,
            DT_RELRSZ => relr.1 = value,
            _ => {}
        }
        // SAFETY: stays within, or one past, the dynamic section (the loop's bound).
        entry = unsafe { entry.add(1) };
    }
    let segments: Vec<(usize, usize)> = (headers.iter())
        .filter(|h| h.p_type == libc::PT_LOAD && h.p_flags & libc::PF_W == 0)
        .map(|h| (h.p_vaddr as usize, h.p_filesz as usize))
        .collect();
    [rela, rel, jmprel, relr]
        .into_iter()
        .filter(|&(at, len)| at != 0 && len != 0)
        .filter_map(|(at, len)| {
            // glibc's loader rewrites these entries of the program's dynamic section to the
            // addresses they name once loaded; others leave the addresses the file names.
            let vaddr = match at >= bias && bias != 0 {
                true => at - bias,
                false => at,
            };
            let inside = segments
                .iter()
                .any(|&(s, n)| vaddr >= s && vaddr.checked_add(len).is_some_and(|e| e <= s + n));
            inside.then_some((bias.wrapping_add(vaddr), len))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the page at `addr` is in this process's page tables (/proc/self/pagemap).
    fn resident(addr: usize) -> bool {
        use std::io::{Read, Seek, SeekFrom};
        let mut f = std::fs::File::open("/proc/self/pagemap").unwrap();
        f.seek(SeekFrom::Start((addr / 4096 * 8) as u64)).unwrap();
        let mut b = [0u8; 8];
        f.read_exact(&mut b).unwrap();
        u64::from_le_bytes(b) >> 63 == 1
    }

    #[test]
    fn the_tables_of_this_test_program_are_found_and_given_back() {
        // The test harness is a position-independent executable, with relocations.
        let tables = relocation_tables();
        let total: usize = tables.iter().map(|t| t.1).sum();
        assert!(total > 64 * 1024, "relocation tables: {tables:x?}");
        // The pages of the 64 KiB windows wholly inside a table: the kernel's fault-around maps
        // the cached pages of a window in on any fault in it, so a table's pages that share one
        // with other data may come back when that data is read (harmless, and not tested).
        let pages = |(start, len): (usize, usize)| {
            let window = 64 * 1024;
            (start.div_ceil(window) * window..(start + len) / window * window).step_by(4096)
        };
        let inner = tables.iter().flat_map(|&t| pages(t)).count();
        assert!(inner >= 16, "relocation tables: {tables:x?}");
        // The loader read them all: they are resident until given back.
        let before = tables
            .iter()
            .flat_map(|&t| pages(t))
            .filter(|&p| resident(p));
        assert!(before.count() > 0, "no page of {tables:x?} was resident");
        let given = forget_relocations().unwrap();
        assert!(given > 0 && given <= total, "given {given} of {total}");
        for (start, len) in tables {
            for page in pages((start, len)) {
                assert!(!resident(page), "{page:#x} is still resident");
            }
            // And what they hold can still be read (from the file), as before.
            // SAFETY: (test) the table's first byte, in a mapped, readable segment.
            let _ = unsafe { std::ptr::read_volatile(start as *const u8) };
        }
    }
}
