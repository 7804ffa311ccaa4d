// SPDX-License-Identifier: GPL-2.0

//! Binding ahead: after a PREFETCH to a device, the pages already in its
//! memory are bound into the VM's device page table, so that the jobs
//! then take no fault.

use kernel::{
    device::{Bound, Device},
    mm::MmWithUser,
    prelude::*,
    sync::atomic::Relaxed,
};

use crate::mm::{
    cancel::Cancel,
    devpt::{Bind, Life, Spare},
    devtables::DevMirror,
    hmm::HmmPfn,
    page::{BLOCK_PAGES, BLOCK_SIZE},
    pagemap::PAGE_SIZE,
};
use crate::vram::VramPool;

/// Binds the pages of `[start, start + len)` that are in `pool`'s memory
/// into the VM's device page table ("bind ahead", after a PREFETCH to the
/// device: Xe's prefetch `VM_BIND`, UVM's `cudaMemPrefetchAsync`), so that
/// the jobs then take no fault. Walks without faulting anything in; a block
/// an invalidation keeps changing is left to fault. Returns the entries
/// written.
pub(crate) fn bind_ahead(
    pool: &VramPool,
    dev: &Device<Bound>,
    mm: &MmWithUser,
    mirror: &DevMirror,
    (start, len): (usize, usize),
    cancel: &Cancel<'_>,
) -> Result<u64> {
    let mut pfns = KVec::from_elem(HmmPfn::NONE, BLOCK_PAGES, GFP_KERNEL)?;
    let mut bound = 0;
    let mut walk_all = || -> Result {
        let end = start + len;
        let mut at = start;
        while at < end {
            let next = ((at / BLOCK_SIZE + 1) * BLOCK_SIZE).min(end);
            let n = (next - at) / PAGE_SIZE;
            for _ in 0..8 {
                cancel.check()?;
                let missing = mirror.lock().table().missing_leaves(at, n);
                let mut spare = Spare::new(missing)?;
                let walk = match mirror.snapshot(mm, at, &mut pfns[..n], pool.owner(), cancel) {
                    Err(e) if e == EBUSY => continue,
                    r => r?,
                };
                // This device's own pages, kept.
                let bound_now = mirror.lock().bind(&walk, dev, &mut spare, |_, page| {
                    pool.offset_of(page).map(|_| (Bind::Own, Life::Kept))
                });
                match bound_now {
                    Err(e) if e == EAGAIN => continue,
                    r => bound += r?,
                }
                break;
            }
            at = next;
        }
        Ok(())
    };
    let r = walk_all();
    // Counted whatever ended it: what it bound stays bound.
    pool.stats.pt_bound.add(bound, Relaxed);
    r.map(|()| bound)
}
