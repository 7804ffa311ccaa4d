// SPDX-License-Identifier: GPL-2.0

//! The copy engine (Documentation/hardware.rst, "Copy engine"): a ring of
//! 64-byte commands in memory the driver gives it by DMA address, a
//! doorbell (`CE_TAIL`), a fence the engine writes each completed
//! command's seqno to, and an interrupt on completion or error. It copies
//! and fills between its own VRAM (by offset) and DMA addresses (system
//! RAM, or a peer's BAR at the bus address the driver gives it), through
//! the device's DMA space only.

use crate::dma::Remote;
use crate::Error;

/// Offset of the copy engine's registers in BAR0.
pub const BASE: u64 = 0x100;
/// Bytes of its register block.
pub const SIZE: u64 = 0x40;

/// Registers, as offsets in BAR0.
pub mod reg {
    /// Ring base, a DMA address, 4 KiB aligned: low word.
    pub const RING_LO: u64 = 0x100;
    /// Ring base: high word.
    pub const RING_HI: u64 = 0x104;
    /// Ring entries: a power of two from 2 to 4096.
    pub const RING_SIZE: u64 = 0x108;
    /// The entry the engine executes next (read-only).
    pub const HEAD: u64 = 0x10c;
    /// The doorbell: the entry after the last one the driver wrote.
    pub const TAIL: u64 = 0x110;
    /// Fence, a DMA address the engine writes each completed seqno to
    /// (8 bytes, little-endian; 0: none): low word.
    pub const FENCE_LO: u64 = 0x114;
    /// Fence: high word.
    pub const FENCE_HI: u64 = 0x118;
    /// [`super::status`] bits (read-only).
    pub const STATUS: u64 = 0x11c;
    /// The error that halted the engine, one of [`super::error`].
    pub const ERROR: u64 = 0x120;
    /// The seqno of the command that halted it: low word.
    pub const ERROR_SEQNO_LO: u64 = 0x124;
    /// High word.
    pub const ERROR_SEQNO_HI: u64 = 0x128;
    /// Writing [`super::CTRL_RESET`] resets the engine.
    pub const CTRL: u64 = 0x12c;
    /// Commands completed since the engine's reset: low word.
    pub const DONE_LO: u64 = 0x130;
    /// High word.
    pub const DONE_HI: u64 = 0x134;
}

/// `STATUS` bits.
pub mod status {
    /// No command to run (`HEAD == TAIL`) and none running.
    pub const IDLE: u32 = 1 << 0;
    /// Halted by an error until reset.
    pub const HALTED: u32 = 1 << 1;
}

/// `CTRL`: reset: no error, `HEAD` and `TAIL` 0, the counter 0.
pub const CTRL_RESET: u32 = 1 << 0;

/// `ERROR` codes.
pub mod error {
    /// `RING_SIZE` is not a power of two from 2 to 4096, the ring base is
    /// not 4 KiB aligned, or `TAIL` is past the ring.
    pub const BAD_RING: u32 = 1;
    /// An opcode or flag the engine does not know.
    pub const BAD_COMMAND: u32 = 2;
    /// A DMA address outside the device's DMA space, an access the space
    /// forbids, bus mastering off, or a transfer QEMU failed.
    pub const DMA_FAULT: u32 = 3;
    /// A VRAM range past the end of VRAM.
    pub const VRAM_RANGE: u32 = 4;
}

/// Command opcodes.
pub mod op {
    /// Nothing: completes (fence, interrupt) without moving data.
    pub const NOP: u32 = 0;
    /// Copies `len` bytes from `src` to `dst`.
    pub const COPY: u32 = 1;
    /// Writes `len` bytes at `dst` with the 8-byte pattern in `src`.
    pub const FILL: u32 = 2;
}

