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
//! block of device memory, page by page, as a 2 MiB folio moves). One more
//! path has no device in it: system RAM to system RAM with the kernel's
//! `copy_highpage()`, the copy of the reference driver `test_hmm` (whose
//! "device memory" is system pages), so that the bench can take that
//! driver's copy time out of its total and compare what is left, its mm
//! work, with msvm's.

use kernel::prelude::*;
use kernel::time::{Instant, Monotonic};

use crate::mm::page::{NewPage, BLOCK_PAGES};
use crate::mm::pagemap::PAGE_SIZE;

use super::{Large, Payer, VramPool};

/// The paths of the copy floor.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum FloorPath {
    /// System RAM to this device's VRAM.
    ToDevice,
    /// This device's VRAM to system RAM.
    ToSystem,
    /// A peer's VRAM to this device's, over P2P.
    FromPeer,
    /// System RAM to system RAM with `copy_highpage()`: `test_hmm`'s copy.
    SystemCopy,
}

/// The largest floor run: the bench's sizes, and a bound on what a run
/// holds (its device pages and as many system pages, or twice as many
/// system pages for [`FloorPath::SystemCopy`]) and how long it holds its
/// devices.
pub(crate) const FLOOR_MAX_PAGES: usize = (1 << 30) / PAGE_SIZE;

/// Device pages of a pool (4 KiB pages or whole 2 MiB blocks), held for
/// a floor run and freed when dropped, with the BAR offset of each page.
struct DevicePages {
    _held: KVVec<NewPage>,
    offsets: KVVec<usize>,
}

