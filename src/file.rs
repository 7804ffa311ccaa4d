// SPDX-License-Identifier: GPL-2.0

//! An open msvm render node.

use kernel::{drm, prelude::*};

use crate::driver::{MsvmDevice, MsvmDriver};

/// Per-open-file state (none yet: a VM will live here).
pub(crate) struct File;

impl drm::file::DriverFile for File {
    type Driver = MsvmDriver;

    fn open(_dev: &MsvmDevice) -> Result<Pin<KBox<Self>>> {
        Ok(KBox::new(Self, GFP_KERNEL)?.into())
    }
}
