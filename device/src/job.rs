// SPDX-License-Identifier: GPL-2.0

//! The job engine (Documentation/hardware.rst, "Job engine"): a ring like
//! the copy engine's ([`crate::ring`]) of jobs over a context's virtual
//! addresses, each access translated by the MMU ([`crate::mmu`]): FILL
//! with a pattern, COPY, ATOMIC_ADD and CHECKSUM. A translation that fails
//! stalls the job in the fault buffer ([`crate::fault`]) until the driver
//! replays the step or cancels the job; with replayable faults off, or on
//! an error the buffer cannot report, it fails the job (its address in
//! `ERROR_ADDR`). Either way before it touches the page: what the job
//! reaches is VRAM by offset and DMA addresses through the device's DMA
//! space, nothing else.

use std::cell::Cell;
use std::time::{Duration, Instant};

use crate::copy;
use crate::dma::Remote;
use crate::fault::{self, Record, Resolution};
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
    /// The 64-bit FNV-1a hash of `[dst, dst + len)` from seed `phase`
    /// (with [`flag::CHAIN`](super::flag::CHAIN): from the word at DMA
    /// address `src`), written to the completion record.
    pub const CHECKSUM: u32 = 4;
    /// Waits until the 64-bit word at DMA address `src` (8-byte aligned;
    /// `len` 0) is at least `phase`: a semaphore the CPU or another
    /// engine releases.
    pub const WAIT: u32 = 5;
}

/// How often a WAIT looks at its word.
const WAIT_POLL: Duration = Duration::from_micros(50);

/// Job flags.
pub mod flag {
    /// Raise COMPLETION when done.
    pub const INTERRUPT: u32 = 1 << 0;
    /// CHECKSUM only: the seed is the 64-bit word at DMA address `src`
    /// (8-byte aligned), read as the job starts, not `phase`: the hash
    /// of the job before it in the ring, from its completion record, so
    /// that a hash continues across jobs queued back to back (1.4).
    pub const CHAIN: u32 = 1 << 1;
    /// Every flag.
    pub const ALL: u32 = INTERRUPT | CHAIN;
}

/// Bytes of a completion record: the CHECKSUM's hash (so far, if
/// cancelled), the job's TLB hits and misses (32 bits each), the bytes it
/// did, its [`status`].
pub const RECORD_LEN: usize = 32;

/// A completion record's status.
pub mod status {
    /// The job ran to its end.
    pub const DONE: u32 = 0;
    /// The driver cancelled a fault of the job: it did only the bytes the
    /// record says, from its start.
    pub const CANCELLED: u32 = 1;
}

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
    /// address; ATOMIC_ADD: the value; a CHECKSUM with
    /// [`flag::CHAIN`]: its seed's DMA address.
    pub src: u64,
    /// Bytes.
    pub len: u64,
    /// FILL: the pattern's byte the first byte takes; CHECKSUM: the seed.
    pub phase: u64,
    /// The DMA address of the job's completion record (0: none):
    /// [`RECORD_LEN`] bytes.
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
    /// Reports `fault` in the fault buffer and stalls the job (of engine
    /// generation `gen`) until the driver answers, doing the TLB
    /// invalidations requested meanwhile on `tlb`.
    fn stall(&self, fault: &Record, tlb: &mut Tlb, gen: u64) -> Resolution;
    /// How long a job starting now may run (`JOB_WATCHDOG`), if limited.
    fn watchdog(&self) -> Option<Duration>;
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
    seqno: u64,
    /// ATOMIC_ADD: its faults are atomic accesses.
    atomic: bool,
    /// The address and access of the last translation that missed.
    miss: Cell<Option<(u64, bool)>>,
    /// When the job started, and how long it may run (the watchdog).
    started: Instant,
    limit: Option<Duration>,
    /// How long it stalled on faults (not counted by the watchdog).
    stalled: Cell<Duration>,
}

/// Why a step did not complete.
enum Stop {
    /// The job fails.
    Fault(Fault),
    /// The driver cancelled its fault: the job ends there.
    Cancelled,
}

