// SPDX-License-Identifier: GPL-2.0

//! A window on the device: where the device runs jobs itself (msvm-gpu's
//! job engine, `crate::gpu::job`), each window of a job runs there, as one
//! job in the VM's context, on the device's ring, waited for by
//! interrupt. Its last-level tables are written from the VM's device page
//! table into the device's (`crate::gpu::mmu`), in the device's format: a
//! page of this device's VRAM by its offset, a system page by its DMA
//! address, a peer's page by its bus address; a page the VM's table lacks
//! has no entry. The device walks those tables, keeps what it found in
//! its TLB, and touches nothing else; every change of the VM's table
//! invalidates that TLB first (`crate::mm::devpt`).
//!
//! An access the device cannot translate stalls the job and writes a fault
//! record (`crate::gpu::faults`). The job's thread, woken by the FAULT
//! interrupt, takes it and services it as the CPU's execution services a
//! miss: the faults of this window and of those after it raised on the
//! device's fault handler (`crate::fault`), with the device parked (its
//! ring's lock and the mirror's free); then, under the mirror's lock
//! again, the window's entries written anew, the TLB invalidated for what
//! changed meanwhile, and the access replayed. A fault the handler leaves
//! to the job (a page not present, a copy-on-write break) is cancelled:
//! the job ends where it stalled, which frees the device while the job's
//! thread services the window's rest in its own context, where it may
//! wait on its process; that rest then runs on the device again, or on
//! the CPU if its pages did not all get entries (`super::Engine::window`).
//!
//! Runs under the VM's mirror lock but while parked, as the CPU's
//! execution of a covered window does: the entries, and the pages and
//! mappings they name, stay valid while the device may use them.

use core::ops::Range;

use kernel::{device::Bound, mm::MmWithUser, pci, prelude::*, sync::atomic::Relaxed};

use crate::gpu::faults::{Answer, Taken};
use crate::gpu::job::{
    self, op, JobCommand, DONE_WORD, PATTERN_WORDS, RESULT_WORD, STATUS_WORD, TLB_WORD,
};
use crate::gpu::mmu::{SYSTEM, VALID, WRITE};
use crate::gpu::regs::{error, JobBlock};
use crate::gpu::ring::{RunError, Runner, Session, Waited};
use crate::mm::cancel::Cancel;
use crate::mm::devpt::{DevPt, DeviceTable, Mapping};
use crate::mm::devtables::DevMirror;
use crate::mm::page::{BLOCK_PAGES, BLOCK_SIZE, PAGE_SIZE};

use super::{later, Done, Engine, Job, Op, TableView, WindowPages};

/// A completion record's status: cancelled (hardware.rst, "Job engine").
const CANCELLED: u64 = 1;
/// Faults one window may stall on before the next is cancelled (an
/// invalidation that keeps zapping what its faults bind).
const MAX_STALLS: usize = 16;

/// Whether the window's job had its fault cancelled, and why.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cancelled {
    /// Not cancelled.
    No,
    /// Left to the job, its rest to run where [`Rest`] says.
    Left(Rest),
    /// The job ends with this error (the fault's service failed).
    Failed(Error),
}

/// Where the rest of a window whose fault was cancelled runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Rest {
    /// On the device again, once the job's context has serviced it.
    Device,
    /// On the CPU: the VM's table covers it, but its entries could not
    /// be written into the device's (no table page free, an ATOMIC_ADD
    /// over a peer's page, an MMU that does not answer, no context);
    /// `replay` if the handler serviced this window's faults (the CPU's
    /// run from the table counts as the replay), not if there was nothing
    /// to service.
    Cpu { replay: bool },
}

/// How a window went on the device.
pub(super) enum OnDevice {
    /// It ran whole.
    Ran,
    /// Its first bytes ran, these many; then a fault was cancelled: the
    /// rest is the job's (`super::Engine::window`), as [`Rest`] says.
    Part(usize, Rest),
    /// Not on the device (no device side, no table page free, an
    /// ATOMIC_ADD the device cannot do atomically, the job engine off or
    /// unusable): the CPU runs it.
    NotHere,
}

