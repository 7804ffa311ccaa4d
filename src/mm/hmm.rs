// SPDX-License-Identifier: GPL-2.0

//! Mirroring a process's page tables: an `mmu_interval_notifier` with the
//! lock its invalidations take, and `hmm_range_fault` under its sequence
//! count.
//!
//! The protocol (`Documentation/mm/hmm.rst`): a walk ([`Mirror::fault`],
//! [`Mirror::snapshot`]) fills entries under a sequence; then the mirror's
//! lock is taken ([`Mirror::lock`]) and the sequence checked
//! ([`MirrorGuard::pages`]); while that lock is held, the pages found stay
//! valid, because every invalidation takes the same lock (here, in the
//! notifier's callback) before it lets the mm core go on. The types carry
//! the protocol: a page is only had from [`Pages`], which borrows the
//! guard, so no safe code can use a page found by a walk that went stale.
//!
//! The lock also holds the device page table of the mirror
//! ([`DevPt`]): a valid walk's pages are bound into it
//! ([`MirrorGuard::bind`]), and every invalidation zaps the entries of its
//! range before it returns, so that the device may use them across jobs
//! without walking again.

use core::marker::PhantomPinned;

use kernel::{
    device::{Bound, Device},
    mm::MmWithUser,
    new_mutex,
    prelude::*,
    sync::{aref::ARef, atomic::Relaxed, Arc, Mutex, MutexGuard},
    time::{Instant, Monotonic},
    types::Opaque,
};

use super::bindings as b;
use super::devpt::{Bind, Counters, DevPt, Life, Spare};
use super::owner::Owner;
use super::page::{PageRef, PAGE_SIZE};

/// The device page tables of one device: the device, their counters, and
/// the mirrors that hold them, so that they are emptied before the device
/// goes.
///
/// # Invariants
///
/// Every address in `mirrors` is that of a live, pinned [`Mirror`] whose
/// table is `dev`'s: a mirror adds itself once pinned and removes itself
/// in its drop, before it is freed, both under the lock. `mirrors` is
/// `None` once the device is gone; until then `dev` is bound: the tables
/// are emptied ([`Tables::gone`]) by a device-managed action at the latest,
/// which runs before the device's DMA is torn down.
#[pin_data]
pub(crate) struct Tables {
    dev: ARef<Device>,
    pub(crate) counters: Counters,
    #[pin]
    mirrors: Mutex<Option<KVec<usize>>>,
}

/// Empties a device's tables when it is unbound (a device-managed action).
struct Gone(Arc<Tables>);

impl Drop for Gone {
    fn drop(&mut self) {
        self.0.gone();
    }
}

impl Tables {
    /// The tables of device `dev`, msvm's device `index`, none yet.
    pub(crate) fn new(dev: &Device<Bound>, index: usize) -> Result<Arc<Self>> {
        let d: &Device = dev;
        let t = Arc::pin_init(
            pin_init!(Self {
                dev: d.into(),
                counters: Counters::new(index),
                mirrors <- new_mutex!(Some(KVec::new())),
            }),
            GFP_KERNEL,
        )?;
        // INVARIANT: the device is bound now (the borrow), and the action
        // empties the tables when it is unbound, before its DMA goes.
        kernel::devres::register(dev, Gone(t.clone()), GFP_KERNEL)?;
        Ok(t)
    }

    /// Under memory pressure: empties the tables of the VMs that are not
    /// running a job (their mirror's lock is free), which refault. Only
    /// tries locks (a VM being created holds the list's while it
    /// allocates). Returns the bytes freed.
    pub(crate) fn shrink(&self) -> usize {
        let Some(list) = self.mirrors.try_lock() else {
            return 0;
        };
        let mut freed = 0;
        for &a in list.iter().flatten() {
            // SAFETY: a registered mirror is alive while the lock is held
            // (invariant).
            let m = unsafe { &*(a as *const Mirror) };
            if let Some(mut t) = m.lock.try_lock() {
                let before = t.bytes();
                t.zap(0, usize::MAX, Some(&self.counters), true);
                freed += before - t.bytes();
            }
        }
        freed
    }

