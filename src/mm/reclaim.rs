// SPDX-License-Identifier: GPL-2.0

//! Memory reclaim: a shrinker whose callbacks are dispatched to a Rust
//! trait, and a workqueue that may run during reclaim (`WQ_MEM_RECLAIM`:
//! it has a rescuer thread, so its work makes progress when no new worker
//! can be created for lack of memory).

use core::ffi::c_void;

use kernel::ffi::c_ulong;

use kernel::{bindings, prelude::*};

use super::bindings as b;

/// `SHRINK_STOP`: the scan cannot make progress now (lock contention).
const SHRINK_STOP: c_ulong = !0;
/// `SHRINK_EMPTY`: nothing to reclaim at all.
const SHRINK_EMPTY: c_ulong = !0 - 1;

/// Bytes of one `struct page`: what each page of a pagemap costs in RAM.
pub(crate) fn struct_page_size() -> usize {
    core::mem::size_of::<bindings::page>()
}

/// The owner of a [`Shrinker`].
pub(crate) trait ShrinkerOps: Send + Sync + 'static {
    /// Freeable objects now (0: none just now); `None` when there is
    /// nothing to free at all (`SHRINK_EMPTY`). Must not sleep on anything that reclaim may wait
    /// for.
    fn count(&self) -> Option<usize>;

    /// Frees (or schedules the freeing of) objects; returns how many, or
    /// `None` when it cannot make progress now (`SHRINK_STOP`). Same rules
    /// as [`Self::count`], but it may sleep (not wait for locks) if
    /// `may_sleep`: the reclaimer's gfp mask allows blocking.
    /// (`nr_to_scan` is not passed on: msvm frees whole chunks, each worth
    /// many of the core's batches.)
    fn scan(&self, may_sleep: bool) -> Option<usize>;
}

/// A registered shrinker and its owner, which it owns.
///
/// # Invariants
///
/// `raw` was returned by `shrinker_alloc` and registered, with
/// `private_data` pointing at `owner`, which is freed only after the
/// shrinker (see `drop`).
pub(crate) struct Shrinker<T: ShrinkerOps> {
    raw: *mut bindings::shrinker,
    owner: *mut T,
}

// SAFETY: the shrinker is used by the mm core from any thread; `T` is
// `Send + Sync`.
unsafe impl<T: ShrinkerOps> Send for Shrinker<T> {}
// SAFETY: see `Send`.
unsafe impl<T: ShrinkerOps> Sync for Shrinker<T> {}

impl<T: ShrinkerOps> Shrinker<T> {
    /// Registers a shrinker named `name` that calls `owner`.
    pub(crate) fn register(name: &CStr, owner: KBox<T>) -> Result<Self> {
        // SAFETY: the format takes one argument, `name`, a valid C string
        // for the call (`shrinker_alloc` keeps no pointer to it: it formats
        // its own copy).
        let raw = unsafe { bindings::shrinker_alloc(0, c"%s".as_char_ptr(), name.as_char_ptr()) };
        if raw.is_null() {
            return Err(ENOMEM);
        }
        let owner = KBox::into_raw(owner);
        // SAFETY: `raw` is a fresh, not yet registered shrinker: its fields
        // are ours to set before `shrinker_register`.
        unsafe {
            (*raw).count_objects = Some(count_cb::<T>);
            (*raw).scan_objects = Some(scan_cb::<T>);
            (*raw).private_data = owner.cast::<c_void>();
            // What msvm gives back (idle pagemaps) is cheap to make again
            // (a few ms): ask to be scanned twice as hard as the default.
            (*raw).seeks = 1;
            bindings::shrinker_register(raw);
        }
        // INVARIANT: `raw` came from `shrinker_alloc` and is registered just
        // above, with `private_data` pointing at `owner`, which only `drop`
        // frees, after `shrinker_free`.
        Ok(Self { raw, owner })
    }
}

impl<T: ShrinkerOps> Drop for Shrinker<T> {
    fn drop(&mut self) {
        // SAFETY: registered (invariant); `shrinker_free` unregisters it and
        // waits for callbacks in flight, after which `owner` is unused and
        // ours to free.
        unsafe {
            bindings::shrinker_free(self.raw);
            drop(KBox::from_raw(self.owner));
        }
    }
}

