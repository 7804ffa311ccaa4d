// SPDX-License-Identifier: GPL-2.0

//! msvm-gpu's MMU, as msvm drives it (Documentation/hardware.rst, "MMU"):
//! a context per VM's device page table, page tables in the device's
//! format, and TLB invalidation by register, waited for by its seqno.
//!
//! The tables are in system memory (coherent DMA, the SYSTEM aperture of
//! the entries that point to them), not VRAM: VRAM goes to the pool in
//! whole chunks (64 MiB by default), and a chunk kept for tables would be
//! a quarter of a 256 MiB device.
//!
//! The tables are written window by window (`crate::engine`, before a job
//! runs on the device) from the VM's device page table
//! (`crate::mm::devpt`), which stays the one record of what the device
//! may reach. Every change that drops or replaces an entry there is
//! recorded in its [`Context`] (a [`DeviceTable`]), and the device's TLB
//! is invalidated for it, and the invalidation waited for, before the
//! context's next job ([`Context::flush`]): both run under the VM's
//! mirror lock, so no job of the context runs between the change and the
//! invalidation, and no other context uses its translations. A context's
//! id is invalidated whole before it is given out again.
//!
//! # Lock order
//!
//! A VM's mirror lock -> [`Mmu::inv`] (a mutex: invalidations sleep while
//! they wait) -> [`Mmu::heap`], [`Mmu::contexts`] (spinlocks). Nothing
//! here allocates memory.

use kernel::{
    dma::Coherent,
    io::{io_read, io_write, Io},
    new_mutex, new_spinlock, pci,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        Arc, Mutex, SpinLock,
    },
    time::{
        delay::{fsleep, udelay},
        Delta, Instant, Monotonic,
    },
};

use crate::mm::devpt::DeviceTable;
use crate::mm::page::{BLOCK_SIZE, PAGE_SIZE};

use super::regs::{
    ID, MMU_CHECK, MMU_CTX_COUNT, MMU_CTX_HI, MMU_CTX_LO, MMU_INV_CTX, MMU_INV_DONE,
    MMU_INV_END_HI, MMU_INV_END_LO, MMU_INV_SEQNO, MMU_INV_START_HI, MMU_INV_START_LO, MMU_STALE,
};
use super::ring::Regs;

/// Contexts: one page of the context table.
pub(crate) const CONTEXTS: usize = 512;
/// Entry bits (hardware.rst, "Page tables").
pub(crate) const VALID: u64 = 1 << 0;
pub(crate) const WRITE: u64 = 1 << 1;
pub(crate) const SYSTEM: u64 = 1 << 2;
/// Virtual addresses the device translates: below 2^48.
const VA_END: usize = 1 << 48;
/// How long an invalidation may take before the MMU is given up on: the
/// device does it between two pages of the running job, and a page read
/// through QEMU may take its 10 s.
const INV_MS: i64 = 15_000;

/// Pages of table memory: the context table, then pages for tables.
pub(crate) const TABLE_PAGES: usize = 1024;
/// Words of a page.
const WORDS: usize = PAGE_SIZE / 8;
/// The owner of page 0, the context table: no context's.
const CONTEXT_TABLE: u16 = u16::MAX;

/// Which context owns each table page (0: free, else the context's index
/// plus one, or [`CONTEXT_TABLE`]).
struct Heap {
    owner: KVec<u16>,
}

/// The MMU's counters (debugfs `job_engine`).
pub(crate) struct MmuStats {
    /// Invalidations waited for, and the nanoseconds they took.
    pub(crate) invalidations: Atomic<u64>,
    pub(crate) inv_ns: Atomic<u64>,
    /// Writes of a window's entries into a last-level table.
    pub(crate) writes: Atomic<u64>,
    /// Windows that found no table page free (they ran on the CPU).
    pub(crate) no_room: Atomic<u64>,
}

