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
//! The counts are kept per block in the process's placement state
//! (`crate::process`), one per device, made by the first access counted
//! and freed when the block is unmapped or the process's last VM goes: a
//! block's counts are its own, whatever other blocks and processes do. A
//! count saturates at 65,535 (the highest threshold); a block the process
//! could not record (at its `policy_blocks`) is never moved by its
//! counts, which changes where a job reads its data, never what it reads.

use kernel::prelude::*;

use crate::process::Process;
use crate::topology::MAX_DEVICES;

/// The threshold (module parameter `access_threshold`, within what a
/// count holds); `None` if the counters are off (`access_counters=0`).
fn threshold() -> Option<u16> {
    use crate::module_parameters as p;
    if p::access_counters.value() == 0 {
        return None;
    }
    Some(u16::try_from(p::access_threshold.value().max(1)).unwrap_or(u16::MAX))
}

/// Whether the access counters are on (module parameter `access_counters`).
pub(crate) fn enabled() -> bool {
    threshold().is_some()
}

/// Counts `n` accesses by device `dev` to pages of the block of `addr` of
/// process `p` that are not in its memory (the caller checks that the
/// counters are on: [`enabled`]). No sleeping, no allocating that can:
/// the engine counts under the mirror lock.
pub(crate) fn add(p: &Process, dev: usize, addr: usize, n: u64) {
    let n = u16::try_from(n).unwrap_or(u16::MAX);
    p.with(addr, true, |b| {
        if let Some(b) = b {
            let c = &mut b.access[dev % MAX_DEVICES];
            *c = c.saturating_add(n);
        }
    });
}

/// Whether device `dev` has used the block of `addr` of process `p` in
/// place `access_threshold` times since its count last started, without
/// taking the count: a job in place whose table maps its range runs its
/// placement pass only then (`crate::drm::ioctl`'s `due`). Never if the counters
/// are off. Takes the process's spinlock only.
pub(crate) fn due(p: &Process, dev: usize, addr: usize) -> bool {
    threshold().is_some_and(|t| due_at(p, dev, addr, t))
}

fn due_at(p: &Process, dev: usize, addr: usize, threshold: u16) -> bool {
    p.with(addr, false, |b| {
        b.is_some_and(|b| b.access[dev % MAX_DEVICES] >= threshold)
    })
}

/// Whether device `dev` has used the block of `addr` of process `p` in
/// place `access_threshold` times since its count last started; if so, the
/// count is taken (cleared). Never if the counters are off.
pub(crate) fn take_due(p: &Process, dev: usize, addr: usize) -> bool {
    threshold().is_some_and(|t| take_at(p, dev, addr, t))
}

fn take_at(p: &Process, dev: usize, addr: usize, threshold: u16) -> bool {
    p.with(addr, false, |b| {
        let Some(b) = b else { return false };
        let c = &mut b.access[dev % MAX_DEVICES];
        let due = *c >= threshold;
        if due {
            *c = 0;
        }
        due
    })
}

#[kunit_tests(msvm_access)]
mod tests {
    use super::*;
    use crate::mm::page::BLOCK_SIZE;

    const A: usize = 0x7f00_0000_0000;

    fn counted(p: &Process, dev: usize, addr: usize) -> u16 {
        p.with(addr, false, |b| b.map_or(0, |b| b.access[dev]))
    }

    #[test]
    fn a_due_count_is_taken_once_per_device_and_block() -> Result {
        let p = Process::new()?;
        add(&p, 1, A, 200);
        assert!(!take_at(&p, 1, A, 256));
        assert_eq!(counted(&p, 1, A), 200);
        add(&p, 1, A + BLOCK_SIZE - 1, 56);
        // Another device's and another block's counts are their own.
        add(&p, 2, A, 5);
        assert_eq!(counted(&p, 2, A), 5);
        assert_eq!(counted(&p, 1, A + BLOCK_SIZE), 0);
        assert!(take_at(&p, 1, A, 256));
        assert_eq!(counted(&p, 1, A), 0);
        assert!(!take_at(&p, 1, A, 256));
        assert_eq!(counted(&p, 2, A), 5);
        // Counts saturate.
        add(&p, 3, A, u64::MAX);
        add(&p, 3, A, 9);
        assert_eq!(counted(&p, 3, A), u16::MAX);
        Ok(())
    }

    #[test]
    fn a_peek_at_a_due_count_leaves_it() -> Result {
        let p = Process::new()?;
        add(&p, 1, A, 255);
        assert!(!due_at(&p, 1, A, 256));
        add(&p, 1, A, 1);
        assert!(due_at(&p, 1, A, 256));
        assert!(due_at(&p, 1, A, 256));
        assert!(!due_at(&p, 2, A, 256));
        assert!(!due_at(&p, 1, A + BLOCK_SIZE, 256));
        assert_eq!(counted(&p, 1, A), 256);
        // Taking it clears it: no longer due.
        assert!(take_at(&p, 1, A, 256));
        assert!(!due_at(&p, 1, A, 256));
        Ok(())
    }

    #[test]
    fn unmapping_forgets_every_devices_counts() -> Result {
        let p = Process::new()?;
        for dev in 0..MAX_DEVICES {
            add(&p, dev, A, 300);
            add(&p, dev, A + BLOCK_SIZE, 300);
        }
        add(&p, 0, A + 2 * BLOCK_SIZE, 300);
        // Only the blocks the range touches (here the first two).
        p.invalidated(A + 4096, A + BLOCK_SIZE + 4096, true);
        for dev in 0..MAX_DEVICES {
            assert_eq!(counted(&p, dev, A), 0);
            assert_eq!(counted(&p, dev, A + BLOCK_SIZE), 0);
        }
        assert_eq!(counted(&p, 0, A + 2 * BLOCK_SIZE), 300);
        // Another process at the same addresses counts from nothing.
        let q = Process::new()?;
        assert_eq!(counted(&q, 0, A + 2 * BLOCK_SIZE), 0);
        Ok(())
    }
}
