// SPDX-License-Identifier: GPL-2.0

//! The hardware abstraction: one implementation per kind of device.

use kernel::{
    device::{Bound, Core},
    pci,
    prelude::*,
};

use super::Engines;

/// What msvm asks of a device's hardware. Today: that it is the device
/// the id table says, with the VRAM its BAR shows, and its copy engine for
/// migrations. The other engines' operations (jobs, the MMU, faults) join
/// it as the driver comes to use the device model's
/// (Documentation/hardware.rst, "Status").
pub(crate) trait Hal: Sync {
    /// Enables what the device needs besides memory decoding (which the
    /// probe enables for every device, until it is unbound).
    fn enable(&self, pdev: &pci::Device<Core<'_>>);

    /// Checks, at probe, that `pdev` is this kind of device, that its
    /// registers agree with the `vram_len` bytes of its VRAM BAR, and that
    /// its interrupt and engines answer (self-tests), and starts them for
    /// as long as `pdev` is bound: `None` for a device whose work msvm's
    /// CPU engine does. An error refuses the device.
    fn start<'a>(&self, pdev: &'a pci::Device<Bound>, vram_len: u64)
        -> Result<Option<Engines<'a>>>;
}

/// A device that is memory only (QEMU's `ivshmem-plain`, a generic
/// device): msvm's CPU engine does its work, and there is nothing to ask
/// of it.
pub(crate) struct CpuEngine;

impl Hal for CpuEngine {
    fn enable(&self, _pdev: &pci::Device<Core<'_>>) {}

    fn start<'a>(
        &self,
        _pdev: &'a pci::Device<Bound>,
        _vram_len: u64,
    ) -> Result<Option<Engines<'a>>> {
        Ok(None)
    }
}
