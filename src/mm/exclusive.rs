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
use super::hmm::{Mirror, MirrorGuard, MirrorTable};
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

    /// Whether the page was made exclusive by the mirror `guard` holds the
    /// lock of, and no invalidation of it came since (none can complete
    /// while the lock is held).
    pub(crate) fn still_valid<T: MirrorTable>(&self, guard: &MirrorGuard<'_, T>) -> bool {
        self.of(guard.mirror()) && !guard.mirror().retry(self.seq)
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

#[kunit_tests(msvm_exclusive)]
mod tests {
    use super::super::hmm::Counting;
    use super::super::kunit_mm::{check, TestMapping};
    use super::super::mmap::Wait;
    use super::super::owner::OwnerKey;
    use super::*;

    static DEV: OwnerKey<()> = OwnerKey::new();

    /// A page made exclusive is the page the process wrote, and the call's
    /// own invalidation is skipped: the page is still valid under the
    /// mirror's lock. The CPU's next touch turns it back (the mirror is
    /// told) and finds the data as it was.
    #[test]
    fn cpu_touch_turns_it_back() -> Result {
        let m = TestMapping::new(PAGE_SIZE)?;
        m.fill(0, PAGE_SIZE, 0x77)?;
        let mirror = Mirror::create(
            m.mm(),
            (m.addr(), PAGE_SIZE),
            Counting::default(),
            Some(DEV.owner()),
        )?;
        {
            let mmap = MmapRead::lock(m.mm(), Wait::Always)?;
            let page = mirror.make_exclusive(&mmap, m.addr())?;
            check(page.address() == m.addr())?;
            check(page.page().is_anon())?;
            let g = mirror.lock();
            check(page.still_valid(&g))?;
            check(g.invalidations == 0)?;
        }
        check(m.holds(0, PAGE_SIZE, 0x77)?)?;
        check(mirror.lock().invalidations >= 1)?;
        m.fill(0, 1, 0x78)?;
        check(m.holds(0, 1, 0x78)? && m.holds(1, PAGE_SIZE - 1, 0x77)?)?;
        Ok(())
    }

    /// An unmap while the page is held exclusive invalidates it: no longer
    /// valid under the lock, and the mirror was told of the unmap.
    #[test]
    fn an_unmap_invalidates_it() -> Result {
        let m = TestMapping::new(2 * PAGE_SIZE)?;
        m.fill(0, 2 * PAGE_SIZE, 0x11)?;
        let range = (m.addr(), 2 * PAGE_SIZE);
        let mirror = Mirror::create(m.mm(), range, Counting::default(), Some(DEV.owner()))?;
        let page = {
            let mmap = MmapRead::lock(m.mm(), Wait::Always)?;
            mirror.make_exclusive(&mmap, m.addr() + PAGE_SIZE)?
        };
        check(page.still_valid(&mirror.lock()))?;
        drop(m);
        let g = mirror.lock();
        check(!page.still_valid(&g))?;
        check(g.unmaps >= 1)?;
        Ok(())
    }

    /// Refused (`EINVAL`): a mirror with no exclusive owner, an address
    /// outside the mirror or not page aligned.
    #[test]
    fn refuses_what_it_cannot_do() -> Result {
        let m = TestMapping::new(2 * PAGE_SIZE)?;
        m.fill(0, 2 * PAGE_SIZE, 1)?;
        let plain = Mirror::create(m.mm(), (m.addr(), 2 * PAGE_SIZE), Counting::default(), None)?;
        let half = Mirror::create(
            m.mm(),
            (m.addr(), PAGE_SIZE),
            Counting::default(),
            Some(DEV.owner()),
        )?;
        let mmap = MmapRead::lock(m.mm(), Wait::Always)?;
        check(plain.make_exclusive(&mmap, m.addr()).err() == Some(EINVAL))?;
        check(half.make_exclusive(&mmap, m.addr() + PAGE_SIZE).err() == Some(EINVAL))?;
        check(half.make_exclusive(&mmap, m.addr() + 8).err() == Some(EINVAL))?;
        Ok(())
    }
}
