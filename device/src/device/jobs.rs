// SPDX-License-Identifier: GPL-2.0

//! The job engine's side of the device: its memory (the copy engine's,
//! with the job engine's generation), its page-table walks, its TLB
//! invalidations and its stalls on faults.

use super::*;

/// The job engine's memory: the copy engine's, with its generation
/// checked against the job engine's.
pub(super) struct Jobs<'a>(pub(super) &'a Device);

impl copy::Memory for Jobs<'_> {
    fn vram_read(&self, off: u64, buf: &mut [u8]) -> Result<(), Error> {
        self.0.vram.read(off, buf)
    }

    fn vram_write(&self, off: u64, data: &[u8]) -> Result<(), Error> {
        self.0.vram.write(off, data)
    }

    fn dma_read(&self, addr: u64, buf: &mut [u8], remote: &dyn Remote) -> Result<(), Error> {
        self.0.dma_read(addr, buf, remote)
    }

    fn dma_write(&self, addr: u64, data: &[u8], remote: &dyn Remote) -> Result<(), Error> {
        self.0.dma_write(addr, data, remote)
    }

    fn reset_since(&self, gen: u64) -> bool {
        self.0
            .state()
            .map_or(true, |s| s.stop || !s.job.current(gen))
    }
}

impl job::Memory for Jobs<'_> {
    fn vram_add(&self, off: u64, v: u64) -> Result<(), Error> {
        self.0.vram.fetch_add_u64(off, v)
    }

    fn dma_add(&self, addr: u64, v: u64, _remote: &dyn Remote) -> Result<(), Error> {
        self.0.dma_add(addr, v)
    }

    fn table_word(&self, system: bool, at: u64) -> Option<u64> {
        let mut b = [0; 8];
        if system {
            // A walk is the device's DMA: directly, as QEMU gives tables
            // in guest RAM (a table QEMU serves is not walked).
            self.0.dma_read(at, &mut b, &NoRemote).ok()?;
        } else {
            self.0.vram.read(at, &mut b).ok()?;
        }
        Some(u64::from_le_bytes(b))
    }

    fn invalidations(&self, tlb: &mut Tlb) {
        // Taken under the device's lock, done without it (the thread that
        // serves QEMU takes it), then published: `INV_DONE` says done only
        // once the TLB holds nothing they drop.
        let list = match self.0.state() {
            Ok(mut s) if s.mmu.has_pending() => s.mmu.take_pending(),
            _ => return,
        };
        for inv in &list {
            tlb.invalidate(inv);
        }
        if let Ok(mut s) = self.0.state() {
            for inv in &list {
                s.mmu.done(inv.seqno);
            }
        }
    }

    fn watchdog(&self) -> Option<std::time::Duration> {
        self.0.state().ok()?.regs.job_watchdog()
    }

    fn stall(&self, record: &Record, tlb: &mut Tlb, gen: u64) -> Resolution {
        let gone = |s: &State| s.stop || !s.job.current(gen);
        let slot = match self.0.state() {
            Ok(s) if gone(&s) => return Resolution::Reset,
            Ok(mut s) => match s.fault.slot() {
                Slot::Off => return Resolution::Off,
                Slot::Full => None,
                Slot::At(at) => Some(at),
            },
            Err(_) => return Resolution::Reset,
        };
        // Written before it is published (`PUT`): the driver reads it
        // after. A buffer the device cannot write fails the job, as with
        // faults off.
        if let Some(at) = slot {
            if self.0.dma_write(at, &record.encode(), &NoRemote).is_err() {
                return Resolution::Off;
            }
        }
        match self.0.state() {
            Ok(s) if gone(&s) => return Resolution::Reset,
            Ok(mut s) => s.fault.published(slot.is_some()),
            Err(_) => return Resolution::Reset,
        }
        if self.0.raise(regs::cause::FAULT).is_err() {
            return Resolution::Reset;
        }
        // Stalled: invalidations are still done (the driver's service of
        // the fault may change the tables), nothing else runs.
        loop {
            let Ok(mut s) = self.0.state() else {
                return Resolution::Reset;
            };
            loop {
                if gone(&s) {
                    s.fault.abandon();
                    return Resolution::Reset;
                }
                if let Some(answer) = s.fault.take_answer() {
                    return answer;
                }
                if s.mmu.has_pending() {
                    break;
                }
                s = match self.0.work.wait(s) {
                    Ok(s) => s,
                    Err(_) => return Resolution::Reset,
                };
            }
            drop(s);
            self.invalidations(tlb);
        }
    }
}
