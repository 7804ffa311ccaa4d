// SPDX-License-Identifier: GPL-2.0

//! Orphans: pages of a device gone that a process may still map.
//!
//! A device going away moves every page it can through the mm the page is
//! recorded in (`evict.rs`). A page no record leads to (a fork child's,
//! once its parent let go of it and before the child met it through msvm)
//! is never moved by its frame: Linux 7.3's `migrate_device_pfns()` holds
//! no reference on the page's `anon_vma`, which the child's exit or
//! `munmap` may free meanwhile (`design.rst`, "Known problems"). Instead
//! the pool is *sealed* (no engine, copy or migration reaches its BAR any
//! more, and none still does: [`VramPool::seal`]), each such page's data
//! is copied to a page of system RAM (its *copy*), and its chunk becomes an
//! *orphan*: the chunk's pagemap, its `struct page`s and the pool they
//! name outlive the device, under an owner of their own ([`ORPHAN_KEY`]),
//! so that no peer takes them for its group's pages. Whoever then touches
//! such a page faults it home from its copy, under the faulting mm's own
//! lock ([`fault_to_ram`]); a page freed (the process exits or unmaps it)
//! takes its copy with it. When the last page of an orphan is free, the
//! reaper removes its pagemap.
//!
//! Each orphan holds a reference on the module: `rmmod` refuses while
//! pages of a device gone are mapped. Orphans made by the module's own
//! unload (a device still bound at `rmmod`) are waited for
//! ([`Orphanage`]'s drop), with a warning every 10 s.
//!
//! # Lock order
//!
//! `Orphan::copies` is a spinlock (taken by `folio_free` in any context
//! that puts a page) -> `Pagemap::free` (the sweep of copies of pages freed
//! while they were taken; `folio_free` takes `free` only after it let go
//! of `copies`). [`REAPER`] is a leaf spinlock; the reaper's list
//! ([`Reaper::maps`]) is a mutex -> `Pagemap::free` (whether an orphan has
//! pages in use): no pagemap is dropped under it.

use kernel::num::casts::FromSafeCast;
use kernel::prelude::*;
use kernel::sync::atomic::{Acquire, Atomic, Full, Relaxed, Release};
use kernel::sync::{new_mutex, new_spinlock, Arc, Mutex, SpinLock};
use kernel::time::{delay::fsleep, Delta};
use kernel::workqueue::{impl_has_work, new_work, Work, WorkItem};

use crate::mm::cancel::cond_resched;
use crate::mm::fault::{Fault, FaultError, Relock};
use crate::mm::migrate::VmaMigration;
use crate::mm::module::ModuleRef;
use crate::mm::numa::Home;
use crate::mm::page::{How, NewPage, BLOCK_SIZE};
use crate::mm::pagemap::{Pagemap, PAGE_SIZE};
use crate::mm::reclaim::ReclaimQueue;
use crate::mm::trace;

use super::window::evict_window;
use super::{chunk_of, Chunk, GroupKey, Slot, VramPool};

/// The owner of every orphan's pagemap: no device's group (see
/// `Pagemap::rekey`).
pub(super) static ORPHAN_KEY: GroupKey = GroupKey::new();

/// What a chunk keeps for its orphaning.
#[pin_data]
pub(crate) struct Orphan {
    /// The copy of each page in use when the chunk became an orphan; empty
    /// before.
    #[pin]
    copies: SpinLock<KVVec<Option<NewPage>>>,
    /// 1 once `copies` is complete (the chunk is an orphan).
    orphaned: Atomic<u32>,
}

