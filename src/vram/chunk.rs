// SPDX-License-Identifier: GPL-2.0

//! One chunk of a pool: a pagemap's owner data (its free pages are the
//! pagemap's) and the records of where its pages are mapped.

use kernel::num::casts::FromSafeCast;
use kernel::prelude::*;
use kernel::sync::atomic::{Atomic, Relaxed};
use kernel::sync::Arc;

use crate::mm::dmem::PageCharges;
use crate::mm::fault::{Fault, FaultError};
use crate::mm::pagemap::{BusRange, Pagemap, PagemapOps};

use super::orphans::Orphan;
use super::records::Records;
use super::{ChunkInfo, VramPool};

/// One chunk: the owner data of its pagemap.
#[pin_data]
pub(crate) struct Chunk {
    /// The pool this chunk belongs to (a cycle that the pool's
    /// [`VramPool::shutdown`] breaks: it removes every chunk).
    pub(super) pool: Arc<VramPool>,
    /// The chunk hands out whole 2 MiB blocks as large folios: its pagemap
    /// does (`Pagemap::holds_large`) and its BAR offsets are aligned to them.
    pub(super) large: bool,
    /// Which pagemap of its slot this is: the pool's count of pagemaps
    /// created when it was made (a slot's next pagemap has another).
    pub(super) serial: u64,
    /// The pool's allocation sequence number when this chunk last gave out
    /// pages: lower is colder.
    pub(super) last_alloc: Atomic<u64>,
    /// One more than the pages in use when a consolidation last failed to
    /// empty this chunk; 0 if none did, or that was forgotten (see
    /// [`ChunkInfo::stuck`]).
    pub(super) stuck_used: Atomic<usize>,
    /// Where each page in use is mapped (see `records.rs`): eviction moves
    /// it through that mm (a 2 MiB folio through its head page's record:
    /// `large.rs`).
    #[pin]
    pub(super) records: Records,
    /// The copies of its pages once it is an orphan (`orphans.rs`).
    #[pin]
    pub(super) orphan: Orphan,
    /// The dmem cgroup charge of each page in use (see `charge.rs`),
    /// undone when the page is freed; no slots on a kernel without the
    /// controller.
    pub(super) charges: PageCharges,
}

impl Chunk {
    pub(super) fn pool(&self) -> &VramPool {
        &self.pool
    }

    /// The BAR offset of the first page of the chunk whose pagemap is
    /// `map`: page `i` is `i` pages after it. Its pagemap's range of the
    /// BAR says it ([`Pagemap::bus`]), the one place the chunk's place in
    /// the BAR is kept: a peer reaches page `i` at page `i` of the same
    /// range (`VramPool::peer_route`).
    pub(super) fn base(map: &Pagemap<Chunk>) -> usize {
        map.bus().offset()
    }

    /// What the shrinker needs to know of the chunk whose pagemap is `map`.
    pub(super) fn info(map: &Pagemap<Chunk>) -> ChunkInfo {
        let counts = map.counts();
        let used = map.npages() - counts.free;
        ChunkInfo {
            used,
            large: counts.whole,
            free_blocks: counts.free_blocks,
            last_alloc: map.data().last_alloc.load(Relaxed),
            stuck: map.data().stuck_used.load(Relaxed) == used + 1,
        }
    }

    /// A consolidation could not empty the chunk, `used` pages in use
    /// (`usize::MAX`: forget it, see `shrink.rs`).
    pub(super) fn stuck_at(&self, used: usize) {
        self.stuck_used.store(used.wrapping_add(1), Relaxed);
    }
}

impl PagemapOps for Chunk {
    /// The chunk's range of the BAR: its pages' offsets there (see
    /// [`Chunk::base`]), and what peers map.
    type Bus = BusRange;

    fn folio_freeing(&self, first: usize, nr: usize) {
        // Before the pages can be handed out again (and charged anew).
        self.records.forget(first, nr);
        self.orphan.freeing(first, nr);
        let n = self.charges.uncharge(first, nr);
        self.pool()
            .stats
            .cg_uncharged
            .add(u64::from_safe_cast(n), Relaxed);
    }

    fn folio_freed(&self, freed: usize, left: usize) {
        self.pool()
            .stats
            .freed
            .add(u64::from_safe_cast(freed), Relaxed);
        self.orphan_freed(left);
    }

    fn migrate_to_ram(&self, fault: Fault<'_>) -> Result<(), FaultError> {
        self.fault_to_ram(fault)
    }
}
