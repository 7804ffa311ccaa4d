// SPDX-License-Identifier: GPL-2.0

//! Generations of a process's 2 MiB blocks: what tells a read-only replica
//! of a page (`crate::vram::Replicas`) that the page may have changed since
//! it was copied.
//!
//! Every invalidation a VM's mirror sees bumps the generations of the
//! blocks it covers ([`bump`], from the notifier, under the mirror's lock,
//! before it publishes the mirror's new sequence and before the mm core
//! changes the page tables); a replica records the generation read before
//! the walk that found its page ([`current`]), made and used under the
//! mirror's lock only while the generation is unchanged and the walk still
//! valid: a bump either came before the generation was read, and then the
//! walk waited for the page tables to change or is found stale, or it
//! comes after, and makes the replica stale. The state is one counter per slot of a
//! direct-mapped table shared by all processes, keyed by a hash of the
//! `mm_struct`'s address and the block, plus one epoch that an invalidation
//! of more blocks than the table has slots bumps for everyone. A generation
//! is the sum of a slot and the epoch: both only grow, so a generation
//! never comes back. Keys that share a slot bump each other: a replica is
//! then dropped for nothing, never kept when it should go.

use kernel::prelude::*;
use kernel::sync::atomic::{Atomic, Relaxed};

use crate::mm::page::BLOCK_SIZE;

/// Slots of the table (a power of two): 4096 words, 32 KiB.
const SLOTS: usize = 4096;

static TABLE: [Atomic<u64>; SLOTS] = [const { Atomic::new(0) }; SLOTS];
static EPOCH: Atomic<u64> = Atomic::new(0);

fn slot(mm: usize, addr: usize) -> &'static Atomic<u64> {
    // CAST: masked to the table's size.
    &TABLE[(crate::block_key::hash(mm, addr, 0) as usize) & (SLOTS - 1)]
}

/// The generation of the block of `addr` in the mm at `mm` (an
/// `mm_struct`'s address, a key only).
pub(crate) fn current(mm: usize, addr: usize) -> u64 {
    // The epoch first: a bump between the two loads only makes the sum
    // look newer (a replica recorded with it is then dropped for nothing).
    let epoch = EPOCH.load(Relaxed);
    slot(mm, addr).load(Relaxed).wrapping_add(epoch)
}

/// The pages of `[start, end)` of the mm at `mm` may change: every block
/// the range touches gets a new generation (all blocks of every process, if
/// it touches more blocks than the table has slots). From the mm's
/// invalidation: no sleeping, no allocating.
pub(crate) fn bump(mm: usize, start: usize, end: usize) {
    if start >= end {
        return;
    }
    if end.div_ceil(BLOCK_SIZE) - start / BLOCK_SIZE > SLOTS {
        EPOCH.add(1, Relaxed);
        return;
    }
    let mut at = start;
    while at < end {
        slot(mm, at).add(1, Relaxed);
        at = (at / BLOCK_SIZE + 1) * BLOCK_SIZE;
    }
}

#[kunit_tests(msvm_generation)]
mod tests {
    use super::*;

    // A key no process has: KUnit runs before user space.
    const MM: usize = 0xdead_0001_0000;
    const A: usize = 0x7f00_0000_0000;

    #[test]
    fn bumps_reach_the_blocks_of_the_range_only() {
        let g = [0, 1, 2, 3].map(|k| current(MM, A + k * BLOCK_SIZE));
        // The last byte of block 0 to the first of block 2.
        bump(MM, A + BLOCK_SIZE - 8, A + 2 * BLOCK_SIZE + 8);
        for (k, &g) in g.iter().enumerate().take(3) {
            assert_ne!(current(MM, A + k * BLOCK_SIZE), g);
        }
        // Block 3 is unchanged unless its slot is shared with one bumped.
        let shared = (0..3)
            .any(|k| core::ptr::eq(slot(MM, A + 3 * BLOCK_SIZE), slot(MM, A + k * BLOCK_SIZE)));
        assert!(shared || current(MM, A + 3 * BLOCK_SIZE) == g[3]);
        // Empty ranges bump nothing.
        let g1 = current(MM, A);
        bump(MM, A, A);
        assert_eq!(current(MM, A), g1);
    }

    #[test]
    fn a_huge_range_bumps_every_block() {
        let g = current(MM + 64, A);
        bump(MM, 0, (SLOTS + 1) * BLOCK_SIZE);
        assert_ne!(current(MM + 64, A), g);
    }
}
