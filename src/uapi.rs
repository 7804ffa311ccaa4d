// SPDX-License-Identifier: GPL-2.0

//! The ioctl handlers: argument decoding and validation, errno mapping.
//!
//! Every handler first turns the raw uAPI struct into a checked request (pure
//! code, tested by KUnit below), then acts on it. Errors, as documented in
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
    prelude::*,
    uaccess::{UserPtr, UserSlice},
};

use crate::device::Gpu;
use crate::driver::MsvmDevice;
use crate::engine::{Engine, Job, Op};
use crate::file::File;
use crate::migrate::{place, prefetch as move_to, Direction, Outcome, Target};
use crate::mm::abi::{
    drm_msvm_exec, drm_msvm_migrate, drm_msvm_peer, drm_msvm_prefetch, drm_msvm_query,
    drm_msvm_residency, drm_msvm_set_attr, drm_msvm_stats, drm_msvm_vm_create, drm_msvm_vm_destroy,
    MSVM_ACCESS_DEFAULT, MSVM_ACCESS_IN_PLACE, MSVM_ACCESS_MIGRATE, MSVM_ATTR_MIXED,
    MSVM_EXEC_ATOMIC_ADD, MSVM_EXEC_CHECKSUM, MSVM_EXEC_COPY, MSVM_EXEC_FILL, MSVM_EXEC_IN_PLACE,
    MSVM_LOC_DEFAULT, MSVM_LOC_DEVICE, MSVM_LOC_SYSTEM, MSVM_MIGRATE_TO_DEVICE,
    MSVM_MIGRATE_TO_SYSTEM, MSVM_PEER_P2P, MSVM_QUERY_SELF, MSVM_UAPI_VERSION,
};
use crate::mm::{
    cancel::{lock_killable, Cancel},
    pagemap::PAGE_SIZE,
};
use crate::placement::{Access, Location, Placement, MAX_RANGES};
use crate::registry;
use crate::svm::{Vm, USER_END};
use crate::topology::{Peer, MAX_DEVICES};
use kernel::sync::atomic::Relaxed;

/// Size of one `drm_msvm_peer`.
const PEER_SIZE: usize = core::mem::size_of::<drm_msvm_peer>();

/// A checked QUERY request.
#[derive(Debug, PartialEq, Eq)]
struct QueryRequest {
    /// Device to describe; `None` for the one the ioctl came through.
    device: Option<usize>,
    /// Capacity of the user's peer array, in elements.
    capacity: usize,
    /// Address of the user's peer array.
    peers_ptr: usize,
}

impl QueryRequest {
    fn decode(arg: &drm_msvm_query) -> Result<Self> {
        all_zero(
            &[
                arg.flags.into(),
                arg.pad.into(),
                arg.owner_group.into(),
                arg.pad2.into(),
            ],
            &arg.reserved,
        )?;
        let device = match arg.device {
            MSVM_QUERY_SELF => None,
            d if (d as usize) < MAX_DEVICES => Some(d as usize),
            _ => return Err(EINVAL),
        };
        let capacity = arg.num_peers as usize;
        if capacity != 0 && arg.peer_size as usize != PEER_SIZE {
            return Err(EINVAL);
        }
        Ok(Self {
            device,
            capacity,
            peers_ptr: usize::try_from(arg.peers_ptr).map_err(|_| EFAULT)?,
        })
    }
}

/// The user-space record of one peer.
fn encode_peer(p: &Peer) -> [u8; PEER_SIZE] {
    let (distance, flags) = match p.distance {
        Some(d) => (i32::try_from(d).unwrap_or(i32::MAX), MSVM_PEER_P2P),
        None => (-1, 0),
    };
    let mut out = [0u8; PEER_SIZE];
    out[0..4].copy_from_slice(&(p.index as u32).to_ne_bytes());
    out[4..8].copy_from_slice(&distance.to_ne_bytes());
    out[8..12].copy_from_slice(&flags.to_ne_bytes());
    out
}

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
    arg.index = index as u32;
    arg.num_devices = num_devices as u32;
    arg.pci_domain = pci.domain;
    arg.pci_bdf = pci.bdf.into();
    arg.vram_size = vram_size;
    arg.num_peers = num_peers as u32;
    arg.owner_group = group as u32;
    Ok(0)
}

