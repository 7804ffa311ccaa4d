// SPDX-License-Identifier: GPL-2.0

//! Making room on a full device (oversubscription): when a migration step
//! finds too few free pages and the pool cannot grow, whole 2 MiB blocks of
//! VRAM go to system RAM, chosen by the eviction policy (`lru.rs`), and the
//! step runs again. A working set larger than the device then runs to
//! completion with its hot part resident: what does not fit is used where
//! it is (system RAM by DMA).
//!
//! A block's 2 MiB folio moves through the mm and address its head page is
//! recorded at (as a device going away moves them, see
//! [`VramPool::evict_large_folios`]: only the block's own pages there, with
//! that mm's mmap write lock only tried unless it is the caller's own), and
//! only so: collecting it by its
//! frames would put PMD migration entries in every mm that maps it, which
//! nothing would keep zaps away from (Linux 7.3's `zap_huge_pmd()` bug).
//! Its small pages move through the mm and address each is recorded at
//! (`records.rs`, with that mm's mmap read lock held: never by their
//! frames) once the block is reserved ([`Pagemap::reserve_block`], under
//! the chunk table's lock, which allocations hold while they prepare
//! pages): no page of it is handed out meanwhile, half-prepared or whole,
//! and no 2 MiB folio can be in it. A block that is out whole after its mm
//! had its chance stays, and so does a page whose record is stale.
//!
//! It runs with no mmap lock held (the caller, `crate::migrate`'s device
//! step, runs between two tries of its step). It holds the pool's
//! `shrink_lock` while it picks a block and drains it (only trying the mmap
//! read lock of each mm the block's pages are recorded in: a busy mm's
//! pages stay, and the block with them; and allocating system pages
//! without waiting), so that no shrink
//! pass removes the chunk whose pagemap it holds (see the lock order in
//! `mod.rs`), but not while a 2 MiB folio moves through its mm: that step
//! may wait for system memory, which msvm's shrinker (whose passes take
//! `shrink_lock`) may be what frees. It lets go of the pagemap too, and
//! looks the chunk up again afterwards.

use kernel::mm::Mm;
use kernel::num::casts::FromSafeCast;
use kernel::sync::atomic::Relaxed;
use kernel::sync::Arc;

use crate::mm::cancel::{lock_killable, Cancel};
use crate::mm::dmem::Evictor;
use crate::mm::mmap::Wait;
use crate::mm::page::{BLOCK_PAGES, BLOCK_SIZE};
use crate::mm::pagemap::Pagemap;
use crate::mm::trace::{self, EvictReason};

use super::evict::Drain;
use super::lru::{choose, Choice, Policy, Use};
use super::{Chunk, Slot, VramPool};

/// Whether `evictor` may take the pages of 2 MiB block `b` of `map`, and
/// whether `dmem.low` alone kept them (see `PageCharges::evictable`).
fn block_evictable(map: &Pagemap<Chunk>, b: usize, evictor: Evictor<'_>) -> (bool, bool) {
    map.data()
        .charges
        .evictable(b * BLOCK_PAGES, BLOCK_PAGES, evictor)
}

/// The 2 MiB blocks of processes whose pages block `b` of `map` holds, as
/// its pages' records name them (the first [`OWNERS`]; an owner whose
/// pages then stay, busy or stale, leaves a shadow too): the process's id
/// (`crate::process`; a process without a VM has none) and an address in
/// the block. What an eviction of the block leaves shadows of
/// (`shadow.rs`).
fn owners(map: &Pagemap<Chunk>, b: usize) -> [Option<(u64, usize)>; OWNERS] {
    let records = &map.data().records;
    let mut found: [Option<(usize, usize)>; OWNERS] = [None; OWNERS];
    let mut n = 0;
    for i in b * BLOCK_PAGES..(b + 1) * BLOCK_PAGES {
        let Some(r) = records.get(i) else { continue };
        let k = (r.mm, r.addr / BLOCK_SIZE);
        if found[..n].contains(&Some(k)) {
            continue;
        }
        found[n] = Some(k);
        n += 1;
        if n == OWNERS {
            break;
        }
    }
    found.map(|k| {
        let (m, block) = k?;
        let mm = records.mm_at(m)?;
        let process = crate::process::of(&mm)?;
        Some((process.id(), block * BLOCK_SIZE))
    })
}

