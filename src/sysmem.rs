// SPDX-License-Identifier: GPL-2.0

//! System RAM for pages leaving a device: the 2 MiB system folios a device
//! folio moves into whole, with the fault injection tests use to reach the
//! 4 KiB fallbacks (debugfs `fail_large_system`). Below both the migrations
//! (`crate::migrate`) and the pool's eviction (`crate::vram`).

use kernel::{
    mm::virt::VmaRef,
    sync::atomic::{Atomic, Relaxed},
};

use crate::mm::numa::Home;
use crate::mm::page::{How, NewPage};

/// 2 MiB system folio allocations still to fail on purpose (debugfs
/// `fail_large_system`): tests reach the 4 KiB fallbacks and eviction's
/// retries through it.
pub(crate) static FAIL_LARGE_SYSTEM: Atomic<u64> = Atomic::new(0);

/// Whether this 2 MiB system folio allocation is to fail on purpose (one
/// of [`FAIL_LARGE_SYSTEM`]'s, which it uses up).
fn fail_large_system() -> bool {
    let mut v = FAIL_LARGE_SYSTEM.load(Relaxed);
    while v > 0 {
        match FAIL_LARGE_SYSTEM.cmpxchg(v, v - 1, Relaxed) {
            Ok(_) => return true,
            Err(now) => v = now,
        }
    }
    false
}

/// A 2 MiB system folio for the block of `addr` in `vma`, if one is free
/// (and no test asked for a failure), on the node a NUMA policy or `home`
/// says.
pub(crate) fn large_system_folio(vma: &VmaRef, addr: usize, home: Home) -> Option<NewPage> {
    if fail_large_system() {
        return None;
    }
    NewPage::home(Some((vma, addr)), home, How::Large)
}
