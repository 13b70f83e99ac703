//! This program's own file in memory, and the pages of it a long-running process gives back.
//!
//! A position-independent executable carries a table of relocations (`.rela.dyn`: 24 bytes for
//! each pointer the loader fills in at start; 20,000 and more in podvisor's shipped build, about
//! 480 KiB). The loader reads all of it before `main` and nothing reads it again, yet its pages
//! stay mapped, and resident, for as long as the process lives: a fifth of what a long-running
//! `podvisor run` holds of its own file. They are read-only pages of the file, never written,
//! so `madvise(MADV_DONTNEED)` only takes them out of this process's page tables: were anything
//! to read them again, it would fault them back in from the file, unchanged
//! (`forget_relocations`).
//!
//! The same holds for all of the program's read-only segments (its code and its constants):
//! what a run ran once to read its pod and start it (the YAML reader, the planner, the images,
//! the namespaces) stays resident while the run holds the pod for months, though only its loop
//! runs. Once a stretch of work is over, `forget_read_only_pages` takes them all out of the page
//! tables, and what runs next faults back in the pages it runs, from the page cache.
//!
//! PID 1 does the same for every object loaded, the loader and libc too
//! (`forget_loaded_read_only_pages`), in two steps: as it begins, every object's constants and
//! symbol tables and the loader's code (which nothing runs again) go; once its child is
//! spawned, the rest, code included. What it then runs comes back, so that what stays resident
//! while it waits for its child is what that work needs. (The walk itself calls into the loader,
//! `dl_iterate_phdr` asking it for each object's thread-local block: a few of the loader's
//! pages come back during each walk, and go again at its end.)

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
    let page = page_size();
    if page == 0 {
        return Ok(0);
    }
    for (start, len) in tables {
        let (first, end) = (start.div_ceil(page), (start + len) / page);
        if end > first {
            given += forget((first, end), page)?;
        }
    }
    Ok(given)
}

/// This program's program headers and where it was loaded (the bias its addresses are moved
/// by); `None` for a program without a `PT_PHDR` header (a static, non-PIE one).
fn program_headers() -> Option<(usize, &'static [libc::Elf64_Phdr])> {
    // SAFETY: getauxval only reads the auxiliary vector.
    let (phdr, phnum) = unsafe {
        (
            libc::getauxval(libc::AT_PHDR) as usize,
            libc::getauxval(libc::AT_PHNUM) as usize,
        )
    };
    if phdr == 0 || phnum == 0 {
        return None;
    }
    // SAFETY: AT_PHDR and AT_PHNUM are where the kernel mapped this program's program headers
    // and how many there are; they stay mapped (in its first segment) for its whole life.
    let headers: &'static [libc::Elf64_Phdr] =
        unsafe { std::slice::from_raw_parts(phdr as *const libc::Elf64_Phdr, phnum) };
    // Where the program was loaded: the headers' address less the address they name.
    let bias = (headers.iter().find(|h| h.p_type == libc::PT_PHDR))
        .map(|h| phdr.wrapping_sub(h.p_vaddr as usize))?;
    Some((bias, headers))
}

/// The size of a page.
fn page_size() -> usize {
    // SAFETY: getauxval only reads the auxiliary vector.
    unsafe { libc::getauxval(libc::AT_PAGESZ) as usize }
}

/// Takes the pages of this program's read-only segments (its code, its constants, the loader's
/// tables) out of its page tables; returns how many bytes of them it covered. Pages of those
/// segments that this process holds private copies of are left alone: a debugger's breakpoints
/// and the kernel's uprobes are written into such copies, and giving them back would take the
/// breakpoints out. Nothing is given back where `/proc/self/pagemap`, which tells them apart,
/// cannot be read.
pub fn forget_read_only_pages() -> io::Result<usize> {
    let page = page_size();
    let Some((bias, headers)) = program_headers() else {
        return Ok(0);
    };
    if page == 0 {
        return Ok(0);
    }
    let pagemap = std::fs::File::open("/proc/self/pagemap")?;
    forget_segments(&pagemap, bias, headers, page, true)
}

