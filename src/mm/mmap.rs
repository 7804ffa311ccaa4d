// SPDX-License-Identifier: GPL-2.0

//! The mmap lock held for writing: what excludes every zap of an mm's page
//! tables (munmap, `MADV_DONTNEED`, the OOM reaper, page faults), and what
//! msvm holds while a device-private folio is collected whole.
//!
//! Linux 7.3's `zap_huge_pmd()` mishandles a PMD migration entry of a
//! device-private folio (it drops a reference and a mapping the entry never
//! held), so such an entry must not meet a zap: msvm creates one only in an
//! mm it holds this way, for a folio no other mm maps (see
//! `crate::migrate`). The kernel crate offers the read lock only, and not
//! as a try: [`MmapRead`] does that too.

use core::ptr::NonNull;

use kernel::{
    bindings,
    mm::{virt::VmaRef, Mm, MmWithUser, MmapReadGuard},
    prelude::*,
    sync::aref::ARef,
    types::NotThreadSafe,
};

use super::bindings as b;

/// Whether `mm` still has users (a process, or an `mmget`): a hint, as the
/// count may drop right after; once it is zero it stays so (the mm is being
/// torn down, or is gone but for its `mm_struct`).
pub(crate) fn has_users(mm: &Mm) -> bool {
    // SAFETY: `mm` is a valid `mm_struct` (the reference); the call only
    // reads its count of users.
    unsafe { b::msvm_mm_has_users(mm.as_raw()) }
}

/// A VMA whose mm's mmap lock is held, for reading or writing, for as long
/// as the borrow lasts: what a walk of its page tables needs
/// (`migrate_vma_setup` asserts it, `PGWALK_RDLOCK`). The VMA's own lock
/// (`lock_vma_under_rcu`, the kernel crate's `VmaReadGuard`, which derefs
/// to a `VmaRef` too) is not enough, so a bare `&VmaRef` proves nothing:
/// only the mmap guards (this module's, the kernel crate's read guard) and
/// a CPU fault on a device page (`super::fault::Fault::vma`) make one.
///
/// # Invariants
///
/// The mmap lock of `0`'s mm is held, for reading or writing, for `'a`.
#[derive(Clone, Copy)]
pub(crate) struct LockedVma<'a>(&'a VmaRef);

impl core::ops::Deref for LockedVma<'_> {
    type Target = VmaRef;

    fn deref(&self) -> &VmaRef {
        self.0
    }
}

impl<'a> LockedVma<'a> {
    /// The VMA at `addr` of the mm whose mmap lock `guard` holds.
    pub(crate) fn lookup(guard: &'a MmapReadGuard<'_>, addr: usize) -> Option<Self> {
        // INVARIANT: `guard` holds the lock for the borrow.
        guard.vma_lookup(addr).map(Self)
    }

    /// Wraps `vma`.
    ///
    /// # Safety
    ///
    /// The mmap lock of `vma`'s mm is held for `'a`.
    pub(crate) unsafe fn new(vma: &'a VmaRef) -> Self {
        // INVARIANT: the caller's promise.
        Self(vma)
    }

    /// The VMA, borrowed for as long as the lock is held.
    pub(crate) fn vma(self) -> &'a VmaRef {
        self.0
    }
}

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

impl ExclusiveVma<'_> {
    /// The VMA as one whose mmap lock is held (for writing).
    pub(crate) fn locked(&self) -> LockedVma<'_> {
        // INVARIANT: held for writing while `self` lives (the type).
        LockedVma(self.0)
    }
}