impl Orphan {
    pub(super) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            copies <- new_spinlock!(KVVec::new(), "Orphan::copies"),
            orphaned: Atomic::new(0),
        })
    }

    /// Whether the chunk is an orphan: its pages' data is in their copies.
    pub(super) fn is_orphaned(&self) -> bool {
        self.orphaned.load(Acquire) != 0
    }

    /// Pages `first..first + nr` are freed: their copies go with them.
    pub(super) fn freeing(&self, first: usize, nr: usize) {
        if !self.is_orphaned() {
            return;
        }
        let mut copies = self.copies.lock();
        for i in first..first.saturating_add(nr).min(copies.len()) {
            // Freeing a page of ours under a spinlock: nothing sleeps.
            drop(copies[i].take());
        }
    }

    /// Copies the data of page `i` into page `k` of `dst`.
    fn copy_to(&self, i: usize, dst: &NewPage, k: usize) -> Result {
        let copies = self.copies.lock();
        let copy = copies.get(i).and_then(Option::as_ref).ok_or(ENOENT)?;
        dst.copy_page_from(k, copy, 0)
    }
}

impl VramPool {
    /// Seals the pool if a chunk still has pages in use: from now on no
    /// one reaches its BAR through [`VramPool::bar`] (`ENODEV`), and no
    /// one who did still does when the seal is done (each access holds an
    /// RCU read-side section). Then every such chunk takes
    /// [`ORPHAN_KEY`]'s owner: a walk faults its pages (a fault waits
    /// until their copies are taken: [`Chunk::fault_to_ram`]) and a
    /// migration skips them. Then the device page tables of the devices
    /// that reach this one's pages (its owner group's) let go of them
    /// ([`super::PoolOps::sealed`]). The chunk slots are `Draining` or
    /// `Absent` (the teardown's own).
    pub(super) fn seal_if_used(&self) {
        let used = |s: &Slot| s.map().filter(|m| m.used() > 0).cloned();
        if !self.chunks.lock().iter().any(|s| used(s).is_some()) {
            return;
        }
        self.sealed.store(1, Release);
        kernel::sync::rcu::synchronize_rcu();
        // And the copy engines' runs: this device's own (one under way
        // ends before this goes on, the next sees the seal) and the peers'
        // reading its VRAM over P2P (counted: `P2pReader`). Either a reader
        // counted itself before this load, or it sees the seal (a full
        // barrier on each side: `synchronize_rcu`'s, and the reader's).
        if let Some(e) = self.engine() {
            drop(e.session());
        }
        while self.p2p_readers.load(Acquire) > 0 {
            fsleep(Delta::from_millis(1));
        }
        for c in 0..self.nchunks {
            let map = used(&self.chunks.lock()[c]);
            if let Some(map) = map {
                map.rekey(&ORPHAN_KEY);
            }
        }
        self.ops.sealed(self);
    }