/// Command flags.
pub mod flag {
    /// Raise COMPLETION when done.
    pub const INTERRUPT: u32 = 1 << 0;
    /// `src` is an offset in this device's VRAM, not a DMA address.
    pub const SRC_VRAM: u32 = 1 << 1;
    /// `dst` is an offset in this device's VRAM.
    pub const DST_VRAM: u32 = 1 << 2;
    /// Every flag.
    pub const ALL: u32 = INTERRUPT | SRC_VRAM | DST_VRAM;
}

/// Bytes of a command.
pub const COMMAND_LEN: usize = 64;

/// One command, as it lies in the ring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Command {
    /// One of [`op`].
    pub opcode: u32,
    /// [`flag`] bits.
    pub flags: u32,
    /// Written to the fence when the command completes.
    pub seqno: u64,
    /// Source address or VRAM offset; FILL: the pattern.
    pub src: u64,
    /// Destination address or VRAM offset.
    pub dst: u64,
    /// Bytes.
    pub len: u64,
}

impl Command {
    /// Its 64 bytes in the ring (the rest reserved, zero).
    pub fn encode(&self) -> [u8; COMMAND_LEN] {
        let mut b = [0; COMMAND_LEN];
        b[0..4].copy_from_slice(&self.opcode.to_le_bytes());
        b[4..8].copy_from_slice(&self.flags.to_le_bytes());
        b[8..16].copy_from_slice(&self.seqno.to_le_bytes());
        b[16..24].copy_from_slice(&self.src.to_le_bytes());
        b[24..32].copy_from_slice(&self.dst.to_le_bytes());
        b[32..40].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// Decodes a ring entry.
    pub fn decode(b: &[u8; COMMAND_LEN]) -> Self {
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| u64::from(u32_at(o)) | (u64::from(u32_at(o + 4)) << 32);
        Self {
            opcode: u32_at(0),
            flags: u32_at(4),
            seqno: u64_at(8),
            src: u64_at(16),
            dst: u64_at(24),
            len: u64_at(32),
        }
    }
}

/// The engine's registers and progress.
#[derive(Default)]
pub struct State {
    ring: u64,
    ring_size: u32,
    head: u32,
    tail: u32,
    fence: u64,
    /// `(error, seqno)` while halted.
    halted: Option<(u32, u64)>,
    running: bool,
    done: u64,
    /// Bumped by every reset: a command started before it completes into nothing.
    gen: u64,
}

/// What the engine is to run next.
pub struct Work {
    /// DMA address of the entry.
    pub entry: u64,
    /// The fence address (0: none).
    pub fence: u64,
    /// The engine's generation when it started.
    pub gen: u64,
}

impl State {
    /// The register at `off` (a multiple of 4 in the block).
    pub fn read32(&self, off: u64) -> u32 {
        match off {
            reg::RING_LO => self.ring as u32,
            reg::RING_HI => (self.ring >> 32) as u32,
            reg::RING_SIZE => self.ring_size,
            reg::HEAD => self.head,
            reg::TAIL => self.tail,
            reg::FENCE_LO => self.fence as u32,
            reg::FENCE_HI => (self.fence >> 32) as u32,
            reg::STATUS => {
                let idle = self.head == self.tail && !self.running;
                (if idle { status::IDLE } else { 0 })
                    | (if self.halted.is_some() {
                        status::HALTED
                    } else {
                        0
                    })
            }
            reg::ERROR => self.halted.map_or(0, |h| h.0),
            reg::ERROR_SEQNO_LO => self.halted.map_or(0, |h| h.1 as u32),
            reg::ERROR_SEQNO_HI => self.halted.map_or(0, |h| (h.1 >> 32) as u32),
            reg::DONE_LO => self.done as u32,
            reg::DONE_HI => (self.done >> 32) as u32,
            _ => 0,
        }
    }

