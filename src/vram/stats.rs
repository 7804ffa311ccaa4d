// SPDX-License-Identifier: GPL-2.0

//! The counters of one device's memory.

use kernel::num::casts::FromSafeCast;
use kernel::sync::atomic::{Atomic, Relaxed};

use crate::topology::MAX_DEVICES;

use super::phases::Phases;

/// Counters of one device (all in pages unless named otherwise).
pub(crate) struct Stats {
    pub(crate) to_device: Atomic<u64>,
    pub(crate) to_system: Atomic<u64>,
    pub(crate) cpu_faults: Atomic<u64>,
    pub(crate) evicted: Atomic<u64>,
    pub(crate) allocated: Atomic<u64>,
    pub(crate) freed: Atomic<u64>,
    pub(crate) chunks_created: Atomic<u64>,
    pub(crate) no_vram: Atomic<u64>,
    /// Engine bytes, per memory kind.
    pub(crate) engine_vram_read: Atomic<u64>,
    pub(crate) engine_vram_written: Atomic<u64>,
    pub(crate) engine_sys_read: Atomic<u64>,
    pub(crate) engine_sys_written: Atomic<u64>,
    /// Engine bytes in peers' VRAM over P2P.
    pub(crate) engine_p2p_read: Atomic<u64>,
    pub(crate) engine_p2p_written: Atomic<u64>,
    /// Pages migrated into this device straight from a peer's VRAM.
    pub(crate) from_peer: Atomic<u64>,
    /// Pagemaps removed (idle chunks and emptied ones).
    pub(crate) chunks_destroyed: Atomic<u64>,
    /// Shrink passes over this device (shrinker work and debugfs).
    pub(crate) shrink_scans: Atomic<u64>,
    /// Bytes of `struct page` memory the shrink passes freed.
    pub(crate) shrink_freed: Atomic<u64>,
    /// Pages the shrink passes moved into fuller chunks of this device.
    pub(crate) shrink_moved: Atomic<u64>,
    /// Pages the shrink passes sent to system RAM (uAPI `shrink_home`).
    pub(crate) shrink_to_system: Atomic<u64>,
    /// Large (2 MiB) folios migrated into this device whole.
    pub(crate) large_to_device: Atomic<u64>,
    /// Large folios of this device migrated to system RAM whole.
    pub(crate) large_to_system: Atomic<u64>,
    /// 2 MiB ranges (THPs, device folios, holes) that had to move in small
    /// pages: no free 2 MiB block or system folio at the time.
    pub(crate) large_fallback: Atomic<u64>,
    /// 2 MiB blocks evicted to make room on this full device (uAPI
    /// `evict_blocks`), the pages they sent to system RAM (`evict_pages`),
    /// and active blocks demoted instead (`evict_demoted`).
    pub(crate) room_blocks: Atomic<u64>,
    pub(crate) room_pages: Atomic<u64>,
    pub(crate) room_demoted: Atomic<u64>,
    /// Blocks of processes that jobs brought back within the device's size
    /// of their eviction, placed active (`evict_refaults`).
    pub(crate) room_refaults: Atomic<u64>,
    /// Thrashing detection (`crate::thrash`), as this device saw it: blocks
    /// found thrashing by its jobs' placement passes and its CPU faults,
    /// those pinned, expired pins found, and blocks its placement passes
    /// left where they were because they were pinned (moves avoided).
    pub(crate) thrash_detected: Atomic<u64>,
    pub(crate) thrash_pinned: Atomic<u64>,
    pub(crate) thrash_unpinned: Atomic<u64>,
    pub(crate) thrash_avoided: Atomic<u64>,
    /// Access counters (`crate::access`): pages this device's jobs used in
    /// place from memory not its own, counted (`access_counted`); blocks
    /// whose count reached the threshold and were taken by a placement
    /// pass (`access_due`); pages those passes moved here (`access_moved`).
    pub(crate) access_counted: Atomic<u64>,
    pub(crate) access_due: Atomic<u64>,
    pub(crate) access_moved: Atomic<u64>,
    /// Read-only replicas (`replicas.rs`): pages copied into replicas,
    /// pages jobs read from a replica already there, and replica blocks
    /// taken from their process (no room, a chunk taken back, a shrink
    /// pass).
    pub(crate) replica_copied: Atomic<u64>,
    pub(crate) replica_hits: Atomic<u64>,
    pub(crate) replica_dropped: Atomic<u64>,
    /// dmem cgroup charges (`crate::mm::dmem`): pages of this device
    /// charged so far (`cg_charged`) and uncharged so far (`cg_uncharged`):
    /// their difference is what the device's cgroup region holds now;
    /// pages a migration into it did not move because the process's cgroup
    /// was at its `dmem.max` (`cg_limited`, also counted in `no_vram`).
    pub(crate) cg_charged: Atomic<u64>,
    pub(crate) cg_uncharged: Atomic<u64>,
    pub(crate) cg_limited: Atomic<u64>,
    /// How eviction (making room, consolidation, a device's teardown)
    /// moved this device's pages: through the mm each is recorded in, with
    /// its mmap lock held (`by_mm`); pages a device going away could not
    /// move through a record, copied to system RAM and left mapped as
    /// orphans (`orphaned`, see `orphans.rs`); pages migrated in that got
    /// no record (`unrecorded`: their
    /// chunk's table had no memory); records written where msvm met a
    /// page that no record led to (`renewed`, see `mapped.rs`).
    pub(crate) by_mm: Atomic<u64>,
    pub(crate) orphaned: Atomic<u64>,
    pub(crate) unrecorded: Atomic<u64>,
    pub(crate) renewed: Atomic<u64>,
    /// The device page tables (`crate::mm::devpt`): windows of jobs that
    /// found every page they use mapped and ran without a fault
    /// (`pt_hits`), windows that faulted (`pt_faults`: an entry missing or
    /// without the access the job needs), and entries those faults wrote
    /// (`pt_bound`).
    pub(crate) pt_hits: Atomic<u64>,
    /// Windows that ran from the table after their faults were serviced
    /// (a replay).
    pub(crate) pt_replays: Atomic<u64>,
    /// Lookups of the tables' entries by the engine's warm windows that
    /// found them in the device's TLB, and those that walked the table.
    pub(crate) tlb_hits: Atomic<u64>,
    pub(crate) tlb_misses: Atomic<u64>,
    /// Spans the fault handler bound, and the nanoseconds it spent on
    /// them, by resolution: all in this device's memory, some in system
    /// RAM (none in a peer's), some in a peer's memory.
    pub(crate) fault_spans: [Atomic<u64>; 3],
    pub(crate) fault_ns: [Atomic<u64>; 3],
    pub(crate) pt_faults: Atomic<u64>,
    pub(crate) pt_bound: Atomic<u64>,
    /// Engine bytes read from each peer's VRAM over P2P, by peer index.
    pub(crate) peer_read: [Atomic<u64>; MAX_DEVICES],
    /// Engine bytes written to each peer's VRAM over P2P, by peer index.
    pub(crate) peer_written: [Atomic<u64>; MAX_DEVICES],
    /// Where migration steps and engine jobs spend their time.
    pub(crate) phases: Phases,
}

