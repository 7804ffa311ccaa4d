// SPDX-License-Identifier: GPL-2.0

//! Mirroring a process's page tables: an `mmu_interval_notifier` with the
//! lock its invalidations take, and `hmm_range_fault` under its sequence
//! count.
//!
//! The protocol (`Documentation/mm/hmm.rst`): a walk ([`Mirror::fault`],
//! [`Mirror::snapshot`], in `walk`) fills entries under a sequence, begun
//! once no invalidation of the mirror is in flight (which the mirror's
//! [`Inflight`] tells, without `mmu_interval_read_begin()`'s
//! uninterruptible wait); then the mirror's lock is taken
//! ([`Mirror::lock`]) and the sequence and the mirror's generation of
//! invalidations checked ([`MirrorGuard::pages`]); while that lock is held, the pages found stay
//! valid, because every invalidation takes the same lock (here, in the
//! notifier's callback) before it lets the mm core go on. The types carry
//! the protocol: a page is only had from [`Pages`], which borrows the
//! guard, so no safe code can use a page found by a walk that went stale.
//!
//! The lock holds the mirror's table `T` ([`MirrorTable`]): what the
//! device keeps of the walks (msvm's device page table,
//! [`DevTable`](super::devtables::DevTable); the dmirror's page table,
//! [`PageTable`](super::pagetable::PageTable)). Every invalidation hands
//! its range to the table under the lock, before the new sequence is
//! published and before the mm core changes the process's page tables.
//!
//! # Lock order
//!
//! The mirror's lock is taken inside the mm core's own locks (an
//! invalidation comes from unmap, migration, reclaim): under it, nothing
//! allocates memory that can reclaim, takes `mmap_lock` or migrates.

use core::{
    marker::{PhantomData, PhantomPinned},
    ops::Deref,
};

use kernel::{
    mm::MmWithUser,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        Mutex, MutexGuard,
    },
    types::Opaque,
};

use super::bindings as b;
use super::inflight::Inflight;
use super::owner::Owner;
use super::page::PageRef;

mod walk;
pub(crate) use walk::{HmmPfn, Walk};

/// The name of every mirror's lock, one lock class for all tables (see
/// `super::pagemap::FREE_LOCK`: a literal in the generic
/// [`Mirror::create`] would be copied into each instantiation of it).
static MIRROR_LOCK: &CStr = c"Mirror::lock";

/// An invalidation of a mirrored range, as the table sees it.
pub(crate) struct Invalidation {
    /// The mm (its address: a key only).
    pub(crate) mm: usize,
    /// The first address.
    pub(crate) start: usize,
    /// The address after the last.
    pub(crate) end: usize,
    /// `MMU_NOTIFY_UNMAP`: `munmap`, `mremap`'s old range, the whole
    /// address space when the process exits.
    pub(crate) unmap: bool,
    /// The invalidation may sleep (else the lock was only tried).
    pub(crate) blockable: bool,
}

/// What a [`Mirror`]'s lock holds: the device's view of the mirrored
/// pages, told of every invalidation.
pub(crate) trait MirrorTable: Send + Sized + Unpin + 'static {
    /// Drops what the table holds of `inv`'s range: called under the
    /// mirror's lock, before the mm core changes the range (the pages it
    /// named may go right after). Must neither allocate nor sleep unless
    /// `inv.blockable`, nor take `mmap_lock`.
    fn invalidate(&mut self, inv: &Invalidation);

    /// Called first when `mirror` is dropped, still inserted and pinned.
    fn release(_mirror: &Mirror<Self>) {}
}

