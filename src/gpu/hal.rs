// SPDX-License-Identifier: GPL-2.0

//! The hardware abstraction: one implementation per kind of device.

use kernel::{
    device::{Bound, Core},
    pci,
    prelude::*,
};

/// What msvm asks of a device's hardware. Today: that it is the device
/// the id table says, with the VRAM its BAR shows, and that the parts msvm
/// will use work. The engines' operations (copies, jobs, the MMU, faults)
/// join it as the driver comes to use the device model's
/// (Documentation/hardware.rst, "Status").
pub(crate) trait Hal: Sync {
    /// Enables what the device needs besides memory decoding (which the
    /// probe enables for every device, until it is unbound).
    fn enable(&self, pdev: &pci::Device<Core<'_>>);

    /// Checks, at probe, that `pdev` is this kind of device, that its
    /// registers agree with the `vram_len` bytes of its VRAM BAR, and that
    /// its interrupt and engines answer (self-tests); an error refuses the
    /// device.
    fn identify(&self, pdev: &pci::Device<Bound>, vram_len: u64) -> Result;
}

/// A device that is memory only (QEMU's `ivshmem-plain`, a generic
/// device): msvm's CPU engine does its work, and there is nothing to ask
/// of it.
pub(crate) struct CpuEngine;

impl Hal for CpuEngine {
    fn enable(&self, _pdev: &pci::Device<Core<'_>>) {}

    fn identify(&self, _pdev: &pci::Device<Bound>, _vram_len: u64) -> Result {
        Ok(())
    }
}