    /// The device goes: empties every table of it (their DMA and P2P
    /// mappings are unmapped) and detaches them, and refuses new ones
    /// (`ENODEV`). Called while the device is still bound, with no mirror
    /// lock held; again, it does nothing.
    pub(crate) fn gone(&self) {
        let mut list = self.mirrors.lock();
        for &a in list.iter().flatten() {
            // SAFETY: a registered mirror is alive while the lock is held
            // (invariant).
            let m = unsafe { &*(a as *const Mirror) };
            m.lock.lock().detach(&self.counters);
        }
        // INVARIANT: no mirror is registered any more.
        *list = None;
    }
}

/// An interval notifier on `[start, end)` of an mm, and the lock its
/// invalidations take, which holds the device page table of one device.
///
/// # Invariants
///
/// If `inserted`, `sub` is registered with the mm for `[start, end)` and
/// stays so until drop, and `sub` is the first field so that the callback
/// finds the `Mirror`. Its table is attached to its device (may bind) only
/// while its address is in `tables`.
#[repr(C)]
#[pin_data(PinnedDrop)]
pub(crate) struct Mirror {
    #[pin]
    sub: Opaque<b::mmu_interval_notifier>,
    /// Held by users of the pages a walk found, and by every invalidation
    /// (from inside the mm core, under its locks, possibly from reclaim):
    /// never allocate memory that can reclaim under it, never take
    /// `mmap_lock` or migrate under it. It holds the device page table.
    #[pin]
    lock: Mutex<DevPt>,
    start: usize,
    end: usize,
    inserted: bool,
    /// The tables of its device.
    tables: Arc<Tables>,
    /// Told of each invalidation in the range: the mm's address (a key
    /// only), the range, and whether it is an unmap.
    on_invalidate: fn(usize, usize, usize, bool),
    #[pin]
    _pin: PhantomPinned,
}

// SAFETY: the notifier is driven by the mm core's own locking; the rest is
// a mutex (around the device page table, whose pages and mappings any
// thread may use under it), an `Arc` and plain values.
unsafe impl Send for Mirror {}
// SAFETY: see `Send`.
unsafe impl Sync for Mirror {}

const OPS: b::mmu_interval_notifier_ops = b::mmu_interval_notifier_ops {
    invalidate: Some(invalidate_cb),
    invalidate_start: None,
    invalidate_finish: None,
};

/// `mmu_interval_notifier_ops.invalidate`: takes the mirror's lock (or, if
/// the invalidation may not sleep and the lock is busy, fails) and
/// publishes the new sequence, so that a walk checked under the lock before
/// this sees it stale.
///
/// # Safety
///
/// Called by the mm core for a notifier inserted by [`Mirror::new`].
unsafe extern "C" fn invalidate_cb(
    sub: *mut b::mmu_interval_notifier,
    range: *const b::mmu_notifier_range,
    cur_seq: usize,
) -> bool {
    // SAFETY: `sub` is the first field of a live `Mirror` (invariant): it
    // stays registered, hence alive, until `mmu_interval_notifier_remove`,
    // which waits for callbacks.
    let mirror = unsafe { &*sub.cast::<Mirror>() };
    // SAFETY: `range` is valid for the callback.
    let blockable = unsafe { b::msvm_mmu_notifier_range_blockable(range) };
    // SAFETY: `range` is valid for the callback; plain fields.
    let (event, mm, start, end) = unsafe {
        (
            (*range).event,
            (*range).mm as usize,
            (*range).start,
            (*range).end,
        )
    };
    // Users hold the lock while they use pages of the range: an
    // invalidation waits for them (or, if it may not sleep, fails).
    let mut guard = if blockable {
        mirror.lock.lock()
    } else {
        match mirror.lock.try_lock() {
            Some(g) => g,
            None => return false,
        }
    };
    // Under the lock, before the new sequence: a user that checks its walk
    // under the lock after this sees both, one before sees neither.
    let unmap = event == kernel::bindings::mmu_notifier_event_MMU_NOTIFY_UNMAP;
    (mirror.on_invalidate)(mm, start, end, unmap);
    // The device's entries of the range go before the mm core changes
    // them, and the translations of its TLB with them (`DevPt::zap`).
    let t0 = Instant::<Monotonic>::now();
    let c = &mirror.tables.counters;
    let zapped = guard.zap(start, end, Some(c), blockable);
    if zapped > 0 {
        // CAST: an elapsed time is not negative.
        let ns = t0.elapsed().as_nanos() as u64;
        c.invalidations.add(1, Relaxed);
        c.zapped.add(zapped, Relaxed);
        c.zap_ns.add(ns, Relaxed);
        super::trace::pt_invalidate(c.index, start, end, zapped, ns);
    }
    // SAFETY: `sub` is the notifier being invalidated, valid for the
    // callback, and its lock is held as `mmu_interval_set_seq` requires.
    unsafe { b::msvm_mmu_interval_set_seq(sub, cur_seq) };
    true
}

