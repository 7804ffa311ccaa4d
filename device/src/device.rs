// SPDX-License-Identifier: GPL-2.0

//! The device as QEMU sees it: VFIO regions (configuration space, BAR0,
//! BAR2), an MSI interrupt signalled through an eventfd, a DMA space, and
//! VRAM that the device and the guest's CPU share; behind a switch, its
//! port of the switch.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::{Condvar, Mutex};

use crate::copy;
use crate::dma::{DmaSpace, NoRemote, Remote};
use crate::fault::{self, Record, Resolution, Slot};
use crate::job;
use crate::mem::{memfd, Mmap};
use crate::mmu::{self, Tlb};
use crate::pci::Config;
use crate::proto::Writer;
use crate::regs::{self, Regs, BAR0_SIZE};
use crate::ring;
use crate::switch;
use crate::Error;

/// VFIO region indices (`VFIO_PCI_*_REGION_INDEX`).
pub mod region {
    /// BAR0: registers, the MSI-X table and PBA.
    pub const BAR0: u32 = 0;
    /// BAR2: VRAM.
    pub const BAR2: u32 = 2;
    /// Configuration space.
    pub const CONFIG: u32 = 7;
    /// Regions a PCI device has (BARs 0-5, ROM, config, VGA).
    pub const COUNT: u32 = 9;
}

/// VFIO interrupt indices (`VFIO_PCI_*_IRQ_INDEX`).
pub mod irq {
    /// MSI.
    pub const MSI: u32 = 1;
    /// The error interrupt: the device reports itself broken (QEMU stops
    /// the guest, as for an uncorrectable PCIe error).
    pub const ERR: u32 = 3;
    /// Interrupt indices a PCI device has (INTx, MSI, MSI-X, ERR, REQ).
    pub const COUNT: u32 = 5;
}

/// `vfio_region_info` flags.
mod rflags {
    pub const READ: u32 = 1 << 0;
    pub const WRITE: u32 = 1 << 1;
    pub const MMAP: u32 = 1 << 2;
    pub const CAPS: u32 = 1 << 3;
}

/// `vfio_irq_set` flags.
mod set {
    pub const DATA_NONE: u32 = 1 << 0;
    pub const DATA_BOOL: u32 = 1 << 1;
    pub const DATA_EVENTFD: u32 = 1 << 2;
    pub const ACTION_TRIGGER: u32 = 1 << 5;
}

/// Bytes of `vfio_region_info` after the message header.
const REGION_INFO_LEN: u32 = 32;
/// Bytes of the sparse-mmap capability with one area.
const SPARSE_CAP_LEN: u32 = 16 + 16;

/// Configuration space and registers, under one lock.
struct State {
    config: Config,
    regs: Regs,
    ce: ring::State,
    job: ring::State,
    mmu: mmu::Regs,
    fault: fault::Regs,
    /// The connection is gone: the engines stop.
    stop: bool,
}

/// The device.
pub struct Device {
    state: Mutex<State>,
    /// Signalled when an engine may have work (a doorbell, a reset) or
    /// must stop.
    work: Condvar,
    /// The MSI interrupt's eventfd, while QEMU has MSI enabled.
    msi: Mutex<Option<File>>,
    /// The error interrupt's eventfd.
    err: Mutex<Option<File>>,
    dma: DmaSpace,
    /// Its downstream port, behind a switch.
    switch: Option<switch::Port>,
    vram_fd: OwnedFd,
    vram: Mmap,
}

impl Device {
    /// A device with `vram` bytes of VRAM (a new memfd), on a root port.
    pub fn new(vram: u64) -> Result<Self, Error> {
        Self::build(vram, None)
    }

    /// A device with `vram` bytes of VRAM on port `port` of the switch
    /// whose directory is `dir` (`crate::switch`): its VRAM is the file
    /// `dir/portN.vram`, made anew.
    pub fn behind_switch(vram: u64, dir: &Path, port: usize) -> Result<Self, Error> {
        Self::build(vram, Some((dir, port)))
    }

