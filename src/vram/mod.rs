// SPDX-License-Identifier: GPL-2.0

//! A GPU's memory: the BAR window onto it, split into chunks, each chunk a
//! device-private pagemap created before a migration step needs it
//! ([`VramPool::grow`]); a
//! page allocator over the chunks; the chunk lifecycle (cached when idle,
//! torn down by the shrinker, emptied into fuller chunks under pressure);
//! eviction of every page on teardown.
//!
//! A device page's VRAM offset follows from its page frame number: page `i`
//! of chunk `c` lives at `c * chunk_size + i * PAGE_SIZE` of the BAR. The
//! chunk's pagemap is made with that range of the BAR, which it alone
//! keeps: the pool finds a page's offset from it ([`Chunk::base`],
//! [`locate`]), and a peer maps the page at the bus-side address the same
//! range gives ([`VramPool::peer_route`]).
//!
//! Chunk states ([`Slot`]): `Absent` (no pagemap) -> `Creating` (its
//! pagemap being created, outside the lock, by [`VramPool::grow`]: never
//! under an mmap lock) -> `Live` (a pagemap; its
//! pages in use, or none: then it is *idle*, cached for cheap reuse) ->
//! `Draining` (being emptied into other chunks: no allocation takes its
//! pages) -> `Dying` (its pagemap being removed, outside the lock: no new
//! pagemap is created for its VRAM until it is `Absent` again, so a lookup
//! racing a teardown never makes a second pagemap for the same memory) ->
//! `Absent`. A `Draining` chunk that could not be emptied goes back to
//! `Live`.
//!
//! # Lock order
//!
//! `mmap_lock` (held by migration steps) -> [`VramPool::chunks`] ->
//! the pagemaps' free maps; [`VramPool::grow_lock`] and
//! [`VramPool::shrink_lock`] (shrink passes, making room) ->
//! `VramPool::chunks` (making room lets go of `shrink_lock` while it moves
//! a 2 MiB folio through its mm, see `room.rs`); `shrink_lock` -> the mmap
//! lock (read) of an mm a block's small pages are recorded in (making room
//! and a consolidation only try it: `evict.rs`);
//! a chunk's `Records::table` (`records.rs`) is a leaf, taken under an
//! mmap lock, a mirror's lock, `shrink_lock` or alone;
//! `VramPool::grow_lock` -> [`VramPool::me`] (a leaf);
//! `VramPool::grow_lock` -> the replicas' locks (a grower takes a replica
//! chunk back, across a grace period of their readers) -> `shrink_lock`
//! (an idle chunk's pagemap removed for replicas): see `replicas.rs`. A free map is also taken alone
//! by `folio_free`, which may run from any context that puts a page:
//! nothing sleeps under it and it never allocates. The shrinker only ever
//! *tries* `VramPool::chunks` (an allocation under it may enter reclaim);
//! teardown and consolidation run on msvm's reclaim workqueue or from
//! debugfs, never from reclaim itself, and drop the lock around
//! `memunmap_pages` and page migration. Idle chunks are removed side by
//! side, on the pool's own teardown queue and in the pass's task (see
//! `teardown.rs`), each slot `Absent` again as soon as its pagemap is gone.
//!
//! The dmem cgroup controller (`charge.rs`, `crate::mm::dmem`): pages are
//! charged before the chunk table is locked (a charge may sleep), under
//! the mmap lock of a migration step; charges are undone under the table
//! (a batch's unused ones) and by `folio_free`; making room asks the
//! controller which blocks it may evict under the table (an RCU section).
//!
//! `memremap_pages` and `memunmap_pages` take the CPU and memory hotplug
//! locks: under `grow_lock` (a chunk created before a migration step takes
//! the mmap lock), `shrink_lock` (an emptied chunk removed by a
//! consolidation) or nothing (idle chunks removed by the teardown queue's
//! workers while their pass waits under `shrink_lock`; the pool's
//! shutdown), never under `mmap_lock` or `VramPool::chunks` (see
//! [`VramPool::grow`]). A pagemap goes with its last `Arc`, which is always
//! let go with neither the chunk table nor an mmap lock held (under
//! `shrink_lock` at most, and the replicas' `reclaim`).