/// `forget_read_only_pages` for every object loaded (the program, the loader, libc and any
/// other library), but the vDSO, which is the kernel's and not a file; returns how many bytes
/// of their read-only segments it covered. With `code` false, the code of the program and of
/// the libraries stays (what runs next needs much of it), and only their constants and symbol
/// tables and the loader's code go.
pub fn forget_loaded_read_only_pages(code: bool) -> io::Result<usize> {
    /// What the walk over the loaded objects needs and gives back.
    struct Walk {
        pagemap: std::fs::File,
        page: usize,
        code: bool,
        /// Where the kernel mapped the vDSO's ELF header, and the loader (0 without them).
        vdso: usize,
        loader: usize,
        given: usize,
        error: Option<io::Error>,
    }
    /// Called by `dl_iterate_phdr` for each loaded object, under the loader's lock (no object
    /// is unloaded meanwhile); 1 stops the walk.
    extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: `dl_iterate_phdr` passes a valid entry for the call's duration and the
        // `data` it was given: the `Walk` below, borrowed by nothing else meanwhile.
        let (info, walk) = unsafe { (&*info, &mut *data.cast::<Walk>()) };
        if info.dlpi_phdr.is_null() || info.dlpi_phnum == 0 {
            return 0;
        }
        // The vDSO's program headers follow its ELF header, in its first page.
        if walk.vdso != 0 && (info.dlpi_phdr as usize).wrapping_sub(walk.vdso) < walk.page {
            return 0;
        }
        // SAFETY: the object's program headers, mapped while it is loaded (the whole call).
        let headers = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum.into()) };
        let bias = info.dlpi_addr as usize;
        let code = walk.code || (walk.loader != 0 && bias == walk.loader);
        match forget_segments(&walk.pagemap, bias, headers, walk.page, code) {
            Ok(n) => {
                walk.given += n;
                0
            }
            Err(e) => {
                walk.error = Some(e);
                1
            }
        }
    }
    let page = page_size();
    if page == 0 {
        return Ok(0);
    }
    let mut walk = Walk {
        pagemap: std::fs::File::open("/proc/self/pagemap")?,
        page,
        code,
        // SAFETY: getauxval only reads the auxiliary vector.
        vdso: unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) as usize },
        // SAFETY: as above.
        loader: unsafe { libc::getauxval(libc::AT_BASE) as usize },
        given: 0,
        error: None,
    };
    // SAFETY: `each` matches the callback's type and only reads what it is given; `walk`
    // outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(each), (&raw mut walk).cast()) };
    match walk.error {
        Some(e) => Err(e),
        None => Ok(walk.given),
    }
}

/// `forget_uncopied` over each read-only loaded segment of one object (`bias`: where it was
/// loaded, `headers`: its program headers), its code too if `code`.
fn forget_segments(
    pagemap: &std::fs::File,
    bias: usize,
    headers: &[libc::Elf64_Phdr],
    page: usize,
    code: bool,
) -> io::Result<usize> {
    let mut given = 0;
    let segments = (headers.iter()).filter(|h| {
        h.p_type == libc::PT_LOAD
            && h.p_flags & libc::PF_W == 0
            && (code || h.p_flags & libc::PF_X == 0)
    });
    for h in segments {
        let at = bias.wrapping_add(h.p_vaddr as usize);
        let (first, end) = (at.div_ceil(page), (at + h.p_memsz as usize) / page);
        given += forget_uncopied(pagemap, (first, end), page)?;
    }
    Ok(given)
}

/// Takes the pages `[first, end)` (page numbers) of a read-only segment out of the page tables,
/// but for those `pagemap` says are private copies; returns how many bytes it covered. It reads
/// the entries a page of them (512) at a time and allocates nothing: it runs right after the
/// heap was given back.
fn forget_uncopied(
    pagemap: &std::fs::File,
    (first, end): (usize, usize),
    page: usize,
) -> io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut given = 0;
    // The run of pages not copied so far, `[from, to)`.
    let mut run: Option<(usize, usize)> = None;
    let mut entries = [0u8; 4096];
    let mut next = first;
    while next < end {
        let n = (end - next).min(entries.len() / 8);
        pagemap.read_exact_at(&mut entries[..n * 8], next as u64 * 8)?;
        for (i, entry) in entries[..n * 8].chunks_exact(8).enumerate() {
            let p = next + i;
            if copied(u64::from_le_bytes(entry.try_into().expect("8 bytes"))) {
                if let Some(r) = run.take() {
                    given += forget(r, page)?;
                }
            } else {
                run = Some((run.map_or(p, |r| r.0), p + 1));
            }
        }
        next += n;
    }
    if let Some(r) = run {
        given += forget(r, page)?;
    }
    Ok(given)
}

