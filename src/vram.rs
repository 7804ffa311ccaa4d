// SPDX-License-Identifier: GPL-2.0

//! A GPU's memory: the BAR window onto it, split into chunks, each chunk a
//! device-private pagemap created before a migration step needs it
//! ([`VramPool::grow`]); a
//! page allocator over the chunks; the chunk lifecycle (cached when idle,
//! torn down by the shrinker, emptied into fuller chunks under pressure);
//! eviction of every page on teardown.
//!
//! A device page's VRAM offset follows from its page frame number: page `i`
//! of chunk `c` lives at `c * chunk_size + i * PAGE_SIZE` of the BAR.
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
//! [`Chunk::free`]; [`VramPool::grow_lock`] and [`VramPool::shrink_lock`]
//! (shrink passes) -> `VramPool::chunks`. `Chunk::free` is also taken alone
//! by `folio_free`, which may run from any context that puts a page:
//! nothing sleeps under it and it never allocates. The shrinker only ever
//! *tries* `VramPool::chunks` (an allocation under it may enter reclaim);
//! teardown and consolidation run on msvm's reclaim workqueue or from
//! debugfs, never from reclaim itself, and drop the lock around
//! `memunmap_pages` and page migration.
//!
//! `memremap_pages` and `memunmap_pages` take the CPU and memory hotplug
//! locks: under `grow_lock` (a chunk created before a migration step takes
//! the mmap lock), `shrink_lock` (an idle chunk removed) or nothing (the
//! pool's drop), never under `mmap_lock` or `VramPool::chunks` (see
//! [`VramPool::grow`]).

use core::ffi::c_void;

use kernel::{
    mm::{Mm, MmWithUser},
    new_mutex, new_spinlock,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::{Atomic, Relaxed},
        Mutex, SpinLock,
    },
};

use crate::freemap::{FreeMap, BLOCK_PAGES};
use crate::mm::{
    cancel::Cancel,
    fault::{Fault, FaultError},
    iomem::WcBar,
    migrate::{DeviceMigration, MAX_PAGES},
    page::{large_order, NewPage, PageRef},
    pagemap::{self, Pagemap, PagemapOps, PAGE_SIZE},
};
use crate::topology::MAX_DEVICES;

/// Counters of one device (all in pages unless named otherwise).
pub(crate) struct Stats {
    pub(crate) to_device: Atomic<u64>,
    pub(crate) to_system: Atomic<u64>,
    pub(crate) cpu_faults: Atomic<u64>,
    pub(crate) evicted: Atomic<u64>,
    pub(crate) allocated: Atomic<u64>,
    pub(crate) freed: Atomic<u64>,
    pub(crate) chunks_created: Atomic<u64>,
    pub(crate) no_vram: Atomic<u64>,
    /// Engine bytes, per memory kind.
    pub(crate) engine_vram_read: Atomic<u64>,
    pub(crate) engine_vram_written: Atomic<u64>,
    pub(crate) engine_sys_read: Atomic<u64>,
    pub(crate) engine_sys_written: Atomic<u64>,
    /// Engine bytes in peers' VRAM over P2P.
    pub(crate) engine_p2p_read: Atomic<u64>,
    pub(crate) engine_p2p_written: Atomic<u64>,
    /// Pages migrated into this device straight from a peer's VRAM.
    pub(crate) from_peer: Atomic<u64>,
    /// Pagemaps removed (idle chunks and emptied ones).
    pub(crate) chunks_destroyed: Atomic<u64>,
    /// Shrink passes over this device (shrinker work and debugfs).
    pub(crate) shrink_scans: Atomic<u64>,
    /// Bytes of `struct page` memory the shrink passes freed.
    pub(crate) shrink_freed: Atomic<u64>,
    /// Pages the shrink passes moved into fuller chunks of this device.
    pub(crate) shrink_moved: Atomic<u64>,
    /// Pages the shrink passes sent home to system RAM.
    pub(crate) shrink_home: Atomic<u64>,
    /// Large (2 MiB) folios migrated into this device whole.
    pub(crate) large_to_device: Atomic<u64>,
    /// Large folios of this device migrated to system RAM whole.
    pub(crate) large_to_system: Atomic<u64>,
    /// 2 MiB ranges (THPs, device folios, holes) that had to move in small
    /// pages: no free 2 MiB block or system folio at the time.
    pub(crate) large_fallback: Atomic<u64>,
    /// Engine bytes read from each peer's VRAM over P2P, by peer index.
    pub(crate) peer_read: [Atomic<u64>; MAX_DEVICES],
    /// Engine bytes written to each peer's VRAM over P2P, by peer index.
    pub(crate) peer_written: [Atomic<u64>; MAX_DEVICES],
}

impl Stats {
    /// Engine bytes read from and written to peer `peer`'s memory over P2P.
    pub(crate) fn count_p2p(&self, peer: usize, read: usize, written: usize) {
        let i = peer % MAX_DEVICES;
        self.engine_p2p_read.add(read as u64, Relaxed);
        self.engine_p2p_written.add(written as u64, Relaxed);
        self.peer_read[i].add(read as u64, Relaxed);
        self.peer_written[i].add(written as u64, Relaxed);
    }

