// SPDX-License-Identifier: GPL-2.0

//! A pool's 2 MiB device folios, moved home through the mapping their head
//! page's record names (`records.rs`: where the folio was migrated in, or
//! met since) before a device's eviction (making room does the same,
//! `room.rs`).

use kernel::prelude::*;

use crate::mm::cancel::Cancel;
use crate::mm::mmap::Wait;
use crate::mm::page::{BLOCK_PAGES, BLOCK_SIZE};

use super::{Chunk, Slot, VramPool};

impl VramPool {
    /// Moves this pool's 2 MiB folios to system RAM before eviction,
    /// through the mapping its head page's record names
    /// ([`super::records::Records::large_at`]: a move to system RAM of that 2 MiB block,
    /// access unchecked; under that mm's mmap write lock a folio mapped once
    /// moves whole, and one that fork relatives map too is split, every
    /// mm's PMD of it turned into page-table entries). A folio left becomes
    /// an orphan (`orphans.rs`), split when a CPU faults on it; nothing
    /// collects it by frame with PMD migration entries, which nothing would
    /// exclude zaps from (Linux 7.3's `zap_huge_pmd()` bug, see
    /// `crate::mm::migrate::device_folio_mapcount`). Only blocks out whole
    /// now are taken, and only the pages of the record's own block move (a
    /// record may be stale, and the address map a peer's pages by then),
    /// under that mm's mmap write lock taken killably. Best effort: a folio
    /// whose record is stale (remapped elsewhere, or mapped only by a fork
    /// child of an mm that has gone or unmapped it, and not met there
    /// since: see `mapped.rs`) is left to the eviction (and the orphanage);
    /// so is everything once the task is killed.
    pub(super) fn evict_large_folios(&self) {
        let mut todo = KVec::new();
        {
            let chunks = self.chunks.lock();
            let maps = || chunks.iter().filter_map(Slot::map);
            let n = maps()
                .filter(|m| m.data().large)
                .map(|m| m.npages() / BLOCK_PAGES)
                .sum();
            if todo.reserve(n, GFP_KERNEL).is_err() {
                return;
            }
            for m in maps().filter(|m| m.data().large) {
                let base = Chunk::base(m);
                for b in 0..m.npages() / BLOCK_PAGES {
                    // Only a block out whole now is worth the mm's write
                    // lock (its pages split go through their own records).
                    if !m.block_use(b).1 {
                        continue;
                    }
                    let Some((mm, addr)) = m.data().records.large_at(b * BLOCK_PAGES) else {
                        continue;
                    };
                    // Room for every block was reserved above.
                    let _ = todo.push_within_capacity((mm, addr, base + b * BLOCK_SIZE));
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
}
