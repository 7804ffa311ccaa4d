// SPDX-License-Identifier: GPL-2.0

//! The dmem cgroup controller (`kernel/cgroup/dmem.c`): a device's memory
//! as a cgroup region ([`Region`]), pages of it charged to the cgroup of
//! the task that allocates them ([`PageCharge`]), the charges of a
//! pagemap's pages kept beside them ([`PageCharges`]), and whole 2 MiB
//! blocks charged at once ([`BlockCharge`]: replicas).
//!
//! Each successful charge holds one reference to its cgroup pool (and
//! css), which its one uncharge drops: a charge is a value that uncharges
//! when it is dropped, never copied, so that each charge is undone exactly
//! once. msvm charges page by page (a 2 MiB folio is 512 charges): a folio
//! split later needs no new charge, and every freed page gives its own
//! back.
//!
//! Without `CONFIG_CGROUP_DMEM` a region is not registered and every
//! charge succeeds with nothing behind it: no limits, nothing counted.
//!
//! # Lock order
//!
//! A charge holds its region's SRCU read side (`Region::readers`), which
//! [`Region::withdraw`] waits for (with nothing held). Charging takes the
//! controller's global `dmemcg_lock` (a spinlock, inside) and may sleep (it may allocate the cgroup's pool
//! for the region, `GFP_KERNEL`): process context, no spinlock held (an
//! mmap lock is fine: msvm charges during migration steps). An uncharge
//! and [`PageCharges`] work in any context (`folio_free`);
//! [`PageCharges::evictable`] holds an RCU read-side section, and the
//! controller walks the cgroup subtree under it.

use core::ptr::NonNull;

use kernel::error::from_err_ptr;
use kernel::prelude::*;
use kernel::sync::atomic::{Atomic, Full, Relaxed};
use kernel::sync::{rcu, Srcu};

use super::bindings as b;
use super::page::{BLOCK_SIZE, PAGE_SIZE};

type PoolState = b::dmem_cgroup_pool_state;

/// Bytes of one page's charge.
// CAST: `PAGE_SIZE` fits in `u64`.
const PAGE_BYTES: u64 = PAGE_SIZE as u64;

/// Bytes of one block's charge.
// CAST: `BLOCK_SIZE` fits in `u64`.
const BLOCK_BYTES: u64 = BLOCK_SIZE as u64;

/// A device memory region of the dmem controller, unregistered when it is
/// withdrawn ([`Region::withdraw`]: a device gone, whose memory may still
/// be charged for a while, must not keep its name) or dropped.
///
/// # Invariants
///
/// If not null, `raw` is a region returned by `dmem_cgroup_register_region`
/// and not unregistered yet; it becomes null only by [`Region::withdraw`],
/// which unregisters the region once every reader of the old value (under
/// `readers`) is done.
#[pin_data(PinnedDrop)]
pub(crate) struct Region {
    /// Charges read `raw` under it.
    #[pin]
    readers: Srcu,
    raw: Atomic<*mut b::dmem_cgroup_region>,
}

/// Why a page was not charged.
pub(crate) enum Refusal {
    /// The cgroup (or an ancestor: the limiting pool) is at its `dmem.max`.
    Limit(LimitPool),
    /// No memory for the cgroup's pool, or the region is going away.
    Error(Error),
}

