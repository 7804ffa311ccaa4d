// SPDX-License-Identifier: GPL-2.0

//! Refault detection for the eviction policy: whether data a job brings
//! into a full device was evicted from it recently (the shadow entries of
//! Linux's `mm/workingset.c`, per 2 MiB block of a process).
//!
//! A device counts the blocks of its memory it evicts to make room: its
//! eviction clock. A 2 MiB block of a process whose pages such an eviction
//! moved out leaves a *shadow*, the clock's value then. When a job's
//! migrate-on-access brings pages of that block back, the blocks evicted
//! in between are its *refault distance*. A distance within the device's
//! size means the data would have stayed had the device kept it over what
//! came in after it: it is a working set the device keeps turning over (a
//! new working set displacing an old one, a cycle larger than the device),
//! and its pages are placed *active* (`lru.rs`, [`super::Intent::Refault`])
//! rather than inactive, where the next block to come in would evict them
//! again. A block that comes back later than that, or was never evicted,
//! is placed inactive as before: a stream used once still never pushes out
//! the working set.
//!
//! The state is one atomic word per slot of a direct-mapped table per
//! device, two to four slots per block of its memory (a power of two, at
//! least 64), keyed by a hash of the process's id (never reused:
//! `crate::process`) and the block: a 32-bit tag and the low 32 bits of
//! the clock. A refault takes its shadow. Two keys that collide share a
//! slot (the later wins). Each costs at most a
//! block placed active that should not have been, or inactive that should
//! have been: where a job reads its data, never what it reads. An
//! eviction leaves shadows of the first few process blocks its VRAM block
//! held pages of (`room.rs`). Evictions for a cgroup's `dmem.max` tick the
//! same clock, and the distance is the device's, not the cgroup's (Linux
//! compares with the cgroup's own lists): in a cgroup much smaller than
//! the device, most data used again counts as a refault.

use kernel::prelude::*;
use kernel::sync::atomic::{Atomic, Relaxed};

/// The shadows of one device.
pub(crate) struct Shadows {
    slots: KVVec<Atomic<u64>>,
    /// Blocks of the device evicted so far.
    clock: Atomic<u64>,
    /// The largest refault distance that counts: the device's blocks.
    reach: u64,
}

/// The low bits of a slot: the clock when the block was evicted.
const CLOCK_MASK: u64 = (1 << 32) - 1;

impl Shadows {
    /// Shadows for a device of `nblocks` 2 MiB blocks.
    pub(crate) fn new(nblocks: usize) -> Result<Self> {
        let n = (2 * nblocks).max(64).next_power_of_two();
        let mut slots = KVVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            slots.push(Atomic::new(0), GFP_KERNEL)?;
        }
        Ok(Self {
            slots,
            clock: Atomic::new(0),
            // CAST: a block count fits a `u64`.
            reach: nblocks as u64,
        })
    }

    /// The slot and tag (never 0) of block `addr` of the process whose
    /// [`crate::process::Process::id`] is `process`.
    fn slot(&self, process: u64, addr: usize) -> (&Atomic<u64>, u64) {
        // CAST: a process's id fits a `usize` on 64-bit kernels.
        let h = crate::block_key::hash(process as usize, addr, 0);
        // CAST: masked to the table's size.
        let i = (h as usize) & (self.slots.len() - 1);
        (&self.slots[i], (h >> 32 | 1) << 32)
    }

    /// The device evicted one block of its memory: the clock's value
    /// before it ticked, for [`Self::evicted`].
    pub(crate) fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Relaxed)
    }

    /// Pages of block `addr` of process `process` (its id) left the device
    /// at clock `at`.
    pub(crate) fn evicted(&self, process: u64, addr: usize, at: u64) {
        let (slot, tag) = self.slot(process, addr);
        slot.store(tag | (at & CLOCK_MASK), Relaxed);
    }

    /// Whether block `addr` of process `process` (its id) comes back
    /// within the device's size of its eviction; its shadow, if any, is
    /// taken.
    pub(crate) fn refault(&self, process: u64, addr: usize) -> bool {
        let (slot, tag) = self.slot(process, addr);
        let w = slot.load(Relaxed);
        if w & !CLOCK_MASK != tag || slot.cmpxchg(w, 0, Relaxed).is_err() {
            return false;
        }
        // The blocks evicted after it.
        let now = self.clock.load(Relaxed);
        now.wrapping_sub((w & CLOCK_MASK) + 1) & CLOCK_MASK <= self.reach
    }
}

#[kunit_tests(msvm_shadow)]
mod tests {
    use super::*;
    use crate::mm::page::BLOCK_SIZE;

    // Keys no process has: KUnit runs before user space.
    const MM: u64 = 0xdead_0002_0000;
    const A: usize = 0x7f00_0000_0000;

    #[test]
    fn a_block_back_within_reach_refaults_once() -> Result {
        let s = Shadows::new(4)?;
        // Never evicted: not a refault.
        assert!(!s.refault(MM, A));
        let at = s.tick();
        s.evicted(MM, A, at);
        // Any address of the block finds it; another process's does not.
        assert!(!s.refault(MM + 64, A));
        assert!(s.refault(MM, A + BLOCK_SIZE - 1));
        // Taken: the next time is no refault.
        assert!(!s.refault(MM, A));
        Ok(())
    }

    #[test]
    fn a_block_back_too_late_is_not_a_refault() -> Result {
        let s = Shadows::new(4)?;
        let at = s.tick();
        s.evicted(MM, A, at);
        let at = s.tick();
        s.evicted(MM, A + BLOCK_SIZE, at);
        // Four more blocks evicted: the first is 5 blocks back, the
        // second 4, as many as the device has.
        for _ in 0..4 {
            s.tick();
        }
        assert!(!s.refault(MM, A));
        assert!(s.refault(MM, A + BLOCK_SIZE));
        Ok(())
    }

    #[test]
    fn the_clock_wraps() -> Result {
        let s = Shadows::new(4)?;
        s.clock.store(CLOCK_MASK - 1, Relaxed);
        let at = s.tick();
        s.evicted(MM, A, at);
        s.tick();
        s.tick();
        assert!(s.refault(MM, A));
        Ok(())
    }
}