    /// Counts a peer's copy engine reading this pool's VRAM over P2P until
    /// the returned reader is dropped: `ENODEV` if the pool is sealed (the
    /// seal waits for the readers counted).
    pub(super) fn p2p_reader(&self) -> Result<P2pReader<'_>> {
        self.p2p_readers.fetch_add(1, Full);
        let reader = P2pReader(self);
        if self.is_sealed() {
            return Err(ENODEV);
        }
        Ok(reader)
    }

    /// Whether the pool is sealed ([`VramPool::seal_if_used`]).
    pub(super) fn is_sealed(&self) -> bool {
        self.sealed.load(Acquire) != 0
    }

    /// Makes chunk `map`, whose pages in use no mm leads to, an orphan: a
    /// copy of each page in use, then the reaper's. The pool is sealed and
    /// the chunk rekeyed ([`VramPool::seal_if_used`]). Waits for memory as
    /// long as it takes: the data has nowhere else to go. Returns the
    /// pages copied.
    pub(super) fn orphan(&self, map: Arc<Pagemap<Chunk>>) -> usize {
        let chunk = map.data();
        let n = map.npages();
        // A test may exit or unmap the pages' processes now (debugfs
        // `evict_delay_ms`).
        evict_window();
        let mut copies = KVVec::new();
        while copies.len() < n {
            if copies.push(None, GFP_KERNEL).is_err() {
                fsleep(Delta::from_millis(10));
            }
        }
        let (mut copied, mut lost) = (0, 0);
        // Milliseconds all the chunk's copies may wait for a DMA mapping.
        let mut patience = COPY_PATIENCE_MS;
        for (i, slot) in copies.iter_mut().enumerate() {
            if i % 64 == 63 {
                cond_resched();
            }
            if !map.is_used(i) {
                continue;
            }
            let copy = loop {
                // No VMA: on this device's node. `Kept` waits for memory.
                if let Some(p) = NewPage::home(None, self.home(), How::Kept) {
                    break p;
                }
            };
            if self
                .copy_raw(Chunk::base(&map) + i * PAGE_SIZE, &copy, &mut patience)
                .is_err()
            {
                // Lost: a fault on the page gets `SIGBUS`.
                lost += 1;
                continue;
            }
            *slot = Some(copy);
            copied += 1;
        }
        if lost > 0 {
            pr_err!(
                "gpu{}: {lost} page(s) of the chunk at {:#x} not copied: their data is lost\n",
                self.index(),
                Chunk::base(&map)
            );
        }
        *chunk.orphan.copies.lock() = copies;
        chunk.orphan.orphaned.store(1, Release);
        // The copies of pages freed meanwhile go now (frees from here on
        // take theirs), the lock taken for one page at a time.
        for i in 0..n {
            if i % 64 == 63 {
                cond_resched();
            }
            let mut copies = chunk.orphan.copies.lock();
            if copies[i].is_some() && !map.is_used(i) {
                drop(copies[i].take());
            }
        }
        self.stats
            .orphaned
            .add(u64::from_safe_cast(copied), Relaxed);
        adopt(map);
        copied
    }
}

impl VramPool {
    /// Copies the page of the BAR at `offset` to `copy`, past the seal
    /// (only the teardown's orphaning may): `ENODEV` once the device is
    /// unbound. No DMA mapping for now (`ENOMEM`: bounce buffers or IOMMU
    /// space short) is tried again while `patience` (milliseconds, shared
    /// by a chunk's pages) lasts; any other failure is final.
    fn copy_raw(&self, offset: usize, copy: &NewPage, patience: &mut i64) -> Result {
        loop {
            let bar = self.bar.try_access().ok_or(ENODEV)?;
            match bar.copy_to_page(offset, copy, 0) {
                Err(e) if e == ENOMEM && *patience > 0 => {}
                r => return r,
            }
            drop(bar);
            *patience -= 5;
            fsleep(Delta::from_millis(5));
        }
    }
}

/// How long the copies of one chunk's pages may wait for DMA mappings in
/// all, in milliseconds.
const COPY_PATIENCE_MS: i64 = 5000;

/// `migrate_to_ram` of a page of an orphan (`fault.page()`): brings it
/// home from its copy. A 2 MiB folio mapped whole is split first (the CPU
/// faults again on a small page).
pub(super) fn fault_to_ram(fault: Fault<'_>) -> Result<(), FaultError> {
    let address = fault.address();
    if fault.is_pmd() {
        return match fault.relock_exclusive() {
            Relock::Exclusive(x) => {
                x.split_whole_folio(address & !(BLOCK_SIZE - 1), ORPHAN_KEY.owner());
                Err(FaultError::Retry)
            }
            Relock::Retry => Err(FaultError::Retry),
            Relock::Unsupported => Err(FaultError::Sigbus),
        };
    }
    // Another pool's chunk rekeyed but not copied yet (its teardown under
    // way): again, a little later, before anything is collected.
    let copied =
        chunk_of(fault.page().page(), &ORPHAN_KEY).is_some_and(|(c, _)| c.orphan.is_orphaned());
    if !copied {
        fsleep(Delta::from_millis(1));
        return Err(FaultError::Retry);
    }
    let vma = fault.vma();
    let at = (vma.vma(), address & !(PAGE_SIZE - 1));
    let mut mig = VmaMigration::of_faulting_page(&fault, ORPHAN_KEY.owner())
        .map_err(|_| FaultError::Sigbus)?;
    let src = mig.src(0);
    // Not collected: someone else moves it (the fault is made again).
    let Some(page) = mig.src_page(0).filter(|_| src.migrate()) else {
        return Err(FaultError::Retry);
    };
    if src.nr_pages() > 1 {
        return Err(FaultError::Retry);
    }
    let (chunk, i) = chunk_of(page, &ORPHAN_KEY).ok_or(FaultError::Sigbus)?;
    let dst = NewPage::home(Some(at), Home::LOCAL, How::Migrate).ok_or(FaultError::Oom)?;
    chunk
        .orphan
        .copy_to(i, &dst, 0)
        .map_err(|_| FaultError::Sigbus)?;
    mig.set_dst(0, dst, src.write())
        .map_err(|_| FaultError::Sigbus)?;
    mig.pages();
    Ok(())
}

