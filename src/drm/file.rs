// SPDX-License-Identifier: GPL-2.0

//! An open msvm render node and its VM.
//!
//! # Lock order
//!
//! [`File::vm`] is taken first, with nothing held: the ioctls hold it for
//! their whole call (so that the VM, its mirror and its attributes stay),
//! and take the mm's locks, the VM's mirror lock and the pools' locks
//! inside it (see `Documentation/locking.rst`).

use kernel::{drm, new_mutex, prelude::*, sync::Mutex};

use super::driver::{MsvmDevice, MsvmDriver};
use crate::svm::Vm;

/// Per-open-file state.
#[pin_data]
pub(crate) struct File {
    /// The VM of this file, once created.
    #[pin]
    pub(crate) vm: Mutex<Option<Vm>>,
}

impl drm::file::DriverFile for File {
    type Driver = MsvmDriver;

    fn open(_dev: &MsvmDevice) -> Result<Pin<KBox<Self>>> {
        KBox::pin_init(
            try_pin_init!(File { vm <- new_mutex!(None) }? Error),
            GFP_KERNEL,
        )
    }
}
