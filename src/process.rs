// SPDX-License-Identifier: GPL-2.0

//! The placement policies' state of one process: per 2 MiB block of its
//! address space, the thrashing history ([`crate::thrash`]), every
//! device's access count ([`crate::access`]) and the generation read-only
//! replicas are checked against ([`crate::generation`]).
//!
//! A [`Process`] is made when the first VM of an address space is created
//! and registered under its `mm_struct`'s address; each VM of that mm
//! holds a [`Registration`], and the last one to go takes it out of the
//! registry. A VM holds the `mm_struct` (`mmgrab`) for longer than its
//! registration, so while a process is registered no other `mm_struct`
//! can have its address: a lookup by address ([`lookup`]) finds this
//! process's state or none, never a dead one's, and a process created at
//! a reused address starts afresh. Paths that know only an address (a CPU
//! fault, an eviction, the mm's invalidations) look their process up;
//! a job gets it from its VM.
//!
//! A block's state is allocated the first time a policy records something
//! of it ([`Process::with`], `GFP_NOWAIT`: policies record under the
//! mirror lock, which reclaim can wait for), at most `policy_blocks`
//! blocks per process (module parameter, at most 2^18); a block not
//! recorded (at the limit, or the allocation failed) is one the policies
//! do not act on, which changes where a job reads its data, never what it
//! reads. Blocks an unmap covers are freed (the invalidation of a
//! process's exit is a release, not an unmap: its blocks go with its last
//! VM); under memory pressure the shrinker frees the cold ones: no policy
//! looked at them for a thrashing epoch, none pinned ([`shrink_all`]).
//! Walks over many blocks hold the lock for [`BATCH`] blocks at a time.
//!
//! Generations are values of one global sequence, [`GENERATION`]: an
//! invalidation of a process's range takes a new value and gives it to
//! the range's recorded blocks and to the process (`last`); a block not
//! recorded has the process's `last`, the value of its latest
//! invalidation. So a block's generation changes with every invalidation
//! of it and never takes a value it had before one, whether its state is
//! freed, made again, or never made (a recorded block's value is never
//! above `last`); and no process meets a value another one's blocks had
//! (see `crate::generation`).
//!
//! # Lock order
//!
//! [`PROCESSES`] (the registry) is taken before a process's
//! [`Process::blocks`] lock, which is innermost: nothing is locked, no
//! allocation may sleep, and no user memory is touched under either. Both
//! are spinlocks: the mm's invalidations take them, also where they may
//! not sleep.

use kernel::{
    mm::Mm,
    num::casts::FromSafeCast,
    prelude::*,
    rbtree::{RBTree, RBTreeNode},
    sync::{
        atomic::{Atomic, Relaxed},
        lock::GlobalGuard,
        Arc, SpinLock,
    },
};

use crate::lockstat::{Counted, LockStat};
use crate::mm::clock::now_ms;
use crate::mm::page::BLOCK_SIZE;
use crate::topology::MAX_DEVICES;

/// What the policies keep of one 2 MiB block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Block {
    /// Its thrashing history, as `crate::thrash` packs it (0: none).
    pub(crate) thrash: u64,
    /// Its generation (see the module's documentation).
    pub(crate) generation: u64,
    /// Pages each device used in place since its count started
    /// (saturating).
    pub(crate) access: [u16; MAX_DEVICES],
    /// When a policy last looked at it, in seconds ([`now_s`], wrapping).
    touched: u32,
}

/// The clock of [`Block::idle_s`]: seconds since boot, wrapping.
fn now_s() -> u32 {
    // CAST: wraps after 136 years of uptime.
    (now_ms() / 1000) as u32
}

impl Block {
    /// Seconds since a policy last looked at the block.
    pub(crate) fn idle_s(&self) -> u32 {
        now_s().wrapping_sub(self.touched)
    }
}

/// The blocks of one process, by block number (address / 2 MiB).
struct Blocks {
    tree: RBTree<usize, Block>,
    /// How many `tree` holds.
    n: usize,
    /// The generation of a block not in `tree`: the value of the process's
    /// last invalidation (or, before any, one taken when it was made).
    last: u64,
}

/// The sequence generations are taken from (see the module's
/// documentation); it only grows.
static GENERATION: Atomic<u64> = Atomic::new(1);
/// The next process's [`Process::id`].
static NEXT_ID: Atomic<u64> = Atomic::new(1);
/// Blocks recorded in all processes.
static LIVE: Atomic<usize> = Atomic::new(0);
/// Times a block could not be recorded: the process had `policy_blocks`
/// already, or the allocation failed.
static UNTRACKED: Atomic<u64> = Atomic::new(0);

