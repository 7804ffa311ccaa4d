// SPDX-License-Identifier: GPL-2.0

//! The device's requests on the bus (its DMA): refused without bus
//! mastering; behind a switch, a request whose whole range lies in a
//! sibling port's decoding window goes to that sibling's VRAM inside the
//! switch (`crate::switch`); any other goes upstream, to the DMA space
//! (directly, through QEMU, or refused).

use super::*;
use crate::dma::DmaCounts;

impl Device {
    /// Refused unless the command register lets the device master the bus.
    fn may_master(&self) -> Result<(), Error> {
        match self.state()?.config.bus_master() {
            true => Ok(()),
            false => Err(Error::NoBusMaster),
        }
    }

    /// A DMA read by the device at `addr`: refused without bus mastering;
    /// through the switch to a sibling, or else through the DMA space
    /// (refused outside it).
    pub fn dma_read(&self, addr: u64, buf: &mut [u8], remote: &dyn Remote) -> Result<(), Error> {
        self.may_master()?;
        let n = buf.len();
        if let Some(r) = self
            .switch
            .as_ref()
            .and_then(|p| p.reach(addr, n, |m, off| m.read(off, buf)))
        {
            return r;
        }
        self.dma.read(addr, buf, remote)
    }

    /// A DMA write by the device at `addr`, as [`Device::dma_read`] reads.
    pub fn dma_write(&self, addr: u64, data: &[u8], remote: &dyn Remote) -> Result<(), Error> {
        self.may_master()?;
        if let Some(r) = self
            .switch
            .as_ref()
            .and_then(|p| p.reach(addr, data.len(), |m, off| m.write(off, data)))
        {
            return r;
        }
        self.dma.write(addr, data, remote)
    }

    /// An atomic add of `v` to the 64-bit word at DMA address `addr`
    /// (8-byte aligned): through the switch, a locked add on the sibling's
    /// VRAM (PCIe AtomicOps route peer to peer inside a switch); else the
    /// DMA space's (directly only: refused where QEMU serves the word).
    pub fn dma_add(&self, addr: u64, v: u64) -> Result<(), Error> {
        self.may_master()?;
        if let Some(r) = self
            .switch
            .as_ref()
            .and_then(|p| p.reach(addr, 8, |m, off| m.fetch_add_u64(off, v)))
        {
            return r;
        }
        self.dma.fetch_add(addr, v)
    }

    /// The DMA counters since the device started: the DMA space's, and the
    /// bytes routed through the switch.
    pub fn dma_counts(&self) -> DmaCounts {
        DmaCounts {
            switch_bytes: self.switch.as_ref().map_or(0, |p| p.bytes()),
            ..self.dma.counts()
        }
    }
}
