// SPDX-License-Identifier: GPL-2.0

//! Access counters: the 2 MiB blocks a device keeps using where they are.
//!
//! The engine counts, per device and per 2 MiB block of a process, the
//! pages its jobs use in place from memory that is not the device's own:
//! system RAM (by DMA) and a peer's VRAM (over P2P) ([`add`]). One page
//! used by one job is one access. Once a block has `access_threshold`
//! accesses (UVM's default: 256, at 2 MiB granularity), the placement pass
//! of that device's next job that runs in place over the block
//! ([`crate::engine::Job::in_place`]) takes the count ([`take_due`]) and
//! migrates the block to the device, unless thrashing detection pins it or
//! the range's attributes keep it where it is (access policy "in place", a
//! preferred location other than this device, `MSVM_ATTR_ACCESS_OFF`): the
//! job's "in place" is a hint, the range's attributes are the runtime's
//! rule. Taking
//! a count clears it, whether the block then moves or not (UVM clears a
//! notification's counter when it services it), so a device without room
//! tries again only after as many accesses more.
//!
//! UVM's counters are hardware ones, serviced from an interrupt; here the
//! engine counts as it builds its device page table, and the next job
//! acts, so the job that crosses the threshold still runs in place.
//!
//! Like [`crate::thrash`]'s, the state is one atomic word per slot of a
//! direct-mapped table shared by all devices and processes, keyed by a
//! hash of the process's `mm_struct` address, the block and the device: no
//! lock, no allocation, so the engine counts under the mirror lock. Two
//! keys that collide share a slot (the later restarts the count); an
//! unmapped block's counts are forgotten ([`unmapped`]); a process whose
//! `mm_struct` reuses a freed one's address may inherit counts. Each costs
//! at most a migration early or late, which changes where a job reads its
//! data, never what it reads.

use kernel::num::casts::FromSafeCast;
use kernel::prelude::*;
use kernel::sync::atomic::{Atomic, Relaxed};

use crate::mm::page::BLOCK_SIZE;
use crate::topology::MAX_DEVICES;

/// Slots of the table (a power of two): 4096 words, 32 KiB.
const SLOTS: usize = 4096;

static TABLE: [Atomic<u64>; SLOTS] = [const { Atomic::new(0) }; SLOTS];

// A slot: tag (40 bits, never 0 in a used slot) | count (24 bits,
// saturating). A zero word is an empty slot.
const COUNT_BITS: u32 = 24;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;

/// The threshold (module parameter `access_threshold`, within what a slot
/// counts); `None` if the counters are off (`access_counters=0`).
fn threshold() -> Option<u64> {
    use crate::module_parameters as p;
    if p::access_counters.value() == 0 {
        return None;
    }
    Some(u64::from(p::access_threshold.value()).clamp(1, COUNT_MASK))
}

/// Whether the access counters are on (module parameter `access_counters`).
pub(crate) fn enabled() -> bool {
    threshold().is_some()
}

/// The slot index and tag of device `dev`'s count of the block of `addr`
/// in the mm at `mm`.
fn key(mm: usize, addr: usize, dev: usize) -> (usize, u64) {
    let h = crate::block_key::hash(mm, addr, 1 + u64::from_safe_cast(dev));
    // CAST: masked to the table's size.
    ((h as usize) & (SLOTS - 1), (h >> COUNT_BITS) | 1)
}

/// The word of a slot holding `old` once `n` accesses of the entry tagged
/// `tag` are added: its count grows (up to the most a slot holds), another
/// entry's is replaced.
fn added(old: u64, tag: u64, n: u64) -> u64 {
    let count = if old >> COUNT_BITS == tag {
        old & COUNT_MASK
    } else {
        0
    };
    (tag << COUNT_BITS) | count.saturating_add(n).min(COUNT_MASK)
}

/// Whether a slot holding `word` has the entry tagged `tag` at `threshold`
/// accesses or more.
fn due(word: u64, tag: u64, threshold: u64) -> bool {
    word >> COUNT_BITS == tag && word & COUNT_MASK >= threshold
}

/// Clears `slot` if it holds the entry tagged `tag` and `keep` does not
/// hold for its word; whether it cleared it.
fn clear_if(slot: &Atomic<u64>, tag: u64, keep: impl Fn(u64) -> bool) -> bool {
    let mut old = slot.load(Relaxed);
    while old != 0 && old >> COUNT_BITS == tag && !keep(old) {
        match slot.cmpxchg(old, 0, Relaxed) {
            Ok(_) => return true,
            Err(seen) => old = seen,
        }
    }
    false
}

