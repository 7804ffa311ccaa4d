// SPDX-License-Identifier: GPL-2.0

//! Device-private memory: a `dev_pagemap` of type `MEMORY_DEVICE_PRIVATE`
//! whose callbacks are dispatched to a Rust trait.
//!
//! A [`Pagemap`] reserves a free physical address range (it is never
//! accessed: device-private pages are not CPU-addressable), creates its
//! `struct page`s with `memremap_pages` and removes them on drop with
//! `memunmap_pages`, which waits until every page of the map is free again.
//!
//! A map of a device's memory behind a BAR is made with the BAR's range
//! its pages stand for (a [`BusRange`], its owner's
//! [`PagemapOps::Bus`]), the one place both sides of a page are found
//! from: its offset in the BAR (its owner's CPU side, [`Pagemap::bus`])
//! and its bus-side address, what a peer maps for P2P access to it
//! ([`PeerAddr`], which comes only from the page, through its map:
//! [`Pagemap::peer_addr`], for the BAR's `WcBar::peer_route`).
//!
//! The map keeps its own free pages ([`FreeMap`]): a page is handed out
//! ([`Pagemap::alloc_pages`], [`Pagemap::alloc_block`]) only off the free map
//! and goes back on it only when the mm core frees it (`folio_free`), so a
//! page in use is never handed out twice.
//!
//! # Lock order
//!
//! `Pagemap::free` is a leaf spinlock, also taken by `folio_free` in any
//! context that puts a page: nothing sleeps or allocates under it.

use core::marker::{PhantomData, PhantomPinned};
use core::ptr::NonNull;

use kernel::{
    bindings,
    error::from_err_ptr,
    num::casts::FromSafeCast,
    prelude::*,
    sync::{Arc, SpinLock, UniqueArc},
    types::Opaque,
};

use super::bindings as b;
use super::fault::{Fault, FaultError};
use super::freemap::FreeMap;
use super::numa::Home;
use super::page::{large_order, NewPage, PageRef, BLOCK_PAGES};

mod bus;
mod callbacks;
pub(crate) use bus::{BusRange, BusSide};
use callbacks::OpsTable;

pub(crate) use super::owner::OwnerKey;
pub(crate) use super::page::PAGE_SIZE;

/// The name of every pagemap's free-map lock, one lock class for all `T`
/// (its key is the one static of [`Pagemap::new`]). A static, not a
/// literal in the generic `new`: each instantiation of `new` would have
/// its own copy of a literal, and lockdep warns when one key meets two
/// names.
static FREE_LOCK: &CStr = c"Pagemap::free";

/// What a device-private pagemap's owner does when the mm core calls.
pub(crate) trait PagemapOps: Send + Sync + Sized + 'static {
    /// What the map's pages stand for on the bus: a range of a BAR
    /// ([`BusRange`]: device memory a peer reaches, and its owner's CPU
    /// side finds at the range's offset), or nothing (`()`).
    type Bus: BusSide;

    /// The last reference to the folio of pages `first..first + nr` of
    /// this map is gone; they go back on the free map right after this
    /// returns (nothing can hand them out again before). May run in any
    /// context that can put a page: must not sleep.
    fn folio_freeing(&self, first: usize, nr: usize);

    /// The last reference to a folio of this map is gone: `freed` of its
    /// pages are back on the map's free map, and `left` pages of the map
    /// are still in use. May run in any context that can put a page: must
    /// not sleep.
    fn folio_freed(&self, freed: usize, left: usize);

    /// The CPU touched `fault.page()`, a page of this map mapped in a process:
    /// move it (and maybe its neighbours) to system RAM.
    fn migrate_to_ram(&self, fault: Fault<'_>) -> Result<(), FaultError>;
}