impl Region {
    /// Registers `size` bytes of device memory as region `name` (as
    /// `dmem.capacity` lists it: `drm/<pci address>/vram`). Without the
    /// controller (or with `size` 0), a region that charges nothing.
    pub(crate) fn register(size: u64, name: &CStr) -> impl PinInit<Self, Error> + '_ {
        try_pin_init!(Self {
            // First: nothing registered if it fails.
            readers <- kernel::new_srcu!("Region::readers"),
            raw: {
                // SAFETY: `name` is a NUL-terminated string for the call (the
                // controller copies it).
                let r = unsafe { b::msvm_dmem_register(size, name.as_char_ptr()) };
                // INVARIANT: registered (if not NULL), unregistered when
                // withdrawn or dropped.
                Atomic::new(from_err_ptr(r)?)
            },
        }? Error)
    }

    /// Whether the controller counts this region (the kernel has it, and
    /// the region is not withdrawn).
    pub(crate) fn is_registered(&self) -> bool {
        !self.raw.load(Relaxed).is_null()
    }

    /// Unregisters the region now (its name free for a new one), once no
    /// charge is under way: charges from now on charge nothing. Charges
    /// held are undone as usual (each holds its cgroup pool).
    pub(crate) fn withdraw(&self) {
        let r = self.raw.xchg(core::ptr::null_mut(), Full);
        if r.is_null() {
            return;
        }
        // Every charge that may have read the region is done.
        self.readers.synchronize();
        // SAFETY: registered and not unregistered yet (invariant: only the
        // one `withdraw` that took it does); no charge uses it any more
        // (above).
        unsafe { b::msvm_dmem_unregister(r) };
    }

    /// Charges one page to the dmem cgroup of the calling task (a kernel
    /// thread's land in the root cgroup, which has no limit). May sleep.
    pub(crate) fn charge_page(&self) -> Result<PageCharge, Refusal> {
        // INVARIANT: a charge of `PAGE_BYTES`, or none.
        self.try_charge(PAGE_BYTES).map(PageCharge)
    }

    /// Charges a 2 MiB block to the dmem cgroup of the calling task, as
    /// [`Self::charge_page`] does a page. May sleep.
    pub(crate) fn charge_block(&self) -> Result<BlockCharge, Refusal> {
        // INVARIANT: a charge of `BLOCK_BYTES`, or none.
        self.try_charge(BLOCK_BYTES).map(BlockCharge)
    }

    /// Charges `bytes` to the calling task's cgroup: the pool charged, with
    /// the reference the charge took (`None` without the controller).
    fn try_charge(&self, bytes: u64) -> Result<Option<NonNull<PoolState>>, Refusal> {
        // A sleepable read-side section: the charge may allocate.
        let _reading = self.readers.read_lock();
        let region = self.raw.load(Relaxed);
        if region.is_null() {
            return Ok(None);
        }
        let mut pool = core::ptr::null_mut();
        let mut limit = core::ptr::null_mut();
        let (out, out_limit) = (&mut pool, &mut limit);
        // SAFETY: `region` is registered (invariant) and stays so while
        // `_reading` lives (a withdrawal waits for it); both out pointers
        // are valid for writes.
        let ret = unsafe { b::msvm_dmem_try_charge(region, bytes, out, out_limit) };
        if ret == 0 {
            return Ok(NonNull::new(pool));
        }
        match NonNull::new(limit) {
            // INVARIANT: the limiting pool of an `EAGAIN`, with a
            // reference for us.
            Some(l) if ret == EAGAIN.to_errno() => Err(Refusal::Limit(LimitPool(l))),
            _ => Err(Refusal::Error(Error::from_errno(ret))),
        }
    }
}

#[pinned_drop]
impl PinnedDrop for Region {
    fn drop(self: Pin<&mut Self>) {
        // Charges still held keep their pools, and uncharge safely.
        self.withdraw();
    }
}

/// The cgroup pool whose `dmem.max` refused a charge.
///
/// # Invariants
///
/// `0` is a pool with a reference of ours (from `dmem_cgroup_try_charge`),
/// dropped on drop.
pub(crate) struct LimitPool(NonNull<PoolState>);

impl Drop for LimitPool {
    fn drop(&mut self) {
        // SAFETY: our reference (invariant), given up here.
        unsafe { b::msvm_dmem_pool_put(self.0.as_ptr()) };
    }
}

/// One page charged to a dmem cgroup, uncharged on drop (in any context).
///
/// # Invariants
///
/// If `Some`, `0` is the pool of one successful charge of [`PAGE_BYTES`],
/// with the reference the charge took, not uncharged yet.
pub(crate) struct PageCharge(Option<NonNull<PoolState>>);

// SAFETY: a charge may be undone from any thread.
unsafe impl Send for PageCharge {}

impl PageCharge {
    /// Whether it charges anything (not without the controller, nor once
    /// its region is withdrawn).
    pub(crate) fn is_charged(&self) -> bool {
        self.0.is_some()
    }

    fn into_raw(self) -> *mut PoolState {
        let p = self.0.map_or(core::ptr::null_mut(), NonNull::as_ptr);
        core::mem::forget(self);
        p
    }
}

impl Drop for PageCharge {
    fn drop(&mut self) {
        if let Some(p) = self.0 {
            // SAFETY: a charge of `PAGE_BYTES` to `p` not undone yet
            // (invariant); undone here, once.
            unsafe { b::msvm_dmem_uncharge(p.as_ptr(), PAGE_BYTES) };
        }
    }
}

/// A 2 MiB block charged to a dmem cgroup, uncharged on drop (in any
/// context).
///
/// # Invariants
///
/// If `Some`, `0` is the pool of one successful charge of [`BLOCK_BYTES`],
/// with the reference the charge took, not uncharged yet.
pub(crate) struct BlockCharge(Option<NonNull<PoolState>>);

// SAFETY: a charge may be undone from any thread.
unsafe impl Send for BlockCharge {}

