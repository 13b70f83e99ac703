//! The memory of a run and its keeper, which may hold a pod for months under live restore:
//! the heap a keeper's starts freed goes back to the kernel, and neither keeps its relocation
//! tables or the code it ran only to start the pod in its page tables.

use std::path::Path;

use crate::harness::*;
use crate::live_restore::{keepers, sleeper, stop_and_find_nothing_left, LIVE};
use crate::run::{heap_kib, sleepers, started};

/// A hundred containers started under a keeper: what the keeper allocated to start them and
/// freed once they ran goes back to the kernel when it has nothing left to do (a second
/// without events), so its heap's resident size falls below what it was while they started.
#[test]
fn a_keeper_gives_back_the_heap_its_starts_freed() {
    let r = PodRun::new(&pod("Never", &sleepers(100)));
    let state = r.dir.file("state");
    let mut p = r.cmd(&LIVE).start();
    let mut keeper = 0;
    let mut peak = 0;
    wait_until("a hundred started", || {
        if keeper == 0 {
            keeper = keepers(&state).first().map_or(0, |k| k.0);
        }
        if keeper != 0 {
            peak = peak.max(heap_kib(keeper));
        }
        started(&r) == 100
    });
    peak = peak.max(heap_kib(keeper));
    assert!(peak > 0, "no heap in keeper {keeper}");
    wait_until("the keeper's heap given back", || heap_kib(keeper) < peak);
    stop_and_find_nothing_left(&r, &mut p);
    p.assert_no_leftovers();
}

/// A run and its keeper, which may hold a pod for months, keep no page of their relocation
/// tables once started: only the loader reads them (`process::sys::forget_relocations`). And
/// once they have nothing left to do, they take their own code out of their page tables (what
/// they ran to read, prepare and start the pod): each is held where it first settles, and its
/// resident code then falls by a quarter at least (a fault maps a whole folio of the file back
/// in: 64 KiB and more). The pod goes on as before.
#[test]
fn a_run_and_its_keeper_give_back_their_relocation_tables_and_idle_code() {
    for point in ["run.settle@1", "keeper.settle@1"] {
        let r = sleeper();
        let state = r.dir.file("state");
        let gate = r.dir.file("gate");
        let mut p = (r.cmd(&LIVE))
            .env("PODVISOR_STALL", point)
            .env("PODVISOR_STALL_GATE", &gate)
            .start();
        wait_until("held as it settles", || gate.exists());
        let pid = match point.starts_with("run") {
            true => p.init_pid(),
            false => keepers(&state)[0].0,
        };
        let (resident, pages) = relocation_pages(pid);
        assert!(pages >= 16, "{point}: {pages} pages of relocations");
        assert_eq!(
            resident, 0,
            "{point}: {resident} of {pages} pages still resident"
        );
        let held = code_kib(pid);
        assert!(held >= 256, "{point}: {held} KiB of code resident");
        std::fs::remove_file(&gate).unwrap();
        wait_until("its code given back", || code_kib(pid) * 4 <= held * 3);
        r.wait_event("app", "Started", 1);
        let out = client(&r, &["status"]);
        assert_eq!(out.code(), 0, "{out:?}");
        stop_and_find_nothing_left(&r, &mut p);
        p.assert_no_leftovers();
    }
}

/// Of the pages of `.rela.dyn` of process `pid`'s program that lie in 64 KiB windows of its
/// address space wholly inside the table: how many are in its page tables (/proc/PID/pagemap),
/// and how many there are. (The kernel's fault-around maps the cached pages of a window in on
/// any fault in it: the table's pages that share a window with other data may come back when
/// that data is read.)
fn relocation_pages(pid: i32) -> (usize, usize) {
    use std::io::{Read, Seek, SeekFrom};
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    let (offset, size) = elf_section(&std::fs::read(&exe).unwrap(), ".rela.dyn")
        .unwrap_or_else(|| panic!("{}: no .rela.dyn", exe.display()));
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let mut pagemap = std::fs::File::open(format!("/proc/{pid}/pagemap")).unwrap();
    let (mut resident, mut pages) = (0, 0);
    // The mapping of the program's file that holds the table: (address, end, file offset).
    let (start, end, off) = maps
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (range, off, path) = (f[0], u64::from_str_radix(f[2], 16).ok()?, f.get(5)?);
            let (start, end) = range.split_once('-')?;
            let (start, end) = (
                u64::from_str_radix(start, 16).ok()?,
                u64::from_str_radix(end, 16).ok()?,
            );
            (Path::new(path) == exe && offset >= off && offset + size <= off + (end - start))
                .then_some((start, end, off))
        })
        .unwrap_or_else(|| panic!("{}: .rela.dyn not mapped", exe.display()));
    let (first, last) = (start + (offset - off), start + (offset + size - off));
    assert!(last <= end);
    let window = 64 * 1024;
    for va in (first.div_ceil(window) * window..last / window * window).step_by(4096) {
        pagemap.seek(SeekFrom::Start(va / 4096 * 8)).unwrap();
        let mut entry = [0u8; 8];
        pagemap.read_exact(&mut entry).unwrap();
        pages += 1;
        resident += (u64::from_le_bytes(entry) >> 63) as usize;
    }
    (resident, pages)
}

/// The file offset and size of section `name` of a 64-bit little-endian ELF file.
fn elf_section(elf: &[u8], name: &str) -> Option<(u64, u64)> {
    let u16_at = |at: usize| Some(u16::from_le_bytes(elf.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_le_bytes(elf.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(elf.get(at..at + 8)?.try_into().ok()?));
    let shoff = u64_at(0x28)? as usize;
    let (size, count, names) = (u16_at(0x3a)? as usize, u16_at(0x3c)?, u16_at(0x3e)?);
    let header = |i: u16| shoff + i as usize * size;
    let names_at = u64_at(header(names) + 0x18)? as usize;
    (0..count).find_map(|i| {
        let at = names_at + u32_at(header(i))? as usize;
        let end = at + elf.get(at..)?.iter().position(|&b| b == 0)?;
        if elf.get(at..end)? != name.as_bytes() {
            return None;
        }
        Some((u64_at(header(i) + 0x18)?, u64_at(header(i) + 0x20)?))
    })
}
