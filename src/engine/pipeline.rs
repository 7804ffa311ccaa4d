// SPDX-License-Identifier: GPL-2.0

//! Windows in a row on the device, pipelined. Where every page of a
//! job's next windows has an entry in the VM's device page table (a warm
//! job), each window still runs as one job on msvm-gpu's job engine
//! (`super::device`), but the next is queued behind it while it runs, its
//! entries written meanwhile, and the one before counted once it has
//! completed, so that the engine goes from one window to the next without
//! waiting for msvm: one running, four queued ([`DEPTH`]; four, so that
//! a driver thread the host does not run for up to four windows' time,
//! about 10 ms under TCG on a 2-core host, leaves the engine still busy:
//! with two, such stalls left it idle in one round of five). A
//! CHECKSUM's jobs continue one hash (the device's CHAIN flag: a job's
//! seed is the hash in the record of the one before), and the jobs'
//! completion records take turns in [`DEPTH`] slots, so that the device
//! writes those of the jobs queued while msvm reads the one's before.
//!
//! The VM's mirror lock, the job engine and, for an ATOMIC_ADD, the pool's
//! `atomics` are held from the first window to the last one's completion,
//! as a single window's are: the entries, and the pages and mappings they
//! name, stay while the device may use them. The pipeline ends early,
//! after what it queued has completed, when anyone else waits for one of
//! them ([`MirrorGuard::contended`]: an invalidation of the process, the
//! fault handler, a shrink pass; [`Session::contended`]: another job for
//! the device; [`Atomics::contended`]: another engine's add), and the next
//! window then runs alone; when the ioctl must stop; and before a window
//! it cannot run this way (an entry missing: that window faults, as
//! `super::device` runs it; one read through replicas; an ATOMIC_ADD over
//! a peer's page; no table page free).
//!
//! A job of the pipeline never stalls: its entries are all there, and
//! nothing takes them while the lock is held. If one did, the engine is
//! reset, which ends every job queued, and the job fails with `EIO`, as
//! does one the device fails.
//!
//! [`MirrorGuard::contended`]: crate::mm::hmm::MirrorGuard::contended
//! [`Atomics::contended`]: crate::vram::Atomics::contended

use kernel::{
    prelude::*,
    sync::atomic::{Atomic, Relaxed},
};

use crate::gpu::faults::FaultBuffer;
use crate::gpu::job::{self, JobCommand, RECORDS, RESULT_WORD, TLB_WORD};
use crate::gpu::regs::JobBlock;
use crate::gpu::ring::{Session, Waited};
use crate::mm::cancel::Cancel;
use crate::mm::devpt::DevPt;
use crate::mm::devtables::DevMirror;

use super::{window_len, Done, Engine, Job, Op, WindowPages};

/// Windows on the device at once: one running, four queued behind it.
const DEPTH: usize = 5;

// A record slot per job queued: a job's is read before the one after the
// last queued takes it.
const _: () = assert!(RECORDS.len() >= DEPTH);
// Every slot's four words lie in the queue's scratch words.
const _: () = assert!(RECORDS[DEPTH - 1] + 4 <= <JobBlock as crate::gpu::ring::Engine>::SCRATCH);

/// Whether warm windows are pipelined (debugfs `job_engine`'s `pipeline`:
/// the benchmark's baseline turns it off).
static PIPELINE: Atomic<bool> = Atomic::new(true);

/// Turns pipelining on or off.
pub(crate) fn set_pipelining(on: bool) {
    PIPELINE.store(on, Relaxed);
}

/// Whether warm windows are pipelined.
pub(crate) fn pipelining() -> bool {
    PIPELINE.load(Relaxed)
}

/// A window's job, queued.
#[derive(Clone, Copy)]
struct Queued {
    seqno: u64,
    cmd: JobCommand,
    /// Its completion record: the first word's index in the scratch words.
    record: usize,
    /// Its bytes of the job: `[at, at + n)`.
    at: usize,
    n: usize,
}

/// The windows queued and not waited for, oldest first.
///
/// # Invariants
///
/// The pipeline that holds it waits for every job in it, or has the
/// engine reset (which ends them all: [`Pipe::clear`]), before it lets go
/// of the VM's mirror lock and of the engine.
#[derive(Default)]
struct Pipe {
    queued: [Option<Queued>; DEPTH],
    len: usize,
    /// Jobs queued so far (the next one's record slot is their number
    /// modulo [`DEPTH`]).
    jobs: usize,
    /// The record of the last job queued.
    last: usize,
}

impl Pipe {
    /// Whether another job fits.
    fn room(&self) -> bool {
        self.len < DEPTH
    }

    /// Adds `q`, queued: `false` if there was no [`Pipe::room`].
    fn push(&mut self, q: Queued) -> bool {
        let Some(slot) = self.queued.get_mut(self.len) else {
            return false;
        };
        *slot = Some(q);
        self.len += 1;
        self.jobs += 1;
        self.last = q.record;
        true
    }