/// Fails with `EINVAL` unless every flag, padding and reserved field given
/// is zero.
fn all_zero(fields: &[u64], reserved: &[u64]) -> Result {
    if fields.iter().any(|&v| v != 0) || reserved.iter().any(|&v| v != 0) {
        return Err(EINVAL);
    }
    Ok(())
}

/// `DRM_IOCTL_MSVM_VM_CREATE`.
pub(crate) fn vm_create(
    _dev: &MsvmDevice<drm::Registered>,
    _gpu: &Gpu<'_>,
    arg: &mut drm_msvm_vm_create,
    file: &drm::File<File>,
) -> Result<u32> {
    all_zero(&[arg.flags.into(), arg.pad.into()], &arg.reserved)?;
    let f = file.inner();
    let mut vm = lock_killable(&f.vm)?;
    if vm.is_some() {
        return Err(EBUSY);
    }
    *vm = Some(Vm::for_current()?);
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
    let vm = lock_killable(&f.vm)?.take().ok_or(ENOENT)?;
    drop(vm);
    Ok(0)
}

/// A checked MIGRATE request.
#[derive(Debug, PartialEq, Eq)]
struct MigrateRequest {
    start: usize,
    len: usize,
    dir: Direction,
}

impl MigrateRequest {
    fn decode(arg: &drm_msvm_migrate) -> Result<Self> {
        all_zero(&[arg.flags.into()], &arg.reserved)?;
        let (start, len) = page_range(arg.addr, arg.length)?;
        let dir = match arg.to {
            MSVM_MIGRATE_TO_DEVICE => Direction::ToDevice,
            MSVM_MIGRATE_TO_SYSTEM => Direction::ToSystem,
            _ => return Err(EINVAL),
        };
        Ok(Self { start, len, dir })
    }
}

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
    let cancel = Cancel::ioctl(dev);
    let out = with_vm(file, |vm, mm| {
        move_to(
            gpu.vram(),
            mm,
            vm.mirror(),
            &target,
            req.start,
            req.len,
            &cancel,
        )
    })?;
    put_outcome!(arg, out);
    Ok(0)
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

/// Checks a page-aligned, non-empty range within user space: `EINVAL` for
/// misalignment, zero length or wrap-around, `EFAULT` beyond user space.
/// Returns `(start, len)`.
fn page_range(addr: u64, length: u64) -> Result<(usize, usize)> {
    let page = PAGE_SIZE as u64;
    if addr % page != 0 || length % page != 0 || length == 0 {
        return Err(EINVAL);
    }
    let end = addr.checked_add(length).ok_or(EINVAL)?;
    if end > USER_END {
        return Err(EFAULT);
    }
    Ok((addr as usize, length as usize))
}

/// Decodes a uAPI location: `EINVAL` for an unknown kind, or a device
/// index given with a kind that takes none. `here` stands for
/// `MSVM_QUERY_SELF`.
fn decode_location(location: u32, device: u32, here: usize) -> Result<Location> {
    match location {
        MSVM_LOC_DEFAULT | MSVM_LOC_SYSTEM if device != 0 => Err(EINVAL),
        MSVM_LOC_DEFAULT => Ok(Location::Default),
        MSVM_LOC_SYSTEM => Ok(Location::System),
        MSVM_LOC_DEVICE if device == MSVM_QUERY_SELF => Ok(Location::Device(here)),
        MSVM_LOC_DEVICE if device as usize >= MAX_DEVICES => Err(ENOENT),
        MSVM_LOC_DEVICE => Ok(Location::Device(device as usize)),
        _ => Err(EINVAL),
    }
}

/// Encodes a location as `(location, device)`.
fn encode_location(loc: Location) -> (u32, u32) {
    match loc {
        Location::Default => (MSVM_LOC_DEFAULT, 0),
        Location::System => (MSVM_LOC_SYSTEM, 0),
        Location::Device(i) => (MSVM_LOC_DEVICE, i as u32),
    }
}

/// A checked SET_ATTR request.
#[derive(Debug, PartialEq, Eq)]
struct AttrRequest {
    start: usize,
    len: usize,
    placement: Placement,
}