/// An interval notifier on `[start, end)` of an mm, and the lock its
/// invalidations take, which holds the table `T`.
///
/// # Invariants
///
/// If `inserted`, `sub` is registered with the mm for `[start, end)` and
/// stays so until drop, and `sub` is the first field so that the callback
/// finds the `Mirror`.
#[repr(C)]
#[pin_data(PinnedDrop)]
pub(crate) struct Mirror<T: MirrorTable> {
    #[pin]
    sub: Opaque<b::mmu_interval_notifier>,
    /// Held by users of the pages a walk found, and by every invalidation
    /// (from inside the mm core, under its locks, possibly from reclaim):
    /// see the lock order above.
    #[pin]
    lock: Mutex<T>,
    start: usize,
    end: usize,
    /// The owner this mirror's device makes pages exclusive for, if any:
    /// `make_device_exclusive`'s own invalidation for it is skipped.
    exclusive_for: Option<Owner>,
    inserted: bool,
    /// The invalidations in flight, which walks begin without waiting
    /// for.
    #[pin]
    inflight: Inflight,
    /// Lockers waiting for `lock` ([`Mirror::lock`], and invalidations
    /// that may sleep).
    waiting: Atomic<u32>,
    /// Lockers that could not wait and found `lock` held (bumped,
    /// wrapping): invalidations that may not sleep, shrink passes.
    refused: Atomic<u32>,
    #[pin]
    _pin: PhantomPinned,
}

// SAFETY: the notifier is driven by the mm core's own locking; the rest is
// a mutex around a `Send` table and plain values.
unsafe impl<T: MirrorTable> Send for Mirror<T> {}
// SAFETY: see `Send`.
unsafe impl<T: MirrorTable> Sync for Mirror<T> {}

struct Ops<T>(PhantomData<T>);

impl<T: MirrorTable> Ops<T> {
    const OPS: b::mmu_interval_notifier_ops = b::mmu_interval_notifier_ops {
        invalidate: Some(invalidate_cb::<T>),
        invalidate_start: None,
        invalidate_finish: None,
    };
}

/// `mmu_interval_notifier_ops.invalidate`: takes the mirror's lock (or, if
/// the invalidation may not sleep and the lock is busy, fails), tells the
/// table and publishes the new sequence, so that a walk checked under the
/// lock before this sees it stale.
///
/// # Safety
///
/// Called by the mm core for a notifier inserted by [`Mirror::create`].
unsafe extern "C" fn invalidate_cb<T: MirrorTable>(
    sub: *mut b::mmu_interval_notifier,
    range: *const b::mmu_notifier_range,
    cur_seq: usize,
) -> bool {
    // SAFETY: `sub` is the first field of a live `Mirror<T>` (invariant;
    // only `Mirror<T>` inserts with `Ops<T>`): it stays registered, hence
    // alive, until `mmu_interval_notifier_remove`, which waits for
    // callbacks.
    let mirror = unsafe { &*sub.cast::<Mirror<T>>() };
    // SAFETY: `range` is valid for the callback.
    let blockable = unsafe { b::msvm_mmu_notifier_range_blockable(range) };
    // SAFETY: `range` is valid for the callback; plain fields.
    let (event, mm, start, end, owner) = unsafe {
        (
            (*range).event,
            (*range).mm as usize,
            (*range).start,
            (*range).end,
            (*range).owner,
        )
    };
    // `make_device_exclusive`'s own, for this mirror's device: neither
    // told nor sequenced (so the sequence read before the call stays
    // valid), before the lock (the caller may hold it).
    let exclusive = event == kernel::bindings::mmu_notifier_event_MMU_NOTIFY_EXCLUSIVE;
    if skipped(exclusive, Owner::from_ptr(owner), mirror.exclusive_for) {
        return true;
    }
    let inv = Invalidation {
        mm,
        start,
        end,
        unmap: event == kernel::bindings::mmu_notifier_event_MMU_NOTIFY_UNMAP,
        blockable,
    };
    // Users hold the lock while they use pages of the range: an
    // invalidation waits for them (or, if it may not sleep, fails).
    let mut guard = if blockable {
        mirror.wait_lock()
    } else {
        match mirror.try_lock() {
            Some(g) => g,
            None => return false,
        }
    };
    // Under the lock, before the new sequence: a user that checks its walk
    // under the lock after this sees both, one before sees neither.
    let table: &mut T = &mut guard;
    table.invalidate(&inv);
    // Before the mm core changes the page tables, and under the lock that
    // walks are checked under.
    mirror.inflight.began(range as usize, cur_seq);
    // SAFETY: `sub` is the notifier being invalidated, valid for the
    // callback, and its lock is held as `mmu_interval_set_seq` requires.
    unsafe { b::msvm_mmu_interval_set_seq(sub, cur_seq) };
    true
}

