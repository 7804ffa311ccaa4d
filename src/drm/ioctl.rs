// SPDX-License-Identifier: GPL-2.0

//! The ioctl handlers, methods of [`File`] (the table that names them is in
//! `driver.rs`): argument decoding and validation, errno mapping.
//!
//! Every handler first turns the raw uAPI struct into a checked request (pure
//! code, tested by KUnit in `decode.rs`), then acts on it. Errors, as documented in
//! `include/uapi/drm/msvm_drm.h` and `Documentation/uapi.rst`:
//!
//! - `EINVAL`: non-zero flags, padding or reserved fields; a device index
//!   beyond `MSVM_MAX_DEVICES`; a peer element size other than ours;
//! - `ENOENT`: no device has the index asked for;
//! - `EFAULT`: the peer array is not writable.
//!
//! The errors of the VM and MIGRATE ioctls are listed with their structs in
//! the header.

use kernel::{
    drm,
    num::casts::FromSafeCast,
    prelude::*,
    sync::atomic::Relaxed,
    time::{Instant, Monotonic},
    uaccess::{UserPtr, UserSlice},
};

use crate::access;
use crate::device::Gpu;
use crate::drm::driver::DEPARTURES;
use crate::engine::{Engine, Keep, Op, Replicate};
use crate::migrate::{place, prefetch as move_to, Direction, Memo, Outcome, Target};
use crate::mm::abi::{
    drm_msvm_exec, drm_msvm_migrate, drm_msvm_prefetch, drm_msvm_query, drm_msvm_residency,
    drm_msvm_set_attr, drm_msvm_stats, drm_msvm_vm_create, drm_msvm_vm_destroy,
    MSVM_ACCESS_IN_PLACE, MSVM_ACCESS_MIGRATE, MSVM_ATTR_ACCESS_OFF, MSVM_ATTR_MIXED,
    MSVM_ATTR_READ_MOSTLY, MSVM_ATTR_THRASH_OFF, MSVM_UAPI_VERSION,
};
use crate::mm::{
    cancel::{lock_killable, Cancel},
    devtables::DevMirror,
    page::BLOCK_SIZE,
    pagemap::PAGE_SIZE,
    trace,
};
use crate::placement::{Access, Location, Placement, Span, MAX_RANGES};
use crate::process::Process;
use crate::registry;
use crate::svm::Vm;
use crate::topology::MAX_DEVICES;
use crate::vram::{Clock, Epoch, JobPhase, Use};

use super::decode::{
    all_zero, decode_exec, decode_location, encode_location, encode_peer, page_range, AttrRequest,
    MigrateRequest, QueryRequest, PEER_SIZE,
};
use super::driver::MsvmDevice;
use super::file::File;

/// Copies a move's counters into the MIGRATE or PREFETCH argument (they
/// have the same output fields).
macro_rules! put_outcome {
    ($arg:expr, $out:expr) => {{
        let (arg, out) = ($arg, $out);
        arg.moved = out.moved;
        arg.already = out.already;
        arg.busy = out.busy;
        arg.no_vram = out.no_vram;
    }};
}

/// Whether the VM's device page table maps all of `[a, a + n)` (not
/// empty), writable if `write`: with its
/// [`Life::Job`](crate::mm::devpt::Life::Job) entries for a job that runs
/// `in_place`, with its kept ones only for any other (its placement pass
/// looks at the pages behind the others first). Looked at 64 MiB at a
/// time, the lock dropped between (it is the one invalidations wait for).
fn mapped(
    mirror: &DevMirror,
    (a, n): (usize, usize),
    write: bool,
    in_place: bool,
    cancel: &Cancel<'_>,
) -> Result<bool> {
    const STEP: usize = 64 << 20;
    if n == 0 {
        return Ok(false);
    }
    let (mut at, end) = (a & !(PAGE_SIZE - 1), a + n);
    while at < end {
        cancel.check()?;
        let next = (at + STEP).min(end);
        if !mirror
            .lock()
            .table()
            .covers(at, (next - at).div_ceil(PAGE_SIZE), write, in_place)
        {
            return Ok(false);
        }
        at = next;
    }
    Ok(true)
}