/// An orphan on the reaper's list, with its reference on the module
/// (dropped after the pagemap).
struct Adopted {
    map: Arc<Pagemap<Chunk>>,
    _module: ModuleRef,
}

impl Drop for Adopted {
    fn drop(&mut self) {
        // The pagemap goes right after this.
        let chunk = self.map.data();
        let pool = chunk.pool();
        let size = pool.chunk_size();
        let c = Chunk::base(&self.map).checked_div(size).unwrap_or(0);
        trace::pagemap(pool.index(), false, c, size);
    }
}

/// Removes the pagemaps of orphans with no page in use (the work item).
#[pin_data]
pub(super) struct Reaper {
    #[pin]
    work: Work<Reaper>,
    #[pin]
    maps: Mutex<KVec<Adopted>>,
}

impl_has_work! {
    impl HasWork<Self> for Reaper { self.work }
}

impl WorkItem for Reaper {
    type Pointer = Arc<Reaper>;

    fn run(this: Arc<Reaper>) {
        // Taken off the list under its lock, dropped after (each drop
        // removes a pagemap: `memunmap_pages`, which sleeps), each with its
        // module reference last: the module's unload destroys this work's
        // queue, which waits for this run to return.
        let mut done = KVec::new();
        {
            let mut maps = this.maps.lock();
            let mut i = 0;
            while i < maps.len() {
                if maps[i].map.used() > 0 {
                    i += 1;
                    continue;
                }
                // No memory to hold it: dropped here, under the list's
                // lock (its pages are free: the removal waits for nothing
                // that takes the lock).
                match maps.remove(i) {
                    Ok(gone) => {
                        let _ = done.push(gone, GFP_KERNEL);
                    }
                    Err(_) => break,
                }
            }
        }
        drop(done);
    }
}

/// The reaper and its queue, while the module is loaded.
struct Reaping {
    queue: ReclaimQueue,
    reaper: Arc<Reaper>,
}

kernel::sync::global_lock! {
    // SAFETY: initialised by `init()` in module init, before the PCI driver
    // is registered and so before any pool exists.
    /// The reaper of orphans, set by [`Orphanage::new`], taken away by its
    /// drop.
    unsafe(uninit) static REAPER: SpinLock<Option<Reaping>> = None;
}

/// Initialises [`REAPER`].
///
/// # Safety
///
/// Called once, in module init, before any other use of [`REAPER`].
pub(crate) unsafe fn init() {
    // SAFETY: the caller's promise.
    unsafe { REAPER.init() };
}

/// Puts the reaper to work if the module is loaded.
fn reap_soon() {
    let reaping = REAPER.lock();
    if let Some(r) = reaping.as_ref() {
        // Already queued: the run to come sees this orphan too.
        let _ = r.queue.queue().enqueue(r.reaper.clone());
    }
}