    const fn new() -> Self {
        Self {
            to_device: Atomic::new(0),
            to_system: Atomic::new(0),
            cpu_faults: Atomic::new(0),
            evicted: Atomic::new(0),
            allocated: Atomic::new(0),
            freed: Atomic::new(0),
            chunks_created: Atomic::new(0),
            no_vram: Atomic::new(0),
            engine_vram_read: Atomic::new(0),
            engine_vram_written: Atomic::new(0),
            engine_sys_read: Atomic::new(0),
            engine_sys_written: Atomic::new(0),
            engine_p2p_read: Atomic::new(0),
            engine_p2p_written: Atomic::new(0),
            from_peer: Atomic::new(0),
            chunks_destroyed: Atomic::new(0),
            shrink_scans: Atomic::new(0),
            shrink_freed: Atomic::new(0),
            shrink_moved: Atomic::new(0),
            shrink_home: Atomic::new(0),
            large_to_device: Atomic::new(0),
            large_to_system: Atomic::new(0),
            large_fallback: Atomic::new(0),
            peer_read: [const { Atomic::new(0) }; MAX_DEVICES],
            peer_written: [const { Atomic::new(0) }; MAX_DEVICES],
        }
    }
}

/// One chunk: the owner data of its pagemap.
#[pin_data]
pub(crate) struct Chunk {
    /// The pool this chunk belongs to.
    ///
    /// Valid for the chunk's whole life: the pool tears its chunks down in
    /// its own `drop`, before anything of it goes away.
    pool: *const VramPool<'static>,
    /// Offset of the chunk in the BAR.
    base: usize,
    /// Page frame number of the chunk's first page.
    pfn_first: usize,
    /// The free pages of the chunk (freeing never allocates).
    #[pin]
    free: SpinLock<FreeMap>,
    /// Pages in the chunk.
    npages: usize,
    /// The chunk hands out whole 2 MiB blocks as large folios: the kernel
    /// migrates them whole and the chunk's frames are aligned to them.
    large: bool,
    /// The pool's allocation sequence number when this chunk last gave out
    /// pages: lower is colder.
    last_alloc: Atomic<u64>,
    /// For each 2 MiB block, where the last large folio migrated into it
    /// was mapped: eviction brings such folios home through that mm first
    /// ([`VramPool::home_large_folios`]). Stale once the folio moves, is
    /// unmapped or remapped: checked when used.
    #[pin]
    homes: Mutex<KVec<Option<LargeHome>>>,
}

/// An mm and an address that mapped a 2 MiB device folio whole when it was
/// migrated in.
struct LargeHome {
    mm: ARef<Mm>,
    addr: usize,
}

/// `n` empty [`Chunk::homes`] records.
fn no_homes(n: usize) -> Result<KVec<Option<LargeHome>>> {
    let mut v = KVec::with_capacity(n, GFP_KERNEL)?;
    for _ in 0..n {
        v.push(None, GFP_KERNEL)?;
    }
    Ok(v)
}

// SAFETY: `pool` is only read, and the pool is `Sync`.
unsafe impl Send for Chunk {}

// SAFETY: `owner` is a token compared by address, never dereferenced; the
// rest of the pool is `Send` and `Sync` or behind its locks.
unsafe impl Send for VramPool<'_> {}
// SAFETY: see `Send`.
unsafe impl Sync for VramPool<'_> {}
// SAFETY: see `Send`.
unsafe impl Sync for Chunk {}

impl Chunk {
    fn pool(&self) -> &VramPool<'static> {
        // SAFETY: the pool outlives its chunks (field invariant).
        unsafe { &*self.pool }
    }

    /// Pages in use now.
    fn used(&self) -> usize {
        self.npages - self.free.lock().nfree()
    }

    /// What the shrinker needs to know of the chunk.
    fn info(&self) -> ChunkInfo {
        let free = self.free.lock();
        ChunkInfo {
            used: self.npages - free.nfree(),
            large: free.nwhole(),
            free_blocks: free.nfree_blocks(),
            last_alloc: self.last_alloc.load(Relaxed),
        }
    }
}

/// A live chunk, as the shrinker's planning sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChunkInfo {
    /// Pages in use.
    pub(crate) used: usize,
    /// Large (2 MiB) folios in use.
    pub(crate) large: usize,
    /// Whole free 2 MiB blocks.
    pub(crate) free_blocks: usize,
    /// Allocation sequence number of its last allocation (lower: colder).
    pub(crate) last_alloc: u64,
}

/// The chunk a consolidation pass empties next, and what it holds, among
/// the chunks `live` yields in chunk order (`None`: absent or not live):
/// the lightest used at most half full, the coldest of equals, holding no
/// large (2 MiB) folio, and only if the other live chunks have room for all
/// its pages (so emptying it frees a pagemap without taking a new one),
/// counting the blocks its pages break once the partly used blocks are
/// full. Allocates nothing, so that the shrinker may use it.
///
/// Large folios stay where they are: moving one means collecting it whole
/// wherever it is mapped (`migrate_device_range`), with PMD migration
/// entries in mms nothing excludes zaps from, which Linux 7.3 mishandles
/// (see `crate::mm::migrate::device_folio_mapcount`).
pub(crate) fn choose_victim(
    live: impl Iterator<Item = Option<ChunkInfo>> + Clone,
    npages: usize,
) -> Option<(usize, ChunkInfo)> {
    let (v, info) = live
        .clone()
        .enumerate()
        .filter_map(|(i, c)| c.map(|c| (i, c)))
        .filter(|(_, c)| c.used > 0 && c.used <= npages / 2 && c.large == 0)
        .min_by_key(|(_, c)| (c.used, c.last_alloc))?;
    let (room, blocks) = live
        .enumerate()
        .filter(|(i, _)| *i != v)
        .filter_map(|(_, c)| c)
        .fold((0, 0), |(r, b), c| {
            (r + (npages - c.used), b + c.free_blocks)
        });
    let partial_room = room.saturating_sub(blocks * BLOCK_PAGES);
    let need_blocks = info.used.saturating_sub(partial_room).div_ceil(BLOCK_PAGES);
    (room >= info.used && blocks >= need_blocks).then_some((v, info))
}

