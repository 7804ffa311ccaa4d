// SPDX-License-Identifier: GPL-2.0

//! Contention counts of msvm's global locks (debugfs `locks`): how often
//! each was taken where it could wait, and how often it was found held.
//!
//! The lock is taken plainly (so lockdep and `might_sleep` see every
//! acquisition); "found held" is a hint: the holder sets a flag once it
//! has the lock and clears it before it lets go ([`Counted`]), and an
//! acquirer that sees the flag counts itself contended.

use core::ops::{Deref, DerefMut};

use kernel::sync::atomic::{Atomic, Relaxed};

/// The counts of one lock.
pub(crate) struct LockStat {
    acquired: Atomic<u64>,
    contended: Atomic<u64>,
    held: Atomic<bool>,
}

impl LockStat {
    pub(crate) const fn new() -> Self {
        Self {
            acquired: Atomic::new(0),
            contended: Atomic::new(0),
            held: Atomic::new(false),
        }
    }

    /// Takes the lock with `lock`, counted.
    pub(crate) fn lock<G>(&'static self, lock: impl FnOnce() -> G) -> Counted<G> {
        self.acquired.add(1, Relaxed);
        if self.held.load(Relaxed) {
            self.contended.add(1, Relaxed);
        }
        self.taken(lock())
    }

    /// A guard taken otherwise (a `try_lock` that succeeded), flagged.
    pub(crate) fn taken<G>(&'static self, guard: G) -> Counted<G> {
        self.held.store(true, Relaxed);
        Counted { guard, stat: self }
    }

    /// Acquisitions that could wait, and those that found the lock held.
    pub(crate) fn figures(&self) -> (u64, u64) {
        (self.acquired.load(Relaxed), self.contended.load(Relaxed))
    }
}

/// A lock's guard, flagged held in its [`LockStat`] until it goes.
pub(crate) struct Counted<G> {
    guard: G,
    stat: &'static LockStat,
}

impl<G: Deref> Deref for Counted<G> {
    type Target = G::Target;

    fn deref(&self) -> &Self::Target {
        &self.guard
    }
}

impl<G: DerefMut> DerefMut for Counted<G> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.guard
    }
}

impl<G> Drop for Counted<G> {
    fn drop(&mut self) {
        // Before the guard (a field) unlocks.
        self.stat.held.store(false, Relaxed);
    }
}
