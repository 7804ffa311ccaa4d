// SPDX-License-Identifier: GPL-2.0

//! Eviction: every page of a chunk to system RAM (or into other chunks, for
//! a consolidation), 2 MiB folios first through the mms that map them.

use kernel::mm::Mm;
use kernel::num::casts::FromSafeCast;
use kernel::prelude::*;
use kernel::sync::aref::ARef;
use kernel::sync::atomic::Relaxed;

use crate::mm::cancel::Cancel;
use crate::mm::migrate::DeviceMigration;
use crate::mm::page::{NewPage, PageRef, BLOCK_PAGES, BLOCK_SIZE};
use crate::mm::pagemap::{self, Pagemap, PAGE_SIZE};
use crate::mm::trace::{self, EvictReason};

use super::{charges_of, Batch, Chunk, LargeMapping, Slot, VramPool};

/// What a drain moves to system RAM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Drain {
    /// Everything, 2 MiB folios too, waiting for system memory as long as
    /// it takes: the data has nowhere else to go (a device going away).
    All,
    /// Small pages only, as system memory comes without waiting: an
    /// eviction that may fail (making room, see `room.rs`). The caller
    /// makes sure no 2 MiB folio is in the range (a reserved block).
    Room,
}

/// What draining a chunk did, in pages.
#[derive(Default, Debug)]
pub(super) struct Drained {
    /// Moved to other chunks of the pool.
    pub(super) moved: usize,
    /// Sent to system RAM.
    pub(super) to_system: usize,
    /// In use, but would not move.
    pub(super) stuck: usize,
}

impl VramPool {
    /// Moves every page of chunk `map` that is in use back to system RAM.
    /// Returns how many pages are still in use afterwards (locked by a
    /// migration in flight, say, which `migrate_device_range` skips without
    /// a word, or a 2 MiB folio without a 2 MiB system folio to go to).
    fn evict(&self, map: &Pagemap<Chunk>) -> Result<usize> {
        let d = self.drain(map, None)?;
        self.stats
            .evicted
            .add(u64::from_safe_cast(d.to_system), Relaxed);
        Ok(map.used())
    }

    /// Moves every page of chunk `map` that is in use into the pages of
    /// `batch` (other chunks of this pool: device to device, BAR to BAR;
    /// large folios stay, see [`super::choose_victim`]) or, without a batch, to
    /// system RAM.
    pub(super) fn drain(&self, map: &Pagemap<Chunk>, batch: Option<Batch>) -> Result<Drained> {
        self.drain_range(map, 0, map.npages(), batch, Drain::All)
    }

