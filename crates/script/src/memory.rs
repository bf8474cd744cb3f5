//! The runtime's allocator: enforces [`Limits::memory_bytes_max`](crate::Limits) and records that
//! an allocation was refused, so a run that ran out of memory is recognised for certain.
//!
//! QuickJS's own `set_memory_limit` refuses allocations just as well, but leaves no trace: when
//! memory is so tight that even the `InternalError: out of memory` object cannot be allocated,
//! QuickJS throws `null` instead, which looks exactly like a script's `throw null`. Counting here,
//! below QuickJS, tells the two apart: [`MemoryGauge::exceeded`] is set by the refusal itself.
//!
//! Memory comes from Rust's global allocator (through rquickjs's [`RustAllocator`]), so a binary
//! that installs mimalloc gives QuickJS mimalloc too. What is counted is what QuickJS asks the
//! allocator for: its arenas of small blocks and its large blocks, excluding per-block headers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rquickjs::allocator::{Allocator, RustAllocator};

/// Shared between a [`Sandbox`](crate::Sandbox) and the allocator of its current runtime.
#[derive(Default)]
pub(crate) struct MemoryGauge {
    exceeded: AtomicBool,
}

impl MemoryGauge {
    /// Forgets earlier refusals; called at the start of each run.
    pub(crate) fn reset(&self) {
        self.exceeded.store(false, Ordering::Relaxed);
    }

    /// Whether an allocation was refused since the last [`reset`](Self::reset).
    pub(crate) fn exceeded(&self) -> bool {
        self.exceeded.load(Ordering::Relaxed)
    }
}

/// [`RustAllocator`] with a ceiling on the bytes held at once. `limit == 0` means no ceiling.
pub(crate) struct LimitedAllocator {
    limit: usize,
    used: usize,
    gauge: Arc<MemoryGauge>,
}

impl LimitedAllocator {
    pub(crate) fn new(limit: usize, gauge: Arc<MemoryGauge>) -> LimitedAllocator {
        LimitedAllocator {
            limit,
            used: 0,
            gauge,
        }
    }

    /// Whether `more` bytes fit beside `self.used - freed`; a refusal is recorded in the gauge.
    fn admit(&self, freed: usize, more: usize) -> bool {
        // Far beyond any real limit, and keeps `RustAllocator`'s size rounding from overflowing.
        if more > isize::MAX as usize / 2 {
            self.gauge.exceeded.store(true, Ordering::Relaxed);
            return false;
        }
        let fits = self.limit == 0
            || self
                .used
                .saturating_sub(freed)
                .checked_add(more)
                .is_some_and(|n| n <= self.limit);
        if !fits {
            self.gauge.exceeded.store(true, Ordering::Relaxed);
        }
        fits
    }
}

// SAFETY: every pointer handed out comes from `RustAllocator` unchanged, and every pointer taken
// back is passed to it unchanged, so its guarantees (size, `usize` alignment, `usable_size`) hold.
// Refusing an allocation returns null, which the trait allows.
unsafe impl Allocator for LimitedAllocator {
    fn alloc(&mut self, size: usize) -> *mut u8 {
        if !self.admit(0, size) {
            return std::ptr::null_mut();
        }
        let ptr = RustAllocator.alloc(size);
        if !ptr.is_null() {
            // SAFETY: `ptr` was just allocated by `RustAllocator`.
            self.used += unsafe { RustAllocator::usable_size(ptr) };
        }
        ptr
    }

    fn calloc(&mut self, count: usize, size: usize) -> *mut u8 {
        // `RustAllocator::calloc` panics on overflow; a panic must not cross into C.
        let Some(total) = count.checked_mul(size) else {
            return std::ptr::null_mut();
        };
        if !self.admit(0, total) {
            return std::ptr::null_mut();
        }
        let ptr = RustAllocator.calloc(count, size);
        if !ptr.is_null() {
            // SAFETY: `ptr` was just allocated by `RustAllocator`.
            self.used += unsafe { RustAllocator::usable_size(ptr) };
        }
        ptr
    }

    unsafe fn dealloc(&mut self, ptr: *mut u8) {
        // SAFETY: the caller passes a pointer this allocator handed out (see the trait).
        let size = unsafe { RustAllocator::usable_size(ptr) };
        self.used = self.used.saturating_sub(size);
        // SAFETY: as above.
        unsafe { RustAllocator.dealloc(ptr) }
    }

    unsafe fn realloc(&mut self, ptr: *mut u8, new_size: usize) -> *mut u8 {
        // `RustAllocator::realloc` does not accept null; C's realloc(NULL, n) is malloc(n).
        if ptr.is_null() {
            return self.alloc(new_size);
        }
        // SAFETY: the caller passes a pointer this allocator handed out (see the trait).
        let old = unsafe { RustAllocator::usable_size(ptr) };
        if !self.admit(old, new_size) {
            return std::ptr::null_mut();
        }
        // SAFETY: as above; on failure the old block stays valid and counted.
        let new = unsafe { RustAllocator.realloc(ptr, new_size) };
        if !new.is_null() {
            // SAFETY: `new` was just allocated by `RustAllocator`.
            self.used = self.used.saturating_sub(old) + unsafe { RustAllocator::usable_size(new) };
        }
        new
    }

    unsafe fn usable_size(ptr: *mut u8) -> usize {
        // SAFETY: the caller passes a pointer this allocator handed out (see the trait).
        unsafe { RustAllocator::usable_size(ptr) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_past_the_limit_and_records_it() {
        let gauge = Arc::new(MemoryGauge::default());
        let mut a = LimitedAllocator::new(1000, Arc::clone(&gauge));
        let p = a.alloc(600);
        assert!(!p.is_null());
        assert!(!gauge.exceeded());
        assert!(a.alloc(600).is_null());
        assert!(gauge.exceeded());
        gauge.reset();
        let p = unsafe { a.realloc(p, 900) };
        assert!(!p.is_null());
        assert!(unsafe { a.realloc(p, 1200) }.is_null());
        assert!(gauge.exceeded());
        unsafe { a.dealloc(p) };
        assert_eq!(a.used, 0);
        let q = a.calloc(10, 90);
        assert!(!q.is_null());
        assert!(a.calloc(usize::MAX, 2).is_null());
        unsafe { a.dealloc(q) };
    }

    #[test]
    fn zero_means_unlimited_and_realloc_of_null_allocates() {
        let gauge = Arc::new(MemoryGauge::default());
        let mut a = LimitedAllocator::new(0, Arc::clone(&gauge));
        let p = unsafe { a.realloc(std::ptr::null_mut(), 1 << 20) };
        assert!(!p.is_null());
        assert!(a.used >= 1 << 20);
        unsafe { a.dealloc(p) };
        assert!(!gauge.exceeded());
    }
}
