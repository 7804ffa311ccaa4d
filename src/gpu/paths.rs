// SPDX-License-Identifier: GPL-2.0

//! Which way msvm-gpu's DMA went (interface 1.6): bytes to memory it
//! reaches directly, through the root complex, and to a peer inside its
//! switch, as the device counts them (`DMA_DIRECT`, `DMA_REMOTE`,
//! `DMA_SWITCH`; Documentation/hardware.rst). What shows that a P2P
//! mapping msvm made took the path `pci_p2pdma` decided (debugfs
//! `dma_paths`).

use kernel::io::Io;

use super::regs::{
    counter64, DMA_DIRECT_HI, DMA_DIRECT_LO, DMA_REMOTE_HI, DMA_REMOTE_LO, DMA_SWITCH_HI,
    DMA_SWITCH_LO,
};
use super::Hw;

/// The device's DMA byte counts since its reset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct DmaPaths {
    /// To memory the device reaches directly (guest RAM).
    pub(crate) direct: u64,
    /// Through the root complex, and its IOMMU if any.
    pub(crate) remote: u64,
    /// To a peer inside its switch, by bus address.
    pub(crate) switch: u64,
}

impl Hw {
    /// The device's DMA byte counts, while it is bound and answers.
    pub(crate) fn dma_paths(&self) -> Option<DmaPaths> {
        let io = self.jobs.bar().try_access()?;
        Some(DmaPaths {
            direct: counter64(
                || u32::from(io.read(DMA_DIRECT_HI).value()),
                || u32::from(io.read(DMA_DIRECT_LO).value()),
            )?,
            remote: counter64(
                || u32::from(io.read(DMA_REMOTE_HI).value()),
                || u32::from(io.read(DMA_REMOTE_LO).value()),
            )?,
            switch: counter64(
                || u32::from(io.read(DMA_SWITCH_HI).value()),
                || u32::from(io.read(DMA_SWITCH_LO).value()),
            )?,
        })
    }
}