impl Stats {
    /// Bytes of this device charged to dmem cgroups now.
    pub(crate) fn cg_bytes(&self) -> u64 {
        // Two counters read one after the other: a moment's difference can
        // make them cross, hence the saturation.
        let uncharged = self.cg_uncharged.load(Relaxed);
        let charged = self.cg_charged.load(Relaxed);
        charged.saturating_sub(uncharged) * u64::from_safe_cast(crate::mm::pagemap::PAGE_SIZE)
    }

    /// Counts what thrashing detection told a move of this device's.
    pub(crate) fn count_thrash(&self, v: crate::thrash::Verdict) {
        if v == crate::thrash::Verdict::default() {
            return;
        }
        self.thrash_detected.add(u64::from(v.detected), Relaxed);
        self.thrash_pinned.add(u64::from(v.pinned), Relaxed);
        self.thrash_unpinned.add(u64::from(v.unpinned), Relaxed);
        self.thrash_avoided.add(u64::from(v.avoided), Relaxed);
    }

    /// Engine bytes read from and written to peer `peer`'s memory over P2P.
    pub(crate) fn count_p2p(&self, peer: usize, read: usize, written: usize) {
        let i = peer % MAX_DEVICES;
        let (read, written) = (u64::from_safe_cast(read), u64::from_safe_cast(written));
        self.engine_p2p_read.add(read, Relaxed);
        self.engine_p2p_written.add(written, Relaxed);
        self.peer_read[i].add(read, Relaxed);
        self.peer_written[i].add(written, Relaxed);
    }

    pub(super) const fn new() -> Self {
        Self {
            to_device: Atomic::new(0),
            to_system: Atomic::new(0),
            cpu_faults: Atomic::new(0),
            evicted: Atomic::new(0),
            allocated: Atomic::new(0),
            freed: Atomic::new(0),
            chunks_created: Atomic::new(0),
            no_vram: Atomic::new(0),
            engine_vram_read: Atomic::new(0),
            engine_vram_written: Atomic::new(0),
            engine_sys_read: Atomic::new(0),
            engine_sys_written: Atomic::new(0),
            engine_p2p_read: Atomic::new(0),
            engine_p2p_written: Atomic::new(0),
            from_peer: Atomic::new(0),
            chunks_destroyed: Atomic::new(0),
            shrink_scans: Atomic::new(0),
            shrink_freed: Atomic::new(0),
            shrink_moved: Atomic::new(0),
            shrink_to_system: Atomic::new(0),
            large_to_device: Atomic::new(0),
            large_to_system: Atomic::new(0),
            large_fallback: Atomic::new(0),
            room_blocks: Atomic::new(0),
            room_pages: Atomic::new(0),
            room_demoted: Atomic::new(0),
            room_refaults: Atomic::new(0),
            thrash_detected: Atomic::new(0),
            thrash_pinned: Atomic::new(0),
            thrash_unpinned: Atomic::new(0),
            thrash_avoided: Atomic::new(0),
            access_counted: Atomic::new(0),
            access_due: Atomic::new(0),
            access_moved: Atomic::new(0),
            replica_copied: Atomic::new(0),
            replica_hits: Atomic::new(0),
            replica_dropped: Atomic::new(0),
            cg_charged: Atomic::new(0),
            cg_uncharged: Atomic::new(0),
            cg_limited: Atomic::new(0),
            by_mm: Atomic::new(0),
            orphaned: Atomic::new(0),
            unrecorded: Atomic::new(0),
            renewed: Atomic::new(0),
            pt_hits: Atomic::new(0),
            pt_replays: Atomic::new(0),
            tlb_hits: Atomic::new(0),
            tlb_misses: Atomic::new(0),
            fault_spans: [const { Atomic::new(0) }; 3],
            fault_ns: [const { Atomic::new(0) }; 3],
            pt_faults: Atomic::new(0),
            pt_bound: Atomic::new(0),
            peer_read: [const { Atomic::new(0) }; MAX_DEVICES],
            peer_written: [const { Atomic::new(0) }; MAX_DEVICES],
            phases: Phases::new(),
        }
    }
}