/// Whether an invalidation is skipped, for a mirror whose device makes
/// pages exclusive for `mine`: `make_device_exclusive`'s (`exclusive`) for
/// that owner. Sound for any owner: the call leaves the same page mapped
/// at the address (through a device-exclusive entry, `mm/rmap.c`), and
/// whatever turns that entry back or removes it (a CPU fault's
/// `MMU_NOTIFY_CLEAR`, a zap, a migration, an exit) is another event,
/// which the table is told of.
fn skipped(exclusive: bool, owner: Owner, mine: Option<Owner>) -> bool {
    exclusive && mine == Some(owner)
}

impl<T: MirrorTable> Mirror<T> {
    /// Mirrors `[start, start + len)` of `mm`, its lock holding `table`.
    /// `exclusive_for`: the owner its device makes pages exclusive for
    /// ([`Mirror::make_exclusive`]), whose own invalidation the mirror
    /// skips, or none. Registers a notifier of the mirror's invalidations
    /// in flight ([`Inflight`]) and inserts the interval under `mm`'s mmap
    /// lock taken killably for writing; the registration takes every rmap
    /// lock of `mm` too (the caller must hold none: it would deadlock).
    /// `ERESTARTSYS` if a signal that is not fatal stops it, `EINTR` if a
    /// fatal one does.
    pub(crate) fn create(
        mm: &MmWithUser,
        (start, len): (usize, usize),
        table: impl PinInit<T>,
        exclusive_for: Option<Owner>,
    ) -> Result<Pin<KBox<Self>>> {
        let end = start.checked_add(len).ok_or(EINVAL)?;
        let mut m = KBox::pin_init(
            try_pin_init!(Self {
                sub <- Opaque::ffi_init(|p: *mut b::mmu_interval_notifier| {
                    // SAFETY: all-zeroes is the expected state before insert.
                    unsafe { core::ptr::write_bytes(p, 0, 1) };
                }),
                lock <- Mutex::new(table, MIRROR_LOCK, kernel::static_lock_class!()),
                start,
                end,
                exclusive_for,
                // INVARIANT: not inserted yet; `sub` is the first field
                // (`#[repr(C)]`).
                inserted: false,
                inflight <- Inflight::new(),
                waiting: Atomic::new(0),
                refused: Atomic::new(0),
                _pin: PhantomPinned,
            }? Error),
            GFP_KERNEL,
        )?;
        // One pointer for the fields set around the registration, before
        // any callback can see the mirror and after none can any more: no reference
        // is made while callbacks may hold one.
        // SAFETY: the pointer is used as described; nothing moves.
        let p: *mut Self = unsafe { Pin::get_unchecked_mut(m.as_mut()) };
        // SAFETY: `p` is the pinned mirror, referenced by no one else.
        // INVARIANT: inserted (and registered) just below, for
        // `[start, end)`, or taken back (when no callback can run any more).
        let inflight = unsafe {
            (*p).inserted = true;
            let inflight = core::ptr::addr_of_mut!((*p).inflight);
            Inflight::set_mm(inflight, mm.as_raw());
            inflight
        };
        // The classic notifier is registered first, then the interval
        // inserted: every invalidation the interval's callback sees then
        // ends on a list that holds the notifier (`super::inflight`).
        // SAFETY: both notifiers are pinned and zeroed but for the
        // classic one's ops; `mm` has users (the borrow); the interval's
        // ops table is static and `T`'s, this mirror's.
        let r = kernel::error::to_result(unsafe {
            b::msvm_mirror_insert_killable(
                Inflight::notifier(inflight),
                Opaque::cast_into(core::ptr::addr_of!((*p).sub)),
                mm.as_raw(),
                start,
                len,
                &Ops::<T>::OPS,
            )
        });
        if let Err(e) = r {
            // SAFETY: as above; neither is registered any more, and the
            // unregistration waited for the classic one's callbacks (SRCU).
            unsafe {
                (*p).inserted = false;
                Inflight::set_mm(inflight, core::ptr::null_mut());
            }
            return Err(super::cancel::restart_unless_killed(e));
        }
        // The interval's sequence once inserted: the period of the
        // invalidations in flight now, whose callbacks a deferred insertion
        // missed.
        // SAFETY: inserted just above.
        let period = unsafe { b::msvm_mmu_interval_seq(m.sub.get()) };
        m.inflight.missed(period);
        Ok(m)
    }