use kernel::num::casts::FromSafeCast;
use kernel::{
    device::{Bound, Device},
    devres::Devres,
    mm::MmWithUser,
    new_mutex,
    prelude::*,
    revocable::RevocableGuard,
    str::CString,
    sync::{
        atomic::{Atomic, Relaxed},
        Arc, Mutex,
    },
};

use crate::gpu::{copy::CopyEngine, Hw};
use crate::mm::{
    cancel::Cancel,
    devtables::Tables,
    dmem::Region,
    fault::{Fault, FaultError},
    iomem::WcBar,
    mmap::Wait,
    numa::Home,
    owner::{Owner, OwnerKey},
    p2p::PeerRoute,
    page::{NewPage, PageRef, BLOCK_SIZE},
    pagemap::{self, Pagemap, PAGE_SIZE},
    reclaim::ReclaimQueue,
    trace,
};
use crate::topology::MAX_DEVICES;

mod alloc;
mod atomics;
mod blit;
mod charge;
mod chunk;
mod evict;
mod floor;
mod large;
mod lru;
mod mapped;
mod orphans;
mod phases;
mod records;
mod replicas;
mod room;
mod shadow;
mod shrink;
mod stats;
mod teardown;
mod usage;
mod window;

pub(crate) use alloc::{large_folios, Batch, Large};
pub(crate) use atomics::Atomics;
pub(crate) use blit::{engine_used, fail_runs, use_engine, Blit, PageCopy};
pub(crate) use charge::{Charges, Payer};
use chunk::Chunk;
pub(crate) use floor::{FloorPath, FLOOR_MAX_PAGES};
use lru::Lru;
pub(crate) use lru::{Epoch, Intent, Use};
pub(crate) use mapped::{renew, Met};
use orphans::P2pReader;
pub(crate) use orphans::{init as init_orphans, Orphanage};
pub(crate) use phases::{Clock, JobPhase, Phase, SizeClass};
use replicas::Replicas;
pub(crate) use replicas::Window as ReplicaWindow;
use shadow::Shadows;
pub(crate) use shrink::{choose_victim, ChunkInfo};
pub(crate) use stats::Stats;
pub(crate) use window::{EVICT_DELAYS, EVICT_DELAY_MAX_MS, EVICT_DELAY_MS};

/// What a pool asks of the layer that moves pages (`crate::migrate`), which
/// installs it: the pool sits below the migrations that use it, and calls
/// up through this.
pub(crate) trait PoolOps: Sync {
    /// `migrate_to_ram` of a device page of `pool` that the CPU touched.
    fn fault_to_ram(&self, pool: &VramPool, fault: Fault<'_>) -> Result<(), FaultError>;

    /// Moves the pages of `pool`'s 2 MiB block at BAR offset `block` that
    /// `mm` maps in the 2 MiB block at `start` (`at`: the two) to system RAM, access
    /// unchecked (the pool's teardown and making room, through the mapping
    /// a 2 MiB folio is recorded at): any other page there (a peer's,
    /// another block's) stays. Takes `mm`'s mmap lock for writing as
    /// `wait` says: killably for [`Wait::Always`], else only tried
    /// (`EBUSY`). Returns how many pages moved.
    fn evict_folio(
        &self,
        pool: &VramPool,
        mm: &MmWithUser,
        at: (usize, usize),
        wait: Wait,
        cancel: &Cancel<'_>,
    ) -> Result<u64>;

    /// `pool` is sealed (`orphans.rs`): the device page tables of every
    /// other device let go of its pages (a job faults them again, and
    /// finds them orphans, faulted home).
    fn sealed(&self, pool: &VramPool);
}

/// The owner key of a group's pagemaps (see [`group_key`]).
pub(crate) type GroupKey = OwnerKey<Chunk>;

/// The owner keys, one per owner group: every pagemap of a group's devices
/// has its key's owner token.
static GROUP_KEYS: [GroupKey; MAX_DEVICES] = [const { OwnerKey::new() }; MAX_DEVICES];

/// The owner key of owner group `g` (a group is named by its first
/// device's index).
pub(crate) fn group_key(g: usize) -> &'static GroupKey {
    &GROUP_KEYS[g % MAX_DEVICES]
}

