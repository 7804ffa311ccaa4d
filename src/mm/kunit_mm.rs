// SPDX-License-Identifier: GPL-2.0

//! Memory of a process, for KUnit cases: a case's kthread is given an mm
//! of its own (`kunit_attach_mm`, as C's `kunit_vm_mmap` does), maps
//! anonymous memory in it and touches that memory through user copies,
//! page faults and all, as a process touches its own. So the abstractions
//! over a process's memory (mmap locks, migration, faults on device pages,
//! device-exclusive entries, mirrors) are tested against the real mm core,
//! at boot or when the module loads, with no process. The mm ends with the
//! case's kthread.
//!
//! A case that fails a KUnit assertion ends its kthread at once, without
//! running destructors: an assertion under a lock the mm's teardown takes
//! (an mmap lock, a mirror's lock, a folio locked) would hang the run
//! instead of failing the case, and one while a [`TestMapping`] lives
//! would leave its mm a user (never torn down, a mirror in it never
//! removed). While a [`TestMapping`] lives, cases check with [`check`],
//! which fails the case through its `Result`, after every guard and the
//! mapping are dropped.

#![cfg(CONFIG_KUNIT = "y")]

use kernel::{
    bindings,
    mm::MmWithUser,
    page::PAGE_SIZE,
    prelude::*,
    sync::aref::ARef,
    types::NotThreadSafe,
    uaccess::{UserPtr, UserSlice},
};

use super::bindings as b;

/// Anonymous private memory, readable and writable, mapped in the mm of
/// the KUnit case running; unmapped on drop.
///
/// # Invariants
///
/// `[addr, addr + len)` was mapped by `vm_mmap` in `mm`, the mm of the
/// task that made this (a KUnit case's kthread), which `_nts` keeps it on.
pub(crate) struct TestMapping {
    mm: ARef<MmWithUser>,
    addr: usize,
    len: usize,
    _nts: NotThreadSafe,
}

impl TestMapping {
    /// Maps `len` bytes (page aligned, not zero) in the mm of the running
    /// KUnit case, giving its task one first if it has none: `EINVAL`
    /// outside a KUnit case (a process's mm is not a test's to map into)
    /// or for a bad length; `ENOMEM` and others as `mmap(2)`.
    pub(crate) fn new(len: usize) -> Result<Self> {
        if !kernel::kunit::in_kunit_test() || len == 0 || len % PAGE_SIZE != 0 {
            return Err(EINVAL);
        }
        // SAFETY: a plain call, from a KUnit case's kthread (checked above);
        // a fresh mm is attached only to a task that has none, and stays
        // in use until the kthread ends (no `kthread_unuse_mm()`), so no
        // `CurrentTask` borrow of the task's mm outlives it.
        let addr = unsafe { b::msvm_kunit_mmap(len) };
        // An error is a negative errno, in the last page of the address
        // space (`IS_ERR_VALUE`).
        if addr >= (bindings::MAX_ERRNO as usize).wrapping_neg() {
            // CAST: a negative errno, from -4095 to -1.
            return Err(Error::from_errno(addr as isize as i32));
        }
        let Some(mm) = kernel::current!().mm().and_then(|mm| mm.mmget_not_zero()) else {
            // SAFETY: just mapped in the current task's mm.
            unsafe { bindings::vm_munmap(addr, len) };
            return Err(EINVAL);
        };
        // INVARIANT: just mapped, in the current task's mm.
        Ok(Self {
            mm,
            addr,
            len,
            _nts: NotThreadSafe,
        })
    }

    /// The first address.
    pub(crate) fn addr(&self) -> usize {
        self.addr
    }

    /// The mm the memory is mapped in (the case's).
    pub(crate) fn mm(&self) -> &MmWithUser {
        &self.mm
    }

    /// Writes `data` at offset `off`, as the process would: faulting pages
    /// in (or home, from a device). `EFAULT` past the end.
    pub(crate) fn write(&self, off: usize, data: &[u8]) -> Result {
        self.slice(off, data.len())?.writer().write_slice(data)
    }

    /// Reads `out.len()` bytes at offset `off`, as the process would.
    /// `EFAULT` past the end.
    pub(crate) fn read(&self, off: usize, out: &mut [u8]) -> Result {
        self.slice(off, out.len())?.reader().read_slice(out)
    }

    /// Writes `len` bytes of `byte` at offset `off` (a chunk at a time:
    /// no page-sized buffer on the stack).
    pub(crate) fn fill(&self, off: usize, len: usize, byte: u8) -> Result {
        let chunk = [byte; 64];
        let mut done = 0;
        while done < len {
            let n = chunk.len().min(len - done);
            self.write(off + done, &chunk[..n])?;
            done += n;
        }
        Ok(())
    }

    /// Whether the `len` bytes at offset `off` all are `byte`.
    pub(crate) fn holds(&self, off: usize, len: usize, byte: u8) -> Result<bool> {
        let mut chunk = [0u8; 64];
        let mut done = 0;
        while done < len {
            let n = chunk.len().min(len - done);
            self.read(off + done, &mut chunk[..n])?;
            if chunk[..n].iter().any(|&x| x != byte) {
                return Ok(false);
            }
            done += n;
        }
        Ok(true)
    }

    fn slice(&self, off: usize, len: usize) -> Result<UserSlice> {
        if off.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(EFAULT);
        }
        Ok(UserSlice::new(UserPtr::from_addr(self.addr + off), len))
    }
}

impl Drop for TestMapping {
    fn drop(&mut self) {
        // Only from the mm it was mapped in (`vm_munmap` unmaps from the
        // current task's), which the task still uses unless something
        // unsafe let it go.
        let current = kernel::current!().mm().map(|mm| mm.as_raw());
        if current == Some(self.mm.as_raw()) {
            // SAFETY: mapped in the current task's mm (invariant, checked
            // again); unmapping a range of it is what `munmap(2)` does.
            unsafe { bindings::vm_munmap(self.addr, self.len) };
        }
    }
}

/// A new mm of no task (`mm_alloc()`), with one user that the returned
/// reference holds, for cases that need many mms (as keys: nothing is
/// mapped in it). `EINVAL` outside a KUnit case, `ENOMEM` without memory.
pub(crate) fn fresh_mm() -> Result<ARef<MmWithUser>> {
    if !kernel::kunit::in_kunit_test() {
        return Err(EINVAL);
    }
    // SAFETY: a plain call; the mm it returns has one user, ours.
    let mm = core::ptr::NonNull::new(unsafe { b::msvm_kunit_mm_alloc() }).ok_or(ENOMEM)?;
    // SAFETY: `MmWithUser` is a transparent wrapper of `mm_struct`, and the
    // one user `mm_alloc()` gave is handed to the `ARef` (its drop is
    // `mmput()`).
    Ok(unsafe { ARef::from_raw(mm.cast::<MmWithUser>()) })
}

/// Fails a KUnit case through its `Result` (`EINVAL`, logged with the
/// caller's line) unless `ok`: for checks under locks, where an assertion
/// would end the case's kthread with the locks held (see the module's
/// documentation).
#[track_caller]
pub(crate) fn check(ok: bool) -> Result {
    if ok {
        return Ok(());
    }
    let at = core::panic::Location::caller();
    pr_err!("check failed at {}:{}\n", at.file(), at.line());
    Err(EINVAL)
}
