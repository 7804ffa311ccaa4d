// SPDX-License-Identifier: GPL-2.0

//! An open msvm render node and its VM.
//!
//! # Lock order
//!
//! [`File::vm`] is taken first, with nothing held: the ioctls hold it for
//! their whole call (so that the VM, its mirror and its attributes stay),
//! and take the mm's locks, the VM's mirror lock and the pools' locks
//! inside it (see `Documentation/locking.rst`).

use kernel::{
    drm, new_mutex,
    prelude::*,
    sync::{atomic::Atomic, Mutex},
};

use super::driver::{MsvmDevice, MsvmDriver};
use crate::svm::Vm;

/// Per-open-file state.
#[pin_data]
pub(crate) struct File {
    /// The VM of this file, once created.
    #[pin]
    pub(crate) vm: Mutex<Option<Vm>>,
    /// The address of the VM's `mm_struct` (0: no VM), for fdinfo, which
    /// does not wait for the VM's lock: a key only, set and cleared with
    /// the VM under its lock.
    pub(crate) mm_key: Atomic<usize>,
    /// Nanoseconds its EXEC jobs took (fdinfo's `drm-engine-compute`).
    pub(crate) engine_ns: Atomic<u64>,
    /// The device memory fdinfo last found the VM's process holding.
    pub(crate) vram_seen: Atomic<u64>,
}

impl drm::file::DriverFile for File {
    type Driver = MsvmDriver;

    fn open(_dev: &MsvmDevice) -> Result<Pin<KBox<Self>>> {
        KBox::pin_init(
            try_pin_init!(File {
                vm <- new_mutex!(None),
                mm_key: Atomic::new(0),
                engine_ns: Atomic::new(0),
                vram_seen: Atomic::new(0),
            }? Error),
            GFP_KERNEL,
        )
    }
}