impl AttrRequest {
    fn decode(arg: &drm_msvm_set_attr, here: usize) -> Result<Self> {
        all_zero(&[arg.flags.into()], &arg.reserved)?;
        let (start, len) = page_range(arg.addr, arg.length)?;
        let preferred = decode_location(arg.location, arg.device, here)?;
        let access = match arg.access {
            MSVM_ACCESS_DEFAULT | MSVM_ACCESS_MIGRATE => Access::Migrate,
            MSVM_ACCESS_IN_PLACE => Access::InPlace,
            _ => return Err(EINVAL),
        };
        Ok(Self {
            start,
            len,
            placement: Placement { preferred, access },
        })
    }
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
            .set(req.start, req.start + req.len, req.placement, MAX_RANGES)
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
    let cancel = Cancel::ioctl(dev);
    let out: Outcome = with_vm(file, |vm, mm| {
        move_to(gpu.vram(), mm, vm.mirror(), &target, start, len, &cancel)
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
    if len as u64 > crate::residency::MAX_LEN {
        return Err(EINVAL);
    }
    let cancel = Cancel::ioctl(dev);
    let (r, first, mixed) = with_vm(file, |vm, mm| {
        let pieces = vm.attrs().pieces(start, start + len)?;
        let first = pieces.first().map_or(Placement::DEFAULT, |p| p.placement);
        let mixed = pieces.iter().any(|p| p.placement != first);
        let r = crate::residency::residency(mm, vm.mirror(), start, len, &cancel)?;
        Ok((r, first, mixed))
    })?;
    let (location, device) = encode_location(first.preferred);
    arg.attr_flags = if mixed { MSVM_ATTR_MIXED } else { 0 };
    arg.location = location;
    arg.device = device;
    arg.access = match first.access {
        Access::Migrate => MSVM_ACCESS_MIGRATE,
        Access::InPlace => MSVM_ACCESS_IN_PLACE,
    };
    arg.system = r.system;
    arg.none = r.none;
    arg.devices = r.devices;
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
    *arg = drm_msvm_stats {
        to_device: s.to_device.load(Relaxed),
        to_system: s.to_system.load(Relaxed),
        cpu_faults: s.cpu_faults.load(Relaxed),
        evicted: s.evicted.load(Relaxed),
        resident: pool.resident(),
        no_vram: s.no_vram.load(Relaxed),
        chunks_live: live as u64,
        chunks_created: s.chunks_created.load(Relaxed),
        vram_size: pool.size() as u64,
        chunk_size: pool.chunk_size() as u64,
        engine_vram_read: s.engine_vram_read.load(Relaxed),
        engine_vram_written: s.engine_vram_written.load(Relaxed),
        engine_sys_read: s.engine_sys_read.load(Relaxed),
        engine_sys_written: s.engine_sys_written.load(Relaxed),
        engine_p2p_read: s.engine_p2p_read.load(Relaxed),
        engine_p2p_written: s.engine_p2p_written.load(Relaxed),
        from_peer: s.from_peer.load(Relaxed),
        chunks_cached: cached as u64,
        memmap_bytes: (live * pool.chunk_memmap_bytes()) as u64,
        chunks_destroyed: s.chunks_destroyed.load(Relaxed),
        shrink_scans: s.shrink_scans.load(Relaxed),
        shrink_freed: s.shrink_freed.load(Relaxed),
        shrink_moved: s.shrink_moved.load(Relaxed),
        shrink_home: s.shrink_home.load(Relaxed),
        peer_read: core::array::from_fn(|i| s.peer_read[i].load(Relaxed)),
        peer_written: core::array::from_fn(|i| s.peer_written[i].load(Relaxed)),
        large_to_device: s.large_to_device.load(Relaxed),
        large_to_system: s.large_to_system.load(Relaxed),
        large_fallback: s.large_fallback.load(Relaxed),
        reserved: [0; 1],
    };
    Ok(0)
}

/// Decodes and checks an EXEC request.
fn decode_exec(arg: &drm_msvm_exec) -> Result<Job> {
    if arg.flags & !MSVM_EXEC_IN_PLACE != 0 || arg.reserved.iter().any(|&r| r != 0) {
        return Err(EINVAL);
    }
    if arg.addr % 8 != 0 || arg.length % 8 != 0 || arg.src % 8 != 0 || arg.length == 0 {
        return Err(EINVAL);
    }
    let end = arg.addr.checked_add(arg.length).ok_or(EINVAL)?;
    if end > USER_END {
        return Err(EFAULT);
    }
    let op = match arg.op {
        MSVM_EXEC_FILL => Op::Fill(arg.value),
        MSVM_EXEC_ATOMIC_ADD => Op::AtomicAdd(arg.value),
        MSVM_EXEC_CHECKSUM => Op::Checksum,
        MSVM_EXEC_COPY => {
            let send = arg.src.checked_add(arg.length).ok_or(EINVAL)?;
            if send > USER_END {
                return Err(EFAULT);
            }
            if arg.src < end && arg.addr < send {
                return Err(EINVAL);
            }
            Op::Copy {
                src: arg.src as usize,
            }
        }
        _ => return Err(EINVAL),
    };
    if !matches!(op, Op::Copy { .. }) && arg.src != 0 {
        return Err(EINVAL);
    }
    if matches!(op, Op::Checksum | Op::Copy { .. }) && arg.value != 0 {
        return Err(EINVAL);
    }
    Ok(Job {
        op,
        addr: arg.addr as usize,
        len: arg.length as usize,
        in_place: arg.flags & MSVM_EXEC_IN_PLACE != 0,
    })
}

/// `DRM_IOCTL_MSVM_EXEC`.
pub(crate) fn exec(
    dev: &MsvmDevice<drm::Registered>,
    gpu: &Gpu<'_>,
    arg: &mut drm_msvm_exec,
    file: &drm::File<File>,
) -> Result<u32> {
    let job = decode_exec(arg)?;
    let cancel = Cancel::ioctl(dev);
    let done = with_vm(file, |vm, mm| {
        let pool = gpu.vram();
        crate::engine::check(mm, &job)?;
        // The placement pass, over the destination and COPY's source.
        let mut migrated = 0;
        let mut ranges = [(job.addr, job.len), (0, 0)];
        if let Op::Copy { src } = job.op {
            ranges[1] = (src, job.len);
        }
        for (a, n) in ranges.into_iter().filter(|r| r.1 != 0) {
            let first = a & !(PAGE_SIZE - 1);
            let end = (a + n).next_multiple_of(PAGE_SIZE);
            let pieces = vm.attrs().pieces(first, end)?;
            migrated += place(pool, mm, vm.mirror(), &pieces, job.in_place, &cancel)?;
        }
        let mut engine = Engine::new(pool, gpu.device())?;
        let mut done = engine.run(mm, vm.mirror(), &job, &cancel)?;
        done.migrated = migrated;
        Ok(done)
    })?;
    arg.result = done.result;
    arg.migrated = done.migrated;
    Ok(0)
}

#[kunit_tests(msvm_uapi)]
mod tests {
    use super::*;
    // `Location` would name the panic location type in test code.
    use crate::placement::Location as Loc;

    fn valid() -> drm_msvm_query {
        drm_msvm_query {
            device: MSVM_QUERY_SELF,
            peer_size: PEER_SIZE as u32,
            num_peers: 4,
            peers_ptr: 0x1000,
            ..Default::default()
        }
    }

    #[test]
    fn decode_accepts_self_and_indices() -> Result {
        assert_eq!(
            QueryRequest::decode(&valid())?,
            QueryRequest {
                device: None,
                capacity: 4,
                peers_ptr: 0x1000
            }
        );
        let q = drm_msvm_query {
            device: (MAX_DEVICES - 1) as u32,
            ..valid()
        };
        assert_eq!(QueryRequest::decode(&q)?.device, Some(MAX_DEVICES - 1));
        Ok(())
    }

    #[test]
    fn decode_rejects_out_of_range_index() {
        let q = drm_msvm_query {
            device: MAX_DEVICES as u32,
            ..valid()
        };
        assert_eq!(QueryRequest::decode(&q), Err(EINVAL));
    }

    #[test]
    fn decode_rejects_non_zero_reserved_fields() {
        assert_eq!(
            QueryRequest::decode(&drm_msvm_query {
                flags: 1,
                ..valid()
            }),
            Err(EINVAL)
        );
        assert_eq!(
            QueryRequest::decode(&drm_msvm_query { pad: 1, ..valid() }),
            Err(EINVAL)
        );
        let mut q = valid();
        q.reserved[2] = 1;
        assert_eq!(QueryRequest::decode(&q), Err(EINVAL));
    }

    #[test]
    fn decode_checks_peer_size_only_with_peers() -> Result {
        let q = drm_msvm_query {
            peer_size: 8,
            ..valid()
        };
        assert_eq!(QueryRequest::decode(&q), Err(EINVAL));
        let q = drm_msvm_query {
            peer_size: 8,
            num_peers: 0,
            ..valid()
        };
        assert_eq!(QueryRequest::decode(&q)?.capacity, 0);
        Ok(())
    }

    #[test]
    fn peer_record_layout() {
        let r = encode_peer(&Peer {
            index: 3,
            distance: Some(4),
        });
        assert_eq!(r[0..4], 3u32.to_ne_bytes());
        assert_eq!(r[4..8], 4i32.to_ne_bytes());
        assert_eq!(r[8..12], MSVM_PEER_P2P.to_ne_bytes());
        assert_eq!(r[12..16], [0u8; 4]);
        let r = encode_peer(&Peer {
            index: 1,
            distance: None,
        });
        assert_eq!(r[4..8], (-1i32).to_ne_bytes());
        assert_eq!(r[8..12], 0u32.to_ne_bytes());
        // The record is exactly the C struct.
        assert_eq!(PEER_SIZE, 16);
    }

    fn mig(addr: u64, length: u64, to: u32) -> drm_msvm_migrate {
        drm_msvm_migrate {
            addr,
            length,
            to,
            ..Default::default()
        }
    }

    #[test]
    fn migrate_decode_accepts_aligned_ranges() -> Result {
        let r = MigrateRequest::decode(&mig(0x10000, 0x2000, MSVM_MIGRATE_TO_DEVICE))?;
        assert_eq!(
            r,
            MigrateRequest {
                start: 0x10000,
                len: 0x2000,
                dir: Direction::ToDevice
            }
        );
        let r = MigrateRequest::decode(&mig(0x10000, 0x1000, MSVM_MIGRATE_TO_SYSTEM))?;
        assert_eq!(r.dir, Direction::ToSystem);
        Ok(())
    }

    #[test]
    fn migrate_decode_rejects_bad_ranges() {
        assert_eq!(
            MigrateRequest::decode(&mig(0x10001, 0x1000, 1)),
            Err(EINVAL)
        );
        assert_eq!(
            MigrateRequest::decode(&mig(0x10000, 0x1001, 1)),
            Err(EINVAL)
        );
        assert_eq!(MigrateRequest::decode(&mig(0x10000, 0, 1)), Err(EINVAL));
        assert_eq!(MigrateRequest::decode(&mig(!0xfff, 0x2000, 1)), Err(EINVAL));
        assert_eq!(
            MigrateRequest::decode(&mig(USER_END - 0x1000, 0x2000, 1)),
            Err(EFAULT)
        );
        assert_eq!(
            MigrateRequest::decode(&mig(0xffff_8880_0000_0000, 0x1000, 1)),
            Err(EFAULT)
        );
    }

    fn attr(location: u32, device: u32, access: u32) -> drm_msvm_set_attr {
        drm_msvm_set_attr {
            addr: 0x10000,
            length: 0x4000,
            location,
            device,
            access,
            flags: 0,
            reserved: [0; 2],
        }
    }

    #[test]
    fn attr_decode_locations_and_access() -> Result {
        let r = AttrRequest::decode(&attr(MSVM_LOC_SYSTEM, 0, MSVM_ACCESS_IN_PLACE), 3)?;
        assert_eq!((r.start, r.len), (0x10000, 0x4000));
        assert_eq!(
            r.placement,
            Placement {
                preferred: Loc::System,
                access: Access::InPlace
            }
        );
        let r = AttrRequest::decode(&attr(MSVM_LOC_DEVICE, MSVM_QUERY_SELF, 0), 3)?;
        assert_eq!(r.placement.preferred, Loc::Device(3));
        assert_eq!(r.placement.access, Access::Migrate);
        let r = AttrRequest::decode(&attr(MSVM_LOC_DEVICE, 1, MSVM_ACCESS_MIGRATE), 3)?;
        assert_eq!(r.placement.preferred, Loc::Device(1));
        assert_eq!(
            AttrRequest::decode(&attr(MSVM_LOC_DEFAULT, 0, 0), 0)?.placement,
            Placement::DEFAULT
        );
        Ok(())
    }

    #[test]
    fn attr_decode_rejects_bad_input() {
        // A device index with a location that takes none.
        assert_eq!(
            AttrRequest::decode(&attr(MSVM_LOC_SYSTEM, 1, 0), 0),
            Err(EINVAL)
        );
        assert_eq!(AttrRequest::decode(&attr(7, 0, 0), 0), Err(EINVAL));
        assert_eq!(
            AttrRequest::decode(&attr(MSVM_LOC_SYSTEM, 0, 3), 0),
            Err(EINVAL)
        );
        assert_eq!(
            AttrRequest::decode(&attr(MSVM_LOC_DEVICE, MAX_DEVICES as u32, 0), 0),
            Err(ENOENT)
        );
        let mut a = attr(MSVM_LOC_SYSTEM, 0, 0);
        a.flags = 1;
        assert_eq!(AttrRequest::decode(&a, 0), Err(EINVAL));
        let mut a = attr(MSVM_LOC_SYSTEM, 0, 0);
        a.reserved[1] = 1;
        assert_eq!(AttrRequest::decode(&a, 0), Err(EINVAL));
        let mut a = attr(MSVM_LOC_SYSTEM, 0, 0);
        a.addr = 0x10800;
        assert_eq!(AttrRequest::decode(&a, 0), Err(EINVAL));
        let mut a = attr(MSVM_LOC_SYSTEM, 0, 0);
        a.addr = USER_END;
        assert_eq!(AttrRequest::decode(&a, 0), Err(EFAULT));
    }

    #[test]
    fn location_round_trip() -> Result {
        for loc in [Loc::Default, Loc::System, Loc::Device(5)] {
            let (l, d) = encode_location(loc);
            assert_eq!(decode_location(l, d, 0)?, loc);
        }
        Ok(())
    }

    #[test]
    fn migrate_decode_rejects_bad_fields() {
        assert_eq!(
            MigrateRequest::decode(&mig(0x10000, 0x1000, 2)),
            Err(EINVAL)
        );
        let mut m = mig(0x10000, 0x1000, 1);
        m.flags = 1;
        assert_eq!(MigrateRequest::decode(&m), Err(EINVAL));
        let mut m = mig(0x10000, 0x1000, 1);
        m.reserved[1] = 1;
        assert_eq!(MigrateRequest::decode(&m), Err(EINVAL));
    }

    fn ex(op: u32, addr: u64, length: u64) -> drm_msvm_exec {
        drm_msvm_exec {
            op,
            addr,
            length,
            ..Default::default()
        }
    }

    #[test]
    fn exec_decode_ops() -> Result {
        let j = decode_exec(&drm_msvm_exec {
            value: 7,
            ..ex(MSVM_EXEC_FILL, 0x1000, 64)
        })?;
        assert_eq!(
            j,
            Job {
                op: Op::Fill(7),
                addr: 0x1000,
                len: 64,
                in_place: false
            }
        );
        let j = decode_exec(&drm_msvm_exec {
            src: 0x9000,
            ..ex(MSVM_EXEC_COPY, 0x1000, 0x100)
        })?;
        assert_eq!(j.op, Op::Copy { src: 0x9000 });
        let j = decode_exec(&drm_msvm_exec {
            flags: MSVM_EXEC_IN_PLACE,
            ..ex(MSVM_EXEC_CHECKSUM, 8, 8)
        })?;
        assert!(j.in_place);
        Ok(())
    }

    #[test]
    fn exec_decode_rejects_bad_input() {
        assert_eq!(decode_exec(&ex(0, 0x1000, 8)), Err(EINVAL));
        assert_eq!(decode_exec(&ex(9, 0x1000, 8)), Err(EINVAL));
        assert_eq!(decode_exec(&ex(MSVM_EXEC_FILL, 0x1004, 8)), Err(EINVAL));
        assert_eq!(decode_exec(&ex(MSVM_EXEC_FILL, 0x1000, 12)), Err(EINVAL));
        assert_eq!(decode_exec(&ex(MSVM_EXEC_FILL, 0x1000, 0)), Err(EINVAL));
        assert_eq!(
            decode_exec(&ex(MSVM_EXEC_FILL, USER_END - 8, 16)),
            Err(EFAULT)
        );
        assert_eq!(
            decode_exec(&drm_msvm_exec {
                flags: 2,
                ..ex(MSVM_EXEC_FILL, 8, 8)
            }),
            Err(EINVAL)
        );
        // Overlapping copy, and stray arguments.
        assert_eq!(
            decode_exec(&drm_msvm_exec {
                src: 0x1800,
                ..ex(MSVM_EXEC_COPY, 0x1000, 0x1000)
            }),
            Err(EINVAL)
        );
        assert_eq!(
            decode_exec(&drm_msvm_exec {
                src: 8,
                ..ex(MSVM_EXEC_FILL, 0x1000, 8)
            }),
            Err(EINVAL)
        );
        assert_eq!(
            decode_exec(&drm_msvm_exec {
                value: 1,
                ..ex(MSVM_EXEC_CHECKSUM, 0x1000, 8)
            }),
            Err(EINVAL)
        );
    }
}