/// The MMU of one msvm-gpu.
///
/// # Invariants
///
/// The device's `MMU_CTX*` registers name page 0 of `tables` as the
/// context table, for as long as the device is bound.
#[pin_data]
pub(crate) struct Mmu {
    bar: Arc<Regs>,
    /// The context table, then the tables' pages.
    tables: Coherent<[u64]>,
    /// The last invalidation's seqno.
    #[pin]
    inv: Mutex<u32>,
    #[pin]
    heap: SpinLock<Heap>,
    /// Context ids in use.
    #[pin]
    contexts: SpinLock<[bool; CONTEXTS]>,
    /// An invalidation did not complete: no context is given out again,
    /// and jobs run on the CPU.
    broken: Atomic<bool>,
    pub(crate) stats: MmuStats,
}

impl Mmu {
    /// The MMU of the device behind `bar`: [`TABLE_PAGES`] of table
    /// memory, the context table named to the device; checking mode on if
    /// `check`. The device walks nothing once it is unbound (it is
    /// disabled, bus mastering with it); the tables' memory lives as long
    /// as the last context of a VM that outlives it.
    pub(super) fn new(
        pdev: &pci::Device<kernel::device::Bound>,
        bar: Arc<Regs>,
        check: bool,
    ) -> Result<Arc<Self>> {
        let tables: Coherent<[u64]> =
            Coherent::zeroed_slice(pdev.as_ref(), TABLE_PAGES * WORDS, GFP_KERNEL)?;
        let mut owner = KVec::with_capacity(TABLE_PAGES, GFP_KERNEL)?;
        for i in 0..TABLE_PAGES {
            owner.push(if i == 0 { CONTEXT_TABLE } else { 0 }, GFP_KERNEL)?;
        }
        let done = {
            let base = tables.dma_address();
            let io = bar.access(pdev.as_ref())?;
            // Bit 0: the context table is at a DMA address.
            io.write_reg(MMU_CTX_LO::zeroed().with_value(base as u32 | 1));
            io.write_reg(MMU_CTX_HI::zeroed().with_value((base >> 32) as u32));
            io.write_reg(MMU_CTX_COUNT::zeroed().with_value(CONTEXTS as u32));
            io.write_reg(MMU_CHECK::zeroed().with_on(check));
            // Seqnos go on from the device's last (a binding before this
            // one, a reset, keep it).
            u32::from(io.read(MMU_INV_DONE).value())
        };
        // INVARIANT: the registers name page 0 of `tables`.
        Arc::pin_init(
            try_pin_init!(Self {
                bar,
                tables,
                inv <- new_mutex!(done, "Mmu::inv"),
                heap <- new_spinlock!(Heap { owner }, "Mmu::heap"),
                contexts <- new_spinlock!([false; CONTEXTS], "Mmu::contexts"),
                broken: Atomic::new(false),
                stats: MmuStats {
                    invalidations: Atomic::new(0),
                    inv_ns: Atomic::new(0),
                    writes: Atomic::new(0),
                    no_room: Atomic::new(0),
                },
            }? Error),
            GFP_KERNEL,
        )
    }

    /// Whether jobs may run on the device (every invalidation completed).
    pub(crate) fn usable(&self) -> bool {
        !self.broken.load(Relaxed)
    }

    /// Stale translations the device's checking mode found.
    pub(crate) fn stale(&self) -> Option<u32> {
        let n = u32::from(self.bar.try_access()?.read(MMU_STALE).value());
        // A device gone reads all ones.
        (n != u32::MAX).then_some(n)
    }

    /// A context for a VM's table, if one is free: its id invalidated
    /// whole (its last owner's translations may be in the TLB). Sleeps.
    pub(crate) fn context(self: &Arc<Self>) -> Option<Context> {
        if !self.usable() {
            return None;
        }
        let mut ids = self.contexts.lock();
        let id = ids.iter().position(|used| !used)?;
        ids[id] = true;
        drop(ids);
        let ctx = Context {
            mmu: self.clone(),
            id: id as u32,
            root: Atomic::new(0),
            dirty: Atomic::new(0),
            dirty_end: Atomic::new(0),
        };
        // Dropped (the id freed again) if this fails.
        self.invalidate(ctx.id, 0, VA_END).ok()?;
        Some(ctx)
    }