    /// The oldest job, taken off.
    fn pop(&mut self) -> Option<Queued> {
        if self.len == 0 {
            return None;
        }
        let oldest = self.queued[0].take();
        self.queued.rotate_left(1);
        self.len -= 1;
        oldest
    }

    /// Forgets every job (the engine was reset: none runs any more).
    fn clear(&mut self) {
        self.queued = [None; DEPTH];
        self.len = 0;
    }
}

impl Engine<'_> {
    /// Runs the windows of `job` from job offset `off` on the device,
    /// pipelined, for as long as they can be (see the module's
    /// documentation): the bytes they ran; 0 if the window at `off`
    /// cannot be, or is the job's last (it runs as
    /// `super::Engine::window` runs it).
    pub(super) fn pipeline(
        &mut self,
        (mirror, cancel): (&DevMirror, &Cancel<'_>),
        job: &Job,
        off: usize,
        write: bool,
        done: &mut Done,
    ) -> Result<usize> {
        let pool = self.pool;
        let Some(hw) = pool.hw() else {
            return Ok(0);
        };
        let replicas = self.replicate.dst || self.replicate.src;
        if replicas || self.cpu_only || self.unpipelined == Some(off) || !pipelining() {
            return Ok(0);
        }
        if !job::jobs_used() || !hw.jobs.usable() || !hw.mmu.usable() {
            return Ok(0);
        }
        // The job's last window gains nothing.
        if off + window_len(job, off) >= job.len {
            return Ok(0);
        }
        let guard = mirror.lock();
        let table = guard.table();
        let Some(dt) = table.device_table() else {
            return Ok(0);
        };
        let ctx = dt.id();
        if self.covered(table, job, off, write).is_none() {
            return Ok(0);
        }
        // What the table dropped since the context's last job leaves the
        // device's TLB first; nothing more is dropped while the lock is
        // held.
        if dt.flush().is_err() {
            return Ok(0);
        }
        let Ok(mut session) = hw.jobs.session() else {
            return Ok(0);
        };
        if !self.write(table, job, off, write) {
            return Ok(0);
        }
        // Other devices' CPU engines add to this VRAM under its `atomics`.
        let atomics = matches!(job.op, Op::AtomicAdd(_)).then(|| pool.atomics.lock());
        let faults = &*hw.faults;
        let mut pipe = Pipe::default();
        let mut at = off;
        let r = loop {
            // The window at `at` is ready: its entries written.
            let n = window_len(job, at);
            let pushed = self.push(&mut session, &mut pipe, (job, at, n), ctx, done);
            if let Err(e) = pushed {
                break Err(e);
            }
            at += n;
            if !pipe.room() {
                if let Err(e) =
                    self.complete(&mut session, &mut pipe, (table, faults), (job, write), done)
                {
                    break Err(e);
                }
            }
            if at >= job.len || cancel.check().is_err() {
                break Ok(());
            }
            let wanted = atomics.is_some() && pool.atomics.contended();
            if wanted || guard.contended() || session.contended() {
                // The next window runs alone: the waiter's turn.
                self.unpipelined = Some(at);
                hw.jobs.stats.yields.add(1, Relaxed);
                break Ok(());
            }
            if self.covered(table, job, at, write).is_none() || !self.write(table, job, at, write) {
                break Ok(());
            }
        };
        // Nothing stays queued, however it ended (the invariant of `Pipe`).
        let mut drained = Ok(());
        while pipe.len > 0 {
            let waited =
                self.complete(&mut session, &mut pipe, (table, faults), (job, write), done);
            drained = drained.and(waited);
        }
        let r = r.and(drained);
        if r.is_err() {
            // A job that failed may have left translations in the TLB (a
            // stale one, checking mode found): none is trusted again.
            dt.invalidate(0, usize::MAX);
        }
        r?;
        if let Op::Checksum = job.op {
            done.result = session.parts().1.scratch(pipe.last)?;
        }
        hw.jobs.stats.pipelined.add((pipe.jobs - 1) as u64, Relaxed);
        Ok(at - off)
    }

    /// The pages of the window at job offset `at`, if it can join a
    /// pipeline: every page it uses has an entry with the access it needs,
    /// none is read through replicas, its faults were not left to the
    /// job's context, and an ATOMIC_ADD's words are whole.
    fn covered(&self, table: &DevPt, job: &Job, at: usize, write: bool) -> Option<WindowPages> {
        let n = window_len(job, at);
        let w = WindowPages::new(job, (at, n));
        let atomic = matches!(job.op, Op::AtomicAdd(_));
        if atomic && (w.dst % 8 != 0 || n % 8 != 0) {
            return None;
        }
        if self.unserved.contains(&Some(at))
            || self.keep.meets_replicated(w.dst_first, w.dst_pages)
            || self.keep.meets_replicated(w.src_first, w.src_pages)
        {
            return None;
        }
        let covers = table.covers(w.dst_first, w.dst_pages, write, true)
            && table.covers(w.src_first, w.src_pages, false, true);
        covers.then_some(w)
    }

    /// Writes the device's entries of the window at job offset `at` (see
    /// [`Self::write_window`]); `false` if they cannot be (an ATOMIC_ADD
    /// over a peer's page, no table page free): the window is for the CPU,
    /// and no pipeline or device job tries it again.
    fn write(&mut self, table: &DevPt, job: &Job, at: usize, write: bool) -> bool {
        let w = WindowPages::new(job, (at, window_len(job, at)));
        let atomic = matches!(job.op, Op::AtomicAdd(_));
        let written = table
            .device_table()
            .is_some_and(|dt| self.write_window(table, dt, w, atomic, write));
        if !written {
            self.unpipelined = Some(at);
            self.not_here = Some(at);
        }
        written
    }

    /// Queues the job of bytes `[at, at + n)` of `job`, its entries
    /// written in context `ctx`.
    fn push(
        &mut self,
        session: &mut Session<'_, JobBlock>,
        pipe: &mut Pipe,
        (job, at, n): (&Job, usize, usize),
        ctx: u32,
        done: &mut Done,
    ) -> Result {
        if !pipe.room() {
            return Err(EINVAL);
        }
        let w = WindowPages::new(job, (at, n));
        let record = RECORDS[pipe.jobs % DEPTH];
        let (_, mut runner) = session.parts();
        // (A FILL's pattern words are written again, with the same bytes,
        // while the job before may read them.)
        let mut cmd = self.command(&mut runner, ctx, (job, w, n), done)?;
        cmd.result = runner.scratch_addr(record).ok_or(EINVAL)?;
        if matches!(job.op, Op::Checksum) && pipe.jobs > 0 {
            cmd.chain = true;
            cmd.src = runner.scratch_addr(pipe.last).ok_or(EINVAL)?;
        }
        // SAFETY: the job reaches what the VM's device page table maps for
        // its window, as written into the device's tables under the
        // mirror's lock that `pipeline` holds (`write`), after the flush
        // that started the pipeline and with nothing dropped since: this
        // device's VRAM pages (their adds serialised by `atomics`, held),
        // DMA and P2P mappings that the table holds for the device; the
        // lock and the session are held until every job queued has been
        // waited for, or the engine reset (`Pipe`'s invariant: `pipeline`
        // drains it), and an engine lost (`RunError::Lost`) has its bus
        // mastering turned off (`Self::failed`); nothing else runs on the
        // session meanwhile. The pattern, the records and a CHAIN's seed
        // are the queue's own scratch words.
        let queued = unsafe { runner.queue(&cmd) };
        let seqno = match queued {
            Ok(seqno) => seqno,
            Err(e) => {
                // The engine was reset: no job queued runs any more.
                pipe.clear();
                return Err(self.failed(session, e));
            }
        };
        let pushed = pipe.push(Queued {
            seqno,
            cmd,
            record,
            at,
            n,
        });
        if !pushed {
            // (Not with the room checked above.) A job the pipeline would
            // not wait for: every job queued ends with the reset.
            let e = session.parts().1.abandon();
            pipe.clear();
            return Err(self.failed(session, e));
        }
        Ok(())
    }

    /// Waits for the oldest job queued and counts it: its TLB's hits and
    /// misses, and what its window's binds would count (as for a window
    /// the device ran alone, `Self::ran`).
    fn complete(
        &mut self,
        session: &mut Session<'_, JobBlock>,
        pipe: &mut Pipe,
        (table, faults): (&DevPt, &FaultBuffer),
        (job, write): (&Job, bool),
        done: &mut Done,
    ) -> Result {
        let Some(q) = pipe.pop() else {
            return Ok(());
        };
        let (_, mut runner) = session.parts();
        let stalls = || faults.stalled();
        let e = match runner.wait_queued((q.seqno, &q.cmd), &stalls) {
            Ok(Waited::Done) => {
                let tlb = runner.scratch(q.record + (TLB_WORD - RESULT_WORD))?;
                let s = &self.pool.stats;
                s.tlb_hits.add(tlb & 0xffff_ffff, Relaxed);
                s.tlb_misses.add(tlb >> 32, Relaxed);
                let w = WindowPages::new(job, (q.at, q.n));
                let ahead = self.ahead.contains(&Some(q.at));
                return self.ran(table, (job, w, q.n), write, (false, ahead), done);
            }
            // Never with every entry there: its records taken, the job
            // given up, the engine reset.
            Ok(Waited::Stalled) => {
                let _ = faults.take(&runner, q.seqno);
                runner.abandon()
            }
            Err(e) => e,
        };
        // The engine was reset: no job queued runs any more.
        pipe.clear();
        Err(self.failed(session, e))
    }
}
