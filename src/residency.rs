// SPDX-License-Identifier: GPL-2.0

//! Where the pages of a range live now: bytes in system RAM, in each
//! device's memory, and nowhere (never touched, swapped out, holes).
//!
//! A snapshot through the VM's mirror: `hmm_range_fault` without faulting
//! anything in, once per owner group (it reports device-private pages of
//! one owner only), with the pages classified under the mirror lock so that
//! none of them is freed or moved while it is looked at.
//!
//! # Lock order
//!
//! As the engine (`src/engine.rs`): the mirror lock is taken after each
//! walk, with nothing held.

use kernel::num::casts::FromSafeCast;
use kernel::prelude::*;

use crate::mm::{
    cancel::Cancel,
    devtables::DevMirror,
    hmm::HmmPfn,
    owner::Owner,
    page::{BLOCK_PAGES, BLOCK_SIZE},
    pagemap::PAGE_SIZE,
};
use crate::registry;
use crate::topology::MAX_DEVICES;
use crate::vram::{group_key, GroupKey};

/// Longest range a query may cover: it walks page tables page by page.
pub(crate) const MAX_LEN: u64 = 1 << 32;

/// What a residency query found, in bytes.
#[derive(Default, Debug)]
pub(crate) struct Residency {
    pub(crate) system: u64,
    pub(crate) none: u64,
    pub(crate) devices: [u64; MAX_DEVICES],
    /// Bytes in blocks that thrashing detection pins.
    pub(crate) pinned: u64,
    /// Bytes with a read-only replica that is not stale, in each device's
    /// memory.
    pub(crate) replicas: [u64; MAX_DEVICES],
}

/// Where one page was found.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    Nowhere,
    System,
    Device(usize),
}

/// Counts where the pages of `[start, start + len)` of `mm` live
/// (page aligned, at most [`MAX_LEN`] bytes, checked by the caller).
pub(crate) fn residency(
    mm: &kernel::mm::MmWithUser,
    mirror: &DevMirror,
    start: usize,
    len: usize,
    cancel: &Cancel<'_>,
) -> Result<Residency> {
    // One owner token per group present; the first walk also sees system
    // pages.
    // With no device at all, one walk (with no owner) still finds the
    // system pages.
    let mut keys: [Option<&'static GroupKey>; MAX_DEVICES] = [None; MAX_DEVICES];
    let mut groups = 1;
    {
        let topo = registry::devices();
        for (k, l) in topo.group_leaders().enumerate() {
            keys[k] = Some(group_key(topo.group(l).unwrap_or(l)));
            groups = k + 1;
        }
    }
    let mut r = Residency::default();
    // One walk covers a 2 MiB block's worth of pages at most.
    let mut pfns = KVec::from_elem(HmmPfn::NONE, BLOCK_PAGES, GFP_KERNEL)?;
    let mut places = KVec::from_elem(Place::Nowhere, BLOCK_PAGES, GFP_KERNEL)?;
    let end = start + len;
    let mut addr = start;
    while addr < end {
        cancel.check()?;
        let n = ((end - addr) / PAGE_SIZE).min(BLOCK_PAGES);
        places[..n].fill(Place::Nowhere);
        let mut first = true;
        for &key in &keys[..groups] {
            let owner = key.map_or(Owner::NONE, |k| k.owner());
            loop {
                cancel.check()?;
                let walk = match mirror.snapshot(mm, addr, &mut pfns[..n], owner, cancel) {
                    Err(e) if e == EBUSY => continue,
                    r => r?,
                };
                let guard = mirror.lock();
                let found = match guard.pages(&walk) {
                    Err(e) if e == EAGAIN => continue,
                    r => r?,
                };
                // Met under a valid sequence: eviction follows them here.
                if let Some(k) = key {
                    crate::vram::renew(k, mm, &found);
                }
                // The pages stay as found while `guard` is held.
                for (p, page) in places[..n].iter_mut().zip(found.iter()) {
                    let Some(page) = page else {
                        continue;
                    };
                    if let Some((pool, _)) = key.and_then(|k| crate::vram::locate(page, k)) {
                        *p = Place::Device(pool.index());
                    } else if first && !page.is_device_private() {
                        *p = Place::System;
                    }
                }
                drop(guard);
                break;
            }
            first = false;
        }
        let page = u64::from_safe_cast(PAGE_SIZE);
        for p in &places[..n] {
            match *p {
                Place::Nowhere => r.none += page,
                Place::System => r.system += page,
                Place::Device(i) => r.devices[i % MAX_DEVICES] += page,
            }
        }
        addr += n * PAGE_SIZE;
    }
    if let Some(p) = crate::process::of(mm) {
        // The recorded blocks only: the range may span terabytes.
        p.each(start, end, |at, b| {
            if crate::thrash::holds_pin(b) {
                let (first, next) = (at.max(start), (at + BLOCK_SIZE).min(end));
                r.pinned += u64::from_safe_cast(next - first);
            }
        });
    }
    // One device at a time, each held by a handle of its own.
    for i in 0..MAX_DEVICES {
        let Ok(pool) = registry::PoolRef::get_locked(&registry::devices(), i) else {
            continue;
        };
        // CAST: an address, used as a key only.
        r.replicas[i] = pool.replica_bytes(mm.as_raw() as usize, start, end);
    }
    Ok(r)
}