/// A chunk slot of the pool (see the module documentation for the states).
enum Slot {
    Absent,
    /// Its pagemap being created, outside the lock (see [`VramPool::grow`]).
    Creating,
    Live(Arc<Pagemap<Chunk>>),
    Draining(Arc<Pagemap<Chunk>>),
    Dying,
    /// Given over to read-only replicas (`replicas.rs`): no pagemap.
    Replicas,
}

impl Slot {
    /// The pagemap, in the states that have one.
    fn map(&self) -> Option<&Arc<Pagemap<Chunk>>> {
        match self {
            Slot::Live(m) | Slot::Draining(m) => Some(m),
            Slot::Absent | Slot::Creating | Slot::Dying | Slot::Replicas => None,
        }
    }

    /// The pagemap of a live chunk (one that allocations may use).
    fn live(&self) -> Option<&Pagemap<Chunk>> {
        match self {
            Slot::Live(m) => Some(m),
            _ => None,
        }
    }
}

/// The memory of one GPU, shared by its device, the peers that work on it
/// (`crate::registry::PoolRef`) and its chunks (each holds the pool its
/// pagemap's callbacks need): an [`Arc`]. It shuts down when its device's
/// handle ([`OwnedPool`]) is dropped.
#[pin_data]
pub(crate) struct VramPool {
    /// The BAR, while the device is bound.
    bar: Devres<WcBar>,
    /// The device's engines and MMU, if it has them: migrations' copies
    /// (`blit.rs`), jobs (`crate::engine`).
    hw: Option<Hw>,
    /// 1 once the device's teardown sealed the BAR: [`VramPool::bar`]
    /// fails, only the teardown's copies of orphans reach it
    /// (`orphans.rs`).
    sealed: Atomic<u32>,
    /// Peers' copy engines reading this VRAM over P2P now (`orphans.rs`,
    /// `P2pReader`): the seal waits for them.
    p2p_readers: Atomic<u64>,
    /// The `dev_private_owner` of this device's pages: its owner group's
    /// key, shared with the peers it reaches over P2P.
    key: &'static GroupKey,
    chunk_size: usize,
    nchunks: usize,
    /// The chunk slots.
    #[pin]
    chunks: Mutex<KVec<Slot>>,
    /// Allocations so far: the clock of [`Chunk::last_alloc`].
    alloc_seq: Atomic<u64>,
    /// Serialises shrink passes: only the holder takes a `Draining` slot
    /// apart.
    #[pin]
    shrink_lock: Mutex<()>,
    /// Serialises [`VramPool::grow`].
    #[pin]
    grow_lock: Mutex<()>,
    /// Serialises the engines' read-modify-writes of VRAM words.
    #[pin]
    pub(crate) atomics: Atomics,
    pub(crate) stats: Stats,
    /// Its VMs' device page tables (which may outlive the pool).
    pt: Arc<Tables>,
    /// The use of each 2 MiB block of the BAR: what makes room when the
    /// pool is full (see `room.rs`).
    lru: Lru,
    /// Where its evicted blocks' data was (see `shadow.rs`).
    shadows: Shadows,
    /// msvm index of the device.
    index: usize,
    /// The device's NUMA node: where its evicted pages go when no NUMA
    /// policy decides, and where its chunks' struct pages are.
    home: Home,
    /// The layer above, for what the pool cannot do itself.
    ops: &'static dyn PoolOps,
    /// Where idle chunks' pagemaps are removed side by side (see
    /// `teardown.rs`); drained when the pool goes.
    teardown_queue: ReclaimQueue,
    /// Read-only replicas of system pages, in chunk slots given over to
    /// them.
    #[pin]
    replicas: Replicas,
    /// This device's memory as a region of the dmem cgroup controller:
    /// every page a process moves in is charged to its cgroup
    /// ([`Payer::Caller`]), and uncharged when the page is freed.
    /// Withdrawn at the end of the pool's shutdown (its name free for the
    /// device's next binding while orphans still hold pages charged to
    /// it), no chunk left to charge in.
    #[pin]
    region: Region,
    /// The pool's own handle, for the chunks it creates: set by
    /// [`VramPool::create`], taken away by [`VramPool::shutdown`] (no chunk is
    /// created after it, and the cycle pool -> chunk -> pool is broken).
    #[pin]
    me: Mutex<Option<Arc<VramPool>>>,
}

