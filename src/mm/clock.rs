// SPDX-License-Identifier: GPL-2.0

//! The monotonic clock in milliseconds, for the placement heuristics that
//! keep time in a few bits (`kernel::time::Instant` gives no raw value).

use kernel::bindings;

/// Milliseconds of the monotonic clock (`ktime_get()`).
pub(crate) fn now_ms() -> u64 {
    // SAFETY: `ktime_get()` has no preconditions; it may be called from any
    // context but NMI.
    let ns = unsafe { bindings::ktime_get() };
    // The monotonic clock starts at zero at boot and only grows.
    u64::try_from(ns).unwrap_or(0) / 1_000_000
}
