// SPDX-License-Identifier: GPL-2.0

//! BAR0: the device's registers (Documentation/hardware.rst, "BAR0
//! registers"). Registers are 32 bits wide, little-endian; a 64-bit value
//! is two registers, low first. An access of any size from 1 to 8 bytes
//! reaches the bytes it covers; bytes of no register read as zero and
//! ignore writes.

use crate::dma::DmaCounts;

/// Size of BAR0.
pub const BAR0_SIZE: u64 = 64 << 10;

/// `ID`: reads [`ID_VALUE`].
pub const ID: u64 = 0x000;
/// "MSVG", read as a little-endian word.
pub const ID_VALUE: u32 = u32::from_le_bytes(*b"MSVG");
/// `VERSION`: major in bits 31:16, minor in 15:0.
pub const VERSION: u64 = 0x004;
/// The register interface's version, 1.6 (1.1: the job engine and the
/// MMU; 1.2: the fault buffer, 32-byte completion records; 1.3: the job
/// engine's watchdog and WAIT; 1.4: CHECKSUM's CHAIN flag; 1.5: cause
/// counters in memory, `IRQ_MEM`; 1.6: the DMA path counters,
/// `DMA_DIRECT`, `DMA_REMOTE`, `DMA_SWITCH`).
pub const VERSION_VALUE: u32 = (1 << 16) | 6;
/// `VRAM_SIZE` (64 bits): bytes of VRAM behind BAR2.
pub const VRAM_SIZE: u64 = 0x008;
/// `SCRATCH`: any value, for the driver's own use; 0 at reset.
pub const SCRATCH: u64 = 0x010;
/// `STATUS`: [`STATUS_READY`], [`STATUS_BUS_MASTER`].
pub const STATUS: u64 = 0x014;
/// The device has finished its reset.
pub const STATUS_READY: u32 = 1 << 0;
/// The command register lets the device master the bus (DMA).
pub const STATUS_BUS_MASTER: u32 = 1 << 1;
/// `IRQ_STATUS`: causes raised; write 1 to clear.
pub const IRQ_STATUS: u64 = 0x020;
/// `IRQ_ENABLE`: causes that signal the interrupt; 0 at reset.
pub const IRQ_ENABLE: u64 = 0x024;
/// `IRQ_RAISE`: writing a cause mask raises those causes (self-test).
pub const IRQ_RAISE: u64 = 0x028;
/// `JOB_WATCHDOG`: microseconds a job may run, not counting the time it
/// stalls on a fault, before the job engine stops it and halts with
/// WATCHDOG; 0 (at reset): no watchdog. A job takes the value it finds
/// when it starts.
pub const JOB_WATCHDOG: u64 = 0x02c;
/// `JOB_BUSY` (64 bits, read-only): microseconds the job engine has spent
/// running jobs (from a job's start to its end, stalls included) since
/// the device's reset; read `HI`, `LO`, `HI` again for a stable value.
pub const JOB_BUSY: u64 = 0x030;
/// `IRQ_MEM` (64 bits): where the device counts the causes it raises, in
/// memory. Bit 0 [`IRQ_MEM_ENABLE`]; bits 63:4 the DMA address of the
/// counters ([`IRQ_MEM_LEN`] bytes, 16-byte aligned; bits 3:1 read as 0).
/// Writing the low word makes it take effect (write the high word first):
/// the counters start again from 0. 0 at reset: causes go to `IRQ_STATUS`.
pub const IRQ_MEM: u64 = 0x038;
/// `IRQ_MEM`'s enable bit.
pub const IRQ_MEM_ENABLE: u64 = 1;
/// `DMA_DIRECT` (64 bits, read-only): bytes the device's DMA read or wrote
/// in memory it reaches directly (guest RAM, through the fd QEMU gave)
/// since its reset. Each of the three DMA counters is one value at an
/// access: an 8-byte read is consistent; with 4-byte reads, read `HI`,
/// `LO`, `HI` again (as `JOB_BUSY`). Writes are ignored.
pub const DMA_DIRECT: u64 = 0x040;
/// `DMA_REMOTE` (64 bits, read-only): bytes through QEMU (`DMA_READ`,
/// `DMA_WRITE`: the root complex, and the IOMMU if the machine has one)
/// since the reset.
pub const DMA_REMOTE: u64 = 0x048;
/// `DMA_SWITCH` (64 bits, read-only): bytes routed to a peer's VRAM inside
/// the switch (`crate::switch`) since the reset.
pub const DMA_SWITCH: u64 = 0x050;
/// Bytes of the counters: one little-endian 32-bit count per cause, in
/// the order of the causes' bits.
pub const IRQ_MEM_LEN: usize = 4 * CAUSES;
/// The causes.
pub const CAUSES: usize = 4;

