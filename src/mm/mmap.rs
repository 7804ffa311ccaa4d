// SPDX-License-Identifier: GPL-2.0

//! The mmap lock held for writing: what excludes every zap of an mm's page
//! tables (munmap, `MADV_DONTNEED`, the OOM reaper, page faults), and what
//! msvm holds while a device-private folio is collected whole.
//!
//! Linux 7.3's `zap_huge_pmd()` mishandles a PMD migration entry of a
//! device-private folio (it drops a reference and a mapping the entry never
//! held), so such an entry must not meet a zap: msvm creates one only in an
//! mm it holds this way, for a folio no other mm maps (see
//! `crate::migrate`). The kernel crate offers the read lock only.

use core::cell::Cell;
use core::ptr::NonNull;

use kernel::{
    bindings,
    mm::{virt::VmaRef, MmWithUser},
    prelude::*,
    types::NotThreadSafe,
};

use super::bindings as b;
use super::pagemap::FaultLock;

/// A VMA whose mm's mmap lock is held for writing and which is itself
/// write-locked, for as long as the borrow lasts: no zap of its page
/// tables can run. Only the exclusive guards of this module make one; it
/// is the proof a migration needs to collect folios whole (see
/// `super::migrate::VmaMigration::setup`).
pub(crate) struct ExclusiveVma<'a>(&'a VmaRef);

impl core::ops::Deref for ExclusiveVma<'_> {
    type Target = VmaRef;

    fn deref(&self) -> &VmaRef {
        self.0
    }
}

/// The VMA of `mm` at `addr`, write-locked.
///
/// # Safety
///
/// The caller holds `mm`'s mmap lock for writing for `'a`.
unsafe fn vma_exclusive<'a>(mm: *mut bindings::mm_struct, addr: usize) -> Option<ExclusiveVma<'a>> {
    // SAFETY: the mmap lock is held for writing (caller).
    let vma = unsafe { b::msvm_vma_lookup_exclusive(mm, addr) };
    if vma.is_null() {
        return None;
    }
    // SAFETY: a VMA of `mm`, valid while its mmap lock is held, which the
    // caller does for `'a`.
    // INVARIANT: write-locked by the lookup, under the write lock.
    Some(ExclusiveVma(unsafe { VmaRef::from_raw(vma) }))
}

/// `mmap_write_lock` of an mm, let go on drop.
///
/// # Invariants
///
/// The mmap lock of `mm` is held for writing.
pub(crate) struct MmapWriteGuard<'a> {
    mm: &'a MmWithUser,
    // The lock is let go by the task that took it.
    _nts: NotThreadSafe,
}

impl<'a> MmapWriteGuard<'a> {
    /// Takes `mm`'s mmap lock for writing; `EINTR` if the task is killed
    /// while it waits.
    pub(crate) fn lock_killable(mm: &'a MmWithUser) -> Result<Self> {
        // SAFETY: `mm` has users (the type), so its lock is usable.
        if unsafe { b::msvm_mmap_write_lock_killable(mm.as_raw()) } != 0 {
            return Err(EINTR);
        }
        // INVARIANT: just taken.
        Ok(Self {
            mm,
            _nts: NotThreadSafe,
        })
    }

    /// The VMA at `addr`, write-locked too, so that nothing that takes the
    /// VMA lock alone (page faults, `MADV_DONTNEED`) runs in it while the
    /// guard lives.
    pub(crate) fn vma_lookup(&self, addr: usize) -> Option<ExclusiveVma<'_>> {
        // SAFETY: the lock is held for writing while `self` lives
        // (invariant), which bounds the borrow.
        unsafe { vma_exclusive(self.mm.as_raw(), addr) }
    }
}

impl Drop for MmapWriteGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: held (invariant), let go once.
        unsafe { b::msvm_mmap_write_unlock(self.mm.as_raw()) };
    }
}

