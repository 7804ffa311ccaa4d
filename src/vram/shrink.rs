// SPDX-License-Identifier: GPL-2.0

//! Shrinking: idle chunks removed, light ones emptied into fuller ones
//! (the shrinker's work and debugfs), and the choice of the chunk to empty.

use kernel::num::casts::FromSafeCast;
use kernel::prelude::*;
use kernel::sync::{atomic::Relaxed, Arc};

use crate::mm::page::BLOCK_PAGES;
use crate::mm::pagemap::{Pagemap, PAGE_SIZE};
use crate::mm::trace;

use super::{teardown, Charges, Chunk, Slot, VramPool};

/// The removal of an idle chunk's pagemap (taken out of the table, the
/// slot `Dying`): dropping it removes the pagemap, then frees the slot.
struct ChunkTeardown {
    pool: Arc<VramPool>,
    c: usize,
    map: Option<Arc<Pagemap<Chunk>>>,
    freed: fn(usize),
}

impl Drop for ChunkTeardown {
    fn drop(&mut self) {
        // The last hold on the pagemap: `memunmap_pages`.
        drop(self.map.take());
        self.pool.torn_down(self.c, self.freed);
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
    /// A consolidation could not empty it, and no page of it was freed or
    /// handed out since (pages whose mm is busy or gone, or whose record
    /// is stale, see `evict.rs`): not a victim again until then, or until
    /// a pass finds no other.
    pub(crate) stuck: bool,
}

/// The chunk a consolidation pass empties next, and what it holds, among
/// the chunks `live` yields in chunk order (`None`: absent or not live):
/// the lightest used at most half full, the coldest of equals, holding no
/// large (2 MiB) folio, and only if the other live chunks have room for all
/// its pages (so emptying it frees a pagemap without taking a new one),
/// counting the blocks its pages break once the partly used blocks are
/// full. Allocates nothing, so that the shrinker may use it.
///
/// Large folios stay where they are: moving one means collecting it whole,
/// with PMD migration entries in every mm that maps it, and only the mm a
/// consolidation moves pages through is locked; Linux 7.3 mishandles a zap
/// of such an entry (see `crate::mm::migrate::device_folio_mapcount`). A
/// chunk a consolidation could not empty is not chosen again until its use
/// changes ([`ChunkInfo::stuck`]), so that the others get their turn.
pub(crate) fn choose_victim(
    live: impl Iterator<Item = Option<ChunkInfo>> + Clone,
    npages: usize,
) -> Option<(usize, ChunkInfo)> {
    let (v, info) = live
        .clone()
        .enumerate()
        .filter_map(|(i, c)| c.map(|c| (i, c)))
        .filter(|(_, c)| c.used > 0 && c.used <= npages / 2 && c.large == 0 && !c.stuck)
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

impl VramPool {
    /// The pagemap of chunk `c`, taken out of the table with the slot
    /// `Dying`, if it is idle (no page in use) and `Live` or `Draining`;
    /// `Draining` chunks that are not idle go back to `Live`.
    fn take_if_idle(&self, c: usize) -> Option<Arc<Pagemap<Chunk>>> {
        let mut chunks = self.chunks.lock();
        let idle = chunks[c].map().is_some_and(|m| m.used() == 0);
        match core::mem::replace(&mut chunks[c], Slot::Dying) {
            Slot::Live(m) | Slot::Draining(m) if idle => Some(m),
            Slot::Live(m) | Slot::Draining(m) => {
                chunks[c] = Slot::Live(m);
                None
            }
            other => {
                chunks[c] = other;
                None
            }
        }
    }

    /// Chunk `c`'s pagemap is gone (taken by [`VramPool::take_if_idle`]):
    /// its slot is free again; `freed` is told the struct-page bytes it
    /// gave back.
    fn torn_down(&self, c: usize, freed: fn(usize)) {
        self.chunks.lock()[c] = Slot::Absent;
        self.stats.chunks_destroyed.add(1, Relaxed);
        trace::pagemap(self.index(), false, c, self.chunk_size);
        self.stats
            .shrink_freed
            .add(u64::from_safe_cast(self.chunk_memmap_bytes()), Relaxed);
        freed(self.chunk_memmap_bytes());
    }

    /// Removes the pagemap of chunk `c` if it is idle (see
    /// [`VramPool::take_if_idle`]), with the table unlocked, the slot
    /// `Dying` meanwhile. Returns whether it was removed.
    pub(super) fn teardown_if_idle(&self, c: usize, freed: fn(usize)) -> bool {
        let Some(map) = self.take_if_idle(c) else {
            return false;
        };
        // Every page is free: this returns after `memunmap_pages`.
        drop(map);
        self.torn_down(c, freed);
        true
    }

    /// Removes the pagemaps of idle chunks, telling `freed` the struct-page
    /// bytes of each, side by side if `side_by_side` ([`super::teardown`]:
    /// their grace periods overlap), one after another in this task
    /// otherwise; each slot is free again as soon as its pagemap is gone.
    /// Returns how many.
    ///
    /// Side by side takes workers of the pool's queue, which may mean new
    /// kernel threads: not for a pass that runs because memory is short
    /// (a new thread's stack is an allocation that can wake the OOM killer
    /// just then, as the small-RAM guest's pressure test showed).
    ///
    /// The caller holds the pool by a handle of its own (a `PoolRef`), not
    /// only through a chunk: a worker may drop a chunk's hold on it last.
    pub(crate) fn trim_idle(&self, freed: fn(usize), side_by_side: bool) -> usize {
        let _pass = self.shrink_lock.lock();
        self.stats.shrink_scans.add(1, Relaxed);
        let idle = {
            let chunks = self.chunks.lock();
            let idle = chunks
                .iter()
                .filter(|s| s.map().is_some_and(|m| m.used() == 0));
            idle.count()
        };
        if idle == 0 {
            return 0;
        }
        // Memory for reclaim must not wait on reclaim: without the list,
        // one after another.
        let Ok(mut items) = KVec::with_capacity(idle, GFP_NOWAIT) else {
            let n = (0..self.nchunks)
                .filter(|&c| self.teardown_if_idle(c, freed))
                .count();
            self.trace_shrink(n, 0, 0);
            return n;
        };
        for c in 0..self.nchunks {
            if items.len() == idle {
                break;
            }
            if let Some(map) = self.take_if_idle(c) {
                let item = ChunkTeardown {
                    pool: map.data().pool.clone(),
                    c,
                    map: Some(map),
                    freed,
                };
                // Room for `idle` items.
                let _ = items.push_within_capacity(Some(item));
            }
        }
        let n = items.len();
        let workers = if side_by_side {
            n.saturating_sub(1).min(usize::from(teardown::WORKERS))
        } else {
            0
        };
        teardown::drop_all(self.teardown_queue.queue(), items, workers);
        self.trace_shrink(n, 0, 0);
        n
    }

    /// The `msvm_shrink` event of a pass that removed `chunks` pagemaps
    /// and moved `moved` pages into fuller chunks, `home` to system RAM.
    fn trace_shrink(&self, chunks: usize, moved: u64, home: u64) {
        let freed = u64::from_safe_cast(chunks * self.chunk_memmap_bytes());
        trace::shrink(
            self.index(),
            u64::from_safe_cast(chunks),
            moved,
            home,
            freed,
        );
    }

    /// Empties lightly used chunks into fuller ones ([`choose_victim`]) and
    /// removes their pagemaps, as long as that frees pagemaps, telling
    /// `freed` as [`VramPool::trim_idle`] does. Returns how many it removed.
    pub(crate) fn consolidate(&self, freed: fn(usize)) -> Result<usize> {
        let _pass = self.shrink_lock.lock();
        self.stats.shrink_scans.add(1, Relaxed);
        let npages = self.chunk_size / PAGE_SIZE;
        let mut removed = 0;
        let (mut moved, mut home) = (0, 0);
        let res = loop {
            // Choose and mark the victim.
            let (victim, info) = {
                let mut chunks = self.chunks.lock();
                let live = chunks.iter().map(|s| s.live().map(Chunk::info));
                let Some((v, info)) = choose_victim(live, npages) else {
                    // Nothing left to try: the chunks passed over are tried
                    // again by the next pass (a busy mmap lock, say, may be
                    // free by then).
                    for m in chunks.iter().filter_map(Slot::live) {
                        m.data().stuck_at(usize::MAX);
                    }
                    break Ok(());
                };
                match core::mem::replace(&mut chunks[v], Slot::Dying) {
                    Slot::Live(m) => chunks[v] = Slot::Draining(m),
                    other => {
                        chunks[v] = other;
                        break Ok(());
                    }
                }
                (v, info)
            };
            // Room in the other live chunks (never a new chunk) for its
            // pages, then move.
            let dest = self.alloc_from(info.used, false, Charges::none());
            let drained = dest.and_then(|dest| {
                // Only the holder of `shrink_lock`, this pass, takes a
                // `Draining` slot apart; the clone keeps the pagemap anyway.
                let map = self.chunks.lock()[victim].map().cloned().ok_or(ENOENT)?;
                self.drain(&map, Some(dest))
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
                    break Err(e);
                }
            };
            moved += u64::from_safe_cast(drained.moved);
            home += u64::from_safe_cast(drained.to_system);
            self.stats
                .shrink_moved
                .add(u64::from_safe_cast(drained.moved), Relaxed);
            self.stats
                .shrink_to_system
                .add(u64::from_safe_cast(drained.to_system), Relaxed);
            if !self.teardown_if_idle(victim, freed) {
                // Pages in use that would not move: not a victim again
                // until its use changes; the next pass takes another.
                if let Some(m) = self.chunks.lock()[victim].live() {
                    m.data().stuck_at(m.used());
                }
                break Ok(());
            }
            removed += 1;
        };
        self.trace_shrink(removed, moved, home);
        res.map(|()| removed)
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
            stuck: false,
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
    fn a_stuck_chunk_is_passed_over() {
        let mut stuck = c(10, 3);
        if let Some(s) = stuck.as_mut() {
            s.stuck = true;
        }
        let live = [c(80, 5), c(12, 9), stuck];
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
                stuck: false,
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
                    stuck: false,
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
