// SPDX-License-Identifier: GPL-2.0

//! The copy floor: the driver's own copy primitives timed over the same
//! bytes a movement moves, with no mm work at all (no page-table walk, no
//! migration entries, no page locks beyond the pages' own): what a
//! movement would cost if all it did was copy. `make bench` divides it by
//! each movement's time (its efficiency, at most 1 by construction).
//!
//! Each path uses the copy a migration uses: RAM to VRAM
//! ([`WcBar::copy_from_page`], the DMA mapping made and torn down per page),
//! VRAM to RAM ([`WcBar::copy_to_page`], likewise) and a peer's VRAM to
//! this device's ([`WcBar::copy_from_bar`] through a page-sized stage), in
//! 4 KiB pages or in 2 MiB blocks (a 2 MiB system folio and a whole free
//! block of device memory, page by page, as a 2 MiB folio moves).

use kernel::prelude::*;
use kernel::time::{Instant, Monotonic};

use crate::mm::cancel::Cancel;
use crate::mm::page::{NewPage, BLOCK_PAGES};
use crate::mm::pagemap::PAGE_SIZE;

use super::VramPool;

/// The paths of the copy floor.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum FloorPath {
    /// System RAM to this device's VRAM.
    ToDevice,
    /// This device's VRAM to system RAM.
    ToSystem,
    /// A peer's VRAM to this device's, over P2P.
    FromPeer,
}

/// Device pages of a pool (4 KiB pages or whole 2 MiB blocks), held for
/// a floor run and freed when dropped, with the BAR offset of each page.
struct DevicePages {
    _held: KVec<NewPage>,
    offsets: KVec<usize>,
}

impl DevicePages {
    /// `npages` pages of `pool`, in whole 2 MiB blocks if `large`: `ENOSPC`
    /// if the pool has not that much free memory.
    fn take(pool: &VramPool, npages: usize, large: bool, cancel: &Cancel<'_>) -> Result<Self> {
        let step = if large { BLOCK_PAGES } else { 1 };
        let mut held = KVec::with_capacity(npages / step, GFP_KERNEL)?;
        let mut offsets = KVec::with_capacity(npages, GFP_KERNEL)?;
        if !pool.grow(npages, large) {
            return Err(ENOSPC);
        }
        while offsets.len() < npages {
            cancel.check()?;
            let mut batch = if large {
                pool.alloc_large()?.ok_or(ENOSPC)?
            } else {
                pool.alloc(npages - offsets.len())?
            };
            let before = offsets.len();
            while let Some((page, off)) = batch.take() {
                for k in 0..step {
                    offsets.push(off + k * PAGE_SIZE, GFP_KERNEL)?;
                }
                held.push(page, GFP_KERNEL)?;
            }
            if offsets.len() == before {
                return Err(ENOSPC);
            }
        }
        Ok(Self {
            _held: held,
            offsets,
        })
    }
}

/// `npages` system pages, in 2 MiB folios if `large`, freed when dropped.
fn system_pages(npages: usize, large: bool, cancel: &Cancel<'_>) -> Result<KVec<NewPage>> {
    let step = if large { BLOCK_PAGES } else { 1 };
    let mut v = KVec::with_capacity(npages / step, GFP_KERNEL)?;
    for _ in 0..npages / step {
        cancel.check()?;
        let page = if large {
            NewPage::large_evict()
        } else {
            NewPage::must()
        };
        v.push(page.ok_or(ENOMEM)?, GFP_KERNEL)?;
    }
    Ok(v)
}

impl VramPool {
    /// Times `path` over `npages` pages (4 KiB pages, or 2 MiB blocks if
    /// `large`; `npages` a multiple of 512 then), `peer` the source of
    /// [`FloorPath::FromPeer`] (a device of this one's owner group).
    /// Returns the nanoseconds the copies took. `ENOSPC` if either pool has
    /// not that much free memory, `ENOMEM` without the system pages,
    /// `EINVAL` for a peer path without a peer.
    pub(crate) fn copy_floor(
        &self,
        path: FloorPath,
        peer: Option<&VramPool>,
        npages: usize,
        large: bool,
    ) -> Result<u64> {
        if npages == 0 || (large && npages % BLOCK_PAGES != 0) {
            return Err(EINVAL);
        }
        let cancel = Cancel::task();
        let here = DevicePages::take(self, npages, large, &cancel)?;
        let start;
        match path {
            FloorPath::ToDevice | FloorPath::ToSystem => {
                let sys = system_pages(npages, large, &cancel)?;
                let per = if large { BLOCK_PAGES } else { 1 };
                start = Instant::<Monotonic>::now();
                for (b, folio) in sys.iter().enumerate() {
                    if (b * per) % BLOCK_PAGES == 0 {
                        cancel.check()?;
                    }
                    for k in 0..per {
                        let page = folio.page().nth(k).ok_or(EINVAL)?;
                        let off = here.offsets[b * per + k];
                        if path == FloorPath::ToDevice {
                            self.bar()?.copy_from_page(off, page)?;
                        } else {
                            self.bar()?.copy_to_page(off, page)?;
                        }
                    }
                }
            }
            FloorPath::FromPeer => {
                let peer = peer.ok_or(EINVAL)?;
                let there = DevicePages::take(peer, npages, large, &cancel)?;
                let mut stage = KBox::new([0u8; PAGE_SIZE], GFP_KERNEL)?;
                start = Instant::<Monotonic>::now();
                for (i, (&off, &from)) in here.offsets.iter().zip(there.offsets.iter()).enumerate()
                {
                    if i % BLOCK_PAGES == 0 {
                        cancel.check()?;
                    }
                    let src = peer.bar()?;
                    self.bar()?.copy_from_bar(off, &src, from, &mut stage)?;
                }
                drop(there);
            }
        }
        let ns = start.elapsed().as_nanos();
        drop(here);
        u64::try_from(ns).map_err(|_| ERANGE)
    }
}