impl Mirror {
    /// Mirrors `[start, start + len)` of `mm`, telling `on_invalidate` of
    /// every invalidation in it, and whether it is an unmap
    /// (`MMU_NOTIFY_UNMAP`: `munmap`, `mremap`'s old range, the whole
    /// address space when the process exits). It is called before the mm
    /// core changes the page tables, under the mirror's lock, before the
    /// new sequence is published (an invalidation that fails, unable to
    /// sleep, calls nothing): it must neither sleep nor allocate. Its device
    /// page table is one of `tables` (`ENODEV` if their device is gone).
    pub(crate) fn new(
        mm: &MmWithUser,
        (start, len): (usize, usize),
        on_invalidate: fn(usize, usize, usize, bool),
        tables: &Arc<Tables>,
    ) -> Result<Pin<KBox<Self>>> {
        let end = start.checked_add(len).ok_or(EINVAL)?;
        let mut m = KBox::pin_init(
            try_pin_init!(Self {
                sub <- Opaque::ffi_init(|p: *mut b::mmu_interval_notifier| {
                    // SAFETY: all-zeroes is the expected state before insert.
                    unsafe { core::ptr::write_bytes(p, 0, 1) };
                }),
                // SAFETY: no device: attached below, once registered.
                lock <- new_mutex!(unsafe { DevPt::new(None) }),
                start,
                end,
                // INVARIANT: not inserted yet; `sub` is the first field
                // (`#[repr(C)]`).
                inserted: false,
                tables: tables.clone(),
                on_invalidate,
                _pin: PhantomPinned,
            }? Error),
            GFP_KERNEL,
        )?;
        // SAFETY: `sub` is pinned and zeroed; `mm` has users (the borrow);
        // the ops table is static.
        kernel::error::to_result(unsafe {
            b::mmu_interval_notifier_insert(m.sub.get(), mm.as_raw(), start, len, &OPS)
        })?;
        // SAFETY: setting a flag moves nothing.
        // INVARIANT: inserted just above, for `[start, end)`.
        unsafe { m.as_mut().get_unchecked_mut() }.inserted = true;
        {
            let mut guard = tables.mirrors.lock();
            let list = (*guard).as_mut().ok_or(ENODEV)?;
            // CAST: an address, kept to find the pinned mirror again.
            // INVARIANT (`Tables`): pinned; its drop removes it.
            list.push(core::ptr::from_ref::<Self>(&*m) as usize, GFP_KERNEL)?;
            // SAFETY: the device is bound while the list is (`Tables`
            // invariant), and the mirror is on it: `Tables::gone` detaches
            // the table before the device is unbound, or the mirror's drop
            // does first.
            unsafe { m.lock.lock().attach(tables.dev.clone()) };
        }
        Ok(m)
    }

