// SPDX-License-Identifier: GPL-2.0

//! The hardware boundary: what msvm asks of a device, one implementation
//! per kind of device (after nova-core's `falcon/hal.rs`: a trait, a
//! `&'static dyn` per device kind).
//!
//! - [`hal`]: the trait, and the CPU engine's implementation for devices
//!   that are memory only (`ivshmem-plain`, generic devices);
//! - [`model`]: msvm-gpu, the PCIe GPU model of `device/`
//!   (Documentation/hardware.rst);
//! - [`regs`]: msvm-gpu's BAR0 registers;
//! - [`irq`]: msvm-gpu's interrupt;
//! - [`copy`]: msvm-gpu's copy engine (which migrations use:
//!   `crate::vram::Blit`).

use kernel::sync::Arc;

pub(crate) mod copy;
pub(crate) mod hal;
pub(crate) mod irq;
pub(crate) mod model;
pub(crate) mod regs;

use copy::CopyEngine;
use irq::Interrupt;

/// A device's engines, started at probe ([`hal::Hal::start`]) and stopped
/// when they are dropped, before the device is unbound.
pub(crate) struct Engines<'a> {
    copy: Arc<CopyEngine>,
    irq: Interrupt<'a>,
}

impl<'a> Engines<'a> {
    /// The copy engine.
    pub(crate) fn copy(&self) -> &Arc<CopyEngine> {
        &self.copy
    }
}

impl Drop for Engines<'_> {
    fn drop(&mut self) {
        // The engine stops before its interrupt goes (`irq` is dropped
        // after this).
        self.copy.shut_down();
    }
}