/// Hands orphan `map` to the reaper.
fn adopt(map: Arc<Pagemap<Chunk>>) {
    let reaper = REAPER.lock().as_ref().map(|r| r.reaper.clone());
    let Some(reaper) = reaper else {
        // Unreachable: the orphanage goes after the driver, whose devices
        // make orphans, and comes before it. Kept (its ops would point
        // into a module gone once the module is: the lesser harm would
        // still be no harm), and said.
        pr_err!("orphans: no reaper: a pagemap is kept for good\n");
        core::mem::forget(map);
        return;
    };
    let adopted = Adopted {
        map,
        _module: ModuleRef::get(&<crate::LocalModule as kernel::ModuleMetadata>::THIS_MODULE),
    };
    let mut maps = reaper.maps.lock();
    // Room first (the list's lock is a leaf, and nothing of the shrinker's
    // takes it), then the push, which cannot fail.
    while maps.reserve(1, GFP_KERNEL).is_err() {
        drop(maps);
        fsleep(Delta::from_millis(10));
        maps = reaper.maps.lock();
    }
    let _ = maps.push_within_capacity(adopted);
    drop(maps);
    // Its pages may all be free already.
    reap_soon();
}

impl Chunk {
    /// One of this chunk's pages was freed, `left` in use: an orphan with
    /// none left goes.
    pub(super) fn orphan_freed(&self, left: usize) {
        if left == 0 && self.orphan.is_orphaned() {
            reap_soon();
        }
    }

    /// `migrate_to_ram` of a page of this chunk: from its copy if the
    /// chunk is an orphan; a fault in a sealed pool's chunk not yet an
    /// orphan is made again a little later.
    pub(super) fn fault_to_ram(&self, fault: Fault<'_>) -> Result<(), FaultError> {
        if self.orphan.is_orphaned() {
            return fault_to_ram(fault);
        }
        let pool = self.pool();
        if pool.is_sealed() {
            fsleep(Delta::from_millis(1));
            return Err(FaultError::Retry);
        }
        match pool.ops.fault_to_ram(pool, fault) {
            // The pool was sealed meanwhile (the copy failed): again.
            Err(FaultError::Sigbus) if pool.is_sealed() => Err(FaultError::Retry),
            r => r,
        }
    }
}

/// The module's orphanage: sets up the reaper, and, when the module
/// unloads, waits for every orphan to go before the reaper does.
pub(crate) struct Orphanage(());

impl Orphanage {
    pub(crate) fn new() -> Result<Self> {
        let reaping = Reaping {
            queue: ReclaimQueue::new(c"msvm-orphans")?,
            reaper: Arc::pin_init(
                pin_init!(Reaper {
                    work <- new_work!("msvm::orphans"),
                    maps <- new_mutex!(KVec::new(), "Reaper::maps"),
                }),
                GFP_KERNEL,
            )?,
        };
        *REAPER.lock() = Some(reaping);
        Ok(Self(()))
    }
}

impl Drop for Orphanage {
    /// Runs at the module's unload, after its driver let go of every
    /// device: orphans made then (by that unload) hold no reference the
    /// unload could refuse on, so it waits for them.
    fn drop(&mut self) {
        let reaper = REAPER.lock().as_ref().map(|r| r.reaper.clone());
        if let Some(reaper) = reaper {
            let mut waited = 0u64;
            loop {
                let left = reaper.maps.lock().len();
                if left == 0 {
                    break;
                }
                if waited % 10_000 == 0 {
                    pr_warn!(
                        "msvm: unloading waits for {left} chunk(s) of devices gone whose pages processes still map\n"
                    );
                }
                reap_soon();
                fsleep(Delta::from_millis(100));
                waited += 100;
            }
        }
        // The queue is destroyed (a run under way returns first), then the
        // reaper.
        let reaping = REAPER.lock().take();
        drop(reaping);
    }
}

/// A peer's copy engine reading a pool's VRAM ([`VramPool::p2p_reader`]).
pub(super) struct P2pReader<'a>(&'a VramPool);

impl Drop for P2pReader<'_> {
    fn drop(&mut self) {
        self.0.p2p_readers.fetch_sub(1, Release);
    }
}
