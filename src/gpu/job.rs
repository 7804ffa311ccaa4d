// SPDX-License-Identifier: GPL-2.0

//! msvm-gpu's job engine (Documentation/hardware.rst, "Job engine"): a
//! [`Queue`] of jobs over a context's virtual addresses, which the device
//! translates through the page tables msvm writes (`super::mmu`).

use kernel::{
    io::Io,
    prelude::*,
    sync::atomic::{Atomic, Relaxed},
    time::{Delta, Instant, Monotonic},
};

use crate::mm::cancel::{nap, Cancel};

use super::regs::{counter64, JobBlock, JOB_BUSY_HI, JOB_BUSY_LO};
use super::ring::{Engine, Queue, COMMAND_WORDS};

/// Opcodes.
pub(crate) mod op {
    pub(crate) const FILL: u32 = 1;
    pub(crate) const COPY: u32 = 2;
    pub(crate) const ATOMIC_ADD: u32 = 3;
    pub(crate) const CHECKSUM: u32 = 4;
    pub(crate) const WAIT: u32 = 5;
}

/// Raise COMPLETION when done.
const INTERRUPT: u32 = 1 << 0;
/// CHECKSUM: the seed is the hash in the completion record at `src`.
const CHAIN: u32 = 1 << 1;
/// Scratch words: a FILL's pattern (128 bytes), then the job's completion
/// record (a CHECKSUM's result; the job's TLB hits and misses; the bytes
/// it did; its status), a word nothing writes, and four more records (a
/// pipeline's jobs take turns in five: the device writes the running and
/// the queued jobs' while msvm reads the one's before).
pub(crate) const PATTERN_WORDS: usize = 16;
/// The completion record's first word: a CHECKSUM's result.
pub(crate) const RESULT_WORD: usize = PATTERN_WORDS;
/// Its second: the job's TLB hits (bits 31:0) and misses (63:32).
pub(crate) const TLB_WORD: usize = PATTERN_WORDS + 1;
/// Its third: the bytes the job did (all of them, unless cancelled).
pub(crate) const DONE_WORD: usize = PATTERN_WORDS + 2;
/// Its fourth: its status (bits 31:0): 0 done, 1 cancelled.
pub(crate) const STATUS_WORD: usize = PATTERN_WORDS + 3;
/// A word nothing writes (0): what an injected hang WAITs on.
const NEVER_WORD: usize = PATTERN_WORDS + 4;
/// The completion records' first words: a job's (the first record), and
/// those of a pipeline's jobs, which take turns.
pub(crate) const RECORDS: [usize; 5] = [
    RESULT_WORD,
    PATTERN_WORDS + 5,
    PATTERN_WORDS + 9,
    PATTERN_WORDS + 13,
    PATTERN_WORDS + 17,
];

/// One job (hardware.rst, "Job engine"): `op` one of [`op`], over
/// context `ctx`'s addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct JobCommand {
    pub(crate) op: u32,
    pub(crate) ctx: u32,
    pub(crate) pattern_len: u32,
    pub(crate) dst: u64,
    pub(crate) src: u64,
    pub(crate) len: u64,
    pub(crate) phase: u64,
    pub(crate) result: u64,
    /// A CHECKSUM's seed is the hash of the record at DMA address `src`
    /// (the job before's), not `phase`.
    pub(crate) chain: bool,
}

/// The job engine's counters (debugfs `job_engine`).
pub(crate) struct JobStats {
    /// Bytes the jobs covered, per operation kind: written (FILL, COPY's
    /// destination, ATOMIC_ADD) and read (CHECKSUM).
    pub(crate) bytes_written: Atomic<u64>,
    pub(crate) bytes_read: Atomic<u64>,
    /// Windows queued behind a window running (`crate::engine`'s
    /// pipeline).
    pub(crate) pipelined: Atomic<u64>,
    /// Pipelines ended early for a waiter of their VM's lock, of the
    /// engine or of the pool's `atomics`.
    pub(crate) yields: Atomic<u64>,
}

impl Engine for JobBlock {
    const NAME: &'static str = "job engine";
    const SCRATCH: usize = PATTERN_WORDS + 21;
    type Command = JobCommand;
    type Stats = JobStats;

    fn stats() -> JobStats {
        JobStats {
            bytes_written: Atomic::new(0),
            bytes_read: Atomic::new(0),
            pipelined: Atomic::new(0),
            yields: Atomic::new(0),
        }
    }

