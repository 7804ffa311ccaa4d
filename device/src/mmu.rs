// SPDX-License-Identifier: GPL-2.0

//! The MMU (Documentation/hardware.rst, "MMU"): a context table and page
//! tables that the driver writes into VRAM or system memory (each table's
//! aperture is in the entry that points to it), walked by the job engine
//! on a TLB miss; a TLB of translations per context; invalidation by register,
//! completed by a seqno; and a checking mode that re-walks on every TLB
//! hit and reports a translation the table no longer holds.
//!
//! The TLB is the job engine's: it is used and invalidated only on the job
//! engine's thread, between two of its accesses, so an invalidation is
//! complete (`INV_DONE`) only once no access can use what it dropped.

use std::collections::{HashMap, VecDeque};

use crate::ring::{error, Fault};

/// Offset of the MMU's registers in BAR0.
pub const BASE: u64 = 0x300;
/// Bytes of its register block.
pub const SIZE: u64 = 0x40;

/// Registers, as offsets in BAR0.
pub mod reg {
    /// The context table, 4 KiB aligned: low word; bit 0 ([`super::entry::SYSTEM`]'s
    /// place is bit 2 in entries, here it is bit 0) says it is at a DMA
    /// address, else a VRAM offset.
    pub const CTX_LO: u64 = 0x300;
    /// High word.
    pub const CTX_HI: u64 = 0x304;
    /// Entries of the context table (at most [`super::MAX_CONTEXTS`]).
    pub const CTX_COUNT: u64 = 0x308;
    /// Bit 0: checking mode.
    pub const CHECK: u64 = 0x30c;
    /// The first virtual address an invalidation concerns: low word.
    pub const INV_START_LO: u64 = 0x310;
    /// High word.
    pub const INV_START_HI: u64 = 0x314;
    /// The end of the range (exclusive): low word.
    pub const INV_END_LO: u64 = 0x318;
    /// High word.
    pub const INV_END_HI: u64 = 0x31c;
    /// The context it concerns ([`super::INV_ALL_CONTEXTS`]: every one).
    pub const INV_CTX: u64 = 0x320;
    /// Writing a seqno requests the invalidation the registers above
    /// describe; `INV_DONE` takes that seqno once it is complete.
    pub const INV_SEQNO: u64 = 0x324;
    /// The seqno of the last invalidation completed (read-only).
    pub const INV_DONE: u64 = 0x328;
    /// Stale translations the checking mode found (read-only).
    pub const STALE: u64 = 0x32c;
    /// TLB hits, low 32 bits (read-only).
    pub const TLB_HITS: u64 = 0x330;
    /// TLB misses (walks), low 32 bits (read-only).
    pub const TLB_MISSES: u64 = 0x334;
    /// Invalidations completed, low 32 bits (read-only).
    pub const INVALIDATIONS: u64 = 0x338;
}

/// `INV_CTX`: every context.
pub const INV_ALL_CONTEXTS: u32 = u32::MAX;
/// Most entries a context table has.
pub const MAX_CONTEXTS: u32 = 4096;
/// Virtual addresses are below 2^48.
pub const VA_BITS: u32 = 48;
/// Levels of a page table: 512 entries each, 4 KiB pages at the last.
pub const LEVELS: u32 = 4;
/// Translations the TLB holds; a full TLB is emptied.
pub const TLB_ENTRIES: usize = 8192;

/// Entry bits, the same at every level and in the context table.
pub mod entry {
    /// The entry is valid.
    pub const VALID: u64 = 1 << 0;
    /// Last level: the page may be written.
    pub const WRITE: u64 = 1 << 1;
    /// The address is a DMA address (system memory, or a peer's BAR at
    /// its bus address), not a VRAM offset: at the last level, the page's;
    /// above it, the next table's.
    pub const SYSTEM: u64 = 1 << 2;
    /// The address: a VRAM offset or DMA address, 4 KiB aligned.
    pub const ADDR: u64 = !0xfff;
}

/// Where a translated address lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// This device's VRAM, at the offset.
    Vram(u64),
    /// A DMA address.
    Dma(u64),
}

/// The MMU's registers (under the device's lock).
#[derive(Default)]
pub struct Regs {
    ctx: u64,
    ctx_count: u32,
    check: bool,
    inv_ctx: u32,
    inv_start: u64,
    inv_end: u64,
    /// Invalidations requested, not yet done by the job engine's thread.
    pending: VecDeque<Invalidation>,
    inv_done: u32,
    /// Counters the job engine's thread updates.
    pub counts: Counts,
}

