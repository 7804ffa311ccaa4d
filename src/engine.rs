// SPDX-License-Identifier: GPL-2.0

//! The emulated GPU engine: runs a job over a process's virtual addresses as
//! a device would.
//!
//! A job runs in windows of up to 2 MiB (a block of its destination). A
//! window whose every page has an entry in the VM's device page table
//! (`crate::mm::devpt`, kept across jobs and zapped by the mirror's
//! invalidations) with the access the job needs runs straight from it:
//! no walk, no mapping (`pt_hits`). Any other window faults
//! (`pt_faults`): it raises faults for the spans it lacks, and for those
//! of the windows after it, on the device's fault queue
//! (`crate::mm::faultq`), waits while the device's fault handler
//! (`crate::fault`) services them through [`service::JobService`] (a walk of what
//! the process maps, every page bound), and replays from the table
//! (`pt_replays`). The entries stay until the mm changes them where the
//! job's ranges keep their pages ([`Engine::binding`]: its own memory's
//! pages, and the pages of ranges whose access policy is "in place", not
//! read-mostly ones: their jobs read replicas) and elsewhere (a page used
//! in place because migrating it failed, or because the job asked to run
//! in place; not a read-mostly range's page outside this device's memory,
//! which gets no entry: a window that meets one is serviced in the job's
//! context). Those elsewhere are [`Life::Job`] entries: a later job that
//! runs in place uses them as they are, with no placement pass (unless the
//! access counters have a block of its range due to move here), but any
//! other job's placement pass looks at their pages first, as if they were
//! not mapped, and a move zaps them (see `crate::drm::ioctl`'s `mapped`).
//!
//! What the handler leaves to the job (a page not present or without the
//! access, a busy mmap lock, a page it could not bind), a window that
//! reads replicas, and one that keeps being zapped before its replay, is
//! serviced in the job's own context: [`DevMirror::fault`] (`hmm_range_fault`
//! with the device's owner, so that its own device pages come back as
//! they are, faulting the others in) under the VM's mirror sequence. Where
//! msvm-gpu runs the job, what the handler left is then bound into the
//! VM's table, page by page, and the device runs the window
//! (`service.rs`'s `serve_window`); elsewhere, for windows that read
//! replicas, and for what that leaves, a table of the window's own of
//! device-visible addresses (a VRAM offset for a page in this device's
//! memory, a DMA address for a page in system RAM, a bus address for a
//! peer's page) is run by the CPU, and the kept entries bound.
//!
//! The executor sees device addresses only; the address decoder turns a
//! device address into a CPU access (the BAR mapping for VRAM; for a DMA
//! address, the page that the mapping maps, like an IOMMU walk). Counters
//! record the bytes read and written per memory kind.
//!
//! Before the job runs, its placement pass (`crate::migrate::place`) moves
//! the pages of its ranges as their attributes say: by default to this
//! device, like a GPU page fault (migrate-on-access); pages that cannot move
//! are used in place. With [`Job::in_place`] or the range's "in place"
//! access policy, pages are used where they are: system RAM by DMA, a peer
//! of the owner group over P2P; pages of a device out of reach are faulted
//! to system RAM by `hmm_range_fault`. (With [`Job::in_place`] only, the
//! 2 MiB blocks whose access counters are due move here first:
//! `crate::access`.)
//!
//! # Lock order
//!
//! A job waits for its raised faults holding its file's VM lock only (no
//! mmap or mirror lock); the handler takes the job's leaf spare, then the
//! mirror's lock, and only tries the mmap lock.
//! `mmap_lock` (read, only around `hmm_range_fault` and migration) is never
//! held together with the mirror's lock ([`DevMirror::lock`]); invalidations
//! take it from under the mm core's locks, so the job holds it only while
//! it touches pages, and takes nothing inside it but the pool's `atomics`
//! mutex, its replica store (`crate::vram::ReplicaWindow`), and, for a
//! window msvm-gpu runs (`device.rs`), or a pipeline of windows
//! (`pipeline.rs`, which lets both go when another waits for either), its
//! MMU's locks (`crate::gpu::mmu`) and its job engine's ring, then
//! `atomics`. A job that
//! reads replicas enters their SRCU read-side section under the lock and
//! leaves it after; what waits for their grace period
//! (`VramPool::replica_room`) is called with nothing held.

