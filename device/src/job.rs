// SPDX-License-Identifier: GPL-2.0

//! The job engine (Documentation/hardware.rst, "Job engine"): a ring like
//! the copy engine's ([`crate::ring`]) of jobs over a context's virtual
//! addresses, each access translated by the MMU ([`crate::mmu`]): FILL
//! with a pattern, COPY, ATOMIC_ADD and CHECKSUM. A translation that fails
//! fails the job (its address in `ERROR_ADDR`) before it touches the page;
//! what the job reaches is VRAM by offset and DMA addresses through the
//! device's DMA space, nothing else.

use crate::copy;
use crate::dma::Remote;
use crate::mmu::{ReadTable, Setup, Target, Tlb};
use crate::ring::{error, Fault, Work, COMMAND_LEN};
use crate::Error;

/// Offset of the job engine's registers in BAR0 (the ring's,
/// [`crate::ring::reg`], relative to it).
pub const BASE: u64 = 0x200;

/// Registers, as offsets in BAR0.
pub mod reg {
    use super::BASE;
    use crate::ring::reg as r;

    /// Ring base, low word.
    pub const RING_LO: u64 = BASE + r::RING_LO;
    /// Ring base, high word.
    pub const RING_HI: u64 = BASE + r::RING_HI;
    /// Ring entries.
    pub const RING_SIZE: u64 = BASE + r::RING_SIZE;
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
    /// Reset.
    pub const CTRL: u64 = BASE + r::CTRL;
    /// The address the error concerns, low word.
    pub const ERROR_ADDR_LO: u64 = BASE + r::ERROR_ADDR_LO;
    /// Commands completed, low word.
    pub const DONE_LO: u64 = BASE + r::DONE_LO;
}

/// Job opcodes.
pub mod op {
    /// Nothing: completes without touching memory.
    pub const NOP: u32 = 0;
    /// Writes `len` bytes at `dst` with the pattern at DMA address `src`
    /// (`pattern_len` bytes), from its byte `phase`.
    pub const FILL: u32 = 1;
    /// Copies `len` bytes from virtual address `src` to `dst`.
    pub const COPY: u32 = 2;
    /// Adds `src` to every 64-bit word of `[dst, dst + len)`.
    pub const ATOMIC_ADD: u32 = 3;
    /// The 64-bit FNV-1a hash of `[dst, dst + len)` from seed `phase`,
    /// written to the completion record.
    pub const CHECKSUM: u32 = 4;
}

/// Job flags.
pub mod flag {
    /// Raise COMPLETION when done.
    pub const INTERRUPT: u32 = 1 << 0;
}

/// Bytes of a completion record.
pub const RECORD_LEN: usize = 16;

/// The longest FILL pattern.
pub const PATTERN_MAX: u32 = 128;

/// One job, as it lies in the ring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Command {
    /// One of [`op`].
    pub opcode: u32,
    /// [`flag`] bits.
    pub flags: u32,
    /// Written to the fence when the job completes.
    pub seqno: u64,
    /// The context whose addresses `dst` and `src` are.
    pub ctx: u32,
    /// FILL: the pattern's bytes.
    pub pattern_len: u32,
    /// The virtual address written (read, for CHECKSUM).
    pub dst: u64,
    /// COPY: the source's virtual address; FILL: the pattern's DMA
    /// address; ATOMIC_ADD: the value.
    pub src: u64,
    /// Bytes.
    pub len: u64,
    /// FILL: the pattern's byte the first byte takes; CHECKSUM: the seed.
    pub phase: u64,
    /// The DMA address of the job's completion record (0: none):
    /// [`RECORD_LEN`] bytes, the CHECKSUM's hash (0 for other jobs), then
    /// the job's TLB hits and misses (32 bits each).
    pub result: u64,
}