    /// Invalidates `[start, end)` of context `ctx` in the device's TLB and
    /// waits until it is done: no access of the device uses a translation
    /// of it after this returns `Ok`. Sleeps. An MMU that does not answer
    /// in [`INV_MS`] is marked broken: no job runs on it again.
    fn invalidate(&self, ctx: u32, start: usize, end: usize) -> Result {
        let (start, end) = (start.min(VA_END) as u64, end.min(VA_END) as u64);
        if !self.usable() {
            return Err(ENODEV);
        }
        if start >= end {
            return Ok(());
        }
        let t0 = Instant::<Monotonic>::now();
        let mut seqno = self.inv.lock();
        *seqno = seqno.wrapping_add(1);
        let s = *seqno;
        {
            let io = self.bar.try_access().ok_or(ENODEV)?;
            io.write_reg(MMU_INV_START_LO::zeroed().with_value(start as u32));
            io.write_reg(MMU_INV_START_HI::zeroed().with_value((start >> 32) as u32));
            io.write_reg(MMU_INV_END_LO::zeroed().with_value(end as u32));
            io.write_reg(MMU_INV_END_HI::zeroed().with_value((end >> 32) as u32));
            io.write_reg(MMU_INV_CTX::zeroed().with_value(ctx));
            // Requests it.
            io.write_reg(MMU_INV_SEQNO::zeroed().with_value(s));
        }
        loop {
            // The registers are reached anew at each poll: no RCU
            // read-side section lasts across a sleep.
            let (done, id) = {
                let io = self.bar.try_access().ok_or(ENODEV)?;
                (
                    u32::from(io.read(MMU_INV_DONE).value()),
                    io.read(ID).value(),
                )
            };
            if done == s {
                break;
            }
            let gone = u32::from(id) == u32::MAX;
            if gone || t0.elapsed() > Delta::from_millis(INV_MS) {
                self.broken.store(true, Relaxed);
                pr_err!(
                    "gpu: TLB invalidation {s} not done after {} ms (done {done}{}): no job runs on the device from now on\n",
                    t0.elapsed().as_millis(),
                    if gone { ", the device is gone" } else { "" }
                );
                return Err(if gone { ENODEV } else { ETIMEDOUT });
            }
            // Done between two pages of the running job: most often at
            // once.
            if t0.elapsed() < Delta::from_micros(100) {
                udelay(Delta::from_micros(2));
            } else {
                fsleep(Delta::from_micros(100));
            }
        }
        drop(seqno);
        self.stats.invalidations.add(1, Relaxed);
        // CAST: an elapsed time is not negative.
        self.stats
            .inv_ns
            .add(t0.elapsed().as_nanos() as u64, Relaxed);
        Ok(())
    }

    /// A free table page for context `ctx`, zeroed: its index.
    fn page(&self, ctx: u32) -> Option<usize> {
        let mut heap = self.heap.lock();
        let i = heap.owner.iter().position(|&o| o == 0)?;
        heap.owner[i] = ctx as u16 + 1;
        drop(heap);
        for w in 0..WORDS {
            self.set(i * WORDS + w, 0).ok()?;
        }
        Some(i)
    }

    /// Word `i` of table memory.
    fn get(&self, i: usize) -> Result<u64> {
        Ok(io_read!(self.tables, [try: i]))
    }

    /// Sets word `i` of table memory.
    fn set(&self, i: usize, v: u64) -> Result {
        io_write!(self.tables, [try: i], v);
        Ok(())
    }

    /// The DMA address of table page `i`, as an entry names it.
    fn addr(&self, page: usize) -> u64 {
        self.tables.dma_address() + (page * PAGE_SIZE) as u64
    }

    /// Frees every table page of context `ctx`.
    fn free_pages(&self, ctx: u32) {
        let mut heap = self.heap.lock();
        for o in heap.owner.iter_mut().filter(|o| **o == ctx as u16 + 1) {
            *o = 0;
        }
    }
}