    /// The mirrored mm.
    pub(super) fn mm(&self) -> *mut kernel::bindings::mm_struct {
        // SAFETY: the notifier is inserted (it is, for every `Mirror` that
        // `create` returned), so its `mm` is set and stays.
        unsafe { (*self.sub.get()).mm }
    }

    /// The owner the mirror's device makes pages exclusive for, if any.
    pub(crate) fn exclusive_owner(&self) -> Option<Owner> {
        self.exclusive_for
    }

    /// Whether `[start, end)` lies in the mirrored range: only there do
    /// invalidations reach the table.
    pub(super) fn covers(&self, start: usize, end: usize) -> bool {
        self.start <= start && start <= end && end <= self.end
    }

    /// The notifier's sequence, once no invalidation is running.
    pub(super) fn read_begin(&self) -> usize {
        // SAFETY: the notifier is inserted (see `mm`).
        unsafe { b::mmu_interval_read_begin(self.sub.get()) }
    }

    /// Whether an invalidation came since `seq` was read; reliable with
    /// the lock held.
    pub(super) fn retry(&self, seq: usize) -> bool {
        // SAFETY: the notifier is inserted (see `mm`).
        unsafe { b::msvm_mmu_interval_read_retry(self.sub.get(), seq) }
    }

    /// The sequence now, once no invalidation is running: what a change
    /// made after this call (a migration's) is checked against under the
    /// lock ([`MirrorSeq`]).
    #[allow(dead_code)] // msvm_dmirror.ko's (the glue is built into both modules).
    pub(crate) fn begin(&self) -> MirrorSeq<'_> {
        MirrorSeq {
            mirror: self.id(),
            seq: self.read_begin(),
            _mirror: PhantomData,
        }
    }

    /// The mirror's identity, for walks (an address, compared only).
    pub(super) fn id(&self) -> usize {
        core::ptr::from_ref(self).cast::<()>() as usize
    }

    /// Holds invalidations off: the pages of a walk that is still valid
    /// once this is taken ([`MirrorGuard::pages`]) stay as found while the
    /// guard lives.
    pub(crate) fn lock(&self) -> MirrorGuard<'_, T> {
        let guard = self.wait_lock();
        // INVARIANT: our lock.
        MirrorGuard {
            mirror: self,
            guard,
            refused: self.refused.load(Relaxed),
        }
    }

    /// Takes the lock, counted as waiting for it meanwhile (see
    /// [`MirrorGuard::contended`]).
    pub(super) fn wait_lock(&self) -> MutexGuard<'_, T> {
        self.waiting.add(1, Relaxed);
        let guard = self.lock.lock();
        self.waiting.fetch_sub(1, Relaxed);
        guard
    }

    /// Takes the lock if it is free; if not, the refusal is counted (see
    /// [`MirrorGuard::contended`]).
    pub(super) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        let guard = self.lock.try_lock();
        if guard.is_none() {
            self.refused.add(1, Relaxed);
        }
        guard
    }
}

