// SPDX-License-Identifier: GPL-2.0

//! Mirroring a process's page tables: an `mmu_interval_notifier` whose
//! invalidations go to a Rust trait, and `hmm_range_fault` under its
//! sequence count.
//!
//! The protocol (`Documentation/mm/hmm.rst`): take a sequence with
//! [`Mirror::read_begin`], fault the range ([`Mirror::fault`]), then take the
//! driver's own lock and check [`Mirror::read_retry`]; while that lock is
//! held, the pages found stay valid, because every invalidation takes the
//! same lock before it lets the mm core go on.

use core::ffi::c_void;
use core::marker::PhantomPinned;

use kernel::{mm::MmWithUser, prelude::*, types::Opaque};

use super::bindings as b;
use super::page::PageRef;

/// What the owner of a [`Mirror`] does on an invalidation.
pub(crate) trait MirrorOps: Send + Sync + 'static {
    /// Part of the mirrored range changes. The owner takes its lock (or
    /// fails, returning `false`, if it would block and `inv` may not),
    /// drops what it derived from those page-table entries, calls
    /// [`Invalidation::set_seq`] and returns `true`.
    fn invalidate(&self, inv: &Invalidation<'_>) -> bool;
}

/// One invalidation (`struct mmu_notifier_range` and the new sequence).
pub(crate) struct Invalidation<'a> {
    sub: *mut b::mmu_interval_notifier,
    range: &'a b::mmu_notifier_range,
    seq: usize,
}

impl Invalidation<'_> {
    /// Whether the callback may sleep.
    pub(crate) fn blockable(&self) -> bool {
        // SAFETY: `range` is valid for the callback.
        unsafe { b::msvm_mmu_notifier_range_blockable(self.range) }
    }

    /// Publishes the new sequence; call with the owner's lock held.
    pub(crate) fn set_seq(&self) {
        // SAFETY: `sub` is the notifier being invalidated, valid for the
        // callback, and the caller holds its lock as required.
        unsafe { b::msvm_mmu_interval_set_seq(self.sub, self.seq) };
    }
}

/// A sequence count of a [`Mirror`].
#[derive(Clone, Copy)]
pub(crate) struct Seq(usize);

/// An interval notifier on `[start, start + len)` of an mm.
///
/// # Invariants
///
/// If `inserted`, `sub` is registered with the mm and stays so until drop,
/// and `sub` is the first field so that the callback finds the `Mirror`.
#[repr(C)]
#[pin_data(PinnedDrop)]
pub(crate) struct Mirror<T: MirrorOps> {
    #[pin]
    sub: Opaque<b::mmu_interval_notifier>,
    #[pin]
    data: T,
    inserted: bool,
    #[pin]
    _pin: PhantomPinned,
}

// SAFETY: the notifier is driven by the mm core's own locking; `T` is
// `Send + Sync`.
unsafe impl<T: MirrorOps> Send for Mirror<T> {}
// SAFETY: see `Send`.
unsafe impl<T: MirrorOps> Sync for Mirror<T> {}

struct OpsTable<T>(core::marker::PhantomData<T>);

impl<T: MirrorOps> OpsTable<T> {
    const OPS: b::mmu_interval_notifier_ops = b::mmu_interval_notifier_ops {
        invalidate: Some(invalidate_cb::<T>),
        invalidate_start: None,
        invalidate_finish: None,
    };
}

/// `mmu_interval_notifier_ops.invalidate`.
///
/// # Safety
///
/// Called by the mm core for a notifier inserted by [`Mirror::new`].
unsafe extern "C" fn invalidate_cb<T: MirrorOps>(
    sub: *mut b::mmu_interval_notifier,
    range: *const b::mmu_notifier_range,
    cur_seq: usize,
) -> bool {
    // SAFETY: `sub` is the first field of a live `Mirror<T>` (invariant): it
    // stays registered, hence alive, until `mmu_interval_notifier_remove`,
    // which waits for callbacks.
    let mirror = unsafe { &*sub.cast::<Mirror<T>>() };
    let inv = Invalidation {
        sub,
        // SAFETY: `range` is valid for the callback.
        range: unsafe { &*range },
        seq: cur_seq,
    };
    mirror.data.invalidate(&inv)
}

impl<T: MirrorOps> Mirror<T> {
    /// Mirrors `[start, start + len)` of `mm`.
    pub(crate) fn new(
        mm: &MmWithUser,
        start: usize,
        len: usize,
        data: impl PinInit<T, Error>,
    ) -> Result<Pin<KBox<Self>>> {
        let mut m = KBox::pin_init(
            try_pin_init!(Self {
                sub <- Opaque::ffi_init(|p: *mut b::mmu_interval_notifier| {
                    // SAFETY: all-zeroes is the expected state before insert.
                    unsafe { core::ptr::write_bytes(p, 0, 1) };
                }),
                data <- data,
                inserted: false,
                _pin: PhantomPinned,
            }? Error),
            GFP_KERNEL,
        )?;
        // SAFETY: `sub` is pinned and zeroed; `mm` has users (the borrow);
        // the ops table is static.
        kernel::error::to_result(unsafe {
            b::mmu_interval_notifier_insert(
                m.sub.get(),
                mm.as_raw(),
                start,
                len,
                &OpsTable::<T>::OPS,
            )
        })?;
        // SAFETY: setting a flag moves nothing.
        unsafe { m.as_mut().get_unchecked_mut() }.inserted = true;
        Ok(m)
    }

    /// The owner's data.
    pub(crate) fn data(&self) -> &T {
        &self.data
    }

