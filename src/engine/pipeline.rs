// SPDX-License-Identifier: GPL-2.0

//! Windows in a row on the device, pipelined. Where every page of a
//! job's next windows has an entry in the VM's device page table (a warm
//! job), each window still runs as one job on msvm-gpu's job engine
//! (`super::device`), but the next is queued behind it while it runs, its
//! entries written and its uses counted meanwhile, so that the engine goes
//! from one window to the next without waiting for msvm: one running, one
//! queued ([`DEPTH`]). A CHECKSUM's jobs continue one hash (the device's
//! CHAIN flag: a job's seed is the hash in the record of the one before),
//! and the jobs' completion records take turns in two slots, so that the
//! device writes one while msvm reads the other.
//!
//! The VM's mirror lock and the job engine are held from the first window
//! to the last one's completion, as a single window's are: the entries,
//! and the pages and mappings they name, stay while the device may use
//! them. The pipeline ends early, after what it queued has completed, when
//! someone else wants either ([`MirrorGuard::contended`]: an invalidation
//! of the process; [`Session::contended`]: another job for the device),
//! when the ioctl must stop, and before a window it cannot run this way
//! (an entry missing: that window faults, as `super::device` runs it; one
//! read through replicas; an ATOMIC_ADD over a peer's page).
//!
//! A job of the pipeline never stalls: its entries are all there, and
//! nothing takes them while the lock is held. If one did, the engine is
//! reset, which ends every job queued, and the job fails with `EIO`, as
//! does one the device fails.
//!
//! [`MirrorGuard::contended`]: crate::mm::hmm::MirrorGuard::contended

use kernel::{
    prelude::*,
    sync::atomic::{Atomic, Relaxed},
};

use crate::gpu::job::{self, JobCommand, RECORDS, RESULT_WORD, TLB_WORD};
use crate::gpu::regs::JobBlock;
use crate::gpu::ring::{Session, Waited};
use crate::mm::cancel::Cancel;
use crate::mm::devpt::DevPt;
use crate::mm::devtables::DevMirror;
use crate::mm::page::BLOCK_SIZE;

use super::{Done, Engine, Job, Op, WindowPages};

/// Windows on the device at once: one running, one queued behind it.
const DEPTH: usize = 2;

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

/// The bytes of `job`'s window at job offset `off`: to the end of the
/// destination's 2 MiB block, or of the job.
pub(super) fn window_len(job: &Job, off: usize) -> usize {
    let a = job.addr + off;
    let end = (a / BLOCK_SIZE + 1) * BLOCK_SIZE;
    (end - a).min(job.len - off)
}

/// A window's job, queued.
#[derive(Clone, Copy)]
struct Queued {
    seqno: u64,
    cmd: JobCommand,
    /// Its completion record: the first word's index in the scratch words.
    record: usize,
}

/// The windows queued, oldest first.
#[derive(Default)]
struct Pipe {
    queued: [Option<Queued>; DEPTH],
    /// Jobs queued so far (the next one's record slot is its parity).
    jobs: usize,
    /// The record of the last job queued.
    last: usize,
}

impl Pipe {
    fn len(&self) -> usize {
        self.queued.iter().flatten().count()
    }

    fn push(&mut self, q: Queued) {
        if let Some(free) = self.queued.iter_mut().find(|q| q.is_none()) {
            *free = Some(q);
        }
        self.jobs += 1;
        self.last = q.record;
    }

    /// The oldest job, taken off.
    fn pop(&mut self) -> Option<Queued> {
        let oldest = self.queued.first_mut()?.take();
        self.queued.rotate_left(1);
        oldest
    }