/// The most `policy_blocks` may say: 512 GiB of blocks, 24 MiB of state.
const MOST_BLOCKS: u32 = 1 << 18;

/// Blocks a process may have recorded (module parameter `policy_blocks`).
fn limit() -> usize {
    let n = crate::module_parameters::policy_blocks
        .value()
        .min(MOST_BLOCKS);
    usize::from_safe_cast(n)
}

/// Recorded blocks one hold of a process's lock visits at most, where a
/// range or the whole tree is walked (an unmap, the shrinker).
const BATCH: usize = 256;

/// Bytes one recorded block takes: its tree node, as `kmalloc` rounds it.
pub(crate) fn bytes_per_block() -> usize {
    // A node is the tree's links, the key and the value.
    let node = core::mem::size_of::<kernel::bindings::rb_node>()
        + core::mem::size_of::<usize>()
        + core::mem::size_of::<Block>();
    crate::mm::page::kmalloc_size(node)
}

/// The policies' state of one address space (see the module's
/// documentation).
#[pin_data(PinnedDrop)]
pub(crate) struct Process {
    /// Never reused: what tells this process's blocks from those of a
    /// process before it at the same `mm_struct` address (shadows of
    /// evicted blocks are keyed by it).
    id: u64,
    #[pin]
    blocks: SpinLock<Blocks>,
}