/// Whether a page's entry in `/proc/self/pagemap` is that of a private copy: present (bit 63)
/// and not a page of a file (bit 61), or swapped out (bit 62).
fn copied(entry: u64) -> bool {
    let (present, swapped, file) = (entry >> 63 == 1, entry >> 62 & 1 == 1, entry >> 61 & 1 == 1);
    (present && !file) || swapped
}

/// Takes the pages `[from, to)` (page numbers) out of this process's page tables: whole pages
/// of a read-only, file-backed segment of this program or a library it loaded that it has no
/// private copy of (the relocation tables, which nothing writes, or pages `/proc/self/pagemap`
/// says are the file's).
fn forget((from, to): (usize, usize), page: usize) -> io::Result<usize> {
    // SAFETY: the caller names whole pages of a read-only, file-backed segment of a loaded
    // object that this process has no private copy of: MADV_DONTNEED only takes them out of
    // its page tables, and a later read faults in the same bytes from the file.
    let ret = unsafe {
        libc::madvise(
            (from * page) as *mut libc::c_void,
            (to - from) * page,
            libc::MADV_DONTNEED,
        )
    };
    if ret == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok((to - from) * page)
}

/// Where this program's relocation tables are in memory (address, length): only those that
/// lie wholly inside one of its loaded segments that is not writable.
fn relocation_tables() -> Vec<(usize, usize)> {
    let Some((bias, headers)) = program_headers() else {
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

/// Tests that give back pages of the test program, or check what is resident: one at a time.
#[cfg(test)]
pub(crate) static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

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
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
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
        // The loader read them all, but another test may have given them back since: read
        // again, they are resident until given back.
        for page in tables.iter().flat_map(|&t| pages(t)) {
            // SAFETY: (test) a byte of a table, in a mapped, readable segment.
            let _ = unsafe { std::ptr::read_volatile(page as *const u8) };
            assert!(resident(page), "{page:#x} is not resident once read");
        }
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

    /// A table of constants, in a read-only segment of the test program.
    static TABLE: [u8; 512 * 1024] = [7; 512 * 1024];

    #[test]
    fn read_only_pages_are_given_back_but_not_private_copies_of_them() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let table = std::hint::black_box(&TABLE);
        let (start, len) = (table.as_ptr() as usize, table.len());
        // The pages of the 64 KiB windows wholly inside the table (see above).
        let window = 64 * 1024;
        let pages: Vec<usize> = (start.div_ceil(window) * window..(start + len) / window * window)
            .step_by(4096)
            .collect();
        assert!(pages.len() >= 64, "table at {start:#x}");
        let sum: usize = pages.iter().map(|&p| unsafe_read(p) as usize).sum();
        assert_eq!(sum, 7 * pages.len());
        assert!(pages.iter().all(|&p| resident(p)));
        // A private copy of one page, as a debugger's breakpoint makes: written through
        // /proc/self/mem, which writes into read-only mappings as ptrace does.
        let copied = pages[pages.len() / 2];
        {
            use std::os::unix::fs::FileExt;
            let mem = std::fs::OpenOptions::new()
                .write(true)
                .open("/proc/self/mem")
                .unwrap();
            mem.write_all_at(&[9], copied as u64).unwrap();
        }
        let given = forget_read_only_pages().unwrap();
        assert!(given >= len - 2 * window, "given {given}");
        let left: Vec<usize> = pages.iter().copied().filter(|&p| resident(p)).collect();
        assert_eq!(left, vec![copied], "pages still resident");
        // What they hold reads the same: the file's bytes, and the private copy's.
        assert_eq!(unsafe_read(copied), 9);
        assert_eq!(unsafe_read(pages[0]), 7);
    }

    /// The byte at `addr`, read as it is in memory.
    fn unsafe_read(addr: usize) -> u8 {
        // SAFETY: (test) an address inside `TABLE`, mapped and readable.
        unsafe { std::ptr::read_volatile(addr as *const u8) }
    }
}