impl PagemapOps for Chunk {
    fn folio_free(&self, page: PageRef<'_>, order: u32) {
        let Some(idx) = page.pfn().checked_sub(self.pfn_first) else {
            return;
        };
        // Neither fails nor allocates.
        let freed = self.free.lock().put(idx, 1 << order);
        self.pool().stats.freed.add(freed as u64, Relaxed);
    }

    fn folio_split(&self, head: PageRef<'_>) {
        if let Some(idx) = head.pfn().checked_sub(self.pfn_first) {
            self.free.lock().split(idx);
        }
    }

    fn migrate_to_ram(&self, fault: Fault<'_>) -> Result<(), FaultError> {
        let pool = self.pool();
        pool.ops.fault_to_ram(pool, fault)
    }
}

/// What a pool asks of the layer that moves pages (`crate::migrate`), which
/// installs it: the pool sits below the migrations that use it, and calls
/// up through this.
pub(crate) trait PoolOps: Sync {
    /// `migrate_to_ram` of a device page of `pool` that the CPU touched.
    fn fault_to_ram(&self, pool: &VramPool<'_>, fault: Fault<'_>) -> Result<(), FaultError>;

    /// Brings the pages of `pool` (and of its owner group) in
    /// `[start, start + len)` of `mm` home, access unchecked (the pool's
    /// teardown, through the mm a 2 MiB folio was migrated in).
    fn evict_range(
        &self,
        pool: &VramPool<'_>,
        mm: &MmWithUser,
        start: usize,
        len: usize,
        cancel: &Cancel<'_>,
    ) -> Result;
}

/// A chunk slot of the pool (see the module documentation for the states).
enum Slot {
    Absent,
    /// Its pagemap being created, outside the lock (see [`VramPool::grow`]).
    Creating,
    Live(Pin<KBox<Pagemap<Chunk>>>),
    Draining(Pin<KBox<Pagemap<Chunk>>>),
    Dying,
}

impl Slot {
    /// The pagemap, in the states that have one.
    fn map(&self) -> Option<&Pagemap<Chunk>> {
        match self {
            Slot::Live(m) | Slot::Draining(m) => Some(m),
            Slot::Absent | Slot::Creating | Slot::Dying => None,
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

/// The memory of one GPU.
#[pin_data(PinnedDrop)]
pub(crate) struct VramPool<'a> {
    bar: WcBar<'a>,
    /// The `dev_private_owner` of this device's pages: its owner group's
    /// token, shared with the peers it reaches over P2P.
    owner: *const c_void,
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
    /// Serialises the engine's read-modify-write of VRAM words.
    #[pin]
    pub(crate) atomics: Mutex<()>,
    pub(crate) stats: Stats,
    /// msvm index of the device.
    index: usize,
    /// The layer above, for what the pool cannot do itself.
    ops: &'static dyn PoolOps,
    /// Other devices working on this pool now (see `crate::registry::PoolRef`).
    pub(crate) users: Atomic<u64>,
}

impl<'a> VramPool<'a> {
    /// A pool over `bar`, in chunks of `chunk_size` bytes (a multiple of the
    /// page size; the BAR's tail that does not fill a chunk is not used).
    pub(crate) fn new(
        bar: WcBar<'a>,
        chunk_size: usize,
        owner: *const c_void,
        index: usize,
        ops: &'static dyn PoolOps,
    ) -> Result<Pin<KBox<Self>>> {
        if chunk_size == 0 || chunk_size % PAGE_SIZE != 0 {
            return Err(EINVAL);
        }
        let nchunks = bar.len() / chunk_size;
        if nchunks == 0 {
            return Err(EINVAL);
        }
        let mut slots = KVec::with_capacity(nchunks, GFP_KERNEL)?;
        for _ in 0..nchunks {
            slots.push(Slot::Absent, GFP_KERNEL)?;
        }
        KBox::pin_init(
            try_pin_init!(Self {
                bar,
                owner,
                chunk_size,
                nchunks,
                chunks <- new_mutex!(slots),
                alloc_seq: Atomic::new(0),
                shrink_lock <- new_mutex!(()),
                grow_lock <- new_mutex!(()),
                atomics <- new_mutex!(()),
                stats: Stats::new(),
                index,
                ops,
                users: Atomic::new(0),
            }? Error),
            GFP_KERNEL,
        )
    }

    /// msvm index of the device.
    pub(crate) fn index(&self) -> usize {
        self.index
    }

    /// The `dev_private_owner` of this device's pages (and its group's).
    pub(crate) fn owner(&self) -> *const c_void {
        self.owner
    }

    /// The BAR window.
    pub(crate) fn bar(&self) -> &WcBar<'a> {
        &self.bar
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

    /// Chunks with a pagemap and chunks among them that are idle (no page
    /// in use: cached).
    pub(crate) fn chunk_counts(&self) -> (usize, usize) {
        let chunks = self.chunks.lock();
        let maps = chunks.iter().filter_map(Slot::map);
        maps.fold((0, 0), |(l, i), m| {
            (l + 1, i + usize::from(m.data().used() == 0))
        })
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
        let live = chunks.iter().map(|s| s.live().map(|m| m.data().info()));
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
    pub(crate) fn locate<'p>(&self, page: PageRef<'p>) -> Option<(&'p VramPool<'static>, usize)> {
        locate(page, self.owner)
    }

    /// The BAR offset of device page `page`, if it is one of this pool's.
    pub(crate) fn offset_of(&self, page: PageRef<'_>) -> Option<usize> {
        self.locate(page)
            .filter(|(p, _)| self.is(p))
            .map(|(_, off)| off)
    }

    /// Whether `other` is this pool.
    pub(crate) fn is(&self, other: &VramPool<'_>) -> bool {
        core::ptr::eq(
            core::ptr::from_ref(self).cast::<u8>(),
            core::ptr::from_ref(other).cast::<u8>(),
        )
    }
}

/// The pool and BAR offset of device page `page`, if its pagemap has owner
/// `owner`, an owner group's token (see [`VramPool::locate`] for how long
/// the pool stays alive).
pub(crate) fn locate<'p>(
    page: PageRef<'p>,
    owner: *const c_void,
) -> Option<(&'p VramPool<'static>, usize)> {
    let (map, i) = chunk_of(page, owner)?;
    let chunk = map.data();
    Some((chunk.pool(), chunk.base + i * PAGE_SIZE))
}

/// The chunk of device page `page` and the page's index in it, if its
/// pagemap has owner `owner` (alive as long as [`locate`]'s pool).
fn chunk_of<'p>(page: PageRef<'p>, owner: *const c_void) -> Option<(&'p Pagemap<Chunk>, usize)> {
    // SAFETY: every pagemap with a group's owner token is a
    // `Pagemap<Chunk>` of an msvm pool.
    let map = unsafe { pagemap::map_of::<Chunk>(page, owner) }?;
    Some((map, map.index_of(page)?))
}