    /// Holds invalidations off: the pages of a walk that is still valid
    /// once this is taken ([`MirrorGuard::pages`]) stay as found while the
    /// guard lives.
    pub(crate) fn lock(&self) -> MirrorGuard<'_> {
        MirrorGuard {
            mirror: self,
            guard: self.lock.lock(),
        }
    }

    /// The hmm range of a walk of `pfns` from `start` of `mm`: `EINVAL`
    /// unless `mm` is the mirrored mm and the range lies in the mirrored
    /// one (outside it, invalidations would not reach the walk).
    fn range(
        &self,
        mm: &MmWithUser,
        start: usize,
        pfns: &mut [HmmPfn],
        default_flags: usize,
        owner: Owner,
    ) -> Result<b::hmm_range> {
        // SAFETY: the notifier is inserted (it is, for every `Mirror` that
        // `new` returned), so its `mm` is set and stays.
        let mirrored = unsafe { (*self.sub.get()).mm };
        let end = pfns
            .len()
            .checked_mul(PAGE_SIZE)
            .and_then(|l| start.checked_add(l))
            .ok_or(EINVAL)?;
        if !core::ptr::eq(mirrored, mm.as_raw())
            || start % PAGE_SIZE != 0
            || start < self.start
            || end > self.end
        {
            return Err(EINVAL);
        }
        Ok(b::hmm_range {
            notifier: self.sub.get(),
            notifier_seq: 0,
            start,
            end,
            // `HmmPfn` is a transparent `usize`.
            hmm_pfns: pfns.as_mut_ptr().cast(),
            default_flags,
            pfn_flags_mask: 0,
            dev_private_owner: owner.as_ptr(),
        })
    }

    /// Faults `[start, start + pfns.len() pages)` of the mirrored mm `mm`
    /// in and fills `pfns` (one per page) with what maps each page; check
    /// the walk with [`MirrorGuard::pages`]. Device-private pages of
    /// `owner` are returned as they are; others are faulted to RAM. Write
    /// access is requested if `write`. Takes the mmap lock itself and lets
    /// fault handlers drop it (userfaultfd, file I/O), as the kernel
    /// recommends (`hmm_range_fault_unlocked_timeout`): the caller must not
    /// hold it (it would deadlock). Fails with `EINVAL` for another mm or a
    /// range outside the mirror, `EFAULT` if a page cannot be faulted with
    /// that access, `EPERM` if it is not writable, `EINTR` if a fatal
    /// signal is pending.
    pub(crate) fn fault<'p>(
        &self,
        mm: &MmWithUser,
        start: usize,
        pfns: &'p mut [HmmPfn],
        write: bool,
        owner: Owner,
    ) -> Result<Walk<'_, 'p>> {
        let (valid, wr) = (HMM_PFN_VALID, HMM_PFN_WRITE);
        let mut range = self.range(mm, start, pfns, valid | if write { wr } else { 0 }, owner)?;
        // SAFETY: `range` describes `pfns`, which is exclusively borrowed,
        // inside the notifier's interval of `mm`, whose users the borrow
        // keeps up; the notifier is inserted. Timeout 0: retry
        // invalidations until the walk is stable.
        kernel::error::to_result(unsafe { b::hmm_range_fault_unlocked_timeout(&mut range, 0) })?;
        Ok(Walk {
            mirror: self,
            start,
            pfns,
            seq: range.notifier_seq,
        })
    }

    /// Fills `pfns` with what maps each page from `start` of the mirrored
    /// mm `mm` now, faulting nothing in: a page that is not present (never
    /// touched, swapped out, a device page of another owner, a hole) gives
    /// an entry without a page. Fails with `EBUSY` if an invalidation came
    /// meanwhile, `EINVAL` as [`Self::fault`] does. The caller must not
    /// hold the mmap lock.
    pub(crate) fn snapshot<'p>(
        &self,
        mm: &MmWithUser,
        start: usize,
        pfns: &'p mut [HmmPfn],
        owner: Owner,
    ) -> Result<Walk<'_, 'p>> {
        self.look(mm, start, pfns, owner, true)
    }

    /// [`Self::snapshot`], but without waiting for the mmap lock: `EAGAIN`
    /// if it is taken for writing (or a writer waits). It never waits on
    /// the process (a page fault stuck in user space, a writer queued
    /// behind it): for the device's fault handler, which serves every
    /// process of the device.
    pub(crate) fn snapshot_nowait<'p>(
        &self,
        mm: &MmWithUser,
        start: usize,
        pfns: &'p mut [HmmPfn],
        owner: Owner,
    ) -> Result<Walk<'_, 'p>> {
        self.look(mm, start, pfns, owner, false)
    }

    fn look<'p>(
        &self,
        mm: &MmWithUser,
        start: usize,
        pfns: &'p mut [HmmPfn],
        owner: Owner,
        wait: bool,
    ) -> Result<Walk<'_, 'p>> {
        let mut range = self.range(mm, start, pfns, 0, owner)?;
        // SAFETY: the notifier is inserted (see `range`).
        range.notifier_seq = unsafe { b::mmu_interval_read_begin(self.sub.get()) };
        let _lock = if wait {
            mm.mmap_read_lock()
        } else {
            mm.mmap_read_trylock().ok_or(EAGAIN)?
        };
        // SAFETY: `range` describes `pfns`, which is exclusively borrowed,
        // inside the notifier's interval of `mm`; the mmap lock is held as
        // `hmm_range_fault` requires.
        kernel::error::to_result(unsafe { b::hmm_range_fault(&mut range) })?;
        Ok(Walk {
            mirror: self,
            start,
            pfns,
            seq: range.notifier_seq,
        })
    }
}