/// A `MEMORY_DEVICE_PRIVATE` pagemap of `len` bytes, its callbacks going to
/// `T`.
///
/// # Invariants
///
/// - `pgmap` is the first field (`#[repr(C)]`), so a `dev_pagemap` pointer of
///   this map is a pointer to the `Pagemap`;
/// - `res` is the region `pgmap` covers, reserved by
///   `request_free_mem_region`; if `mapped`, `pgmap` was successfully passed
///   to `memremap_pages`; both are undone in `drop`;
/// - `pgmap`'s owner is an `OwnerKey<T>`'s (the key it was made with, or
///   one [`Pagemap::rekey`] gave it), and every pagemap with that owner is
///   a `Pagemap<T>` (see [`OwnerKey`]);
/// - if `bus` is a range, page `i` of the map stands for page `i` of it,
///   which is `npages` pages long;
/// - page `i` is on `free` only if no one uses it (no mapping, migration
///   or [`NewPage`] holds it): pages leave `free` only to become a
///   [`NewPage`] ([`Pagemap::init_folio`]) and come back only through
///   `folio_free`.
#[repr(C)]
#[pin_data(PinnedDrop)]
pub(crate) struct Pagemap<T: PagemapOps> {
    #[pin]
    pgmap: Opaque<bindings::dev_pagemap>,
    res: NonNull<bindings::resource>,
    pfn_first: usize,
    npages: usize,
    /// What the pages stand for on the bus (a BAR's range, or nothing).
    bus: T::Bus,
    /// The pages nobody uses.
    #[pin]
    free: SpinLock<FreeMap>,
    #[pin]
    data: T,
    /// `memremap_pages` succeeded.
    mapped: bool,
    #[pin]
    _pin: PhantomPinned,
}

// SAFETY: the C parts are only touched through the mm core's own locking;
// `T` is `Send + Sync`.
unsafe impl<T: PagemapOps> Send for Pagemap<T> {}
// SAFETY: see `Send`.
unsafe impl<T: PagemapOps> Sync for Pagemap<T> {}

/// The counts of a pagemap's free map, read at once ([`Pagemap::counts`]).
pub(crate) struct FreeCounts {
    /// Free pages.
    pub(crate) free: usize,
    /// Whole free 2 MiB blocks.
    pub(crate) free_blocks: usize,
    /// 2 MiB folios handed out that are still whole.
    pub(crate) whole: usize,
}

/// The `Pagemap` a page of one of ours belongs to.
///
/// # Safety
///
/// `page` must be a valid page of a `Pagemap<T>` that is alive.
unsafe fn owner_of<'a, T: PagemapOps>(page: *mut bindings::page) -> &'a Pagemap<T> {
    // SAFETY: `page` is a device page (caller), so it has a pagemap.
    let pgmap = unsafe { b::msvm_page_pgmap(page) };
    // SAFETY: the pagemap is the first field of a live `Pagemap<T>` (type
    // invariant, caller).
    unsafe { &*pgmap.cast::<Pagemap<T>>() }
}