impl VramPool {
    /// A pool over `bar`, owned by the caller (the pool shuts down when the
    /// returned owner is dropped), in chunks of `chunk_size` bytes (a multiple of the
    /// page size; the BAR's tail that does not fill a chunk is not used),
    /// of a device in owner group `group`, its memory registered with the
    /// dmem cgroup controller as region `region` (`drm/<pci address>/vram`),
    /// on NUMA node `home`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn create(
        (bar, hw): (Devres<WcBar>, Option<Hw>),
        chunk_size: usize,
        group: usize,
        index: usize,
        home: Home,
        ops: &'static dyn PoolOps,
        region: &CStr,
        pt: Arc<Tables>,
    ) -> Result<OwnedPool> {
        if chunk_size == 0 || chunk_size % PAGE_SIZE != 0 {
            return Err(EINVAL);
        }
        let len = bar.try_access().ok_or(ENODEV)?.len();
        let nchunks = len / chunk_size;
        if nchunks == 0 {
            return Err(EINVAL);
        }
        let mut slots = KVec::with_capacity(nchunks, GFP_KERNEL)?;
        for _ in 0..nchunks {
            slots.push(Slot::Absent, GFP_KERNEL)?;
        }
        let queue_name = CString::try_from_fmt(fmt!("msvm-teardown/{index}"))?;
        let nblocks = nchunks * chunk_size.div_ceil(BLOCK_SIZE);
        let replicas = Replicas::new(nchunks, chunk_size)?;
        let (region_name, region_size) = (region, u64::from_safe_cast(nchunks * chunk_size));
        let pool = Arc::pin_init(
            try_pin_init!(Self {
                bar,
                hw,
                sealed: Atomic::new(0),
                p2p_readers: Atomic::new(0),
                key: group_key(group),
                chunk_size,
                nchunks,
                chunks <- new_mutex!(slots),
                alloc_seq: Atomic::new(0),
                shrink_lock <- new_mutex!(()),
                grow_lock <- new_mutex!(()),
                atomics <- Atomics::new(),
                stats: Stats::new(),
                pt,
                lru: Lru::new(nblocks)?,
                shadows: Shadows::new(nblocks)?,
                index,
                home,
                ops,
                teardown_queue: ReclaimQueue::with_max_active(&queue_name, teardown::WORKERS)?,
                replicas <- replicas,
                region <- Region::register(region_size, region_name),
                me <- new_mutex!(None),
            }? Error),
            GFP_KERNEL,
        )?;
        *pool.me.lock() = Some(pool.clone());
        Ok(OwnedPool(pool))
    }

    /// Its VMs' device page tables.
    pub(crate) fn pt_tables(&self) -> &Arc<Tables> {
        &self.pt
    }

    /// msvm index of the device.
    pub(crate) fn index(&self) -> usize {
        self.index
    }

    /// The device's NUMA node (see `crate::mm::numa`).
    pub(crate) fn home(&self) -> Home {
        self.home
    }

    /// The `dev_private_owner` of this device's pages (and its group's).
    pub(crate) fn owner(&self) -> Owner {
        self.key.owner()
    }

    /// The BAR window: `ENODEV` once the device is unbound, or its
    /// teardown sealed the pool (`orphans.rs`). An RCU read-side critical
    /// section: hold it for one page's copy, nothing may sleep while it is
    /// held.
    pub(crate) fn bar(&self) -> Result<RevocableGuard<'_, WcBar>> {
        let bar = self.bar.try_access().ok_or(ENODEV)?;
        // Inside the read-side section: a sealing waits for it to end.
        if self.is_sealed() {
            return Err(ENODEV);
        }
        Ok(bar)
    }

    /// The device's copy engine, if it has one.
    pub(crate) fn engine(&self) -> Option<&Arc<CopyEngine>> {
        self.hw.as_ref().map(|h| &h.copy)
    }

    /// The device's engines and MMU, if it has them.
    pub(crate) fn hw(&self) -> Option<&Hw> {
        self.hw.as_ref()
    }

    /// Copies `nr` pages of the BAR from `offset` into the first `nr` pages
    /// of `dst` (a 2 MiB folio going to system RAM), taking the BAR
    /// ([`VramPool::bar`]) for one page at a time.
    pub(crate) fn copy_to_folio(&self, offset: usize, dst: &NewPage, nr: usize) -> Result {
        for k in 0..nr {
            self.bar()?.copy_to_page(offset + k * PAGE_SIZE, dst, k)?;
        }
        Ok(())
    }

    /// Pages in use (allocated and not yet freed), in transit included.
    pub(crate) fn resident(&self) -> u64 {
        let freed = self.stats.freed.load(Relaxed);
        self.stats.allocated.load(Relaxed).saturating_sub(freed)
    }

    /// Usable bytes of VRAM.
    pub(crate) fn size(&self) -> usize {
        self.nchunks * self.chunk_size
    }

    /// Bytes per chunk.
    pub(crate) fn chunk_size(&self) -> usize {
        self.chunk_size
    }

    /// The BAR offset of chunk `c`: where the range of the BAR its
    /// pagemap stands for begins (`VramPool::new_chunk`), page `i` of the
    /// chunk `i` pages further.
    pub(super) fn chunk_offset(&self, c: usize) -> usize {
        c * self.chunk_size
    }

    /// Chunks with a pagemap and chunks among them that are idle (no page
    /// in use: cached).
    pub(crate) fn chunk_counts(&self) -> (usize, usize) {
        let chunks = self.chunks.lock();
        let maps = chunks.iter().filter_map(Slot::map);
        maps.fold((0, 0), |(l, i), m| (l + 1, i + usize::from(m.used() == 0)))
    }

    /// Bytes of `struct page` memory one chunk costs.
    pub(crate) fn chunk_memmap_bytes(&self) -> usize {
        self.chunk_size / PAGE_SIZE * crate::mm::reclaim::struct_page_size()
    }

    /// What the shrinker could free now, in `struct page` bytes: idle
    /// chunks, then chunks a consolidation would empty. `None` if the
    /// chunk table is busy (it is only tried: reclaim must not wait).
    pub(crate) fn reclaimable(&self) -> Option<(usize, usize)> {
        let chunks = self.chunks.try_lock()?;
        let npages = self.chunk_size / PAGE_SIZE;
        let live = chunks.iter().map(|s| s.live().map(Chunk::info));
        let idle = live.clone().flatten().filter(|i| i.used == 0).count();
        let light = usize::from(choose_victim(live, npages).is_some());
        let per = self.chunk_memmap_bytes();
        Some((idle * per, light * per))
    }

    /// The pool and BAR offset of device page `page`, if it belongs to this
    /// device's owner group (this device or a P2P peer).
    ///
    /// The peer's pool stays alive while the caller holds `page` (locked by
    /// a migration, or protected by the mirror lock): the pool tears down
    /// its chunks, evicting their pages first, before it goes.
    pub(crate) fn locate<'p>(&self, page: PageRef<'p>) -> Option<(&'p VramPool, usize)> {
        locate(page, self.key)
    }

    /// How `client` reaches device page `page` of a pool of this one's
    /// owner group ([`Self::locate`]) over P2P: the bus-side address its
    /// pagemap's range gives, checked against that pool's BAR, along the
    /// path `pci_p2pdma` gives `client` (`WcBar::peer_route`). `ENODEV`
    /// once that BAR is gone or sealed ([`VramPool::bar`]), `EINVAL` for a
    /// page of no such pool, `EREMOTEIO` if `client` has no path to it.
    pub(crate) fn peer_route<'p>(
        &self,
        page: PageRef<'p>,
        client: &Device<Bound>,
    ) -> Result<PeerRoute<'p>> {
        let map = pagemap::map_of(page, self.key).ok_or(EINVAL)?;
        // The BAR this pool's CPU side reaches the page through: the one
        // the map's range must be of.
        let bar = map.data().pool().bar()?;
        bar.peer_route(map, page, client)
    }

    /// The BAR offset of device page `page`, if it is one of this pool's.
    pub(crate) fn offset_of(&self, page: PageRef<'_>) -> Option<usize> {
        self.locate(page)
            .filter(|(p, _)| self.is(p))
            .map(|(_, off)| off)
    }

    /// Pages were placed at BAR offset `off` by request `u` (for the
    /// eviction policy).
    pub(crate) fn note_placed(&self, off: usize, u: Use) {
        self.lru.placed(self.block_index(off), u);
    }

    /// How request `u` places pages of block `addr` of the process whose id
    /// is `process` (none: no VM) that it brings in: as a refault
    /// ([`Intent::Refault`]) if
    /// a job's migrate-on-access brings them back within the device's size
    /// of their eviction (see `shadow.rs`) and the policy has classes, else
    /// as `u`. Takes the block's shadow: call it once pages found room.
    pub(crate) fn placing(&self, process: Option<u64>, addr: usize, u: Use) -> Use {
        if u.intent != Intent::OnAccess
            || lru::Policy::current() != lru::Policy::TwoClass
            || !process.is_some_and(|p| self.shadows.refault(p, addr))
        {
            return u;
        }
        self.stats.room_refaults.add(1, Relaxed);
        Use {
            intent: Intent::Refault,
            ..u
        }
    }

    /// Request `epoch` used the page at BAR offset `off` where it was.
    pub(crate) fn note_used(&self, off: usize, epoch: Epoch) {
        self.lru.used(self.block_index(off), epoch);
    }

    /// The index in the use table of the 2 MiB block of its chunk that BAR
    /// offset `off` lies in (a chunk's blocks start at its base, whatever
    /// its size).
    fn block_index(&self, off: usize) -> usize {
        off / self.chunk_size * self.chunk_size.div_ceil(BLOCK_SIZE)
            + off % self.chunk_size / BLOCK_SIZE
    }

    /// Whether `other` is this pool.
    pub(crate) fn is(&self, other: &VramPool) -> bool {
        core::ptr::eq(self, other)
    }
}

