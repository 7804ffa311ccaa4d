// SPDX-License-Identifier: GPL-2.0

//! Device-exclusive access (`make_device_exclusive`): a page of a process
//! that its CPU cannot reach until the device lets go, as a GPU takes a
//! page for its atomics. The call's own invalidation of the address
//! (`MMU_NOTIFY_EXCLUSIVE`, naming the owner) leaves the page mapped; the
//! CPU's next access faults and turns the entry back after another one
//! (`MMU_NOTIFY_CLEAR`, no owner).

use core::ptr::NonNull;

use kernel::{bindings, error::from_err_ptr, prelude::*};

use super::bindings as b;
use super::hmm::{Mirror, MirrorTable};
use super::mmap::MmapRead;
use super::page::{PageRef, PAGE_SIZE};

/// A page made device-exclusive, its folio locked and referenced until
/// this goes: meanwhile the CPU's access waits for the folio, so the
/// device-exclusive entry stays.
///
/// # Invariants
///
/// `folio` is locked and referenced by us; `page` is its page mapped at
/// `addr`, in the mirror's range, through a device-exclusive entry, made
/// after the mirror's sequence `seq` was read.
pub(crate) struct ExclusivePage<'m> {
    folio: NonNull<bindings::folio>,
    page: NonNull<bindings::page>,
    addr: usize,
    seq: usize,
    mirror: usize,
    _mirror: core::marker::PhantomData<&'m ()>,
}

impl ExclusivePage<'_> {
    /// The page.
    pub(crate) fn page(&self) -> PageRef<'_> {
        // SAFETY: referenced while `self` lives (invariant).
        unsafe { PageRef::from_raw(self.page.as_ptr()) }.expect("a page")
    }

    /// Its address.
    pub(crate) fn address(&self) -> usize {
        self.addr
    }

    /// Whether the page was made exclusive by `mirror`.
    pub(super) fn of<T: MirrorTable>(&self, mirror: &Mirror<T>) -> bool {
        mirror.id() == self.mirror
    }

    /// Whether no invalidation of `mirror` (its own) came since the page
    /// was made exclusive (the caller holds its lock).
    pub(crate) fn still_valid<T: MirrorTable>(&self, mirror: &Mirror<T>) -> bool {
        self.of(mirror) && !mirror.retry(self.seq)
    }
}

impl Drop for ExclusivePage<'_> {
    fn drop(&mut self) {
        // SAFETY: locked and referenced by us (invariant), given up here.
        unsafe {
            bindings::folio_unlock(self.folio.as_ptr());
            b::msvm_put_page(self.page.as_ptr());
        }
    }
}

impl<T: MirrorTable> Mirror<T> {
    /// Makes the page at `addr` (page aligned) of the mirrored mm, whose
    /// mmap lock `mmap` holds, exclusive to the device, for the owner the
    /// mirror was created with (whose invalidation it skips). Errors as
    /// `make_device_exclusive`: `EOPNOTSUPP` for a page that is not
    /// anonymous, `EFAULT` and others from faulting it in writable;
    /// `EINVAL` for another mm's lock, an address outside the mirror, or a
    /// mirror created without an exclusive owner.
    ///
    /// Any other invalidation of the address after the sequence is read
    /// fails the entry (`MirrorGuard::map_exclusive`: `EAGAIN`), the
    /// call's own on its way too (a THP split, a COW, or the fault that
    /// turns back a page made exclusive before: a page left exclusive by a
    /// failed try meets that one at every next try). Fault the page in
    /// writable before trying again.
    pub(crate) fn make_exclusive<'m>(
        &'m self,
        mmap: &MmapRead<'_>,
        addr: usize,
    ) -> Result<ExclusivePage<'m>> {
        let owner = self.exclusive_owner().ok_or(EINVAL)?;
        if !core::ptr::eq(mmap.mm().as_raw(), self.mm())
            || addr % PAGE_SIZE != 0
            || !self.covers(addr, addr.checked_add(PAGE_SIZE).ok_or(EINVAL)?)
        {
            return Err(EINVAL);
        }
        // Before the function's own invalidation (which the mirror skips):
        // any other one that comes from here on, which may unmap the page,
        // shows in the sequence. (Read after, one that ran in between
        // would not.)
        let seq = self.read_begin();
        let mut folio: *mut bindings::folio = core::ptr::null_mut();
        // SAFETY: the mm has users and its mmap lock is held for reading
        // (`mmap`); `folio` is valid for writes.
        let page = unsafe {
            b::make_device_exclusive(mmap.mm().as_raw(), addr, owner.as_ptr(), &mut folio)
        };
        let page = from_err_ptr(page)?;
        let (Some(page), Some(folio)) = (NonNull::new(page), NonNull::new(folio)) else {
            return Err(EFAULT);
        };
        // INVARIANT: the function returns the folio locked and referenced,
        // and `page` mapped at `addr` through a device-exclusive entry.
        Ok(ExclusivePage {
            folio,
            page,
            addr,
            seq,
            mirror: self.id(),
            _mirror: core::marker::PhantomData,
        })
    }
}