#[pinned_drop]
impl<T: MirrorTable> PinnedDrop for Mirror<T> {
    fn drop(self: Pin<&mut Self>) {
        T::release(&self);
        // (`inflight` unregisters its notifier when it is dropped, after.)
        if self.inserted {
            // SAFETY: inserted (invariant); this waits for running callbacks.
            unsafe { b::mmu_interval_notifier_remove(self.sub.get()) };
        }
    }
}

/// A sequence of a [`Mirror`] ([`Mirror::begin`]), which it cannot
/// outlive (another mirror may take its address).
#[derive(Clone, Copy)]
pub(crate) struct MirrorSeq<'m> {
    mirror: usize,
    seq: usize,
    _mirror: PhantomData<&'m ()>,
}

/// A [`Mirror`]'s lock, held; reads as the table it guards. Only this
/// module's siblings change the table, keeping its invariants.
///
/// # Invariants
///
/// `guard` is `mirror`'s lock.
pub(crate) struct MirrorGuard<'a, T: MirrorTable> {
    mirror: &'a Mirror<T>,
    guard: MutexGuard<'a, T>,
    /// The mirror's `refused` when the lock was taken.
    refused: u32,
}

impl<T: MirrorTable> Deref for MirrorGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<'a, T: MirrorTable> MirrorGuard<'a, T> {
    /// The mirror whose lock this is.
    pub(super) fn mirror(&self) -> &'a Mirror<T> {
        self.mirror
    }

    /// The table, to change.
    pub(super) fn table_mut(&mut self) -> &mut T {
        &mut self.guard
    }

    /// Whether someone else wants the lock: a locker waits for it, or an
    /// invalidation that could not wait was refused it since it was taken
    /// (the mm core tries that one again). A holder that keeps the lock
    /// across long work (a device running a pipeline of jobs) lets go
    /// when this says so.
    pub(crate) fn contended(&self) -> bool {
        self.mirror.waiting.load(Relaxed) > 0 || self.mirror.refused.load(Relaxed) != self.refused
    }

    /// Whether `walk` is this mirror's and no invalidation came since it:
    /// `EAGAIN` if one did (walk again), `EINVAL` if it is another
    /// mirror's.
    pub(super) fn check(&self, walk: &Walk<'_, '_>) -> Result {
        if walk.mirror != self.mirror.id() {
            return Err(EINVAL);
        }
        // The lock is held (`self`), as the check requires to be reliable;
        // the generation changes under it too (`invalidate_cb`).
        if self.mirror.retry(walk.seq) || self.mirror.inflight.generation() != walk.generation {
            return Err(EAGAIN);
        }
        Ok(())
    }

    /// Whether no invalidation came since `seq` was read: `EAGAIN` if one
    /// did, `EINVAL` if `seq` is another mirror's.
    pub(crate) fn check_seq(&self, seq: MirrorSeq<'_>) -> Result {
        if seq.mirror != self.mirror.id() {
            return Err(EINVAL);
        }
        // The lock is held (`self`), as the check requires to be reliable.
        if self.mirror.retry(seq.seq) {
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
        Ok(Pages {
            pfns: walk.pfns(),
            start: walk.start(),
        })
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
    /// The address of the first entry.
    start: usize,
}

impl<'g> Pages<'g> {
    /// No pages.
    pub(crate) fn empty() -> Pages<'static> {
        // INVARIANT: no entries.
        Pages {
            pfns: &[],
            start: 0,
        }
    }

    /// The address of entry 0: entry `i` is the page at `start() + i` pages.
    pub(crate) fn start(&self) -> usize {
        self.start
    }

    /// The page of entry `i`, if the walk found one there.
    pub(crate) fn page(&self, i: usize) -> Option<PageRef<'g>> {
        let pfn = self.pfns.get(i)?.pfn()?;
        // SAFETY: a page the walk found, valid for `'g` (invariant).
        Some(unsafe { PageRef::from_pfn(pfn) })
    }

    /// Entry `i` of the walk.
    pub(crate) fn entry(&self, i: usize) -> Option<HmmPfn> {
        self.pfns.get(i).copied()
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

/// A table that counts the invalidations reaching it, for KUnit cases.
#[cfg(CONFIG_KUNIT = "y")]
#[derive(Default)]
pub(crate) struct Counting {
    /// Invalidations.
    pub(crate) invalidations: usize,
    /// Of those, unmaps.
    pub(crate) unmaps: usize,
}

#[cfg(CONFIG_KUNIT = "y")]
impl MirrorTable for Counting {
    fn invalidate(&mut self, inv: &Invalidation) {
        self.invalidations += 1;
        self.unmaps += usize::from(inv.unmap);
    }
}

#[kunit_tests(msvm_hmm)]
mod tests {
    use super::super::cancel::Cancel;
    use super::super::kunit_mm::{check, TestMapping};
    use super::super::page::PAGE_SIZE;
    use super::*;

    /// Only `make_device_exclusive`'s invalidation for the mirror's own
    /// exclusive owner is skipped; a mirror without one skips nothing.
    #[test]
    fn skips_only_its_own_exclusive_invalidation() {
        use crate::mm::owner::OwnerKey;
        static MINE: OwnerKey<()> = OwnerKey::new();
        static OTHER: OwnerKey<()> = OwnerKey::new();
        let mine = Some(MINE.owner());
        assert!(skipped(true, MINE.owner(), mine));
        assert!(!skipped(true, OTHER.owner(), mine));
        assert!(!skipped(true, Owner::NONE, mine));
        assert!(!skipped(false, MINE.owner(), mine));
        assert!(!skipped(true, MINE.owner(), None));
        assert!(!skipped(true, Owner::NONE, None));
    }

    /// A walk of a process's memory finds its pages (faulted in writable
    /// if asked), valid under the lock until an invalidation of the range
    /// comes: then `EAGAIN`, and the table was told first. Walks outside
    /// the mirror, or checked against another mirror, are refused.
    #[test]
    fn a_walk_is_valid_until_an_invalidation() -> Result {
        let m = TestMapping::new(2 * PAGE_SIZE)?;
        m.fill(0, PAGE_SIZE, 0x21)?;
        let mm = m.mm();
        let mirror = Mirror::create(mm, (m.addr(), 2 * PAGE_SIZE), Counting::default(), None)?;
        let other = Mirror::create(mm, (m.addr(), 2 * PAGE_SIZE), Counting::default(), None)?;
        let mut pfns = [HmmPfn::NONE; 2];
        let cancel = Cancel::task();
        let walk = mirror.fault(mm, m.addr(), &mut pfns, true, Owner::NONE, &cancel)?;
        check(walk.start() == m.addr())?;
        // Both pages faulted in writable (the second, never touched, too).
        check(
            walk.pfns()
                .iter()
                .all(|e| e.pfn().is_some() && e.writable()),
        )?;
        {
            let g = mirror.lock();
            let pages = g.pages(&walk)?;
            check(pages.page(0).is_some_and(|p| p.is_anon()))?;
            check(g.invalidations == 0)?;
        }
        // (Not under the first mirror's lock: two mirrors' locks are one
        // class, never nested.)
        check(other.lock().pages(&walk).err() == Some(EINVAL))?;
        // Beyond the mirror's range.
        let mut past = [HmmPfn::NONE; 1];
        let end = m.addr() + 2 * PAGE_SIZE;
        check(
            mirror
                .fault(mm, end, &mut past, false, Owner::NONE, &cancel)
                .err()
                == Some(EINVAL),
        )?;
        drop(m);
        let g = mirror.lock();
        check(g.pages(&walk).err() == Some(EAGAIN))?;
        check(g.unmaps >= 1)?;
        Ok(())
    }
}