    fn encode(c: &JobCommand, seqno: u64, last: bool) -> [u64; COMMAND_WORDS] {
        let flags = (if last { INTERRUPT } else { 0 }) | (if c.chain { CHAIN } else { 0 });
        [
            u64::from(c.op) | (u64::from(flags) << 32),
            seqno,
            u64::from(c.ctx) | (u64::from(c.pattern_len) << 32),
            c.dst,
            c.src,
            c.len,
            c.phase,
            c.result,
        ]
    }

    fn hang(scratch: &dyn Fn(usize) -> Option<u64>) -> Option<JobCommand> {
        let word = scratch(NEVER_WORD)?;
        let mut n = HANGS.load(Relaxed);
        loop {
            let left = n.checked_sub(1)?;
            match HANGS.cmpxchg(n, left, Relaxed) {
                Ok(_) => break,
                Err(now) => n = now,
            }
        }
        Some(JobCommand {
            op: op::WAIT,
            ctx: 0,
            pattern_len: 0,
            dst: 0,
            src: word,
            len: 0,
            phase: 1,
            result: 0,
            chain: false,
        })
    }

    fn count(s: &JobStats, cmds: &[JobCommand]) {
        for c in cmds {
            let n = match c.op {
                op::CHECKSUM => &s.bytes_read,
                _ => &s.bytes_written,
            };
            n.add(c.len, Relaxed);
        }
    }
}

/// The job engine of an msvm-gpu.
pub(crate) type JobEngine = Queue<JobBlock>;

/// The longest job watchdog, ms: below msvm's own wait for a job
/// (`super::ring`'s 15 s), which would end a longer one first.
pub(crate) const WATCHDOG_MAX_MS: u32 = 10_000;

impl JobEngine {
    /// Microseconds the device's job engine has run jobs (`JOB_BUSY`),
    /// while the device is bound and answers.
    pub(crate) fn busy_us(&self) -> Option<u64> {
        let io = self.bar().try_access()?;
        counter64(
            || u32::from(io.read(JOB_BUSY_HI).value()),
            || u32::from(io.read(JOB_BUSY_LO).value()),
        )
    }
}

/// Whether jobs run on the job engine of a device that has one (debugfs
/// `job_engine`: the benchmark's CPU baseline turns it off).
static USE_JOBS: Atomic<bool> = Atomic::new(true);

/// Turns the job engines' use on or off.
pub(crate) fn use_jobs(on: bool) {
    USE_JOBS.store(on, Relaxed);
}

/// Whether jobs run on job engines.
pub(crate) fn jobs_used() -> bool {
    USE_JOBS.load(Relaxed)
}

/// Jobs left to hang (debugfs `job_engine`'s `hang N`).
static HANGS: Atomic<u32> = Atomic::new(0);

/// Fault injection: each of the next `n` jobs a job engine runs is queued
/// behind a WAIT on a word nothing writes, which only the device's
/// watchdog (or msvm's timeout) ends: the job fails with `EIO`, unrun.
pub(crate) fn hang_jobs(n: u32) {
    HANGS.store(n, Relaxed);
}

/// Jobs left to hang.
pub(crate) fn hangs_left() -> u32 {
    HANGS.load(Relaxed)
}

/// Milliseconds a stalled job's service waits first (debugfs
/// `job_engine`'s `stall_delay MS`).
static STALL_DELAY_MS: Atomic<u32> = Atomic::new(0);

/// The longest stall delay, ms.
pub(crate) const STALL_DELAY_MAX_MS: u32 = 30_000;

/// Fault injection: each service of a stalled job first waits `ms` ms
/// (at most [`STALL_DELAY_MAX_MS`]) with the device parked, so that a
/// test can unplug the device while a fault is pending.
pub(crate) fn set_stall_delay(ms: u32) -> Result {
    if ms > STALL_DELAY_MAX_MS {
        return Err(EINVAL);
    }
    STALL_DELAY_MS.store(ms, Relaxed);
    Ok(())
}

/// The stall delay, ms.
pub(crate) fn stall_delay_ms() -> u32 {
    STALL_DELAY_MS.load(Relaxed)
}

/// Waits the stall delay, if any, with the device parked; stops early
/// when the ioctl must stop (`cancel`: a fatal signal, a device going).
pub(crate) fn delay_stall(cancel: &Cancel<'_>) {
    let ms = stall_delay_ms();
    let start = Instant::<Monotonic>::now();
    while start.elapsed() < Delta::from_millis(i64::from(ms)) && cancel.check().is_ok() {
        // Killable: a fatal signal ends the nap, and the check above sees it.
        nap();
    }
}
