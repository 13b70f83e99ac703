//! Freed heap memory given back to the kernel.
//!
//! glibc keeps the pages of freed memory inside its heap resident (only a free end of the heap
//! goes back, past a threshold): what a run allocated while it started a hundred containers
//! and freed once they ran stays in its resident size for as long as it holds the pod, unless
//! it asks glibc to give those pages back (`malloc_trim`).

/// Gives back to the kernel the whole pages of freed memory in the allocator's heaps; returns
/// whether some were given back. Other C libraries than glibc: nothing, `false`.
#[cfg(target_env = "gnu")]
pub fn give_back_free_heap() -> bool {
    // SAFETY: malloc_trim works on the allocator's own free lists under its lock; it unmaps
    // (MADV_DONTNEED) only whole pages of free chunks and touches no memory in use.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// Gives back freed heap memory (glibc only: here, nothing).
#[cfg(not(target_env = "gnu"))]
pub fn give_back_free_heap() -> bool {
    false
}

/// One heap for every thread of the process (glibc's `M_ARENA_MAX` of 1). Why: glibc gives a
/// thread that allocates while another holds the heap an arena of its own, and what it frees
/// there stays resident beside the main heap; the starter threads allocate a little
/// for each start (`process::starters`), and their freed memory is given back with the rest.
/// Call it before the threads start. Other C libraries: nothing.
#[cfg(target_env = "gnu")]
pub fn one_heap() {
    // SAFETY: mallopt only sets the allocator's parameter, under its own lock.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
}

/// One heap for all threads (glibc only: here, nothing).
#[cfg(not(target_env = "gnu"))]
pub fn one_heap() {}

#[cfg(all(test, target_env = "gnu"))]
mod tests {
    use super::*;

    /// How many of the pages wholly inside `[start, end)` are in this process's page tables.
    fn resident_pages(start: usize, end: usize) -> usize {
        use std::io::{Read, Seek, SeekFrom};
        let mut f = std::fs::File::open("/proc/self/pagemap").unwrap();
        let mut n = 0;
        for page in (start.div_ceil(4096)..end / 4096).map(|p| p * 4096) {
            f.seek(SeekFrom::Start((page / 4096 * 8) as u64)).unwrap();
            let mut b = [0u8; 8];
            f.read_exact(&mut b).unwrap();
            n += (u64::from_le_bytes(b) >> 63) as usize;
        }
        n
    }

    #[test]
    fn pages_of_freed_memory_in_the_heap_are_given_back() {
        // 2 MiB in small blocks (below glibc's mmap threshold: in the heap), written, then all
        // freed but a block after them, which keeps the heap from shrinking at its end.
        let blocks: Vec<Box<[u8; 1024]>> = (0..2048).map(|_| Box::new([7u8; 1024])).collect();
        let pin = Box::new([1u8; 1024]);
        let (lo, hi) = blocks.iter().fold((usize::MAX, 0), |(lo, hi), b| {
            let at = b.as_ptr() as usize;
            (lo.min(at), hi.max(at + 1024))
        });
        assert!(
            hi - lo < 4 << 20,
            "the blocks are not together: {lo:#x}..{hi:#x}"
        );
        drop(blocks);
        let before = resident_pages(lo, hi);
        assert!(before > 400, "{before} pages resident before");
        assert!(give_back_free_heap());
        let after = resident_pages(lo, hi);
        assert!(
            after < before / 4,
            "{after} of {before} pages still resident"
        );
        assert_eq!(pin[1023], 1);
    }
}
