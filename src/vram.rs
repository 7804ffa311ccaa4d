// SPDX-License-Identifier: GPL-2.0

//! A GPU's memory: the BAR window onto it, split into chunks, each chunk a
//! device-private pagemap created the first time an allocation needs it; a
//! page allocator over the chunks; eviction of every page on teardown.
//!
//! A device page's VRAM offset follows from its page frame number: page `i`
//! of chunk `c` lives at `c * chunk_size + i * PAGE_SIZE` of the BAR.
//!
//! # Lock order
//!
//! `mmap_lock` (held by migration callers) -> [`VramPool::chunks`] ->
//! [`Chunk::free`]. `Chunk::free` is also taken alone by `folio_free`, which
//! may run from any context that puts a page: nothing sleeps under it and it
//! never allocates.

use core::ffi::c_void;

use kernel::{
    new_mutex, new_spinlock,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        Mutex, SpinLock,
    },
};

use crate::mm::{
    iomem::WcBar,
    migrate::{DeviceMigration, Entry},
    page::{NewPage, PageRef},
    pagemap::{self, Fault, FaultError, Pagemap, PagemapOps, PAGE_SIZE},
};

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
}

impl Stats {
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
    /// Indices of the free pages of the chunk; its capacity is the number of
    /// pages, so returning a page never allocates.
    #[pin]
    free: SpinLock<KVec<u32>>,
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
}

impl PagemapOps for Chunk {
    fn folio_free(&self, page: PageRef) {
        let Some(idx) = page.pfn().checked_sub(self.pfn_first) else {
            return;
        };
        // The capacity is the page count: this neither fails nor allocates.
        if self.free.lock().push_within_capacity(idx as u32).is_ok() {
            self.pool().stats.freed.add(1, Relaxed);
        }
    }

    fn migrate_to_ram(&self, fault: &Fault<'_>) -> Result<(), FaultError> {
        crate::migrate::fault_to_ram(self.pool(), fault)
    }
}

/// A chunk's pagemap, once created.
type ChunkSlot = Option<Pin<KBox<Pagemap<Chunk>>>>;

