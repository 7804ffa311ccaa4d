// SPDX-License-Identifier: GPL-2.0

//! Allocation: batches of device pages for a migration step, and the
//! pool's growth (chunks created before a step needs them).

use kernel::num::casts::FromSafeCast;
use kernel::prelude::*;
use kernel::sync::atomic::{Atomic, Relaxed};
use kernel::sync::Arc;

use crate::mm::cancel::{lock_killable, Cancel};
use crate::mm::dmem::PageCharges;
use crate::mm::page::{large_order, NewPage, BLOCK_PAGES, BLOCK_SIZE};
use crate::mm::pagemap::{Pagemap, PAGE_SIZE};
use crate::mm::trace;

use super::orphans::Orphan;
use super::records::Records;
use super::{Charges, Chunk, Payer, Slot, VramPool};

/// Device pages (or large folios) allocated for one migration step, with
/// their BAR offsets, handed out in order; those not taken are freed on
/// drop.
pub(crate) struct Batch {
    pages: KVec<Option<(NewPage, usize)>>,
    next: usize,
    /// Pages wanted beyond what the caller's dmem cgroup allows, not yet
    /// told ([`Batch::refused`]).
    refused: usize,
}

/// What [`VramPool::alloc_large`] found.
pub(crate) enum Large {
    /// A 2 MiB folio, charged.
    Folio(Batch),
    /// No free 2 MiB block (or the pool holds no 2 MiB folios).
    NoBlock,
    /// The payer's cgroup limit would not take 2 MiB more.
    Refused,
}

impl Batch {
    /// Whether a page the caller found no page for was one its cgroup's
    /// `dmem.max` refused (`true` as many times as it refused pages; the
    /// other missing ones are the device's lack of room).
    pub(crate) fn refused(&mut self) -> bool {
        let r = self.refused > 0;
        self.refused = self.refused.saturating_sub(1);
        r
    }

    /// The next page and its BAR offset, if any is left.
    pub(crate) fn take(&mut self) -> Option<(NewPage, usize)> {
        let p = self.pages.get_mut(self.next)?.take();
        self.next += 1;
        p
    }
}

/// Whether device memory takes 2 MiB folios whole (module parameter
/// `large_folios`, on a kernel that migrates such folios): off by default.
/// A PMD-mapped device folio is what Linux 7.3's `zap_huge_pmd()` bug
/// needs: collected with a PMD migration entry that a zap of another mm
/// can meet (before orphans, a device going away evicted such a folio by
/// frame; see `design.rst`). With 4 KiB device pages only, no device page
/// is ever mapped by a PMD. The parameter is
/// read at load only (it has no sysfs file), so every pool of the module
/// agrees: no peer hands over a 2 MiB device folio either.
pub(crate) fn large_folios() -> bool {
    crate::module_parameters::large_folios.value() != 0
        && large_order() == BLOCK_PAGES.trailing_zeros()
}

impl VramPool {
    /// Allocates up to `n` device pages, ready to be migration destinations
    /// (one reference, locked), from the chunks there are (see
    /// [`VramPool::grow`]). Takes each chunk's lock once for the whole
    /// batch. Returns fewer pages when the chunks are full, or when
    /// `payer`'s cgroup limit refuses more ([`Batch::refused`]).
    pub(crate) fn alloc(&self, n: usize, payer: Payer) -> Result<Batch> {
        // Charges for the pages the chunks have, at most: a full device
        // takes no charge it would undo at once.
        let free = Self::free_pages(&self.chunks.lock());
        let charges = self.charge_capped(n, free, payer)?;
        self.alloc_from(n, false, charges)
    }

    /// Whether this pool's chunks hold 2 MiB folios: whole 2 MiB blocks,
    /// with [`large_folios`] on.
    pub(crate) fn holds_large(&self) -> bool {
        self.chunk_size % BLOCK_SIZE == 0 && large_folios()
    }

    /// Allocates one large folio (2 MiB, a whole free block of a chunk),
    /// ready to be a migration destination (one reference, locked), if a
    /// chunk has a free block (and the pool holds large folios): else the
    /// caller moves the range in small pages. The folio is charged
    /// whole to `payer`, or not allocated if the cgroup's limit refuses
    /// that.
    pub(crate) fn alloc_large(&self, payer: Payer) -> Result<Large> {
        if !self.holds_large() {
            return Ok(Large::NoBlock);
        }
        let Some(charges) = self.charge_block(payer)? else {
            return Ok(Large::Refused);
        };
        let batch = self.alloc_from(1, true, charges)?;
        Ok(if batch.pages.is_empty() {
            Large::NoBlock
        } else {
            Large::Folio(batch)
        })
    }

