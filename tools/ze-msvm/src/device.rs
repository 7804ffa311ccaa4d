//! Devices: one per msvm render node, with a VM of this process, and the
//! device entry points (properties, peers).
//!
//! A device has one command queue group, a copy engine: FILL (patterns of
//! 1 to 128 bytes), COPY, and the memory moves of prefetch and advice. It
//! runs no kernels: its compute and module properties are zero, and it
//! supports no images.

use std::ffi::c_char;
use std::path::Path;
use std::sync::Arc;

use msvm_rt::DeviceInfo;

use crate::driver::driver;
use crate::handle::{self, Kind, Object};
use crate::result::{entry, fill_count, output, ZeResult};
use crate::sys::*;

/// The one command queue group's ordinal.
pub(crate) const COPY_ORDINAL: u32 = 0;

/// What every kind of allocation supports on an msvm device: the engine
/// reads and writes it (RW), adds to it atomically (ATOMIC: msvm's atomic
/// add), and the CPU may use it while the device does (CONCURRENT: a CPU
/// touch faults device pages home, a device job migrates or reaches them
/// where they are). Not CONCURRENT_ATOMIC: the engine's atomics are not
/// atomic against the CPU's.
const ACCESS: ze_memory_access_cap_flags_t = ZE_MEMORY_ACCESS_CAP_FLAG_RW
    | ZE_MEMORY_ACCESS_CAP_FLAG_ATOMIC
    | ZE_MEMORY_ACCESS_CAP_FLAG_CONCURRENT;

/// An msvm device, with a VM of this process.
#[derive(Debug)]
pub(crate) struct Device {
    pub(crate) rt: msvm_rt::Device,
    pub(crate) info: DeviceInfo,
    /// PCI vendor and device IDs.
    pci_ids: (u32, u32),
}

impl Object for Device {
    const KIND: Kind = Kind::Device;
}

/// A hexadecimal sysfs attribute (`0x8086`).
fn sysfs_hex(path: &Path) -> Option<u32> {
    let s = std::fs::read_to_string(path).ok()?;
    u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()
}

impl Device {
    /// Opens every msvm render node with a VM of this process, and
    /// publishes each (its handle lives as long as the process). A node
    /// that cannot be opened, described or given a VM is left out.
    pub(crate) fn open_all() -> Vec<Arc<Device>> {
        let nodes = msvm_rt::Device::render_nodes().unwrap_or_default();
        let mut devices = Vec::new();
        for node in nodes {
            let Ok(rt) = msvm_rt::Device::open(&node) else {
                continue;
            };
            let Ok(info) = rt.query() else { continue };
            if rt.vm_create().is_err() {
                continue;
            }
            let sys = node
                .file_name()
                .map(|n| Path::new("/sys/class/drm").join(n).join("device"))
                .unwrap_or_default();
            let pci_ids = (
                sysfs_hex(&sys.join("vendor")).unwrap_or(0),
                sysfs_hex(&sys.join("device")).unwrap_or(0),
            );
            let d = Arc::new(Device { rt, info, pci_ids });
            let _: ze_device_handle_t = handle::publish(d.clone());
            devices.push(d);
        }
        devices
    }

    /// The handle of a published device.
    pub(crate) fn handle(self: &Arc<Self>) -> ze_device_handle_t {
        Arc::as_ptr(self).cast_mut().cast()
    }

    /// Whether this device works on `other`'s memory in place (itself, or a
    /// peer of its owner group, over P2P).
    pub(crate) fn reaches(&self, other: &Device) -> bool {
        self.info.index == other.info.index || self.info.owner_group == other.info.owner_group
    }

    /// Whether PCIe P2P links the two (QUERY's matrix).
    fn p2p(&self, other: &Device) -> bool {
        self.info
            .peers
            .iter()
            .any(|p| p.index == other.info.index && p.p2p)
    }
}

/// The device `h` names.
pub(crate) fn get(h: ze_device_handle_t) -> ZeResult<Arc<Device>> {
    handle::get(h)
}

/// Copies `s` into a C string field, cut to fit.
fn set_name(field: &mut [c_char; 256], s: &str) {
    field.fill(0);
    for (f, b) in field.iter_mut().zip(s.bytes().take(255)) {
        *f = b as c_char;
    }
}