/// The blocks of processes an eviction leaves shadows of, at most.
const OWNERS: usize = 4;

/// A candidate's key: its chunk and block.
fn key(c: usize, b: usize) -> usize {
    (c << 16) | b
}

impl VramPool {
    /// Makes room for `pages` pages (a whole free 2 MiB block if `large`,
    /// and then only if fewer than `pages` pages are free) for request `u`,
    /// by the policy of module parameter `evict`: evicts blocks until that
    /// much is free, at most one block more than that takes, or until the
    /// policy has nothing more for this request. Returns whether it freed
    /// anything. Stops on `cancel`.
    ///
    /// Never call it with an mmap lock held: it takes the mmap lock of the
    /// mm a 2 MiB folio is recorded at.
    ///
    /// Blocks whose pages `dmem.min` protects stay, and those `dmem.low`
    /// protects too unless there is nothing else (the dmem controller's
    /// protection, from the root: a full device is everyone's limit).
    pub(crate) fn make_room(&self, pages: usize, large: bool, u: Use, cancel: &Cancel<'_>) -> bool {
        // A whole block for a 2 MiB folio when there are free pages enough:
        // the folio moves in small pages rather than push data out.
        if large && self.could_hold(pages) {
            return false;
        }
        self.evict_for(pages, large, u, Evictor::Full { ignore_low: false }, cancel)
    }

    /// Makes room for `pages` pages of the calling task's dmem cgroup, which
    /// is at its `dmem.max` for this device, among the pages charged inside
    /// the cgroup whose limit it hit: its own and its descendants' (and,
    /// when that limit is an ancestor's, those of the other cgroups under
    /// it, as TTM does), never any other cgroup's. A replica block charged
    /// inside that limit goes first, if there is one (`replicas.rs`:
    /// copies, dropped under any policy, whatever `dmem.low` says, as a
    /// full device takes replica chunks back before it evicts). Returns
    /// whether the cgroup may have room now (dropped or evicted something,
    /// or no longer at its limit).
    pub(crate) fn make_room_in_limit(&self, pages: usize, u: Use, cancel: &Cancel<'_>) -> bool {
        // The limiting pool, learnt by charging the pages (undone at once):
        // none if the cgroup has room for them again meanwhile.
        let limit = match self.limit_for(pages) {
            Ok(Some(l)) => l,
            Ok(None) => return true,
            Err(_) => return false,
        };
        let evictor = Evictor::Limit {
            pool: &limit,
            ignore_low: false,
        };
        if self.drop_replica_within(evictor.ignoring_low(), false) {
            return true;
        }
        if Policy::current() == Policy::Off {
            return false;
        }
        self.evict_for(pages, false, u, evictor, cancel)
    }

    /// Evicts blocks `evictor` may take until `pages` pages are free (see
    /// [`VramPool::make_room`]).
    fn evict_for(
        &self,
        pages: usize,
        large: bool,
        u: Use,
        evictor: Evictor<'_>,
        cancel: &Cancel<'_>,
    ) -> bool {
        let policy = Policy::current();
        if policy == Policy::Off {
            return false;
        }
        let mut freed = 0;
        // A block per 2 MiB wanted, and one more (a block that held fewer
        // pages than it had room for).
        for _ in 0..=pages.div_ceil(BLOCK_PAGES) {
            if freed >= pages || cancel.check().is_err() {
                break;
            }
            let Some((n, emptied)) = self.evict_one(policy, large, u, evictor, cancel) else {
                break;
            };
            freed += n;
            if large && emptied {
                break;
            }
        }
        freed > 0
    }