impl Process {
    /// A process with no block recorded.
    pub(crate) fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                id: NEXT_ID.fetch_add(1, Relaxed),
                blocks <- kernel::new_spinlock!(Blocks {
                    tree: RBTree::new(),
                    n: 0,
                    // A value no process's block had before.
                    last: GENERATION.fetch_add(1, Relaxed) + 1,
                }),
            }),
            GFP_KERNEL,
        )
    }

    /// The process's key, never another process's.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Blocks recorded.
    pub(crate) fn blocks(&self) -> usize {
        self.blocks.lock().n
    }

    /// Runs `f` on the state of the block of `addr`, under the process's
    /// lock: the recorded one, else (if `create`) a new one, else `None`
    /// (also when it could not be recorded). No sleeping, no allocating
    /// that can: from under the mirror lock. `f` runs under a spinlock: it
    /// must not sleep nor call into this process.
    pub(crate) fn with<R>(
        &self,
        addr: usize,
        create: bool,
        f: impl FnOnce(Option<&mut Block>) -> R,
    ) -> R {
        let mut g = self.blocks.lock();
        f(Self::find(&mut g, addr, create))
    }

    /// The state of the block of `addr` in `g`, made if `create` and it
    /// can be; marked as looked at.
    fn find(g: &mut Blocks, addr: usize, create: bool) -> Option<&mut Block> {
        let key = addr / BLOCK_SIZE;
        if create && g.tree.get(&key).is_none() {
            let block = Block {
                generation: g.last,
                ..Block::default()
            };
            let node = if g.n < limit() {
                RBTreeNode::new(key, block, GFP_NOWAIT | __GFP_NOWARN).ok()
            } else {
                None
            };
            match node {
                Some(node) => {
                    g.tree.insert(node);
                    g.n += 1;
                    LIVE.add(1, Relaxed);
                }
                None => UNTRACKED.add(1, Relaxed),
            }
        }
        let b = g.tree.get_mut(&key)?;
        b.touched = now_s();
        Some(b)
    }

    /// The generation of the block of `addr` (recorded, if `record` and it
    /// can be, so that it stays the same until an invalidation of the
    /// block).
    pub(crate) fn generation(&self, addr: usize, record: bool) -> u64 {
        // Read under the lock that orders it with this process's
        // invalidations.
        let mut g = self.blocks.lock();
        let last = g.last;
        Self::find(&mut g, addr, record).map_or(last, |b| b.generation)
    }

    /// The mm invalidated `[start, end)`: its pages may change. Every
    /// block the range touches gets a new generation; if `unmap`, its
    /// state is freed (a buffer mapped there next is usually another
    /// one). In batches of [`BATCH`] blocks per hold of the lock: a block
    /// recorded meanwhile takes the new generation. From the mm's
    /// invalidation: no sleeping, no allocating.
    pub(crate) fn invalidated(&self, start: usize, end: usize, unmap: bool) {
        if start >= end {
            return;
        }
        let (first, last) = (start / BLOCK_SIZE, end.div_ceil(BLOCK_SIZE));
        let gen = {
            let mut g = self.blocks.lock();
            // Under the lock: a block read or recorded after this reads
            // the new value, or one that the walk below gives it.
            let gen = GENERATION.fetch_add(1, Relaxed) + 1;
            g.last = gen;
            gen
        };
        let mut from = first;
        loop {
            let mut g = self.blocks.lock();
            let (mut freed, mut visited) = (0, 0);
            let mut cur = g.tree.cursor_lower_bound_mut(&from);
            let next = loop {
                let Some(mut c) = cur else { break None };
                let key = *c.current().0;
                if key >= last {
                    break None;
                }
                if visited == BATCH {
                    break Some(key);
                }
                visited += 1;
                if unmap {
                    let (next, _node) = c.remove_current();
                    freed += 1;
                    // The next block, if the removed one was not the last.
                    cur = next.filter(|n| *n.current().0 > key);
                } else {
                    c.current_mut().1.generation = gen;
                    cur = c.move_next();
                }
            };
            g.n -= freed;
            LIVE.fetch_sub(freed, Relaxed);
            drop(g);
            match next {
                Some(k) => from = k,
                None => break,
            }
        }
    }

    /// Runs `f` on the state of every recorded block of `[start, end)`,
    /// with its address, under the process's lock (at most
    /// `policy_blocks`: `f` must not sleep nor call into this process).
    pub(crate) fn each(&self, start: usize, end: usize, mut f: impl FnMut(usize, &mut Block)) {
        let (first, last) = (start / BLOCK_SIZE, end.div_ceil(BLOCK_SIZE));
        let mut g = self.blocks.lock();
        let mut cur = g.tree.cursor_lower_bound_mut(&first);
        while let Some(mut c) = cur {
            let (&key, b) = c.current_mut();
            if key >= last {
                break;
            }
            f(key * BLOCK_SIZE, b);
            cur = c.move_next();
        }
    }

    /// Frees the recorded blocks `keep` does not keep, looking at [`BATCH`]
    /// at most, from block number `from` on: how many it freed and where
    /// the next call goes on (`None`: the end).
    fn shrink(&self, from: usize, keep: &impl Fn(&Block) -> bool) -> (usize, Option<usize>) {
        let mut g = self.blocks.lock();
        let (mut freed, mut visited) = (0, 0);
        let mut cur = g.tree.cursor_lower_bound_mut(&from);
        let next = loop {
            let Some(c) = cur else { break None };
            let key = *c.current().0;
            if visited == BATCH {
                break Some(key);
            }
            visited += 1;
            if keep(c.current().1) {
                cur = c.move_next();
                continue;
            }
            let (next, _node) = c.remove_current();
            freed += 1;
            cur = next.filter(|n| *n.current().0 > key);
        };
        g.n -= freed;
        LIVE.fetch_sub(freed, Relaxed);
        (freed, next)
    }
}

#[pinned_drop]
impl PinnedDrop for Process {
    fn drop(self: Pin<&mut Self>) {
        // The tree frees its nodes.
        LIVE.fetch_sub(self.blocks.lock().n, Relaxed);
    }
}

/// A registered process and the VMs that hold it.
struct Entry {
    process: Arc<Process>,
    vms: usize,
}

kernel::sync::global_lock! {
    // SAFETY: initialised by `init()` in module init, before the driver
    // is registered and so before any VM.
    /// The processes with a VM, by `mm_struct` address (made by the first
    /// registration: a tree is not made in a constant).
    unsafe(uninit) static PROCESSES: SpinLock<Option<RBTree<usize, Entry>>> = None;
}

/// Makes the registry usable.
///
/// # Safety
///
/// Called once, in module init, before any other function of this module.
pub(crate) unsafe fn init() {
    // SAFETY: the caller guarantees a single call before any use.
    unsafe { PROCESSES.init() };
}

/// [`PROCESSES`]'s contention counts (`crate::lockstat`).
static STAT: LockStat = LockStat::new();

/// The registry, locked, counted.
fn registry() -> Counted<GlobalGuard<PROCESSES>> {
    STAT.lock(|| PROCESSES.lock())
}