impl BlockCharge {
    /// Whether it charges anything (not without the controller).
    pub(crate) fn is_charged(&self) -> bool {
        self.0.is_some()
    }

    /// Whether `evictor` may take the block (as [`PageCharges::evictable`]
    /// a page of it): under a limit, only a block charged inside it
    /// (msvm asks only under a limit today: replicas on a full device go
    /// with their chunks).
    pub(crate) fn evictable(&self, evictor: Evictor<'_>) -> bool {
        let (limit, ignore_low) = match evictor {
            Evictor::Full { ignore_low } => (core::ptr::null_mut(), ignore_low),
            Evictor::Limit { pool, ignore_low } => (pool.0.as_ptr(), ignore_low),
        };
        let Some(test) = self.0 else {
            return limit.is_null();
        };
        let mut hit_low = false;
        // SAFETY: `test` is alive: the charge holds a reference to it
        // (invariant); `limit` is NULL or a pool we hold a reference to
        // (a `LimitPool`, borrowed for the call); `hit_low` is valid for
        // writes.
        unsafe { b::msvm_dmem_evict_valuable(limit, test.as_ptr(), ignore_low, &mut hit_low) }
    }
}

impl Drop for BlockCharge {
    fn drop(&mut self) {
        if let Some(p) = self.0 {
            // SAFETY: a charge of `BLOCK_BYTES` to `p` not undone yet
            // (invariant); undone here, once.
            unsafe { b::msvm_dmem_uncharge(p.as_ptr(), BLOCK_BYTES) };
        }
    }
}

/// Whom an eviction may take pages from ([`PageCharges::evictable`]).
#[derive(Clone, Copy)]
pub(crate) enum Evictor<'a> {
    /// Making room on a full device: anyone's pages but those `dmem.min`
    /// (and, unless `ignore_low`, `dmem.low`) protect.
    Full { ignore_low: bool },
    /// Making room under the limit of cgroup pool `pool`: only pages
    /// charged inside it, but those its descendants' `dmem.min` (and,
    /// unless `ignore_low`, `dmem.low`) protect within it.
    Limit {
        pool: &'a LimitPool,
        ignore_low: bool,
    },
}

impl Evictor<'_> {
    /// The same evictor, ignoring `dmem.low`.
    pub(crate) fn ignoring_low(self) -> Self {
        match self {
            Evictor::Full { .. } => Evictor::Full { ignore_low: true },
            Evictor::Limit { pool, .. } => Evictor::Limit {
                pool,
                ignore_low: true,
            },
        }
    }
}

/// The charges of `n` pages (a pagemap's), by page index: each slot holds
/// at most one page's charge, which it owns.
///
/// # Invariants
///
/// A non-null slot is the pool of one [`PageCharge`] given up to the table
/// ([`PageCharge::into_raw`]), undone once: by a `take`, a `put` over it,
/// or the table's drop.
pub(crate) struct PageCharges {
    slots: KVVec<Atomic<*mut PoolState>>,
}