    fn build(vram: u64, switch: Option<(&Path, usize)>) -> Result<Self, Error> {
        if vram == 0 || vram % (2 << 20) != 0 || !vram.is_power_of_two() {
            return Err(Error::Malformed(
                "VRAM size: a power of two, 2 MiB at least",
            ));
        }
        let (switch, vram_fd) = match switch {
            Some((dir, port)) => {
                let (p, fd) = switch::Port::new(dir, port, vram)?;
                (Some(p), fd)
            }
            None => (None, memfd("msvm-gpu-vram", vram)?),
        };
        let len = usize::try_from(vram).map_err(|_| Error::Malformed("VRAM size"))?;
        let map = Mmap::new(&vram_fd, 0, len)?;
        Ok(Self {
            state: Mutex::new(State {
                config: Config::new(),
                regs: Regs::new(vram),
                ce: ring::State::default(),
                job: ring::State::default(),
                mmu: mmu::Regs::default(),
                fault: fault::Regs::default(),
                stop: false,
            }),
            work: Condvar::new(),
            msi: Mutex::new(None),
            err: Mutex::new(None),
            dma: DmaSpace::new(),
            switch,
            vram_fd,
            vram: map,
        })
    }

    /// Bytes of VRAM.
    pub fn vram_size(&self) -> u64 {
        self.vram.len() as u64
    }

    /// The DMA space.
    pub fn dma(&self) -> &DmaSpace {
        &self.dma
    }

    /// The fault buffer's counters.
    pub fn fault_counts(&self) -> fault::Counts {
        self.state().map(|s| s.fault.counts).unwrap_or_default()
    }