/// What draining a chunk did, in pages.
#[derive(Default, Debug)]
struct Drained {
    /// Moved to other chunks of the pool.
    moved: usize,
    /// Sent home to system RAM.
    home: usize,
    /// In use, but would not move.
    stuck: usize,
}

/// Device pages (or large folios) allocated for one migration step, with
/// their BAR offsets, handed out in order; those not taken are freed on
/// drop.
pub(crate) struct Batch {
    pages: KVec<Option<(NewPage, usize)>>,
    next: usize,
}

impl Batch {
    /// The next page and its BAR offset, if any is left.
    pub(crate) fn take(&mut self) -> Option<(NewPage, usize)> {
        let p = self.pages.get_mut(self.next)?.take();
        self.next += 1;
        p
    }
}

impl VramPool<'_> {
    /// Allocates up to `n` device pages, ready to be migration destinations
    /// (one reference, locked), from the chunks there are (see
    /// [`VramPool::grow`]). Takes each chunk's lock once for the whole
    /// batch. Returns fewer pages when the chunks are full.
    pub(crate) fn alloc(&self, n: usize) -> Result<Batch> {
        self.alloc_from(n, false)
    }

    /// Whether this pool's chunks hold 2 MiB folios: whole 2 MiB blocks,
    /// on a kernel that migrates large folios.
    fn holds_large(&self) -> bool {
        self.chunk_size % (BLOCK_PAGES * PAGE_SIZE) == 0
            && large_order() as usize == BLOCK_PAGES.trailing_zeros() as usize
    }

    /// Allocates one large folio (2 MiB, a whole free block of a chunk),
    /// ready to be a migration destination (one reference, locked). `None`
    /// if no chunk has a free block (or the pool holds no large folio): the
    /// caller then moves the range in small pages.
    pub(crate) fn alloc_large(&self) -> Result<Option<Batch>> {
        if !self.holds_large() {
            return Ok(None);
        }
        let batch = self.alloc_from(1, true)?;
        Ok((!batch.pages.is_empty()).then_some(batch))
    }

    /// Makes `n` free pages (and, with `large`, a free 2 MiB block)
    /// available to [`VramPool::alloc`] and [`VramPool::alloc_large`],
    /// creating chunks (pagemaps) until they are or every chunk has one.
    /// Each pagemap is created with the table unlocked, its slot `Creating`
    /// meanwhile. Returns whether it created one.
    ///
    /// Never call it with an mmap lock held (or under a lock taken under
    /// one, such as this pool's table): `memremap_pages` takes the CPU
    /// hotplug lock, which CPU hotplug holds while it creates sysfs
    /// directories, and a read of a sysfs directory takes `mmap_lock` (its
    /// first fault on the buffer) under kernfs's lock: a lock cycle.
    pub(crate) fn grow(&self, n: usize, large: bool) -> bool {
        let large = large && self.holds_large();
        // One grower at a time: another one's chunk may be all this one
        // needs.
        let _grower = self.grow_lock.lock();
        let mut created = false;
        loop {
            let c = {
                let mut chunks = self.chunks.lock();
                let live = || chunks.iter().filter_map(Slot::live).map(|m| m.data());
                let free: usize = live().map(|ch| ch.free.lock().nfree()).sum();
                let block =
                    !large || live().any(|ch| ch.large && ch.free.lock().nfree_blocks() > 0);
                if free >= n && block {
                    return created;
                }
                let Some(c) = chunks.iter().position(|s| matches!(s, Slot::Absent)) else {
                    return created;
                };
                chunks[c] = Slot::Creating;
                c
            };
            let map = self.new_chunk(c);
            let mut chunks = self.chunks.lock();
            match map {
                Ok(map) => {
                    // A chunk not aligned to 2 MiB holds no block: do not
                    // create every other one looking for one.
                    let done = large && !map.data().large;
                    // Only `grow` (under `grow_lock`) leaves `Creating`.
                    chunks[c] = Slot::Live(map);
                    self.stats.chunks_created.add(1, Relaxed);
                    created = true;
                    if done {
                        return created;
                    }
                }
                // No pagemap now (no memory, no free physical range): as if
                // the VRAM were full.
                Err(e) => {
                    chunks[c] = Slot::Absent;
                    drop(chunks);
                    kernel::pr_warn_once!("msvm: chunk {c}: no pagemap: {e:?}\n");
                    return created;
                }
            }
        }
    }

    /// Whether [`VramPool::grow`] could create a chunk now (some chunk has
    /// no pagemap).
    pub(crate) fn can_grow(&self) -> bool {
        self.chunks.lock().iter().any(|s| matches!(s, Slot::Absent))
    }

    /// Allocates up to `n` pages (or, if `large`, `n` large folios) from
    /// live chunks, fullest first (so that data packs into few pagemaps).
    fn alloc_from(&self, n: usize, large: bool) -> Result<Batch> {
        // Pages go into the batch as they are taken: on any error, its drop
        // gives them back.
        let mut batch = Batch {
            pages: KVec::with_capacity(n, GFP_KERNEL)?,
            next: 0,
        };
        let mut taken = KVec::with_capacity(n, GFP_KERNEL)?;
        let mut order = KVec::with_capacity(self.nchunks, GFP_KERNEL)?;
        let chunks = self.chunks.lock();
        for (c, slot) in chunks.iter().enumerate() {
            if let Some(m) = slot.live() {
                order
                    .push_within_capacity((m.data().used(), c))
                    .map_err(|_| ENOMEM)?;
            }
        }
        order.sort_unstable_by(|a, b| b.cmp(a));
        let seq = self.alloc_seq.fetch_add(1, Relaxed) + 1;
        for &(_, c) in order.iter() {
            let want = n - batch.pages.len();
            if want == 0 {
                break;
            }
            let Some(map) = chunks[c].live() else {
                continue;
            };
            let chunk = map.data();
            if large {
                while chunk.large && batch.pages.len() < n {
                    let Some(i) = chunk.free.lock().take_block() else {
                        break;
                    };
                    chunk.last_alloc.store(seq, Relaxed);
                    // SAFETY: the block came off the free map whole: nobody
                    // uses its pages, the first is aligned, and they are
                    // ours until handed to a migration.
                    let page = unsafe { map.init_folio(i, large_order()) };
                    // The batch has room for `n` entries.
                    let _ = batch
                        .pages
                        .push_within_capacity(Some((page, chunk.base + i * PAGE_SIZE)));
                    self.stats.allocated.add(BLOCK_PAGES as u64, Relaxed);
                }
                continue;
            }
            chunk.last_alloc.store(seq, Relaxed);
            taken.clear();
            // `taken` has room for `n >= want` entries.
            chunk.free.lock().take(want, &mut taken);
            for &i in taken.iter() {
                let i = i as usize;
                // SAFETY: page `i` came off the free map: nobody uses it and
                // it is ours until handed to a migration.
                let page = unsafe { map.init_folio(i, 0) };
                // The batch has room for `n` pages, and `want` is what is
                // left of them: this never fails.
                let _ = batch
                    .pages
                    .push_within_capacity(Some((page, chunk.base + i * PAGE_SIZE)));
                self.stats.allocated.add(1, Relaxed);
            }
        }
        Ok(batch)
    }

    fn new_chunk(&self, c: usize) -> Result<Pin<KBox<Pagemap<Chunk>>>> {
        let npages = self.chunk_size / PAGE_SIZE;
        let pool = core::ptr::from_ref(self).cast::<VramPool<'static>>();
        let base = c * self.chunk_size;
        Pagemap::new(self.chunk_size, self.owner(), c"msvm-vram", |pfn_first| {
            let free = FreeMap::new(npages);
            // Large folios need the kernel's support, and frames (and BAR
            // offsets) aligned to them.
            let large = large_order() as usize == BLOCK_PAGES.trailing_zeros() as usize
                && pfn_first % BLOCK_PAGES == 0
                && base % (BLOCK_PAGES * PAGE_SIZE) == 0;
            let homes = no_homes(if large { npages / BLOCK_PAGES } else { 0 });
            try_pin_init!(Chunk {
                pool,
                base,
                pfn_first,
                free <- new_spinlock!(free?),
                npages,
                large,
                last_alloc: Atomic::new(0),
                homes <- new_mutex!(homes?),
            }? Error)
        })
    }

    /// Moves every page of chunk `map` that is in use back to system RAM.
    /// Returns how many pages are still in use afterwards (locked by a
    /// migration in flight, say, which `migrate_device_range` skips without
    /// a word, or a 2 MiB folio without a 2 MiB system folio to go to).
    fn evict(&self, map: &Pagemap<Chunk>) -> Result<usize> {
        let d = self.drain(map, None)?;
        self.stats.evicted.add(d.home as u64, Relaxed);
        Ok(map.data().used())
    }

    /// Moves every page of chunk `map` that is in use into the pages of
    /// `batch` (other chunks of this pool: device to device, BAR to BAR;
    /// large folios stay, see [`choose_victim`]) or, without a batch, to
    /// system RAM.
    fn drain(&self, map: &Pagemap<Chunk>, mut batch: Option<Batch>) -> Result<Drained> {
        // Consolidation (a batch) only packs pages into other chunks: under
        // the memory pressure that asked for it, sending pages home would
        // take RAM. Eviction (no batch) sends them home, whatever it costs.
        let home_ok = batch.is_none();
        let base = map.data().base;
        let mut d = Drained::default();
        let mut stage = KBox::new([0u8; PAGE_SIZE], GFP_KERNEL)?;
        // One page table's worth of frames at a time: small arrays, and
        // pages locked for a short while.
        let mut first = 0;
        while first < map.npages() {
            let n = (map.npages() - first).min(MAX_PAGES);
            // SAFETY: the frames are those of `map`, a live pagemap of ours.
            let mut mig = unsafe { DeviceMigration::range(map.pfn_first() + first, n) }?;
            // What each filled entry became (moved: true, or sent home),
            // and how many pages it stands for.
            let mut filled = [None; MAX_PAGES];
            for (i, f) in filled.iter_mut().enumerate().take(n) {
                let src = mig.src(i);
                if mig.src_page(i).is_none() {
                    continue;
                }
                let nr = src.nr_pages();
                if !src.migrate() {
                    d.stuck += nr;
                    continue;
                }
                let from = base + (first + i) * PAGE_SIZE;
                if src.compound() {
                    // A large folio: the core moves it whole here or not at
                    // all (it cannot split it without its mapping); only
                    // eviction moves it, home.
                    *f = if home_ok {
                        self.evict_large(&mut mig, i, from)?.then_some((false, nr))
                    } else {
                        None
                    };
                    if f.is_none() {
                        d.stuck += nr;
                    }
                    continue;
                }
                if let Some((dpage, off)) = batch.as_mut().and_then(Batch::take) {
                    self.bar.copy_from_bar(off, &self.bar, from, &mut stage)?;
                    mig.set_dst(i, dpage, src.write())?;
                    *f = Some((true, 1));
                    continue;
                }
                // `must` waits for memory rather than fail: the data has
                // nowhere else to go.
                let dst = if home_ok { NewPage::must() } else { None };
                let Some(dst) = dst else {
                    d.stuck += 1;
                    continue;
                };
                self.bar.copy_to_page(from, dst.page())?;
                mig.set_dst(i, dst, src.write())?;
                *f = Some((false, 1));
            }
            mig.pages();
            // The core may still back out of a page (an unexpected
            // reference): it stays in use here.
            for (i, f) in filled.iter().enumerate().take(n) {
                match (*f, mig.src(i).migrate()) {
                    (Some((_, nr)), false) => d.stuck += nr,
                    (Some((true, nr)), true) => d.moved += nr,
                    (Some((false, nr)), true) => {
                        d.home += nr;
                        if nr > 1 {
                            self.stats.large_to_system.add(1, Relaxed);
                        }
                    }
                    (None, _) => {}
                }
            }
            drop(mig);
            first += n;
        }
        self.stats.to_system.add(d.home as u64, Relaxed);
        Ok(d)
    }

    /// Gives the large folio of source entry `i` of `mig` (at BAR offset
    /// `from`) a 2 MiB system folio and copies it there. Returns whether it
    /// found one (eviction retries otherwise).
    fn evict_large(&self, mig: &mut DeviceMigration, i: usize, from: usize) -> Result<bool> {
        let Some(dst) = crate::sysmem::large_home_evict() else {
            return Ok(false);
        };
        self.bar.copy_to_folio(from, dst.page(), BLOCK_PAGES)?;
        let write = mig.src(i).write();
        mig.set_dst(i, dst, write)?;
        Ok(true)
    }

    /// Brings this pool's 2 MiB folios home before eviction, through the
    /// mm and address each was migrated in at (a move to system RAM of
    /// that 2 MiB, access unchecked: under that mm's mmap write lock a
    /// folio mapped once moves
    /// home whole, and one that fork relatives map too is split, every
    /// mm's PMD of it turned into page-table entries). Eviction
    /// (`migrate_device_range`) would collect them whole with PMD migration
    /// entries in every mm that maps them, which nothing excludes zaps from
    /// (Linux 7.3's `zap_huge_pmd()` bug, see
    /// `crate::mm::migrate::device_folio_mapcount`). Best effort: a folio
    /// whose record is stale (remapped elsewhere, or mapped only by a fork
    /// child of an mm that has gone) is left to the eviction; so is
    /// everything once the task is killed.
    fn home_large_folios(&self) {
        let mut todo = KVec::new();
        {
            let chunks = self.chunks.lock();
            let maps = || chunks.iter().filter_map(Slot::map);
            let n = maps().map(|m| m.data().homes.lock().len()).sum();
            if todo.reserve(n, GFP_KERNEL).is_err() {
                return;
            }
            for m in maps() {
                for h in m.data().homes.lock().iter().flatten() {
                    // Room for every block was reserved above.
                    let _ = todo.push_within_capacity((h.mm.clone(), h.addr));
                }
            }
        }
        let cancel = Cancel::task();
        for (mm, addr) in todo {
            if cancel.check().is_err() {
                break;
            }
            let Some(mm) = mm.mmget_not_zero() else {
                continue;
            };
            let len = BLOCK_PAGES * PAGE_SIZE;
            // Whatever it finds there now: a hole, another mapping, or
            // pages of this group that are not that folio any more all
            // just come home (or stay, if they cannot move).
            let _ = self.ops.evict_range(self, &mm, addr, len, &cancel);
        }
    }

    /// Notes that `page`, the head of a 2 MiB folio of this pool, was just
    /// migrated in at `addr` of `mm` (see [`Chunk::homes`]).
    pub(crate) fn note_large_home(&self, page: PageRef<'_>, mm: &Mm, addr: usize) {
        let Some((map, i)) = chunk_of(page, self.owner) else {
            return;
        };
        let home = LargeHome {
            mm: ARef::from(mm),
            addr,
        };
        // The old record goes with the lock let go (it may drop an mm).
        let _old = map
            .data()
            .homes
            .lock()
            .get_mut(i / BLOCK_PAGES)
            .and_then(|h| h.replace(home));
    }

    /// Removes the pagemap of chunk `c` if it is idle (no page in use) and
    /// in state `Live` or `Draining`; `Draining` chunks that are not idle go
    /// back to `Live`. The pagemap is removed with the table unlocked, the
    /// slot `Dying` meanwhile; `freed` is told the struct-page bytes it
    /// gave back. Returns whether it was removed.
    fn teardown_if_idle(&self, c: usize, freed: &dyn Fn(usize)) -> bool {
        let map = {
            let mut chunks = self.chunks.lock();
            let idle = chunks[c].map().is_some_and(|m| m.data().used() == 0);
            match core::mem::replace(&mut chunks[c], Slot::Dying) {
                Slot::Live(m) | Slot::Draining(m) if idle => m,
                Slot::Live(m) | Slot::Draining(m) => {
                    chunks[c] = Slot::Live(m);
                    return false;
                }
                other => {
                    chunks[c] = other;
                    return false;
                }
            }
        };
        // Every page is free: this returns at once.
        drop(map);
        self.chunks.lock()[c] = Slot::Absent;
        self.stats.chunks_destroyed.add(1, Relaxed);
        self.stats
            .shrink_freed
            .add(self.chunk_memmap_bytes() as u64, Relaxed);
        freed(self.chunk_memmap_bytes());
        true
    }

    /// Removes the pagemaps of idle chunks, telling `freed` the struct-page
    /// bytes of each. Returns how many.
    pub(crate) fn trim_idle(&self, freed: &dyn Fn(usize)) -> usize {
        let _pass = self.shrink_lock.lock();
        self.stats.shrink_scans.add(1, Relaxed);
        (0..self.nchunks)
            .filter(|&c| self.teardown_if_idle(c, freed))
            .count()
    }

    /// Empties lightly used chunks into fuller ones ([`choose_victim`]) and
    /// removes their pagemaps, as long as that frees pagemaps, telling
    /// `freed` as [`VramPool::trim_idle`] does. Returns how many it removed.
    pub(crate) fn consolidate(&self, freed: &dyn Fn(usize)) -> Result<usize> {
        let _pass = self.shrink_lock.lock();
        self.stats.shrink_scans.add(1, Relaxed);
        let npages = self.chunk_size / PAGE_SIZE;
        let mut removed = 0;
        loop {
            // Choose and mark the victim.
            let (victim, info) = {
                let mut chunks = self.chunks.lock();
                let live = chunks.iter().map(|s| s.live().map(|m| m.data().info()));
                let Some((v, info)) = choose_victim(live, npages) else {
                    break;
                };
                match core::mem::replace(&mut chunks[v], Slot::Dying) {
                    Slot::Live(m) => chunks[v] = Slot::Draining(m),
                    other => {
                        chunks[v] = other;
                        break;
                    }
                }
                (v, info)
            };
            // Room in the other live chunks (never a new chunk) for its
            // pages, then move.
            let dest = self.alloc_from(info.used, false);
            let drained = dest.and_then(|dest| {
                let chunks = self.chunks.lock();
                let Some(map) = chunks[victim].map() else {
                    return Err(ENOENT);
                };
                // The victim's pagemap stays while it drains: only the
                // holder of `shrink_lock`, this pass, takes a `Draining`
                // slot apart.
                let map: *const Pagemap<Chunk> = map;
                drop(chunks);
                // SAFETY: see above: the slot keeps the pagemap alive.
                self.drain(unsafe { &*map }, Some(dest))
            });
            let drained = match drained {
                Ok(d) => d,
                Err(e) => {
                    // Back to `Live`, whatever it still holds.
                    let mut chunks = self.chunks.lock();
                    chunks[victim] = match core::mem::replace(&mut chunks[victim], Slot::Dying) {
                        Slot::Draining(m) => Slot::Live(m),
                        other => other,
                    };
                    return Err(e);
                }
            };
            self.stats.shrink_moved.add(drained.moved as u64, Relaxed);
            self.stats.shrink_home.add(drained.home as u64, Relaxed);
            if !self.teardown_if_idle(victim, freed) {
                // Pages in use that would not move: leave it for later.
                break;
            }
            removed += 1;
        }
        Ok(removed)
    }

    /// Evicts chunk `c` until no page of it is in use, retrying with
    /// backoff (1 ms doubling to 100 ms) while pages are busy or a 2 MiB
    /// folio finds no 2 MiB of RAM, and saying so every 100 passes. It
    /// does not give up: the pagemap's teardown would wait for those pages
    /// anyway, and a retry may yet bring them home.
    fn evict_all(&self, c: usize, map: &Pagemap<Chunk>) {
        let mut wait_ms = 1;
        let mut pass = 0u64;
        loop {
            match self.evict(map) {
                Ok(0) => return,
                Ok(n) if pass % 100 == 11 => {
                    pr_warn!(
                        "msvm: chunk {c}: {n} page(s) still in use after {pass} passes, retrying\n"
                    );
                }
                Err(e) if pass % 100 == 0 => {
                    pr_err!("msvm: chunk {c}: eviction failed: {e:?}, retrying\n");
                }
                _ => {}
            }
            pass = pass.wrapping_add(1);
            kernel::time::delay::fsleep(kernel::time::Delta::from_millis(wait_ms));
            wait_ms = (wait_ms * 2).min(100);
        }
    }
}

