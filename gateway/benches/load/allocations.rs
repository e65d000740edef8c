//! The gateway binary's allocator (jemalloc, `src/main.rs`) with a count of the blocks it hands out, so that
//! count mode can give allocations per request as it gives instructions: the slope of [`count`] between two
//! request counts. Every thread of the process is counted (client, gateway, upstream), as callgrind counts
//! them; the direct slope is the client's and upstream's share.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicU64, Ordering};

/// Blocks handed out so far: `alloc`, `alloc_zeroed` and each `realloc` (a grown `Vec` or `String` is one
/// more request to the allocator, whether or not it moves).
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

/// jemalloc, counting.
pub(crate) struct Counting;

/// How many blocks the process has asked its allocator for so far.
pub(crate) fn count() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}

// SAFETY: every method forwards its arguments unchanged to jemalloc's, which upholds `GlobalAlloc`'s contract;
// the counter is a relaxed atomic add (one instruction) that touches no memory the allocator hands out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { tikv_jemallocator::Jemalloc.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { tikv_jemallocator::Jemalloc.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { tikv_jemallocator::Jemalloc.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { tikv_jemallocator::Jemalloc.dealloc(ptr, layout) }
    }
}
