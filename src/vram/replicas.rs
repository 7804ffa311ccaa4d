// SPDX-License-Identifier: GPL-2.0

//! Read-only replicas, in this device's VRAM, of the system pages its jobs
//! read in read-mostly ranges (`Documentation/placement.rst`).
//!
//! Replicas live in chunk slots given over to them ([`Slot::Replicas`]: no
//! pagemap, no struct pages), in 2 MiB *replica blocks*: a block holds the
//! replicas of one 2 MiB block of one process, page `i` in its frame `i`,
//! with the generation of the process's block they were copied at
//! ([`crate::generation`]) and which of them are copied. A replica is used
//! only while that generation holds; a stale block is copied again, in
//! place, when a job next reads it (the data of one process's block
//! replaces older data of the same block: a job still reading it sees each
//! word old or new).
//!
//! A replica block is VRAM its process holds: it is charged whole (2 MiB)
//! to the dmem cgroup of the job that took it for its process's block
//! ([`VramPool::replica_room`] charges before the job takes the block), and
//! uncharged when it is taken from that block (dropped for room, forgotten
//! with its VM, given back): `dmem.max` caps a tenant's replicas with its
//! pages. A cgroup at its limit gives up a stale replica charged inside
//! that limit (its own, or a sibling's under an ancestor's limit) for a
//! new one, else its job reads in place; a migration at the limit takes
//! such a replica before any page ([`VramPool::drop_replica_within`]).
//!
//! A block is given to another process's block only a grace period after
//! it was taken from its last one (SRCU: a job reads replicas inside a
//! read-side section, [`VramPool::replica_reader`]), so no job ever reads
//! another process's data. Replicas are clean: they are dropped, never
//! moved. The pool takes a replica chunk back before it would evict a page
//! ([`VramPool::grow`]), a shrink pass drops them all first, and so does
//! the pool's teardown.
//!
//! # Lock order
//!
//! `Replicas::reclaim` (held across grace periods) -> the pool's
//! `shrink_lock` (an idle chunk's pagemap removed for replicas; it and the
//! pool's `grow_lock` are only tried, never waited for) -> the chunk table,
//! and `Replicas::reclaim` -> `Replicas::store`; the mirror lock (a job's window) ->
//! `Replicas::store`. The chunk table and the store are never held
//! together; nothing allocates under the store (its table has room for
//! every block of the BAR from the start), nothing waits for a grace
//! period under the store or the chunk table. Charges are undone under the
//! store (and so under the mirror lock, in a job's window): uncharging
//! neither sleeps nor allocates.

use kernel::new_srcu;
use kernel::num::casts::FromSafeCast;
use kernel::prelude::*;
use kernel::sync::atomic::Relaxed;
use kernel::sync::{new_mutex, Mutex, MutexGuard, Srcu};

use crate::mm::cancel::lock_killable;
use crate::mm::page::{PageRef, BLOCK_PAGES, BLOCK_SIZE};
use crate::mm::pagemap::PAGE_SIZE;

use crate::mm::dmem::{BlockCharge, Evictor, Refusal};

use super::{Slot, VramPool};

/// What one replica block holds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    /// Nothing: any process's block may take it.
    Free,
    /// The replicas of the block at `addr` of the mm at `mm`.
    Used {
        mm: usize,
        addr: usize,
        /// The block's generation they were copied at.
        generation: u64,
        /// Which pages are copied (bit `i`: page `i`).
        copied: [u64; BLOCK_PAGES / 64],
        /// The store's clock when a job last read it.
        used: u64,
    },
    /// Taken from its block, waiting for a grace period before another
    /// block may take it.
    Pending,
    /// Its chunk goes back to the pool once a grace period has passed.
    Gone,
}

/// One replica block: 2 MiB of a replica chunk.
struct Block {
    /// BAR offset of its first frame.
    offset: usize,
    /// The chunk slot it lies in.
    chunk: usize,
    state: State,
    /// Its charge while `Used`.
    charge: Option<BlockCharge>,
}

/// A block's dmem charge, taken for a job by [`VramPool::replica_room`]
/// before it may take a free block ([`VramPool::replica_window`]); undone
/// on drop if no block took it.
pub(crate) struct ReplicaCharge(Option<BlockCharge>);