#[pinned_drop]
impl PinnedDrop for Mirror {
    fn drop(self: Pin<&mut Self>) {
        // The table is emptied, and the mirror forgotten by its device's
        // tables, under their lock: the device cannot go meanwhile (its
        // mappings are unmapped while it is bound).
        {
            let mut list = self.tables.mirrors.lock();
            let me = core::ptr::from_ref::<Self>(&*self) as usize;
            if let Some(l) = (*list).as_mut() {
                l.retain(|a| *a != me);
            }
            self.lock.lock().detach(&self.tables.counters);
        }
        if self.inserted {
            // SAFETY: inserted (invariant); this waits for running callbacks.
            unsafe { b::mmu_interval_notifier_remove(self.sub.get()) };
        }
    }
}

// The `hmm_pfn_flags` bit masks (`unsigned long`).
const HMM_PFN_VALID: usize = b::hmm_pfn_flags_HMM_PFN_VALID;
const HMM_PFN_WRITE: usize = b::hmm_pfn_flags_HMM_PFN_WRITE;
const HMM_PFN_ERROR: usize = b::hmm_pfn_flags_HMM_PFN_ERROR;
const HMM_PFN_FLAGS: usize = b::hmm_pfn_flags_HMM_PFN_FLAGS;

/// One entry of a walk (`hmm_range_fault`'s pfn and flags). Only a walk
/// fills them; their pages are had through [`Pages`].
#[repr(transparent)]
#[derive(Clone, Copy)]
pub(crate) struct HmmPfn(usize);

impl HmmPfn {
    /// An entry naming no page, to fill a walk's array with first.
    pub(crate) const NONE: Self = Self(0);

    /// The page frame, if the entry names a page.
    fn pfn(self) -> Option<usize> {
        (self.0 & HMM_PFN_VALID != 0 && self.0 & HMM_PFN_ERROR == 0)
            .then_some(self.0 & !HMM_PFN_FLAGS)
    }

    /// Whether the entry is mapped writable.
    fn writable(self) -> bool {
        self.0 & HMM_PFN_WRITE != 0
    }
}

/// The entries a walk of a [`Mirror`] filled, and the sequence they were
/// filled under; the entries cannot change, nor the mirror go, while this
/// lives (a sequence means nothing to another mirror, even one at the same
/// address).
pub(crate) struct Walk<'m, 'p> {
    mirror: &'m Mirror,
    /// The address of the first entry.
    start: usize,
    pfns: &'p [HmmPfn],
    seq: usize,
}

/// A [`Mirror`]'s lock, held.
pub(crate) struct MirrorGuard<'a> {
    mirror: &'a Mirror,
    guard: MutexGuard<'a, DevPt>,
}