impl Command {
    /// Its 64 bytes in the ring.
    pub fn encode(&self) -> [u8; COMMAND_LEN] {
        let mut b = [0; COMMAND_LEN];
        b[0..4].copy_from_slice(&self.opcode.to_le_bytes());
        b[4..8].copy_from_slice(&self.flags.to_le_bytes());
        b[8..16].copy_from_slice(&self.seqno.to_le_bytes());
        b[16..20].copy_from_slice(&self.ctx.to_le_bytes());
        b[20..24].copy_from_slice(&self.pattern_len.to_le_bytes());
        b[24..32].copy_from_slice(&self.dst.to_le_bytes());
        b[32..40].copy_from_slice(&self.src.to_le_bytes());
        b[40..48].copy_from_slice(&self.len.to_le_bytes());
        b[48..56].copy_from_slice(&self.phase.to_le_bytes());
        b[56..64].copy_from_slice(&self.result.to_le_bytes());
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
            ctx: u32_at(16),
            pattern_len: u32_at(20),
            dst: u64_at(24),
            src: u64_at(32),
            len: u64_at(40),
            phase: u64_at(48),
            result: u64_at(56),
        }
    }
}

/// What the job engine reaches besides the copy engine's memory.
pub trait Memory: copy::Memory {
    /// Adds `v` to the word at VRAM offset `off` atomically.
    fn vram_add(&self, off: u64, v: u64) -> Result<(), Error>;
    /// Adds `v` to the word at DMA address `addr` atomically: refused
    /// (touching nothing) at an address QEMU serves.
    fn dma_add(&self, addr: u64, v: u64, remote: &dyn Remote) -> Result<(), Error>;
    /// Reads a table's word: at DMA address `at` if `system`, else at VRAM
    /// offset `at`; `None` if the device cannot reach it.
    fn table_word(&self, system: bool, at: u64) -> Option<u64>;
    /// Does the TLB invalidations requested so far, on `tlb`.
    fn invalidations(&self, tlb: &mut Tlb);
}

/// FNV-1a, 64-bit.
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// One job's accesses, a page at a time.
struct Run<'a> {
    mem: &'a dyn Memory,
    remote: &'a dyn Remote,
    setup: Setup,
    ctx: u32,
    gen: u64,
}

impl Run<'_> {
    /// Before a step's translations: the invalidations requested so far
    /// are done (a step translates after them, and uses nothing it
    /// translated before), and a reset stops the job.
    fn step(&self, tlb: &mut Tlb) -> Result<(), Fault> {
        self.mem.invalidations(tlb);
        if self.mem.reset_since(self.gen) {
            return Err(Fault::code(0));
        }
        Ok(())
    }

    fn translate(&self, tlb: &mut Tlb, va: u64, write: bool) -> Result<Target, Fault> {
        let read: &ReadTable<'_> = &|system, at| self.mem.table_word(system, at);
        tlb.translate(&self.setup, read, (self.ctx, va), write)
    }

    fn read(&self, t: Target, buf: &mut [u8]) -> Result<(), Fault> {
        match t {
            Target::Vram(o) => self.mem.vram_read(o, buf),
            Target::Dma(a) => self.mem.dma_read(a, buf, self.remote),
        }
        .map_err(|e| Fault::code(copy::code(&e)))
    }

    fn write(&self, t: Target, data: &[u8]) -> Result<(), Fault> {
        match t {
            Target::Vram(o) => self.mem.vram_write(o, data),
            Target::Dma(a) => self.mem.dma_write(a, data, self.remote),
        }
        .map_err(|e| Fault::code(copy::code(&e)))
    }

    fn add(&self, t: Target, len: usize, v: u64) -> Result<(), Fault> {
        for w in (0..len as u64).step_by(8) {
            match t {
                Target::Vram(o) => self.mem.vram_add(o + w, v),
                Target::Dma(a) => self.mem.dma_add(a + w, v, self.remote),
            }
            .map_err(|e| Fault::code(copy::code(&e)))?;
        }
        Ok(())
    }
}

/// Bytes from `a` to the end of its page.
fn in_page(a: u64) -> u64 {
    4096 - (a & 0xfff)
}

