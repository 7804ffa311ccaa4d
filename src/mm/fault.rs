// SPDX-License-Identifier: GPL-2.0

//! A CPU fault on a device-private page, as `migrate_to_ram` sees it: the
//! page, the address, the VMA, and what became of the fault's own lock
//! ([`FaultLock`]); and [`FaultRelock`], the mmap lock taken for writing
//! instead, for work that must exclude every zap of the mm (see
//! `super::mmap`).

use core::cell::Cell;
use core::ptr::NonNull;

use kernel::bindings;
use kernel::error::code::{EAGAIN, EOPNOTSUPP};

use super::bindings as b;
use super::mmap::{vma_exclusive, ExclusiveVma, LockedVma};
use super::owner::Owner;
use super::page::{PageRef, BLOCK_SIZE};

/// Why a `migrate_to_ram` failed, as the fault handler reports it.
pub(crate) enum FaultError {
    /// No memory for the system page: `VM_FAULT_OOM`.
    Oom,
    /// The page cannot be brought back: `VM_FAULT_SIGBUS`.
    Sigbus,
    /// Nothing moved for now: the access faults again (`VM_FAULT_RETRY`
    /// if the fault's lock was let go, else 0).
    Retry,
}

/// What [`Fault::relock_exclusive`] got.
pub(crate) enum Relock<'a> {
    /// The mm's mmap lock for writing; the fault's own lock is gone.
    Exclusive(FaultRelock<'a>),
    /// Nothing: the fault may not wait (its lock is kept), or its task was
    /// killed while waiting, or someone else held the folio meanwhile (its
    /// lock is gone). Return [`FaultError::Retry`].
    Retry,
    /// Nothing: the fault may not let go of its lock (no
    /// `FAULT_FLAG_ALLOW_RETRY`), which it keeps.
    Unsupported,
}

/// A CPU fault on a device-private page (`struct vm_fault`).
///
/// `lock` tells the callback what became of the fault's lock
/// ([`Fault::relock_exclusive`]): if it was let go, or if the fault may not
/// wait, the callback returns `VM_FAULT_RETRY`, whatever the handler said,
/// as the fault path requires.
///
/// # Invariants
///
/// `vmf` is the fault being handled by `migrate_to_ram`, for `'a`, its page
/// a device-private page referenced (and locked) by the fault path; its
/// lock is held while `lock` says so.
pub(crate) struct Fault<'a> {
    vmf: &'a bindings::vm_fault,
    lock: &'a Cell<FaultLock>,
}

impl<'a> Fault<'a> {
    /// # Safety
    ///
    /// `vmf` is the fault `migrate_to_ram` was called for, which returns
    /// after `'a`, with the fault's lock held and its page referenced and
    /// locked; `lock` is `Held`; no other `Fault` of `vmf` exists (each
    /// could let go of the fault's lock).
    pub(super) unsafe fn new(vmf: &'a bindings::vm_fault, lock: &'a Cell<FaultLock>) -> Self {
        // INVARIANT: the caller's promises.
        Self { vmf, lock }
    }
}

/// What became of the lock a fault holds when it calls `migrate_to_ram`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum FaultLock {
    /// Held, as it came: the handler's result stands.
    Held,
    /// Held, and the fault may not wait (`FAULT_FLAG_RETRY_NOWAIT`): it
    /// returns `VM_FAULT_RETRY` with the lock held, and is made again.
    HeldNoWait,
    /// Let go: only `VM_FAULT_RETRY` may follow.
    Released,
}

/// The page of a fault being handled, locked and referenced by the fault
/// path: what a migration from `migrate_to_ram` names as its `fault_page`
/// (the core then takes that folio's lock as its own). Only a [`Fault`] or
/// its [`FaultRelock`] gives one.
#[derive(Clone, Copy)]
pub(crate) struct FaultPage<'a>(PageRef<'a>);

impl<'a> FaultPage<'a> {
    /// The page.
    pub(crate) fn page(self) -> PageRef<'a> {
        self.0
    }
}