#[pinned_drop]
impl PinnedDrop for VramPool<'_> {
    fn drop(self: Pin<&mut Self>) {
        // 2 MiB folios first, through the mms that map them, where a
        // migration can exclude zaps (see `home_large_folios`).
        self.home_large_folios();
        // Every page goes home before its pagemap goes: `memunmap_pages`
        // waits for the last page of a map to be freed. Both with the table
        // unlocked (`memunmap_pages` takes the CPU hotplug lock: see
        // `grow`), the slot `Dying` meanwhile.
        for c in 0..self.nchunks {
            let slot = core::mem::replace(&mut self.chunks.lock()[c], Slot::Dying);
            if let Some(map) = slot.map() {
                self.evict_all(c, map);
            }
            drop(slot);
            self.chunks.lock()[c] = Slot::Absent;
        }
    }
}

#[kunit_tests(msvm_vram)]
mod tests {
    use super::*;

    fn c(used: usize, last_alloc: u64) -> Option<ChunkInfo> {
        Some(ChunkInfo {
            used,
            large: 0,
            free_blocks: 0,
            last_alloc,
        })
    }

    #[test]
    fn victim_is_lightest_then_coldest() {
        // 100 pages per chunk.
        let live = [c(80, 5), c(10, 9), c(10, 3), None, c(50, 1)];
        assert_eq!(
            choose_victim(live.iter().copied(), 100).map(|v| v.0),
            Some(2)
        );
        let live = [c(80, 5), c(10, 9), c(20, 3)];
        assert_eq!(
            choose_victim(live.iter().copied(), 100).map(|v| v.0),
            Some(1)
        );
    }

