// SPDX-License-Identifier: GPL-2.0

//! A migration step's page copies between system RAM and one device's
//! VRAM, from a peer's VRAM, or within the VRAM (a consolidation), queued
//! while the step allocates and run together before it installs its pages: by the device's copy engine where it has one
//! (`crate::gpu::copy`: the system pages mapped for it with the DMA API,
//! one command per run of pages contiguous at both ends, one doorbell and
//! one fence per step, waited for by interrupt), by the CPU through the
//! BAR otherwise. A step the engine failed is copied again by the CPU,
//! from the start: its sources are still in place (the core installs
//! nothing before the copies end).

use kernel::prelude::*;
use kernel::sync::atomic::{Atomic, Relaxed};

use crate::gpu::copy::{Command, RunError};
use crate::mm::dma::{DeviceDma, Direction};
use crate::mm::p2p::PeerMap;
use crate::mm::page::{NewPage, PageRef, PAGE_SIZE};

use super::{P2pReader, VramPool};

/// Whether steps use the copy engine of a device that has one (debugfs
/// `copy_engine`: the benchmark's CPU baseline turns it off).
static USE_ENGINE: Atomic<bool> = Atomic::new(true);

/// Runs left that start with a malformed command (debugfs `copy_engine`
/// `fail N`): the engine halts with BAD_COMMAND, is reset, and the step is
/// copied by the CPU (fault injection).
static FAIL_RUNS: Atomic<u64> = Atomic::new(0);

/// Makes the next `n` runs of any copy engine fail.
pub(crate) fn fail_runs(n: u64) {
    FAIL_RUNS.store(n, Relaxed);
}

/// Whether this run is to fail ([`fail_runs`]).
fn inject_failure() -> bool {
    let mut n = FAIL_RUNS.load(Relaxed);
    while n > 0 {
        match FAIL_RUNS.cmpxchg(n, n - 1, Relaxed) {
            Ok(_) => return true,
            Err(now) => n = now,
        }
    }
    false
}

/// Turns the copy engines' use by migrations on or off.
pub(crate) fn use_engine(on: bool) {
    USE_ENGINE.store(on, Relaxed);
}

/// Whether migrations use copy engines.
pub(crate) fn engine_used() -> bool {
    USE_ENGINE.load(Relaxed)
}

/// One copy of a step.
pub(crate) enum PageCopy<'p> {
    /// `nr` pages of system folio `src` (its first `nr`) into the pool's
    /// VRAM at `off`.
    In {
        src: PageRef<'p>,
        off: usize,
        nr: usize,
    },
    /// `nr` pages of device folio `src`, in the VRAM of a peer of the
    /// pool's owner group, into the pool's VRAM at `off`: device to device
    /// over P2P (the engine reads the peer's BAR at the bus address the
    /// DMA API gives).
    Peer {
        src: PageRef<'p>,
        off: usize,
        nr: usize,
    },
    /// `nr` pages of the pool's VRAM at `from` to `to` (a consolidation
    /// of its chunks).
    Within { from: usize, to: usize, nr: usize },
    /// Zeroes `nr` pages of the pool's VRAM at `off` (a hole moving in).
    Zero { off: usize, nr: usize },
    /// `nr` pages of `owner`'s VRAM at `off` (the pool's, or a peer's of
    /// its owner group) into the first `nr` pages of `dst`, a system folio
    /// of the step's.
    Out {
        owner: &'p VramPool,
        off: usize,
        dst: NewPage,
        nr: usize,
    },
}

/// A step's copies into or out of `pool`, each with the caller's `T`,
/// handed back by [`Blit::run`].
pub(crate) struct Blit<'p, T> {
    pool: &'p VramPool,
    ops: KVVec<(PageCopy<'p>, T)>,
    /// Pages the copies name.
    pages: usize,
}

impl<'p, T> Blit<'p, T> {
    /// No copies yet, room for `n`.
    pub(crate) fn new(pool: &'p VramPool, n: usize) -> Result<Self> {
        Ok(Self {
            pool,
            ops: KVVec::with_capacity(n, GFP_KERNEL)?,
            pages: 0,
        })
    }

    /// Queues `copy`, with `tag`.
    pub(crate) fn push(&mut self, copy: PageCopy<'p>, tag: T) -> Result {
        let (PageCopy::In { nr, .. }
        | PageCopy::Peer { nr, .. }
        | PageCopy::Within { nr, .. }
        | PageCopy::Zero { nr, .. }
        | PageCopy::Out { nr, .. }) = &copy;
        self.pages += *nr;
        self.ops.push((copy, tag), GFP_KERNEL)?;
        Ok(())
    }

