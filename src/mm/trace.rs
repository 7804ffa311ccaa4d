// SPDX-License-Identifier: GPL-2.0

//! msvm's trace events (`include/msvm_trace.h`, system `msvm` in tracefs):
//! one function, or one value type whose [`fire`](Migrate::fire) records
//! it, per event; an event is recorded only if it is enabled. Device numbers are msvm's device indices; system
//! RAM has none. `Documentation/reference.rst` lists the events.

use kernel::{num::casts::FromSafeCast, prelude::*};

use super::bindings as b;

/// An event's device number: the index, or -1 (never an msvm index).
fn dev(index: usize) -> i32 {
    i32::try_from(index).unwrap_or(-1)
}

/// An event's result: 0 or the negative errno.
fn result(r: &Result) -> i32 {
    r.as_ref().map_or_else(|e| e.to_errno(), |()| 0)
}

/// `msvm_migrate`: one migration of a range of a process to device `dev`
/// (or from it and its owner group to system RAM), and what became of its
/// pages.
pub(crate) struct Migrate {
    pub(crate) dev: usize,
    pub(crate) to_device: bool,
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) moved: u64,
    pub(crate) already: u64,
    pub(crate) busy: u64,
    pub(crate) no_vram: u64,
    /// 2 MiB folios moved whole.
    pub(crate) folios: u64,
    pub(crate) result: Result,
}

impl Migrate {
    /// Records the event.
    pub(crate) fn fire(&self) {
        // SAFETY: the function takes plain values and only records them.
        unsafe {
            b::msvm_trace_migrate(
                dev(self.dev),
                self.to_device,
                u64::from_safe_cast(self.start),
                u64::from_safe_cast(self.end),
                self.moved,
                self.already,
                self.busy,
                self.no_vram,
                self.folios,
                result(&self.result),
            )
        }
    }
}

/// `msvm_cpu_fault`: a CPU fault at `addr` on a page of device `dev`
/// brought `pages` home, `folios` of them in 2 MiB folios.
pub(crate) fn cpu_fault(dev: usize, addr: usize, pages: u64, folios: u64) {
    // SAFETY: the function takes plain values and only records them.
    unsafe { b::msvm_trace_cpu_fault(self::dev(dev), u64::from_safe_cast(addr), pages, folios) }
}

/// Why device memory was given back (`msvm_evict`).
#[derive(Clone, Copy)]
pub(crate) enum EvictReason {
    /// A 2 MiB block evicted to make room on a full device.
    Room = 0,
    /// A chunk emptied because its device goes or the module unloads.
    Teardown = 1,
}

/// `msvm_evict`: `pages` of device `dev` from VRAM offset `offset` went to
/// system RAM.
pub(crate) fn evict(dev: usize, reason: EvictReason, offset: usize, pages: u64) {
    // CAST: the enum's values are 0 and 1.
    let reason = reason as i32;
    let offset = u64::from_safe_cast(offset);
    // SAFETY: the function takes plain values and only records them.
    unsafe { b::msvm_trace_evict(self::dev(dev), reason, offset, pages) }
}

/// `msvm_shrink`: one shrink pass over device `dev` removed `chunks`
/// pagemaps (`memmap_freed` bytes of `struct page`), moved `moved` pages
/// into fuller chunks and `home` pages to system RAM.
pub(crate) fn shrink(dev: usize, chunks: u64, moved: u64, home: u64, memmap_freed: u64) {
    // SAFETY: the function takes plain values and only records them.
    unsafe { b::msvm_trace_shrink(self::dev(dev), chunks, moved, home, memmap_freed) }
}

/// `msvm_exec`: one job of device `dev` (uAPI operation `op`) over
/// `[addr, addr + len)`, the pages its engine used in its own VRAM, a
/// peer's over P2P and system RAM by DMA, and the pages its placement pass
/// moved.
pub(crate) struct Exec {
    pub(crate) dev: usize,
    pub(crate) op: u32,
    pub(crate) addr: u64,
    pub(crate) len: u64,
    pub(crate) vram: u64,
    pub(crate) p2p: u64,
    pub(crate) dma: u64,
    pub(crate) migrated: u64,
    pub(crate) result: Result,
}

impl Exec {
    /// Records the event.
    pub(crate) fn fire(&self) {
        // SAFETY: the function takes plain values and only records them.
        unsafe {
            b::msvm_trace_exec(
                dev(self.dev),
                self.op,
                self.addr,
                self.len,
                self.vram,
                self.p2p,
                self.dma,
                self.migrated,
                result(&self.result),
            )
        }
    }
}

/// `msvm_pagemap`: the pagemap of chunk `chunk` of device `dev` (`bytes`
/// of device memory) was made (`create`) or removed.
pub(crate) fn pagemap(dev: usize, create: bool, chunk: usize, bytes: usize) {
    let chunk = u32::try_from(chunk).unwrap_or(u32::MAX);
    // SAFETY: the function takes plain values and only records them.
    unsafe { b::msvm_trace_pagemap(self::dev(dev), create, chunk, u64::from_safe_cast(bytes)) }
}

/// `msvm_pt_fault`: a window of a job of device `dev` (`pages` pages from
/// `addr`) faulted; its service bound `bound` entries.
pub(crate) fn pt_fault(dev: usize, addr: usize, pages: usize, bound: u64, r: &Result) {
    let (addr, pages) = (u64::from_safe_cast(addr), u64::from_safe_cast(pages));
    // SAFETY: the function takes plain values and only records them.
    unsafe { b::msvm_trace_pt_fault(self::dev(dev), addr, pages, bound, result(r)) }
}

/// What one batch of a device's fault handler did (`msvm_fault_batch`).
pub(crate) struct FaultBatch {
    pub(crate) dev: usize,
    /// Faults in the batch.
    pub(crate) faults: u64,
    /// Spans serviced (grouped and merged).
    pub(crate) spans: u64,
    /// Their pages.
    pub(crate) pages: u64,
    /// Entries written.
    pub(crate) bound: u64,
    /// Nanoseconds the service took.
    pub(crate) ns: u64,
}

impl FaultBatch {
    pub(crate) fn fire(&self) {
        let Self {
            dev,
            faults,
            spans,
            pages,
            bound,
            ns,
        } = *self;
        // SAFETY: the function takes plain values and only records them.
        unsafe { b::msvm_trace_fault_batch(self::dev(dev), faults, spans, pages, bound, ns) }
    }
}

/// `msvm_pt_invalidate`: an invalidation of `[start, end)` zapped `zapped`
/// entries of a device page table of device `dev` in `ns` nanoseconds.
pub(crate) fn pt_invalidate(dev: usize, start: usize, end: usize, zapped: u64, ns: u64) {
    let (start, end) = (u64::from_safe_cast(start), u64::from_safe_cast(end));
    // SAFETY: the function takes plain values and only records them.
    unsafe { b::msvm_trace_pt_invalidate(self::dev(dev), start, end, zapped, ns) }
}