impl<T: PagemapOps> Pagemap<T> {
    /// Creates a pagemap of `len` bytes (a multiple of [`PAGE_SIZE`]) whose
    /// owner (the `dev_private_owner` of HMM and migration) is `key`'s; `data`
    /// is built from the first page frame number of the map. All its pages
    /// are free; their struct pages are taken on `home`'s NUMA node (the
    /// device's). Page `i` of the map stands for page `i` of `bus`, if it
    /// is a range (of `len` bytes too: `EINVAL` otherwise): its owner finds
    /// the page there ([`Self::bus`]), and peers reach it over P2P
    /// (`WcBar::peer_route`).
    pub(crate) fn new<I: PinInit<T, Error>>(
        len: usize,
        key: &'static OwnerKey<T>,
        name: &'static CStr,
        home: Home,
        bus: T::Bus,
        data: impl FnOnce(usize) -> I,
    ) -> Result<Arc<Self>> {
        let owner = key.owner();
        if len == 0 || len % PAGE_SIZE != 0 || bus.range().is_some_and(|b| b.len() != len) {
            return Err(EINVAL);
        }
        let free = FreeMap::new(len / PAGE_SIZE)?;
        // SAFETY: `iomem_resource`, the root of the physical address space,
        // lives for good; `name` is a static NUL-terminated string (the
        // region keeps pointing to it).
        let res = unsafe {
            bindings::request_free_mem_region(
                &raw mut bindings::iomem_resource,
                len,
                name.as_char_ptr(),
            )
        };
        // Whatever the error (no free range, no memory): `ENOSPC`.
        let res = from_err_ptr(res)
            .ok()
            .and_then(NonNull::new)
            .ok_or(ENOSPC)?;
        // SAFETY: `res` is the region just reserved.
        let start = unsafe { (*res.as_ptr()).start };
        // CAST: a physical address (`u64`) fits in `usize` on 64-bit kernels.
        let start = start as usize;
        let first_pfn = start / PAGE_SIZE;
        let release = || {
            // SAFETY: the region is ours, just reserved, and not used by a
            // pagemap.
            unsafe { release_devmem(res) }
        };
        let mut map = UniqueArc::pin_init(
            try_pin_init!(Self {
                pgmap <- Opaque::ffi_init(|p: *mut bindings::dev_pagemap| {
                    // SAFETY: `p` is valid for writes; all-zeroes is a valid
                    // `dev_pagemap` before its fields are set.
                    unsafe {
                        core::ptr::write_bytes(p, 0, 1);
                        (*p).type_ = bindings::memory_type_MEMORY_DEVICE_PRIVATE;
                        (*p).nr_range = 1;
                        let range = (*p).__bindgen_anon_1.range.as_mut();
                        range.start = u64::from_safe_cast(start);
                        range.end = u64::from_safe_cast(start + len - 1);
                        (*p).ops = &OpsTable::<T>::OPS;
                        // INVARIANT: `key`'s owner, for this `Pagemap<T>`
                        // made with `key` (`OwnerKey`'s invariant).
                        (*p).owner = owner.as_ptr();
                    }
                }),
                // INVARIANT: reserved just above, and what `pgmap`'s range
                // covers; `drop` releases it.
                res,
                pfn_first: first_pfn,
                npages: len / PAGE_SIZE,
                // INVARIANT: `len` bytes (checked above).
                bus,
                // INVARIANT: no page of a new map is in use.
                free <- SpinLock::new(free, FREE_LOCK, kernel::static_lock_class!()),
                data <- data(first_pfn),
                // INVARIANT: not passed to `memremap_pages` yet.
                mapped: false,
                _pin: PhantomPinned,
            }? Error),
            GFP_KERNEL,
        )
        .inspect_err(|_| release())?;
        // From here on, dropping `map` releases the region.
        // SAFETY: `pgmap` is initialised above and pinned in the box; the
        // node id is an online node's, or `NUMA_NO_NODE`, which
        // `memremap_pages` takes as the local node (`Home`'s invariant).
        let ret = unsafe { bindings::memremap_pages(map.pgmap.get(), home.nid()) };
        from_err_ptr(ret)?;
        // SAFETY: setting a flag moves nothing out of the pinned box.
        // INVARIANT: `memremap_pages` just succeeded; `drop` undoes it.
        unsafe { map.as_mut().get_unchecked_mut() }.mapped = true;
        Ok(map.into())
    }

    /// The owner's data.
    pub(crate) fn data(&self) -> &T {
        &self.data
    }

    /// What the map's pages stand for on the bus, as it was made: for a
    /// range of a BAR, page `i` of the map is at BAR offset
    /// `bus().offset() + i * PAGE_SIZE`, and a peer reaches it at page `i`
    /// of the range (`WcBar::peer_route`).
    pub(crate) fn bus(&self) -> &T::Bus {
        &self.bus
    }

    /// Number of pages in the map.
    pub(crate) fn npages(&self) -> usize {
        self.npages
    }

    /// Pages in use now (allocated and not freed yet).
    pub(crate) fn used(&self) -> usize {
        self.npages - self.free.lock().nfree()
    }