    /// Makes `n` free pages (and, with `large`, a free 2 MiB block)
    /// available to [`VramPool::alloc`] and [`VramPool::alloc_large`],
    /// creating chunks (pagemaps) until they are or every chunk has one.
    /// Each pagemap is created with the table unlocked, its slot `Creating`
    /// meanwhile. Returns whether the pages (and block) are free now,
    /// whoever made them so; stops (and says no) on a fatal signal.
    ///
    /// Never call it with an mmap lock held (or under a lock taken under
    /// one, such as this pool's table): `memremap_pages` takes the CPU
    /// hotplug lock, which CPU hotplug holds while it creates sysfs
    /// directories, and a read of a sysfs directory takes `mmap_lock` (its
    /// first fault on the buffer) under kernfs's lock: a lock cycle.
    pub(crate) fn grow(&self, n: usize, large: bool) -> bool {
        let large = large && self.holds_large();
        // Room already (every step of a migration asks): no need to wait for
        // a grower.
        if Self::has_room(&self.chunks.lock(), n, large) {
            return true;
        }
        // One grower at a time: another one's chunk may be all this one
        // needs. A killed task does not wait for it.
        let Ok(_grower) = lock_killable(&self.grow_lock) else {
            return false;
        };
        let cancel = Cancel::task();
        loop {
            // Bounded by the chunks, but each creation takes a while: a
            // killed task creates no more.
            if cancel.check().is_err() {
                return false;
            }
            let c = {
                let mut chunks = self.chunks.lock();
                if Self::has_room(&chunks, n, large) {
                    return true;
                }
                match chunks.iter().position(|s| matches!(s, Slot::Absent)) {
                    Some(c) => {
                        chunks[c] = Slot::Creating;
                        c
                    }
                    // Every chunk holds pages: no room.
                    None if !chunks.iter().any(|s| matches!(s, Slot::Replicas)) => {
                        return false;
                    }
                    None => {
                        // Replicas go before any page has to: a replica
                        // chunk taken back, `Creating` for this grower.
                        drop(chunks);
                        match self.take_replica_chunk() {
                            Some(c) => c,
                            None => return false,
                        }
                    }
                }
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
                    trace::pagemap(self.index(), true, c, self.chunk_size);
                    if done {
                        return false;
                    }
                }
                // No pagemap now (no memory, no free physical range): as if
                // the device memory were full. `ENODEV` is the device going
                // (its pool shut down, its BAR sealed or revoked): no
                // warning, which would use up the one for a real failure.
                Err(e) => {
                    chunks[c] = Slot::Absent;
                    drop(chunks);
                    if e != ENODEV {
                        kernel::pr_warn_once!("msvm: chunk {c}: no pagemap: {e:?}\n");
                    }
                    return false;
                }
            }
        }
    }

    /// Whether the live chunks of `chunks` have `n` free pages (and, with
    /// `large`, a free 2 MiB block).
    fn has_room(chunks: &[Slot], n: usize, large: bool) -> bool {
        let live = || chunks.iter().filter_map(Slot::live);
        Self::free_pages(chunks) >= n
            && (!large || live().any(|m| m.data().large && m.counts().free_blocks > 0))
    }

    /// Free pages of the live chunks of `chunks`.
    fn free_pages(chunks: &[Slot]) -> usize {
        chunks
            .iter()
            .filter_map(Slot::live)
            .map(|m| m.counts().free)
            .sum()
    }

    /// Whether the pool could hold `n` more pages now: free pages of its live
    /// chunks plus the chunks it could still create.
    pub(crate) fn could_hold(&self, n: usize) -> bool {
        let chunks = self.chunks.lock();
        let free = Self::free_pages(&chunks);
        let absent = chunks
            .iter()
            .filter(|s| matches!(s, Slot::Absent | Slot::Replicas))
            .count();
        free + absent * (self.chunk_size / PAGE_SIZE) >= n
    }

    /// Whether [`VramPool::grow`] could create a chunk now (some chunk has
    /// no pagemap, or holds replicas it would take back).
    pub(crate) fn can_grow(&self) -> bool {
        let chunks = self.chunks.lock();
        chunks
            .iter()
            .any(|s| matches!(s, Slot::Absent | Slot::Replicas))
    }

    /// Allocates up to `n` pages (or, if `large`, `n` large folios) from
    /// live chunks, fullest first (so that data packs into few pagemaps).
    /// Each page takes one of `charges` (taken before, with the table
    /// unlocked: a charge may sleep); no more pages than they cover.
    pub(super) fn alloc_from(&self, n: usize, large: bool, mut charges: Charges) -> Result<Batch> {
        let n = charges.cover(n, if large { BLOCK_PAGES } else { 1 });
        // Pages go into the batch as they are taken: on any error, its drop
        // gives them back (and undoes their charges: they are the pages').
        let mut batch = Batch {
            pages: KVec::with_capacity(n, GFP_KERNEL)?,
            next: 0,
            refused: charges.refused(),
        };
        let mut charged = 0u64;
        let mut taken = KVec::with_capacity(n, GFP_KERNEL)?;
        let mut order = KVec::with_capacity(self.nchunks, GFP_KERNEL)?;
        let chunks = self.chunks.lock();
        for (c, slot) in chunks.iter().enumerate() {
            if let Some(m) = slot.live() {
                order
                    .push_within_capacity((m.used(), c))
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
            let base = Chunk::base(map);
            if large {
                while chunk.large && batch.pages.len() < n {
                    let Some((i, page)) = map.alloc_block() else {
                        break;
                    };
                    chunk.last_alloc.store(seq, Relaxed);
                    for k in 0..BLOCK_PAGES {
                        if let Some(charge) = charges.pop() {
                            charged += u64::from(charge.is_charged());
                            chunk.charges.put(i + k, charge);
                        }
                    }
                    // The batch has room for `n` entries.
                    let _ = batch
                        .pages
                        .push_within_capacity(Some((page, base + i * PAGE_SIZE)));
                    self.stats
                        .allocated
                        .add(u64::from_safe_cast(BLOCK_PAGES), Relaxed);
                }
                continue;
            }
            chunk.last_alloc.store(seq, Relaxed);
            let got = map.alloc_pages(want, &mut taken, |i, page| {
                if let Some(charge) = charges.pop() {
                    charged += u64::from(charge.is_charged());
                    chunk.charges.put(i, charge);
                }
                // The batch has room for `n` pages, and `want` is what is
                // left of them: this never fails.
                let _ = batch
                    .pages
                    .push_within_capacity(Some((page, base + i * PAGE_SIZE)));
            });
            self.stats.allocated.add(u64::from_safe_cast(got), Relaxed);
        }
        self.stats.cg_charged.add(charged, Relaxed);
        // Charges left over (no free page for them) are undone here.
        drop(charges);
        Ok(batch)
    }

    fn new_chunk(&self, c: usize) -> Result<Arc<Pagemap<Chunk>>> {
        let npages = self.chunk_size / PAGE_SIZE;
        // None after `shutdown`: no chunk then.
        let pool = self.me.lock().clone().ok_or(ENODEV)?;
        let charged = self.region.is_registered();
        // The BAR's range the chunk's pages stand for: where they are, for
        // this device's CPU side (`Chunk::base`) as for peers.
        let bus = self
            .bar()?
            .bus_range(self.chunk_offset(c), self.chunk_size)?;
        let serial = self.stats.chunks_created.load(Relaxed);
        Pagemap::new(
            self.chunk_size,
            self.key,
            c"msvm-vram",
            self.home,
            bus,
            |pfn_first| {
                // Large folios need the kernel's support, and frames (and BAR
                // offsets) aligned to them (the pagemap checks its frames again
                // when it hands one out).
                let large = large_folios()
                    && pfn_first % BLOCK_PAGES == 0
                    && bus.offset() % BLOCK_SIZE == 0;
                try_pin_init!(Chunk {
                pool,
                serial,
                large,
                last_alloc: Atomic::new(0),
                stuck_used: Atomic::new(0),
                records <- Records::new(npages),
                orphan <- Orphan::new(),
                // No slots without the controller: nothing to charge.
                charges: PageCharges::new(if charged { npages } else { 0 })?,
            }? Error)
            },
        )
    }
}