/// The mmap lock of a faulting mm, taken for writing by a fault handler
/// that let go of the fault's own lock
/// (`super::pagemap::Fault::relock_exclusive`), with a user reference on
/// the mm; both let go on drop, and the fault then returns
/// `VM_FAULT_RETRY`. [`Self::fail`] takes the read lock back instead, for
/// a fault that fails.
///
/// # Invariants
///
/// `mm` has a user reference of ours and its mmap lock is held for
/// writing; `page` is the faulting page, which the fault path keeps locked
/// and referenced until the handler returns, which the guard cannot
/// outlive (`'a`); `lock` is the fault's record of its lock, `Released`
/// while the guard lives.
pub(crate) struct FaultRelock<'a> {
    mm: NonNull<bindings::mm_struct>,
    page: super::page::PageRef,
    lock: &'a Cell<FaultLock>,
}

impl<'a> FaultRelock<'a> {
    /// # Safety
    ///
    /// `mm` has a user reference that the guard takes over and its mmap
    /// lock is held for writing, the fault's own lock let go; `page` is the
    /// page of that fault, locked and referenced, whose handler runs for
    /// `'a`; `lock` is its record, `Released`.
    pub(super) unsafe fn new(
        mm: NonNull<bindings::mm_struct>,
        page: super::page::PageRef,
        lock: &'a Cell<FaultLock>,
    ) -> Self {
        // INVARIANT: the caller's promises.
        Self { mm, page, lock }
    }

    /// The VMA at `addr`, write-locked (see [`MmapWriteGuard::vma_lookup`]).
    pub(crate) fn vma_lookup(&self, addr: usize) -> Option<ExclusiveVma<'_>> {
        // SAFETY: held for writing while `self` lives (invariant).
        unsafe { vma_exclusive(self.mm.as_ptr(), addr) }
    }

    /// The faulting page, still locked and referenced by the fault path.
    pub(crate) fn page(&self) -> super::page::PageRef {
        self.page
    }

    /// Splits the device-private folio of the faulting page if the PMD at
    /// `start` (PMD aligned) maps it whole, and its PMD mappings in every
    /// mm into page-table entries, moving nothing; `owner` is the folio's
    /// `dev_private_owner`. If the core cannot split it now, or the PMD
    /// maps something else, nothing happens (the retried fault finds out).
    pub(crate) fn split_whole_folio(&self, start: usize, owner: *const core::ffi::c_void) {
        let Some(vma) = self.vma_lookup(start) else {
            return;
        };
        if start % (super::migrate::MAX_PAGES * super::pagemap::PAGE_SIZE) != 0
            || start < vma.start()
            || start + super::migrate::MAX_PAGES * super::pagemap::PAGE_SIZE > vma.end()
        {
            return;
        }
        let head = self.page.head();
        // SAFETY: the mmap lock of the VMA's mm is held for writing and the
        // VMA write-locked (`vma_lookup`, bounded by the guard); the fault
        // path holds the lock of the folio of `head` and one reference to
        // it (invariant); `start` is PMD aligned and the PMD inside the
        // VMA; the helper checks that the PMD maps that folio.
        unsafe { b::msvm_split_fault_folio(vma.as_ptr(), start, head.as_ptr(), owner.cast_mut()) };
    }

    /// Takes the mmap read lock back (the fault's own lock: the fault path
    /// lets go of it) and gives `e` back for the fault to return, instead
    /// of a retry.
    pub(crate) fn fail(self, e: super::pagemap::FaultError) -> super::pagemap::FaultError {
        let this = core::mem::ManuallyDrop::new(self);
        // SAFETY: held for writing (invariant); downgraded once, and the
        // guard's drop does not run.
        unsafe { b::msvm_mmap_write_downgrade(this.mm.as_ptr()) };
        this.lock.set(FaultLock::Held);
        // SAFETY: our user reference (invariant), let go once; the fault's
        // context holds users of its own.
        unsafe { b::msvm_mmput(this.mm.as_ptr()) };
        e
    }
}

impl Drop for FaultRelock<'_> {
    fn drop(&mut self) {
        // SAFETY: held and referenced (invariant), let go once each; the
        // fault's context holds users of its own, so this is not the last.
        unsafe {
            b::msvm_mmap_write_unlock(self.mm.as_ptr());
            b::msvm_mmput(self.mm.as_ptr());
        }
    }
}
