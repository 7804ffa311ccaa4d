// SPDX-License-Identifier: GPL-2.0

//! Fault injection for tests (debugfs `evict_delay_ms`): an eviction of
//! device pages (making room, a consolidation, a device's teardown) waits
//! this long between unmapping the pages it moves and finalizing their
//! migration, and a device's teardown as long before it copies the pages
//! it leaves as orphans (`orphans.rs`), so that a test can make a process
//! exit, `munmap` or fork inside that window on purpose. Off (0) unless a
//! test sets it.

use kernel::sync::atomic::{Atomic, Relaxed};
use kernel::time::{delay::fsleep, Delta};

/// Milliseconds each eviction step waits with its pages unmapped.
pub(crate) static EVICT_DELAY_MS: Atomic<u64> = Atomic::new(0);

/// How many eviction steps have waited so far.
pub(crate) static EVICT_DELAYS: Atomic<u64> = Atomic::new(0);

/// The longest wait a test may ask for, in milliseconds.
pub(crate) const EVICT_DELAY_MAX_MS: u64 = 10_000;

/// Waits [`EVICT_DELAY_MS`], if a test set it: called by an eviction step
/// with its pages unmapped (migration entries in place), before they are
/// installed and the migration finalized; and by a teardown before it
/// copies an orphan's pages.
pub(super) fn evict_window() {
    let ms = EVICT_DELAY_MS.load(Relaxed).min(EVICT_DELAY_MAX_MS);
    if ms == 0 {
        return;
    }
    EVICT_DELAYS.add(1, Relaxed);
    // CAST: at most `EVICT_DELAY_MAX_MS`, which fits in `i64`.
    fsleep(Delta::from_millis(ms as i64));
}
