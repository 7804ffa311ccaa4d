// SPDX-License-Identifier: GPL-2.0

//! A window on the device: where the device runs jobs itself (msvm-gpu's
//! job engine, `crate::gpu::job`), a window the VM's device page table
//! covers runs there. Its last-level tables are written from the VM's
//! table into the device's (`crate::gpu::mmu`), in the device's format:
//! a page of this device's VRAM by its offset, a system page by its DMA
//! address, a peer's page by its bus address; then one job, in the VM's
//! context, on the device's ring, waited for by interrupt. The device
//! walks those tables, keeps what it found in its TLB, and touches
//! nothing else; every change of the VM's table invalidates that TLB
//! first (`crate::mm::devpt`).
//!
//! Runs under the VM's mirror lock, as the CPU's execution of a covered
//! window does: the entries, and the pages and mappings they name, stay
//! valid until the job is done.

use core::ops::Range;

use kernel::{device::Bound, pci, prelude::*, sync::atomic::Relaxed};

use crate::gpu::job::{self, op, JobCommand, PATTERN_WORDS, RESULT_WORD, TLB_WORD};
use crate::gpu::mmu::{SYSTEM, VALID, WRITE};
use crate::gpu::regs::JobBlock;
use crate::gpu::ring::{RunError, Session};
use crate::mm::devpt::{DevPt, DeviceTable, Mapping};
use crate::mm::page::{BLOCK_PAGES, BLOCK_SIZE, PAGE_SIZE};

use super::{Done, Engine, Job, Op, WindowPages};

/// The device's refusal of a job, as its error codes say
/// (hardware.rst, "Rings").
const STALE_TLB: u32 = 6;

impl Engine<'_> {
    /// Runs bytes `[off, off + n)` of `job` (window `w`) on the device, if
    /// it runs jobs and the VM's `table` has its side there, and returns
    /// the device's TLB hits and misses for it: `None` if the
    /// window is for the CPU instead (no device side, no table page free,
    /// an ATOMIC_ADD the device cannot do atomically, the job engine off
    /// or unusable).
    pub(super) fn on_device(
        &mut self,
        table: &DevPt,
        (job, w, n): (&Job, WindowPages, usize),
        done: &mut Done,
    ) -> Option<Result<(u64, u64)>> {
        let hw = self.pool.hw()?;
        let dt = table.device_table()?;
        if !job::jobs_used() || !hw.jobs.usable() || !hw.mmu.usable() {
            return None;
        }
        let atomic = matches!(job.op, Op::AtomicAdd(_));
        if atomic && (w.dst % 8 != 0 || n % 8 != 0) {
            return None;
        }
        // The pages the window touches, in the device's tables: the
        // destination's (one block), the source's (one or two).
        let [a, b] = spans(w.dst_first, w.dst_pages);
        let [c, d] = if w.src.is_some() {
            spans(w.src_first, w.src_pages)
        } else {
            [None, None]
        };
        for (block, pages) in [a, b, c, d].into_iter().flatten() {
            if !self.write_entries(table, dt, (block, pages), atomic)? {
                return None;
            }
        }
        // What the table dropped since the context's last job leaves the
        // device's TLB first (an MMU that does not answer runs no job).
        dt.flush().ok()?;
        // Nothing submitted yet: an engine going away leaves the window to
        // the CPU.
        let mut session = hw.jobs.session().ok()?;
        let r = self.submit(&mut session, dt.id(), (job, w, n), done);
        if r.is_err() {
            // A job that failed may have left translations in the TLB (a
            // stale one, checking mode found): none is trusted again.
            dt.invalidate(0, usize::MAX);
        }
        Some(r.inspect(|_| self.count(table, job, w, n)))
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

    /// Runs the window as one job in context `ctx` and waits for it:
    /// the device's TLB hits and misses for it.
    fn submit(
        &self,
        session: &mut Session<'_, JobBlock>,
        ctx: u32,
        (job, w, n): (&Job, WindowPages, usize),
        done: &mut Done,
    ) -> Result<(u64, u64)> {
        let (dev, mut runner) = session.parts();
        let mut c = JobCommand {
            op: 0,
            ctx,
            pattern_len: 0,
            dst: w.dst as u64,
            src: 0,
            len: n as u64,
            phase: 0,
            result: runner.scratch_addr(RESULT_WORD).ok_or(EINVAL)?,
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
        // Other devices' CPU engines add to this VRAM under its `atomics`.
        let _atomics = matches!(job.op, Op::AtomicAdd(_)).then(|| self.pool.atomics.lock());
        // SAFETY: the job reaches what the VM's device page table maps for
        // its window, as written into the device's tables just now: this
        // device's VRAM pages, DMA and P2P mappings that the table holds
        // for the device, valid while the mirror's lock is held (the
        // caller holds it until this returns); the pattern and the result
        // are the queue's own scratch words.
        let r = unsafe { runner.run(&[c]) };
        match r {
            Ok(()) => {
                if let Op::Checksum = job.op {
                    done.result = runner.scratch(RESULT_WORD)?;
                }
                let tlb = runner.scratch(TLB_WORD)?;
                Ok((tlb & 0xffff_ffff, tlb >> 32))
            }
            Err(RunError::Failed { code, addr }) => {
                if code == STALE_TLB {
                    pr_err!(
                        "gpu{}: the device used a stale translation at {addr:#x}: a TLB invalidation was missed\n",
                        self.pool.index()
                    );
                }
                Err(EIO)
            }
            Err(RunError::Lost) => {
                // It may still reach what the job's tables name, which the
                // mm frees as it likes: the device DMAs no more (bus
                // mastering off: a device lost, its engines and interrupt
                // with it; what it holds in its own VRAM is beyond reach).
                if let Ok(pdev) = <&pci::Device<Bound>>::try_from(dev) {
                    crate::mm::pci::clear_master(pdev);
                }
                pr_err!(
                    "gpu{}: the job engine did not stop: the device masters the bus no more\n",
                    self.pool.index()
                );
                Err(EIO)
            }
        }
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