/// `zeDeviceGet`.
///
/// # Safety
///
/// As for [`fill_count`].
pub(crate) unsafe extern "C" fn device_get(
    h: ze_driver_handle_t,
    p_count: *mut u32,
    ph: *mut ze_device_handle_t,
) -> ze_result_t {
    entry(|| {
        let handles: Vec<_> = driver(h)?.devices().iter().map(Device::handle).collect();
        // SAFETY: the caller's contract.
        unsafe { fill_count(p_count, ph, &handles) }
    })
}

/// `zeDeviceGetSubDevices`: none.
///
/// # Safety
///
/// As for [`fill_count`].
pub(crate) unsafe extern "C" fn get_sub_devices(
    h: ze_device_handle_t,
    p_count: *mut u32,
    ph: *mut ze_device_handle_t,
) -> ze_result_t {
    entry(|| {
        get(h)?;
        // SAFETY: the caller's contract.
        unsafe { fill_count(p_count, ph, &[]) }
    })
}

/// `zeDeviceGetProperties`.
///
/// # Safety
///
/// `props` must be null or valid for reading and writing.
pub(crate) unsafe extern "C" fn get_properties(
    h: ze_device_handle_t,
    props: *mut ze_device_properties_t,
) -> ze_result_t {
    entry(|| {
        let d = get(h)?;
        // SAFETY: the caller's contract.
        let p = unsafe { output(props) }?;
        p.type_ = ZE_DEVICE_TYPE_GPU;
        (p.vendorId, p.deviceId) = d.pci_ids;
        // Device pages fault (on the CPU and on the device): shared and
        // system allocations are paged on demand.
        p.flags = ZE_DEVICE_PROPERTY_FLAG_ONDEMANDPAGING;
        p.subdeviceId = 0;
        p.coreClockRate = 0;
        p.maxMemAllocSize = d.info.vram_size;
        p.maxHardwareContexts = 1;
        p.maxCommandQueuePriority = 0;
        // No execution units: no kernels.
        p.numThreadsPerEU = 0;
        p.physicalEUSimdWidth = 0;
        p.numEUsPerSubslice = 0;
        p.numSubslicesPerSlice = 0;
        p.numSlices = 0;
        // Timestamps are the host's monotonic clock, in nanoseconds: the
        // resolution in nanoseconds per tick, or (in the 1.2 structure)
        // ticks per second.
        p.timerResolution = if p.stype == ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES_1_2 {
            1_000_000_000
        } else {
            1
        };
        p.timestampValidBits = 64;
        p.kernelTimestampValidBits = 0;
        let pci = d.info.pci;
        p.uuid.id = [0; 16];
        p.uuid.id[..4].copy_from_slice(b"msvm");
        p.uuid.id[4..8].copy_from_slice(&pci.domain.to_le_bytes());
        p.uuid.id[8..11].copy_from_slice(&[pci.bus, pci.device, pci.function]);
        p.uuid.id[12..16].copy_from_slice(&d.info.index.to_le_bytes());
        set_name(&mut p.name, &format!("msvm GPU {} ({pci})", d.info.index));
        Ok(())
    })
}

/// The body of the properties that are all zero on msvm's devices:
/// `props` becomes `zero(props)` (which keeps its `stype` and `pNext`).
///
/// # Safety
///
/// `props` must be null or valid for reading and writing.
unsafe fn zeroed<T>(
    h: ze_device_handle_t,
    props: *mut T,
    zero: impl FnOnce(&T) -> T,
) -> ze_result_t {
    entry(|| {
        get(h)?;
        // SAFETY: the caller's contract.
        let p = unsafe { output(props) }?;
        *p = zero(p);
        Ok(())
    })
}

/// `zeDeviceGetComputeProperties`: no compute (all zero).
///
/// # Safety
///
/// `props` must be null or valid for reading and writing.
pub(crate) unsafe extern "C" fn get_compute_properties(
    h: ze_device_handle_t,
    props: *mut ze_device_compute_properties_t,
) -> ze_result_t {
    // SAFETY: the caller's contract.
    unsafe {
        zeroed(h, props, |p| ze_device_compute_properties_t {
            stype: p.stype,
            pNext: p.pNext,
            ..Default::default()
        })
    }
}