/// An invalidation of the TLB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Invalidation {
    /// The context, or [`INV_ALL_CONTEXTS`].
    pub ctx: u32,
    /// The virtual addresses: `[start, end)`.
    pub start: u64,
    pub end: u64,
    /// Its seqno.
    pub seqno: u32,
}

/// The MMU's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub hits: u64,
    pub misses: u64,
    pub stale: u64,
    pub invalidations: u64,
}

/// What a job reads of the MMU's registers when it starts.
#[derive(Clone, Copy, Debug, Default)]
pub struct Setup {
    /// The context table's VRAM offset and entries.
    pub ctx: u64,
    pub ctx_count: u32,
    /// Checking mode.
    pub check: bool,
}

impl Regs {
    /// The register at `off` (a multiple of 4 in the block).
    pub fn read32(&self, off: u64) -> u32 {
        match off {
            reg::CTX_LO => self.ctx as u32,
            reg::CTX_HI => (self.ctx >> 32) as u32,
            reg::CTX_COUNT => self.ctx_count,
            reg::CHECK => u32::from(self.check),
            reg::INV_CTX => self.inv_ctx,
            reg::INV_START_LO => self.inv_start as u32,
            reg::INV_START_HI => (self.inv_start >> 32) as u32,
            reg::INV_END_LO => self.inv_end as u32,
            reg::INV_END_HI => (self.inv_end >> 32) as u32,
            reg::INV_DONE => self.inv_done,
            reg::STALE => self.counts.stale as u32,
            reg::TLB_HITS => self.counts.hits as u32,
            reg::TLB_MISSES => self.counts.misses as u32,
            reg::INVALIDATIONS => self.counts.invalidations as u32,
            _ => 0,
        }
    }

    /// Writes the register at `off`; returns whether an invalidation was
    /// requested (the job engine's thread does it).
    pub fn write32(&mut self, off: u64, v: u32) -> bool {
        let lo = |x: u64| (x & !0xffff_ffff) | u64::from(v);
        let hi = |x: u64| (x & 0xffff_ffff) | (u64::from(v) << 32);
        match off {
            reg::CTX_LO => self.ctx = lo(self.ctx),
            reg::CTX_HI => self.ctx = hi(self.ctx),
            reg::CTX_COUNT => self.ctx_count = v.min(MAX_CONTEXTS),
            reg::CHECK => self.check = v & 1 != 0,
            reg::INV_CTX => self.inv_ctx = v,
            reg::INV_START_LO => self.inv_start = lo(self.inv_start),
            reg::INV_START_HI => self.inv_start = hi(self.inv_start),
            reg::INV_END_LO => self.inv_end = lo(self.inv_end),
            reg::INV_END_HI => self.inv_end = hi(self.inv_end),
            reg::INV_SEQNO => {
                self.pending.push_back(Invalidation {
                    ctx: self.inv_ctx,
                    start: self.inv_start,
                    end: self.inv_end,
                    seqno: v,
                });
                return true;
            }
            _ => {}
        }
        false
    }

    /// What a job starting now uses.
    pub fn setup(&self) -> Setup {
        Setup {
            ctx: self.ctx,
            ctx_count: self.ctx_count,
            check: self.check,
        }
    }

    /// Whether an invalidation waits.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The invalidations requested so far, to do now.
    pub fn take_pending(&mut self) -> VecDeque<Invalidation> {
        std::mem::take(&mut self.pending)
    }

    /// `seqno` is done.
    pub fn done(&mut self, seqno: u32) {
        self.inv_done = seqno;
        self.counts.invalidations += 1;
    }

    /// Back to reset values but for `INV_DONE` and the counters: no
    /// context table; the TLB is emptied (an invalidation of everything,
    /// after those pending, whose seqno is the last one's).
    pub fn reset(&mut self) {
        let mut pending = std::mem::take(&mut self.pending);
        let seqno = pending.back().map_or(self.inv_done, |i| i.seqno);
        pending.push_back(Invalidation {
            ctx: INV_ALL_CONTEXTS,
            start: 0,
            end: 1 << VA_BITS,
            seqno,
        });
        *self = Self {
            pending,
            inv_done: self.inv_done,
            counts: self.counts,
            ..Self::default()
        };
    }
}

/// Reads a 64-bit little-endian word of a table: at a DMA address if the
/// first argument says so, else at a VRAM offset; `None` if the device
/// cannot reach it.
pub type ReadTable<'a> = dyn Fn(bool, u64) -> Option<u64> + 'a;

/// The job engine's TLB: translations by context and virtual page.
#[derive(Default)]
pub struct Tlb {
    map: HashMap<(u32, u64), u64>,
    /// Counted since the last [`Tlb::take_counts`].
    counts: Counts,
}