/// The VMA of `mm` at `addr`, write-locked.
///
/// # Safety
///
/// The caller holds `mm`'s mmap lock for writing for `'a`.
pub(super) unsafe fn vma_exclusive<'a>(
    mm: *mut bindings::mm_struct,
    addr: usize,
) -> Option<ExclusiveVma<'a>> {
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

    /// Takes `mm`'s mmap lock for writing if no one holds it (or waits
    /// for it).
    pub(crate) fn try_lock(mm: &'a MmWithUser) -> Option<Self> {
        // SAFETY: `mm` has users (the type), so its lock is usable.
        if !unsafe { b::msvm_mmap_write_trylock(mm.as_raw()) } {
            return None;
        }
        // INVARIANT: just taken.
        Some(Self {
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

/// The mm of the process whose id is `pid` (in the caller's pid
/// namespace), with a user reference: `ESRCH` if there is no such
/// process, `EINVAL` if it has no mm (a kernel thread, or exiting).
pub(crate) fn mm_of_pid(pid: i32) -> Result<ARef<MmWithUser>> {
    // SAFETY: a plain call; the mm it returns has a user reference for us.
    let mm = kernel::error::from_err_ptr(unsafe { b::msvm_mm_of_pid(pid) })?;
    let mm = NonNull::new(mm).ok_or(EINVAL)?;
    // SAFETY: `MmWithUser` is a transparent wrapper of `mm_struct`, and the
    // user reference `get_task_mm()` took is handed to the `ARef` (its drop
    // is `mmput()`).
    Ok(unsafe { ARef::from_raw(mm.cast::<MmWithUser>()) })
}

/// How a caller waits for an mmap lock ([`MmapRead::lock`]; an eviction
/// through a folio's record takes the write lock killably or tries it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// As long as it takes (the holders' work is bounded).
    Always,
    /// Not at all (`EBUSY` if the lock is taken): for work done for
    /// reclaim.
    Never,
}

/// The mmap lock of an mm held for reading, let go on drop: the kernel
/// crate's read guard, with a try as well.
///
/// # Invariants
///
/// The mmap lock of `mm` is held for reading.
pub(crate) struct MmapRead<'a> {
    mm: &'a MmWithUser,
    // The lock is let go by the task that took it.
    _nts: NotThreadSafe,
}

impl<'a> MmapRead<'a> {
    /// Takes `mm`'s mmap lock for reading, waiting as `wait` says.
    pub(crate) fn lock(mm: &'a MmWithUser, wait: Wait) -> Result<Self> {
        let raw = mm.as_raw();
        match wait {
            Wait::Always => {
                // SAFETY: `mm` has users (the type), so its lock is usable.
                unsafe { b::msvm_mmap_read_lock(raw) };
            }
            Wait::Never => {
                // SAFETY: as above.
                if !unsafe { b::msvm_mmap_read_trylock(raw) } {
                    return Err(EBUSY);
                }
            }
        }
        // INVARIANT: just taken.
        Ok(Self {
            mm,
            _nts: NotThreadSafe,
        })
    }

    /// The mm whose lock this is.
    #[allow(dead_code)] // msvm_dmirror.ko's (the glue is built into both modules).
    pub(crate) fn mm(&self) -> &'a MmWithUser {
        self.mm
    }

    /// The VMA at `addr`, if any, for as long as the lock is held.
    pub(crate) fn vma_lookup(&self, addr: usize) -> Option<LockedVma<'_>> {
        // SAFETY: the lock is held for reading (invariant).
        let vma = unsafe { b::msvm_vma_lookup(self.mm.as_raw(), addr) };
        if vma.is_null() {
            return None;
        }
        // SAFETY: a VMA of the mm, valid while its mmap lock is held, which
        // the borrow of `self` bounds.
        // INVARIANT: the lock is held (for reading) for the borrow.
        Some(LockedVma(unsafe { VmaRef::from_raw(vma) }))
    }
}

impl Drop for MmapRead<'_> {
    fn drop(&mut self) {
        // SAFETY: held (invariant), let go once.
        unsafe { b::msvm_mmap_read_unlock(self.mm.as_raw()) };
    }
}

#[kunit_tests(msvm_mmap)]
mod tests {
    use kernel::page::PAGE_SIZE;

    use super::super::kunit_mm::{check, TestMapping};
    use super::*;

    /// The read lock, waited for or tried, finds the mapping as one VMA,
    /// and nothing past it.
    #[test]
    fn read_lock_finds_the_mapping() -> Result {
        let m = TestMapping::new(4 * PAGE_SIZE)?;
        let (start, end) = (m.addr(), m.addr() + 4 * PAGE_SIZE);
        for wait in [Wait::Always, Wait::Never] {
            let mmap = MmapRead::lock(m.mm(), wait)?;
            let vma = mmap.vma_lookup(start + PAGE_SIZE).ok_or(ENOENT)?;
            check((vma.start(), vma.end()) == (start, end))?;
            check(core::ptr::eq(mmap.mm(), m.mm()))?;
            check(mmap.vma_lookup(end).is_none())?;
        }
        let guard = m.mm().mmap_read_lock();
        let vma = LockedVma::lookup(&guard, end - 1).ok_or(ENOENT)?;
        check(vma.vma().start() == start)?;
        Ok(())
    }

    /// The write lock keeps readers out (a try fails, `EBUSY`) until it
    /// goes, and its VMAs are the mapping's.
    #[test]
    fn write_lock_excludes_readers() -> Result {
        let m = TestMapping::new(2 * PAGE_SIZE)?;
        {
            let w = MmapWriteGuard::lock_killable(m.mm())?;
            let vma = w.vma_lookup(m.addr()).ok_or(ENOENT)?;
            check(vma.locked().start() == m.addr())?;
            check(w.vma_lookup(m.addr() + 2 * PAGE_SIZE).is_none())?;
            check(MmapRead::lock(m.mm(), Wait::Never).err() == Some(EBUSY))?;
            check(m.mm().mmap_read_trylock().is_none())?;
        }
        drop(MmapRead::lock(m.mm(), Wait::Never)?);
        // The memory is the case's to touch.
        m.write(PAGE_SIZE - 2, &[1, 2, 3, 4])?;
        let mut back = [0u8; 4];
        m.read(PAGE_SIZE - 2, &mut back)?;
        check(back == [1, 2, 3, 4])?;
        check(m.write(2 * PAGE_SIZE - 1, &[0, 0]) == Err(EFAULT))?;
        Ok(())
    }
}
