//! Level Zero tests of msvm's driver, run in the guest through the real
//! loader (`libze_loader.so.1`, with `ZE_ENABLE_ALT_DRIVERS` naming
//! `libze_msvm.so.1`), the validation layer on. Every entry point the
//! driver implements, data checked byte by byte, across three devices: a
//! P2P pair and one out of their reach. msvm's own counters (through
//! `msvm-rt`, on files of the test's own) say which path each job took.
//!
//! Usage: `ze-tests [FILTER]`; `ze-tests system-advice` runs the advice
//! values of Level Zero 1.9 (system memory preferred), which the 1.8
//! validation layer refuses: run it without the layer; `ze-tests bench`
//! is `make bench`'s Level Zero overhead.

use std::ffi::c_void;
use std::ptr::null_mut;
use std::time::Instant;

use msvm_rt::Stats;
use ze_msvm::sys::*;

#[link(name = "ze_loader")]
unsafe extern "C" {}

type Outcome = Result<(), String>;

/// How long a test waits for the device (ns): a driver that never signals
/// fails the test instead of hanging the run.
const WAIT: u64 = 60_000_000_000;

/// Fails with `what` and the result's name unless `r` is `want`.
fn expect(what: &str, r: ze_result_t, want: ze_result_t) -> Outcome {
    if r == want {
        Ok(())
    } else {
        Err(format!("{what}: {r:#x}, want {want:#x}"))
    }
}

/// Fails unless `r` is success.
fn ok(what: &str, r: ze_result_t) -> Outcome {
    expect(what, r, ZE_RESULT_SUCCESS)
}