/// Counts `n` accesses by device `dev` to pages of the block of `addr` in
/// the mm at `mm` that are not in its memory (the caller checks that the
/// counters are on: [`enabled`]). No sleeping, no allocating: the engine
/// counts under the mirror lock.
pub(crate) fn add(mm: usize, dev: usize, addr: usize, n: u64) {
    let (slot, tag) = key(mm, addr, dev);
    let w = &TABLE[slot];
    let mut old = w.load(Relaxed);
    while let Err(seen) = w.cmpxchg(old, added(old, tag, n), Relaxed) {
        old = seen;
    }
}

/// Whether device `dev` has used the block of `addr` in the mm at `mm` in
/// place `access_threshold` times since its count last started; if so, the
/// count is taken (cleared). Never if the counters are off.
pub(crate) fn take_due(mm: usize, dev: usize, addr: usize) -> bool {
    threshold().is_some_and(|t| take_at(mm, dev, addr, t))
}

fn take_at(mm: usize, dev: usize, addr: usize, threshold: u64) -> bool {
    let (slot, tag) = key(mm, addr, dev);
    clear_if(&TABLE[slot], tag, |w| !due(w, tag, threshold))
}

/// Forgets every device's counts of the blocks `[start, end)` of the mm at
/// `mm` touches: they were unmapped (a buffer mapped there next is usually
/// another one). Not for a range of more blocks than the table has slots
/// (an exiting process's whole address space): it would only cost time.
/// From the mm's invalidation: no sleeping, no allocating.
pub(crate) fn unmapped(mm: usize, start: usize, end: usize) {
    if !enabled() || start >= end || end.div_ceil(BLOCK_SIZE) - start / BLOCK_SIZE > SLOTS {
        return;
    }
    forget(mm, start, end);
}

fn forget(mm: usize, start: usize, end: usize) {
    let mut at = start;
    while at < end {
        for dev in 0..MAX_DEVICES {
            let (slot, tag) = key(mm, at, dev);
            clear_if(&TABLE[slot], tag, |_| false);
        }
        at = (at / BLOCK_SIZE + 1) * BLOCK_SIZE;
    }
}

#[kunit_tests(msvm_access)]
mod tests {
    use super::*;

    // Keys no process has: KUnit runs before user space.
    const MM: usize = 0xdead_0000_0000;
    const A: usize = 0x7f00_0000_0000;

    fn counted(mm: usize, dev: usize, addr: usize) -> u64 {
        let (slot, tag) = key(mm, addr, dev);
        let w = TABLE[slot].load(Relaxed);
        if w >> COUNT_BITS == tag {
            w & COUNT_MASK
        } else {
            0
        }
    }

    #[test]
    fn counts_add_up_and_saturate() {
        let tag = 0x12_3456_789b;
        let w = added(0, tag, 100);
        assert_eq!(w & COUNT_MASK, 100);
        assert_eq!(added(w, tag, 156) & COUNT_MASK, 256);
        // Another entry colliding in the slot starts again.
        assert_eq!(added(w, tag ^ 2, 7), ((tag ^ 2) << COUNT_BITS) | 7);
        // A count stays within its bits.
        assert_eq!(
            added(added(w, tag, COUNT_MASK), tag, 1) & COUNT_MASK,
            COUNT_MASK
        );
        assert!(!due(w, tag, 256) && due(added(w, tag, 156), tag, 256));
        assert!(!due(added(w, tag, 156), tag ^ 2, 256));
    }

    #[test]
    fn a_due_count_is_taken_once_per_device_and_block() {
        let mm = MM + 0x100;
        add(mm, 1, A, 200);
        assert!(!take_at(mm, 1, A, 256));
        assert_eq!(counted(mm, 1, A), 200);
        add(mm, 1, A + BLOCK_SIZE - 1, 56);
        // Another device's and another block's counts are their own.
        add(mm, 2, A, 5);
        assert_eq!(counted(mm, 2, A), 5);
        assert_eq!(counted(mm, 1, A + BLOCK_SIZE), 0);
        assert!(take_at(mm, 1, A, 256));
        assert_eq!(counted(mm, 1, A), 0);
        assert!(!take_at(mm, 1, A, 256));
        assert_eq!(counted(mm, 2, A), 5);
    }

    #[test]
    fn unmapping_forgets_every_devices_counts() {
        let mm = MM + 0x200;
        for dev in 0..MAX_DEVICES {
            add(mm, dev, A, 300);
            add(mm, dev, A + BLOCK_SIZE, 300);
        }
        add(mm, 0, A + 2 * BLOCK_SIZE, 300);
        // Only the blocks the range touches (here the first two), as
        // [`unmapped`] does with the counters on.
        forget(mm, A + 4096, A + BLOCK_SIZE + 4096);
        for dev in 0..MAX_DEVICES {
            assert_eq!(counted(mm, dev, A), 0);
            assert_eq!(counted(mm, dev, A + BLOCK_SIZE), 0);
        }
        assert_eq!(counted(mm, 0, A + 2 * BLOCK_SIZE), 300);
    }
}