/// `zeDeviceGetModuleProperties`: no modules (SPIR-V version 0, no flags).
///
/// # Safety
///
/// `props` must be null or valid for reading and writing.
pub(crate) unsafe extern "C" fn get_module_properties(
    h: ze_device_handle_t,
    props: *mut ze_device_module_properties_t,
) -> ze_result_t {
    // SAFETY: the caller's contract.
    unsafe {
        zeroed(h, props, |p| ze_device_module_properties_t {
            stype: p.stype,
            pNext: p.pNext,
            ..Default::default()
        })
    }
}

/// `zeDeviceGetCommandQueueGroupProperties`: one group, a copy engine with
/// one queue and fill patterns up to 128 bytes.
///
/// # Safety
///
/// `p_count` must be null or valid; if `*p_count` is not 0, `props` null or
/// valid for `*p_count` elements.
pub(crate) unsafe extern "C" fn get_queue_group_properties(
    h: ze_device_handle_t,
    p_count: *mut u32,
    props: *mut ze_command_queue_group_properties_t,
) -> ze_result_t {
    entry(|| {
        get(h)?;
        // SAFETY: the caller's contract.
        let count = unsafe { output(p_count) }?;
        if *count == 0 || props.is_null() {
            *count = 1;
            return Ok(());
        }
        *count = 1;
        // SAFETY: `props` holds at least one element (the caller's count).
        let p = unsafe { output(props) }?;
        p.flags = ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY;
        p.maxMemoryFillPatternSize = msvm_rt::abi::MSVM_EXEC_PATTERN_MAX as usize;
        p.numQueues = 1;
        Ok(())
    })
}

/// `zeDeviceGetMemoryProperties`: the device's VRAM.
///
/// # Safety
///
/// As for [`get_queue_group_properties`].
pub(crate) unsafe extern "C" fn get_memory_properties(
    h: ze_device_handle_t,
    p_count: *mut u32,
    props: *mut ze_device_memory_properties_t,
) -> ze_result_t {
    entry(|| {
        let d = get(h)?;
        // SAFETY: the caller's contract.
        let count = unsafe { output(p_count) }?;
        if *count == 0 || props.is_null() {
            *count = 1;
            return Ok(());
        }
        *count = 1;
        // SAFETY: `props` holds at least one element.
        let p = unsafe { output(props) }?;
        p.flags = 0;
        p.maxClockRate = 0;
        // The engine reaches VRAM through the device's BAR in 64-bit
        // accesses.
        p.maxBusWidth = 64;
        p.totalSize = d.info.vram_size;
        set_name(&mut p.name, "VRAM");
        Ok(())
    })
}

/// `zeDeviceGetMemoryAccessProperties`.
///
/// # Safety
///
/// `props` must be null or valid for reading and writing.
pub(crate) unsafe extern "C" fn get_memory_access_properties(
    h: ze_device_handle_t,
    props: *mut ze_device_memory_access_properties_t,
) -> ze_result_t {
    entry(|| {
        get(h)?;
        // SAFETY: the caller's contract.
        let p = unsafe { output(props) }?;
        p.hostAllocCapabilities = ACCESS;
        p.deviceAllocCapabilities = ZE_MEMORY_ACCESS_CAP_FLAG_RW | ZE_MEMORY_ACCESS_CAP_FLAG_ATOMIC;
        p.sharedSingleDeviceAllocCapabilities = ACCESS;
        p.sharedCrossDeviceAllocCapabilities = ACCESS;
        // malloc()'d memory: msvm's reason to be.
        p.sharedSystemAllocCapabilities = ACCESS;
        Ok(())
    })
}

/// `zeDeviceGetCacheProperties`: none described.
///
/// # Safety
///
/// As for [`fill_count`].
pub(crate) unsafe extern "C" fn get_cache_properties(
    h: ze_device_handle_t,
    p_count: *mut u32,
    props: *mut ze_device_cache_properties_t,
) -> ze_result_t {
    entry(|| {
        get(h)?;
        // SAFETY: the caller's contract.
        unsafe { fill_count(p_count, props, &[]) }
    })
}

/// `zeDeviceGetImageProperties`: no images (all zero).
///
/// # Safety
///
/// `props` must be null or valid for reading and writing.
pub(crate) unsafe extern "C" fn get_image_properties(
    h: ze_device_handle_t,
    props: *mut ze_device_image_properties_t,
) -> ze_result_t {
    // SAFETY: the caller's contract.
    unsafe {
        zeroed(h, props, |p| ze_device_image_properties_t {
            stype: p.stype,
            pNext: p.pNext,
            ..Default::default()
        })
    }
}

