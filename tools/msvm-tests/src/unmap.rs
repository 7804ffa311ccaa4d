//! No DMA mapping outlives what it maps (issue 46): a device's entries of
//! system pages it used in place go, with their IOMMU mappings, before
//! the pages are freed and taken by their next owner.

use std::ptr::NonNull;

use msvm_rt::{Access, Attributes, Exec, Place};
use nix::sys::mman::{madvise, MmapAdvise};

use crate::check;
use crate::devpt::aligned;
use crate::harness::{Outcome, Test};
use crate::svm::{fill, gpu0, Map, PAGE};

pub fn tests() -> Vec<Test> {
    vec![Test {
        name: "freed_pages_are_unmapped_before_their_next_owner",
        run: freed_then_reused,
    }]
}

/// Used where they are, and kept in the device's table: a job that the
/// table covers runs on its entries, with no walk of the process first.
const IN_PLACE: Attributes = Attributes {
    preferred: Place::Default,
    access: Access::InPlace,
    thrash: true,
    counters: false,
    read_mostly: false,
};

/// Bytes of the buffer.
const LEN: usize = 2 << 20;
/// Bytes the next owner takes at once (fresh 4 KiB pages from the
/// allocator, the freed ones first: its per-CPU lists give back the last
/// freed first), before the new memory at the address takes any: so that
/// the new memory is not the freed pages in the same order, which a stale
/// entry would read as if it were right.
const NEXT: usize = 16 << 20;

/// `m`'s pages in 4 KiB (no THP: a freed 2 MiB folio comes back whole to
/// the next 2 MiB fault, possibly at the same address).
fn small_pages(m: &Map) -> Outcome {
    let p = NonNull::new(m.addr() as *mut _).ok_or("null map")?;
    // SAFETY: advice on our own mapping.
    unsafe { madvise(p, m.len(), MmapAdvise::MADV_NOHUGEPAGE) }.map_err(|x| x.to_string())
}

/// 2 MiB of system RAM, used in place by a CHECKSUM of gpu0 (its table
/// keeps an entry per page, each a DMA mapping: behind an IOMMU, an IOVA;
/// a later job that the table covers runs on them as they are),
/// then unmapped by the process; a next owner takes fresh pages and writes
/// its own bytes; new memory with other bytes at the same address. A
/// CHECKSUM in place there must read the new bytes. A device entry or an
/// IOMMU mapping that outlived the unmap would read the freed pages, now
/// the next owner's (a wrong sum), or, with the IOMMU's mapping gone in
/// time but the device's entry not, fault (`EIO`: the device's DMA
/// refused), and the test says which.
fn freed_then_reused() -> Outcome {
    let dev = gpu0()?;
    let (outer, mut m) = aligned(LEN)?;
    small_pages(&outer)?;
    fill(m.bytes_mut(), 461);
    let old = msvm_rt::checksum(m.bytes());
    let addr = m.addr();
    // In place, where it is, kept: no access counter moves it.
    dev.set_attr(addr, LEN, IN_PLACE)
        .map_err(|x| x.to_string())?;
    let j = dev
        .exec(Exec::Checksum, addr, LEN, true)
        .map_err(|x| format!("CHECKSUM in place: {x}"))?;
    check!(j.result == old && j.migrated == 0, "first CHECKSUM: {j:?}");
    let s0 = dev.stats().map_err(|x| x.to_string())?;
    drop(m);
    let mut next = Map::new(NEXT)?;
    small_pages(&next)?;
    fill(next.bytes_mut(), 462);
    // SAFETY: the hole `m` left in `outer`, which nothing else uses; this
    // thread mapped nothing there since.
    let mut m = unsafe { Map::over(addr, LEN) }?;
    small_pages(&m)?;
    fill(m.bytes_mut(), 463);
    let new = msvm_rt::checksum(m.bytes());
    check!(new != old, "the new bytes have the old checksum");
    let s1 = dev.stats().map_err(|x| x.to_string())?;
    let got = dev.exec(Exec::Checksum, addr, LEN, true);
    let s2 = dev.stats().map_err(|x| x.to_string())?;
    println!(
        "    unmap: {} entries zapped; the next job: {} windows hit, {} faulted, {} entries bound",
        s1.pt_zapped - s0.pt_zapped,
        s2.pt_hits - s1.pt_hits,
        s2.pt_faults - s1.pt_faults,
        s2.pt_bound - s1.pt_bound
    );
    // Every entry went with the unmap, and the job bound the new pages.
    check!(
        s1.pt_zapped - s0.pt_zapped >= (LEN / PAGE) as u64,
        "the unmap zapped {} entries of {}",
        s1.pt_zapped - s0.pt_zapped,
        LEN / PAGE
    );
    match got {
        Ok(j) => check!(
            j.result == new,
            "CHECKSUM in place after the unmap read {:#x}, want {new:#x} (the old bytes': {old:#x}): \
             the device read pages freed under it, the next owner's",
            j.result
        ),
        Err(x) => {
            return Err(format!(
                "CHECKSUM in place after the unmap: {x}: the device faulted on an entry the unmap \
                 left (its DMA refused: the IOMMU's mapping went, the device's entry did not)"
            ))
        }
    }
    drop(next);
    Ok(())
}