    /// 2 MiB blocks of the map (the last may be shorter).
    pub(crate) fn nblocks(&self) -> usize {
        self.npages.div_ceil(BLOCK_PAGES)
    }

    /// Pages in use in 2 MiB block `b` (pages `b * BLOCK_PAGES..`), and
    /// whether the block is out whole as one large folio.
    pub(crate) fn block_use(&self, b: usize) -> (usize, bool) {
        let len = self.npages.saturating_sub(b * BLOCK_PAGES).min(BLOCK_PAGES);
        let free = self.free.lock();
        (len - free.block_free(b).min(len), free.is_whole(b))
    }

    /// Reserves 2 MiB block `b` of `map` (see [`FreeMap::reserve`]): while
    /// the returned guard lives, no page of it is handed out. `None` for a
    /// block out whole as one large folio (or reserved already).
    ///
    /// Allocation takes pages off the free map and prepares them (raises
    /// their count, locks them) in one call: a caller that reserves under
    /// the lock its allocations run under knows that no page of the block
    /// is half-prepared when the guard comes.
    pub(crate) fn reserve_block(map: &Arc<Self>, b: usize) -> Option<BlockReservation<T>> {
        map.free.lock().reserve(b).then(|| BlockReservation {
            map: map.clone(),
            b,
        })
    }

    /// The free map's counts, read at once.
    pub(crate) fn counts(&self) -> FreeCounts {
        let free = self.free.lock();
        FreeCounts {
            free: free.nfree(),
            free_blocks: free.nfree_blocks(),
            whole: free.nwhole(),
        }
    }

    /// Whether this map hands out 2 MiB folios ([`Pagemap::alloc_block`]):
    /// the kernel migrates them whole and the map's frames are aligned to
    /// them.
    pub(crate) fn holds_large(&self) -> bool {
        large_order() == BLOCK_PAGES.trailing_zeros() && self.pfn_first % BLOCK_PAGES == 0
    }

    /// Takes up to `want` free pages (at most the spare capacity of
    /// `scratch`, whose contents it replaces: allocated by the caller, so
    /// that nothing here allocates), each prepared as a migration
    /// destination (one reference, locked), and hands each to `out` with its
    /// index in the map: partly used 2 MiB blocks first. Returns how many.
    pub(crate) fn alloc_pages(
        &self,
        want: usize,
        scratch: &mut KVec<u32>,
        mut out: impl FnMut(usize, NewPage),
    ) -> usize {
        scratch.clear();
        // INVARIANT: each page taken off `free` becomes a `NewPage` just
        // below (`init_folio`).
        self.free.lock().take(want, scratch);
        // Off the spinlock: `init_folio` locks the page, which may sleep.
        for &i in scratch.iter() {
            let i = usize::from_safe_cast(i);
            // The page came off the free map.
            out(i, self.init_folio(i, 0));
        }
        scratch.len()
    }

    /// Takes a whole free 2 MiB block, if the map holds large folios and has
    /// one: its first page's index and the folio, prepared as a migration
    /// destination (one reference, locked).
    pub(crate) fn alloc_block(&self) -> Option<(usize, NewPage)> {
        if !self.holds_large() {
            return None;
        }
        // INVARIANT: the block taken off `free` becomes a `NewPage` just
        // below (`init_folio`).
        let i = self.free.lock().take_block()?;
        // The block came off the free map whole, and its first frame is
        // aligned (`holds_large`).
        Some((i, self.init_folio(i, large_order())))
    }

    /// The folio of `1 << order` pages starting at page `index` of the map,
    /// just taken off the free map, prepared for use as the destination of a
    /// migration (refcount one, locked). Whatever larger folio its pages
    /// belonged to before, they now belong to this one.
    ///
    /// Only for pages just taken off `free`, with `index` aligned to the
    /// folio size (the allocators above): private, so that nothing else can
    /// make a second folio of pages in use.
    fn init_folio(&self, index: usize, order: u32) -> NewPage {
        assert!(index + (1 << order) <= self.npages);
        // SAFETY: `index` is within the map, whose `struct page`s exist.
        let page = unsafe { PageRef::from_pfn(self.pfn_first + index) };
        // SAFETY: the pages were just taken off the free map: nobody uses
        // them (type invariant), and they are ours; `index` is aligned to
        // the folio size (callers); `pgmap` is their map.
        unsafe { b::msvm_zone_device_folio_init(page.as_ptr(), self.pgmap.get(), order) };
        // SAFETY: `zone_device_folio_init` gave the folio one reference and
        // locked it, for us (the pages were ours).
        unsafe { NewPage::from_locked(page.as_non_null()) }
    }