    /// [`VramPool::drain`] of pages `[start, end)` of chunk `map` only, the
    /// way `how` says.
    pub(super) fn drain_range(
        &self,
        map: &Pagemap<Chunk>,
        start: usize,
        end: usize,
        mut batch: Option<Batch>,
        how: Drain,
    ) -> Result<Drained> {
        // Consolidation (a batch) only packs pages into other chunks: under
        // the memory pressure that asked for it, sending pages to system RAM
        // would take RAM. Eviction (no batch) sends them there, whatever it
        // costs.
        let to_system_ok = batch.is_none();
        let base = map.data().base;
        let mut d = Drained::default();
        // The stage of BAR to BAR copies, only for a consolidation.
        let mut stage = match batch {
            Some(_) => Some(KBox::new([0u8; PAGE_SIZE], GFP_KERNEL)?),
            None => None,
        };
        // One page table's worth of frames at a time: small arrays, and
        // pages locked for a short while.
        let mut first = start;
        let end = end.min(map.npages());
        while first < end {
            let n = (end - first).min(BLOCK_PAGES);
            let mut mig = map.device_migration(first, n)?;
            // What each filled entry became (moved: true, or sent to system
            // RAM),
            // and how many pages it stands for.
            let mut filled = [None; BLOCK_PAGES];
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
                    // eviction moves it, to system RAM.
                    *f = if to_system_ok && how == Drain::All {
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
                    {
                        // A batch came with its stage.
                        let stage = stage.as_deref_mut().ok_or(EINVAL)?;
                        let bar = self.bar()?;
                        bar.copy_from_bar(off, &bar, from, stage)?;
                    }
                    mig.set_dst(i, dpage, src.write())?;
                    *f = Some((true, 1));
                    continue;
                }
                // `must` waits for memory rather than fail: the data has
                // nowhere else to go; making room only takes what comes.
                let dst = match (to_system_ok, how) {
                    (false, _) => None,
                    (true, Drain::All) => NewPage::must(),
                    (true, Drain::Room) => NewPage::try_movable(),
                };
                let Some(dst) = dst else {
                    d.stuck += 1;
                    continue;
                };
                self.bar()?.copy_to_page(from, &dst, 0)?;
                mig.set_dst(i, dst, src.write())?;
                *f = Some((false, 1));
            }
            mig.pages();
            // The core may still back out of a page (an unexpected
            // reference): it stays in use here.
            for (i, f) in filled.iter().enumerate().take(n) {
                match (*f, mig.src(i).migrate()) {
                    (Some((_, nr)), false) => d.stuck += nr,
                    (Some((true, nr)), true) => {
                        // The charge follows the page into the other chunk,
                        // before the old page is freed (at finalize).
                        let dst = mig.dst_page(i).and_then(|p| charges_of(p, self.key));
                        if let Some((to, j)) = dst {
                            if let Some(c) = map.data().charges.take(first + i) {
                                to.put(j, c);
                            }
                        }
                        d.moved += nr;
                    }
                    (Some((false, nr)), true) => {
                        d.to_system += nr;
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
        self.stats
            .to_system
            .add(u64::from_safe_cast(d.to_system), Relaxed);
        Ok(d)
    }

    /// Gives the large folio of source entry `i` of `mig` (at BAR offset
    /// `from`) a 2 MiB system folio and copies it there. Returns whether it
    /// found one (eviction retries otherwise).
    fn evict_large(&self, mig: &mut DeviceMigration<'_>, i: usize, from: usize) -> Result<bool> {
        let Some(dst) = crate::sysmem::large_system_folio_evict() else {
            return Ok(false);
        };
        self.copy_to_folio(from, &dst, BLOCK_PAGES)?;
        let write = mig.src(i).write();
        mig.set_dst(i, dst, write)?;
        Ok(true)
    }

    /// Moves this pool's 2 MiB folios to system RAM before eviction,
    /// through the mapping each was migrated in at (the mm and address in
    /// [`super::Chunk::mappings`]: a move to system RAM of that 2 MiB block,
    /// access unchecked; under that mm's mmap write lock a folio mapped once
    /// moves whole, and one that fork relatives map too is split, every
    /// mm's PMD of it turned into page-table entries). Eviction
    /// (`migrate_device_range`) would collect them whole with PMD migration
    /// entries in every mm that maps them, which nothing excludes zaps from
    /// (Linux 7.3's `zap_huge_pmd()` bug, see
    /// `crate::mm::migrate::device_folio_mapcount`). Best effort: a folio
    /// whose record is stale (remapped elsewhere, or mapped only by a fork
    /// child of an mm that has gone) is left to the eviction; so is
    /// everything once the task is killed.
    pub(super) fn evict_large_folios(&self) {
        let mut todo = KVec::new();
        {
            let chunks = self.chunks.lock();
            let maps = || chunks.iter().filter_map(Slot::map);
            let n = maps().map(|m| m.data().mappings.lock().len()).sum();
            if todo.reserve(n, GFP_KERNEL).is_err() {
                return;
            }
            for m in maps() {
                for r in m.data().mappings.lock().iter().flatten() {
                    // Room for every block was reserved above.
                    let _ = todo.push_within_capacity((r.mm.clone(), r.addr));
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
            // Whatever it finds there now: a hole, another mapping, or
            // pages of this group that are not that folio any more all
            // just go to system RAM (or stay, if they cannot move).
            let _ = self.ops.evict_range(self, &mm, addr, BLOCK_SIZE, &cancel);
        }
    }

    /// Notes that `page`, the head of a 2 MiB folio of this pool, was just
    /// migrated in at `addr` of `mm` (see [`super::Chunk::mappings`]).
    pub(crate) fn note_large_mapping(&self, page: PageRef<'_>, mm: &Mm, addr: usize) {
        let Some(map) = pagemap::map_of(page, self.key) else {
            return;
        };
        let Some(i) = map.index_of(page) else {
            return;
        };
        let mapping = LargeMapping {
            mm: ARef::from(mm),
            addr,
        };
        // The old record goes with the lock let go (it may drop an mm).
        let _old = map
            .data()
            .mappings
            .lock()
            .get_mut(i / BLOCK_PAGES)
            .and_then(|m| m.replace(mapping));
    }

    /// Evicts chunk `c` until no page of it is in use, retrying with
    /// backoff (1 ms doubling to 100 ms) while pages are busy or a 2 MiB
    /// folio finds no 2 MiB of RAM, and saying so every 100 passes. It
    /// does not give up: the pagemap's teardown would wait for those pages
    /// anyway, and a retry may yet move them.
    pub(super) fn evict_all(&self, c: usize, map: &Pagemap<Chunk>) {
        let mut wait_ms = 1;
        let mut pass = 0u64;
        let used = u64::from_safe_cast(map.used());
        loop {
            match self.evict(map) {
                Ok(0) => {
                    if used > 0 {
                        let offset = c * self.chunk_size;
                        trace::evict(self.index(), EvictReason::Teardown, offset, used);
                    }
                    return;
                }
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