impl Engine<'_> {
    /// Runs bytes `[off, off + n)` of `job` (window `w`, at job offset
    /// `off`) on the device, if it runs jobs and the VM's table has its
    /// side there, servicing the faults it stalls on.
    pub(super) fn on_device(
        &mut self,
        (mm, mirror, cancel): (&MmWithUser, &DevMirror, &Cancel<'_>),
        (job, w, off, n): (&Job, WindowPages, usize, usize),
        write: bool,
        done: &mut Done,
    ) -> Result<OnDevice> {
        let pool = self.pool;
        let Some(hw) = pool.hw() else {
            return Ok(OnDevice::NotHere);
        };
        if !self.may_run(job, (w, n)) {
            return Ok(OnDevice::NotHere);
        }
        let atomic = matches!(job.op, Op::AtomicAdd(_));
        let s = &pool.stats;
        let ahead = self.ahead.contains(&Some(off));
        let mut guard = mirror.lock();
        {
            let table = guard.table();
            let Some(dt) = table.device_table() else {
                return Ok(OnDevice::NotHere);
            };
            if !self.write_window(table, dt, w, atomic, write) {
                return Ok(OnDevice::NotHere);
            }
            // What the table dropped since the context's last job leaves the
            // device's TLB first (an MMU that does not answer runs no job).
            if dt.flush().is_err() {
                return Ok(OnDevice::NotHere);
            }
        }
        // Nothing submitted yet: an engine going away leaves the window to
        // the CPU.
        let Ok(mut session) = hw.jobs.session() else {
            return Ok(OnDevice::NotHere);
        };
        let faults = &*hw.faults;
        let stalls = || faults.stalled();
        let ctx = match guard.table().device_table() {
            Some(dt) => dt.id(),
            None => return Ok(OnDevice::NotHere),
        };
        let cmd = {
            let (_, mut runner) = session.parts();
            self.command(&mut runner, ctx, (job, w, n), done)?
        };
        // Other devices' CPU engines add to this VRAM under its `atomics`
        // (not held while parked: it is taken after the mirror's lock).
        let mut atomics = atomic.then(|| pool.atomics.lock());
        // SAFETY: the job reaches what the VM's device page table maps for
        // its window, as written into the device's tables just now: this
        // device's VRAM pages, DMA and P2P mappings that the table holds
        // for the device, valid while the mirror's lock is held (until the
        // job completes, but while it stalls: then a change of the table
        // is invalidated in the device's TLB before the job is answered);
        // the pattern and the result are the queue's own scratch words.
        let mut r = unsafe { session.parts().1.start(&cmd, &stalls) };
        let mut stalled = 0;
        let mut cancelled = Cancelled::No;
        // Where a cancel's rest runs (set by the iteration that cancels).
        let mut left = Rest::Device;
        loop {
            match r {
                Ok(Waited::Done) => break,
                Ok(Waited::Stalled) => {}
                Err(e) => {
                    // A job that failed may have left translations in the
                    // TLB (a stale one, checking mode found): none is
                    // trusted again.
                    if let Some(dt) = guard.table().device_table() {
                        dt.invalidate(0, usize::MAX);
                    }
                    return Err(self.failed(&mut session, e));
                }
            }
            stalled += 1;
            // (A window resumed after its service in the job's context:
            // its fault is counted.)
            if stalled == 1 && !self.resumed {
                s.pt_faults.add(1, Relaxed);
            }
            let taken = {
                let (_, runner) = session.parts();
                faults.take(&runner, runner.inflight().unwrap_or(0))
            };
            let (answer, why) = match taken {
                // A cancelled job stalls no more: a device that does is
                // reset.
                _ if cancelled != Cancelled::No => {
                    let e = session.parts().1.abandon();
                    r = Err(e);
                    continue;
                }
                // Bounded: a window whose faults keep coming back (an
                // invalidation that keeps zapping them) goes to the job.
                _ if stalled > MAX_STALLS => (Answer::Cancel, None),
                // Consumed now: replayed, the fault is recorded.
                Taken::Overflow => (Answer::Replay, None),
                // Nothing to service.
                Taken::Nothing => (Answer::Cancel, None),
                Taken::Record(_) => {
                    let raised = self.faults_from(guard.table(), job, off);
                    if raised.n == 0 {
                        // Its entries are in the table but not the
                        // device's: a window for the CPU.
                        left = Rest::Cpu { replay: false };
                        (Answer::Cancel, None)
                    } else {
                        // Serviced with the device parked: its lock and
                        // the mirror's free for the handler.
                        drop(atomics.take());
                        let parked = session.park();
                        drop(guard);
                        job::delay_stall(cancel);
                        let o = raised.windows.iter().flatten().map(|&(o, ..)| o);
                        self.ahead = later(
                            off,
                            Iterator::chain(o, self.ahead.iter().flatten().copied()),
                        );
                        let replay = self.raise(mm, mirror, &raised);
                        guard = mirror.lock();
                        session = match parked.resume() {
                            Ok(s) => s,
                            Err(e) => return Err(self.lost(e)),
                        };
                        if atomic {
                            atomics = Some(pool.atomics.lock());
                        }
                        // What changed while it was parked leaves the TLB
                        // before any answer (a replay's entries written
                        // anew first).
                        let table = guard.table();
                        match replay {
                            Ok(true) => {
                                let answer = self.rewrite(table, w, atomic, write);
                                // Serviced, its entries not writable into
                                // the device's tables: for the CPU.
                                // (A replay for the CPU only if this
                                // window's own faults were among those
                                // serviced.)
                                let serviced = raised.current > 0;
                                if answer == Answer::Cancel {
                                    left = Rest::Cpu { replay: serviced };
                                }
                                (answer, None)
                            }
                            Ok(false) => (Self::flush(table), None),
                            Err(e) => (Self::flush(table), Some(e)),
                        }
                    }
                }
            };
            if answer == Answer::Cancel {
                cancelled = why.map_or(Cancelled::Left(left), Cancelled::Failed);
            }
            let (_, mut runner) = session.parts();
            // SAFETY: a replay's entries were written anew under the
            // mirror's lock, held until the job completes or stalls again,
            // and what changed since the stall is invalidated in the
            // device's TLB (`rewrite`'s flush); a cancelled job reaches
            // nothing more.
            r = match unsafe { faults.answer(&mut runner, answer) } {
                Ok(()) => runner.wait_again(&cmd, &stalls),
                Err(_) => Err(runner.abandon()),
            };
        }
        let (_, runner) = session.parts();
        let record = [RESULT_WORD, TLB_WORD, DONE_WORD, STATUS_WORD].map(|k| runner.scratch(k));
        let [result, tlb, ran, status] = record;
        let (tlb, ran, status) = (tlb?, ran?, status?);
        if let Op::Checksum = job.op {
            done.result = result?;
        }
        s.tlb_hits.add(tlb & 0xffff_ffff, Relaxed);
        s.tlb_misses.add(tlb >> 32, Relaxed);
        let table = guard.table();
        if status == CANCELLED {
            if let Cancelled::Failed(e) = cancelled {
                return Err(e);
            }
            // CAST: at most the window's length, which is a `usize`.
            let ran = (ran as usize).min(n);
            if ran > 0 {
                let part = WindowPages::new(job, (off, ran));
                self.account_used(table, part, write, done)?;
                self.count(table, job, part, ran);
            }
            let rest = match cancelled {
                Cancelled::Left(rest) => rest,
                _ => Rest::Device,
            };
            return Ok(OnDevice::Part(ran, rest));
        }
        self.ran(table, (job, w, n), write, (stalled > 0, ahead), done)?;
        Ok(OnDevice::Ran)
    }

    /// Whether the device may run bytes `w.dst..w.dst + n` of `job`: it
    /// runs jobs (msvm-gpu, its job engine and MMU usable and in use), and
    /// an ATOMIC_ADD's words are whole. (It may still not: no context or
    /// table page free, an ATOMIC_ADD over a peer's page.)
    pub(super) fn may_run(&self, job: &Job, (w, n): (WindowPages, usize)) -> bool {
        let Some(hw) = self.pool.hw() else {
            return false;
        };
        if !job::jobs_used() || !hw.jobs.usable() || !hw.mmu.usable() {
            return false;
        }
        let atomic = matches!(job.op, Op::AtomicAdd(_));
        !(atomic && (w.dst % 8 != 0 || n % 8 != 0))
    }

    /// Counts a window the device ran whole: a hit of the VM's table, or,
    /// if it `stalled` or a raise before serviced it `ahead`, a replay (and
    /// the fault, for one serviced ahead), or neither for one resumed after
    /// its service in the job's context and not stalled again (its fault
    /// was counted; a service in the job's context is not a replay, as on
    /// the CPU); then what its pages' binds would count
    /// ([`Self::account_used`], [`Self::count`]).
    pub(super) fn ran(
        &self,
        table: &DevPt,
        (job, w, n): (&Job, WindowPages, usize),
        write: bool,
        (stalled, ahead): (bool, bool),
        done: &mut Done,
    ) -> Result {
        let s = &self.pool.stats;
        // (Resumed and not stalled again: counted as its fault.)
        if stalled || (ahead && !self.resumed) {
            if ahead && !stalled {
                s.pt_faults.add(1, Relaxed);
            }
            s.pt_replays.add(1, Relaxed);
        } else if !self.resumed {
            s.pt_hits.add(1, Relaxed);
        }
        self.account_used(table, w, write, done)?;
        self.count(table, job, w, n);
        Ok(())
    }

    /// Counts what a fault's bind would for the pages of `w` the device
    /// used (uses for the eviction policy, accesses to memory not this
    /// device's, pages by path), if their entries are all still there (a
    /// stall may have let an invalidation take one it was done with).
    fn account_used(&self, table: &DevPt, w: WindowPages, write: bool, done: &mut Done) -> Result {
        let covered = table.covers(w.dst_first, w.dst_pages, write, true)
            && table.covers(w.src_first, w.src_pages, false, true);
        if covered {
            let pool = self.pool;
            let view = |first| TableView { table, pool, first };
            self.account(&view(w.dst_first), w.dst_pages, write, done)?;
            self.account(&view(w.src_first), w.src_pages, false, done)?;
        }
        // The TLB's figures are the device's: the emulated one's lookups
        // (the accounting's) are dropped.
        table.tlb_counts();
        Ok(())
    }

    /// Writes the device's entries of the window's pages from the VM's
    /// `table` and marks the system pages the job may write so (before the
    /// device writes them: reclaim sees the mark only once the mirror's
    /// lock is free): `false` if the window is for the CPU (a peer's page
    /// under an ATOMIC_ADD; no table page free).
    pub(super) fn write_window(
        &mut self,
        table: &DevPt,
        dt: &dyn DeviceTable,
        w: WindowPages,
        atomic: bool,
        write: bool,
    ) -> bool {
        // The pages the window touches, in the device's tables: the
        // destination's (one block), the source's (one or two).
        let [a, b] = spans(w.dst_first, w.dst_pages);
        let [c, d] = if w.src.is_some() {
            spans(w.src_first, w.src_pages)
        } else {
            [None, None]
        };
        for (block, pages) in [a, b, c, d].into_iter().flatten() {
            if self.write_entries(table, dt, (block, pages), atomic) != Some(true) {
                return false;
            }
        }
        if write {
            for i in 0..w.dst_pages {
                if let Some(Mapping::Dma(page)) = table.mapping(w.dst_first + i * PAGE_SIZE) {
                    page.written();
                }
            }
        }
        true
    }

    /// After a stall's service that ends in a cancel: the device's TLB
    /// invalidated for what changed while it was parked (a cancelled job
    /// reaches nothing more; this keeps the TLB true all the same).
    fn flush(table: &DevPt) -> Answer {
        if let Some(dt) = table.device_table() {
            // An MMU that does not answer runs no job again.
            let _ = dt.flush();
        }
        Answer::Cancel
    }

    /// After a stall's service: the window's entries written anew and the
    /// device's TLB invalidated for what changed while it was parked;
    /// [`Answer::Cancel`] if that fails (the window is for the CPU).
    fn rewrite(&mut self, table: &DevPt, w: WindowPages, atomic: bool, write: bool) -> Answer {
        let Some(dt) = table.device_table() else {
            return Answer::Cancel;
        };
        if !self.write_window(table, dt, w, atomic, write) || dt.flush().is_err() {
            return Answer::Cancel;
        }
        Answer::Replay
    }

    /// Counts the bytes the job reached per kind of memory, as the CPU's
    /// execution counts them (`engine_*` in `DRM_IOCTL_MSVM_STATS`).
    fn count(&self, table: &DevPt, job: &Job, w: WindowPages, n: usize) {
        let (read, written) = match job.op {
            Op::Fill(_) => (false, true),
            Op::Copy { .. } => (false, true),
            Op::AtomicAdd(_) => (true, true),
            Op::Checksum => (true, false),
        };
        self.count_range(table, w.dst, n, (read, written));
        if let Some(src) = w.src {
            self.count_range(table, src, n, (true, false));
        }
    }

    /// Counts `n` bytes from `addr`, read and/or written.
    fn count_range(&self, table: &DevPt, addr: usize, n: usize, (read, written): (bool, bool)) {
        let s = &self.pool.stats;
        let mut at = addr;
        while at < addr + n {
            let len = (PAGE_SIZE - at % PAGE_SIZE).min(addr + n - at);
            let (r, w) = (if read { len } else { 0 }, if written { len } else { 0 });
            let (r64, w64) = (r as u64, w as u64);
            match table.mapping(at) {
                Some(Mapping::Own(_)) => {
                    s.engine_vram_read.add(r64, Relaxed);
                    s.engine_vram_written.add(w64, Relaxed);
                }
                Some(Mapping::Dma(_)) => {
                    s.engine_sys_read.add(r64, Relaxed);
                    s.engine_sys_written.add(w64, Relaxed);
                }
                Some(Mapping::Peer(page)) => {
                    if let Some((peer, _)) = self.pool.locate(page) {
                        s.count_p2p(peer.index(), r, w);
                    }
                }
                None => {}
            }
            at += len;
        }
    }

    /// Writes the device's entries of pages `pages` of block `block` from
    /// the VM's `table` (the window's: the job touches no other):
    /// `Some(false)` if the window is for the CPU (a peer's page under an
    /// ATOMIC_ADD; no table page free).
    fn write_entries(
        &mut self,
        table: &DevPt,
        dt: &dyn DeviceTable,
        (block, pages): (usize, Range<usize>),
        atomic: bool,
    ) -> Option<bool> {
        let leaf = self.leaf.get_mut(pages.clone())?;
        leaf.fill(0);
        let mut peer = false;
        let pool = self.pool;
        let from = pages.start;
        table.for_each_entry(block, pages.clone(), |i, m, addr, writable| {
            let w = if writable { WRITE } else { 0 };
            let Some(e) = leaf.get_mut(i - from) else {
                return;
            };
            *e = match m {
                Mapping::Own(page) => match pool.offset_of(page) {
                    Some(off) => off as u64 | VALID | w,
                    None => 0,
                },
                Mapping::Dma(_) => addr | VALID | SYSTEM | w,
                Mapping::Peer(_) => {
                    peer = true;
                    addr | VALID | SYSTEM | w
                }
            };
        });
        // PCIe AtomicOps do not cross QEMU's DMA path: a peer's page is
        // added to by the CPU (under its owner's `atomics`).
        if atomic && peer {
            return Some(false);
        }
        Some(dt.write_entries(block, from, leaf).is_ok())
    }

    /// The window's job, in context `ctx`, its pattern in `runner`'s
    /// scratch words.
    pub(super) fn command(
        &self,
        runner: &mut Runner<'_, JobBlock>,
        ctx: u32,
        (job, w, n): (&Job, WindowPages, usize),
        done: &Done,
    ) -> Result<JobCommand> {
        let mut c = JobCommand {
            op: 0,
            ctx,
            pattern_len: 0,
            dst: w.dst as u64,
            src: 0,
            len: n as u64,
            phase: 0,
            result: runner.scratch_addr(RESULT_WORD).ok_or(EINVAL)?,
            chain: false,
        };
        match job.op {
            Op::Fill(p) => {
                let bytes = p.bytes.get(..p.len).ok_or(EINVAL)?;
                for (k, chunk) in bytes.chunks(8).enumerate().take(PATTERN_WORDS) {
                    let mut word = [0u8; 8];
                    word[..chunk.len()].copy_from_slice(chunk);
                    runner.set_scratch(k, u64::from_le_bytes(word))?;
                }
                c.op = op::FILL;
                c.src = runner.scratch_addr(0).ok_or(EINVAL)?;
                c.pattern_len = p.len as u32;
                c.phase = (w.dst - job.addr) as u64;
            }
            Op::Copy { .. } => {
                c.op = op::COPY;
                c.src = w.src.ok_or(EINVAL)? as u64;
            }
            Op::AtomicAdd(v) => {
                c.op = op::ATOMIC_ADD;
                c.src = v;
            }
            Op::Checksum => {
                c.op = op::CHECKSUM;
                c.phase = done.result;
            }
        }
        Ok(c)
    }

    /// The job failed: its error, logged if it says a TLB invalidation was
    /// missed; a lost engine loses the device its bus mastering.
    pub(super) fn failed(&self, session: &mut Session<'_, JobBlock>, e: RunError) -> Error {
        match e {
            RunError::Failed { code, addr } => {
                if code == error::STALE_TLB {
                    pr_err!(
                        "gpu{}: the device used a stale translation at {addr:#x}: a TLB invalidation was missed\n",
                        self.pool.index()
                    );
                }
                EIO
            }
            RunError::Lost => {
                // It may still reach what the job's tables name, which the
                // mm frees as it likes: the device DMAs no more (bus
                // mastering off: a device lost, its engines and interrupt
                // with it; what it holds in its own VRAM is beyond reach).
                if let Ok(pdev) = <&pci::Device<Bound>>::try_from(session.parts().0) {
                    crate::mm::pci::clear_master(pdev);
                }
                self.lost(e)
            }
        }
    }

    /// The engine was shut down while the job was parked (the device is
    /// going: it is disabled, bus mastering with it): its error.
    fn lost(&self, e: RunError) -> Error {
        pr_err!(
            "gpu{}: the job engine went while a job stalled on a fault ({e:?})\n",
            self.pool.index()
        );
        EIO
    }
}