    /// Whether page `i` of the map is in use (off the free map).
    pub(crate) fn is_used(&self, i: usize) -> bool {
        i < self.npages && !self.free.lock().is_free(i)
    }

    /// Gives the map `key`'s owner from now on: HMM and migrations that ask
    /// for its old owner's pages no longer take its pages as theirs (a
    /// walk with the old owner faults them to system RAM; a migration
    /// skips them). A walk or migration under way may still have seen the
    /// old owner.
    pub(crate) fn rekey(&self, key: &'static OwnerKey<T>) {
        let owner = key.owner();
        // INVARIANT: `key` is an `OwnerKey<T>` and this map a `Pagemap<T>`:
        // every pagemap with `key`'s owner is still a `Pagemap<T>`.
        // SAFETY: `pgmap` is valid while `self` is. The owner is one
        // aligned word, written at once (`WRITE_ONCE`): the core's readers
        // (HMM, migration), which read it with plain loads, see the old
        // owner or the new one, never a mix (a data race in the memory
        // model, no undefined behaviour of the kernel's); what they do with
        // the old one is the caller's to handle.
        unsafe { core::ptr::write_volatile(&raw mut (*self.pgmap.get()).owner, owner.as_ptr()) };
    }

    /// The index in this map of `page`, if it is one of its pages.
    pub(crate) fn index_of(&self, page: PageRef<'_>) -> Option<usize> {
        let pfn = page.pfn();
        (pfn >= self.pfn_first && pfn < self.pfn_first + self.npages).then(|| pfn - self.pfn_first)
    }

    /// The bus-side address of `page`, one of this map's pages, that a
    /// peer maps for P2P access to it: page `i` of the map's range for page
    /// `i` of the map. `None` for a page of another map, or if the map
    /// stands for no range. Only for `WcBar::peer_route`, which checks the
    /// range against the live BAR it is a range of (and KUnit cases):
    /// nothing here knows whether the BAR is still there.
    ///
    /// # Safety
    ///
    /// The map's range, if it has one, lies in a BAR that is live for the
    /// call (a `WcBar` for which `BusRange::is_in` holds is borrowed), or
    /// stands for no device memory at all (a KUnit case's made-up range).
    pub(super) unsafe fn peer_addr<'a>(&self, page: PageRef<'a>) -> Option<PeerAddr<'a>> {
        let phys = self.bus.range()?.page_phys(self.index_of(page)?)?;
        // INVARIANT: page `i` of the map stands for page `i` of its range
        // (type invariant), at `phys`; the map lives while `page` is valid,
        // for `'a`.
        Some(PeerAddr {
            pfn: page.pfn(),
            phys,
            _page: PhantomData,
        })
    }
}

