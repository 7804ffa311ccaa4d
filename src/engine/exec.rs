// SPDX-License-Identifier: GPL-2.0

//! The CPU engine's execution of a window: its table of device addresses
//! from a walk, and the address decoder that turns each into a CPU access
//! (the BAR mapping for VRAM, the page a DMA mapping maps, a peer's BAR).

use kernel::{num::casts::FromSafeCast, prelude::*, sync::atomic::Relaxed};

use crate::access;
use crate::mm::{
    dma::DmaPage,
    hmm::Pages,
    p2p::PeerMap,
    page::{BLOCK_PAGES, BLOCK_SIZE},
    pagemap::PAGE_SIZE,
};
use crate::vram::{ReplicaWindow, VramPool};

use super::{fnv1a, Decode, DevAddr, Done, Engine, Op, PageTable, PeerPage, Target};

impl<'p> Engine<'p> {
    /// Fills `pt` with device addresses for the pages `hmm_range_fault`
    /// found from address `first`, and counts the pages it uses in place
    /// that are not in this device's memory ([`access::add`]). Runs under
    /// the mirror lock, which reclaim can wait for (an invalidation takes
    /// it): it must not allocate what can wait, so `pt` comes with room
    /// for every page (a block's policy state is `GFP_NOWAIT`).
    pub(super) fn page_table<'g>(
        &self,
        pages: &Pages<'g>,
        first: usize,
        pt: &mut PageTable<'g>,
        mut replicas: Option<&mut ReplicaWindow<'_>>,
    ) -> Result
    where
        'p: 'g,
    {
        pt.entries.clear();
        pt.dma.clear();
        pt.p2p.clear();
        // Pages not in this device's memory, counted per 2 MiB block: the
        // block's first page index in the table and the count.
        let mut remote = (0, 0);
        let on = access::enabled();
        let count = |(at, n): (usize, u64)| {
            if on && n > 0 {
                access::add(&self.process, self.pool.index(), first + at * PAGE_SIZE, n);
                self.pool.stats.access_counted.add(n, Relaxed);
            }
        };
        for (i, page) in pages.iter().enumerate() {
            let page = page.ok_or(EFAULT)?;
            let found = self.pool.locate(page);
            if let Some((pool, off)) = found {
                pool.note_used(off, self.epoch);
            }
            let at = first + i * PAGE_SIZE;
            if at % BLOCK_SIZE == 0 {
                count(remote);
                remote = (i, 0);
            }
            let addr = match found {
                Some((pool, off)) if self.pool.is(pool) => DevAddr::Vram(off),
                // A peer's page: `hmm_range_fault` left it where it is
                // because the peer shares our owner group, i.e. we reach it
                // over P2P.
                Some((pool, off)) => {
                    let route = self.pool.peer_route(page, self.dev)?;
                    let map = PeerMap::map(self.dev, route).ok_or(ENOMEM)?;
                    let a = map.addr();
                    pt.p2p
                        .push_within_capacity(PeerPage {
                            map,
                            pool,
                            offset: off,
                        })
                        .map_err(|_| ENOMEM)?;
                    DevAddr::Peer(a)
                }
                // Another owner's device page, or a page the kernel must
                // not touch (secretmem): no access, as GUP refuses them.
                None if page.is_device_private() || page.is_secretmem() => return Err(EFAULT),
                // A system page of a read-mostly range: its replica here,
                // unless something may write it through a DMA pin.
                None if replicas.is_some() && !page.maybe_dma_pinned() => {
                    let w = replicas.as_deref_mut().ok_or(EINVAL)?;
                    DevAddr::Vram(w.replica(at / PAGE_SIZE % BLOCK_PAGES, page)?)
                }
                None => {
                    let m = DmaPage::map(self.dev, page).ok_or(ENOMEM)?;
                    let a = m.addr();
                    pt.dma.push_within_capacity(m).map_err(|_| ENOMEM)?;
                    DevAddr::Dma(a)
                }
            };
            if !matches!(addr, DevAddr::Vram(_)) {
                remote.1 += 1;
            }
            pt.entries.push_within_capacity(addr).map_err(|_| ENOMEM)?;
        }
        count(remote);
        pt.dma.sort_unstable_by_key(|m| m.addr());
        pt.p2p.sort_unstable_by_key(|m| m.map.addr());
        Ok(())
    }

    /// Runs `op` over `n` bytes from `doff` of the `dst` table (and `soff`
    /// of the `src` table), the job's bytes from `joff` on (where a FILL's
    /// pattern goes on from).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn execute<D: Decode>(
        &mut self,
        op: Op,
        joff: usize,
        dst: &D,
        doff: usize,
        src: &D,
        soff: usize,
        n: usize,
        done: &mut Done,
    ) -> Result {
        let pool = self.pool;
        let buf = &mut self.buf[..];
        let mut k = 0;
        while k < n {
            let d = doff + k;
            let (dp, dpo) = (dst.at(d / PAGE_SIZE)?, d % PAGE_SIZE);
            let mut step = (PAGE_SIZE - dpo).min(n - k);
            match op {
                Op::Fill(p) => {
                    p.write(joff + k, &mut buf[..step]);
                    dev_write(pool, dp, dpo, &buf[..step])?;
                }
                Op::Checksum => {
                    dev_read(pool, dp, dpo, &mut buf[..step])?;
                    done.result = fnv1a(done.result, &buf[..step]);
                }
                Op::Copy { .. } => {
                    let s = soff + k;
                    let (sp, spo) = (src.at(s / PAGE_SIZE)?, s % PAGE_SIZE);
                    step = step.min(PAGE_SIZE - spo);
                    dev_read(pool, sp, spo, &mut buf[..step])?;
                    dev_write(pool, dp, dpo, &buf[..step])?;
                }
                Op::AtomicAdd(v) => dev_add(pool, dp, dpo, step, v)?,
            }
            k += step;
        }
        Ok(())
    }
}

