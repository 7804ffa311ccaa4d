// SPDX-License-Identifier: GPL-2.0

//! GEM objects. The DRM core needs an object type for a GEM driver; msvm
//! works on process memory, not buffer objects, and creates none yet.

use kernel::{drm::gem, prelude::*};

use super::driver::{MsvmDevice, MsvmDriver};

/// The (empty) driver part of an msvm GEM object.
#[pin_data]
pub(crate) struct MsvmObject {}

impl gem::DriverObject for MsvmObject {
    type Driver = MsvmDriver;
    type Args = ();

    fn new(_dev: &MsvmDevice, _size: usize, _args: ()) -> impl PinInit<Self, Error> {
        try_pin_init!(MsvmObject {})
    }
}