/// Whether the access counters of device `dev` have a block of `pieces`
/// due to move there, where a placement pass of a job in place would move
/// it ([`Placement::counted_for`]).
fn due(p: &Process, dev: usize, pieces: &[Span], cancel: &Cancel<'_>) -> Result<bool> {
    if !access::enabled() {
        return Ok(false);
    }
    for s in pieces.iter().filter(|s| s.placement.counted_for(dev)) {
        let (first, last) = (s.start / BLOCK_SIZE, (s.end - 1) / BLOCK_SIZE);
        for b in first..=last {
            cancel.check()?;
            if access::due(p, dev, b * BLOCK_SIZE) {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// `spans`, sorted and merged where they touch or overlap (COPY's two
/// ranges may).
fn disjoint(mut spans: KVec<(usize, usize)>) -> Result<KVec<(usize, usize)>> {
    spans.sort_unstable();
    let mut out: KVec<(usize, usize)> = KVec::with_capacity(spans.len(), GFP_KERNEL)?;
    for (start, end) in spans {
        match out.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => out.push((start, end), GFP_KERNEL)?,
        }
    }
    Ok(out)
}

/// Runs `f` on the file's VM and its process's mm, if the caller is that
/// process: `ENOENT` without a VM, `EPERM`/`ESRCH` as
/// [`Vm::mm_for_current`] says, `EINTR` if the caller is killed while
/// another ioctl of the file holds the VM.
fn with_vm<R>(
    file: &drm::File<File>,
    f: impl FnOnce(&mut Vm, &kernel::mm::MmWithUser) -> Result<R>,
) -> Result<R> {
    let inner = file.inner();
    let mut guard = lock_killable(&inner.vm)?;
    let vm: &mut Vm = (*guard).as_mut().ok_or(ENOENT)?;
    let mm = vm.mm_for_current()?;
    f(vm, &mm)
}

impl File {
    /// `DRM_IOCTL_MSVM_QUERY`: describes a device and how it reaches the others.
    pub(crate) fn query(
        _dev: &MsvmDevice<drm::Registered>,
        gpu: &Gpu<'_>,
        arg: &mut drm_msvm_query,
        _file: &drm::File<File>,
    ) -> Result<u32> {
        let req = QueryRequest::decode(arg)?;
        let index = req.device.unwrap_or(gpu.index);

        // Snapshot under the lock; copy to user space after dropping it.
        let mut records = [0u8; MAX_DEVICES * PEER_SIZE];
        let (pci, vram_size, num_devices, num_peers, group) = {
            let topo = registry::devices();
            let node = topo.get(index).ok_or(ENOENT)?;
            let mut n = 0;
            for peer in topo.peers(index) {
                records[n * PEER_SIZE..(n + 1) * PEER_SIZE].copy_from_slice(&encode_peer(&peer));
                n += 1;
            }
            (
                node.pci,
                node.vram_size,
                topo.len(),
                n,
                topo.group(index).unwrap_or(index),
            )
        };

        let fill = num_peers.min(req.capacity);
        if fill > 0 {
            let bytes = &records[..fill * PEER_SIZE];
            UserSlice::new(UserPtr::from_addr(req.peers_ptr), bytes.len())
                .writer()
                .write_slice(bytes)?;
        }

        arg.version = MSVM_UAPI_VERSION;
        // CAST: a present device's index, below `MAX_DEVICES` (a `u32`).
        arg.index = index as u32;
        // CAST: at most `MAX_DEVICES` (a `u32`) devices are present.
        arg.num_devices = num_devices as u32;
        arg.pci_domain = pci.domain;
        arg.pci_bdf = pci.bdf.into();
        arg.vram_size = vram_size;
        // CAST: fewer than `MAX_DEVICES` (a `u32`) peers.
        arg.num_peers = num_peers as u32;
        // CAST: a device index (the group's), below `MAX_DEVICES` (a `u32`).
        arg.owner_group = group as u32;
        Ok(0)
    }

    /// `DRM_IOCTL_MSVM_VM_CREATE`.
    pub(crate) fn vm_create(
        _dev: &MsvmDevice<drm::Registered>,
        gpu: &Gpu<'_>,
        arg: &mut drm_msvm_vm_create,
        file: &drm::File<File>,
    ) -> Result<u32> {
        all_zero(&[arg.flags.into(), arg.pad.into()], &arg.reserved)?;
        let f = file.inner();
        let mut vm = lock_killable(&f.vm)?;
        if vm.is_some() {
            return Err(EBUSY);
        }
        let new = Vm::for_current(gpu.vram().pt_tables())?;
        f.mm_key.store(new.mm_key(), Relaxed);
        *vm = Some(new);
        Ok(0)
    }

    /// `DRM_IOCTL_MSVM_VM_DESTROY`.
    pub(crate) fn vm_destroy(
        _dev: &MsvmDevice<drm::Registered>,
        _gpu: &Gpu<'_>,
        arg: &mut drm_msvm_vm_destroy,
        file: &drm::File<File>,
    ) -> Result<u32> {
        all_zero(&[arg.flags.into(), arg.pad.into()], &arg.reserved)?;
        let f = file.inner();
        let mut slot = lock_killable(&f.vm)?;
        let vm = slot.take().ok_or(ENOENT)?;
        f.mm_key.store(0, Relaxed);
        drop(slot);
        drop(vm);
        Ok(0)
    }

    /// `DRM_IOCTL_MSVM_MIGRATE`.
    pub(crate) fn migrate(
        dev: &MsvmDevice<drm::Registered>,
        gpu: &Gpu<'_>,
        arg: &mut drm_msvm_migrate,
        file: &drm::File<File>,
    ) -> Result<u32> {
        let req = MigrateRequest::decode(arg)?;
        let target = match req.dir {
            Direction::ToDevice => Target::Here,
            Direction::ToSystem => Target::System,
        };
        let cancel = Cancel::ioctl(dev, &DEPARTURES);
        let out = with_vm(file, |vm, mm| {
            move_to(
                gpu.vram(),
                mm,
                vm.mirror(),
                &target,
                req.start,
                req.len,
                Use::explicit(),
                &cancel,
            )
        })?;
        put_outcome!(arg, out);
        Ok(0)
    }

    /// `DRM_IOCTL_MSVM_SET_ATTR`.
    pub(crate) fn set_attr(
        _dev: &MsvmDevice<drm::Registered>,
        gpu: &Gpu<'_>,
        arg: &mut drm_msvm_set_attr,
        file: &drm::File<File>,
    ) -> Result<u32> {
        let mut req = AttrRequest::decode(arg, gpu.index)?;
        // The preferred device must be one this device works on in place.
        if let Location::Device(i) = req.placement.preferred {
            Target::resolve(gpu.vram(), req.placement.preferred)?;
            if i == gpu.index {
                // This device by index is what the default means.
                req.placement.preferred = Location::Default;
            }
        }
        with_vm(file, |vm, _mm| {
            vm.attrs_mut()
                .set(req.start, req.start + req.len, req.placement, MAX_RANGES)?;
            // What the device maps of the range was mapped under the old
            // attributes: its pages fault again, under the new ones.
            vm.mirror().lock().zap(req.start, req.start + req.len);
            Ok(())
        })?;
        Ok(0)
    }

    /// `DRM_IOCTL_MSVM_PREFETCH`.
    pub(crate) fn prefetch(
        dev: &MsvmDevice<drm::Registered>,
        gpu: &Gpu<'_>,
        arg: &mut drm_msvm_prefetch,
        file: &drm::File<File>,
    ) -> Result<u32> {
        all_zero(&[arg.flags.into(), arg.pad.into()], &arg.reserved)?;
        let (start, len) = page_range(arg.addr, arg.length)?;
        let loc = decode_location(arg.location, arg.device, gpu.index)?;
        if loc == Location::Default {
            return Err(EINVAL);
        }
        let target = Target::resolve(gpu.vram(), loc)?;
        let cancel = Cancel::ioctl(dev, &DEPARTURES);
        let out: Outcome = with_vm(file, |vm, mm| {
            let out = move_to(
                gpu.vram(),
                mm,
                vm.mirror(),
                &target,
                start,
                len,
                Use::explicit(),
                &cancel,
            )?;
            // To this device: its jobs then run without a fault, where the
            // range's attributes keep the pages here (elsewhere, a job's
            // placement pass moves them on).
            if target == Target::Here {
                let (pool, dev) = (gpu.vram(), gpu.device());
                // (No pieces, no memory: the moves stand.)
                let pieces = vm.attrs().pieces(start, start + len).unwrap_or_default();
                for p in pieces.iter() {
                    if p.placement.keeps_here() {
                        let span = (p.start, p.end - p.start);
                        // Binding ahead only saves faults: the moves
                        // stand whatever it meets but a fatal signal.
                        match crate::engine::bind_ahead(pool, dev, mm, vm.mirror(), span, &cancel) {
                            Err(e) if e == EINTR => return Err(e),
                            Err(_) => break,
                            Ok(_) => {}
                        }
                    }
                }
            }
            Ok(out)
        })?;
        put_outcome!(arg, out);
        Ok(0)
    }

    /// `DRM_IOCTL_MSVM_RESIDENCY`.
    pub(crate) fn residency(
        dev: &MsvmDevice<drm::Registered>,
        _gpu: &Gpu<'_>,
        arg: &mut drm_msvm_residency,
        file: &drm::File<File>,
    ) -> Result<u32> {
        all_zero(&[arg.flags.into(), arg.pad.into()], &arg.reserved)?;
        let (start, len) = page_range(arg.addr, arg.length)?;
        if u64::from_safe_cast(len) > crate::residency::MAX_LEN {
            return Err(EINVAL);
        }
        let cancel = Cancel::ioctl(dev, &DEPARTURES);
        let (r, first, mixed) = with_vm(file, |vm, mm| {
            let pieces = vm.attrs().pieces(start, start + len)?;
            let first = pieces.first().map_or(Placement::DEFAULT, |p| p.placement);
            let mixed = pieces.iter().any(|p| p.placement != first);
            let r = crate::residency::residency(mm, vm.mirror(), start, len, &cancel)?;
            Ok((r, first, mixed))
        })?;
        let (location, device) = encode_location(first.preferred);
        arg.attr_flags = if mixed { MSVM_ATTR_MIXED } else { 0 };
        if !first.thrash {
            arg.attr_flags |= MSVM_ATTR_THRASH_OFF;
        }
        if !first.counters {
            arg.attr_flags |= MSVM_ATTR_ACCESS_OFF;
        }
        if first.read_mostly {
            arg.attr_flags |= MSVM_ATTR_READ_MOSTLY;
        }
        arg.location = location;
        arg.device = device;
        arg.access = match first.access {
            Access::Migrate => MSVM_ACCESS_MIGRATE,
            Access::InPlace => MSVM_ACCESS_IN_PLACE,
        };
        arg.system = r.system;
        arg.none = r.none;
        arg.devices = r.devices;
        arg.pinned = r.pinned;
        arg.replicas = r.replicas;
        Ok(0)
    }

    /// `DRM_IOCTL_MSVM_STATS`.
    pub(crate) fn stats(
        _dev: &MsvmDevice<drm::Registered>,
        gpu: &Gpu<'_>,
        arg: &mut drm_msvm_stats,
        _file: &drm::File<File>,
    ) -> Result<u32> {
        if arg.reserved.iter().any(|&r| r != 0) {
            return Err(EINVAL);
        }
        let pool = gpu.vram();
        let s = &pool.stats;
        let (live, cached) = pool.chunk_counts();
        let ph = s.phases.read();
        let pt = &pool.pt_tables().counters;
        let fq = gpu.faults().counters();
        *arg = drm_msvm_stats {
            to_device: s.to_device.load(Relaxed),
            to_system: s.to_system.load(Relaxed),
            cpu_faults: s.cpu_faults.load(Relaxed),
            evicted: s.evicted.load(Relaxed),
            resident: pool.resident(),
            no_vram: s.no_vram.load(Relaxed),
            chunks_live: u64::from_safe_cast(live),
            chunks_created: s.chunks_created.load(Relaxed),
            vram_size: u64::from_safe_cast(pool.size()),
            chunk_size: u64::from_safe_cast(pool.chunk_size()),
            engine_vram_read: s.engine_vram_read.load(Relaxed),
            engine_vram_written: s.engine_vram_written.load(Relaxed),
            engine_sys_read: s.engine_sys_read.load(Relaxed),
            engine_sys_written: s.engine_sys_written.load(Relaxed),
            engine_p2p_read: s.engine_p2p_read.load(Relaxed),
            engine_p2p_written: s.engine_p2p_written.load(Relaxed),
            from_peer: s.from_peer.load(Relaxed),
            chunks_cached: u64::from_safe_cast(cached),
            memmap_bytes: u64::from_safe_cast(live * pool.chunk_memmap_bytes()),
            chunks_destroyed: s.chunks_destroyed.load(Relaxed),
            shrink_scans: s.shrink_scans.load(Relaxed),
            shrink_freed: s.shrink_freed.load(Relaxed),
            shrink_moved: s.shrink_moved.load(Relaxed),
            shrink_home: s.shrink_to_system.load(Relaxed),
            peer_read: core::array::from_fn(|i| s.peer_read[i].load(Relaxed)),
            peer_written: core::array::from_fn(|i| s.peer_written[i].load(Relaxed)),
            large_to_device: s.large_to_device.load(Relaxed),
            large_to_system: s.large_to_system.load(Relaxed),
            large_fallback: s.large_fallback.load(Relaxed),
            phase_steps: ph.steps,
            phase_collect_us: ph.collect_us,
            phase_alloc_us: ph.alloc_us,
            phase_copy_us: ph.copy_us,
            phase_install_us: ph.install_us,
            job_count: ph.jobs,
            job_place_us: ph.place_us,
            job_walk_us: ph.walk_us,
            job_bind_us: ph.bind_us,
            job_exec_us: ph.exec_us,
            evict_blocks: s.room_blocks.load(Relaxed),
            evict_pages: s.room_pages.load(Relaxed),
            evict_demoted: s.room_demoted.load(Relaxed),
            thrash_detected: s.thrash_detected.load(Relaxed),
            thrash_pinned: s.thrash_pinned.load(Relaxed),
            thrash_unpinned: s.thrash_unpinned.load(Relaxed),
            thrash_avoided: s.thrash_avoided.load(Relaxed),
            access_counted: s.access_counted.load(Relaxed),
            access_due: s.access_due.load(Relaxed),
            access_moved: s.access_moved.load(Relaxed),
            replica_copied: s.replica_copied.load(Relaxed),
            replica_hits: s.replica_hits.load(Relaxed),
            replica_blocks: pool.replica_blocks(),
            replica_dropped: s.replica_dropped.load(Relaxed),
            cgroup_bytes: s.cg_bytes(),
            cgroup_limited: s.cg_limited.load(Relaxed),
            pt_hits: s.pt_hits.load(Relaxed),
            pt_faults: s.pt_faults.load(Relaxed),
            pt_bound: s.pt_bound.load(Relaxed),
            pt_invalidations: pt.invalidations.load(Relaxed),
            pt_zapped: pt.zapped.load(Relaxed),
            pt_zap_ns: pt.zap_ns.load(Relaxed),
            pt_bytes: pt.bytes.load(Relaxed),
            pt_replays: s.pt_replays.load(Relaxed),
            fault_raised: fq.faults.load(Relaxed),
            fault_batches: fq.batches.load(Relaxed),
            fault_spans: fq.spans.load(Relaxed),
            fault_pages: fq.pages.load(Relaxed),
            fault_ns: fq.ns.load(Relaxed),
            fault_full: fq.full.load(Relaxed),
            fault_own_spans: s.fault_spans[0].load(Relaxed),
            fault_own_ns: s.fault_ns[0].load(Relaxed),
            fault_dma_spans: s.fault_spans[1].load(Relaxed),
            fault_dma_ns: s.fault_ns[1].load(Relaxed),
            fault_p2p_spans: s.fault_spans[2].load(Relaxed),
            fault_p2p_ns: s.fault_ns[2].load(Relaxed),
            pt_tlb_hits: s.tlb_hits.load(Relaxed),
            pt_tlb_misses: s.tlb_misses.load(Relaxed),
            pt_tlb_invalidations: pt.tlb_invalidations.load(Relaxed),
            evict_refaults: s.room_refaults.load(Relaxed),
            reserved: [0; 1],
        };
        Ok(0)
    }

    /// `DRM_IOCTL_MSVM_EXEC`.
    pub(crate) fn exec(
        dev: &MsvmDevice<drm::Registered>,
        gpu: &Gpu<'_>,
        arg: &mut drm_msvm_exec,
        file: &drm::File<File>,
    ) -> Result<u32> {
        let job = decode_exec(arg, |src, buf| {
            UserSlice::new(UserPtr::from_addr(src), buf.len())
                .reader()
                .read_slice(buf)
        })?;
        let cancel = Cancel::ioctl(dev, &DEPARTURES);
        let done = with_vm(file, |vm, mm| {
            // From here (the VM's lock held: not the wait for it) to the
            // end, whatever the end.
            let _timed = Timed::new(&file.inner().get_ref().engine_ns);
            let pool = gpu.vram();
            crate::engine::check(mm, &job)?;
            let epoch = Epoch::next();
            let mut clock = Clock::start();
            // The placement pass, over the destination and COPY's source.
            let mut migrated = 0;
            let mut memo = Memo::default();
            let mut ranges = [(job.addr, job.len), (0, 0)];
            if let Op::Copy { src } = job.op {
                ranges[1] = (src, job.len);
            }
            // Which range reads read-mostly pages through replicas.
            let mut read_mostly = [false; 2];
            // The ranges whose pages a fault maps where they are, kept in
            // the VM's device page table: pages here, pages elsewhere.
            let (mut own, mut remote) = (KVec::new(), KVec::new());
            // A range the VM's device page table maps whole, with the
            // access the job needs (see `mapped`), takes no fault: like a
            // GPU's, its job runs without a placement pass, unless it runs
            // in place and the access counters have a block of it due
            // (`due`).
            let write = !matches!(job.op, Op::Checksum);
            let mapped = [
                mapped(vm.mirror(), ranges[0], write, job.in_place, &cancel)?,
                mapped(vm.mirror(), ranges[1], false, job.in_place, &cancel)?,
            ];
            // The read-mostly ranges, whose pages a fault does not bind
            // where they are (jobs read replicas).
            let mut replicated = KVec::new();
            for (k, (a, n)) in ranges.into_iter().enumerate().filter(|r| r.1 .1 != 0) {
                let first = a & !(PAGE_SIZE - 1);
                let end = (a + n).next_multiple_of(PAGE_SIZE);
                let pieces = vm.attrs().pieces(first, end)?;
                read_mostly[k] = pieces.iter().all(|p| p.placement.replicated());
                for p in pieces.iter() {
                    if p.placement.keeps_here() {
                        own.push((p.start, p.end), GFP_KERNEL)?;
                    }
                    if p.placement.keeps_remote() {
                        remote.push((p.start, p.end), GFP_KERNEL)?;
                    }
                    if p.placement.replicated() {
                        replicated.push((p.start, p.end), GFP_KERNEL)?;
                    }
                }
                // A job in place still runs its placement pass when the
                // access counters have a block of it due to move here.
                let process = &**vm.process();
                if mapped[k] && !(job.in_place && due(process, gpu.index, &pieces, &cancel)?) {
                    continue;
                }
                let (mirror, in_place) = (vm.mirror(), job.in_place);
                let who = (mm, &**vm.process());
                migrated += place(
                    pool, who, mirror, &pieces, in_place, epoch, &mut memo, &cancel,
                )?;
            }
            clock.lap_job(JobPhase::Place);
            let replicate = Replicate {
                dst: matches!(job.op, Op::Checksum) && read_mostly[0],
                src: matches!(job.op, Op::Copy { .. }) && read_mostly[1],
            };
            let keep = Keep {
                own: disjoint(own)?,
                remote: disjoint(remote)?,
                replicated: disjoint(replicated)?,
            };
            let parts = (pool, gpu.device(), gpu.faults());
            let mut engine = Engine::new(parts, epoch, (replicate, vm.process().clone()), keep)?;
            let mut done = engine.run(mm, vm.mirror(), &job, &mut clock, &cancel)?;
            pool.stats.phases.job(&clock);
            done.migrated = migrated;
            Ok(done)
        });
        let d = done.unwrap_or_default();
        trace::Exec {
            dev: gpu.index,
            op: arg.op,
            addr: arg.addr,
            len: arg.length,
            vram: d.vram,
            p2p: d.p2p,
            dma: d.dma,
            migrated: d.migrated,
            result: done.map(|_| ()),
        }
        .fire();
        let done = done?;
        arg.result = done.result;
        arg.migrated = done.migrated;
        Ok(0)
    }
}

/// Adds the time from its making to its drop to a counter of
/// nanoseconds.
struct Timed<'a> {
    started: Instant<Monotonic>,
    to: &'a kernel::sync::atomic::Atomic<u64>,
}

impl<'a> Timed<'a> {
    fn new(to: &'a kernel::sync::atomic::Atomic<u64>) -> Self {
        Self {
            started: Instant::now(),
            to,
        }
    }
}

impl Drop for Timed<'_> {
    fn drop(&mut self) {
        // CAST: nanoseconds of one job fit a `u64` (584 years).
        let ns = self.started.elapsed().as_nanos() as u64;
        self.to.add(ns, Relaxed);
    }
}
