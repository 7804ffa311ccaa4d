// SPDX-License-Identifier: GPL-2.0

//! msvm's mirrors: a [`Mirror`] whose lock holds the device page table
//! ([`DevPt`]) of one device, and the [`Tables`] of that device, which
//! empty every such table before the device goes.
//!
//! A valid walk's pages are bound into the table
//! ([`MirrorGuard::bind`]), and every invalidation zaps the entries of its
//! range before it returns, so that the device may use them across jobs
//! without walking again.
//!
//! # Lock order
//!
//! `Tables::mirrors`, then a mirror's lock (see `super::hmm`).

use kernel::{
    device::{Bound, Device},
    mm::MmWithUser,
    new_mutex,
    prelude::*,
    sync::{aref::ARef, atomic::Relaxed, Arc, Mutex},
    time::{Instant, Monotonic},
};

use super::devpt::{Bind, Counters, DevPt, DeviceTable, Life, Spare};
use super::hmm::{Invalidation, Mirror, MirrorGuard, MirrorTable, Walk};
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
    /// Makes the device's side of a new table, where the device walks
    /// tables of its own ([`DeviceTable`]; `None` from it: the table has
    /// none, and its jobs run on the CPU).
    device_tables: Option<NewDeviceTable>,
    #[pin]
    mirrors: Mutex<Option<KVec<usize>>>,
}

/// Makes the device's side of a new table ([`Tables::new`]).
pub(crate) type NewDeviceTable = KBox<dyn Fn() -> Option<KBox<dyn DeviceTable>> + Send + Sync>;

/// Empties a device's tables when it is unbound (a device-managed action).
struct Gone(Arc<Tables>);

impl Drop for Gone {
    fn drop(&mut self) {
        self.0.gone();
    }
}

