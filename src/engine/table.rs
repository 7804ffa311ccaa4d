// SPDX-License-Identifier: GPL-2.0

//! A window's view of where its pages are: device addresses
//! ([`DevAddr`]) and their decoder's targets ([`Target`]), through the VM's
//! device page table ([`TableView`]) or a table of the window's own
//! ([`PageTable`], with the DMA and P2P mappings behind it).

use kernel::prelude::*;

use crate::mm::{
    devpt::{DevPt, Mapping},
    dma::{DmaPage, SysPage},
    p2p::PeerMap,
    page::BLOCK_SIZE,
    pagemap::PAGE_SIZE,
};
use crate::vram::VramPool;

use super::{Done, Job, Op};

/// A device-visible address.
#[derive(Clone, Copy)]
pub(super) enum DevAddr {
    /// Offset in this device's VRAM.
    Vram(usize),
    /// DMA address of a system page.
    Dma(u64),
    /// Bus address of a page of a peer's VRAM (P2P).
    Peer(u64),
}

/// The pages of one window of a job: the destination's, and COPY's
/// source's (none for other operations).
#[derive(Clone, Copy)]
pub(super) struct WindowPages {
    /// The window's first destination byte.
    pub(super) dst: usize,
    /// Its page, and the pages from it the window touches.
    pub(super) dst_first: usize,
    pub(super) dst_pages: usize,
    /// The same of the source.
    pub(super) src: Option<usize>,
    pub(super) src_first: usize,
    pub(super) src_pages: usize,
}

impl WindowPages {
    /// Bytes `[off, off + n)` of `job`.
    pub(super) fn new(job: &Job, (off, n): (usize, usize)) -> Self {
        let dst = job.addr + off;
        let dst_first = dst & !(PAGE_SIZE - 1);
        let src = match job.op {
            Op::Copy { src } => Some(src + off),
            _ => None,
        };
        let src_first = src.map_or(0, |s| s & !(PAGE_SIZE - 1));
        Self {
            dst,
            dst_first,
            dst_pages: (dst + n - dst_first).div_ceil(PAGE_SIZE),
            src,
            src_first,
            src_pages: src.map_or(0, |s| (s + n - src_first).div_ceil(PAGE_SIZE)),
        }
    }
}

/// The bytes of `job`'s window at job offset `off`: to the end of the
/// destination's 2 MiB block, or of the job.
pub(super) fn window_len(job: &Job, off: usize) -> usize {
    let a = job.addr + off;
    let end = (a / BLOCK_SIZE + 1) * BLOCK_SIZE;
    (end - a).min(job.len - off)
}

/// Where the decoder found a device address: what the engine accesses.
#[derive(Clone, Copy)]
pub(super) enum Target<'a> {
    /// This device's VRAM at the offset.
    Vram(usize),
    /// A system page (by DMA).
    Sys(SysPage<'a>),
    /// A peer's VRAM at the offset (over P2P).
    Peer(&'a VramPool, usize),
}

/// A device page table as the executor walks it: the target of each page
/// of a window.
pub(super) trait Decode {
    /// Where the window's page `i` is.
    fn at(&self, i: usize) -> Result<Target<'_>>;
}

/// A P2P mapping of a peer page, with what the decoder needs to reach it.
pub(super) struct PeerPage<'a> {
    pub(super) map: PeerMap<'a>,
    pub(super) pool: &'a VramPool,
    pub(super) offset: usize,
}

/// The device page table of one window, and the mappings behind it.
pub(super) struct PageTable<'a> {
    pub(super) entries: KVec<DevAddr>,
    /// Sorted by address: the decoder's view of the DMA mappings.
    pub(super) dma: KVec<DmaPage<'a>>,
    /// Sorted by address: the decoder's view of the P2P mappings.
    pub(super) p2p: KVec<PeerPage<'a>>,
}

impl Decode for PageTable<'_> {
    fn at(&self, i: usize) -> Result<Target<'_>> {
        Ok(match *self.entries.get(i).ok_or(EFAULT)? {
            DevAddr::Vram(off) => Target::Vram(off),
            DevAddr::Dma(d) => Target::Sys(decode_dma(self, d)?.sys()),
            DevAddr::Peer(d) => {
                let (pool, off) = decode_peer(self, d)?;
                Target::Peer(pool, off)
            }
        })
    }
}

/// The VM's device page table from address `first`, as a window's table.
pub(super) struct TableView<'t> {
    pub(super) table: &'t DevPt,
    /// This device's pool.
    pub(super) pool: &'t VramPool,
    pub(super) first: usize,
}

impl Decode for TableView<'_> {
    fn at(&self, i: usize) -> Result<Target<'_>> {
        Ok(
            match self.table.get(self.first + i * PAGE_SIZE).ok_or(EFAULT)? {
                Mapping::Own(page) => Target::Vram(self.pool.offset_of(page).ok_or(EFAULT)?),
                Mapping::Dma(page) => Target::Sys(page),
                Mapping::Peer(page) => {
                    let (pool, off) = self.pool.locate(page).ok_or(EFAULT)?;
                    Target::Peer(pool, off)
                }
            },
        )
    }
}

impl PageTable<'_> {
    /// Adds the table's pages to `done`'s counts by path.
    pub(super) fn tally(&self, done: &mut Done) {
        for e in self.entries.iter() {
            match e {
                DevAddr::Vram(_) => done.vram += 1,
                DevAddr::Peer(_) => done.p2p += 1,
                DevAddr::Dma(_) => done.dma += 1,
            }
        }
    }

    pub(super) fn with_capacity(n: usize) -> Result<Self> {
        Ok(Self {
            entries: KVec::with_capacity(n, GFP_KERNEL)?,
            dma: KVec::with_capacity(n, GFP_KERNEL)?,
            p2p: KVec::with_capacity(n, GFP_KERNEL)?,
        })
    }
}

/// FNV-1a, 64-bit.
pub(super) const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
pub(super) const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

pub(super) fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// The peer pool and BAR offset the job mapped at bus address `d`.
pub(super) fn decode_peer<'a>(pt: &'a PageTable<'_>, d: u64) -> Result<(&'a VramPool, usize)> {
    let i = pt
        .p2p
        .binary_search_by_key(&d, |m| m.map.addr())
        .map_err(|_| EFAULT)?;
    Ok((pt.p2p[i].pool, pt.p2p[i].offset))
}

/// The DMA mapping of the system page the job mapped at DMA address `d`.
pub(super) fn decode_dma<'a, 'p>(pt: &'a PageTable<'p>, d: u64) -> Result<&'a DmaPage<'p>> {
    let i = pt
        .dma
        .binary_search_by_key(&d, |m| m.addr())
        .map_err(|_| EFAULT)?;
    Ok(&pt.dma[i])
}