/// `zeDeviceGetExternalMemoryProperties`: none.
///
/// # Safety
///
/// `props` must be null or valid for reading and writing.
pub(crate) unsafe extern "C" fn get_external_memory_properties(
    h: ze_device_handle_t,
    props: *mut ze_device_external_memory_properties_t,
) -> ze_result_t {
    // SAFETY: the caller's contract.
    unsafe {
        zeroed(h, props, |p| ze_device_external_memory_properties_t {
            stype: p.stype,
            pNext: p.pNext,
            ..Default::default()
        })
    }
}

/// `zeDeviceGetP2PProperties`: access when the two are linked by P2P (and
/// work on each other's memory in place), from QUERY's matrix.
///
/// # Safety
///
/// `props` must be null or valid for reading and writing.
pub(crate) unsafe extern "C" fn get_p2p_properties(
    h: ze_device_handle_t,
    peer: ze_device_handle_t,
    props: *mut ze_device_p2p_properties_t,
) -> ze_result_t {
    entry(|| {
        let (d, peer) = (get(h)?, get(peer)?);
        // SAFETY: the caller's contract.
        let p = unsafe { output(props) }?;
        p.flags = if d.p2p(&peer) && d.reaches(&peer) {
            ZE_DEVICE_P2P_PROPERTY_FLAG_ACCESS | ZE_DEVICE_P2P_PROPERTY_FLAG_ATOMICS
        } else {
            0
        };
        Ok(())
    })
}

/// `zeDeviceCanAccessPeer`: whether the device works on the peer's memory
/// in place (itself, or a P2P peer of its owner group). Others' memory is
/// still usable: a job migrates it first.
///
/// # Safety
///
/// `value` must be null or valid for writing.
pub(crate) unsafe extern "C" fn can_access_peer(
    h: ze_device_handle_t,
    peer: ze_device_handle_t,
    value: *mut ze_bool_t,
) -> ze_result_t {
    entry(|| {
        let (d, peer) = (get(h)?, get(peer)?);
        let can = d.info.index == peer.info.index || (d.p2p(&peer) && d.reaches(&peer));
        // SAFETY: the caller's contract.
        *unsafe { output(value) }? = ze_bool_t::from(can);
        Ok(())
    })
}

/// `zeDeviceGetStatus`: lost once its node no longer answers (unplugged).
pub(crate) extern "C" fn get_status(h: ze_device_handle_t) -> ze_result_t {
    entry(|| {
        let d = get(h)?;
        d.rt.query()
            .map(drop)
            .map_err(|_| ZE_RESULT_ERROR_DEVICE_LOST)
    })
}

/// The host's and the device's clock: `CLOCK_MONOTONIC`, in nanoseconds.
pub(crate) fn now_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).map_or(0, |t| {
        u64::try_from(t.tv_sec()).unwrap_or(0) * 1_000_000_000
            + u64::try_from(t.tv_nsec()).unwrap_or(0)
    })
}

/// `zeDeviceGetGlobalTimestamps`: the same clock for both.
///
/// # Safety
///
/// `host` and `device` must be null or valid for writing.
pub(crate) unsafe extern "C" fn get_global_timestamps(
    h: ze_device_handle_t,
    host: *mut u64,
    device: *mut u64,
) -> ze_result_t {
    entry(|| {
        get(h)?;
        let t = now_ns();
        // SAFETY: the caller's contract.
        *unsafe { output(host) }? = t;
        // SAFETY: the caller's contract.
        *unsafe { output(device) }? = t;
        Ok(())
    })
}

/// `zeModuleCreate`: no modules (the device runs no kernels). The handle
/// is set to null, so that a program that goes on with it names nothing.
///
/// # Safety
///
/// `out` and `log` must each be null or valid for writing.
pub(crate) unsafe extern "C" fn module_create(
    _ctx: ze_context_handle_t,
    _dev: ze_device_handle_t,
    _desc: *const ze_module_desc_t,
    out: *mut ze_module_handle_t,
    log: *mut ze_module_build_log_handle_t,
) -> ze_result_t {
    if !out.is_null() {
        // SAFETY: non-null, so valid for writing (the caller's contract).
        unsafe { out.write(std::ptr::null_mut()) };
    }
    if !log.is_null() {
        // SAFETY: as above.
        unsafe { log.write(std::ptr::null_mut()) };
    }
    ZE_RESULT_ERROR_UNSUPPORTED_FEATURE
}