impl Tlb {
    /// An empty TLB.
    pub fn new() -> Self {
        Self::default()
    }

    /// Drops the translations `inv` covers.
    pub fn invalidate(&mut self, inv: &Invalidation) {
        let first = inv.start >> 12;
        let end = inv.end.div_ceil(4096);
        if inv.ctx == INV_ALL_CONTEXTS && first == 0 && inv.end >= 1 << VA_BITS {
            self.map.clear();
        } else if end.saturating_sub(first) > self.map.len() as u64 {
            let all = inv.ctx == INV_ALL_CONTEXTS;
            self.map
                .retain(|&(c, vpn), _| !((all || c == inv.ctx) && (first..end).contains(&vpn)));
        } else if inv.ctx == INV_ALL_CONTEXTS {
            self.map.retain(|&(_, vpn), _| !(first..end).contains(&vpn));
        } else {
            for vpn in first..end {
                self.map.remove(&(inv.ctx, vpn));
            }
        }
    }

    /// The counts since the last [`Tlb::take_counts`].
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// The counts since the last call.
    pub fn take_counts(&mut self) -> Counts {
        std::mem::take(&mut self.counts)
    }

    /// Translates `va` of context `ctx` for a read, or a write if `write`:
    /// from the TLB, else by a walk of the tables (`read` reads a word of
    /// one), kept in the TLB. In checking
    /// mode a hit is walked again and must match.
    pub fn translate(
        &mut self,
        setup: &Setup,
        read: &ReadTable<'_>,
        (ctx, va): (u32, u64),
        write: bool,
    ) -> Result<Target, Fault> {
        let vpn = va >> 12;
        let pte = match self.map.get(&(ctx, vpn)) {
            Some(&pte) => {
                self.counts.hits += 1;
                if setup.check && walk(setup, read, ctx, va) != Ok(pte) {
                    eprintln!(
                        "msvm-gpu: stale translation: context {ctx}, address {va:#x}: the TLB holds {pte:#x}, the tables {:x?}",
                        walk(setup, read, ctx, va)
                    );
                    self.counts.stale += 1;
                    return Err(Fault {
                        code: error::STALE_TLB,
                        addr: va,
                    });
                }
                pte
            }
            None => {
                self.counts.misses += 1;
                let pte = walk(setup, read, ctx, va)?;
                if self.map.len() >= TLB_ENTRIES {
                    self.map.clear();
                }
                self.map.insert((ctx, vpn), pte);
                pte
            }
        };
        if write && pte & entry::WRITE == 0 {
            return Err(Fault {
                code: error::PAGE_FAULT,
                addr: va,
            });
        }
        let at = (pte & entry::ADDR) | (va & 0xfff);
        Ok(if pte & entry::SYSTEM != 0 {
            Target::Dma(at)
        } else {
            Target::Vram(at)
        })
    }
}

/// The last-level entry of `va` in context `ctx`'s table: a
/// [`error::BAD_CONTEXT`] for a context out of the table or not valid,
/// [`error::PAGE_FAULT`] for an address with no valid entry,
/// [`error::VRAM_RANGE`] for a table past the end of VRAM and
/// [`error::DMA_FAULT`] for one the device's DMA space does not hold.
pub fn walk(setup: &Setup, read: &ReadTable<'_>, ctx: u32, va: u64) -> Result<u64, Fault> {
    let fault = |code| Fault { code, addr: va };
    let unreachable = |system: bool| {
        fault(if system {
            error::DMA_FAULT
        } else {
            error::VRAM_RANGE
        })
    };
    if ctx >= setup.ctx_count {
        return Err(fault(error::BAD_CONTEXT));
    }
    let sys = setup.ctx & 1 != 0;
    let root = read(sys, (setup.ctx & entry::ADDR) + 8 * u64::from(ctx)).ok_or(unreachable(sys))?;
    if root & entry::VALID == 0 {
        return Err(fault(error::BAD_CONTEXT));
    }
    if va >> VA_BITS != 0 {
        return Err(fault(error::PAGE_FAULT));
    }
    let mut table = root & entry::ADDR;
    let mut sys = root & entry::SYSTEM != 0;
    for level in (0..LEVELS).rev() {
        let index = (va >> (12 + 9 * level)) & 511;
        let e = read(sys, table + 8 * index).ok_or(unreachable(sys))?;
        if e & entry::VALID == 0 {
            return Err(fault(error::PAGE_FAULT));
        }
        if level == 0 {
            return Ok(e);
        }
        table = e & entry::ADDR;
        sys = e & entry::SYSTEM != 0;
    }
    Err(fault(error::PAGE_FAULT))
}

#[cfg(test)]
mod tests;