/// Interrupt causes, in `IRQ_STATUS` or counted at `IRQ_MEM`; each
/// signals the device's one MSI vector.
pub mod cause {
    /// A command completed (its seqno was written).
    pub const COMPLETION: u32 = 1 << 0;
    /// A fault record was written to the fault buffer.
    pub const FAULT: u32 = 1 << 1;
    /// An engine reported an error.
    pub const ERROR: u32 = 1 << 2;
    /// The job engine's watchdog stopped a job (ERROR is raised with it).
    pub const WATCHDOG: u32 = 1 << 3;
    /// Every cause.
    pub const ALL: u32 = COMPLETION | FAULT | ERROR | WATCHDOG;
}

/// The register file.
#[derive(Default)]
pub struct Regs {
    vram_size: u64,
    scratch: u32,
    irq_status: u32,
    irq_enable: u32,
    job_watchdog: u32,
    job_busy: std::time::Duration,
    /// `IRQ_MEM` in effect, and its high word as last written (it takes
    /// effect with the low word).
    irq_mem: u64,
    irq_mem_hi: u32,
    /// The causes counted since `IRQ_MEM` last took effect.
    irq_counts: [u32; CAUSES],
    /// The counts could not be written, and `IRQ_MEM` went off: until it
    /// takes effect again, every raise of an enabled cause signals.
    fell_back: bool,
    /// The device's DMA counts at its reset: the DMA counters count from
    /// them.
    dma_base: DmaCounts,
}

/// What raising causes (or a register write) asks of the device besides
/// the register file.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Effects {
    /// Causes newly raised into `IRQ_STATUS`: the interrupt is signalled
    /// if any.
    pub signal: u32,
    /// Causes counted: the counters to write to memory, and then the
    /// interrupt to signal.
    pub counted: Option<Counted>,
}

impl Effects {
    /// Adds what `other` asks: its signal, and its counts (the later ones,
    /// with both's causes).
    fn merge(&mut self, other: Effects) {
        self.signal |= other.signal;
        if let Some(mut c) = other.counted {
            if let Some(old) = self.counted.take() {
                c.causes |= old.causes;
            }
            self.counted = Some(c);
        }
    }
}

/// Counters to write at `IRQ_MEM`'s address ([`Regs::raise`]).
#[derive(Debug, PartialEq, Eq)]
pub struct Counted {
    /// Their DMA address.
    pub addr: u64,
    /// Their bytes.
    pub bytes: [u8; IRQ_MEM_LEN],
    /// The causes just counted (back to `IRQ_STATUS` if the write fails:
    /// [`Regs::uncount`]).
    pub causes: u32,
}

impl Regs {
    /// The registers at reset, for `vram_size` bytes of VRAM.
    pub fn new(vram_size: u64) -> Self {
        Self {
            vram_size,
            ..Self::default()
        }
    }

    /// Back to reset values; the DMA counters start from `dma`, the
    /// device's counts now.
    pub fn reset(&mut self, dma: DmaCounts) {
        *self = Self {
            dma_base: dma,
            ..Self::new(self.vram_size)
        };
    }

    /// The DMA counter at `off` (its low word's offset), from the device's
    /// counts `dma`.
    fn dma_counter(&self, off: u64, dma: &DmaCounts) -> u64 {
        let (now, base) = match off {
            DMA_DIRECT => (dma.direct_bytes, self.dma_base.direct_bytes),
            DMA_REMOTE => (dma.remote_bytes, self.dma_base.remote_bytes),
            _ => (dma.switch_bytes, self.dma_base.switch_bytes),
        };
        now.wrapping_sub(base)
    }