impl PageCharges {
    /// A table of `n` empty slots (8 bytes each: `kvmalloc`, a 64 MiB
    /// chunk's table is 128 KiB).
    pub(crate) fn new(n: usize) -> Result<Self> {
        let mut slots = KVVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            slots.push(Atomic::new(core::ptr::null_mut()), GFP_KERNEL)?;
        }
        // INVARIANT: every slot empty.
        Ok(Self { slots })
    }

    /// Gives page `i` charge `c` (a charge it held already is undone).
    /// Out of range: `c` is undone.
    pub(crate) fn put(&self, i: usize, c: PageCharge) {
        let Some(slot) = self.slots.get(i) else {
            return;
        };
        // INVARIANT: the slot owns `c` now; the charge it held comes back
        // to a `PageCharge`, dropped (undone).
        let old = slot.xchg(c.into_raw(), Full);
        drop(PageCharge(NonNull::new(old)));
    }

    /// Takes page `i`'s charge, if it has one.
    pub(crate) fn take(&self, i: usize) -> Option<PageCharge> {
        let old = self.slots.get(i)?.xchg(core::ptr::null_mut(), Full);
        // INVARIANT: the slot no longer owns it; the caller does.
        NonNull::new(old).map(|p| PageCharge(Some(p)))
    }

    /// Undoes the charges of pages `first..first + nr` (freed pages).
    /// Returns how many there were.
    pub(crate) fn uncharge(&self, first: usize, nr: usize) -> usize {
        (first..first.saturating_add(nr))
            .filter_map(|i| self.take(i))
            .count()
    }

    /// Whether `evictor` may evict every charged page of pages
    /// `first..first + n` (uncharged pages belong to no cgroup: evictable;
    /// but under a limit, one page at least must be charged inside it),
    /// and whether
    /// `dmem.low` alone kept one (a pass that ignores it would take them).
    /// The pages of one range usually share a pool: each run of pages with
    /// the same pool is checked once.
    pub(crate) fn evictable(&self, first: usize, n: usize, evictor: Evictor<'_>) -> (bool, bool) {
        let (limit, ignore_low) = match evictor {
            Evictor::Full { ignore_low } => (core::ptr::null_mut(), ignore_low),
            Evictor::Limit { pool, ignore_low } => (pool.0.as_ptr(), ignore_low),
        };
        // A pool is freed after a grace period once its last charge is
        // undone: read under RCU, each stays valid for its check even if
        // its pages' charges go meanwhile.
        let _rcu = rcu::read_lock();
        let mut last = core::ptr::null_mut();
        let mut hit_low = false;
        // Under a limit, only a range with pages charged inside it is worth
        // evicting (others free nothing of it).
        let mut any = !matches!(evictor, Evictor::Limit { .. });
        let end = first.saturating_add(n).min(self.slots.len());
        for slot in self.slots.get(first..end).unwrap_or(&[]) {
            let test = slot.load(Relaxed);
            if test.is_null() || test == last {
                continue;
            }
            last = test;
            any = true;
            // SAFETY: `test` is a pool alive for the RCU read-side section
            // (see above); `limit` is NULL or a pool we hold a reference to
            // (a `LimitPool`, borrowed for the call); `hit_low` is valid for
            // writes.
            if !unsafe { b::msvm_dmem_evict_valuable(limit, test, ignore_low, &mut hit_low) } {
                return (false, hit_low);
            }
        }
        (any, hit_low)
    }
}

impl Drop for PageCharges {
    fn drop(&mut self) {
        self.uncharge(0, self.slots.len());
    }
}

#[kunit_tests(msvm_dmem)]
mod tests {
    use super::*;

    /// KUnit runs in a kernel thread: its charges land in the root cgroup,
    /// which has no limit. What is checked is the ownership of charges.
    #[test]
    fn each_charge_is_undone_once() -> Result {
        let region = KBox::pin_init(
            Region::register(16 * PAGE_BYTES, c"msvm-kunit/dmem"),
            GFP_KERNEL,
        )?;
        let on = usize::from(region.is_registered());
        let charge = || region.charge_page().map_err(|_| ENOSPC);
        let t = PageCharges::new(4)?;
        assert!(t.take(0).is_none());
        t.put(1, charge()?);
        // A put over a charge undoes the old one; out of range, the new one.
        t.put(1, charge()?);
        t.put(9, charge()?);
        t.put(3, charge()?);
        // Without the controller, charges hold nothing: empty slots.
        assert_eq!(t.take(1).is_some(), on == 1);
        assert_eq!(t.uncharge(0, 4), on);
        assert_eq!(t.uncharge(0, 4), 0);
        // Uncharged pages, and the root cgroup's, are evictable.
        t.put(2, charge()?);
        let full = Evictor::Full { ignore_low: false };
        assert_eq!(t.evictable(0, 4, full), (true, false));
        // The table undoes what it still holds when it goes.
        drop(t);
        Ok(())
    }

    #[test]
    fn no_region_of_size_zero() -> Result {
        let empty = KBox::pin_init(Region::register(0, c"msvm-kunit/empty"), GFP_KERNEL)?;
        assert!(!empty.is_registered());
        Ok(())
    }

    /// A withdrawn region charges nothing, and its charges still held are
    /// undone as usual.
    #[test]
    fn a_withdrawn_region_charges_nothing() -> Result {
        let region = KBox::pin_init(
            Region::register(16 * PAGE_BYTES, c"msvm-kunit/withdrawn"),
            GFP_KERNEL,
        )?;
        let on = region.is_registered();
        let held = region.charge_page().map_err(|_| ENOSPC)?;
        assert_eq!(held.is_charged(), on);
        region.withdraw();
        assert!(!region.is_registered());
        let after = region.charge_page().map_err(|_| ENOSPC)?;
        assert!(!after.is_charged());
        // Its name is free for another, which charges as the first did.
        let again = KBox::pin_init(
            Region::register(16 * PAGE_BYTES, c"msvm-kunit/withdrawn"),
            GFP_KERNEL,
        )?;
        let other = again.charge_page().map_err(|_| ENOSPC)?;
        assert_eq!(other.is_charged(), on);
        // Both undone, the first after its region went.
        drop(held);
        drop(other);
        region.withdraw();
        Ok(())
    }
}