    /// Evicts the block the policy picks for request `u` (one that can hold
    /// a 2 MiB folio if `large`): the pages it freed and whether the block
    /// is empty now, or `None` if there was nothing to evict (or the task
    /// was killed).
    fn evict_one(
        &self,
        policy: Policy,
        large: bool,
        u: Use,
        evictor: Evictor<'_>,
        cancel: &Cancel<'_>,
    ) -> Option<(usize, bool)> {
        let mut pass = lock_killable(&self.shrink_lock).ok()?;
        let (c, mut map, b) = self.pick(policy, large, u, evictor)?;
        let index = self.block_of(&map, b);
        let (_, whole) = map.block_use(b);
        let owners = owners(&map, b);
        // Pages the folio's mm moved.
        let mut moved = 0;
        if whole {
            // Through the mm its head page's record names, if it still has
            // users; with neither the pagemap nor `shrink_lock` held.
            let mapping = map.data().records.large_at(b * BLOCK_PAGES);
            let serial = map.data().serial;
            let block = Chunk::base(&map) + b * BLOCK_SIZE;
            // Still pages `evictor` may take? The folio may have been freed
            // and the block given to another cgroup's since `pick`.
            let (ok, _) = block_evictable(&map, b, evictor.ignoring_low());
            drop(map);
            drop(pass);
            if !ok {
                return Some((0, false));
            }
            let Some((mm, _)) = mapping.as_ref() else {
                // Not recorded yet (its migration in has not finished, or
                // found no memory for the record): busy for this request.
                self.lru.busy(index, u.epoch);
                return Some((0, false));
            };
            let Some(mm) = mm.mmget_not_zero() else {
                // No mm reaches it any more: not again until it is freed
                // or recorded anew (a walk that renews it unsticks it;
                // one that came meanwhile is seen below).
                self.lru.stuck(index);
                if !self.recorded_in((c, serial), b, mm) {
                    self.lru.unstick(index);
                }
                return Some((0, false));
            };
            let addr = mapping.map_or(0, |(_, a)| a);
            // The block's pages there now go to system RAM (or stay):
            // best effort, as for a device going away, with the mmap lock
            // of that mm only tried if it is another tenant's.
            // The caller's own mm is waited for, killably (its own threads'
            // faults are bounded); another tenant's only tried.
            let own = kernel::current!()
                .mm()
                .is_some_and(|m| core::ptr::eq(m.as_raw(), mm.as_raw()));
            let wait = if own { Wait::Always } else { Wait::Never };
            moved = self
                .ops
                .evict_folio(self, &mm, (addr, block), wait, cancel)
                .unwrap_or(0);
            drop(mm);
            pass = lock_killable(&self.shrink_lock).ok()?;
            // The same chunk, if it is still there (a shrink pass may have
            // removed it meanwhile, emptied, and another taken its slot).
            let again = match self.chunks.lock().get(c) {
                Some(Slot::Live(m)) if m.data().serial == serial => Some(m.clone()),
                _ => None,
            };
            map = match again {
                Some(m) => m,
                None => {
                    if moved > 0 {
                        self.leave_shadows(&owners);
                    }
                    return Some((usize::try_from(moved).unwrap_or(0), false));
                }
            };
        }
        // Its small pages, the block reserved under the lock allocations
        // hold (refused while a 2 MiB folio is out whole in it: that stays).
        let (before, _) = map.block_use(b);
        // Reserved only if `evictor` may still take every page in it: an
        // allocation may have put pages of another cgroup in it since `pick`
        // (allocations charge their pages' slots under the table's lock; a
        // consolidation moves charges too, but it runs under `shrink_lock`,
        // which this holds).
        let reserved = {
            let _chunks = self.chunks.lock();
            let (ok, _) = block_evictable(&map, b, evictor.ignoring_low());
            if ok {
                Pagemap::reserve_block(&map, b)
            } else {
                None
            }
        };
        if let Some(r) = reserved {
            let first = b * BLOCK_PAGES;
            let _ = self.drain_range(
                r.map(),
                first,
                first + BLOCK_PAGES,
                None,
                Drain::Room,
                cancel,
            );
        }
        let (after, _) = map.block_use(b);
        let freed = before.saturating_sub(after) + usize::try_from(moved).unwrap_or(0);
        if after == 0 {
            self.lru.forget(index);
        } else if freed == 0 {
            // Nothing moved (busy pages, a folio its mm could not move now):
            // not again for this request, its class kept.
            self.lru.busy(index, u.epoch);
        }
        // The pagemap goes (if its chunk was removed meanwhile) under
        // `shrink_lock` only, as a shrink pass lets one go.
        drop(map);
        drop(pass);
        if freed > 0 {
            self.leave_shadows(&owners);
            let offset = self.chunk_offset(c) + b * BLOCK_SIZE;
            trace::evict(
                self.index(),
                EvictReason::Room,
                offset,
                u64::from_safe_cast(freed),
            );
            self.stats.room_blocks.add(1, Relaxed);
            self.stats
                .room_pages
                .add(u64::from_safe_cast(freed), Relaxed);
        }
        Some((freed, after == 0))
    }