macro_rules! check {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

/// The devices, by role, and what the tests share.
struct Env {
    driver: ze_driver_handle_t,
    ctx: ze_context_handle_t,
    /// Every device, and its msvm index.
    devices: Vec<(ze_device_handle_t, u32)>,
    /// `a` and `b` reach each other over P2P; `c` reaches neither.
    a: ze_device_handle_t,
    b: ze_device_handle_t,
    c: ze_device_handle_t,
    /// msvm files of the test's own, by msvm index: counters, residency.
    rt: Vec<msvm_rt::Device>,
}

impl Env {
    fn index(&self, d: ze_device_handle_t) -> u32 {
        self.devices
            .iter()
            .find(|x| x.0 == d)
            .map_or(u32::MAX, |x| x.1)
    }

    fn stats(&self, d: ze_device_handle_t) -> Result<Stats, String> {
        let i = self.index(d);
        let rt = self
            .rt
            .iter()
            .find(|r| r.index().ok() == Some(i))
            .ok_or("no msvm file")?;
        rt.stats().map_err(|e| e.to_string())
    }

    /// Where the pages of `[p, p + len)` are: bytes in system RAM and on
    /// each device (by msvm index).
    fn residency(&self, p: usize, len: usize) -> Result<msvm_rt::Residency, String> {
        let page = 4096;
        let start = p & !(page - 1);
        let end = (p + len).next_multiple_of(page);
        self.rt[0]
            .residency(start, end - start)
            .map_err(|e| e.to_string())
    }
}

fn desc<T: Default>(stype: ze_structure_type_t, set: impl FnOnce(&mut T)) -> T {
    let mut t = T::default();
    set(&mut t);
    // Every descriptor starts with its stype.
    // SAFETY: the Level Zero descriptors are repr(C) structs whose first
    // field is a `ze_structure_type_t`.
    unsafe { (&raw mut t).cast::<ze_structure_type_t>().write(stype) };
    t
}

fn setup() -> Result<Env, String> {
    // SAFETY: flags only.
    ok("zeInit", unsafe { zeInit(0) })?;
    let mut n = 0;
    // SAFETY: count query.
    ok("zeDriverGet", unsafe { zeDriverGet(&mut n, null_mut()) })?;
    check!(n == 1, "{n} drivers");
    let mut driver = null_mut();
    // SAFETY: room for one.
    ok("zeDriverGet", unsafe { zeDriverGet(&mut n, &mut driver) })?;
    let mut n = 0;
    // SAFETY: count query.
    ok("zeDeviceGet", unsafe {
        zeDeviceGet(driver, &mut n, null_mut())
    })?;
    let mut hs = vec![null_mut(); n as usize];
    // SAFETY: room for `n`.
    ok("zeDeviceGet", unsafe {
        zeDeviceGet(driver, &mut n, hs.as_mut_ptr())
    })?;
    let mut devices = Vec::new();
    for h in hs {
        let mut p: ze_device_properties_t = desc(ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES, |_| ());
        // SAFETY: a live handle and struct.
        ok("zeDeviceGetProperties", unsafe {
            zeDeviceGetProperties(h, &mut p)
        })?;
        let index = u32::from_le_bytes(p.uuid.id[12..16].try_into().unwrap());
        devices.push((h, index));
    }
    let rt = msvm_rt::Device::all().map_err(|e| e.to_string())?;
    for r in &rt {
        r.vm_create().map_err(|e| e.to_string())?;
    }
    // Roles from msvm's own QUERY.
    let (mut pair, mut alone) = (Vec::new(), Vec::new());
    for r in &rt {
        let i = r.query().map_err(|e| e.to_string())?;
        let h = devices
            .iter()
            .find(|d| d.1 == i.index)
            .ok_or("a device without a handle")?
            .0;
        if i.peers.iter().any(|p| p.p2p) {
            pair.push(h);
        } else {
            alone.push(h);
        }
    }
    check!(
        pair.len() >= 2 && !alone.is_empty(),
        "need a P2P pair and an isolated device"
    );
    let cd: ze_context_desc_t = desc(
        ZE_STRUCTURE_TYPE_CONTEXT_DESC,
        |_: &mut ze_context_desc_t| (),
    );
    let mut ctx = null_mut();
    // SAFETY: live arguments.
    ok("zeContextCreate", unsafe {
        zeContextCreate(driver, &cd, &mut ctx)
    })?;
    Ok(Env {
        driver,
        ctx,
        devices,
        a: pair[0],
        b: pair[1],
        c: alone[0],
        rt,
    })
}

/// An immediate command list on `d`.
fn immediate(env: &Env, d: ze_device_handle_t) -> Result<ze_command_list_handle_t, String> {
    let qd: ze_command_queue_desc_t = desc(
        ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC,
        |q: &mut ze_command_queue_desc_t| {
            q.mode = ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS;
        },
    );
    let mut l = null_mut();
    // SAFETY: live arguments.
    ok("zeCommandListCreateImmediate", unsafe {
        zeCommandListCreateImmediate(env.ctx, d, &qd, &mut l)
    })?;
    Ok(l)
}

/// Fills `[p, p + len)` with the byte `v` on list `l`, with no events.
///
/// # Safety
///
/// `l` must be a live list and `[p, p + len)` memory of the process that
/// nothing else uses until the fill has run.
unsafe fn fill_byte(
    what: &str,
    l: ze_command_list_handle_t,
    p: *mut u8,
    len: usize,
    v: u8,
) -> Outcome {
    // SAFETY: the caller's contract; the pattern is copied at append.
    ok(what, unsafe {
        zeCommandListAppendMemoryFill(
            l,
            p.cast(),
            [v].as_ptr().cast(),
            1,
            len,
            null_mut(),
            0,
            null_mut(),
        )
    })
}

fn destroy_list(l: ze_command_list_handle_t) -> Outcome {
    // SAFETY: a live list.
    ok("zeCommandListDestroy", unsafe { zeCommandListDestroy(l) })
}

/// A buffer of the process's own (a shared system allocation).
fn system(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A 2 MiB block of fresh anonymous memory, as malloc() would map it, of
/// no other allocation: no policy remembers anything of it (thrashing
/// detection keeps a block's history while any of it stays mapped).
struct Block {
    map: std::ptr::NonNull<c_void>,
}

impl Block {
    const LEN: usize = 2 << 20;

    fn new() -> Result<Self, String> {
        // SAFETY: a new private mapping, aliasing nothing.
        let map = unsafe {
            nix::sys::mman::mmap_anonymous(
                None,
                std::num::NonZeroUsize::new(2 * Self::LEN).unwrap(),
                nix::sys::mman::ProtFlags::PROT_READ | nix::sys::mman::ProtFlags::PROT_WRITE,
                nix::sys::mman::MapFlags::MAP_PRIVATE,
            )
        }
        .map_err(|e| e.to_string())?;
        Ok(Self { map })
    }

    /// The block's first byte.
    fn ptr(&self) -> *mut u8 {
        let a = self.map.as_ptr() as usize;
        a.next_multiple_of(Self::LEN) as *mut u8
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        // SAFETY: our mapping, no longer used.
        let _ = unsafe { nix::sys::mman::munmap(self.map, 2 * Self::LEN) };
    }
}

fn driver_and_devices(env: &Env) -> Outcome {
    let mut v = 0;
    // SAFETY: live arguments.
    ok("zeDriverGetApiVersion", unsafe {
        zeDriverGetApiVersion(env.driver, &mut v)
    })?;
    check!(v == ZE_API_VERSION_CURRENT, "API version {v:#x}");
    let mut dp: ze_driver_properties_t = desc(ZE_STRUCTURE_TYPE_DRIVER_PROPERTIES, |_| ());
    // SAFETY: live arguments.
    ok("zeDriverGetProperties", unsafe {
        zeDriverGetProperties(env.driver, &mut dp)
    })?;
    check!(
        dp.driverVersion >> 16 == msvm_rt::abi::MSVM_UAPI_VERSION,
        "driver version {:#x}",
        dp.driverVersion
    );
    check!(
        env.devices.len() == env.rt.len(),
        "{} devices, {} msvm nodes",
        env.devices.len(),
        env.rt.len()
    );
    let mut uuids = Vec::new();
    for (&(h, index), rt) in env.devices.iter().zip(&env.rt) {
        let info = rt.query().map_err(|e| e.to_string())?;
        check!(
            info.index == index,
            "device order: {} vs {index}",
            info.index
        );
        let mut p: ze_device_properties_t = desc(ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES, |_| ());
        // SAFETY: live arguments.
        ok("zeDeviceGetProperties", unsafe {
            zeDeviceGetProperties(h, &mut p)
        })?;
        check!(p.type_ == ZE_DEVICE_TYPE_GPU, "type {}", p.type_);
        check!(
            p.flags & ZE_DEVICE_PROPERTY_FLAG_ONDEMANDPAGING != 0,
            "not on-demand paging"
        );
        check!(
            p.maxMemAllocSize == info.vram_size,
            "maxMemAllocSize {}",
            p.maxMemAllocSize
        );
        // SAFETY: the name is a NUL-terminated C string.
        let name = unsafe { std::ffi::CStr::from_ptr(p.name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        check!(
            name.contains("msvm") && name.contains(&info.pci.to_string()),
            "name {name}"
        );
        uuids.push(p.uuid.id);
        let mut n = 0;
        // SAFETY: count query.
        ok("zeDeviceGetCommandQueueGroupProperties", unsafe {
            zeDeviceGetCommandQueueGroupProperties(h, &mut n, null_mut())
        })?;
        let mut g: ze_command_queue_group_properties_t =
            desc(ZE_STRUCTURE_TYPE_COMMAND_QUEUE_GROUP_PROPERTIES, |_| ());
        // SAFETY: room for one.
        ok("zeDeviceGetCommandQueueGroupProperties", unsafe {
            zeDeviceGetCommandQueueGroupProperties(h, &mut n, &mut g)
        })?;
        check!(
            n == 1
                && g.flags == ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY
                && g.maxMemoryFillPatternSize == 128
                && g.numQueues == 1,
            "queue groups: {n}, flags {:#x}, fill {}",
            g.flags,
            g.maxMemoryFillPatternSize
        );
        let mut n = 1;
        let mut m: ze_device_memory_properties_t =
            desc(ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES, |_| ());
        // SAFETY: room for one.
        ok("zeDeviceGetMemoryProperties", unsafe {
            zeDeviceGetMemoryProperties(h, &mut n, &mut m)
        })?;
        check!(
            n == 1 && m.totalSize == info.vram_size,
            "memory {n} x {}",
            m.totalSize
        );
        let mut a: ze_device_memory_access_properties_t =
            desc(ZE_STRUCTURE_TYPE_DEVICE_MEMORY_ACCESS_PROPERTIES, |_| ());
        // SAFETY: live arguments.
        ok("zeDeviceGetMemoryAccessProperties", unsafe {
            zeDeviceGetMemoryAccessProperties(h, &mut a)
        })?;
        let want = ZE_MEMORY_ACCESS_CAP_FLAG_RW
            | ZE_MEMORY_ACCESS_CAP_FLAG_ATOMIC
            | ZE_MEMORY_ACCESS_CAP_FLAG_CONCURRENT;
        check!(
            a.sharedSystemAllocCapabilities == want,
            "shared system caps {:#x}",
            a.sharedSystemAllocCapabilities
        );
        let mut c: ze_device_compute_properties_t =
            desc(ZE_STRUCTURE_TYPE_DEVICE_COMPUTE_PROPERTIES, |_| ());
        // SAFETY: live arguments.
        ok("zeDeviceGetComputeProperties", unsafe {
            zeDeviceGetComputeProperties(h, &mut c)
        })?;
        check!(c.maxTotalGroupSize == 0, "compute claimed");
        let (mut host, mut dev) = (0, 0);
        // SAFETY: live arguments.
        ok("zeDeviceGetGlobalTimestamps", unsafe {
            zeDeviceGetGlobalTimestamps(h, &mut host, &mut dev)
        })?;
        check!(host > 0 && dev == host, "timestamps {host} {dev}");
        // The 1.2 structure gives the resolution in ticks per second.
        let mut p12: ze_device_properties_t = desc(ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES_1_2, |_| ());
        // SAFETY: live arguments.
        ok("zeDeviceGetProperties 1.2", unsafe {
            zeDeviceGetProperties(h, &mut p12)
        })?;
        check!(
            p.timerResolution == 1 && p12.timerResolution == 1_000_000_000,
            "timer resolution {} ns, {} Hz",
            p.timerResolution,
            p12.timerResolution
        );
        // SAFETY: a live handle.
        ok("zeDeviceGetStatus", unsafe { zeDeviceGetStatus(h) })?;
    }
    uuids.sort_unstable();
    uuids.dedup();
    check!(uuids.len() == env.devices.len(), "device UUIDs repeat");
    Ok(())
}

fn p2p_matrix(env: &Env) -> Outcome {
    for rt in &env.rt {
        let info = rt.query().map_err(|e| e.to_string())?;
        let h = env.devices.iter().find(|d| d.1 == info.index).unwrap().0;
        for &(ph, pi) in &env.devices {
            let want = pi == info.index || info.peers.iter().any(|p| p.index == pi && p.p2p);
            let mut can = 0;
            // SAFETY: live arguments.
            ok("zeDeviceCanAccessPeer", unsafe {
                zeDeviceCanAccessPeer(h, ph, &mut can)
            })?;
            check!(
                (can != 0) == want,
                "gpu{} -> gpu{pi}: can access {can}, want {want}",
                info.index
            );
            if pi != info.index {
                let mut p: ze_device_p2p_properties_t =
                    desc(ZE_STRUCTURE_TYPE_DEVICE_P2P_PROPERTIES, |_| ());
                // SAFETY: live arguments.
                ok("zeDeviceGetP2PProperties", unsafe {
                    zeDeviceGetP2PProperties(h, ph, &mut p)
                })?;
                check!(
                    (p.flags & ZE_DEVICE_P2P_PROPERTY_FLAG_ACCESS != 0) == want,
                    "gpu{} -> gpu{pi}: P2P flags {:#x}",
                    info.index,
                    p.flags
                );
            }
        }
    }
    Ok(())
}

/// Allocates `len` bytes of a kind.
fn alloc(
    env: &Env,
    kind: ze_memory_type_t,
    len: usize,
    d: ze_device_handle_t,
) -> Result<*mut u8, String> {
    let mut p = null_mut();
    let dd: ze_device_mem_alloc_desc_t = desc(
        ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC,
        |_: &mut ze_device_mem_alloc_desc_t| (),
    );
    let hd: ze_host_mem_alloc_desc_t = desc(
        ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC,
        |_: &mut ze_host_mem_alloc_desc_t| (),
    );
    // SAFETY: live arguments.
    let r = unsafe {
        match kind {
            ZE_MEMORY_TYPE_HOST => zeMemAllocHost(env.ctx, &hd, len, 0, &mut p),
            ZE_MEMORY_TYPE_DEVICE => zeMemAllocDevice(env.ctx, &dd, len, 0, d, &mut p),
            _ => zeMemAllocShared(env.ctx, &dd, &hd, len, 0, d, &mut p),
        }
    };
    ok("zeMemAlloc", r)?;
    Ok(p.cast())
}

fn free(env: &Env, p: *mut u8) -> Outcome {
    // SAFETY: an allocation of the context.
    ok("zeMemFree", unsafe { zeMemFree(env.ctx, p.cast()) })
}

fn alloc_kinds(env: &Env) -> Outcome {
    let len = 64 << 10;
    let mut ids = Vec::new();
    for kind in [
        ZE_MEMORY_TYPE_HOST,
        ZE_MEMORY_TYPE_DEVICE,
        ZE_MEMORY_TYPE_SHARED,
    ] {
        let p = alloc(env, kind, len, env.a)?;
        let mut props: ze_memory_allocation_properties_t =
            desc(ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES, |_| ());
        let mut dev = null_mut();
        // SAFETY: live arguments; the middle of the allocation.
        ok("zeMemGetAllocProperties", unsafe {
            zeMemGetAllocProperties(env.ctx, p.add(100).cast(), &mut props, &mut dev)
        })?;
        check!(props.type_ == kind, "type {} for kind {kind}", props.type_);
        ids.push(props.id);
        check!(
            (kind == ZE_MEMORY_TYPE_HOST) == dev.is_null() && (dev.is_null() || dev == env.a),
            "kind {kind}: device {dev:?}"
        );
        let (mut base, mut size) = (null_mut(), 0);
        // SAFETY: live arguments.
        ok("zeMemGetAddressRange", unsafe {
            zeMemGetAddressRange(env.ctx, p.add(len - 1).cast(), &mut base, &mut size)
        })?;
        check!(base == p.cast() && size == len, "range {base:?} {size}");
        let r = env.residency(p as usize, len)?;
        let ai = env.index(env.a) as usize;
        match kind {
            ZE_MEMORY_TYPE_DEVICE => {
                check!(r.devices[ai] == len as u64, "device allocation: {r:?}")
            }
            _ => check!(
                r.devices.iter().all(|&b| b == 0),
                "kind {kind} on a device: {r:?}"
            ),
        }
        free(env, p)?;
    }
    ids.sort_unstable();
    ids.dedup();
    check!(ids.len() == 3 && !ids.contains(&0), "ids {ids:?}");
    // malloc()'d memory: a shared system allocation, of no device.
    let v = system(4096, 1);
    let mut props: ze_memory_allocation_properties_t =
        desc(ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES, |_| ());
    // SAFETY: live arguments.
    ok("zeMemGetAllocProperties", unsafe {
        zeMemGetAllocProperties(env.ctx, v.as_ptr().cast(), &mut props, null_mut())
    })?;
    check!(
        props.type_ == ZE_MEMORY_TYPE_UNKNOWN,
        "malloc'd memory: type {}",
        props.type_
    );
    Ok(())
}

/// Fills with every pattern size the spec allows on a device, from an odd
/// byte, into system memory (`malloc`'d) and into a device allocation.
fn fill_patterns(env: &Env) -> Outcome {
    let l = immediate(env, env.a)?;
    let dev = alloc(env, ZE_MEMORY_TYPE_DEVICE, 16 << 10, env.a)?;
    let mut sys = vec![0u8; 16 << 10];
    for size in [1usize, 2, 4, 8, 16, 32, 64, 128] {
        let pattern: Vec<u8> = (0..size).map(|i| (i * 3 + size) as u8 | 0x80).collect();
        let (off, len) = (4093 - size, 4096 + 3 * size + 1);
        for dst in [sys.as_mut_ptr(), dev] {
            // SAFETY: our memory, not borrowed now (the device writes it).
            unsafe { std::ptr::write_bytes(dst, 0x11, 16 << 10) };
            // SAFETY: live arguments; `pattern` holds `size` bytes.
            ok("zeCommandListAppendMemoryFill", unsafe {
                zeCommandListAppendMemoryFill(
                    l,
                    dst.add(off).cast(),
                    pattern.as_ptr().cast(),
                    size,
                    len,
                    null_mut(),
                    0,
                    null_mut(),
                )
            })?;
            // SAFETY: the device is done with it.
            let got = unsafe { std::slice::from_raw_parts(dst, 16 << 10) };
            for (i, &x) in got[off..off + len].iter().enumerate() {
                check!(
                    x == pattern[i % size],
                    "{size}-byte pattern: byte {i} is {x:#x}"
                );
            }
            check!(
                got[..off]
                    .iter()
                    .chain(&got[off + len..])
                    .all(|&x| x == 0x11),
                "{size}-byte pattern: bytes around written"
            );
        }
    }
    free(env, dev)?;
    destroy_list(l)
}

/// Copies on one device out of another's memory: a P2P peer's in place,
/// an unreachable one's by migration; regular lists, a queue, a fence.
fn copy_across_devices(env: &Env) -> Outcome {
    let len = 256 << 10;
    let src = alloc(env, ZE_MEMORY_TYPE_DEVICE, len, env.a)?;
    let want = system(len, 7);
    // SAFETY: our allocation; the CPU writes it (a fault brings it home).
    unsafe { std::ptr::copy_nonoverlapping(want.as_ptr(), src, len) };
    for (dev, peer) in [(env.b, true), (env.c, false)] {
        // Back on `a`, as the allocation was made.
        let ai = env.index(env.a);
        env.rt
            .iter()
            .find(|r| r.index().ok() == Some(ai))
            .unwrap()
            .migrate(src as usize, len, msvm_rt::Location::Device)
            .map_err(|e| e.to_string())?;
        let mut dst = vec![0u8; len + 1];
        let s0 = env.stats(dev)?;
        let ld: ze_command_list_desc_t = desc(
            ZE_STRUCTURE_TYPE_COMMAND_LIST_DESC,
            |_: &mut ze_command_list_desc_t| (),
        );
        let qd: ze_command_queue_desc_t = desc(
            ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC,
            |_: &mut ze_command_queue_desc_t| (),
        );
        let fd: ze_fence_desc_t = desc(ZE_STRUCTURE_TYPE_FENCE_DESC, |_: &mut ze_fence_desc_t| ());
        let (mut l, mut q, mut f) = (null_mut(), null_mut(), null_mut());
        // SAFETY: live arguments throughout; `dst` outlives the job.
        unsafe {
            ok(
                "zeCommandListCreate",
                zeCommandListCreate(env.ctx, dev, &ld, &mut l),
            )?;
            ok(
                "zeCommandQueueCreate",
                zeCommandQueueCreate(env.ctx, dev, &qd, &mut q),
            )?;
            ok("zeFenceCreate", zeFenceCreate(q, &fd, &mut f))?;
            ok(
                "append copy",
                zeCommandListAppendMemoryCopy(
                    l,
                    dst.as_mut_ptr().add(1).cast(),
                    src.cast(),
                    len,
                    null_mut(),
                    0,
                    null_mut(),
                ),
            )?;
            ok("close", zeCommandListClose(l))?;
            expect("fence before", zeFenceQueryStatus(f), ZE_RESULT_NOT_READY)?;
            ok(
                "execute",
                zeCommandQueueExecuteCommandLists(q, 1, &mut l, f),
            )?;
            ok("fence", zeFenceHostSynchronize(f, WAIT))?;
            ok("fence status", zeFenceQueryStatus(f))?;
            ok("queue sync", zeCommandQueueSynchronize(q, WAIT))?;
        }
        check!(
            dst[1..] == want[..] && dst[0] == 0,
            "copy on gpu{} differs",
            env.index(dev)
        );
        let s1 = env.stats(dev)?;
        let p2p = s1.engine_p2p_read - s0.engine_p2p_read;
        if peer {
            check!(
                p2p == len as u64,
                "peer copy read {p2p} bytes over P2P, want {len}"
            );
            let r = env.residency(src as usize, len)?;
            check!(
                r.devices[ai as usize] == len as u64,
                "the peer's copy moved the source: {r:?}"
            );
        } else {
            check!(p2p == 0, "unreachable device read over P2P");
            let ci = env.index(dev) as usize;
            let r = env.residency(src as usize, len)?;
            check!(
                r.devices[ci] == len as u64,
                "the unreachable device did not migrate the source: {r:?}"
            );
        }
        // Run it again: a regular list runs each time it is submitted.
        dst.fill(0);
        // SAFETY: as above.
        unsafe {
            ok("reset fence", zeFenceReset(f))?;
            ok(
                "execute again",
                zeCommandQueueExecuteCommandLists(q, 1, &mut l, f),
            )?;
            ok("fence again", zeFenceHostSynchronize(f, WAIT))?;
            ok("zeFenceDestroy", zeFenceDestroy(f))?;
            ok("zeCommandQueueDestroy", zeCommandQueueDestroy(q))?;
        }
        check!(
            dst[1..] == want[..],
            "second run on gpu{} differs",
            env.index(dev)
        );
        destroy_list(l)?;
    }
    free(env, src)
}

fn copy_region(env: &Env) -> Outcome {
    let l = immediate(env, env.b)?;
    let (w, h, d) = (100u32, 7u32, 3u32);
    let (sp, ssp) = (128u32, 128 * 10);
    let (dp, dsp) = (333u32, 333 * 9);
    let src = system((ssp * 5) as usize, 3);
    let mut dst = vec![0u8; (dsp * 5) as usize];
    let sr = ze_copy_region_t {
        originX: 5,
        originY: 1,
        originZ: 1,
        width: w,
        height: h,
        depth: d,
    };
    let dr = ze_copy_region_t {
        originX: 17,
        originY: 2,
        originZ: 0,
        width: w,
        height: h,
        depth: d,
    };
    // SAFETY: live arguments; both buffers hold the regions.
    ok("zeCommandListAppendMemoryCopyRegion", unsafe {
        zeCommandListAppendMemoryCopyRegion(
            l,
            dst.as_mut_ptr().cast(),
            &dr,
            dp,
            dsp,
            src.as_ptr().cast(),
            &sr,
            sp,
            ssp,
            null_mut(),
            0,
            null_mut(),
        )
    })?;
    let mut want = vec![0u8; dst.len()];
    for z in 0..d {
        for y in 0..h {
            let s = ((sr.originZ + z) * ssp + (sr.originY + y) * sp + sr.originX) as usize;
            let t = ((dr.originZ + z) * dsp + (dr.originY + y) * dp + dr.originX) as usize;
            want[t..t + w as usize].copy_from_slice(&src[s..s + w as usize]);
        }
    }
    check!(dst == want, "region copy differs");
    destroy_list(l)
}

/// Advice and prefetch on `malloc`'d memory: preferred location a peer,
/// read-mostly, and prefetch.
fn advise_and_prefetch(env: &Env) -> Outcome {
    let len = 128 << 10;
    let block = Block::new()?;
    let p = block.ptr();
    let (ai, bi) = (env.index(env.a) as usize, env.index(env.b) as usize);
    let la = immediate(env, env.a)?;
    let lb = immediate(env, env.b)?;
    // SAFETY: live arguments; `p..p + len` lies in `block`.
    unsafe {
        ok(
            "advise preferred a",
            zeCommandListAppendMemAdvise(
                lb,
                env.a,
                p.cast(),
                len,
                ZE_MEMORY_ADVICE_SET_PREFERRED_LOCATION,
            ),
        )?;
        fill_byte("fill on b", lb, p, len, 5)?;
    }
    let r = env.residency(p as usize, len)?;
    check!(
        r.devices[ai] == len as u64,
        "a job of b's under preferred location a: {r:?}"
    );
    // SAFETY: live arguments.
    unsafe {
        ok(
            "prefetch to b",
            zeCommandListAppendMemoryPrefetch(lb, p.cast(), len),
        )?;
    }
    let r = env.residency(p as usize, len)?;
    check!(r.devices[bi] == len as u64, "after a prefetch to b: {r:?}");
    // SAFETY: live arguments.
    unsafe {
        ok(
            "clear preferred",
            zeCommandListAppendMemAdvise(
                la,
                env.a,
                p.cast(),
                len,
                ZE_MEMORY_ADVICE_CLEAR_PREFERRED_LOCATION,
            ),
        )?;
        ok(
            "prefetch home",
            zeContextEvictMemory(env.ctx, env.a, p.cast(), len),
        )?;
        ok(
            "read mostly",
            zeCommandListAppendMemAdvise(
                la,
                env.a,
                p.cast(),
                len,
                ZE_MEMORY_ADVICE_SET_READ_MOSTLY,
            ),
        )?;
    }
    // A copy out of read-mostly memory reads it where it is (replicas):
    // no page moves.
    let mut out = vec![0u8; len];
    let s0 = env.stats(env.a)?;
    // SAFETY: live arguments.
    unsafe {
        ok(
            "copy read-mostly",
            zeCommandListAppendMemoryCopy(
                la,
                out.as_mut_ptr().cast(),
                p.cast(),
                len,
                null_mut(),
                0,
                null_mut(),
            ),
        )?;
    }
    let s1 = env.stats(env.a)?;
    check!(out.iter().all(|&x| x == 5), "read-mostly copy differs");
    // The source stays in system RAM (only the destination moves).
    let r = env.residency(p as usize, len)?;
    check!(
        r.system == len as u64 && s1.to_device - s0.to_device <= (len / 4096 + 1) as u64,
        "read-mostly pages moved: {r:?}"
    );
    // The hints: taken, no effect on placement.
    for advice in [
        ZE_MEMORY_ADVICE_SET_NON_ATOMIC_MOSTLY,
        ZE_MEMORY_ADVICE_CLEAR_NON_ATOMIC_MOSTLY,
        ZE_MEMORY_ADVICE_BIAS_CACHED,
        ZE_MEMORY_ADVICE_BIAS_UNCACHED,
        ZE_MEMORY_ADVICE_CLEAR_READ_MOSTLY,
    ] {
        // SAFETY: live arguments.
        ok("hint", unsafe {
            zeCommandListAppendMemAdvise(la, env.a, p.cast(), len, advice)
        })?;
    }
    // Resident: a prefetch to the device.
    // SAFETY: live arguments.
    ok("make resident", unsafe {
        zeContextMakeMemoryResident(env.ctx, env.a, p.cast(), len)
    })?;
    let r = env.residency(p as usize, len)?;
    check!(r.devices[ai] == len as u64, "after make resident: {r:?}");
    drop(block);
    destroy_list(la)?;
    destroy_list(lb)
}

/// Level Zero 1.9's system-memory preferred location (advice 8 and 9),
/// which the 1.8 validation layer does not know: run without it.
fn system_advice(env: &Env) -> Outcome {
    let len = 64 << 10;
    let block = Block::new()?;
    let p = block.ptr();
    let l = immediate(env, env.a)?;
    let ai = env.index(env.a) as usize;
    // SAFETY: live arguments; the range lies in `block`.
    unsafe {
        ok(
            "system preferred",
            zeCommandListAppendMemAdvise(l, env.a, p.cast(), len, 8),
        )?;
        fill_byte("fill", l, p, len, 9)?;
    }
    let r = env.residency(p as usize, len)?;
    check!(r.system == len as u64, "under system preferred: {r:?}");
    // SAFETY: as above.
    unsafe {
        ok(
            "clear system preferred",
            zeCommandListAppendMemAdvise(l, env.a, p.cast(), len, 9),
        )?;
        fill_byte("fill", l, p, len, 9)?;
    }
    let r = env.residency(p as usize, len)?;
    check!(r.devices[ai] == len as u64, "after clearing: {r:?}");
    // SAFETY: the range lies in `block`; the device is done.
    let got = unsafe { std::slice::from_raw_parts(p, len) };
    check!(got.iter().all(|&x| x == 9), "fill lost");
    destroy_list(l)
}

fn events_and_barriers(env: &Env) -> Outcome {
    let pd: ze_event_pool_desc_t = desc(
        ZE_STRUCTURE_TYPE_EVENT_POOL_DESC,
        |p: &mut ze_event_pool_desc_t| {
            p.flags = ZE_EVENT_POOL_FLAG_HOST_VISIBLE;
            p.count = 3;
        },
    );
    let mut pool = null_mut();
    let mut ev = [null_mut(); 3];
    let mut dev = env.a;
    // SAFETY: live arguments throughout.
    unsafe {
        ok(
            "zeEventPoolCreate",
            zeEventPoolCreate(env.ctx, &pd, 1, &mut dev, &mut pool),
        )?;
        for (i, e) in ev.iter_mut().enumerate() {
            let ed: ze_event_desc_t =
                desc(ZE_STRUCTURE_TYPE_EVENT_DESC, |d: &mut ze_event_desc_t| {
                    d.index = i as u32
                });
            ok("zeEventCreate", zeEventCreate(pool, &ed, e))?;
        }
        let bad: ze_event_desc_t = desc(ZE_STRUCTURE_TYPE_EVENT_DESC, |d: &mut ze_event_desc_t| {
            d.index = 3
        });
        let mut x = null_mut();
        expect(
            "event index beyond the pool",
            zeEventCreate(pool, &bad, &mut x),
            ZE_RESULT_ERROR_INVALID_ARGUMENT,
        )?;
    }
    let len = 64 << 10;
    let mut buf = vec![0u8; len];
    let ld: ze_command_list_desc_t = desc(
        ZE_STRUCTURE_TYPE_COMMAND_LIST_DESC,
        |_: &mut ze_command_list_desc_t| (),
    );
    let qd: ze_command_queue_desc_t = desc(
        ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC,
        |q: &mut ze_command_queue_desc_t| q.mode = ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS,
    );
    let (mut l, mut q) = (null_mut(), null_mut());
    // SAFETY: live arguments; `buf` outlives the queue's work.
    unsafe {
        ok(
            "zeCommandListCreate",
            zeCommandListCreate(env.ctx, env.a, &ld, &mut l),
        )?;
        ok(
            "zeCommandQueueCreate",
            zeCommandQueueCreate(env.ctx, env.a, &qd, &mut q),
        )?;
        // Wait for ev0 (host), fill, signal ev1; barrier waiting ev1,
        // signaling ev2; reset ev0.
        ok(
            "fill",
            zeCommandListAppendMemoryFill(
                l,
                buf.as_mut_ptr().cast(),
                [0xabu8, 0xcd].as_ptr().cast(),
                2,
                len,
                ev[1],
                1,
                &mut ev[0],
            ),
        )?;
        ok(
            "barrier",
            zeCommandListAppendBarrier(l, ev[2], 1, &mut ev[1]),
        )?;
        ok("reset", zeCommandListAppendEventReset(l, ev[0]))?;
        ok("close", zeCommandListClose(l))?;
        expect(
            "append to a closed list",
            zeCommandListAppendSignalEvent(l, ev[0]),
            ZE_RESULT_ERROR_INVALID_ARGUMENT,
        )?;
        ok(
            "execute",
            zeCommandQueueExecuteCommandLists(q, 1, &mut l, null_mut()),
        )?;
        std::thread::sleep(std::time::Duration::from_millis(200));
        // Nothing ran: it waits for the host.
        expect(
            "ev1 before the host signal",
            zeEventQueryStatus(ev[1]),
            ZE_RESULT_NOT_READY,
        )?;
        expect(
            "queue before the host signal",
            zeCommandQueueSynchronize(q, 0),
            ZE_RESULT_NOT_READY,
        )?;
        expect(
            "ev2 with a timeout",
            zeEventHostSynchronize(ev[2], 1_000_000),
            ZE_RESULT_NOT_READY,
        )?;
        ok("host signal", zeEventHostSignal(ev[0]))?;
        ok("ev2", zeEventHostSynchronize(ev[2], WAIT))?;
        ok("ev1", zeEventQueryStatus(ev[1]))?;
        ok("queue", zeCommandQueueSynchronize(q, WAIT))?;
        expect(
            "ev0 reset by the list",
            zeEventQueryStatus(ev[0]),
            ZE_RESULT_NOT_READY,
        )?;
        ok("host reset", zeEventHostReset(ev[1]))?;
        expect(
            "ev1 after a host reset",
            zeEventQueryStatus(ev[1]),
            ZE_RESULT_NOT_READY,
        )?;
    }
    check!(
        buf.chunks(2).all(|c| c == [0xab, 0xcd]),
        "fill after the waits differs"
    );
    // An asynchronous immediate list: the append returns while its work
    // waits for the host.
    let qd: ze_command_queue_desc_t = desc(ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, |_| ());
    let mut al = null_mut();
    buf.fill(0);
    // SAFETY: live arguments; `buf` outlives the list's work.
    unsafe {
        ok(
            "async immediate",
            zeCommandListCreateImmediate(env.ctx, env.a, &qd, &mut al),
        )?;
        ok("host reset", zeEventHostReset(ev[0]))?;
        ok("host reset", zeEventHostReset(ev[1]))?;
        ok(
            "fill after ev0",
            zeCommandListAppendMemoryFill(
                al,
                buf.as_mut_ptr().cast(),
                [0x77u8].as_ptr().cast(),
                1,
                len,
                ev[1],
                1,
                &mut ev[0],
            ),
        )?;
        std::thread::sleep(std::time::Duration::from_millis(100));
        expect(
            "ev1 before the host signal",
            zeEventQueryStatus(ev[1]),
            ZE_RESULT_NOT_READY,
        )?;
        ok("host signal", zeEventHostSignal(ev[0]))?;
        ok("ev1", zeEventHostSynchronize(ev[1], WAIT))?;
    }
    check!(
        buf.iter().all(|&x| x == 0x77),
        "asynchronous immediate fill differs"
    );
    destroy_list(al)?;
    // A synchronous immediate list: signal and wait in order.
    let il = immediate(env, env.a)?;
    // SAFETY: live arguments.
    unsafe {
        ok("signal", zeCommandListAppendSignalEvent(il, ev[1]))?;
        ok("wait", zeCommandListAppendWaitOnEvents(il, 1, &mut ev[1]))?;
        ok("ev1", zeEventQueryStatus(ev[1]))?;
        let mut t = 0u64;
        let before = msvm_ns();
        ok(
            "timestamp",
            zeCommandListAppendWriteGlobalTimestamp(il, &mut t, null_mut(), 0, null_mut()),
        )?;
        let after = msvm_ns();
        check!(
            before <= t && t <= after,
            "timestamp {t} not in [{before}, {after}]"
        );
        // Kernel timestamps of an event signaled by a fill: when it ran.
        let mut ts = ze_kernel_timestamp_result_t::default();
        ok("host reset", zeEventHostReset(ev[2]))?;
        expect(
            "timestamp before the signal",
            zeEventQueryKernelTimestamp(ev[2], &mut ts),
            ZE_RESULT_NOT_READY,
        )?;
        let before = msvm_ns();
        ok(
            "fill",
            zeCommandListAppendMemoryFill(
                il,
                buf.as_mut_ptr().cast(),
                [1u8].as_ptr().cast(),
                1,
                len,
                ev[2],
                0,
                null_mut(),
            ),
        )?;
        let after = msvm_ns();
        ok(
            "zeEventQueryKernelTimestamp",
            zeEventQueryKernelTimestamp(ev[2], &mut ts),
        )?;
        let (s0, e0) = (ts.global.kernelStart, ts.global.kernelEnd);
        check!(
            before <= s0 && s0 < e0 && e0 <= after && ts.context.kernelEnd == e0,
            "fill's timestamps [{s0}, {e0}] not within [{before}, {after}]"
        );
        ok("reset list", zeCommandListReset(l))?;
        ok("destroy queue", zeCommandQueueDestroy(q))?;
        for e in ev {
            ok("zeEventDestroy", zeEventDestroy(e))?;
        }
        ok("zeEventPoolDestroy", zeEventPoolDestroy(pool))?;
    }
    destroy_list(il)?;
    destroy_list(l)
}

/// The host's monotonic clock, the driver's device clock.
fn msvm_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

fn errors(env: &Env) -> Outcome {
    let l = immediate(env, env.a)?;
    let mut buf = vec![0u8; 8192];
    let pat = [0u8; 256];
    // SAFETY: live arguments; the failing calls are refused before any
    // memory is touched, or touch none the process owns.
    unsafe {
        expect(
            "a 256-byte pattern",
            zeCommandListAppendMemoryFill(
                l,
                buf.as_mut_ptr().cast(),
                pat.as_ptr().cast(),
                256,
                64,
                null_mut(),
                0,
                null_mut(),
            ),
            ZE_RESULT_ERROR_INVALID_SIZE,
        )?;
        let p = buf.as_mut_ptr();
        expect(
            "overlapping copy",
            zeCommandListAppendMemoryCopy(
                l,
                p.add(10).cast(),
                p.cast(),
                100,
                null_mut(),
                0,
                null_mut(),
            ),
            ZE_RESULT_ERROR_OVERLAPPING_REGIONS,
        )?;
        // Unmapped memory: the device's EFAULT.
        expect(
            "copy from unmapped memory",
            zeCommandListAppendMemoryCopy(
                l,
                p.cast(),
                4096 as *const c_void,
                64,
                null_mut(),
                0,
                null_mut(),
            ),
            ZE_RESULT_ERROR_INVALID_ARGUMENT,
        )?;
        let qd: ze_command_queue_desc_t = desc(
            ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC,
            |q: &mut ze_command_queue_desc_t| q.ordinal = 1,
        );
        let mut q = null_mut();
        expect(
            "queue of group 1",
            zeCommandQueueCreate(env.ctx, env.a, &qd, &mut q),
            ZE_RESULT_ERROR_INVALID_ARGUMENT,
        )?;
        let spirv = [0x07u8, 0x23, 0x02, 0x03];
        let md: ze_module_desc_t =
            desc(ZE_STRUCTURE_TYPE_MODULE_DESC, |d: &mut ze_module_desc_t| {
                d.format = ZE_MODULE_FORMAT_IL_SPIRV;
                d.inputSize = spirv.len();
                d.pInputModule = spirv.as_ptr();
            });
        let mut m = 8usize as ze_module_handle_t;
        expect(
            "module",
            zeModuleCreate(env.ctx, env.a, &md, &mut m, null_mut()),
            ZE_RESULT_ERROR_UNSUPPORTED_FEATURE,
        )?;
        check!(m.is_null(), "a module handle from a failed create: {m:?}");
        let mut other = 0u8;
        expect(
            "free of memory not allocated",
            zeMemFree(env.ctx, (&raw mut other).cast()),
            ZE_RESULT_ERROR_INVALID_ARGUMENT,
        )?;
        // A regular list must be closed to run.
        let ld: ze_command_list_desc_t = desc(
            ZE_STRUCTURE_TYPE_COMMAND_LIST_DESC,
            |_: &mut ze_command_list_desc_t| (),
        );
        let qd: ze_command_queue_desc_t = desc(
            ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC,
            |_: &mut ze_command_queue_desc_t| (),
        );
        let (mut rl, mut q) = (null_mut(), null_mut());
        ok(
            "zeCommandListCreate",
            zeCommandListCreate(env.ctx, env.a, &ld, &mut rl),
        )?;
        ok(
            "zeCommandQueueCreate",
            zeCommandQueueCreate(env.ctx, env.a, &qd, &mut q),
        )?;
        expect(
            "an open list",
            zeCommandQueueExecuteCommandLists(q, 1, &mut rl, null_mut()),
            ZE_RESULT_ERROR_INVALID_ARGUMENT,
        )?;
        // A failure in a submission: its synchronize says so, once.
        ok(
            "append",
            zeCommandListAppendMemoryCopy(
                rl,
                p.cast(),
                4096 as *const c_void,
                64,
                null_mut(),
                0,
                null_mut(),
            ),
        )?;
        ok("close", zeCommandListClose(rl))?;
        ok(
            "execute",
            zeCommandQueueExecuteCommandLists(q, 1, &mut rl, null_mut()),
        )?;
        expect(
            "synchronize after a fault",
            zeCommandQueueSynchronize(q, WAIT),
            ZE_RESULT_ERROR_INVALID_ARGUMENT,
        )?;
        ok("synchronize again", zeCommandQueueSynchronize(q, WAIT))?;
        // The submission's fence says so too.
        let fd: ze_fence_desc_t = desc(ZE_STRUCTURE_TYPE_FENCE_DESC, |_| ());
        let mut f = null_mut();
        ok("zeFenceCreate", zeFenceCreate(q, &fd, &mut f))?;
        ok(
            "execute",
            zeCommandQueueExecuteCommandLists(q, 1, &mut rl, f),
        )?;
        expect(
            "fence after a fault",
            zeFenceHostSynchronize(f, WAIT),
            ZE_RESULT_ERROR_INVALID_ARGUMENT,
        )?;
        let _ = zeCommandQueueSynchronize(q, WAIT);
        ok("zeFenceDestroy", zeFenceDestroy(f))?;
        // An immediate list's failed command still signals its event.
        let pd: ze_event_pool_desc_t = desc(
            ZE_STRUCTURE_TYPE_EVENT_POOL_DESC,
            |p: &mut ze_event_pool_desc_t| p.count = 1,
        );
        let (mut pool, mut ev) = (null_mut(), null_mut());
        ok(
            "zeEventPoolCreate",
            zeEventPoolCreate(env.ctx, &pd, 0, null_mut(), &mut pool),
        )?;
        let ed: ze_event_desc_t = desc(ZE_STRUCTURE_TYPE_EVENT_DESC, |_| ());
        ok("zeEventCreate", zeEventCreate(pool, &ed, &mut ev))?;
        expect(
            "failing copy with a signal",
            zeCommandListAppendMemoryCopy(
                l,
                p.cast(),
                4096 as *const c_void,
                64,
                ev,
                0,
                null_mut(),
            ),
            ZE_RESULT_ERROR_INVALID_ARGUMENT,
        )?;
        ok("its event", zeEventQueryStatus(ev))?;
        ok("zeEventDestroy", zeEventDestroy(ev))?;
        ok("zeEventPoolDestroy", zeEventPoolDestroy(pool))?;
        // An immediate list cannot be submitted.
        expect(
            "an immediate list in a queue",
            zeCommandQueueExecuteCommandLists(q, 1, &mut l.clone(), null_mut()),
            ZE_RESULT_ERROR_INVALID_COMMAND_LIST_TYPE,
        )?;
        // Overlapping regions.
        let r = ze_copy_region_t {
            originX: 0,
            originY: 0,
            originZ: 0,
            width: 16,
            height: 4,
            depth: 1,
        };
        expect(
            "overlapping regions",
            zeCommandListAppendMemoryCopyRegion(
                l,
                p.add(64).cast(),
                &r,
                32,
                0,
                p.cast(),
                &r,
                32,
                0,
                null_mut(),
                0,
                null_mut(),
            ),
            ZE_RESULT_ERROR_OVERLAPPING_REGIONS,
        )?;
        ok("destroy queue", zeCommandQueueDestroy(q))?;
        destroy_list(rl)?;
    }
    destroy_list(l)
}

/// Fresh anonymous memory of `len` bytes, unmapped on drop.
struct Region {
    map: std::ptr::NonNull<c_void>,
    len: usize,
}

impl Region {
    fn new(len: usize) -> Result<Self, String> {
        // SAFETY: a new private mapping, aliasing nothing.
        let map = unsafe {
            nix::sys::mman::mmap_anonymous(
                None,
                std::num::NonZeroUsize::new(len).ok_or("empty region")?,
                nix::sys::mman::ProtFlags::PROT_READ | nix::sys::mman::ProtFlags::PROT_WRITE,
                nix::sys::mman::MapFlags::MAP_PRIVATE,
            )
        }
        .map_err(|e| e.to_string())?;
        Ok(Self { map, len })
    }

    fn addr(&self) -> usize {
        self.map.as_ptr() as usize
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: our mapping, readable; u8 has no invalid values.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().cast(), self.len) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: our mapping, no longer used.
        let _ = unsafe { nix::sys::mman::munmap(self.map, self.len) };
    }
}

/// `make bench`'s Level Zero overhead: a prefetch to gpu a, a fill with a
/// 16-byte pattern and a copy, over the same bytes through Level Zero (a
/// synchronous immediate list) and through `msvm-rt` (the same ioctls on a
/// file of the test's own), alternately, both starting from system RAM;
/// the median of each, and their ratio (at most 1.05 is the target for
/// 64 MiB).
fn bench(env: &Env) -> Outcome {
    let ai = env.index(env.a);
    let rt = env
        .rt
        .iter()
        .find(|r| r.index().ok() == Some(ai))
        .ok_or("no msvm file")?;
    let l = immediate(env, env.a)?;
    let pattern: Vec<u8> = (0..16u8).map(|i| i * 11 + 1).collect();
    for (name, len, rounds) in [
        ("ze_overhead_64M", 64usize << 20, 7),
        ("ze_overhead_4K", 4096, 301),
    ] {
        let (src, dst) = (Region::new(len)?, Region::new(len)?);
        let (s, d) = (src.addr(), dst.addr());
        let mut times = [Vec::new(), Vec::new()];
        for round in 0..rounds {
            for k in [round % 2, 1 - round % 2] {
                for a in [s, d] {
                    rt.migrate(a, len, msvm_rt::Location::System)
                        .map_err(|e| e.to_string())?;
                }
                let t = Instant::now();
                if k == 0 {
                    // SAFETY: live arguments; the regions outlive the jobs.
                    unsafe {
                        ok(
                            "prefetch",
                            zeCommandListAppendMemoryPrefetch(l, s as *const c_void, len),
                        )?;
                        ok(
                            "fill",
                            zeCommandListAppendMemoryFill(
                                l,
                                s as *mut c_void,
                                pattern.as_ptr().cast(),
                                16,
                                len,
                                null_mut(),
                                0,
                                null_mut(),
                            ),
                        )?;
                        ok(
                            "copy",
                            zeCommandListAppendMemoryCopy(
                                l,
                                d as *mut c_void,
                                s as *const c_void,
                                len,
                                null_mut(),
                                0,
                                null_mut(),
                            ),
                        )?;
                    }
                } else {
                    let e = |e: msvm_rt::Error| e.to_string();
                    rt.prefetch(s, len, msvm_rt::Place::Here).map_err(e)?;
                    rt.fill(&pattern, s, len, false).map_err(e)?;
                    rt.exec(msvm_rt::Exec::Copy { src: s }, d, len, false)
                        .map_err(e)?;
                }
                times[k].push(t.elapsed().as_secs_f64());
            }
        }
        let got = dst.bytes();
        check!(
            got.iter().enumerate().all(|(i, &x)| x == pattern[i % 16]),
            "{name}: the copy differs"
        );
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (ze, rt_s) = (median(&mut times[0]), median(&mut times[1]));
        println!("BENCH {name}.ze_ms {:.3} ms", ze * 1e3);
        println!("BENCH {name}.msvm_rt_ms {:.3} ms", rt_s * 1e3);
        println!("BENCH {name} {:.3} x", ze / rt_s);
    }
    destroy_list(l)
}

type TestFn = fn(&Env) -> Outcome;

const TESTS: &[(&str, TestFn)] = &[
    ("ze_driver_and_devices", driver_and_devices),
    ("ze_p2p_matrix_from_query", p2p_matrix),
    ("ze_alloc_kinds_and_properties", alloc_kinds),
    ("ze_fill_every_pattern_size", fill_patterns),
    (
        "ze_copy_across_devices_peer_and_unreachable",
        copy_across_devices,
    ),
    ("ze_copy_region", copy_region),
    ("ze_advise_and_prefetch", advise_and_prefetch),
    ("ze_events_fences_barriers", events_and_barriers),
    ("ze_errors", errors),
];

fn main() {
    let filter = std::env::args().nth(1).unwrap_or_default();
    let env = match setup() {
        Ok(e) => e,
        Err(e) => {
            println!("not ok 1 ze_setup: {e}");
            println!("msvm-tests: 0 passed, 1 failed (ze-tests)");
            std::process::exit(1);
        }
    };
    let tests: Vec<(&str, TestFn)> = if filter == "system-advice" {
        vec![("ze_system_memory_preferred_advice", system_advice)]
    } else if filter == "bench" {
        vec![("ze_bench_overhead", bench)]
    } else {
        TESTS
            .iter()
            .copied()
            .filter(|t| t.0.contains(&filter))
            .collect()
    };
    let (mut pass, mut fail) = (0, 0);
    for (i, (name, f)) in tests.iter().enumerate() {
        let t = Instant::now();
        match f(&env) {
            Ok(()) => {
                pass += 1;
                println!("ok {} {name} ({} ms)", i + 1, t.elapsed().as_millis());
            }
            Err(e) => {
                fail += 1;
                println!("not ok {} {name}: {e}", i + 1);
            }
        }
    }
    // SAFETY: a live context, no longer used.
    let r = unsafe { zeContextDestroy(env.ctx) };
    if r != ZE_RESULT_SUCCESS {
        fail += 1;
        println!("not ok zeContextDestroy: {r:#x}");
    }
    println!(
        "msvm-tests: {pass} passed, {fail} failed (ze-tests{})",
        if filter.is_empty() {
            String::new()
        } else {
            format!(" {filter}")
        }
    );
    std::process::exit(i32::from(fail > 0));
}