/// A VM's context on the device: its id, its page tables, and the range
/// its TLB entries must be invalidated for before its next job. Dropping
/// it frees the tables and the id (which is invalidated whole when it is
/// given out again). Used under its VM's mirror lock only.
pub(crate) struct Context {
    mmu: Arc<Mmu>,
    id: u32,
    /// Index of its root table's page, once written (0: none yet; the
    /// context table's entry may still name a former owner's).
    root: Atomic<u64>,
    /// The range whose translations changed since its last job
    /// (`dirty..dirty_end`; empty: none): what [`Context::flush`]
    /// invalidates.
    dirty: Atomic<usize>,
    dirty_end: Atomic<usize>,
}

impl Context {
    /// Writes entries `from..from + entries.len()` of the last-level
    /// table of 2 MiB block `block`, making the tables above it as
    /// needed: `ENOSPC` when no table page is free. The device reads them
    /// at the next job (the doorbell's MMIO write is ordered after these).
    pub(crate) fn write_entries(&self, block: usize, from: usize, entries: &[u64]) -> Result {
        let va = block * BLOCK_SIZE;
        if va >= VA_END || from + entries.len() > WORDS {
            return Err(EINVAL);
        }
        let mmu = &*self.mmu;
        let fresh = || -> Result<usize> {
            let Some(p) = mmu.page(self.id) else {
                mmu.stats.no_room.add(1, Relaxed);
                return Err(ENOSPC);
            };
            Ok(p)
        };
        // Entries that point to a table: its DMA address, SYSTEM.
        let link = |page: usize| mmu.addr(page) | VALID | SYSTEM;
        let page_of = |e: u64| ((e & !0xfff) - mmu.addr(0)) as usize / PAGE_SIZE;
        // The context's root, written into the context table at its
        // first use.
        let mut table = match self.root.load(Relaxed) {
            0 => {
                let p = fresh()?;
                mmu.set(self.id as usize, link(p))?;
                self.root.store(p as u64, Relaxed);
                p
            }
            r => r as usize,
        };
        for level in [3u32, 2, 1] {
            let at = table * WORDS + ((va >> (12 + 9 * level)) & 511);
            let e = mmu.get(at)?;
            table = if e & VALID != 0 {
                page_of(e)
            } else {
                let p = fresh()?;
                mmu.set(at, link(p))?;
                p
            };
        }
        for (k, &w) in entries.iter().enumerate() {
            mmu.set(table * WORDS + from + k, w)?;
        }
        mmu.stats.writes.add(1, Relaxed);
        Ok(())
    }
}

impl DeviceTable for Context {
    fn invalidate(&self, start: usize, end: usize) {
        // Under the mirror's lock, as every user of the context: plain
        // loads and stores suffice.
        let (a, b) = (self.dirty.load(Relaxed), self.dirty_end.load(Relaxed));
        let (start, end) = if a < b {
            (a.min(start), b.max(end))
        } else {
            (start, end)
        };
        self.dirty.store(start, Relaxed);
        self.dirty_end.store(end, Relaxed);
    }

    fn flush(&self) -> Result {
        let (a, b) = (self.dirty.load(Relaxed), self.dirty_end.load(Relaxed));
        if a >= b {
            return Ok(());
        }
        self.mmu.invalidate(self.id, a, b)?;
        self.dirty.store(0, Relaxed);
        self.dirty_end.store(0, Relaxed);
        Ok(())
    }

    fn id(&self) -> u32 {
        self.id
    }

    fn write_entries(&self, block: usize, from: usize, entries: &[u64]) -> Result {
        Context::write_entries(self, block, from, entries)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // No job names the id until it is given out again, invalidated
        // whole (`Mmu::context`): its translations may stay in the TLB
        // meanwhile, and its context-table entry name the freed root.
        self.mmu.free_pages(self.id);
        let mut ids = self.mmu.contexts.lock();
        if let Some(used) = ids.get_mut(self.id as usize) {
            *used = false;
        }
    }
}