impl Tables {
    /// The tables of device `dev`, msvm's device `index`, none yet; each
    /// gets its device's side from `device_tables`, if given.
    pub(crate) fn new(
        dev: &Device<Bound>,
        index: usize,
        device_tables: Option<NewDeviceTable>,
    ) -> Result<Arc<Self>> {
        let d: &Device = dev;
        let t = Arc::pin_init(
            pin_init!(Self {
                dev: d.into(),
                counters: Counters::new(index),
                device_tables,
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
        match self.mirrors.try_lock() {
            Some(list) => self.zap_all(&list, false),
            None => 0,
        }
    }

    /// Empties the tables of every VM of the device, waiting for the jobs
    /// that run (their mirror's lock): no entry is left that a walk made
    /// before this call, and the jobs fault again. Returns the bytes
    /// freed.
    pub(crate) fn empty(&self) -> usize {
        self.zap_all(&self.mirrors.lock(), true)
    }

    /// Empties the tables of the mirrors of `list` (this device's, locked),
    /// those whose lock is free only, unless `wait`.
    fn zap_all(&self, list: &Option<KVec<usize>>, wait: bool) -> usize {
        let mut freed = 0;
        for &a in list.iter().flatten() {
            // SAFETY: a registered mirror is alive while the lock is held
            // (invariant).
            let m = unsafe { &*(a as *const Mirror<DevTable>) };
            let table = if wait {
                Some(m.wait_lock())
            } else {
                m.try_lock()
            };
            if let Some(mut t) = table {
                let before = t.pt.bytes();
                t.pt.zap(0, usize::MAX, Some(&self.counters), true);
                freed += before - t.pt.bytes();
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
            let m = unsafe { &*(a as *const Mirror<DevTable>) };
            m.wait_lock().pt.detach(&self.counters);
        }
        // INVARIANT: no mirror is registered any more.
        *list = None;
    }
}

/// Told of each invalidation in a mirror's range: the mm's address (a key
/// only), the range, and whether it is an unmap.
pub(crate) type OnInvalidate = fn(usize, usize, usize, bool);

/// Told of each zap of a device page table that removed entries: the
/// device's index, the range, the entries removed and the nanoseconds it
/// took (msvm's trace event).
pub(crate) type OnZapped = fn(usize, usize, usize, u64, u64);

/// A mirror of msvm's: its lock holds a device page table.
pub(crate) type DevMirror = Mirror<DevTable>;

/// The table of one msvm mirror: the device page table, the tables of its
/// device, and whom to tell of invalidations.
///
/// # Invariants
///
/// `pt` is attached to its device (may bind) only while the mirror's
/// address is in `tables`.
pub(crate) struct DevTable {
    pt: DevPt,
    /// The tables of its device.
    tables: Arc<Tables>,
    on_invalidate: OnInvalidate,
    on_zapped: OnZapped,
}

impl MirrorTable for DevTable {
    fn invalidate(&mut self, inv: &Invalidation) {
        (self.on_invalidate)(inv.mm, inv.start, inv.end, inv.unmap);
        // The device's entries of the range go before the mm core changes
        // them, and the translations of its TLB with them (`DevPt::zap`).
        let t0 = Instant::<Monotonic>::now();
        let c = &self.tables.counters;
        let zapped = self.pt.zap(inv.start, inv.end, Some(c), inv.blockable);
        if zapped > 0 {
            // CAST: an elapsed time is not negative.
            let ns = t0.elapsed().as_nanos() as u64;
            c.invalidations.add(1, Relaxed);
            c.zapped.add(zapped, Relaxed);
            c.zap_ns.add(ns, Relaxed);
            (self.on_zapped)(c.index, inv.start, inv.end, zapped, ns);
        }
    }

    fn release(mirror: &Mirror<Self>) {
        // The table is emptied, and the mirror forgotten by its device's
        // tables, under their lock: the device cannot go meanwhile (its
        // mappings are unmapped while it is bound).
        let mut guard = mirror.wait_lock();
        let tables = guard.tables.clone();
        drop(guard);
        let mut list = tables.mirrors.lock();
        let me = core::ptr::from_ref(mirror) as usize;
        if let Some(l) = (*list).as_mut() {
            l.retain(|a| *a != me);
        }
        guard = mirror.wait_lock();
        guard.pt.detach(&tables.counters);
    }
}

impl Mirror<DevTable> {
    /// Mirrors `[start, start + len)` of `mm`, telling `on_invalidate` of
    /// every invalidation in it, and whether it is an unmap
    /// (`MMU_NOTIFY_UNMAP`: `munmap`, `mremap`'s old range, the whole
    /// address space when the process exits). It is called before the mm
    /// core changes the page tables, under the mirror's lock, before the
    /// new sequence is published (an invalidation that fails, unable to
    /// sleep, calls nothing): it must neither sleep nor allocate; so must
    /// `on_zapped`, told of each zap of the device page table that removed
    /// entries (the device's index, the range, the entries, nanoseconds).
    /// Its device page table is one of `tables` (`ENODEV` if their device
    /// is gone).
    pub(crate) fn new(
        mm: &MmWithUser,
        range: (usize, usize),
        (on_invalidate, on_zapped): (OnInvalidate, OnZapped),
        tables: &Arc<Tables>,
    ) -> Result<Pin<KBox<Self>>> {
        let table = DevTable {
            // SAFETY: no device: attached below, once registered.
            pt: unsafe { DevPt::new(None) },
            tables: tables.clone(),
            on_invalidate,
            on_zapped,
        };
        let hw = tables.device_tables.as_ref().and_then(|f| f());
        let m = Mirror::create(mm, range, table, None)?;
        let mut list = tables.mirrors.lock();
        let list = (*list).as_mut().ok_or(ENODEV)?;
        // CAST: an address, kept to find the pinned mirror again.
        // INVARIANT (`Tables`): pinned; its drop (`DevTable::release`)
        // removes it.
        list.push(core::ptr::from_ref::<Self>(&*m) as usize, GFP_KERNEL)?;
        let mut guard = m.wait_lock();
        // SAFETY: the device is bound while the list is (`Tables`
        // invariant), and the mirror is on it: `Tables::gone` detaches the
        // table before the device is unbound, or the mirror's drop does
        // first.
        // INVARIANT (`DevTable`): the mirror's address is in the list.
        unsafe { guard.pt.attach(tables.dev.clone()) };
        if let Some(hw) = hw {
            guard.pt.set_device_table(hw);
        }
        drop(guard);
        Ok(m)
    }
}

impl MirrorGuard<'_, DevTable> {
    /// The device page table.
    pub(crate) fn table(&self) -> &DevPt {
        &self.pt
    }

    /// Zaps the device page table's entries of `[start, end)` (the
    /// range's placement changed: its pages must fault again). Returns the
    /// entries removed.
    pub(crate) fn zap(&mut self, start: usize, end: usize) -> u64 {
        let t = self.table_mut();
        t.pt.zap(start, end, Some(&t.tables.counters), true)
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
        mut how: impl FnMut(usize, PageRef<'_>) -> Option<(Bind<'_>, Life)>,
    ) -> Result<u64> {
        self.check(walk)?;
        let mut bound = 0;
        let t = self.table_mut();
        for (i, e) in walk.pfns().iter().enumerate() {
            let Some(pfn) = e.pfn() else { continue };
            // SAFETY: a page the walk found, which no invalidation changed
            // since (checked above) and none can while the lock is held.
            let page = unsafe { PageRef::from_pfn(pfn) };
            let addr = walk.start() + i * PAGE_SIZE;
            let Some((b, life)) = how(addr, page) else {
                continue;
            };
            let c = &t.tables.counters;
            // SAFETY: the lock is held (`self`); the walk found `page` at
            // `addr`, with write access if the entry says so, and is still
            // valid (checked above).
            if unsafe {
                t.pt.set(dev, c, addr, page, b, (e.writable(), life), spare)?
            } {
                bound += 1;
            }
        }
        Ok(bound)
    }
}