/// Pages a block's charge counts in STATS `cgroup_bytes`.
fn charged_pages(c: &BlockCharge) -> u64 {
    if c.is_charged() {
        u64::from_safe_cast(BLOCK_PAGES)
    } else {
        0
    }
}

/// The replica blocks of a pool.
pub(crate) struct Store {
    /// Room for every block of the BAR, reserved when the pool is created.
    blocks: KVVec<Block>,
    /// Counts reads, for the least recently used block.
    clock: u64,
}

/// A pool's replicas: the store and the grace periods of its readers.
#[pin_data]
pub(crate) struct Replicas {
    #[pin]
    store: Mutex<Store>,
    /// Serialises the moves out of `Pending` and `Gone`, each after a grace
    /// period that began after every block it frees was marked; held
    /// across the grace period.
    #[pin]
    reclaim: Mutex<()>,
    #[pin]
    srcu: Srcu,
}

impl Replicas {
    /// Replicas for a pool of `nchunks` chunks of `chunk_size` bytes.
    pub(super) fn new(nchunks: usize, chunk_size: usize) -> Result<impl PinInit<Self, Error>> {
        let blocks = KVVec::with_capacity(nchunks * (chunk_size / BLOCK_SIZE), GFP_KERNEL)?;
        Ok(try_pin_init!(Self {
            store <- new_mutex!(Store { blocks, clock: 0 }),
            reclaim <- new_mutex!(()),
            srcu <- new_srcu!(),
        }? Error))
    }
}

/// Whether `s` holds the block at `addr` of the mm at `mm`.
fn holds(s: &State, mm: usize, addr: usize) -> bool {
    matches!(*s, State::Used { mm: m, addr: a, .. } if m == mm && a == addr)
}

/// A job's use of the replicas of one 2 MiB block of its process (in one
/// window), the store held.
pub(crate) struct Window<'a> {
    pool: &'a VramPool,
    store: MutexGuard<'a, Store>,
    /// Index of the block in the store.
    at: usize,
}

impl Window<'_> {
    /// The BAR offset of the replica of page `i` of the block, copied from
    /// `page` (the page the job's walk found there, in system RAM) if it is
    /// not yet.
    pub(crate) fn replica(&mut self, i: usize, page: PageRef<'_>) -> Result<usize> {
        let b = &mut self.store.blocks[self.at];
        let State::Used { copied, .. } = &mut b.state else {
            return Err(EINVAL);
        };
        let (w, bit) = (i % BLOCK_PAGES / 64, 1u64 << (i % 64));
        let off = b.offset + i % BLOCK_PAGES * PAGE_SIZE;
        if copied[w] & bit == 0 {
            self.pool.bar()?.copy_from_page(off, page)?;
            copied[w] |= bit;
            self.pool.stats.replica_copied.add(1, Relaxed);
        } else {
            self.pool.stats.replica_hits.add(1, Relaxed);
        }
        Ok(off)
    }
}