use kernel::{
    mm::MmWithUser,
    prelude::*,
    sync::{atomic::Relaxed, Arc},
};

use crate::fault::FaultHandler;
use crate::generation;
use crate::migrate::{check_job_vmas, read_only_anon};
use crate::mm::{
    cancel::Cancel,
    devpt::{Bind, Life, Spare},
    devtables::DevMirror,
    hmm::{HmmPfn, Pages},
    page::{PageRef, BLOCK_SIZE},
    pagemap::PAGE_SIZE,
    trace,
};
use crate::process::Process;
use crate::vram::{Clock, Epoch, JobPhase, VramPool};

mod ahead;
mod device;
mod exec;
mod job;
mod keep;
mod pipeline;
mod service;
mod table;
mod warm;

pub(crate) use ahead::bind_ahead;
pub(crate) use job::{Done, Job, Op, Pattern};
pub(crate) use keep::{Keep, Replicate};
pub(crate) use pipeline::{pipelining, set_pipelining};
use service::{later, LOOKAHEAD};
use table::{
    fnv1a, window_len, Decode, DevAddr, PageTable, PeerPage, TableView, Target, WindowPages,
    FNV_OFFSET,
};

/// Checks that the job's ranges are mapped (`EFAULT`) with the access it
/// needs (`EACCES`), in VMAs a device may reach (`EFAULT` otherwise: I/O,
/// PFN and secretmem mappings).
pub(crate) fn check(mm: &MmWithUser, job: &Job) -> Result {
    let write = !matches!(job.op, Op::Checksum);
    let guard = mm.mmap_read_lock();
    check_job_vmas(&guard, job.addr, job.addr + job.len, write)?;
    if let Op::Copy { src } = job.op {
        check_job_vmas(&guard, src, src + job.len, false)?;
    }
    Ok(())
}

/// The executor of one device.
pub(crate) struct Engine<'p> {
    pool: &'p VramPool,
    dev: &'p kernel::device::Device<kernel::device::Bound>,
    /// The device's fault handler.
    faults: &'p FaultHandler,
    buf: KBox<[u8; PAGE_SIZE]>,
    /// A last-level table in the device's format, for a window the device
    /// runs (`device.rs`).
    leaf: KBox<[u64; device::LEAF_ENTRIES]>,
    /// The request the jobs run for: the uses of device memory they record
    /// for the eviction policy.
    epoch: Epoch,
    /// Which of the job's ranges it reads through replicas.
    replicate: Replicate,
    /// The placement policies' state of the job's process.
    process: Arc<Process>,
    /// What a fault binds into the VM's device page table.
    keep: Keep,
    /// The job offsets of the windows after the missing one whose faults
    /// its last raise serviced ahead: each counts as a fault, and a replay,
    /// when its turn comes.
    ahead: [Option<usize>; LOOKAHEAD],
    /// The job offsets of the windows whose faults the last raise did not
    /// service: they are serviced in the job's context at their turn.
    unserved: [Option<usize>; LOOKAHEAD],
    /// The window runs on the CPU, its fault counted: the rest of one
    /// whose fault the device was cancelled on and that the device cannot
    /// take (its entries not writable into its tables) or the job's
    /// context could not service for it, or one so serviced that the
    /// device did not run after all.
    cpu_only: bool,
    /// The rest of a window the device faulted on, for the CPU after the
    /// handler serviced its fault: its run from the table is the replay.
    replayed: bool,
    /// The window's faults were serviced in the job's context: it runs on
    /// the device (counted as that fault, not a replay), and what it is
    /// cancelled on again is the CPU's.
    resumed: bool,
    /// The window a pipeline does not start at (job offset): the one
    /// after a pipeline that yielded (it runs alone, its lock held for it
    /// only), or one whose entries a pipeline could not write.
    unpipelined: Option<usize>,
    /// The window whose entries a pipeline could not write (no table page
    /// free, an ATOMIC_ADD over a peer's page): not for the device.
    not_here: Option<usize>,
}

/// Times a window raises its faults before it is serviced in the job's
/// context instead (an invalidation kept zapping its entries before the
/// replay); and times that service walks and binds a window for the
/// device before it leaves it to the CPU.
const MAX_REPLAYS: usize = 4;