    /// Starts a read of the mirrored page tables.
    pub(crate) fn read_begin(&self) -> Seq {
        // SAFETY: the notifier is inserted (it is, for every `Mirror` that
        // `new` returned).
        Seq(unsafe { b::mmu_interval_read_begin(self.sub.get()) })
    }

    /// Whether an invalidation happened since `seq`; reliable under the
    /// owner's lock.
    pub(crate) fn read_retry(&self, seq: Seq) -> bool {
        // SAFETY: as in `read_begin`.
        unsafe { b::msvm_mmu_interval_read_retry(self.sub.get(), seq.0) }
    }

    /// Faults `[start, start + pfns.len() pages)` of the mirrored mm in and
    /// fills `pfns` (one per page) with what maps each page; returns the
    /// sequence they are valid under (check it with [`Self::read_retry`]
    /// under the owner's lock). Device-private pages of `owner` are
    /// returned as they are; others are faulted to RAM. Write access is
    /// requested if `write`. Takes the mmap lock itself and lets fault
    /// handlers drop it (userfaultfd, file I/O), as the kernel recommends
    /// (`hmm_range_fault_unlocked_timeout`); the caller must not hold it
    /// and must keep the mm's users up. Fails with `EFAULT` if a page
    /// cannot be faulted with that access, `EPERM` if it is not writable,
    /// `EINTR` if a fatal signal is pending.
    pub(crate) fn fault(
        &self,
        start: usize,
        pfns: &mut [usize],
        write: bool,
        owner: *const c_void,
    ) -> Result<Seq> {
        // SAFETY: plain constant getters.
        let (valid, wr) = unsafe { (b::msvm_hmm_pfn_valid(), b::msvm_hmm_pfn_write()) };
        let mut range = b::hmm_range {
            notifier: self.sub.get(),
            notifier_seq: 0,
            start,
            end: start + pfns.len() * super::pagemap::PAGE_SIZE,
            hmm_pfns: pfns.as_mut_ptr(),
            default_flags: valid | if write { wr } else { 0 },
            pfn_flags_mask: 0,
            dev_private_owner: owner.cast_mut(),
        };
        // SAFETY: `range` describes `pfns`, which is exclusively borrowed;
        // the notifier is inserted; the mmap lock is not held and the mm
        // has users (caller). Timeout 0: retry invalidations until the walk
        // is stable.
        kernel::error::to_result(unsafe { b::hmm_range_fault_unlocked_timeout(&mut range, 0) })?;
        Ok(Seq(range.notifier_seq))
    }

    /// Fills `pfns` with what maps each page of `[start, end)` of `mm` now,
    /// faulting nothing in: a page that is not present (never touched,
    /// swapped out, a device page of another owner, a hole) gives an entry
    /// without a page. Fails with `EBUSY` if `seq` went stale.
    pub(crate) fn snapshot(
        &self,
        mm: &MmWithUser,
        seq: Seq,
        start: usize,
        pfns: &mut [usize],
        owner: *const c_void,
    ) -> Result {
        self.walk(mm, seq, start, pfns, 0, owner)
    }

    fn walk(
        &self,
        mm: &MmWithUser,
        seq: Seq,
        start: usize,
        pfns: &mut [usize],
        default_flags: usize,
        owner: *const c_void,
    ) -> Result {
        let mut range = b::hmm_range {
            notifier: self.sub.get(),
            notifier_seq: seq.0,
            start,
            end: start + pfns.len() * super::pagemap::PAGE_SIZE,
            hmm_pfns: pfns.as_mut_ptr(),
            default_flags,
            pfn_flags_mask: 0,
            dev_private_owner: owner.cast_mut(),
        };
        let _lock = mm.mmap_read_lock();
        // SAFETY: `range` describes `pfns`, which is exclusively borrowed;
        // the mmap lock is held as `hmm_range_fault` requires; the notifier
        // is inserted on this mm.
        kernel::error::to_result(unsafe { b::hmm_range_fault(&mut range) })
    }
}

#[pinned_drop]
impl<T: MirrorOps> PinnedDrop for Mirror<T> {
    fn drop(self: Pin<&mut Self>) {
        if self.inserted {
            // SAFETY: inserted (invariant); this waits for running callbacks.
            unsafe { b::mmu_interval_notifier_remove(self.sub.get()) };
        }
    }
}

/// One entry of an `hmm_range_fault` result.
#[derive(Clone, Copy)]
pub(crate) struct HmmPfn(pub(crate) usize);

impl HmmPfn {
    /// The page, if the entry is valid (valid while the mirror's sequence
    /// holds, see the module documentation).
    pub(crate) fn page(self) -> Option<PageRef> {
        // SAFETY: plain constant getters.
        let (valid, err, flags) = unsafe {
            (
                b::msvm_hmm_pfn_valid(),
                b::msvm_hmm_pfn_error(),
                b::msvm_hmm_pfn_flags(),
            )
        };
        if self.0 & valid == 0 || self.0 & err != 0 {
            return None;
        }
        // SAFETY: a valid HMM pfn names a page with a `struct page`, valid
        // under the sequence protocol.
        Some(unsafe { PageRef::from_pfn(self.0 & !flags) })
    }

    /// A device-private page mapped without write access.
    pub(crate) fn device_read_only(self) -> bool {
        // SAFETY: plain constant getter.
        let wr = unsafe { b::msvm_hmm_pfn_write() };
        self.0 & wr == 0 && self.page().is_some_and(PageRef::is_device_private)
    }
}