    /// Writes the register at `off`; returns whether the engine may have
    /// work now (a doorbell or a reset).
    pub fn write32(&mut self, off: u64, v: u32) -> bool {
        let lo = |x: u64| (x & !0xffff_ffff) | u64::from(v);
        let hi = |x: u64| (x & 0xffff_ffff) | (u64::from(v) << 32);
        match off {
            reg::RING_LO => self.ring = lo(self.ring),
            reg::RING_HI => self.ring = hi(self.ring),
            reg::RING_SIZE => self.ring_size = v,
            reg::TAIL => {
                self.tail = v;
                return true;
            }
            reg::FENCE_LO => self.fence = lo(self.fence),
            reg::FENCE_HI => self.fence = hi(self.fence),
            reg::CTRL if v & CTRL_RESET != 0 => {
                self.head = 0;
                self.tail = 0;
                self.halted = None;
                self.done = 0;
                self.gen = self.gen.wrapping_add(1);
                return true;
            }
            _ => {}
        }
        false
    }

    /// Whether the engine has a command to start.
    pub fn has_work(&self) -> bool {
        self.halted.is_none() && self.head != self.tail
    }

    /// Starts the next command, or halts the engine with BAD_RING.
    pub fn start(&mut self) -> Result<Work, u32> {
        let n = self.ring_size;
        if !(2..=4096).contains(&n)
            || !n.is_power_of_two()
            || self.ring % 4096 != 0
            || self.tail >= n
            || self.head >= n
        {
            self.halted = Some((error::BAD_RING, 0));
            return Err(error::BAD_RING);
        }
        let Some(entry) = self
            .ring
            .checked_add(u64::from(self.head) * COMMAND_LEN as u64)
        else {
            self.halted = Some((error::BAD_RING, 0));
            return Err(error::BAD_RING);
        };
        self.running = true;
        Ok(Work {
            entry,
            fence: self.fence,
            gen: self.gen,
        })
    }

    /// Whether `gen` is still the engine's generation.
    pub fn current(&self, gen: u64) -> bool {
        self.gen == gen
    }

    /// After a device reset: registers to reset values; a command under
    /// way still shows (not IDLE) until it stops, and completes into nothing.
    pub fn reset(&mut self) {
        *self = State {
            running: self.running,
            gen: self.gen.wrapping_add(1),
            ..State::default()
        };
    }

    /// The running command completed.
    pub fn complete(&mut self, gen: u64) -> bool {
        self.running = false;
        if gen != self.gen {
            return false;
        }
        self.head = (self.head + 1) % self.ring_size.max(1);
        self.done += 1;
        true
    }