/// # Safety
///
/// Called by the mm core on a shrinker registered by [`Shrinker::register`].
unsafe extern "C" fn count_cb<T: ShrinkerOps>(
    s: *mut bindings::shrinker,
    _sc: *mut bindings::shrink_control,
) -> c_ulong {
    // SAFETY: `private_data` points at the owner, alive while registered
    // (type invariant of `Shrinker`).
    let owner = unsafe { &*(*s).private_data.cast::<T>() };
    match owner.count() {
        None => SHRINK_EMPTY,
        Some(n) => c_ulong::from(n),
    }
}

/// # Safety
///
/// As [`count_cb`]; `sc` is valid for the call.
unsafe extern "C" fn scan_cb<T: ShrinkerOps>(
    s: *mut bindings::shrinker,
    sc: *mut bindings::shrink_control,
) -> c_ulong {
    // SAFETY: as in `count_cb`.
    let owner = unsafe { &*(*s).private_data.cast::<T>() };
    // SAFETY: `sc` is valid for the call.
    let gfp = unsafe { (*sc).gfp_mask };
    // `gfpflags_allow_blocking()`: direct reclaim allowed.
    let may_sleep = gfp & (1 << bindings::___GFP_DIRECT_RECLAIM_BIT) != 0;
    match owner.scan(may_sleep) {
        None => SHRINK_STOP,
        Some(n) => c_ulong::from(n),
    }
}

/// A workqueue of our own whose work may run during reclaim.
///
/// # Invariants
///
/// `raw` is a live workqueue allocated by `msvm_alloc_reclaim_wq`, destroyed
/// (after draining it) on drop.
pub(crate) struct ReclaimQueue {
    raw: *mut bindings::workqueue_struct,
}

// SAFETY: workqueues are used from any thread.
unsafe impl Send for ReclaimQueue {}
// SAFETY: see `Send`.
unsafe impl Sync for ReclaimQueue {}

impl ReclaimQueue {
    /// A `WQ_MEM_RECLAIM` workqueue named `name` that runs one work item
    /// at a time.
    pub(crate) fn new(name: &CStr) -> Result<Self> {
        Self::with_max_active(name, 1)
    }

    /// A `WQ_MEM_RECLAIM` workqueue named `name` that runs up to
    /// `max_active` work items at once (its rescuer runs them one at a time
    /// when no worker can be created).
    pub(crate) fn with_max_active(name: &CStr, max_active: u16) -> Result<Self> {
        // At least 1 (the core clamps it to 512).
        let max = i32::from(max_active.max(1));
        // SAFETY: `name` is a valid C string for the call (the queue keeps
        // a copy); `max` is a valid `max_active`.
        let raw = unsafe { b::msvm_alloc_reclaim_wq(name.as_char_ptr(), max) };
        if raw.is_null() {
            return Err(ENOMEM);
        }
        // INVARIANT: just allocated; `drop` destroys it.
        Ok(Self { raw })
    }

    /// The queue, to enqueue work on.
    pub(crate) fn queue(&self) -> &kernel::workqueue::Queue {
        // SAFETY: `raw` is live until `self` is dropped (invariant), which
        // the returned borrow cannot outlive.
        unsafe { kernel::workqueue::Queue::from_raw(self.raw) }
    }
}

impl Drop for ReclaimQueue {
    fn drop(&mut self) {
        // SAFETY: live (invariant); this drains the queue, then frees it.
        unsafe { bindings::destroy_workqueue(self.raw) };
    }
}

/// Runs `f` with the current task's allocations kept out of reclaim
/// (`memalloc_noreclaim_save`/`_restore`, `PF_MEMALLOC`): work that frees
/// memory for reclaim should not stall on reclaim (nor on msvm's own
/// shrinker). The scope is a closure, so it always ends, in this task, in
/// the order it began.
pub(crate) fn without_reclaim<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: plain call about the current task.
    let flags = unsafe { b::msvm_memalloc_noreclaim_save() };
    let r = f();
    // SAFETY: restores what was saved just above, in the same task, after
    // the scopes `f` began have ended.
    unsafe { b::msvm_memalloc_noreclaim_restore(flags) };
    r
}