    /// Forgets every job (the engine was reset: none runs any more).
    fn clear(&mut self) {
        self.queued = [None; DEPTH];
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
        if replicas || self.cpu_only || !pipelining() || !job::jobs_used() {
            return Ok(0);
        }
        if !hw.jobs.usable() || !hw.mmu.usable() {
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
        // What the table dropped since the context's last job leaves the
        // device's TLB first; nothing more is dropped while the lock is
        // held.
        if !self.ready(table, job, off, write) || dt.flush().is_err() {
            return Ok(0);
        }
        let Ok(mut session) = hw.jobs.session() else {
            return Ok(0);
        };
        // Other devices' CPU engines add to this VRAM under its `atomics`.
        let _atomics = matches!(job.op, Op::AtomicAdd(_)).then(|| pool.atomics.lock());
        let faults = &*hw.faults;
        let stalls = || faults.stalled();
        let mut pipe = Pipe::default();
        let mut at = off;
        let mut yielded = false;
        let r = loop {
            // The window at `at` is ready: its entries written.
            let n = window_len(job, at);
            let pushed = self.push(
                &mut session,
                &mut pipe,
                table,
                (job, at, n),
                (ctx, write),
                done,
            );
            if let Err(e) = pushed.and_then(|()| {
                if pipe.len() == DEPTH {
                    self.complete(&mut session, &mut pipe, &stalls)
                } else {
                    Ok(())
                }
            }) {
                break Err(e);
            }
            at += n;
            if at >= job.len || cancel.check().is_err() {
                break Ok(());
            }
            if guard.contended() || session.contended() {
                yielded = true;
                break Ok(());
            }
            if !self.ready(table, job, at, write) {
                break Ok(());
            }
        };
        // Nothing stays queued, however it ended.
        let mut drained = Ok(());
        while pipe.len() > 0 {
            drained = drained.and(self.complete(&mut session, &mut pipe, &stalls));
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
        let s = &hw.jobs.stats;
        s.pipelined.add((pipe.jobs - 1) as u64, Relaxed);
        if yielded {
            s.yields.add(1, Relaxed);
        }
        Ok(at - off)
    }

    /// Whether the window at job offset `at` can join a pipeline: every
    /// page it uses has an entry with the access it needs, none is read
    /// through replicas, its faults were not left to the job's context,
    /// and its entries are written into the device's tables (they are not
    /// for an ATOMIC_ADD over a peer's page, or with no table page free).
    fn ready(&mut self, table: &DevPt, job: &Job, at: usize, write: bool) -> bool {
        let n = window_len(job, at);
        let w = WindowPages::new(job, (at, n));
        let atomic = matches!(job.op, Op::AtomicAdd(_));
        if atomic && (w.dst % 8 != 0 || n % 8 != 0) {
            return false;
        }
        if self.unserved.contains(&Some(at))
            || self.keep.meets_replicated(w.dst_first, w.dst_pages)
            || self.keep.meets_replicated(w.src_first, w.src_pages)
        {
            return false;
        }
        if !table.covers(w.dst_first, w.dst_pages, write, true)
            || !table.covers(w.src_first, w.src_pages, false, true)
        {
            return false;
        }
        let Some(dt) = table.device_table() else {
            return false;
        };
        self.write_window(table, dt, w, atomic, write)
    }

    /// Queues the job of bytes `[at, at + n)` of `job` (its entries
    /// written), and counts what it uses.
    fn push(
        &mut self,
        session: &mut Session<'_, JobBlock>,
        pipe: &mut Pipe,
        table: &DevPt,
        (job, at, n): (&Job, usize, usize),
        (ctx, write): (u32, bool),
        done: &mut Done,
    ) -> Result {
        let w = WindowPages::new(job, (at, n));
        let record = RECORDS[pipe.jobs % 2];
        let (_, mut runner) = session.parts();
        let mut cmd = self.command(&mut runner, ctx, (job, w, n), done)?;
        cmd.result = runner.scratch_addr(record).ok_or(EINVAL)?;
        if matches!(job.op, Op::Checksum) && pipe.jobs > 0 {
            cmd.chain = true;
            cmd.src = runner.scratch_addr(pipe.last).ok_or(EINVAL)?;
        }
        // SAFETY: the job reaches what the VM's device page table maps for
        // its window, as written into the device's tables (`ready`): this
        // device's VRAM pages, DMA and P2P mappings that the table holds
        // for the device, which stay while the mirror's lock is held, until
        // the pipeline has waited for every job it queued (`complete`), or
        // the engine was reset; the pattern, the records and a CHAIN's seed
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
        pipe.push(Queued { seqno, cmd, record });
        // Counted as the window runs.
        let ahead = self.ahead.contains(&Some(at));
        self.ran(table, (job, w, n), write, (false, ahead), done)
    }

    /// Waits for the oldest job queued, and counts its TLB's hits and
    /// misses.
    fn complete(
        &mut self,
        session: &mut Session<'_, JobBlock>,
        pipe: &mut Pipe,
        stalls: &dyn Fn() -> bool,
    ) -> Result {
        let Some(q) = pipe.pop() else {
            return Ok(());
        };
        let (_, mut runner) = session.parts();
        let e = match runner.wait_queued((q.seqno, &q.cmd), stalls) {
            Ok(Waited::Done) => {
                let tlb = runner.scratch(q.record + (TLB_WORD - RESULT_WORD))?;
                let s = &self.pool.stats;
                s.tlb_hits.add(tlb & 0xffff_ffff, Relaxed);
                s.tlb_misses.add(tlb >> 32, Relaxed);
                return Ok(());
            }
            // Never with every entry there: given up, the engine reset.
            Ok(Waited::Stalled) => runner.abandon(),
            Err(e) => e,
        };
        // The engine was reset: no job queued runs any more.
        pipe.clear();
        Err(self.failed(session, e))
    }
}