    fn state(&self) -> Result<std::sync::MutexGuard<'_, State>, Error> {
        self.state.lock().map_err(|_| Error::Poisoned)
    }

    /// The body of a `DEVICE_GET_INFO` reply.
    pub fn info(&self) -> Vec<u8> {
        const PCI: u32 = 1 << 1;
        const RESET: u32 = 1 << 0;
        let mut w = Writer::new();
        w.u32(16)
            .u32(PCI | RESET)
            .u32(region::COUNT)
            .u32(irq::COUNT);
        w.0
    }

    /// The body of a `DEVICE_GET_REGION_INFO` reply for `index`, cut to the
    /// client's `argsz` (the full size is in the body's `argsz`, so that
    /// the client asks again), and the fd to map it with when it fits.
    pub fn region_info(&self, index: u32, argsz: u32) -> Result<(Vec<u8>, Option<RawFd>), Error> {
        let (size, flags) = match index {
            region::BAR0 => (BAR0_SIZE, rflags::READ | rflags::WRITE),
            region::BAR2 => (
                self.vram_size(),
                rflags::READ | rflags::WRITE | rflags::MMAP | rflags::CAPS,
            ),
            region::CONFIG => (crate::pci::SIZE as u64, rflags::READ | rflags::WRITE),
            i if i < region::COUNT => (0, 0),
            i => return Err(Error::NoIndex(i)),
        };
        let caps = flags & rflags::CAPS != 0;
        let full = REGION_INFO_LEN + if caps { SPARSE_CAP_LEN } else { 0 };
        let mut w = Writer::new();
        w.u32(full)
            .u32(flags)
            .u32(index)
            .u32(if caps { REGION_INFO_LEN } else { 0 })
            .u64(size)
            .u64(0);
        if caps {
            // VFIO_REGION_INFO_CAP_SPARSE_MMAP, version 1, no next; one
            // area: the whole of BAR2.
            w.u16(1).u16(1).u32(0).u32(1).u32(0).u64(0).u64(size);
        }
        let fits = argsz >= full;
        w.0.truncate(argsz.min(full) as usize);
        let fd = (fits && caps).then(|| self.vram_fd.as_raw_fd());
        Ok((w.0, fd))
    }

    /// The body of a `DEVICE_GET_IRQ_INFO` reply: MSI and the error
    /// interrupt have one interrupt each, signalled by eventfd; the other
    /// indices none (no INTx, no MSI-X, no request interrupt).
    pub fn irq_info(&self, index: u32) -> Result<Vec<u8>, Error> {
        const EVENTFD: u32 = 1 << 0;
        let (flags, count) = match index {
            irq::MSI | irq::ERR => (EVENTFD, 1),
            i if i < irq::COUNT => (0, 0),
            i => return Err(Error::NoIndex(i)),
        };
        let mut w = Writer::new();
        w.u32(16).u32(flags).u32(index).u32(count);
        Ok(w.0)
    }

    /// `DEVICE_SET_IRQS` for MSI or the error interrupt, each one
    /// interrupt: with an eventfd, QEMU connects it (MSI enabled); with
    /// none, or `count` 0, disconnects it; with no data, or a true bool
    /// in `data`, triggers it.
    /// Masking is QEMU's (it emulates the MSI capability).
    pub fn set_irqs(
        &self,
        flags: u32,
        index: u32,
        start: u32,
        count: u32,
        mut fds: Vec<OwnedFd>,
        data: &[u8],
    ) -> Result<(), Error> {
        let slot = match index {
            irq::MSI => &self.msi,
            irq::ERR => &self.err,
            _ if count == 0 => return Ok(()),
            i => return Err(Error::NoIndex(i)),
        };
        if flags & set::ACTION_TRIGGER == 0 {
            return Ok(());
        }
        if start.checked_add(count).is_none_or(|end| end > 1) || fds.len() > 1 {
            return Err(Error::Malformed("interrupt range"));
        }
        if flags & set::DATA_EVENTFD != 0 {
            *slot.lock().map_err(|_| Error::Poisoned)? =
                fds.pop().filter(|_| count == 1).map(File::from);
        } else if flags & (set::DATA_NONE | set::DATA_BOOL) != 0 {
            if count == 0 {
                *slot.lock().map_err(|_| Error::Poisoned)? = None;
            } else if index == irq::MSI
                && (flags & set::DATA_NONE != 0 || data.first().is_some_and(|&b| b != 0))
            {
                self.signal();
            }
        }
        Ok(())
    }

    /// Signals the MSI interrupt, if QEMU connected it.
    fn signal(&self) {
        let Ok(fd) = self.msi.lock() else { return };
        if let Some(mut f) = fd.as_ref() {
            let _ = f.write_all(&1u64.to_ne_bytes());
        }
    }

    /// Raises interrupt causes (`regs::cause`).
    pub fn raise(&self, causes: u32) -> Result<(), Error> {
        let mut s = self.state()?;
        let fx = s.regs.raise(causes);
        self.interrupt(&mut s, fx);
        Ok(())
    }

    /// Does what raising causes asked (`fx`), under the state's lock (so
    /// that the counters reach memory in the order they were counted):
    /// writes the counters, or, if they cannot be written, raises their
    /// causes into `IRQ_STATUS`; then signals the interrupt if there is
    /// anything to signal.
    fn interrupt(&self, s: &mut State, mut fx: regs::Effects) {
        if let Some(c) = fx.counted.take() {
            let written =
                s.config.bus_master() && self.dma.write(c.addr, &c.bytes, &NoRemote).is_ok();
            if written {
                fx.signal |= c.causes;
            } else {
                fx.signal |= s.regs.uncount(c.causes);
            }
        }
        if fx.signal != 0 {
            self.signal();
        }
    }

    /// A read of `buf.len()` bytes at `off` in region `index`.
    pub fn region_read(&self, index: u32, off: u64, buf: &mut [u8]) -> Result<(), Error> {
        match index {
            region::CONFIG => self.state()?.config.read(off, buf).ok_or(Error::OutOfRange),
            region::BAR0 => {
                check_access(off, buf.len(), BAR0_SIZE)?;
                let s = self.state()?;
                match Block::of(off) {
                    Block::Copy => regs::read_bytes(off, buf, |r| s.ce.read32(r - copy::BASE)),
                    Block::Job => regs::read_bytes(off, buf, |r| s.job.read32(r - job::BASE)),
                    Block::Mmu => regs::read_bytes(off, buf, |r| s.mmu.read32(r)),
                    Block::Fault => regs::read_bytes(off, buf, |r| s.fault.read32(r)),
                    Block::Main => {
                        let dma = self.dma_counts();
                        s.regs.read(off, buf, s.config.bus_master(), &dma)
                    }
                }
                Ok(())
            }
            region::BAR2 => self.vram.read(off, buf),
            i => Err(Error::NoIndex(i)),
        }
    }

    /// A write of `data` at `off` in region `index`.
    pub fn region_write(&self, index: u32, off: u64, data: &[u8]) -> Result<(), Error> {
        match index {
            region::CONFIG => {
                let mut s = self.state()?;
                s.config.write(off, data).ok_or(Error::OutOfRange)?;
                // BAR2 and memory decoding, for the switch's peers.
                if let Some(port) = &self.switch {
                    port.publish(s.config.bar2(), s.config.memory());
                }
                Ok(())
            }
            region::BAR0 => {
                check_access(off, data.len(), BAR0_SIZE)?;
                {
                    let mut s = self.state()?;
                    let block = Block::of(off);
                    if block != Block::Main {
                        let s = &mut *s;
                        let mut kick = false;
                        // `CTRL` and `INV_SEQNO` are write-only: a partial
                        // write takes zeroes for the rest.
                        let (base, ring) = match block {
                            Block::Copy => (copy::BASE, Some(&mut s.ce)),
                            Block::Job => (job::BASE, Some(&mut s.job)),
                            _ => (0, None),
                        };
                        if let Some(ring) = ring {
                            let words = regs::write_bytes(off, data, |r| match r - base {
                                ring::reg::CTRL => 0,
                                r => ring.read32(r),
                            });
                            for (r, v) in words {
                                kick |= ring.write32(r - base, v);
                            }
                        } else if block == Block::Fault {
                            // `CTRL` is write-only and `STATUS` write-1-to-clear:
                            // a partial write takes zeroes for the rest.
                            let words = regs::write_bytes(off, data, |r| match r {
                                fault::reg::CTRL | fault::reg::STATUS => 0,
                                r => s.fault.read32(r),
                            });
                            for (r, v) in words {
                                kick |= s.fault.write32(r, v);
                            }
                        } else {
                            let words = regs::write_bytes(off, data, |r| match r {
                                mmu::reg::INV_SEQNO => 0,
                                r => s.mmu.read32(r),
                            });
                            for (r, v) in words {
                                kick |= s.mmu.write32(r, v);
                            }
                        }
                        if kick {
                            self.work.notify_all();
                        }
                        return Ok(());
                    }
                    let bm = s.config.bus_master();
                    let fx = s.regs.write(off, data, bm);
                    self.interrupt(&mut s, fx);
                };
                Ok(())
            }
            region::BAR2 => self.vram.write(off, data),
            i => Err(Error::NoIndex(i)),
        }
    }

    /// Device reset: registers to their reset values, the copy engine's
    /// too (a command under way completes first, unfenced).
    pub fn reset(&self) -> Result<(), Error> {
        let mut s = self.state()?;
        s.regs.reset(self.dma_counts());
        s.ce.reset();
        s.job.reset();
        s.mmu.reset();
        s.fault.reset();
        self.work.notify_all();
        Ok(())
    }

    /// Runs the copy engine until [`Device::stop`]: each command the
    /// doorbell shows, its DMA through `remote` where the DMA space says
    /// so. Call it from a thread of its own, never from the thread that
    /// serves QEMU.
    pub fn run_copy_engine(&self, remote: &dyn Remote) -> Result<(), Error> {
        loop {
            let work = {
                let mut s = self.state()?;
                while !s.stop && !s.ce.has_work() {
                    s = self.work.wait(s).map_err(|_| Error::Poisoned)?;
                }
                if s.stop {
                    return Ok(());
                }
                s.ce.start()
            };
            let work = match work {
                Ok(w) => w,
                Err(_) => {
                    self.raise(regs::cause::ERROR)?;
                    continue;
                }
            };
            let r = copy::execute(self, remote, &work);
            let cause = {
                let mut s = self.state()?;
                match r {
                    Ok(c) => {
                        if s.ce.complete(work.gen) && c.flags & copy::flag::INTERRUPT != 0 {
                            regs::cause::COMPLETION
                        } else {
                            0
                        }
                    }
                    Err((fault, seqno)) => {
                        if s.ce.fail(work.gen, fault, seqno) {
                            regs::cause::ERROR
                        } else {
                            0
                        }
                    }
                }
            };
            if cause != 0 {
                self.raise(cause)?;
            }
        }
    }

    /// Runs the job engine until [`Device::stop`], as
    /// [`Device::run_copy_engine`] runs the copy engine; its TLB lives here,
    /// and the invalidations requested are done between two accesses, or
    /// while idle.
    pub fn run_job_engine(&self, remote: &dyn Remote) -> Result<(), Error> {
        let mut tlb = Tlb::new();
        let idle = |s: &State| !s.stop && !s.job.has_work() && !s.mmu.has_pending();
        loop {
            let (work, setup) = {
                let mut s = self.state()?;
                while idle(&s) {
                    s = self.work.wait(s).map_err(|_| Error::Poisoned)?;
                }
                if s.stop {
                    return Ok(());
                }
                if !s.job.has_work() {
                    drop(s);
                    job::Memory::invalidations(&Jobs(self), &mut tlb);
                    continue;
                }
                (s.job.start(), s.mmu.setup())
            };
            let work = match work {
                Ok(w) => w,
                Err(_) => {
                    self.raise(regs::cause::ERROR)?;
                    continue;
                }
            };
            let started = std::time::Instant::now();
            let r = job::execute(&Jobs(self), remote, &work, setup, &mut tlb);
            let cause = {
                let mut s = self.state()?;
                s.regs.add_job_busy(started.elapsed());
                let c = tlb.take_counts();
                s.mmu.counts.hits += c.hits;
                s.mmu.counts.misses += c.misses;
                s.mmu.counts.stale += c.stale;
                match r {
                    Ok(c) => {
                        if s.job.complete(work.gen) && c.flags & job::flag::INTERRUPT != 0 {
                            regs::cause::COMPLETION
                        } else {
                            0
                        }
                    }
                    // Stopped under a job: the connection is gone, nothing
                    // to report.
                    Err(_) if s.stop => 0,
                    Err((fault, seqno)) => match s.job.fail(work.gen, fault, seqno) {
                        true if fault.code == ring::error::WATCHDOG => {
                            regs::cause::ERROR | regs::cause::WATCHDOG
                        }
                        true => regs::cause::ERROR,
                        false => 0,
                    },
                }
            };
            if cause != 0 {
                self.raise(cause)?;
            }
        }
    }

    /// Stops the engines (the connection is gone).
    pub fn stop(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.stop = true;
        }
        self.work.notify_all();
    }
}