    fn read32(&self, off: u64, bus_master: bool, dma: &DmaCounts) -> u32 {
        match off {
            ID => ID_VALUE,
            VERSION => VERSION_VALUE,
            VRAM_SIZE => self.vram_size as u32,
            o if o == VRAM_SIZE + 4 => (self.vram_size >> 32) as u32,
            SCRATCH => self.scratch,
            STATUS => STATUS_READY | if bus_master { STATUS_BUS_MASTER } else { 0 },
            IRQ_STATUS => self.irq_status,
            IRQ_ENABLE => self.irq_enable,
            JOB_WATCHDOG => self.job_watchdog,
            JOB_BUSY => self.job_busy.as_micros() as u32,
            o if o == JOB_BUSY + 4 => (self.job_busy.as_micros() >> 32) as u32,
            IRQ_MEM => self.irq_mem as u32,
            o if o == IRQ_MEM + 4 => self.irq_mem_hi,
            DMA_DIRECT | DMA_REMOTE | DMA_SWITCH => self.dma_counter(off, dma) as u32,
            o if matches!(o.wrapping_sub(4), DMA_DIRECT | DMA_REMOTE | DMA_SWITCH) => {
                (self.dma_counter(o - 4, dma) >> 32) as u32
            }
            _ => 0,
        }
    }

    fn write32(&mut self, off: u64, v: u32, fx: &mut Effects) {
        match off {
            SCRATCH => self.scratch = v,
            IRQ_STATUS => self.irq_status &= !v,
            IRQ_ENABLE => {
                // Enabling a cause already raised signals it now.
                let newly = v & !self.irq_enable & self.irq_status;
                self.irq_enable = v & cause::ALL;
                fx.signal |= newly & cause::ALL;
                self.count_pending(fx);
            }
            IRQ_RAISE => {
                let r = self.raise(v);
                fx.merge(r);
            }
            JOB_WATCHDOG => self.job_watchdog = v,
            IRQ_MEM => {
                self.irq_mem = ((u64::from(self.irq_mem_hi) << 32) | u64::from(v)) & !0xe;
                self.irq_counts = [0; CAUSES];
                self.fell_back = false;
                self.count_pending(fx);
            }
            o if o == IRQ_MEM + 4 => self.irq_mem_hi = v,
            _ => {}
        }
    }

    /// The counters' DMA address, while causes are counted in memory.
    fn counters(&self) -> Option<u64> {
        (self.irq_mem & IRQ_MEM_ENABLE != 0).then_some(self.irq_mem & !0xf)
    }

    /// In memory mode, the enabled causes pending in `IRQ_STATUS` (raised
    /// while disabled) move to the counters: an enabled cause is never
    /// left in `IRQ_STATUS` while the counters are on.
    fn count_pending(&mut self, fx: &mut Effects) {
        if self.counters().is_none() {
            return;
        }
        let moved = self.irq_status & self.irq_enable;
        self.irq_status &= !moved;
        fx.signal &= !moved;
        if moved != 0 {
            let counted = self.count(moved);
            fx.merge(Effects { signal: 0, counted });
        }
    }

    /// Counts `causes` (enabled ones) in memory mode: the counters to
    /// write.
    fn count(&mut self, causes: u32) -> Option<Counted> {
        let addr = self.counters()?;
        let mut bytes = [0; IRQ_MEM_LEN];
        for (i, (n, b)) in self
            .irq_counts
            .iter_mut()
            .zip(bytes.chunks_exact_mut(4))
            .enumerate()
        {
            if causes & (1 << i) != 0 {
                *n = n.wrapping_add(1);
            }
            b.copy_from_slice(&n.to_le_bytes());
        }
        Some(Counted {
            addr,
            bytes,
            causes,
        })
    }

    /// The counters could not be written (their address is not in the
    /// DMA map, or bus mastering is off): memory mode ends, and `causes`
    /// go to `IRQ_STATUS`. Returns the causes to signal.
    pub fn uncount(&mut self, causes: u32) -> u32 {
        self.irq_mem = 0;
        self.irq_counts = [0; CAUSES];
        self.fell_back = true;
        self.raise_status(causes)
    }

    /// How long a job starting now may run (`JOB_WATCHDOG`), if limited.
    pub fn job_watchdog(&self) -> Option<std::time::Duration> {
        let us = self.job_watchdog;
        (us != 0).then(|| std::time::Duration::from_micros(u64::from(us)))
    }

    /// The job engine ran a job for `d`.
    pub fn add_job_busy(&mut self, d: std::time::Duration) {
        self.job_busy += d;
    }