/// The bus-side address of a device page, as its map knows it: the CPU
/// physical address of page `i` of its map's range (`BusRange`) for page
/// `i` of the map, which a peer maps for P2P access (`super::p2p::PeerMap`,
/// a device page table's peer entries). Made only from the page
/// ([`Pagemap::peer_addr`]), by `WcBar::peer_route` while the BAR of the
/// map's range is live: a device that reaches the address reaches the
/// memory the page's owner finds at the same page of the range (its BAR
/// offset). A KUnit case's range stands for no BAR.
///
/// The BAR is live when the token is made; the token borrows the page,
/// not the BAR, which the BAR's device may release (its unbind) while the
/// token lives. What keeps the BAR in place afterwards, for as long as a
/// device uses a mapping of the address, is its owner's seal, before the
/// BAR goes: msvm's VRAM pool seals itself (`VramPool::seal_if_used`),
/// which waits for the peers' copy runs that read its VRAM (each counts
/// itself, `VramPool::p2p_reader`, before it takes the address:
/// `src/vram/blit.rs`) and has every device page table let go of its
/// pages (`PoolOps::sealed`); an eviction before then zaps a page's table
/// entries as the page leaves.
///
/// # Invariants
///
/// For `'a`, page frame `pfn` is page `i` of a live [`Pagemap`] whose
/// range's page `i` is at `phys`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PeerAddr<'a> {
    pfn: usize,
    phys: u64,
    _page: PhantomData<PageRef<'a>>,
}

impl PeerAddr<'_> {
    /// Whether this is `page`'s address (the one its map gives it).
    pub(super) fn is_of(&self, page: PageRef<'_>) -> bool {
        self.pfn == page.pfn()
    }

    /// The CPU physical address the page stands for on the bus.
    pub(super) fn phys(&self) -> u64 {
        self.phys
    }
}

/// A reserved 2 MiB block of a pagemap ([`Pagemap::reserve_block`]),
/// released on drop.
pub(crate) struct BlockReservation<T: PagemapOps> {
    map: Arc<Pagemap<T>>,
    b: usize,
}

impl<T: PagemapOps> BlockReservation<T> {
    /// The pagemap.
    pub(crate) fn map(&self) -> &Pagemap<T> {
        &self.map
    }
}

impl<T: PagemapOps> Drop for BlockReservation<T> {
    fn drop(&mut self) {
        self.map.free.lock().release(self.b);
    }
}

/// The `Pagemap<T>` that owns `page`, if `page` is a device-private page whose
/// map has `key`'s owner. The map lives as long as the page (`memunmap_pages`
/// waits for its pages).
pub(crate) fn map_of<'a, T: PagemapOps>(
    page: PageRef<'a>,
    key: &'static OwnerKey<T>,
) -> Option<&'a Pagemap<T>> {
    if !page.is_device_private() {
        return None;
    }
    // SAFETY: device-private pages have a pagemap.
    let pgmap = unsafe { b::msvm_page_pgmap(page.as_ptr()) };
    // SAFETY: `pgmap` is valid while the page is; its owner may change
    // ([`Pagemap::rekey`]): read at once (`READ_ONCE`).
    let map_owner = unsafe { core::ptr::read_volatile(&raw const (*pgmap).owner) };
    if map_owner != key.owner().as_ptr() {
        return None;
    }
    // SAFETY: every pagemap with `key`'s owner is a live `Pagemap<T>`
    // (`OwnerKey`'s invariant), alive while its page is.
    Some(unsafe { owner_of::<T>(page.as_ptr()) })
}

/// Gives back `res`, a region of the physical address space reserved by
/// `request_free_mem_region`, and frees it.
///
/// # Safety
///
/// `res` was returned by `request_free_mem_region`, is not released yet, and
/// nothing uses its range any more (no pagemap covers it).
unsafe fn release_devmem(res: NonNull<bindings::resource>) {
    let res = res.as_ptr();
    // SAFETY: `res` is a live region of `iomem_resource` (the caller's
    // contract), read before the call, which releases and frees it.
    unsafe { bindings::release_mem_region((*res).start, bindings::resource_size(res)) };
}

#[pinned_drop]
impl<T: PagemapOps> PinnedDrop for Pagemap<T> {
    fn drop(self: Pin<&mut Self>) {
        if self.mapped {
            // SAFETY: `pgmap` was mapped by `memremap_pages` (type invariant);
            // this waits until every page of it is free, then removes them.
            unsafe { bindings::memunmap_pages(self.pgmap.get()) };
        }
        // SAFETY: the region is ours (type invariant), released only here,
        // and no longer used by the map.
        unsafe { release_devmem(self.res) };
    }
}

mod kunit;
