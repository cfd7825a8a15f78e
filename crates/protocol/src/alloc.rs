//! A global allocator for processes that decode untrusted Kafka frames.
//!
//! The `kafka-protocol` decoders size every array with `Vec::with_capacity(n)` where `n` comes
//! from the wire, before reading a single element. A 60-byte frame can therefore ask for tens of
//! gigabytes; the kernel refuses, and Rust aborts the whole process on allocation failure — one
//! malformed request would take the broker down (found by this crate's property test).
//!
//! [`ReserveLazily`] serves allocations of [`HUGE_ALLOCATION_BYTES`] or more with an anonymous
//! `mmap(MAP_NORESERVE)`: the kernel grants the address range without committing memory, the
//! decoder fails on the next missing element and frees the range untouched. Smaller allocations
//! go to the system allocator unchanged. Legitimate allocations never come near the threshold
//! (frames are capped at `socket.request.max.bytes`), and if one did, its pages would still be
//! committed on first touch like any other memory. The decision is recorded in
//! `docs/decisions/0002-huge-allocations.md`.

use std::alloc::{GlobalAlloc, Layout, System};

/// Allocations at least this large are reserved lazily.
pub const HUGE_ALLOCATION_BYTES: usize = 1 << 30;

const PAGE_BYTES: usize = 4096;

/// See the module documentation. Install with `#[global_allocator]` in binaries.
#[derive(Debug, Default, Clone, Copy)]
pub struct ReserveLazily;

fn is_huge(layout: &Layout) -> bool {
    layout.size() >= HUGE_ALLOCATION_BYTES && layout.align() <= PAGE_BYTES
}

// SAFETY: huge blocks come from mmap (page aligned, which covers every align <= PAGE_BYTES) and
// go back through munmap with the same length; everything else is delegated to `System`. The
// size decides the path in both directions, and a layout's size never changes between its
// allocation and its deallocation.
unsafe impl GlobalAlloc for ReserveLazily {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !is_huge(&layout) {
            return unsafe { System.alloc(layout) };
        }
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                layout.size(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            std::ptr::null_mut()
        } else {
            ptr.cast()
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if is_huge(&layout) {
            unsafe { libc::munmap(ptr.cast(), layout.size()) };
        } else {
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if is_huge(&layout) {
            // Fresh anonymous mappings are zero-filled.
            unsafe { self.alloc(layout) }
        } else {
            unsafe { System.alloc_zeroed(layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `new_size` with `layout.align()` is a valid layout.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        if !is_huge(&layout) && !is_huge(&new_layout) {
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        let new_ptr = unsafe { self.alloc(new_layout) };
        if !new_ptr.is_null() {
            let len = layout.size().min(new_size);
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new_ptr, len);
                self.dealloc(ptr, layout);
            }
        }
        new_ptr
    }
}