/// The memory of one GPU.
#[pin_data(PinnedDrop)]
pub(crate) struct VramPool<'a> {
    bar: WcBar<'a>,
    /// The `dev_private_owner` of this device's pages: its owner group's
    /// token, shared with the peers it reaches over P2P.
    owner: *const c_void,
    chunk_size: usize,
    nchunks: usize,
    /// The chunks, `None` until first needed.
    #[pin]
    chunks: Mutex<KVec<ChunkSlot>>,
    /// Serialises the engine's read-modify-write of VRAM words.
    #[pin]
    pub(crate) atomics: Mutex<()>,
    pub(crate) stats: Stats,
    /// msvm index of the device.
    index: usize,
    /// Other devices working on this pool now (see `crate::device::PoolRef`).
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
            slots.push(None, GFP_KERNEL)?;
        }
        KBox::pin_init(
            try_pin_init!(Self {
                bar,
                owner,
                chunk_size,
                nchunks,
                chunks <- new_mutex!(slots),
                atomics <- new_mutex!(()),
                stats: Stats::new(),
                index,
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

    /// Usable bytes of VRAM.
    pub(crate) fn size(&self) -> usize {
        self.nchunks * self.chunk_size
    }

    /// Bytes per chunk.
    pub(crate) fn chunk_size(&self) -> usize {
        self.chunk_size
    }

    /// Number of chunks with a pagemap.
    pub(crate) fn live_chunks(&self) -> usize {
        self.chunks.lock().iter().filter(|c| c.is_some()).count()
    }

    /// The pool and BAR offset of device page `page`, if it belongs to this
    /// device's owner group (this device or a P2P peer).
    ///
    /// The peer's pool stays alive while the caller holds `page` (locked by
    /// a migration, or protected by the mirror lock): the pool tears down
    /// its chunks, evicting their pages first, before it goes.
    pub(crate) fn locate(&self, page: PageRef) -> Option<(&VramPool<'static>, usize)> {
        locate(page, self.owner)
    }

    /// The BAR offset of device page `page`, if it is one of this pool's.
    pub(crate) fn offset_of(&self, page: PageRef) -> Option<usize> {
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
pub(crate) fn locate(
    page: PageRef,
    owner: *const c_void,
) -> Option<(&'static VramPool<'static>, usize)> {
    // SAFETY: every pagemap with a group's owner token is a
    // `Pagemap<Chunk>` of an msvm pool.
    let map = unsafe { pagemap::map_of::<Chunk>(page, owner) }?;
    let chunk = map.data();
    Some((chunk.pool(), chunk.base + map.index_of(page)? * PAGE_SIZE))
}

/// Device pages allocated for one migration step, with their BAR offsets,
/// handed out in order; those not taken are freed on drop.
pub(crate) struct Batch {
    pages: KVec<(PageRef, usize)>,
    next: usize,
}

impl Batch {
    /// The next page and its BAR offset, if any is left.
    pub(crate) fn peek(&self) -> Option<(PageRef, usize)> {
        self.pages.get(self.next).copied()
    }

    /// The page [`Self::peek`] returned now belongs to a migration.
    pub(crate) fn take(&mut self) {
        self.next += 1;
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        for &(page, _) in &self.pages[self.next..] {
            // SAFETY: allocated by `alloc`, locked with one reference, never
            // handed to a migration: ours to release.
            unsafe { page.release_locked() };
        }
    }
}

impl VramPool<'_> {
    /// Allocates up to `n` device pages, ready to be migration destinations
    /// (one reference, locked). Takes each chunk's lock once for the whole
    /// batch; creates chunks (pagemaps) as needed. Returns fewer pages when
    /// VRAM is full.
    pub(crate) fn alloc(&self, n: usize) -> Result<Batch> {
        let mut pages = KVec::with_capacity(n, GFP_KERNEL)?;
        let mut chunks = self.chunks.lock();
        for c in 0..self.nchunks {
            if pages.len() == n {
                break;
            }
            if chunks[c].is_none() {
                chunks[c] = Some(self.new_chunk(c)?);
                self.stats.chunks_created.add(1, Relaxed);
            }
            let Some(map) = chunks[c].as_ref() else {
                continue;
            };
            let chunk = map.data();
            let mut taken = KVec::with_capacity(n - pages.len(), GFP_KERNEL)?;
            {
                let mut free = chunk.free.lock();
                while taken.len() < n - pages.len() {
                    match free.pop() {
                        Some(i) => taken.push_within_capacity(i).map_err(|_| ENOMEM)?,
                        None => break,
                    }
                }
            }
            for i in taken {
                let i = i as usize;
                // SAFETY: page `i` came off the free list: nobody uses it and
                // it is ours until handed to a migration.
                let page = unsafe { map.init_page(i, core::ptr::null_mut()) };
                pages
                    .push_within_capacity((page, chunk.base + i * PAGE_SIZE))
                    .map_err(|_| ENOMEM)?;
            }
        }
        self.stats.allocated.add(pages.len() as u64, Relaxed);
        Ok(Batch { pages, next: 0 })
    }

    fn new_chunk(&self, c: usize) -> Result<Pin<KBox<Pagemap<Chunk>>>> {
        let npages = self.chunk_size / PAGE_SIZE;
        let pool = core::ptr::from_ref(self).cast::<VramPool<'static>>();
        let base = c * self.chunk_size;
        Pagemap::new(self.chunk_size, self.owner(), c"msvm-vram", |pfn_first| {
            let mut free = KVec::with_capacity(npages, GFP_KERNEL);
            if let Ok(f) = free.as_mut() {
                // Lowest indices on top: allocation walks the chunk upwards.
                for i in (0..npages as u32).rev() {
                    let _ = f.push_within_capacity(i);
                }
            }
            try_pin_init!(Chunk {
                pool,
                base,
                pfn_first,
                free <- new_spinlock!(free?),
            }? Error)
        })
    }

    /// Moves every page of chunk `map` that is in use back to system RAM.
    /// Returns how many in-use pages could not be moved this time (locked
    /// by a migration in flight, say).
    fn evict(&self, map: &Pagemap<Chunk>) -> Result<usize> {
        // SAFETY: the frames are those of `map`, a live pagemap of ours.
        let mut mig = unsafe { DeviceMigration::range(map.pfn_first(), map.npages()) }?;
        let base = map.data().base;
        let (mut moved, mut stuck) = (0u64, 0usize);
        for i in 0..mig.npages() {
            let src = mig.src(i);
            if src.page().is_none() {
                continue;
            }
            if !src.migrate() {
                stuck += 1;
                continue;
            }
            // `must` waits for memory rather than fail: the data has
            // nowhere else to go.
            let Some(dst) = NewPage::must() else {
                stuck += 1;
                continue;
            };
            self.bar.copy_to_page(base + i * PAGE_SIZE, dst.page())?;
            mig.set_dst(i, Entry::to(dst.into_migration(), src.write()));
            moved += 1;
        }
        mig.pages();
        drop(mig);
        self.stats.evicted.add(moved, Relaxed);
        self.stats.to_system.add(moved, Relaxed);
        Ok(stuck)
    }

    /// Evicts chunk `c` until no page of it is in use, retrying with
    /// backoff while pages are busy; says so if some never move (the
    /// pagemap's teardown then waits for them).
    fn evict_all(&self, c: usize, map: &Pagemap<Chunk>) {
        let mut wait_ms = 1;
        for attempt in 0..12 {
            match self.evict(map) {
                Ok(0) => return,
                Ok(n) if attempt == 11 => {
                    pr_err!("msvm: chunk {c}: {n} page(s) still busy after {attempt} retries\n");
                    return;
                }
                Ok(_) => {}
                Err(e) => pr_err!("msvm: chunk {c}: eviction failed: {e:?}, retrying\n"),
            }
            kernel::time::delay::fsleep(kernel::time::Delta::from_millis(wait_ms));
            wait_ms = (wait_ms * 2).min(100);
        }
    }
}

#[pinned_drop]
impl PinnedDrop for VramPool<'_> {
    fn drop(self: Pin<&mut Self>) {
        // Every page goes home before its pagemap goes: `memunmap_pages`
        // waits for the last page of a map to be freed.
        let mut chunks = self.chunks.lock();
        for (c, slot) in chunks.iter_mut().enumerate() {
            if let Some(map) = slot.as_ref() {
                self.evict_all(c, map);
            }
            *slot = None;
        }
    }
}