    #[test]
    fn no_victim_without_room_or_light_chunks() {
        // The light chunk does not fit in the others.
        let live = [c(95, 1), c(40, 2), c(99, 3)];
        assert_eq!(choose_victim(live.iter().copied(), 100).map(|v| v.0), None);
        // Nothing at most half full.
        let live = [c(60, 1), c(70, 2)];
        assert_eq!(choose_victim(live.iter().copied(), 100).map(|v| v.0), None);
        // A single chunk has nowhere to go.
        assert_eq!(
            choose_victim([c(5, 1)].iter().copied(), 100).map(|v| v.0),
            None
        );
        // Idle chunks are not victims (the idle pass removes them) but
        // lend their room.
        let live = [c(0, 1), c(30, 2)];
        assert_eq!(
            choose_victim(live.iter().copied(), 100).map(|v| v.0),
            Some(1)
        );
        assert_eq!(
            choose_victim([None, None].iter().copied(), 100).map(|v| v.0),
            None
        );
    }

    #[test]
    fn chunks_with_large_folios_stay() {
        // Chunks of 4 blocks; plenty of room, in whole free blocks.
        let n = 4 * BLOCK_PAGES;
        let info = |used, large, free_blocks, last_alloc| {
            Some(ChunkInfo {
                used,
                large,
                free_blocks,
                last_alloc,
            })
        };
        // A chunk holding a large folio is never the victim, however
        // light: the next lightest is.
        let live = [
            info(n - 2 * BLOCK_PAGES, 0, 2, 1),
            info(BLOCK_PAGES + 10, 1, 2, 1),
            info(BLOCK_PAGES + 100, 0, 2, 2),
        ];
        assert_eq!(choose_victim(live.iter().copied(), n).map(|v| v.0), Some(2));
        let live = [info(n - BLOCK_PAGES, 0, 1, 1), info(BLOCK_PAGES, 1, 3, 1)];
        assert_eq!(choose_victim(live.iter().copied(), n).map(|v| v.0), None);
        // Small pages break whole blocks once the partly used ones are
        // full: 100 pages with 10 of partial room need one more block.
        let live = [info(n - 10, 0, 0, 1), info(100, 0, 3, 2)];
        assert_eq!(choose_victim(live.iter().copied(), n).map(|v| v.0), None);
        let live = [info(n - BLOCK_PAGES - 10, 0, 1, 1), info(100, 0, 3, 2)];
        assert_eq!(choose_victim(live.iter().copied(), n).map(|v| v.0), Some(1));
    }

