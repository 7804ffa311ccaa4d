// SPDX-License-Identifier: GPL-2.0

//! A pool's 2 MiB device folios and the mappings they were migrated in at
//! ([`super::Chunk::mappings`]): noted by the migration that moves a folio
//! in, used to move the folios home through their mm before a device's
//! eviction (making room uses them too, `room.rs`).

use kernel::mm::Mm;
use kernel::prelude::*;
use kernel::sync::aref::ARef;

use crate::mm::cancel::Cancel;
use crate::mm::mmap::Wait;
use crate::mm::page::{PageRef, BLOCK_PAGES, BLOCK_SIZE};
use crate::mm::pagemap;

use super::{LargeMapping, Slot, VramPool};

impl VramPool {
    /// Moves this pool's 2 MiB folios to system RAM before eviction,
    /// through the mapping each was migrated in at (the mm and address in
    /// [`super::Chunk::mappings`]: a move to system RAM of that 2 MiB block,
    /// access unchecked; under that mm's mmap write lock a folio mapped once
    /// moves whole, and one that fork relatives map too is split, every
    /// mm's PMD of it turned into page-table entries). Eviction
    /// (`migrate_device_pfns`) would collect them whole with PMD migration
    /// entries in every mm that maps them, which nothing excludes zaps from
    /// (Linux 7.3's `zap_huge_pmd()` bug, see
    /// `crate::mm::migrate::device_folio_mapcount`). Only blocks out whole
    /// now are taken, and only the pages of the record's own block move (a
    /// record outlives its folio, and the address may map a peer's pages by
    /// then), under that mm's mmap write lock taken killably. Best effort: a folio whose record is stale
    /// (remapped elsewhere, or mapped only by a fork child of an mm that
    /// has gone) is left to the eviction; so is everything once the task
    /// is killed.
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
                let base = m.data().base;
                for (b, r) in m.data().mappings.lock().iter().enumerate() {
                    let Some(r) = r else { continue };
                    // A record outlives its folio: only a block out whole
                    // now is worth the mm's write lock (its pages small
                    // go through their own records).
                    if !m.block_use(b).1 {
                        continue;
                    }
                    // Room for every block was reserved above.
                    let _ =
                        todo.push_within_capacity((r.mm.clone(), r.addr, base + b * BLOCK_SIZE));
                }
            }
        }
        let cancel = Cancel::task();
        for (mm, addr, block) in todo {
            if cancel.check().is_err() {
                break;
            }
            let Some(mm) = mm.mmget_not_zero() else {
                continue;
            };
            // The block's pages it finds there now go to system RAM (or
            // stay, if they cannot move); a hole, another mapping or
            // another block's pages (a peer's, this device's) stay as they
            // are. The unbinding task waits for the mmap lock killably.
            let _ = self
                .ops
                .evict_folio(self, &mm, (addr, block), Wait::Always, &cancel);
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
}