impl<'p> Engine<'p> {
    pub(crate) fn new(
        (pool, dev, faults): (
            &'p VramPool,
            &'p kernel::device::Device<kernel::device::Bound>,
            &'p FaultHandler,
        ),
        epoch: Epoch,
        (replicate, process): (Replicate, Arc<Process>),
        keep: Keep,
    ) -> Result<Self> {
        Ok(Self {
            pool,
            dev,
            faults,
            buf: KBox::new([0; PAGE_SIZE], GFP_KERNEL)?,
            leaf: KBox::new([0; device::LEAF_ENTRIES], GFP_KERNEL)?,
            epoch,
            replicate,
            process,
            keep,
            ahead: [None; LOOKAHEAD],
            unserved: [None; LOOKAHEAD],
            cpu_only: false,
            replayed: false,
            resumed: false,
            unpipelined: None,
            not_here: None,
        })
    }

    /// How a fault binds the page at `addr` into the VM's table, if it
    /// does (see the module's documentation).
    fn binding<'g>(&self, addr: usize, page: PageRef<'g>) -> Option<Bind<'g>> {
        let kept = || Keep::has(&self.keep.remote, addr);
        match self.pool.locate(page) {
            Some((pool, _)) if self.pool.is(pool) => {
                Keep::has(&self.keep.own, addr).then_some(Bind::Own)
            }
            Some(_) if kept() => self.pool.peer_route(page, self.dev).ok().map(Bind::Peer),
            Some(_) => None,
            None if kept() && !page.is_device_private() => Some(Bind::Dma),
            None => None,
        }
    }

    /// The kept entry of the page at `addr`, if [`Self::binding`] keeps
    /// it.
    fn kept<'g>(&self, addr: usize, page: PageRef<'g>) -> Option<(Bind<'g>, Life)> {
        self.binding(addr, page).map(|b| (b, Life::Kept))
    }

    /// The entry a fault the handler services writes for the page at
    /// `addr`: kept where [`Self::binding`] keeps it, a [`Life::Job`] one
    /// otherwise (a job's placement pass looks at its page first).
    fn entry<'g>(&self, addr: usize, page: PageRef<'g>) -> Option<(Bind<'g>, Life)> {
        if let Some(b) = self.binding(addr, page) {
            return Some((b, Life::Kept));
        }
        if Keep::has(&self.keep.replicated, addr) {
            return None;
        }
        let how = match self.pool.locate(page) {
            Some((pool, _)) if self.pool.is(pool) => Bind::Own,
            Some(_) => Bind::Peer(self.pool.peer_route(page, self.dev).ok()?),
            None if page.is_device_private() || page.is_secretmem() => return None,
            None => Bind::Dma,
        };
        Some((how, Life::Job))
    }

    /// Runs `job` on the process behind `mm`, mirrored by `mirror`. The
    /// caller has [`check`]ed its ranges (before its placement pass); a
    /// mapping changed since then makes the walk fail with `EFAULT` or
    /// `EACCES`.
    pub(crate) fn run(
        &mut self,
        mm: &MmWithUser,
        mirror: &DevMirror,
        job: &Job,
        clock: &mut Clock,
        cancel: &Cancel<'_>,
    ) -> Result<Done> {
        let write = !matches!(job.op, Op::Checksum);
        let mut done = Done::default();
        if let Op::Checksum = job.op {
            done.result = FNV_OFFSET;
        }
        self.ahead = [None; LOOKAHEAD];
        self.unserved = [None; LOOKAHEAD];
        self.unpipelined = None;
        self.not_here = None;
        let mut off = 0;
        while off < job.len {
            // Between windows (a warm one checks nothing else).
            cancel.check()?;
            // Warm windows in a row, on the device, each queued behind the
            // one before.
            let ran = self.pipeline((mirror, cancel), job, off, write, &mut done)?;
            if ran > 0 {
                clock.lap_job(JobPhase::Exec);
                off += ran;
                continue;
            }
            // A window ends at a 2 MiB block boundary of the destination.
            let n = window_len(job, off);
            self.window(mm, mirror, job, (off, n), write, &mut done, clock, cancel)?;
            off += n;
        }
        Ok(done)
    }

    /// Runs bytes `[off, off + n)` of the job, which lie in one window of
    /// the destination (a source may straddle two).
    #[allow(clippy::too_many_arguments)]
    fn window(
        &mut self,
        // The mirrored mm, with users while the job faults.
        mm: &MmWithUser,
        mirror: &DevMirror,
        job: &Job,
        (off, n): (usize, usize),
        write: bool,
        done: &mut Done,
        clock: &mut Clock,
        cancel: &Cancel<'_>,
    ) -> Result {
        let w = WindowPages::new(job, (off, n));
        let WindowPages {
            dst,
            dst_first,
            dst_pages,
            src,
            src_first,
            src_pages,
        } = w;
        let owner = self.pool.owner();
        // CAST: an address, used as a key only.
        let key = mm.as_raw() as usize;
        // The table that may read replicas (the destination's or the
        // source's), if its pages lie in one 2 MiB block.
        let read_only = match job.op {
            Op::Checksum => self.replicate.dst.then_some((dst_first, dst_pages, true)),
            Op::Copy { .. } => self.replicate.src.then_some((src_first, src_pages, false)),
            _ => None,
        };
        let replica_block = read_only
            .filter(|&(first, pages, _)| {
                first / BLOCK_SIZE == (first + pages * PAGE_SIZE - 1) / BLOCK_SIZE
            })
            .map(|(first, pages, dst)| (first, first + pages * PAGE_SIZE, dst));
        // Whether `[first, end)` lies in mappings no one writes without an
        // invalidation first (checked before the walk, to take no room for
        // a writable range, and after it, to make replicas).
        let sealed = |first: usize, end: usize| read_only_anon(&mm.mmap_read_lock(), first, end);
        // Without a fault, if the VM's table maps the window; else the
        // leaves the fault's binding needs, allocated before the lock.
        // A window that reads replicas (the device's own copies, not the
        // process's pages) is serviced here, in the job's context, as is
        // one whose raised faults did not make it run (a copy-on-write
        // break, an invalidation that kept zapping it), and one that meets
        // a read-mostly range (whose pages elsewhere a fault does not bind:
        // the handler would only give it back).
        let inline = self.replicate.dst
            || self.replicate.src
            || self.keep.meets_replicated(dst_first, dst_pages)
            || self.keep.meets_replicated(src_first, src_pages);
        // Where the device runs jobs, it runs the window, faulting as it
        // goes. What the fault handler leaves to the job is serviced in the
        // job's context, then the device runs the window (its rest, after a
        // cancelled fault: see below); what still lacks entries the CPU
        // runs. A window whose faults a raise before gave back is serviced
        // so before the device starts it.
        let mut device =
            self.not_here != Some(off) && !inline && !self.cpu_only && self.may_run(job, (w, n));
        if device && self.unserved.contains(&Some(off)) && !self.resumed {
            device = self.serve_window((mm, mirror, cancel), job, (off, n), write)?;
            clock.lap_job(JobPhase::Walk);
            if device {
                // Its fault (the CPU's path counts its own); the device's
                // run counts nothing more.
                self.pool.stats.pt_faults.add(1, Relaxed);
            }
            self.resumed = device;
        }
        if device {
            let on = self.on_device((mm, mirror, cancel), (job, w, off, n), write, done);
            clock.lap_job(JobPhase::Exec);
            let resumed = core::mem::replace(&mut self.resumed, false);
            match on? {
                device::OnDevice::Ran => return Ok(()),
                // Serviced, and still not for the device (no context or
                // table page free): the CPU's, its fault counted.
                device::OnDevice::NotHere if resumed => {
                    self.cpu_only = true;
                    let r = self.window(mm, mirror, job, (off, n), write, done, clock, cancel);
                    self.cpu_only = false;
                    return r;
                }
                // Its rest: the faults the device was cancelled on (the
                // handler left them to the job) serviced here, in the job's
                // context, with the device free for others meanwhile (it
                // may wait on the process: a first touch, a copy-on-write
                // break, userfaultfd), then on the device again, from the
                // `done` it reported; once only, and on the CPU if its
                // pages did not all get entries.
                device::OnDevice::Part(k, to) if k < n => {
                    let rest = (off + k, n - k);
                    // The handler's service, for the CPU: its run is the
                    // replay.
                    self.replayed = matches!(to, device::Rest::Cpu { replay: true });
                    let again = to == device::Rest::Device
                        && !resumed
                        && self.may_run(job, (WindowPages::new(job, rest), n - k))
                        && self.serve_window((mm, mirror, cancel), job, rest, write)?;
                    clock.lap_job(JobPhase::Walk);
                    self.resumed = again;
                    self.cpu_only = !again;
                    let r = self.window(mm, mirror, job, rest, write, done, clock, cancel);
                    self.resumed = false;
                    self.cpu_only = false;
                    self.replayed = false;
                    return r;
                }
                device::OnDevice::Part(..) => return Ok(()),
                device::OnDevice::NotHere => {}
            }
        }
        // Its fault is counted already: the rest of a window the device
        // faulted on and was cancelled on (not writable into the device's
        // tables, after the handler serviced its fault, `replayed`, or with
        // nothing to service; or left to the job's context, which could
        // not service it for the device, or whose resumed run was
        // cancelled again), or a window serviced for the device that it
        // did not run after all.
        let counted = self.cpu_only || self.resumed;
        let mut rounds = 0;
        let missing = loop {
            let faults = {
                let guard = mirror.lock();
                let table = guard.table();
                if let Some(r) = self.warm(table, (job, w, n), write, done) {
                    drop(guard);
                    let s = &self.pool.stats;
                    // (Its fault counted: see `counted`; a replay if the
                    // handler serviced it, `replayed`.)
                    if !counted {
                        let ahead = rounds == 0 && self.ahead.contains(&Some(off));
                        if ahead {
                            s.pt_faults.add(1, Relaxed);
                        }
                        if rounds == 0 && !ahead {
                            s.pt_hits.add(1, Relaxed);
                        } else {
                            s.pt_replays.add(1, Relaxed);
                        }
                    } else if self.replayed {
                        s.pt_replays.add(1, Relaxed);
                    }
                    clock.lap_job(JobPhase::Exec);
                    return r;
                }
                // (The rest of a window the device faulted on: counted.)
                if rounds == 0 && !counted {
                    self.pool.stats.pt_faults.add(1, Relaxed);
                }
                // The device's cancelled fault was the handler's already.
                if inline || counted || rounds >= MAX_REPLAYS || self.unserved.contains(&Some(off))
                {
                    break table.missing_leaves(dst_first, dst_pages)
                        + table.missing_leaves(src_first, src_pages);
                }
                self.faults_from(table, job, off)
            };
            rounds += 1;
            // The later windows this raise services ahead, and those an
            // earlier one did.
            let raised = faults.windows.iter().flatten().map(|&(o, ..)| o);
            self.ahead = later(
                off,
                Iterator::chain(raised, self.ahead.iter().flatten().copied()),
            );
            let replay = self.raise(mm, mirror, &faults)?;
            clock.lap_job(JobPhase::Walk);
            if !replay {
                rounds = MAX_REPLAYS;
            }
            cancel.check()?;
        };
        let mut spare = Spare::new(missing)?;
        let mut dst_pfns = KVec::from_elem(HmmPfn::NONE, dst_pages, GFP_KERNEL)?;
        let mut src_pfns = KVec::from_elem(HmmPfn::NONE, src_pages, GFP_KERNEL)?;
        let mut cow_breaks = 0;
        loop {
            cancel.check()?;
            // Read before the walk: an invalidation after it makes a
            // replica recorded with it stale (see `crate::generation`).
            let mut charge = None;
            let replicas = replica_block
                .filter(|&(first, end, _)| sealed(first, end))
                .map(|(first, end, dst)| {
                    let block = first & !(BLOCK_SIZE - 1);
                    (
                        block,
                        (first, end),
                        dst,
                        generation::current(&self.process, block),
                    )
                })
                .filter(|&(block, ..)| {
                    charge = self.pool.replica_room(key, block);
                    charge.is_some()
                });
            // The block's charge, for the window that takes it.
            let charge = core::cell::Cell::new(charge);
            let dst_walk = match mirror.fault(mm, dst_first, &mut dst_pfns, write, owner, cancel) {
                Err(e) if e == EBUSY => continue,
                // The mapping changed since the check: no access.
                Err(e) if e == EPERM => return Err(EACCES),
                r => r?,
            };
            let src_walk = if src.is_some() {
                match mirror.fault(mm, src_first, &mut src_pfns, false, owner, cancel) {
                    Err(e) if e == EBUSY => continue,
                    r => Some(r?),
                }
            } else {
                None
            };
            // Replicas only of pages no one writes without an invalidation
            // first: a change of the VMAs after the walk makes it stale.
            let replicas = replicas.filter(|&(_, (first, end), ..)| sealed(first, end));
            clock.lap_job(JobPhase::Walk);
            // The tables' room, made before the lock (nothing below
            // allocates under it: see `page_table`); they go (unmapping
            // their pages) before the guard does.
            let mut guard;
            let mut dst_pt = PageTable::with_capacity(dst_pages)?;
            let mut src_pt = PageTable::with_capacity(src_pages)?;
            guard = mirror.lock();
            let dst_found = match guard.pages(&dst_walk) {
                Err(e) if e == EAGAIN => continue,
                r => r?,
            };
            let src_found = match src_walk.as_ref().map(|w| guard.pages(w)) {
                None => Pages::empty(),
                Some(Err(e)) if e == EAGAIN => continue,
                Some(r) => r?,
            };
            // A device page mapped read-only (shared copy-on-write after a
            // fork) comes back as it is even when writing: `hmm_range_fault`
            // reports its owner's device pages without faulting them. Move
            // the window's pages to system RAM, where the write fault copies
            // them (only the job's own range: next to it may be anything).
            // The pages are looked at under the lock, while the sequence
            // holds them: unlocked, a page could move and its chunk's memmap
            // be removed meanwhile.
            if write && dst_found.any_device_read_only() {
                drop((dst_pt, src_pt));
                drop(guard);
                cow_breaks += 1;
                if cow_breaks > 8 {
                    return Err(EAGAIN);
                }
                crate::migrate::to_system(mm, dst_first, dst_pages * PAGE_SIZE, cancel)?;
                clock.lap_job(JobPhase::Place);
                continue;
            }
            // Met under a valid sequence: eviction follows them here.
            self.pool.renew(mm, &dst_found);
            self.pool.renew(mm, &src_found);
            // The pages stay as found while `guard` is held. Replicas are
            // used (and made) only if the block's generation is still the
            // one read before the walk.
            let replicas = replicas
                .filter(|&(block, .., g)| generation::current(&self.process, block) == g)
                .map(|(block, _, dst, g)| (block, dst, g));
            // Replicas the job reads are not given to another process's
            // block before this ends (after the tables and the lock).
            let _reader = replicas.map(|_| self.pool.replica_reader());
            // The store is held while the replicated table is made.
            let window = |dst: bool| {
                replicas.filter(|r| r.1 == dst).and_then(|(block, _, g)| {
                    let c = charge.take()?;
                    self.pool.replica_window(key, block, g, c)
                })
            };
            let bound = self
                .page_table(&dst_found, dst_first, &mut dst_pt, window(true).as_mut())
                .and_then(|()| {
                    let mut w = window(false);
                    self.page_table(&src_found, src_first, &mut src_pt, w.as_mut())
                });
            clock.lap_job(JobPhase::Bind);
            let res = bound.and_then(|()| {
                self.execute(
                    job.op,
                    dst - job.addr,
                    &dst_pt,
                    dst - dst_first,
                    &src_pt,
                    src.map_or(0, |s| s - src_first),
                    n,
                    done,
                )
            });
            clock.lap_job(JobPhase::Exec);
            if res.is_ok() {
                dst_pt.tally(done);
                src_pt.tally(done);
            }
            // What the job may have written by DMA is marked so (a clean
            // writable page is dropped by reclaim); then the DMA and P2P
            // mappings go, while the pages are still valid.
            if write {
                dst_pt.dma.iter().for_each(|m| m.sys().written());
            }
            drop((dst_pt, src_pt));
            // The fault's entries that stay valid until the mm changes
            // them go into the VM's table (the walks are still valid: the
            // lock was held throughout).
            // (A bind that fails only binds less: the job's result stands.)
            let dev = self.dev;
            let mut bound = guard
                .bind(&dst_walk, dev, &mut spare, |a, p| self.kept(a, p))
                .unwrap_or(0);
            if let Some(w) = &src_walk {
                bound += guard
                    .bind(w, dev, &mut spare, |a, p| self.kept(a, p))
                    .unwrap_or(0);
            }
            self.pool.stats.pt_bound.add(bound, Relaxed);
            drop(guard);
            clock.lap_job(JobPhase::Bind);
            trace::pt_fault(self.pool.index(), dst_first, dst_pages, bound, &res);
            return res;
        }
    }
}
