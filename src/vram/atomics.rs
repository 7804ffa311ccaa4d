// SPDX-License-Identifier: GPL-2.0

//! The lock under which the engines add to a pool's VRAM words
//! (ATOMIC_ADD: the CPU engines of every device, through the BAR, and the
//! device's own job engine), and who waits for it: a holder that keeps it
//! across many windows (a pipeline of jobs, `crate::engine`) lets go when
//! another waits.
//!
//! # Lock order
//!
//! Taken last: under a VM's mirror lock, and under the job engine's ring
//! for the device's own jobs; nothing is taken under it.

use kernel::{
    new_mutex,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        Mutex, MutexGuard,
    },
};

/// The lock of a pool's VRAM words' read-modify-writes.
#[pin_data]
pub(crate) struct Atomics {
    #[pin]
    lock: Mutex<()>,
    /// Lockers waiting for `lock`.
    waiting: Atomic<u32>,
}

impl Atomics {
    /// A new lock, free.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            lock <- new_mutex!((), "VramPool::atomics"),
            waiting: Atomic::new(0),
        })
    }

    /// Takes the lock, counted as waiting for it meanwhile.
    pub(crate) fn lock(&self) -> MutexGuard<'_, ()> {
        self.waiting.add(1, Relaxed);
        let guard = self.lock.lock();
        self.waiting.fetch_sub(1, Relaxed);
        guard
    }

    /// Whether another locker waits for the lock.
    pub(crate) fn contended(&self) -> bool {
        self.waiting.load(Relaxed) > 0
    }
}