    #[test]
    fn consolidation_plan_converges() {
        // 16 chunks a quarter full: repeatedly emptying the victim into
        // the fullest others ends with 4 full chunks.
        let n = 100;
        let mut used = [25usize; 16];
        let mut live = [c(0, 0); 16];
        loop {
            for (l, &u) in live.iter_mut().zip(used.iter()) {
                *l = (u > 0).then_some(ChunkInfo {
                    used: u,
                    large: 0,
                    free_blocks: 0,
                    last_alloc: 0,
                });
            }
            let Some(v) = choose_victim(live.iter().copied(), n).map(|v| v.0) else {
                break;
            };
            let mut left = used[v];
            used[v] = 0;
            // Fullest first, as `alloc_from` takes them.
            let mut order: KVec<usize> = KVec::new();
            for (i, &u) in used.iter().enumerate() {
                if i != v && u > 0 {
                    let _ = order.push(i, GFP_KERNEL);
                }
            }
            order.sort_unstable_by(|a, b| used[*b].cmp(&used[*a]));
            for &i in order.iter() {
                let k = left.min(n - used[i]);
                used[i] += k;
                left -= k;
            }
            assert_eq!(left, 0);
        }
        assert_eq!(used.iter().filter(|&&u| u > 0).count(), 4);
        assert!(used.iter().all(|&u| u == 0 || u == n));
    }
}