    /// One block of the device was evicted, with pages of the process
    /// blocks `owners`: the eviction clock ticks, and each leaves a shadow.
    fn leave_shadows(&self, owners: &[Option<(u64, usize)>]) {
        let at = self.shadows.tick();
        for &(process, addr) in owners.iter().flatten() {
            self.shadows.evicted(process, addr, at);
        }
    }

    /// Whether a step that found no free 2 MiB block for a whole folio may
    /// get one by [`VramPool::make_room`]: the policy is on and the device
    /// has fewer free pages than a block.
    pub(crate) fn may_make_room_for_block(&self) -> bool {
        Policy::current() != Policy::Off && !self.could_hold(BLOCK_PAGES)
    }

    /// The policy's choice for request `u` among the blocks of the live
    /// chunks that hold pages in use (only blocks that can hold a 2 MiB
    /// folio, if `large`) and that `evictor` may take (those only
    /// `dmem.low` protects, if there is nothing else): the chunk, its
    /// pagemap and the block to evict, or `None` (nothing for this request,
    /// or a block demoted instead).
    fn pick(
        &self,
        policy: Policy,
        large: bool,
        u: Use,
        evictor: Evictor<'_>,
    ) -> Option<(usize, Arc<Pagemap<Chunk>>, usize)> {
        let chunks = self.chunks.lock();
        let hit_low = core::cell::Cell::new(false);
        let choice = self
            .choose_in(&chunks, policy, large, u, evictor, &hit_low)
            .or_else(|| {
                hit_low
                    .get()
                    .then(|| {
                        self.choose_in(&chunks, policy, large, u, evictor.ignoring_low(), &hit_low)
                    })
                    .flatten()
            });
        let (k, evict) = match choice? {
            Choice::Evict(k) => (k, true),
            Choice::Demote(k) => (k, false),
        };
        let (c, b) = (k >> 16, k & 0xffff);
        let Some(Slot::Live(map)) = chunks.get(c) else {
            return None;
        };
        if !evict {
            self.lru.demote(self.block_of(map, b), u.epoch);
            self.stats.room_demoted.add(1, Relaxed);
            return None;
        }
        Some((c, map.clone(), b))
    }

    /// The policy's choice among the blocks of `chunks` that `evictor` may
    /// take (see [`VramPool::pick`]); `hit_low` is set if `dmem.low` alone
    /// kept one.
    fn choose_in(
        &self,
        chunks: &[Slot],
        policy: Policy,
        large: bool,
        u: Use,
        evictor: Evictor<'_>,
        hit_low: &core::cell::Cell<bool>,
    ) -> Option<Choice> {
        let blocks = chunks.iter().enumerate().flat_map(|(c, slot)| {
            let map = slot.live().filter(|m| !large || m.data().large);
            // Whole blocks only, if `large` (a short last one holds none).
            let nblocks = map.map_or(0, |m| {
                if large {
                    m.npages() / BLOCK_PAGES
                } else {
                    m.nblocks()
                }
            });
            (0..nblocks).filter_map(move |b| {
                let m = map?;
                let (used, _) = m.block_use(b);
                let rec = self.lru.get(self.block_of(m, b));
                // The controller is asked only of blocks the policy could
                // take: it walks the cgroup tree for each.
                if used == 0 || !rec.candidate(u.epoch) {
                    return None;
                }
                let (ok, low) = block_evictable(m, b, evictor);
                hit_low.set(hit_low.get() || low);
                ok.then_some((key(c, b), rec))
            })
        });
        choose(policy, blocks, u)
    }

    /// Whether block `b` of chunk `c` (if it is still the pagemap of that
    /// `serial`) has its head page recorded in `mm` (a walk may renew it).
    fn recorded_in(&self, (c, serial): (usize, u64), b: usize, mm: &Mm) -> bool {
        match self.chunks.lock().get(c) {
            Some(Slot::Live(m)) if m.data().serial == serial => m
                .data()
                .records
                .large_at(b * BLOCK_PAGES)
                .is_some_and(|(x, _)| core::ptr::eq(&*x, mm)),
            _ => true,
        }
    }

    /// The index in the use table of block `b` of chunk `map`.
    pub(super) fn block_of(&self, map: &Pagemap<Chunk>, b: usize) -> usize {
        self.block_index(Chunk::base(map) + b * BLOCK_SIZE)
    }
}