/// The pool and BAR offset of device page `page`, if its pagemap has `key`'s
/// owner, an owner group's (see [`VramPool::locate`] for how long the pool
/// stays alive).
pub(crate) fn locate<'p>(
    page: PageRef<'p>,
    key: &'static GroupKey,
) -> Option<(&'p VramPool, usize)> {
    let map = pagemap::map_of(page, key)?;
    Some((
        map.data().pool(),
        Chunk::base(map) + map.index_of(page)? * PAGE_SIZE,
    ))
}

/// The chunk of device page `page` and its index there, if its pagemap
/// has `key`'s owner (alive as long as the page, see [`locate`]).
fn chunk_of<'p>(page: PageRef<'p>, key: &'static GroupKey) -> Option<(&'p Chunk, usize)> {
    let map = pagemap::map_of(page, key)?;
    Some((map.data(), map.index_of(page)?))
}

/// A device's own handle on its pool: the pool shuts down
/// ([`VramPool::shutdown`]) when it is dropped.
pub(crate) struct OwnedPool(Arc<VramPool>);

impl core::ops::Deref for OwnedPool {
    type Target = Arc<VramPool>;

    fn deref(&self) -> &Arc<VramPool> {
        &self.0
    }
}

impl Drop for OwnedPool {
    fn drop(&mut self) {
        self.0.shutdown();
    }
}

