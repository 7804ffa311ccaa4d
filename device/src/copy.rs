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
mod tests;