    /// The running command failed with `code`: the engine halts there.
    pub fn fail(&mut self, gen: u64, code: u32, seqno: u64) -> bool {
        self.running = false;
        if gen != self.gen {
            return false;
        }
        self.halted = Some((code, seqno));
        true
    }
}

/// Memory the engine reaches: its VRAM by offset, the rest by DMA address.
pub trait Memory {
    /// Reads VRAM at `off`.
    fn vram_read(&self, off: u64, buf: &mut [u8]) -> Result<(), Error>;
    /// Writes VRAM at `off`.
    fn vram_write(&self, off: u64, data: &[u8]) -> Result<(), Error>;
    /// Reads DMA address `addr`.
    fn dma_read(&self, addr: u64, buf: &mut [u8], remote: &dyn Remote) -> Result<(), Error>;
    /// Writes DMA address `addr`.
    fn dma_write(&self, addr: u64, data: &[u8], remote: &dyn Remote) -> Result<(), Error>;
    /// Whether the engine was reset since generation `gen`.
    fn reset_since(&self, gen: u64) -> bool;
}

/// Bytes the engine moves per step.
const STEP: usize = 64 << 10;

/// The error code for a failed access.
fn code(e: &Error) -> u32 {
    match e {
        Error::OutOfRange => error::VRAM_RANGE,
        _ => error::DMA_FAULT,
    }
}

/// Fetches and runs the command at `work`, then writes the fence: `Ok`
/// with the command, or `Err((code, seqno))`.
pub fn execute(mem: &dyn Memory, remote: &dyn Remote, work: &Work) -> Result<Command, (u32, u64)> {
    let mut raw = [0; COMMAND_LEN];
    mem.dma_read(work.entry, &mut raw, remote)
        .map_err(|e| (code(&e), 0))?;
    let c = Command::decode(&raw);
    let fail = |code: u32| (code, c.seqno);
    if c.flags & !flag::ALL != 0 {
        return Err(fail(error::BAD_COMMAND));
    }
    let read = |at: u64, buf: &mut [u8]| {
        if c.flags & flag::SRC_VRAM != 0 {
            mem.vram_read(at, buf)
        } else {
            mem.dma_read(at, buf, remote)
        }
    };
    let write = |at: u64, data: &[u8]| {
        if c.flags & flag::DST_VRAM != 0 {
            mem.vram_write(at, data)
        } else {
            mem.dma_write(at, data, remote)
        }
    };
    let mut buf = vec![0u8; STEP.min(c.len as usize)];
    let mut done = 0u64;
    match c.opcode {
        op::NOP => {}
        op::COPY => {
            while done < c.len {
                let n = (c.len - done).min(STEP as u64) as usize;
                let (s, d) = match (c.src.checked_add(done), c.dst.checked_add(done)) {
                    (Some(s), Some(d)) => (s, d),
                    _ => return Err(fail(error::DMA_FAULT)),
                };
                if mem.reset_since(work.gen) {
                    return Err(fail(0));
                }
                read(s, &mut buf[..n]).map_err(|e| fail(code(&e)))?;
                // A read through QEMU takes time: a reset meanwhile drops
                // what it read.
                if mem.reset_since(work.gen) {
                    return Err(fail(0));
                }
                write(d, &buf[..n]).map_err(|e| fail(code(&e)))?;
                done += n as u64;
            }
        }
        op::FILL => {
            let pattern = c.src.to_le_bytes();
            for (i, b) in buf.iter_mut().enumerate() {
                *b = pattern[i % 8];
            }
            while done < c.len {
                let n = (c.len - done).min(STEP as u64) as usize;
                if mem.reset_since(work.gen) {
                    return Err(fail(0));
                }
                let d = c.dst.checked_add(done).ok_or(fail(error::DMA_FAULT))?;
                write(d, &buf[..n]).map_err(|e| fail(code(&e)))?;
                done += n as u64;
            }
        }
        _ => return Err(fail(error::BAD_COMMAND)),
    }
    if work.fence != 0 && !mem.reset_since(work.gen) {
        mem.dma_write(work.fence, &c.seqno.to_le_bytes(), remote)
            .map_err(|e| fail(code(&e)))?;
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{region, Device};
    use crate::dma::prot;
    use crate::mem::{memfd, Mmap};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// QEMU's side, when no test range is remote.
    struct NoRemote;

    impl Remote for NoRemote {
        fn dma_read(&self, _: u64, _: &mut [u8]) -> Result<(), Error> {
            Err(Error::Remote(5))
        }
        fn dma_write(&self, _: u64, _: &[u8]) -> Result<(), Error> {
            Err(Error::Remote(5))
        }
    }

    /// QEMU's side, for a remote range whose reads take 300 ms.
    struct Slow;

    impl Remote for Slow {
        fn dma_read(&self, _: u64, b: &mut [u8]) -> Result<(), Error> {
            std::thread::sleep(Duration::from_millis(300));
            b.fill(0xab);
            Ok(())
        }
        fn dma_write(&self, _: u64, _: &[u8]) -> Result<(), Error> {
            Ok(())
        }
    }

    /// A device with 1 MiB of "guest RAM" at DMA address 0x10_0000, its
    /// ring at 0x10_0000 (16 entries), its fence at 0x10_1000, a data
    /// page at 0x10_2000, 1 MiB that QEMU serves at [`REMOTE`], and its
    /// engine running.
    struct Rig {
        dev: Arc<Device>,
        ram: Mmap,
        engine: Option<std::thread::JoinHandle<Result<(), Error>>>,
        tail: u32,
    }

    const RAM: u64 = 0x10_0000;
    const FENCE: u64 = RAM + 0x1000;
    const DATA: u64 = RAM + 0x2000;
    const REMOTE: u64 = 0x8000_0000;

    impl Rig {
        fn new() -> Self {
            Self::with_remote(&NoRemote)
        }

        fn with_remote(remote: &'static (dyn Remote + Sync)) -> Self {
            let dev = Arc::new(Device::new(2 << 20).unwrap());
            let fd = memfd("ram", 1 << 20).unwrap();
            let ram = Mmap::new(&fd, 0, 1 << 20).unwrap();
            dev.dma()
                .map(RAM, 1 << 20, prot::READ | prot::WRITE, Some((fd, 0)))
                .unwrap();
            dev.dma()
                .map(REMOTE, 1 << 20, prot::READ | prot::WRITE, None)
                .unwrap();
            // Memory space and bus mastering on.
            dev.region_write(region::CONFIG, 4, &[0x06, 0]).unwrap();
            let w = |r: u64, v: u32| dev.region_write(region::BAR0, r, &v.to_le_bytes()).unwrap();
            w(reg::RING_LO, RAM as u32);
            w(reg::RING_HI, 0);
            w(reg::RING_SIZE, 16);
            w(reg::FENCE_LO, FENCE as u32);
            w(reg::FENCE_HI, 0);
            let d = dev.clone();
            let engine = Some(std::thread::spawn(move || d.run_copy_engine(remote)));
            Self {
                dev,
                ram,
                engine,
                tail: 0,
            }
        }

        fn set(&self, r: u64, v: u32) {
            self.dev
                .region_write(region::BAR0, r, &v.to_le_bytes())
                .unwrap();
        }

        fn vram_word(&self) -> u64 {
            let mut b = [0; 8];
            self.dev.region_read(region::BAR2, 0, &mut b).unwrap();
            u64::from_le_bytes(b)
        }

        fn reg(&self, r: u64) -> u32 {
            let mut b = [0; 4];
            self.dev.region_read(region::BAR0, r, &mut b).unwrap();
            u32::from_le_bytes(b)
        }

        /// Writes `c` at the tail and rings the doorbell.
        fn submit(&mut self, c: Command) {
            self.ram
                .write(u64::from(self.tail) * 64, &c.encode())
                .unwrap();
            self.tail = (self.tail + 1) % 16;
            let t = self.tail.to_le_bytes();
            self.dev.region_write(region::BAR0, reg::TAIL, &t).unwrap();
        }

        fn fence(&self) -> u64 {
            let mut b = [0; 8];
            self.ram.read(FENCE - RAM, &mut b).unwrap();
            u64::from_le_bytes(b)
        }

        /// Waits until the engine is idle or halted.
        fn settle(&self) {
            let t = Instant::now();
            while self.reg(reg::STATUS) & (status::IDLE | status::HALTED) == 0 {
                assert!(t.elapsed() < Duration::from_secs(10), "engine stuck");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    impl Drop for Rig {
        fn drop(&mut self) {
            self.dev.stop();
            if let Some(e) = self.engine.take() {
                e.join().unwrap().unwrap();
            }
        }
    }

    #[test]
    fn copies_and_fills_between_vram_and_dma_addresses_and_fences_each() {
        let mut r = Rig::new();
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
        r.ram.write(DATA - RAM, &data[..8192]).unwrap();
        // System to VRAM, VRAM to VRAM (across a 64 KiB step), VRAM back
        // to system elsewhere, then a fill.
        r.submit(Command {
            opcode: op::COPY,
            flags: flag::DST_VRAM,
            seqno: 1,
            src: DATA,
            dst: 0x1000,
            len: 8192,
        });
        r.dev.region_write(region::BAR2, 0x10_0000, &data).unwrap();
        r.submit(Command {
            opcode: op::COPY,
            flags: flag::SRC_VRAM | flag::DST_VRAM,
            seqno: 2,
            src: 0x10_0000,
            dst: 0x18_0000,
            len: data.len() as u64,
        });
        r.submit(Command {
            opcode: op::COPY,
            flags: flag::SRC_VRAM,
            seqno: 3,
            src: 0x1000,
            dst: DATA + 0x4000,
            len: 8192,
        });
        r.submit(Command {
            opcode: op::FILL,
            flags: 0,
            seqno: 4,
            src: 0x1122_3344_5566_7788,
            dst: DATA + 0x8000,
            len: 24,
        });
        r.settle();
        assert_eq!(r.fence(), 4);
        assert_eq!(r.reg(reg::DONE_LO), 4);
        let mut got = vec![0; data.len()];
        r.dev
            .region_read(region::BAR2, 0x18_0000, &mut got)
            .unwrap();
        assert_eq!(got, data);
        let mut got = vec![0; 8192];
        r.ram.read(DATA - RAM + 0x4000, &mut got).unwrap();
        assert_eq!(got, &data[..8192]);
        let mut fill = [0; 24];
        r.ram.read(DATA - RAM + 0x8000, &mut fill).unwrap();
        assert_eq!(fill[..8], 0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(fill[16..], fill[..8]);
    }

    #[test]
    fn a_fault_halts_the_engine_unfenced_until_reset() {
        let mut r = Rig::new();
        r.submit(Command {
            opcode: op::NOP,
            flags: 0,
            seqno: 1,
            ..Default::default()
        });
        // A source never mapped for the device.
        r.submit(Command {
            opcode: op::COPY,
            flags: flag::DST_VRAM,
            seqno: 2,
            src: 0x4000_0000,
            dst: 0,
            len: 4096,
        });
        r.submit(Command {
            opcode: op::NOP,
            flags: 0,
            seqno: 3,
            ..Default::default()
        });
        r.settle();
        assert_eq!(r.reg(reg::STATUS) & status::HALTED, status::HALTED);
        assert_eq!(r.reg(reg::ERROR), error::DMA_FAULT);
        assert_eq!(r.reg(reg::ERROR_SEQNO_LO), 2);
        assert_eq!(r.reg(reg::HEAD), 1, "halted at the failing entry");
        assert_eq!(r.fence(), 1, "nothing after the fault completed");
        assert_ne!(
            r.reg(crate::regs::IRQ_STATUS) & crate::regs::cause::ERROR,
            0
        );
        // A VRAM range past the end, after a reset.
        r.dev
            .region_write(region::BAR0, reg::CTRL, &CTRL_RESET.to_le_bytes())
            .unwrap();
        r.tail = 0;
        r.submit(Command {
            opcode: op::FILL,
            flags: flag::DST_VRAM,
            seqno: 9,
            src: 0,
            dst: (2 << 20) - 8,
            len: 16,
        });
        r.settle();
        assert_eq!(r.reg(reg::ERROR), error::VRAM_RANGE);
        // Unknown opcodes and flags; a bad ring.
        r.dev
            .region_write(region::BAR0, reg::CTRL, &CTRL_RESET.to_le_bytes())
            .unwrap();
        r.tail = 0;
        r.submit(Command {
            opcode: 7,
            seqno: 10,
            ..Default::default()
        });
        r.settle();
        assert_eq!(r.reg(reg::ERROR), error::BAD_COMMAND);
        r.dev
            .region_write(region::BAR0, reg::CTRL, &CTRL_RESET.to_le_bytes())
            .unwrap();
        r.dev
            .region_write(region::BAR0, reg::RING_SIZE, &3u32.to_le_bytes())
            .unwrap();
        r.tail = 0;
        r.submit(Command::default());
        r.settle();
        assert_eq!(r.reg(reg::ERROR), error::BAD_RING);
    }

    #[test]
    fn no_dma_without_bus_mastering() {
        let mut r = Rig::new();
        r.dev.region_write(region::CONFIG, 4, &[0x02, 0]).unwrap();
        r.submit(Command {
            opcode: op::NOP,
            seqno: 1,
            ..Default::default()
        });
        r.settle();
        assert_eq!(
            r.reg(reg::ERROR),
            error::DMA_FAULT,
            "the ring itself is out of reach"
        );
        assert_eq!(r.fence(), 0);
    }

    #[test]
    fn commands_round_trip() {
        let c = Command {
            opcode: op::COPY,
            flags: flag::ALL,
            seqno: u64::MAX,
            src: 1,
            dst: 2,
            len: 3,
        };
        assert_eq!(Command::decode(&c.encode()), c);
    }

    /// A copy from memory QEMU serves slowly, with INTERRUPT, and 15 NOPs
    /// after it in the ring: reset while it runs.
    fn slow_copy_then_nops(r: &mut Rig) {
        r.submit(Command {
            opcode: op::COPY,
            flags: flag::DST_VRAM | flag::INTERRUPT,
            seqno: 7,
            src: REMOTE,
            dst: 0,
            len: 8,
        });
        for i in 1..15 {
            r.ram
                .write(
                    i * 64,
                    &Command {
                        opcode: op::NOP,
                        seqno: 100 + i,
                        ..Default::default()
                    }
                    .encode(),
                )
                .unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
    }

    /// After a reset, the command that was running completes into nothing:
    /// no fence, no interrupt, no progress, and no stale entry runs.
    fn check_reset_left_nothing(r: &Rig) {
        assert_eq!(
            r.reg(reg::STATUS) & status::IDLE,
            0,
            "busy until the command stops"
        );
        r.settle();
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(r.fence(), 0);
        assert_eq!(r.reg(reg::HEAD), 0);
        assert_eq!(r.reg(reg::DONE_LO), 0);
        assert_eq!(r.reg(crate::regs::IRQ_STATUS), 0);
        assert_eq!(r.vram_word(), 0, "the copy stopped before its step");
    }

    #[test]
    fn a_ctrl_reset_stops_the_running_command_unfenced() {
        let mut r = Rig::with_remote(&Slow);
        r.set(crate::regs::IRQ_ENABLE, crate::regs::cause::ALL);
        slow_copy_then_nops(&mut r);
        r.set(reg::CTRL, CTRL_RESET);
        check_reset_left_nothing(&r);
    }

    #[test]
    fn a_device_reset_stops_the_running_command_unfenced() {
        let mut r = Rig::with_remote(&Slow);
        slow_copy_then_nops(&mut r);
        r.dev.reset().unwrap();
        check_reset_left_nothing(&r);
    }

    #[test]
    fn a_ring_past_the_address_space_or_a_head_past_the_ring_halts() {
        let r = Rig::new();
        // Head at 10 of 16 (NOPs), then the ring shrinks to 4 with a FILL
        // where entry 10 was: never run.
        r.ram
            .write(
                10 * 64,
                &Command {
                    opcode: op::FILL,
                    flags: flag::DST_VRAM,
                    seqno: 5,
                    src: 0x42,
                    dst: 0,
                    len: 8,
                }
                .encode(),
            )
            .unwrap();
        r.set(reg::TAIL, 10);
        r.settle();
        assert_eq!(r.reg(reg::HEAD), 10);
        r.set(reg::RING_SIZE, 4);
        r.set(reg::TAIL, 1);
        r.settle();
        assert_eq!(r.reg(reg::ERROR), error::BAD_RING);
        assert_eq!(r.vram_word(), 0);
        // A ring whose entry would lie past the end of the address space.
        r.set(reg::CTRL, CTRL_RESET);
        r.set(reg::RING_SIZE, 128);
        r.set(reg::FENCE_LO, (RAM + 0x8_0000) as u32);
        r.set(reg::TAIL, 100);
        r.settle();
        assert_eq!(r.reg(reg::HEAD), 100);
        r.set(reg::RING_LO, 0xffff_f000);
        r.set(reg::RING_HI, 0xffff_ffff);
        r.set(reg::TAIL, 101);
        r.settle();
        assert_eq!(r.reg(reg::ERROR), error::BAD_RING);
    }
}