impl VramPool {
    /// Sends every page of the pool to system RAM and removes every
    /// pagemap: the device's last act with its memory, once no other device
    /// uses it (its publication withdrawn: no shrink pass or peer holds it
    /// then). No chunk is created after it.
    fn shutdown(&self) {
        // No chunk from now on: a growth under way finishes first. The
        // cycle through the chunks goes with their pagemaps, below.
        let me = {
            let _grower = self.grow_lock.lock();
            self.me.lock().take()
        };
        drop(me);
        // A shrink pass of a user that has just left is over.
        drop(self.shrink_lock.lock());
        // Replicas are copies: dropped, their readers gone first.
        self.drop_replicas();
        // 2 MiB folios first, through the mappings their records name,
        // where a migration can exclude zaps (see `evict_large_folios`).
        self.evict_large_folios();
        // Every page goes to system RAM through its mm first, chunk by
        // chunk, with the table unlocked (the slot `Dying` meanwhile, then
        // `Draining`: no allocation takes its pages).
        for c in 0..self.nchunks {
            let slot = core::mem::replace(&mut self.chunks.lock()[c], Slot::Dying);
            let back = match slot {
                Slot::Live(map) | Slot::Draining(map) => {
                    self.evict_all(c, &map);
                    Slot::Draining(map)
                }
                other => other,
            };
            self.chunks.lock()[c] = back;
        }
        // Then what no mm led to stays where its processes map it,
        // orphaned (`orphans.rs`): never moved by frame. The pool is
        // sealed first, and every chunk left with pages in use changes
        // owner before any is copied. Each slot's pagemap goes with the
        // table unlocked (`memunmap_pages` takes the CPU hotplug lock: see
        // `grow`).
        self.seal_if_used();
        for c in 0..self.nchunks {
            let slot = core::mem::replace(&mut self.chunks.lock()[c], Slot::Dying);
            self.orphan_slot(c, slot);
        }
        // No chunk to charge pages in: the region's name goes (orphans'
        // pages stay charged, and are uncharged as they are freed).
        self.region.withdraw();
    }

    /// The end of chunk `c`'s slot, whose pages went home through their
    /// mms as far as they could (`slot`, taken out of the table, which
    /// says `Dying`): an orphan if pages are left (the pool is sealed
    /// then: [`VramPool::seal_if_used`]), then `Absent`.
    fn orphan_slot(&self, c: usize, slot: Slot) {
        let had_map = slot.map().is_some();
        let orphan = slot.map().filter(|m| m.used() > 0).cloned();
        let orphaned = orphan.is_some();
        if let Some(map) = orphan {
            let n = self.orphan(map);
            if n > 0 {
                pr_info!(
                    "gpu{}: chunk {c}: {n} page(s) that no process msvm knows of maps stay mapped, their data in system RAM\n",
                    self.index()
                );
            }
        }
        drop(slot);
        self.chunks.lock()[c] = Slot::Absent;
        // An orphan's pagemap is removed later (`orphans.rs`).
        if had_map && !orphaned {
            trace::pagemap(self.index(), false, c, self.chunk_size);
        }
    }
}
