// SPDX-License-Identifier: GPL-2.0

//! What a job's ranges' attributes say of their pages, for the engine:
//! which pages a fault binds into the VM's device page table as kept
//! entries, which get none (read-mostly ones elsewhere), and which ranges
//! the job reads through replicas.

use kernel::prelude::*;

use crate::mm::pagemap::PAGE_SIZE;

/// The ranges of a job whose pages a fault binds into the VM's device page
/// table where they are: each sorted, disjoint, page-aligned.
#[derive(Default)]
pub(crate) struct Keep {
    /// Pages in this device's memory: where the range's attributes keep
    /// them there (preferred location this device, access policy "in
    /// place", read-mostly), not pages a placement pass should move away.
    pub(crate) own: KVec<(usize, usize)>,
    /// Pages elsewhere (system RAM, a peer): where the access policy is
    /// "in place" (not read-mostly: jobs read replicas of those).
    pub(crate) remote: KVec<(usize, usize)>,
    /// Read-mostly ranges: their pages elsewhere get no entry at all, not
    /// even a [`Life::Job`](crate::mm::devpt::Life::Job) one (which no placement pass would take away,
    /// and a later job would read the pages instead of its replicas).
    pub(crate) replicated: KVec<(usize, usize)>,
}

impl Keep {
    /// Whether `addr` lies in one of `spans`.
    pub(super) fn has(spans: &[(usize, usize)], addr: usize) -> bool {
        let i = spans.partition_point(|&(_, end)| end <= addr);
        spans.get(i).is_some_and(|&(start, _)| start <= addr)
    }

    /// Whether `[first, first + pages * PAGE_SIZE)` meets a read-mostly
    /// range: the handler would leave its window to the job anyway.
    pub(super) fn meets_replicated(&self, first: usize, pages: usize) -> bool {
        let end = first + pages * PAGE_SIZE;
        let i = self.replicated.partition_point(|&(_, e)| e <= first);
        pages > 0
            && self
                .replicated
                .get(i)
                .is_some_and(|&(start, _)| start < end)
    }
}

/// Which ranges of a job read the system pages of read-mostly ranges
/// through read-only replicas in the device's own VRAM
/// (`crate::vram::ReplicaWindow`): the destination of a CHECKSUM, the
/// source of a COPY, each only if all of it is read-mostly.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Replicate {
    pub(crate) dst: bool,
    pub(crate) src: bool,
}