impl DevicePages {
    /// `npages` pages of `pool`, in whole 2 MiB blocks if `large`: `ENOSPC`
    /// if the pool has not that much free memory.
    fn take(
        pool: &VramPool,
        npages: usize,
        large: bool,
        stop: &dyn Fn() -> Result,
    ) -> Result<Self> {
        let step = if large { BLOCK_PAGES } else { 1 };
        let mut held = KVVec::with_capacity(npages / step, GFP_KERNEL)?;
        let mut offsets = KVVec::with_capacity(npages, GFP_KERNEL)?;
        while offsets.len() < npages {
            stop()?;
            // A 2 MiB block at a time: bounded batches, and room made as
            // the run goes (`grow` stops on a fatal signal: `stop` says so).
            let want = (npages - offsets.len()).min(BLOCK_PAGES);
            if !pool.grow(want, large) {
                stop()?;
                return Err(ENOSPC);
            }
            let mut batch = if large {
                match pool.alloc_large(Payer::Nobody)? {
                    Large::Folio(b) => b,
                    Large::NoBlock | Large::Refused => return Err(ENOSPC),
                }
            } else {
                pool.alloc(want, Payer::Nobody)?
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

/// `npages` zeroed system pages, in 2 MiB folios if `large`, freed when
/// dropped: `ENOMEM` if they do not come easily (no retrying, no OOM
/// killer for them).
fn system_pages(npages: usize, large: bool, stop: &dyn Fn() -> Result) -> Result<KVVec<NewPage>> {
    let step = if large { BLOCK_PAGES } else { 1 };
    let mut v = KVVec::with_capacity(npages / step, GFP_KERNEL)?;
    for i in 0..npages / step {
        if (i * step) % BLOCK_PAGES == 0 {
            stop()?;
        }
        v.push(NewPage::zeroed_try(large).ok_or(ENOMEM)?, GFP_KERNEL)?;
    }
    Ok(v)
}

/// Times `copy_highpage()` from `npages` system pages to as many others
/// (in 2 MiB folios, page by page, if `large`).
fn system_copy(npages: usize, large: bool, stop: &dyn Fn() -> Result) -> Result<u64> {
    let from = system_pages(npages, large, stop)?;
    let to = system_pages(npages, large, stop)?;
    let per = if large { BLOCK_PAGES } else { 1 };
    let start = Instant::<Monotonic>::now();
    for (b, (src, dst)) in from.iter().zip(to.iter()).enumerate() {
        if (b * per) % BLOCK_PAGES == 0 {
            stop()?;
        }
        for k in 0..per {
            dst.copy_page_from(k, src, k)?;
        }
    }
    // Timed before the pages are freed.
    u64::try_from(start.elapsed().as_nanos()).map_err(|_| ERANGE)
}

impl VramPool {
    /// Times `path` over `npages` pages (4 KiB pages, or 2 MiB blocks if
    /// `large`; `npages` a multiple of 512 then, at most
    /// [`FLOOR_MAX_PAGES`]), `peer` the source of [`FloorPath::FromPeer`]
    /// (a device of this one's owner group). `stop` is asked between 2 MiB
    /// blocks whether to go on (a fatal signal, a device going away).
    /// Returns the nanoseconds the copies took, or `None` for a 2 MiB run
    /// on a pool that holds no 2 MiB folios. `ENOSPC` if either pool has
    /// not that much free memory, `ENOMEM` without the system pages,
    /// `EINVAL` for a bad size or a peer path without a peer.
    /// [`FloorPath::SystemCopy`] takes no device memory (it is a device's
    /// only to share the bounds and the knob).
    pub(crate) fn copy_floor(
        &self,
        path: FloorPath,
        peer: Option<&VramPool>,
        npages: usize,
        large: bool,
        stop: &dyn Fn() -> Result,
    ) -> Result<Option<u64>> {
        if npages == 0 || npages > FLOOR_MAX_PAGES || (large && npages % BLOCK_PAGES != 0) {
            return Err(EINVAL);
        }
        if path == FloorPath::SystemCopy {
            return system_copy(npages, large, stop).map(Some);
        }
        let peer_large = path != FloorPath::FromPeer || peer.is_some_and(|p| p.holds_large());
        if large && !(self.holds_large() && peer_large) {
            return Ok(None);
        }
        // Refused up front if it cannot fit, rather than after taking every
        // free page.
        if !self.could_hold(npages)
            || (path == FloorPath::FromPeer && !peer.is_some_and(|p| p.could_hold(npages)))
        {
            return Err(ENOSPC);
        }
        let here = DevicePages::take(self, npages, large, stop)?;
        let ns = match path {
            FloorPath::ToDevice | FloorPath::ToSystem => {
                let sys = system_pages(npages, large, stop)?;
                let per = if large { BLOCK_PAGES } else { 1 };
                let start = Instant::<Monotonic>::now();
                for (b, folio) in sys.iter().enumerate() {
                    if (b * per) % BLOCK_PAGES == 0 {
                        stop()?;
                    }
                    for k in 0..per {
                        let off = here.offsets[b * per + k];
                        if path == FloorPath::ToDevice {
                            let page = folio.page().nth(k).ok_or(EINVAL)?;
                            self.bar()?.copy_from_page(off, page)?;
                        } else {
                            self.bar()?.copy_to_page(off, folio, k)?;
                        }
                    }
                }
                // Timed before the pages are freed.
                start.elapsed().as_nanos()
            }
            FloorPath::SystemCopy => return Err(EINVAL),
            FloorPath::FromPeer => {
                let peer = peer.ok_or(EINVAL)?;
                let there = DevicePages::take(peer, npages, large, stop)?;
                let mut stage = KBox::new([0u8; PAGE_SIZE], GFP_KERNEL)?;
                let start = Instant::<Monotonic>::now();
                for (i, (&off, &from)) in here.offsets.iter().zip(there.offsets.iter()).enumerate()
                {
                    if i % BLOCK_PAGES == 0 {
                        stop()?;
                    }
                    let src = peer.bar()?;
                    self.bar()?.copy_from_bar(off, &src, from, &mut stage)?;
                }
                start.elapsed().as_nanos()
            }
        };
        u64::try_from(ns).map(Some).map_err(|_| ERANGE)
    }
}