/// The address decoder's access: reads `buf.len()` bytes at `off` of the
/// page at `a`.
pub(super) fn dev_read(pool: &VramPool, a: Target<'_>, off: usize, buf: &mut [u8]) -> Result {
    let s = &pool.stats;
    match a {
        Target::Vram(base) => {
            pool.bar()?.read(base + off, buf)?;
            s.engine_vram_read
                .add(u64::from_safe_cast(buf.len()), Relaxed);
        }
        Target::Sys(page) => {
            page.read(off, buf);
            s.engine_sys_read
                .add(u64::from_safe_cast(buf.len()), Relaxed);
        }
        Target::Peer(peer, base) => {
            peer.bar()?.read(base + off, buf)?;
            s.count_p2p(peer.index(), buf.len(), 0);
        }
    }
    Ok(())
}

/// The address decoder, for writes.
pub(super) fn dev_write(pool: &VramPool, a: Target<'_>, off: usize, buf: &[u8]) -> Result {
    let s = &pool.stats;
    match a {
        Target::Vram(base) => {
            pool.bar()?.write(base + off, buf)?;
            s.engine_vram_written
                .add(u64::from_safe_cast(buf.len()), Relaxed);
        }
        Target::Sys(page) => {
            page.write(off, buf);
            s.engine_sys_written
                .add(u64::from_safe_cast(buf.len()), Relaxed);
        }
        Target::Peer(peer, base) => {
            peer.bar()?.write(base + off, buf)?;
            s.count_p2p(peer.index(), 0, buf.len());
        }
    }
    Ok(())
}

/// Adds `v` to each `u64` of `[off, off + len)` of the page at `a`.
pub(super) fn dev_add(pool: &VramPool, a: Target<'_>, off: usize, len: usize, v: u64) -> Result {
    let s = &pool.stats;
    match a {
        Target::Vram(base) => {
            vram_add(pool, base + off, len, v)?;
            let len = u64::from_safe_cast(len);
            s.engine_vram_read.add(len, Relaxed);
            s.engine_vram_written.add(len, Relaxed);
        }
        Target::Peer(peer, base) => {
            vram_add(peer, base + off, len, v)?;
            s.count_p2p(peer.index(), len, len);
        }
        Target::Sys(page) => {
            for w in (off..off + len).step_by(8) {
                page.add_u64(w, v);
            }
            let len = u64::from_safe_cast(len);
            s.engine_sys_read.add(len, Relaxed);
            s.engine_sys_written.add(len, Relaxed);
        }
    }
    Ok(())
}

/// Read-modify-write of VRAM words through `owner`'s BAR, serialised by the
/// owning device's mutex (the engines of all devices take it).
pub(super) fn vram_add(owner: &VramPool, at: usize, len: usize, v: u64) -> Result {
    let _g = owner.atomics.lock();
    for w in (at..at + len).step_by(8) {
        let mut x = [0u8; 8];
        owner.bar()?.read(w, &mut x)?;
        let y = u64::from_ne_bytes(x).wrapping_add(v);
        owner.bar()?.write(w, &y.to_ne_bytes())?;
    }
    Ok(())
}