/// An `mm_struct`'s address: the registry's key.
fn key(mm: &Mm) -> usize {
    // CAST: an address, used as a key only.
    mm.as_raw() as usize
}

/// The policies' state of the process whose `mm_struct` is at `mm`, if it
/// has a VM.
pub(crate) fn lookup(mm: usize) -> Option<Arc<Process>> {
    registry()
        .as_ref()
        .and_then(|t| t.get(&mm))
        .map(|e| e.process.clone())
}

/// The state of `mm`'s process, for [`lookup`] from paths that hold the mm.
pub(crate) fn of(mm: &Mm) -> Option<Arc<Process>> {
    lookup(key(mm))
}

/// A VM's hold on its process's state: registered while one is held.
///
/// # Invariants
///
/// The registry holds an entry for `mm` whose `vms` counts this
/// registration, and whose process is `process`.
pub(crate) struct Registration {
    mm: usize,
    process: Arc<Process>,
}

impl Registration {
    /// Registers a VM of `mm`: the process's state, made if it is the
    /// first. The caller holds `mm` (`mmgrab`) for longer than the
    /// registration.
    pub(crate) fn new(mm: &Mm) -> Result<Self> {
        let mm = key(mm);
        // Allocated before the lock, used if the process is new.
        let fresh = Process::new()?;
        let node = RBTreeNode::new(
            mm,
            Entry {
                process: fresh.clone(),
                vms: 1,
            },
            GFP_KERNEL,
        )?;
        let mut reg = registry();
        let reg = reg.get_or_insert_with(RBTree::new);
        let process = match reg.get_mut(&mm) {
            Some(e) => {
                e.vms += 1;
                e.process.clone()
            }
            None => {
                reg.insert(node);
                fresh
            }
        };
        // INVARIANT: the entry of `mm` counts this VM and holds `process`.
        Ok(Self { mm, process })
    }

    /// The process's state.
    pub(crate) fn process(&self) -> &Arc<Process> {
        &self.process
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut reg = registry();
        let Some(tree) = reg.as_mut() else { return };
        // By the type invariant, the entry is there and counts this VM.
        let last = tree.get_mut(&self.mm).is_some_and(|e| {
            e.vms -= 1;
            e.vms == 0
        });
        // The last VM: the entry's node and its count of the process go
        // after the lock.
        let node = if last {
            tree.remove_node(&self.mm)
        } else {
            None
        };
        drop(reg);
        drop(node);
    }
}

/// Frees, in every process, the recorded blocks `keep` does not keep
/// (memory is short; the shrink work, which may sleep). The bytes freed.
pub(crate) fn shrink_all(keep: impl Fn(&Block) -> bool) -> usize {
    let mut freed = 0;
    let mut next_mm = 0;
    loop {
        // The next registered process, without allocating.
        let found = {
            let reg = registry();
            reg.as_ref()
                .and_then(|t| t.cursor_lower_bound(&next_mm))
                .map(|c| (*c.current().0, c.current().1.process.clone()))
        };
        let Some((mm, p)) = found else { break };
        let mut from = Some(0);
        while let Some(at) = from {
            let (n, next) = p.shrink(at, &keep);
            freed += n;
            from = next;
            crate::mm::cancel::cond_resched();
        }
        match mm.checked_add(1) {
            Some(m) => next_mm = m,
            None => break,
        }
    }
    freed * bytes_per_block()
}

/// Bytes the policies keep for the blocks of all processes.
pub(crate) fn bytes() -> usize {
    LIVE.load(Relaxed) * bytes_per_block()
}

/// What the shrinker counts of the policies' state: the bytes beyond the
/// first 4 MiB (some 44,000 blocks), so that a modest state does not make
/// the shrinker run passes for blocks in use, which it keeps.
pub(crate) fn reclaimable() -> usize {
    bytes().saturating_sub(4 << 20)
}

/// The policies' figures, for debugfs: blocks recorded, and times a
/// block could not be.
pub(crate) fn figures() -> (usize, u64) {
    (LIVE.load(Relaxed), UNTRACKED.load(Relaxed))
}

/// [`PROCESSES`]'s contention, for debugfs: acquisitions, and those that
/// found it held.
pub(crate) fn contention() -> (u64, u64) {
    STAT.figures()
}

#[kunit_tests(msvm_process)]
mod tests {
    use super::*;

    const A: usize = 0x7f00_0000_0000;

