// SPDX-License-Identifier: GPL-2.0

//! The device's requests on the bus (its DMA): refused without bus
//! mastering; behind a switch, a request whose whole range lies in a
//! sibling port's decoding window goes to that sibling's VRAM inside the
//! switch (`crate::switch`); any other goes upstream, to the DMA space
//! (directly, through QEMU, or refused).

use std::ops::Range;

use super::*;
use crate::dma::DmaCounts;

/// The largest request a device sends that the switch routes by itself:
/// no PCIe request crosses a 4 KiB boundary.
const PIECE: u64 = 4096;

impl Device {
    /// Refused unless the command register lets the device master the bus.
    fn may_master(&self) -> Result<(), Error> {
        match self.state()?.config.bus_master() {
            true => Ok(()),
            false => Err(Error::NoBusMaster),
        }
    }

    /// Whether a request of `n` bytes at `addr` that the switch did not
    /// route whole goes in pieces: when part of it lies in a sibling's
    /// window (or in two siblings'), it goes as a device's requests do on
    /// PCIe, none crossing a 4 KiB boundary, each routed or sent upstream
    /// by itself ([`pieces`]).
    fn in_pieces(&self, addr: u64, n: usize) -> bool {
        self.switch.as_ref().is_some_and(|p| p.touches(addr, n))
    }

    /// A DMA read by the device at `addr`: refused without bus mastering;
    /// through the switch to a sibling, or else through the DMA space
    /// (refused outside it); in pieces where it spans both
    /// ([`Self::in_pieces`]).
    pub fn dma_read(&self, addr: u64, buf: &mut [u8], remote: &dyn Remote) -> Result<(), Error> {
        self.may_master()?;
        if let Some(r) = self.routed(addr, buf.len(), |m, off| m.read(off, buf)) {
            return r;
        }
        if !self.in_pieces(addr, buf.len()) {
            return self.dma.read(addr, buf, remote);
        }
        for r in pieces(addr, buf.len()) {
            let (a, b) = (addr + r.start as u64, &mut buf[r]);
            let n = b.len();
            match self.routed(a, n, |m, off| m.read(off, b)) {
                Some(res) => res?,
                None => self.dma.read(a, b, remote)?,
            }
        }
        Ok(())
    }

    /// A DMA write by the device at `addr`, as [`Device::dma_read`] reads.
    pub fn dma_write(&self, addr: u64, data: &[u8], remote: &dyn Remote) -> Result<(), Error> {
        self.may_master()?;
        if let Some(r) = self.routed(addr, data.len(), |m, off| m.write(off, data)) {
            return r;
        }
        if !self.in_pieces(addr, data.len()) {
            return self.dma.write(addr, data, remote);
        }
        for r in pieces(addr, data.len()) {
            let (a, d) = (addr + r.start as u64, &data[r]);
            match self.routed(a, d.len(), |m, off| m.write(off, d)) {
                Some(res) => res?,
                None => self.dma.write(a, d, remote)?,
            }
        }
        Ok(())
    }

    /// `f(sibling's VRAM, offset)` if the switch routes `[addr, addr + n)`
    /// to a sibling; `None` if it goes upstream.
    fn routed(
        &self,
        addr: u64,
        n: usize,
        f: impl FnOnce(&Mmap, u64) -> Result<(), Error>,
    ) -> Option<Result<(), Error>> {
        self.switch.as_ref().and_then(|p| p.reach(addr, n, f))
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

/// `[0, n)` for a request at `addr` in the pieces that cross no 4 KiB
/// boundary.
fn pieces(addr: u64, n: usize) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < n {
        let a = addr + at as u64;
        let end = (at + (PIECE - a % PIECE) as usize).min(n);
        out.push(at..end);
        at = end;
    }
    out
}
