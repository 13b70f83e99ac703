//! The unit tests' global allocator: the system's, counting each thread's allocations, so
//! that a test can show that a loop allocates nothing (`allocations()` before and after).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    // Const-initialised and without a destructor: counting allocates nothing itself.
    static COUNT: Cell<u64> = const { Cell::new(0) };
}

/// How many allocations (and reallocations) this thread has made so far.
pub fn allocations() -> u64 {
    COUNT.with(Cell::get)
}

fn count() {
    let _ = COUNT.try_with(|c| c.set(c.get() + 1));
}

struct Counting;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

// SAFETY: every call goes to the system allocator unchanged, with the caller's arguments;
// the count touches a thread-local `Cell` only.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: our caller keeps `alloc`'s contract, which is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: `ptr` came from the system allocator (every allocation goes there), with
        // `layout`, as our caller promises.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as for `realloc`.
        unsafe { System.dealloc(ptr, layout) }
    }
}