impl copy::Memory for Device {
    fn vram_read(&self, off: u64, buf: &mut [u8]) -> Result<(), Error> {
        self.vram.read(off, buf)
    }

    fn vram_write(&self, off: u64, data: &[u8]) -> Result<(), Error> {
        self.vram.write(off, data)
    }

    fn dma_read(&self, addr: u64, buf: &mut [u8], remote: &dyn Remote) -> Result<(), Error> {
        Device::dma_read(self, addr, buf, remote)
    }

    fn dma_write(&self, addr: u64, data: &[u8], remote: &dyn Remote) -> Result<(), Error> {
        Device::dma_write(self, addr, data, remote)
    }

    fn reset_since(&self, gen: u64) -> bool {
        self.state().map_or(true, |s| !s.ce.current(gen))
    }
}

/// The block of BAR0 a register access falls in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Block {
    Main,
    Copy,
    Job,
    Mmu,
    Fault,
}

impl Block {
    fn of(off: u64) -> Self {
        let within = |base: u64, size: u64| (base..base + size).contains(&off);
        if within(copy::BASE, ring::SIZE) {
            Block::Copy
        } else if within(job::BASE, ring::SIZE) {
            Block::Job
        } else if within(mmu::BASE, mmu::SIZE) {
            Block::Mmu
        } else if within(fault::BASE, fault::SIZE) {
            Block::Fault
        } else {
            Block::Main
        }
    }
}

/// A register access: 1 to 8 bytes inside the region.
fn check_access(off: u64, len: usize, size: u64) -> Result<(), Error> {
    match off.checked_add(len as u64) {
        Some(end) if (1..=8).contains(&len) && end <= size => Ok(()),
        _ => Err(Error::OutOfRange),
    }
}

mod bus;
mod jobs;

use jobs::Jobs;

#[cfg(test)]
mod tests;