    /// Runs every copy, and hands back each one's tag with its system
    /// folio (for [`PageCopy::Out`]), in the order queued. If the device's
    /// engine was lost under the copies, everything they name is kept for
    /// good (the destinations leak, with the tags: the engine may still
    /// write them; a tag must be safe to leak) and this fails with `EIO`.
    pub(crate) fn run(self) -> Result<KVVec<(Option<NewPage>, T)>> {
        // Nothing to copy: nothing to take the engine for.
        if self.ops.is_empty() {
            return Ok(KVVec::new());
        }
        // Allocated first: once the copies are made, nothing may fail.
        let mut out = KVVec::with_capacity(self.ops.len(), GFP_KERNEL)?;
        let by_engine = self.pool.engine().is_some_and(|e| e.usable()) && engine_used();
        match by_engine.then(|| self.by_engine()) {
            Some(Ok(())) => {}
            Some(Err(RunError::Lost)) => {
                core::mem::forget(self);
                return Err(EIO);
            }
            Some(Err(RunError::Failed { .. })) | None => self.by_cpu()?,
        }
        for (copy, tag) in self.ops {
            let page = match copy {
                PageCopy::Out { dst, .. } => Some(dst),
                _ => None,
            };
            out.push((page, tag), GFP_NOWAIT)?;
        }
        Ok(out)
    }

    /// Every copy by the CPU, through the BARs.
    fn by_cpu(&self) -> Result {
        // The stage of BAR to BAR copies, if there are any.
        let bar_to_bar =
            |c: &PageCopy<'_>| matches!(c, PageCopy::Within { .. } | PageCopy::Peer { .. });
        let mut staged = match self.ops.iter().any(|(c, _)| bar_to_bar(c)) {
            true => Some(KBox::new([0u8; PAGE_SIZE], GFP_KERNEL)?),
            false => None,
        };
        for (copy, _) in &self.ops {
            match copy {
                PageCopy::Within { from, to, nr } => {
                    let stage = staged.as_mut().ok_or(ENOMEM)?;
                    for k in 0..*nr {
                        let bar = self.pool.bar()?;
                        bar.copy_from_bar(to + k * PAGE_SIZE, &bar, from + k * PAGE_SIZE, stage)?;
                    }
                }
                PageCopy::Peer { src, off, nr } => {
                    let stage = staged.as_mut().ok_or(ENOMEM)?;
                    for k in 0..*nr {
                        let (p, poff) =
                            self.pool.locate(src.nth(k).ok_or(EINVAL)?).ok_or(EINVAL)?;
                        self.pool.bar()?.copy_from_bar(
                            off + k * PAGE_SIZE,
                            &*p.bar()?,
                            poff,
                            stage,
                        )?;
                    }
                }
                PageCopy::In { src, off, nr } => {
                    for k in 0..*nr {
                        let page = src.nth(k).ok_or(EINVAL)?;
                        self.pool.bar()?.copy_from_page(off + k * PAGE_SIZE, page)?;
                    }
                }
                PageCopy::Zero { off, nr } => {
                    for k in 0..*nr {
                        self.pool.bar()?.clear_page(off + k * PAGE_SIZE)?;
                    }
                }
                PageCopy::Out {
                    owner,
                    off,
                    dst,
                    nr,
                } => owner.copy_to_folio(*off, dst, *nr)?,
            }
        }
        Ok(())
    }

    /// Pages the copies read from peers.
    fn peer_pages(&self) -> usize {
        self.ops
            .iter()
            .map(|(c, _)| match c {
                PageCopy::Peer { nr, .. } => *nr,
                _ => 0,
            })
            .sum()
    }

    /// Any error, before the engine ran: the CPU copies instead.
    fn failed<E>(_: E) -> RunError {
        RunError::Failed { code: 0, addr: 0 }
    }