/// Entries of a last-level table: one per page of a 2 MiB block.
pub(super) const LEAF_ENTRIES: usize = BLOCK_PAGES;

/// The 2 MiB blocks `pages` pages from page-aligned address `first` lie
/// in (two at most: a window is at most a block), with the pages' indices
/// in each.
fn spans(first: usize, pages: usize) -> [Option<(usize, Range<usize>)>; 2] {
    if pages == 0 {
        return [None, None];
    }
    let block = first / BLOCK_SIZE;
    let from = first % BLOCK_SIZE / PAGE_SIZE;
    let here = pages.min(BLOCK_PAGES - from);
    let rest = pages - here;
    [
        Some((block, from..from + here)),
        (rest > 0).then(|| (block + 1, 0..rest.min(BLOCK_PAGES))),
    ]
}

#[kunit_tests(msvm_engine_device)]
mod tests {
    use super::*;

    #[test]
    fn spans_split_at_a_block() {
        let b = 7 * BLOCK_SIZE;
        // Inside one block.
        assert_eq!(spans(b + 3 * PAGE_SIZE, 2), [Some((7, 3..5)), None]);
        // A whole block.
        assert_eq!(spans(b, BLOCK_PAGES), [Some((7, 0..BLOCK_PAGES)), None]);
        // Across the end of one into the next (a COPY's source).
        assert_eq!(
            spans(b + (BLOCK_PAGES - 1) * PAGE_SIZE, 3),
            [Some((7, BLOCK_PAGES - 1..BLOCK_PAGES)), Some((8, 0..2))]
        );
        assert_eq!(spans(b, 0), [None, None]);
    }
}