    /// Raises `causes`. In memory mode the enabled ones are counted
    /// ([`Effects::counted`]: write the counters, then signal); the others
    /// go to `IRQ_STATUS`, and [`Effects::signal`] has the enabled causes
    /// that were not raised there already: the interrupt is signalled if
    /// there are any (MSI is edge-triggered).
    pub fn raise(&mut self, causes: u32) -> Effects {
        let causes = causes & cause::ALL;
        let counted = causes & self.irq_enable;
        if self.counters().is_some() && counted != 0 {
            return Effects {
                signal: self.raise_status(causes & !counted),
                counted: self.count(counted),
            };
        }
        Effects {
            signal: self.raise_status(causes),
            counted: None,
        }
    }

    /// Raises `causes` into `IRQ_STATUS`: the enabled ones newly raised,
    /// or, after a fall back from the counters, every enabled one (a
    /// handler that took counts from an interrupt that also carried a
    /// cause raised here did not look here: the next raise signals again).
    fn raise_status(&mut self, causes: u32) -> u32 {
        let new = if self.fell_back {
            causes
        } else {
            causes & !self.irq_status
        };
        self.irq_status |= causes;
        new & self.irq_enable
    }

    /// Reads `buf.len()` (1 to 8) bytes at `off`, the device's DMA counts
    /// being `dma` (one value for the whole access).
    pub fn read(&self, off: u64, buf: &mut [u8], bus_master: bool, dma: &DmaCounts) {
        read_bytes(off, buf, |reg| self.read32(reg, bus_master, dma));
    }

    /// Writes `data` (1 to 8 bytes) at `off` (see [`write_bytes`]).
    pub fn write(&mut self, off: u64, data: &[u8], bus_master: bool) -> Effects {
        let mut fx = Effects::default();
        let old = |reg| {
            // Write-only and write-1-to-clear registers take only the
            // bytes written: the rest of the word is zero.
            // (The DMA counters, read-only, ignore what they are merged
            // into.)
            if matches!(reg, IRQ_STATUS | IRQ_RAISE) {
                0
            } else {
                self.read32(reg, bus_master, &DmaCounts::default())
            }
        };
        let mut words = write_bytes(off, data, old);
        // An 8-byte write of `IRQ_MEM`: the high word first, so that the
        // low word takes effect with it.
        words.sort_by_key(|&(reg, _)| reg == IRQ_MEM);
        for (reg, v) in words {
            self.write32(reg, v, &mut fx);
        }
        fx
    }
}

/// Reads `buf.len()` bytes at `off` from 32-bit registers that `read32`
/// returns by offset.
pub fn read_bytes(off: u64, buf: &mut [u8], read32: impl Fn(u64) -> u32) {
    for (i, b) in buf.iter_mut().enumerate() {
        let at = off + i as u64;
        *b = (read32(at & !3) >> (8 * (at & 3))) as u8;
    }
}