impl VramPool {
    /// A read-side section of the replicas: a job holds it from before it
    /// looks replicas up ([`VramPool::replica_window`]) until it has read
    /// them.
    pub(crate) fn replica_reader(&self) -> kernel::sync::srcu::Guard<'_> {
        self.replicas.srcu.read_lock()
    }

    /// The replicas of the block at `addr` (2 MiB aligned) of the mm at
    /// `mm` (a key only) for a job that read `generation` before its walk:
    /// the store's block that holds them, made fresh if it is stale, or a
    /// free block taken for them; `None` if there is none. Called with the
    /// mirror lock held, inside [`VramPool::replica_reader`]: it neither
    /// sleeps nor allocates.
    pub(crate) fn replica_window(
        &self,
        mm: usize,
        addr: usize,
        generation: u64,
        charge: ReplicaCharge,
    ) -> Option<Window<'_>> {
        let mut store = self.replicas.store.lock();
        store.clock += 1;
        let now = store.clock;
        let at = match store.blocks.iter().position(|b| holds(&b.state, mm, addr)) {
            Some(at) => at,
            // A free block only with a charge (the job's block was taken
            // since it looked, and it took none).
            None => {
                let c = charge.0?;
                let at = store.blocks.iter().position(|b| b.state == State::Free)?;
                self.stats.cg_charged.add(charged_pages(&c), Relaxed);
                store.blocks[at].charge = Some(c);
                at
            }
        };
        let b = &mut store.blocks[at];
        match &mut b.state {
            State::Used {
                generation: g,
                copied,
                used,
                ..
            } if *g == generation => {
                *used = now;
            }
            s => {
                *s = State::Used {
                    mm,
                    addr,
                    generation,
                    copied: [0; BLOCK_PAGES / 64],
                    used: now,
                }
            }
        }
        Some(Window {
            pool: self,
            store,
            at,
        })
    }

    /// Makes sure the store has a block for the replicas of the block at
    /// `addr` of the mm at `mm`, for a job about to read it: the one that
    /// holds them, or a free one: one whose grace period has passed, a
    /// chunk slot with no pagemap given over to replicas, or the least
    /// recently read block taken from its process. A new block is charged
    /// to the calling task's dmem cgroup first (none if its limit refuses
    /// and no stale replica charged inside that limit makes way).
    /// Sleeps (a grace period); never call it with the mirror lock or an
    /// mmap lock held. The charge for [`VramPool::replica_window`] (none
    /// if the store holds the block already), or `None` if there is no
    /// room.
    pub(crate) fn replica_room(&self, mm: usize, addr: usize) -> Option<ReplicaCharge> {
        let free = |store: &Store| store.blocks.iter().any(|b| b.state == State::Free);
        if self
            .replicas
            .store
            .lock()
            .blocks
            .iter()
            .any(|b| holds(&b.state, mm, addr))
        {
            return Some(ReplicaCharge(None));
        }
        // Charged before any room is made. A cgroup at its limit gives up
        // a stale replica block charged inside that limit (its own, or,
        // when the limit is an ancestor's, a sibling's, as pages are
        // evicted) for it; with none, the job reads in place (a fresh
        // replica is not dropped for another: a buffer larger than the
        // limit would copy every block and read none twice).
        let c = match self.region.charge_block() {
            Ok(c) => c,
            Err(Refusal::Limit(l)) => {
                let within = Evictor::Limit {
                    pool: &l,
                    ignore_low: true,
                };
                if !self.drop_replica_within(within, true) {
                    return None;
                }
                self.region.charge_block().ok()?
            }
            Err(Refusal::Error(_)) => return None,
        };
        let charge = Some(ReplicaCharge(Some(c)));
        if free(&self.replicas.store.lock()) {
            return charge;
        }
        // A killed task makes no replica (the wait may be a grace period,
        // or an idle chunk's removal).
        let _reclaim = lock_killable(&self.replicas.reclaim).ok()?;
        let pending = {
            let store = self.replicas.store.lock();
            if free(&store) {
                return charge;
            }
            store.blocks.iter().any(|b| b.state == State::Pending)
        };
        if !pending && !self.adopt_replica_chunk() {
            // Take the least recently read block from its process.
            let mut store = self.replicas.store.lock();
            let lru = store
                .blocks
                .iter()
                .enumerate()
                .filter_map(|(k, b)| match b.state {
                    State::Used { used, .. } => Some((used, k)),
                    _ => None,
                })
                .min();
            let (_, k) = lru?;
            self.release(&mut store.blocks[k], State::Pending);
            self.stats.replica_dropped.add(1, Relaxed);
        }
        // Every block made `Pending` so far was so before this grace
        // period began (`reclaim` is held): no job reads it after it.
        self.replicas.srcu.synchronize();
        let mut store = self.replicas.store.lock();
        for b in store.blocks.iter_mut() {
            if b.state == State::Pending {
                b.state = State::Free;
            }
        }
        if free(&store) {
            charge
        } else {
            None
        }
    }

    /// Takes block `b` from its process's block (now `to`: `Pending` or
    /// `Gone`), undoing its charge.
    fn release(&self, b: &mut Block, to: State) {
        b.state = to;
        if let Some(c) = b.charge.take() {
            self.stats.cg_uncharged.add(charged_pages(&c), Relaxed);
        }
    }

    /// Takes one replica block that `evictor` may take (one charged inside
    /// a cgroup's limit) from its process: a stale one first, else (unless
    /// `stale_only`) the least recently read. Its charge is undone at
    /// once; the block goes free after a grace period. Whether there was
    /// one. Sleeps (takes `reclaim`); never under the mirror lock or an
    /// mmap lock.
    pub(crate) fn drop_replica_within(&self, evictor: Evictor<'_>, stale_only: bool) -> bool {
        let victim = |store: &Store| {
            let mut check = crate::generation::Checker::default();
            store
                .blocks
                .iter()
                .enumerate()
                .filter_map(|(k, b)| match b.state {
                    State::Used {
                        mm,
                        addr,
                        generation,
                        used,
                        ..
                    } => {
                        let fresh = check.fresh(mm, addr, generation);
                        let ok = (!fresh || !stale_only)
                            && b.charge.as_ref().is_some_and(|c| c.evictable(evictor));
                        ok.then_some(((fresh, used), k))
                    }
                    _ => None,
                })
                .min()
                .map(|(_, k)| k)
        };
        // Most calls find none (a cgroup reading in place at its limit):
        // they do not wait for `reclaim`, which grace periods hold.
        if victim(&self.replicas.store.lock()).is_none() {
            return false;
        }
        let Ok(_reclaim) = lock_killable(&self.replicas.reclaim) else {
            return false;
        };
        let mut store = self.replicas.store.lock();
        let Some(k) = victim(&store) else {
            return false;
        };
        // Marked `Pending` under `reclaim`, as every block is.
        self.release(&mut store.blocks[k], State::Pending);
        self.stats.replica_dropped.add(1, Relaxed);
        true
    }

    /// Gives a chunk slot with no pagemap to the replicas, removing an idle
    /// chunk's pagemap (a cached one, no page in use) if no slot has none:
    /// whether there was one. Under `reclaim`; sleeps.
    fn adopt_replica_chunk(&self) -> bool {
        if self.adopt_absent_chunk() {
            return true;
        }
        {
            // Not while a grower works: the idle chunk may be the one it
            // just made for a migration step. Only a shrink pass's holder
            // takes chunks apart.
            let Some(_grower) = self.grow_lock.try_lock() else {
                return false;
            };
            // Nor behind a shrink pass, which may take long (a consolidation).
            let Some(_pass) = self.shrink_lock.try_lock() else {
                return false;
            };
            if !(0..self.nchunks).any(|c| self.teardown_if_idle(c, |_| {})) {
                return false;
            }
        }
        self.adopt_absent_chunk()
    }

    /// Gives a chunk slot with no pagemap to the replicas: whether there
    /// was one.
    fn adopt_absent_chunk(&self) -> bool {
        let c = {
            let mut chunks = self.chunks.lock();
            let Some(c) = chunks.iter().position(|s| matches!(s, Slot::Absent)) else {
                return false;
            };
            chunks[c] = Slot::Replicas;
            c
        };
        let mut store = self.replicas.store.lock();
        for k in 0..self.chunk_size / BLOCK_SIZE {
            let b = Block {
                offset: self.chunk_offset(c) + k * BLOCK_SIZE,
                chunk: c,
                state: State::Free,
                charge: None,
            };
            // Room for every block of the BAR was reserved.
            if store.blocks.push_within_capacity(b).is_err() {
                break;
            }
        }
        true
    }

    /// Takes every replica chunk back from the replicas, their slots
    /// `Absent` again (a shrink pass, the pool's teardown). Sleeps (a grace
    /// period, if there is a replica chunk); never under the mirror lock or
    /// an mmap lock. The chunks given back.
    pub(crate) fn drop_replicas(&self) -> usize {
        let _reclaim = self.replicas.reclaim.lock();
        {
            let mut store = self.replicas.store.lock();
            if store.blocks.is_empty() {
                return 0;
            }
            for b in store.blocks.iter_mut() {
                if matches!(b.state, State::Used { .. }) {
                    self.stats.replica_dropped.add(1, Relaxed);
                }
                self.release(b, State::Gone);
            }
        }
        // No job reads a `Gone` block after this grace period.
        self.replicas.srcu.synchronize();
        self.replicas.store.lock().blocks.clear();
        // Every replica chunk is this pass's: adopting one takes `reclaim`.
        let mut given = 0;
        for s in self.chunks.lock().iter_mut() {
            if matches!(s, Slot::Replicas) {
                *s = Slot::Absent;
                given += 1;
            }
        }
        given
    }

    /// Takes the replica chunk holding the fewest replicas back for
    /// [`VramPool::grow`], its slot `Creating` for the caller to make a
    /// pagemap in (no one else can take it meanwhile). Sleeps as
    /// [`VramPool::drop_replicas`] does.
    pub(super) fn take_replica_chunk(&self) -> Option<usize> {
        // A killed grower takes nothing back (`grow` then says no).
        let _reclaim = lock_killable(&self.replicas.reclaim).ok()?;
        let c = {
            let store = self.replicas.store.lock();
            // A chunk's blocks are adjacent in the table (added together,
            // removed together): one pass counts each one's replicas.
            let mut fewest: Option<(usize, usize)> = None;
            let mut run: Option<(usize, usize)> = None;
            for b in store.blocks.iter() {
                let used = usize::from(matches!(b.state, State::Used { .. }));
                run = match run {
                    Some((c, n)) if c == b.chunk => Some((c, n + used)),
                    other => {
                        if let Some((c, n)) = other {
                            fewest = fewest.filter(|&(m, _)| m <= n).or(Some((n, c)));
                        }
                        Some((b.chunk, used))
                    }
                };
            }
            if let Some((c, n)) = run {
                fewest = fewest.filter(|&(m, _)| m <= n).or(Some((n, c)));
            }
            fewest?.1
        };
        self.give_back(c);
        let mut chunks = self.chunks.lock();
        matches!(chunks[c], Slot::Replicas).then(|| {
            chunks[c] = Slot::Creating;
            c
        })
    }

    /// Marks the blocks of replica chunk `c` `Gone`, waits for a grace
    /// period, and removes them from the store. Under `reclaim`.
    fn give_back(&self, c: usize) {
        {
            let mut store = self.replicas.store.lock();
            for b in store.blocks.iter_mut().filter(|b| b.chunk == c) {
                if matches!(b.state, State::Used { .. }) {
                    self.stats.replica_dropped.add(1, Relaxed);
                }
                self.release(b, State::Gone);
            }
        }
        // No job reads a `Gone` block after this grace period.
        self.replicas.srcu.synchronize();
        self.replicas.store.lock().blocks.retain(|b| b.chunk != c);
    }

    /// Forgets the replicas of the mm at `mm` (a VM of it goes: once its
    /// mirror is gone, nothing would tell them stale, and the address may
    /// name another mm later). Their blocks go free after a grace period.
    pub(crate) fn forget_replicas(&self, mm: usize) {
        let used = |s: &State| matches!(*s, State::Used { mm: m, .. } if m == mm);
        // Most processes have none: no wait for `reclaim` then (a block
        // added meanwhile is another VM's of this mm, which forgets it).
        if !self
            .replicas
            .store
            .lock()
            .blocks
            .iter()
            .any(|b| used(&b.state))
        {
            return;
        }
        // Marked `Pending` under `reclaim`, as every block is: the grace
        // period that frees it begins after this.
        let _reclaim = self.replicas.reclaim.lock();
        let mut store = self.replicas.store.lock();
        for b in store.blocks.iter_mut() {
            if used(&b.state) {
                self.release(b, State::Pending);
                self.stats.replica_dropped.add(1, Relaxed);
            }
        }
    }

    /// Replica blocks holding a process's replicas now (stale or not).
    pub(crate) fn replica_blocks(&self) -> u64 {
        let store = self.replicas.store.lock();
        let used = store
            .blocks
            .iter()
            .filter(|b| matches!(b.state, State::Used { .. }));
        // CAST: at most the blocks of the BAR.
        used.count() as u64
    }

    /// Bytes of `[start, end)` of the mm at `mm` with a replica here that
    /// is not stale (for RESIDENCY).
    pub(crate) fn replica_bytes(&self, mm: usize, start: usize, end: usize) -> u64 {
        let mut check = crate::generation::Checker::default();
        let store = self.replicas.store.lock();
        let mut n = 0u64;
        for b in store.blocks.iter() {
            let State::Used {
                mm: m,
                addr,
                generation,
                copied,
                ..
            } = b.state
            else {
                continue;
            };
            if m != mm || addr + BLOCK_SIZE <= start || addr >= end {
                continue;
            }
            if !check.fresh(mm, addr, generation) {
                continue;
            }
            for i in 0..BLOCK_PAGES {
                let a = addr + i * PAGE_SIZE;
                if a >= start && a < end && copied[i / 64] & (1 << (i % 64)) != 0 {
                    n += PAGE_SIZE as u64;
                }
            }
        }
        n
    }
}