    #[test]
    fn blocks_are_recorded_when_asked_and_freed_by_an_unmap() -> Result {
        let p = Process::new()?;
        assert!(!p.with(A, false, |b| b.is_some()));
        p.with(A + 5, true, |b| b.map(|b| b.access[1] = 7));
        // Every address of the block is the block.
        assert_eq!(
            p.with(A + BLOCK_SIZE - 1, false, |b| b.map(|b| b.access[1])),
            Some(7)
        );
        p.with(A + BLOCK_SIZE, true, |_| ());
        p.with(A + 2 * BLOCK_SIZE, true, |_| ());
        assert_eq!(p.blocks(), 3);
        // An unmap frees the blocks it touches; other invalidations keep them.
        p.invalidated(A + BLOCK_SIZE + 8, A + 2 * BLOCK_SIZE + 8, false);
        assert_eq!(p.blocks(), 3);
        p.invalidated(A + BLOCK_SIZE + 8, A + 2 * BLOCK_SIZE + 8, true);
        assert_eq!(p.blocks(), 1);
        assert_eq!(p.with(A, false, |b| b.map(|b| b.access[1])), Some(7));
        Ok(())
    }

    #[test]
    fn a_generation_changes_with_each_invalidation_only() -> Result {
        let p = Process::new()?;
        let q = Process::new()?;
        let g = p.generation(A, true);
        assert_eq!(p.generation(A, true), g);
        // Another process's invalidation, another block's: not this one's.
        q.invalidated(A, A + BLOCK_SIZE, false);
        p.invalidated(A + BLOCK_SIZE, A + 2 * BLOCK_SIZE, false);
        assert_eq!(p.generation(A, true), g);
        // Its own, mapped or unmapped: a value it never had.
        p.invalidated(A, A + 1, false);
        let g1 = p.generation(A, true);
        assert!(g1 > g);
        p.invalidated(A, A + 1, true);
        let g2 = p.generation(A, false);
        assert!(g2 > g1);
        // A block never recorded changes too.
        let u = p.generation(A + 8 * BLOCK_SIZE, false);
        p.invalidated(A + 8 * BLOCK_SIZE, A + 9 * BLOCK_SIZE, true);
        assert!(p.generation(A + 8 * BLOCK_SIZE, false) > u);
        // A new process meets no value an old one's blocks had.
        let r = Process::new()?;
        assert!(r.generation(A, true) >= g2);
        assert_ne!(r.id(), p.id());
        Ok(())
    }

    #[test]
    fn shrinking_keeps_what_it_is_told_to_in_batches() -> Result {
        let p = Process::new()?;
        for k in 0..600 {
            p.with(A + k * BLOCK_SIZE, true, |b| {
                b.map(|b| b.thrash = u64::from(k % 3 == 0))
            });
        }
        let keep = |b: &Block| b.thrash != 0;
        let (mut from, mut freed, mut calls) = (Some(0), 0, 0);
        while let Some(at) = from {
            let (n, next) = p.shrink(at, &keep);
            (freed, from, calls) = (freed + n, next, calls + 1);
        }
        assert_eq!((freed, calls), (400, 3));
        // Blocks 0, 3, 6, ... stay (checked after the lock).
        let (mut n, mut bad) = (0, 0);
        p.each(A, A + 600 * BLOCK_SIZE, |at, b| {
            n += 1;
            bad += usize::from(b.thrash != 1 || ((at - A) / BLOCK_SIZE) % 3 != 0);
        });
        assert_eq!((n, bad, p.blocks()), (200, 0, 200));
        Ok(())
    }

    #[test]
    fn an_unmap_of_many_blocks_frees_them_all_in_batches() -> Result {
        let p = Process::new()?;
        for k in 0..1000 {
            p.with(A + k * BLOCK_SIZE, true, |_| ());
        }
        let g = p.generation(A + 999 * BLOCK_SIZE, false);
        // All but the first and the last.
        p.invalidated(A + BLOCK_SIZE, A + 999 * BLOCK_SIZE, false);
        assert_eq!(p.generation(A + 999 * BLOCK_SIZE, false), g);
        let g1 = p.generation(A + 998 * BLOCK_SIZE, false);
        assert!(g1 > g);
        p.invalidated(A + BLOCK_SIZE, A + 999 * BLOCK_SIZE, true);
        assert_eq!(p.blocks(), 2);
        assert!(p.generation(A + 998 * BLOCK_SIZE, false) > g1);
        Ok(())
    }
}
