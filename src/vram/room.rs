// SPDX-License-Identifier: GPL-2.0

//! Making room on a full device (oversubscription): when a migration step
//! finds too few free pages and the pool cannot grow, whole 2 MiB blocks of
//! VRAM go to system RAM, chosen by the eviction policy (`lru.rs`), and the
//! step runs again. A working set larger than the device then runs to
//! completion with its hot part resident: what does not fit is used where
//! it is (system RAM by DMA).
//!
//! A block's 2 MiB folio moves through the mm and address it was migrated in
//! at (as a device going away moves them, see
//! [`VramPool::evict_large_folios`]); its small pages move by their frames
//! (`migrate_device_range`). Both with no lock of the pool held, and no mmap
//! lock: the caller (`crate::migrate`'s device step) runs between two tries
//! of its step.

use kernel::num::casts::FromSafeCast;
use kernel::sync::atomic::Relaxed;
use kernel::sync::Arc;

use crate::mm::cancel::Cancel;
use crate::mm::page::{BLOCK_PAGES, BLOCK_SIZE};
use crate::mm::pagemap::Pagemap;

use super::lru::{choose, Choice, Policy, Use};
use super::{Chunk, Slot, VramPool};

/// What the policy picked.
enum Picked {
    /// Evict block `.1` of this chunk.
    Evict(Arc<Pagemap<Chunk>>, usize),
    /// It demoted a block: nothing to evict for now.
    Demoted,
    /// Nothing the request may evict.
    Nothing,
}

/// A candidate's key: its chunk and block.
fn key(c: usize, b: usize) -> usize {
    (c << 16) | b
}

impl VramPool {
    /// Makes room for `pages` pages (a whole free 2 MiB block if `large`,
    /// only if fewer than `pages` pages are free) for request `u`, by the
    /// policy of module parameter `evict`: evicts blocks until that much is
    /// free, at most one block more than that takes, or until the policy
    /// has nothing more for this request. Returns whether it freed anything.
    /// Stops on `cancel`.
    ///
    /// Never call it with an mmap lock held: it takes the mmap lock of the
    /// mm a 2 MiB folio was migrated in at.
    pub(crate) fn make_room(&self, pages: usize, large: bool, u: Use, cancel: &Cancel<'_>) -> bool {
        let policy = Policy::current();
        // A whole block for a 2 MiB folio when there are free pages enough:
        // the folio moves in small pages rather than push data out.
        if policy == Policy::Off || (large && self.could_hold(pages)) {
            return false;
        }
        let mut freed = 0;
        // A block per 2 MiB wanted, and one more (a block that held fewer
        // pages than it had room for).
        for _ in 0..=pages.div_ceil(BLOCK_PAGES) {
            if freed >= pages || cancel.check().is_err() {
                break;
            }
            let Picked::Evict(map, b) = self.pick(policy, u) else {
                break;
            };
            let (n, emptied) = self.evict_block(&map, b, cancel);
            if n == 0 {
                // Nothing would move (busy pages, a 2 MiB folio whose mm
                // has gone): not this block again for this request.
                self.lru.demote(Self::block_of(&map, b), u.epoch);
            }
            // The pagemap goes (if its chunk was torn down meanwhile) with
            // no lock held.
            drop(map);
            freed += n;
            if large && emptied {
                break;
            }
        }
        freed > 0
    }

    /// The policy's choice for request `u` among the blocks of the live
    /// chunks that hold pages in use.
    fn pick(&self, policy: Policy, u: Use) -> Picked {
        let chunks = self.chunks.lock();
        let lru = &self.lru;
        let blocks = chunks.iter().enumerate().flat_map(|(c, slot)| {
            let map = slot.live();
            let nblocks = map.map_or(0, |m| m.nblocks());
            (0..nblocks).filter_map(move |b| {
                let m = map?;
                let (used, _) = m.block_use(b);
                (used > 0).then(|| (key(c, b), lru.get(Self::block_of(m, b))))
            })
        });
        let (c, b, evict) = match choose(policy, blocks, u.epoch) {
            None => return Picked::Nothing,
            Some(Choice::Evict(k)) => (k >> 16, k & 0xffff, true),
            Some(Choice::Demote(k)) => (k >> 16, k & 0xffff, false),
        };
        let Some(Slot::Live(map)) = chunks.get(c) else {
            return Picked::Nothing;
        };
        if evict {
            Picked::Evict(map.clone(), b)
        } else {
            lru.demote(Self::block_of(map, b), u.epoch);
            self.stats.room_demoted.add(1, Relaxed);
            Picked::Demoted
        }
    }

    /// The index in the use table of block `b` of chunk `map`.
    fn block_of(map: &Pagemap<Chunk>, b: usize) -> usize {
        (map.data().base + b * BLOCK_SIZE) / BLOCK_SIZE
    }

    /// Sends the pages in use in block `b` of chunk `map` to system RAM.
    /// Returns how many pages it freed, and whether the block is empty now.
    fn evict_block(&self, map: &Pagemap<Chunk>, b: usize, cancel: &Cancel<'_>) -> (usize, bool) {
        let (before, whole) = map.block_use(b);
        if whole {
            // The record of where it was migrated in; the mm it names, if
            // it still has users.
            let mapping = map
                .data()
                .mappings
                .lock()
                .get(b)
                .and_then(|m| m.as_ref().map(|r| (r.mm.clone(), r.addr)));
            if let Some((mm, addr)) = mapping {
                if let Some(mm) = mm.mmget_not_zero() {
                    // Whatever is there now goes to system RAM (or stays):
                    // best effort, as for a device going away.
                    let _ = self.ops.evict_range(self, &mm, addr, BLOCK_SIZE, cancel);
                }
            }
        }
        let first = b * BLOCK_PAGES;
        // Its small pages (and a 2 MiB folio that did not move above
        // stays: only its mm can move it safely).
        let _ = self.drain_range(map, first, first + BLOCK_PAGES, None, false);
        let (after, _) = map.block_use(b);
        if after == 0 {
            self.lru.forget(Self::block_of(map, b));
        }
        let freed = before.saturating_sub(after);
        if freed > 0 {
            self.stats.room_blocks.add(1, Relaxed);
            self.stats
                .room_pages
                .add(u64::from_safe_cast(freed), Relaxed);
        }
        (freed, after == 0)
    }
}
