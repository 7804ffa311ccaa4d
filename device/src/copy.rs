// SPDX-License-Identifier: GPL-2.0

//! The copy engine (Documentation/hardware.rst, "Copy engine"): a ring of
//! 64-byte commands in memory the driver gives it by DMA address, a
//! doorbell (`CE_TAIL`), a fence the engine writes each completed
//! command's seqno to, and an interrupt on completion or error. It copies
//! and fills between its own VRAM (by offset) and DMA addresses (system
//! RAM, or a peer's BAR at the bus address the driver gives it), through
//! the device's DMA space only.

use crate::dma::Remote;
use crate::ring::{Fault, Work};
use crate::Error;

/// Offset of the copy engine's registers in BAR0.
pub const BASE: u64 = 0x100;

/// Registers, as offsets in BAR0: the ring's ([`crate::ring::reg`]) at
/// [`BASE`].
pub mod reg {
    use super::BASE;
    use crate::ring::reg as r;

    /// Ring base, low word.
    pub const RING_LO: u64 = BASE + r::RING_LO;
    /// Ring base, high word.
    pub const RING_HI: u64 = BASE + r::RING_HI;
    /// Ring entries.
    pub const RING_SIZE: u64 = BASE + r::RING_SIZE;
    /// The entry the engine executes next.
    pub const HEAD: u64 = BASE + r::HEAD;
    /// The doorbell.
    pub const TAIL: u64 = BASE + r::TAIL;
    /// Fence, low word.
    pub const FENCE_LO: u64 = BASE + r::FENCE_LO;
    /// Fence, high word.
    pub const FENCE_HI: u64 = BASE + r::FENCE_HI;
    /// Status bits.
    pub const STATUS: u64 = BASE + r::STATUS;
    /// The error that halted the engine.
    pub const ERROR: u64 = BASE + r::ERROR;
    /// Its command's seqno, low word.
    pub const ERROR_SEQNO_LO: u64 = BASE + r::ERROR_SEQNO_LO;
    /// High word.
    pub const ERROR_SEQNO_HI: u64 = BASE + r::ERROR_SEQNO_HI;
    /// Reset.
    pub const CTRL: u64 = BASE + r::CTRL;
    /// Commands completed, low word.
    pub const DONE_LO: u64 = BASE + r::DONE_LO;
    /// High word.
    pub const DONE_HI: u64 = BASE + r::DONE_HI;
}

pub use crate::ring::{error, status, COMMAND_LEN, CTRL_RESET, SIZE};

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
pub(crate) fn code(e: &Error) -> u32 {
    match e {
        Error::OutOfRange => error::VRAM_RANGE,
        _ => error::DMA_FAULT,
    }
}

/// Fetches and runs the command at `work`, then writes the fence: `Ok`
/// with the command, or `Err((fault, seqno))`.
pub fn execute(
    mem: &dyn Memory,
    remote: &dyn Remote,
    work: &Work,
) -> Result<Command, (Fault, u64)> {
    let mut raw = [0; COMMAND_LEN];
    mem.dma_read(work.entry, &mut raw, remote)
        .map_err(|e| (Fault::code(code(&e)), 0))?;
    let c = Command::decode(&raw);
    let fail = |code: u32| (Fault::code(code), c.seqno);
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