impl Run<'_> {
    /// Before a step's translations: the invalidations requested so far
    /// are done (a step translates after them, and uses nothing it
    /// translated before), a reset stops the job, and so does the
    /// watchdog.
    fn step(&self, tlb: &mut Tlb) -> Result<(), Fault> {
        self.mem.invalidations(tlb);
        if self.mem.reset_since(self.gen) {
            return Err(Fault::code(0));
        }
        let ran = self.started.elapsed().saturating_sub(self.stalled.get());
        if self.limit.is_some_and(|limit| ran > limit) {
            return Err(Fault::code(error::WATCHDOG));
        }
        Ok(())
    }

    /// WAIT: looks at the word at DMA address `at` until it is at least
    /// `value`, as a step each time (so a reset or the watchdog stops it).
    fn wait(&self, tlb: &mut Tlb, at: u64, value: u64) -> Result<(), Stop> {
        loop {
            self.step(tlb).map_err(Stop::Fault)?;
            let mut word = [0; 8];
            self.mem
                .dma_read(at, &mut word, self.remote)
                .map_err(|e| Stop::Fault(Fault::code(copy::code(&e))))?;
            if u64::from_le_bytes(word) >= value {
                return Ok(());
            }
            std::thread::sleep(WAIT_POLL);
        }
    }

    /// Runs one step (a page; a COPY's two) after `done` bytes of the
    /// job: the invalidations requested so far first, then `body`. An
    /// access that misses stalls the job in the fault buffer; on a replay
    /// the step runs again from its start (translating anew, after the
    /// invalidations requested meanwhile), on a cancel the job ends.
    fn page(
        &self,
        tlb: &mut Tlb,
        done: u64,
        mut body: impl FnMut(&mut Tlb) -> Result<(), Fault>,
    ) -> Result<(), Stop> {
        loop {
            self.step(tlb).map_err(Stop::Fault)?;
            let f = match body(tlb) {
                Ok(()) => return Ok(()),
                Err(f) => f,
            };
            let Some((addr, write)) = self.miss.take().filter(|_| f.code == error::PAGE_FAULT)
            else {
                return Err(Stop::Fault(f));
            };
            let access = match (self.atomic, write) {
                (true, _) => fault::access::ATOMIC,
                (false, true) => fault::access::WRITE,
                (false, false) => fault::access::READ,
            };
            let record = Record {
                addr,
                seqno: self.seqno,
                ctx: self.ctx,
                access,
                engine: fault::ENGINE_JOB,
                done,
            };
            let since = Instant::now();
            let resolution = self.mem.stall(&record, tlb, self.gen);
            self.stalled.set(self.stalled.get() + since.elapsed());
            match resolution {
                Resolution::Replay => {}
                Resolution::Cancel => return Err(Stop::Cancelled),
                Resolution::Off => return Err(Stop::Fault(f)),
                Resolution::Reset => return Err(Stop::Fault(Fault::code(0))),
            }
        }
    }

    /// Runs the job's steps over its `len` bytes, counting those `done`:
    /// each `piece(done)` bytes at most (to the end of a page), run as
    /// [`Run::page`] runs a step, `body(tlb, done, n)` doing its `n`
    /// bytes from `done`.
    fn steps(
        &self,
        tlb: &mut Tlb,
        (len, done): (u64, &mut u64),
        piece: impl Fn(u64) -> u64,
        mut body: impl FnMut(&mut Tlb, u64, usize) -> Result<(), Fault>,
    ) -> Result<(), Stop> {
        while *done < len {
            let (at, n) = (*done, piece(*done).min(len - *done));
            // CAST: at most a page.
            self.page(tlb, at, |tlb| body(tlb, at, n as usize))?;
            *done += n;
        }
        Ok(())
    }

    fn translate(&self, tlb: &mut Tlb, va: u64, write: bool) -> Result<Target, Fault> {
        let read: &ReadTable<'_> = &|system, at| self.mem.table_word(system, at);
        let t = tlb.translate(&self.setup, read, (self.ctx, va), write);
        if matches!(t, Err(f) if f.code == error::PAGE_FAULT) {
            self.miss.set(Some((va, write)));
        }
        t
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
    if c.flags & !flag::ALL != 0 {
        return Err(bad());
    }
    let chained = c.flags & flag::CHAIN != 0;
    if chained && (c.opcode != op::CHECKSUM || c.src % 8 != 0) {
        return Err(bad());
    }
    let run = Run {
        mem,
        remote,
        setup,
        ctx: c.ctx,
        gen: work.gen,
        seqno: c.seqno,
        atomic: c.opcode == op::ATOMIC_ADD,
        miss: Cell::new(None),
        started: Instant::now(),
        limit: mem.watchdog(),
        stalled: Cell::new(Duration::ZERO),
    };
    let end = |a: u64| a.checked_add(c.len).ok_or_else(bad);
    let mut buf = [0u8; 4096];
    let mut done = 0u64;
    let counted = tlb.counts();
    let mut hash = c.phase;
    if chained {
        let mut seed = [0; 8];
        mem.dma_read(c.src, &mut seed, remote)
            .map_err(|e| fail(Fault::code(copy::code(&e))))?;
        hash = u64::from_le_bytes(seed);
    }
    let r = match c.opcode {
        op::NOP => Ok(()),
        op::FILL => {
            end(c.dst)?;
            if !(1..=PATTERN_MAX).contains(&c.pattern_len) {
                return Err(bad());
            }
            let mut pattern = vec![0; c.pattern_len as usize];
            mem.dma_read(c.src, &mut pattern, remote)
                .map_err(|e| fail(Fault::code(copy::code(&e))))?;
            let plen = u64::from(c.pattern_len);
            let piece = |done| in_page(c.dst + done);
            run.steps(tlb, (c.len, &mut done), piece, |tlb, done, n| {
                let t = run.translate(tlb, c.dst + done, true)?;
                for (i, b) in buf[..n].iter_mut().enumerate() {
                    *b = pattern[((c.phase + done + i as u64) % plen) as usize];
                }
                run.write(t, &buf[..n])
            })
        }
        op::COPY => {
            end(c.dst)?;
            end(c.src)?;
            let piece = |done| in_page(c.dst + done).min(in_page(c.src + done));
            run.steps(tlb, (c.len, &mut done), piece, |tlb, done, n| {
                let st = run.translate(tlb, c.src + done, false)?;
                let dt = run.translate(tlb, c.dst + done, true)?;
                run.read(st, &mut buf[..n])?;
                run.write(dt, &buf[..n])
            })
        }
        op::ATOMIC_ADD => {
            end(c.dst)?;
            if c.dst % 8 != 0 || c.len % 8 != 0 {
                return Err(bad());
            }
            let piece = |done| in_page(c.dst + done);
            run.steps(tlb, (c.len, &mut done), piece, |tlb, done, n| {
                let t = run.translate(tlb, c.dst + done, true)?;
                run.add(t, n, c.src)
            })
        }
        op::CHECKSUM => {
            end(c.dst)?;
            let piece = |done| in_page(c.dst + done);
            run.steps(tlb, (c.len, &mut done), piece, |tlb, done, n| {
                let t = run.translate(tlb, c.dst + done, false)?;
                run.read(t, &mut buf[..n])?;
                hash = fnv1a(hash, &buf[..n]);
                Ok(())
            })
        }
        op::WAIT => {
            if c.src % 8 != 0 || c.len != 0 {
                return Err(bad());
            }
            run.wait(tlb, c.src, c.phase)
        }
        _ => return Err(bad()),
    };
    let status = match r {
        Ok(()) => status::DONE,
        Err(Stop::Cancelled) => status::CANCELLED,
        Err(Stop::Fault(f)) => return Err(fail(f)),
    };
    if c.opcode != op::CHECKSUM {
        hash = 0;
    }
    if c.result != 0 {
        let now = tlb.counts();
        let mut record = [0u8; RECORD_LEN];
        record[..8].copy_from_slice(&hash.to_le_bytes());
        record[8..12].copy_from_slice(&((now.hits - counted.hits) as u32).to_le_bytes());
        record[12..16].copy_from_slice(&((now.misses - counted.misses) as u32).to_le_bytes());
        record[16..24].copy_from_slice(&done.to_le_bytes());
        record[24..28].copy_from_slice(&status.to_le_bytes());
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