/// Fetches and runs the job at `work` with `setup` and `tlb`, then writes
/// the fence: `Ok` with the job, or `Err((fault, seqno))`.
pub fn execute(
    mem: &dyn Memory,
    remote: &dyn Remote,
    work: &Work,
    setup: Setup,
    tlb: &mut Tlb,
) -> Result<Command, (Fault, u64)> {
    let mut raw = [0; COMMAND_LEN];
    mem.dma_read(work.entry, &mut raw, remote)
        .map_err(|e| (Fault::code(copy::code(&e)), 0))?;
    let c = Command::decode(&raw);
    let fail = |f: Fault| (f, c.seqno);
    let bad = || fail(Fault::code(error::BAD_COMMAND));
    if c.flags & !flag::INTERRUPT != 0 {
        return Err(bad());
    }
    let run = Run {
        mem,
        remote,
        setup,
        ctx: c.ctx,
        gen: work.gen,
    };
    let end = |a: u64| a.checked_add(c.len).ok_or_else(bad);
    let mut buf = [0u8; 4096];
    let mut done = 0u64;
    let counted = tlb.counts();
    let mut hash = 0;
    match c.opcode {
        op::NOP => {}
        op::FILL => {
            end(c.dst)?;
            if !(1..=PATTERN_MAX).contains(&c.pattern_len) {
                return Err(bad());
            }
            let mut pattern = vec![0; c.pattern_len as usize];
            mem.dma_read(c.src, &mut pattern, remote)
                .map_err(|e| fail(Fault::code(copy::code(&e))))?;
            let plen = u64::from(c.pattern_len);
            while done < c.len {
                let d = c.dst + done;
                let n = in_page(d).min(c.len - done);
                run.step(tlb).map_err(fail)?;
                let t = run.translate(tlb, d, true).map_err(fail)?;
                for (i, b) in buf[..n as usize].iter_mut().enumerate() {
                    *b = pattern[((c.phase + done + i as u64) % plen) as usize];
                }
                run.write(t, &buf[..n as usize]).map_err(fail)?;
                done += n;
            }
        }
        op::COPY => {
            end(c.dst)?;
            end(c.src)?;
            while done < c.len {
                let (d, s) = (c.dst + done, c.src + done);
                let n = in_page(d).min(in_page(s)).min(c.len - done);
                run.step(tlb).map_err(fail)?;
                let st = run.translate(tlb, s, false).map_err(fail)?;
                let dt = run.translate(tlb, d, true).map_err(fail)?;
                run.read(st, &mut buf[..n as usize]).map_err(fail)?;
                run.write(dt, &buf[..n as usize]).map_err(fail)?;
                done += n;
            }
        }
        op::ATOMIC_ADD => {
            end(c.dst)?;
            if c.dst % 8 != 0 || c.len % 8 != 0 {
                return Err(bad());
            }
            while done < c.len {
                let d = c.dst + done;
                let n = in_page(d).min(c.len - done);
                run.step(tlb).map_err(fail)?;
                let t = run.translate(tlb, d, true).map_err(fail)?;
                run.add(t, n as usize, c.src).map_err(fail)?;
                done += n;
            }
        }
        op::CHECKSUM => {
            end(c.dst)?;
            let mut h = c.phase;
            while done < c.len {
                let d = c.dst + done;
                let n = in_page(d).min(c.len - done);
                run.step(tlb).map_err(fail)?;
                let t = run.translate(tlb, d, false).map_err(fail)?;
                run.read(t, &mut buf[..n as usize]).map_err(fail)?;
                h = fnv1a(h, &buf[..n as usize]);
                done += n;
            }
            hash = h;
        }
        _ => return Err(bad()),
    }
    if c.result != 0 {
        let now = tlb.counts();
        let mut record = [0u8; RECORD_LEN];
        record[..8].copy_from_slice(&hash.to_le_bytes());
        record[8..12].copy_from_slice(&((now.hits - counted.hits) as u32).to_le_bytes());
        record[12..16].copy_from_slice(&((now.misses - counted.misses) as u32).to_le_bytes());
        mem.dma_write(c.result, &record, remote)
            .map_err(|e| fail(Fault::code(copy::code(&e))))?;
    }
    if work.fence != 0 && !mem.reset_since(work.gen) {
        mem.dma_write(work.fence, &c.seqno.to_le_bytes(), remote)
            .map_err(|e| fail(Fault::code(copy::code(&e))))?;
    }
    Ok(c)
}

#[cfg(test)]
mod tests;