impl MirrorGuard<'_> {
    /// Whether `walk` is this mirror's and no invalidation came since it:
    /// `EAGAIN` if one did (walk again), `EINVAL` if it is another
    /// mirror's.
    fn check(&self, walk: &Walk<'_, '_>) -> Result {
        if !core::ptr::eq(walk.mirror, self.mirror) {
            return Err(EINVAL);
        }
        // SAFETY: the notifier is inserted, and its lock is held (`self`),
        // as `mmu_interval_read_retry` requires to be reliable.
        if unsafe { b::msvm_mmu_interval_read_retry(self.mirror.sub.get(), walk.seq) } {
            return Err(EAGAIN);
        }
        Ok(())
    }

    /// The pages of `walk`, valid while this guard is held; `EAGAIN` if an
    /// invalidation came since the walk (walk again), `EINVAL` if `walk`
    /// is another mirror's.
    pub(crate) fn pages<'g>(&'g self, walk: &'g Walk<'_, '_>) -> Result<Pages<'g>> {
        self.check(walk)?;
        // INVARIANT: no invalidation came since the walk, and none can
        // complete while `self` holds the lock: the pages stay as found.
        Ok(Pages { pfns: walk.pfns })
    }

    /// The device page table.
    pub(crate) fn table(&self) -> &DevPt {
        &self.guard
    }

    /// Zaps the device page table's entries of `[start, end)` (the
    /// range's placement changed: its pages must fault again). Returns the
    /// entries removed.
    pub(crate) fn zap(&mut self, start: usize, end: usize) -> u64 {
        let c = &self.mirror.tables.counters;
        self.guard.zap(start, end, Some(c), true)
    }

    /// Zaps the device page table's [`Life::Job`] entries of `[start,
    /// end)`: the job that faulted them ended. Returns the entries removed.
    pub(crate) fn zap_job(&mut self, start: usize, end: usize) -> u64 {
        let c = &self.mirror.tables.counters;
        self.guard.zap_job(start, end, c)
    }

    /// Binds the pages of `walk` into the device page table of `dev`, as
    /// `how` says for each (its address and page; `None` leaves the page
    /// out), writable where the walk found them writable; leaves come from
    /// `spare`. The same errors as [`Self::pages`]; the pages bound.
    pub(crate) fn bind(
        &mut self,
        walk: &Walk<'_, '_>,
        dev: &Device<Bound>,
        spare: &mut Spare,
        mut how: impl FnMut(usize, PageRef<'_>) -> Option<(Bind, Life)>,
    ) -> Result<u64> {
        self.check(walk)?;
        let mut bound = 0;
        for (i, e) in walk.pfns.iter().enumerate() {
            let Some(pfn) = e.pfn() else { continue };
            // SAFETY: a page the walk found, which no invalidation changed
            // since (checked above) and none can while the lock is held.
            let page = unsafe { PageRef::from_pfn(pfn) };
            let addr = walk.start + i * PAGE_SIZE;
            let Some((b, life)) = how(addr, page) else {
                continue;
            };
            let c = &self.mirror.tables.counters;
            // SAFETY: the lock is held (`self`); the walk found `page` at
            // `addr`, with write access if the entry says so, and is still
            // valid (checked above).
            if unsafe {
                self.guard
                    .set(dev, c, addr, page, b, (e.writable(), life), spare)?
            } {
                bound += 1;
            }
        }
        Ok(bound)
    }
}

/// The pages of a walk that is still valid, for as long as the mirror's
/// lock is held.
///
/// # Invariants
///
/// Every page `pfns` names is valid for `'g`.
pub(crate) struct Pages<'g> {
    pfns: &'g [HmmPfn],
}

impl<'g> Pages<'g> {
    /// No pages.
    pub(crate) fn empty() -> Pages<'static> {
        // INVARIANT: no entries.
        Pages { pfns: &[] }
    }

    /// The page of entry `i`, if the walk found one there.
    pub(crate) fn page(&self, i: usize) -> Option<PageRef<'g>> {
        let pfn = self.pfns.get(i)?.pfn()?;
        // SAFETY: a page the walk found, valid for `'g` (invariant).
        Some(unsafe { PageRef::from_pfn(pfn) })
    }

    /// The pages of the walk, in order (`None` where it found none).
    pub(crate) fn iter(&self) -> impl Iterator<Item = Option<PageRef<'g>>> + '_ {
        (0..self.pfns.len()).map(|i| self.page(i))
    }

    /// Whether every entry names a page, mapped writable if `write`.
    pub(crate) fn all_mapped(&self, write: bool) -> bool {
        self.pfns
            .iter()
            .all(|e| e.pfn().is_some() && (!write || e.writable()))
    }

    /// Whether some entry is a device-private page mapped without write
    /// access.
    pub(crate) fn any_device_read_only(&self) -> bool {
        (0..self.pfns.len()).any(|i| {
            !self.pfns[i].writable() && self.page(i).is_some_and(PageRef::is_device_private)
        })
    }
}