impl<'a> Fault<'a> {
    /// The device-private page that was touched.
    pub(crate) fn page(&self) -> FaultPage<'a> {
        // SAFETY: for `migrate_to_ram`, `vmf->page` is the faulting
        // device-private page, referenced and locked by the fault path for
        // the call, which `'a` bounds (type invariant).
        let page = unsafe { PageRef::from_raw(self.vmf.page) };
        FaultPage(page.expect("migrate_to_ram without a page"))
    }

    /// The faulting address.
    pub(crate) fn address(&self) -> usize {
        self.vmf.__bindgen_anon_1.address
    }

    /// Whether the fault is on a PMD entry: a large device folio mapped
    /// whole.
    pub(crate) fn is_pmd(&self) -> bool {
        self.vmf.pte.is_null()
    }

    /// Lets go of the fault's lock and takes the mmap lock of its mm for
    /// writing instead, for work that must exclude every zap of the mm's
    /// page tables (see `super::mmap`). Consumes the fault: its VMA may be
    /// gone once its lock is. The CPU's access then faults again (the
    /// callback returns `VM_FAULT_RETRY`), unless the guard takes the read
    /// lock back to fail the fault ([`FaultRelock::fail`]).
    pub(crate) fn relock_exclusive(self) -> Relock<'a> {
        let page = self.page().0;
        let mut mm = core::ptr::null_mut();
        // SAFETY: `self.vmf` is the fault being handled, with its lock held
        // (the fault path's promise, and `self` was not consumed before),
        // and its folio locked and referenced.
        let r = unsafe {
            b::msvm_fault_relock_exclusive(core::ptr::from_ref(self.vmf).cast_mut(), &mut mm)
        };
        let eopnotsupp = EOPNOTSUPP.to_errno();
        let eagain = EAGAIN.to_errno();
        // INVARIANT: records what the helper did with the fault's lock:
        // kept on `EOPNOTSUPP` and `EAGAIN`, let go otherwise.
        self.lock.set(match r {
            r if r == eopnotsupp => FaultLock::Held,
            r if r == eagain => FaultLock::HeldNoWait,
            // Every other outcome let go of the fault's lock.
            _ => FaultLock::Released,
        });
        match (r, NonNull::new(mm)) {
            (0, Some(mm)) => {
                // SAFETY: the helper took a user reference and the write
                // lock, having let go of the fault's; `page` is the fault's
                // page, locked and referenced again; `lock` is set to
                // `Released` above; the guard lives no longer than the
                // handler (`'a`).
                Relock::Exclusive(unsafe { FaultRelock::new(mm, page, self.lock) })
            }
            (r, _) if r == eopnotsupp => Relock::Unsupported,
            _ => Relock::Retry,
        }
    }

    /// The VMA the fault is in; the fault path holds its mm's mmap lock
    /// for the call.
    pub(crate) fn vma(&self) -> LockedVma<'_> {
        // SAFETY: `vmf->vma` is valid for the duration of the fault
        // handler, which bounds the borrow.
        let vma = unsafe { kernel::mm::virt::VmaRef::from_raw(self.vmf.__bindgen_anon_1.vma) };
        // SAFETY: Linux 7.3 calls `migrate_to_ram` with the mmap lock held
        // (for reading): its two callers, `do_swap_page()` and
        // `do_huge_pmd_device_private()`, let go of a per-VMA lock and
        // retry (`VM_FAULT_RETRY`) before ("migrate_to_ram is not yet
        // ready to operate under VMA lock"). A kernel that changes that
        // changes this function (see `rust-mm.rst`).
        unsafe { LockedVma::new(vma) }
    }
}

/// The mmap lock of a faulting mm, taken for writing by a fault handler
/// that let go of the fault's own lock
/// ([`Fault::relock_exclusive`]), with a user reference on
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
    page: PageRef<'a>,
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
        page: PageRef<'a>,
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
    pub(crate) fn page(&self) -> FaultPage<'_> {
        FaultPage(self.page)
    }

    /// Splits the device-private folio of the faulting page if the PMD at
    /// `start` (PMD aligned) maps it whole, and its PMD mappings in every
    /// mm into page-table entries, moving nothing; `owner` is the folio's
    /// `dev_private_owner`. If the core cannot split it now, or the PMD
    /// maps something else, nothing happens (the retried fault finds out).
    pub(crate) fn split_whole_folio(&self, start: usize, owner: Owner) {
        let Some(vma) = self.vma_lookup(start) else {
            return;
        };
        if start % BLOCK_SIZE != 0 || start < vma.start() || start + BLOCK_SIZE > vma.end() {
            return;
        }
        let head = self.page.head();
        // SAFETY: the mmap lock of the VMA's mm is held for writing and the
        // VMA write-locked (`vma_lookup`, bounded by the guard); the fault
        // path holds the lock of the folio of `head` and one reference to
        // it (invariant); `start` is PMD aligned and the PMD inside the
        // VMA; the helper checks that the PMD maps that folio.
        unsafe { b::msvm_split_fault_folio(vma.as_ptr(), start, head.as_ptr(), owner.as_ptr()) };
    }

    /// Takes the mmap read lock back (the fault's own lock: the fault path
    /// lets go of it) and gives `e` back for the fault to return, instead
    /// of a retry.
    pub(crate) fn fail(self, e: FaultError) -> FaultError {
        let this = core::mem::ManuallyDrop::new(self);
        // SAFETY: held for writing (invariant); downgraded once, and the
        // guard's drop does not run.
        unsafe { b::msvm_mmap_write_downgrade(this.mm.as_ptr()) };
        // INVARIANT: the guard ends here (its drop does not run), and the
        // read lock it took back is the fault's own lock, held again.
        this.lock.set(FaultLock::Held);
        // SAFETY: our user reference (invariant), let go once; the fault's
        // context holds users of its own.
        unsafe { bindings::mmput(this.mm.as_ptr()) };
        e
    }
}

impl Drop for FaultRelock<'_> {
    fn drop(&mut self) {
        // SAFETY: held and referenced (invariant), let go once each; the
        // fault's context holds users of its own, so this is not the last.
        unsafe {
            b::msvm_mmap_write_unlock(self.mm.as_ptr());
            bindings::mmput(self.mm.as_ptr());
        }
    }
}