    /// The copies into and out of the pool's VRAM by its copy engine,
    /// from a peer's VRAM included; those out of a peer's VRAM into system
    /// RAM, by the CPU. [`RunError::Failed`] if any part
    /// failed with the engine idle (the step is then copied again by the
    /// CPU); [`RunError::Lost`] if the engine may still touch what it was
    /// given (its mappings are then kept for good).
    fn by_engine(&self) -> Result<(), RunError> {
        let engine = self
            .pool
            .engine()
            .ok_or(RunError::Failed { code: 0, addr: 0 })?;
        // Allocated before the engine is taken: nothing is, while it is.
        let mut cmds: KVVec<Command> =
            KVVec::with_capacity(self.pages + 1, GFP_KERNEL).map_err(Self::failed)?;
        let room = KVVec::with_capacity(self.pages, GFP_KERNEL).map_err(Self::failed)?;
        let peer_room =
            KVVec::with_capacity(self.peer_pages(), GFP_KERNEL).map_err(Self::failed)?;
        let reader_room =
            KVVec::with_capacity(self.peer_pages(), GFP_KERNEL).map_err(Self::failed)?;
        let mut session = engine.session().map_err(Self::failed)?;
        // A sealed pool's VRAM is the teardown's alone (`orphans.rs`,
        // which waits for a session under way before it reads it).
        if self.pool.is_sealed() {
            return Err(RunError::Failed { code: 0, addr: 0 });
        }
        let (dev, mut runner) = session.parts();
        let mut maps: KVVec<DeviceDma<'_>> = room;
        let mut peers: KVVec<PeerMap<'_>> = peer_room;
        let mut readers: KVVec<P2pReader<'p>> = reader_room;
        let mut p2p = 0u64;
        if inject_failure() {
            cmds.push(Command::malformed(), GFP_NOWAIT)
                .map_err(Self::failed)?;
        }
        let mut add = |c: Command| -> Result {
            match cmds
                .last_mut()
                .and_then(|last| last.merge(&c).map(|m| (last, m)))
            {
                Some((last, m)) => *last = m,
                None => cmds.push(c, GFP_NOWAIT)?,
            }
            Ok(())
        };
        let mut queue = || -> Result {
            for (copy, _) in &self.ops {
                match copy {
                    PageCopy::In { src, off, nr } => {
                        for k in 0..*nr {
                            let page = src.nth(k).ok_or(EINVAL)?;
                            let map =
                                DeviceDma::map(dev, page, Direction::ToDevice).ok_or(ENOMEM)?;
                            add(Command::to_vram(map.addr(), off + k * PAGE_SIZE, PAGE_SIZE))?;
                            maps.push(map, GFP_NOWAIT)?;
                        }
                    }
                    PageCopy::Peer { src, off, nr } => {
                        for k in 0..*nr {
                            let page = src.nth(k).ok_or(EINVAL)?;
                            let (p, _) = self.pool.locate(page).ok_or(EINVAL)?;
                            // The peer's seal waits for this run to end.
                            readers.push(p.p2p_reader()?, GFP_NOWAIT)?;
                            let route = self.pool.peer_route(page, dev)?;
                            let map = PeerMap::map(dev, route).ok_or(ENOMEM)?;
                            add(Command::to_vram(map.addr(), off + k * PAGE_SIZE, PAGE_SIZE))?;
                            peers.push(map, GFP_NOWAIT)?;
                            p2p += PAGE_SIZE as u64;
                        }
                    }
                    PageCopy::Within { from, to, nr } => {
                        add(Command::within_vram(*from, *to, nr * PAGE_SIZE))?
                    }
                    PageCopy::Zero { off, nr } => add(Command::zero_vram(*off, nr * PAGE_SIZE))?,
                    PageCopy::Out {
                        owner,
                        off,
                        dst,
                        nr,
                    } if self.pool.is(owner) => {
                        for k in 0..*nr {
                            let page = dst.page().nth(k).ok_or(EINVAL)?;
                            let map =
                                DeviceDma::map(dev, page, Direction::FromDevice).ok_or(ENOMEM)?;
                            add(Command::from_vram(
                                off + k * PAGE_SIZE,
                                map.addr(),
                                PAGE_SIZE,
                            ))?;
                            maps.push(map, GFP_NOWAIT)?;
                        }
                    }
                    PageCopy::Out {
                        owner,
                        off,
                        dst,
                        nr,
                    } => owner.copy_to_folio(*off, dst, *nr)?,
                }
            }
            Ok(())
        };
        // Nothing was submitted yet: the mappings made go.
        queue().map_err(Self::failed)?;
        // SAFETY: every DMA address in `cmds` is a mapping of `maps` (a
        // system page of the step: a source the migration holds, or a
        // destination only the step has) or of `peers` (a peer's device
        // page the migration holds, its pool unsealed while `readers`
        // count this run), and every VRAM range a page of the step's (a
        // destination from the batch, or a source the migration holds), all
        // until the run ends; on `Lost` the mappings are forgotten below and
        // the caller forgets the pages.
        let r = unsafe { runner.run(&cmds) };
        match r {
            Ok(()) => {
                engine.stats.bytes_p2p.add(p2p, Relaxed);
            }
            Err(RunError::Lost) => {
                core::mem::forget(maps);
                core::mem::forget(peers);
                // A peer that seals reads its VRAM as it is then: a read
                // by a lost engine lands in pages the step leaks.
                drop(readers);
            }
            Err(RunError::Failed { .. }) => {}
        }
        // Otherwise the mappings go once the engine is done with them
        // (`run` returns with it done or stopped), with the engine still
        // held; a bounce buffer is copied into its page here.
        r
    }
}