/// The 32-bit register writes that writing `data` (1 to 8 bytes) at `off`
/// makes: each register it covers whole takes its bytes; a register it
/// covers in part takes them merged into `old(register)`.
pub fn write_bytes(off: u64, data: &[u8], old: impl Fn(u64) -> u32) -> Vec<(u64, u32)> {
    let end = off + data.len() as u64;
    let mut out = Vec::with_capacity(3);
    let mut reg = off & !3;
    while reg < end {
        let mut bytes = old(reg).to_le_bytes();
        for (k, b) in bytes.iter_mut().enumerate() {
            let at = reg + k as u64;
            if (off..end).contains(&at) {
                *b = data[(at - off) as usize];
            }
        }
        out.push((reg, u32::from_le_bytes(bytes)));
        reg += 4;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rd(r: &Regs, off: u64, n: usize) -> u64 {
        let mut b = [0; 8];
        r.read(off, &mut b[..n], true, &DmaCounts::default());
        u64::from_le_bytes(b)
    }

    #[test]
    fn identity_and_sizes_read_at_any_width() {
        let r = Regs::new(0x1_2345_6000);
        assert_eq!(rd(&r, ID, 4) as u32, ID_VALUE);
        assert_eq!(rd(&r, ID, 1) as u8, b'M');
        assert_eq!(rd(&r, VRAM_SIZE, 8), 0x1_2345_6000);
        assert_eq!(rd(&r, VRAM_SIZE + 4, 4), 1);
        assert_eq!(rd(&r, 0x7ffc, 4), 0, "no register there");
    }

    #[test]
    fn scratch_takes_partial_writes() {
        let mut r = Regs::new(0);
        r.write(SCRATCH, &0xdead_beef_u32.to_le_bytes(), true);
        r.write(SCRATCH + 1, &[0x11], true);
        assert_eq!(rd(&r, SCRATCH, 4), 0xdead_11ef);
        r.reset(DmaCounts::default());
        assert_eq!(rd(&r, SCRATCH, 4), 0);
    }

    #[test]
    fn causes_signal_once_until_cleared_and_only_when_enabled() {
        let mut r = Regs::new(0);
        // Raised while disabled: pending, no vector.
        let fx = r.write(IRQ_RAISE, &cause::FAULT.to_le_bytes(), true);
        assert_eq!(fx.signal, 0);
        assert_eq!(rd(&r, IRQ_STATUS, 4) as u32, cause::FAULT);
        // Enabling it signals it now.
        let fx = r.write(IRQ_ENABLE, &cause::ALL.to_le_bytes(), true);
        assert_eq!(fx.signal, cause::FAULT);
        // Raised again before being cleared: no second edge.
        assert_eq!(r.raise(cause::FAULT).signal, 0);
        assert_eq!(r.raise(cause::COMPLETION).signal, cause::COMPLETION);
        // Cleared (write 1 to clear), then raised: a new edge.
        r.write(IRQ_STATUS, &cause::FAULT.to_le_bytes(), true);
        assert_eq!(rd(&r, IRQ_STATUS, 4) as u32, cause::COMPLETION);
        assert_eq!(r.raise(cause::FAULT).signal, cause::FAULT);
        // Bits of no cause are ignored.
        assert_eq!(r.raise(1 << 31), Effects::default());
    }

    fn counts(c: &Counted) -> [u32; CAUSES] {
        let mut n = [0; CAUSES];
        for (v, b) in n.iter_mut().zip(c.bytes.chunks_exact(4)) {
            *v = u32::from_le_bytes(b.try_into().unwrap());
        }
        n
    }

    #[test]
    fn counters_in_memory_count_every_enabled_cause() {
        let mut r = Regs::new(0);
        // Raised while disabled, before the counters: pending.
        r.write(IRQ_RAISE, &cause::FAULT.to_le_bytes(), true);
        r.write(IRQ_MEM + 4, &0x1_u32.to_le_bytes(), true);
        // The low word (bits 3:1 ignored) takes effect; nothing enabled yet.
        let fx = r.write(IRQ_MEM, &0x2000_000f_u32.to_le_bytes(), true);
        assert_eq!(fx, Effects::default());
        assert_eq!(rd(&r, IRQ_MEM, 8), 0x1_2000_0001);
        // Enabling moves the pending cause to the counters.
        let fx = r.write(IRQ_ENABLE, &cause::ALL.to_le_bytes(), true);
        assert_eq!(fx.signal, 0);
        let c = fx.counted.expect("counted");
        assert_eq!(c.addr, 0x1_2000_0000);
        assert_eq!(counts(&c), [0, 1, 0, 0]);
        assert_eq!(rd(&r, IRQ_STATUS, 4), 0);
        // Every raise counts, raised before or not: no edge to wait for.
        for k in 1..=3 {
            let fx = r.raise(cause::COMPLETION);
            assert_eq!(fx.signal, 0);
            assert_eq!(counts(&fx.counted.unwrap()), [k, 1, 0, 0]);
        }
        let fx = r.raise(cause::ERROR | cause::WATCHDOG);
        assert_eq!(counts(&fx.counted.unwrap()), [3, 1, 1, 1]);
        assert_eq!(rd(&r, IRQ_STATUS, 4), 0);
        // A disabled cause still goes to IRQ_STATUS, without a signal.
        r.write(IRQ_ENABLE, &cause::COMPLETION.to_le_bytes(), true);
        let fx = r.raise(cause::FAULT);
        assert_eq!(fx, Effects::default());
        assert_eq!(rd(&r, IRQ_STATUS, 4) as u32, cause::FAULT);
        // A write that fails ends memory mode: the causes to IRQ_STATUS.
        let fx = r.raise(cause::COMPLETION);
        assert_eq!(counts(fx.counted.as_ref().unwrap()), [4, 1, 1, 1]);
        assert_eq!(r.uncount(cause::COMPLETION), cause::COMPLETION);
        assert_eq!(rd(&r, IRQ_MEM, 4), 0);
        // After the fall back, a cause already raised signals again (a
        // handler that took counts may not have looked at IRQ_STATUS).
        assert_eq!(r.raise(cause::COMPLETION).signal, cause::COMPLETION);
        assert_eq!(
            rd(&r, IRQ_STATUS, 4) as u32,
            cause::FAULT | cause::COMPLETION
        );
        // Taking effect again starts the counts from 0.
        r.write(IRQ_STATUS, &cause::ALL.to_le_bytes(), true);
        r.write(IRQ_MEM, &0x2000_0001_u32.to_le_bytes(), true);
        assert_eq!(
            counts(&r.raise(cause::COMPLETION).counted.unwrap()),
            [1, 0, 0, 0]
        );
        // The high word waits for the low one; an 8-byte write takes both
        // at once.
        r.write(IRQ_MEM + 4, &0x7_u32.to_le_bytes(), true);
        let c = r.raise(cause::COMPLETION).counted.unwrap();
        assert_eq!(c.addr, 0x1_2000_0000);
        assert_eq!(rd(&r, IRQ_MEM + 4, 4), 7);
        r.write(IRQ_MEM, &0x3000_0000_0000_4001_u64.to_le_bytes(), true);
        let c = r.raise(cause::COMPLETION).counted.unwrap();
        assert_eq!(c.addr, 0x3000_0000_0000_4000);
        // A write of IRQ_ENABLE and IRQ_RAISE at once keeps the causes
        // both count.
        r.write(IRQ_ENABLE, &0_u32.to_le_bytes(), true);
        r.raise(cause::FAULT);
        let both = (u64::from(cause::COMPLETION) << 32) | u64::from(cause::ALL);
        let c = r
            .write(IRQ_ENABLE, &both.to_le_bytes(), true)
            .counted
            .unwrap();
        assert_eq!(c.causes, cause::FAULT | cause::COMPLETION);
        assert_eq!(counts(&c), [2, 1, 0, 0]);
        // Off: back to IRQ_STATUS and its edges.
        r.write(IRQ_MEM, &0_u32.to_le_bytes(), true);
        assert_eq!(r.raise(cause::COMPLETION).signal, cause::COMPLETION);
        r.reset(DmaCounts::default());
        assert_eq!(rd(&r, IRQ_MEM, 8), 0);
    }

    #[test]
    fn dma_counters_count_from_the_reset_and_ignore_writes() {
        let mut r = Regs::new(0);
        let counts = |direct: u64, remote: u64, switch: u64| DmaCounts {
            direct_bytes: direct,
            remote_bytes: remote,
            switch_bytes: switch,
            refused: 9,
        };
        let rd = |r: &Regs, off: u64, n: usize, dma: &DmaCounts| {
            let mut b = [0; 8];
            r.read(off, &mut b[..n], true, dma);
            u64::from_le_bytes(b)
        };
        let now = counts(0x1_0000_0010, 0x20, 0x3_0000_0030);
        assert_eq!(rd(&r, DMA_DIRECT, 8, &now), 0x1_0000_0010);
        assert_eq!(rd(&r, DMA_DIRECT + 4, 4, &now), 1);
        assert_eq!(rd(&r, DMA_REMOTE, 4, &now), 0x20);
        assert_eq!(rd(&r, DMA_REMOTE + 4, 4, &now), 0);
        assert_eq!(rd(&r, DMA_SWITCH, 8, &now), 0x3_0000_0030);
        assert_eq!(rd(&r, DMA_SWITCH + 4, 4, &now), 3);
        assert_eq!(rd(&r, DMA_SWITCH + 8, 4, &now), 0, "no register there");
        // Read-only.
        r.write(DMA_SWITCH, &u64::MAX.to_le_bytes(), true);
        assert_eq!(rd(&r, DMA_SWITCH, 8, &now), 0x3_0000_0030);
        // A reset: from 0 again.
        r.reset(now);
        assert_eq!(rd(&r, DMA_DIRECT, 8, &now), 0);
        assert_eq!(rd(&r, DMA_SWITCH, 8, &now), 0);
        let later = counts(0x1_0000_0010 + 5, 0x20 + 6, 0x3_0000_0030 + 7);
        assert_eq!(rd(&r, DMA_DIRECT, 8, &later), 5);
        assert_eq!(rd(&r, DMA_REMOTE, 8, &later), 6);
        assert_eq!(rd(&r, DMA_SWITCH, 8, &later), 7);
    }
}
