//! Unified shared memory: host, device and shared allocations, and the
//! memory entry points. Every allocation is anonymous memory of this
//! process (msvm works on the process's address space: any pointer the
//! process has, `malloc`'d memory among them, is usable by every device);
//! the kinds differ in where the pages live and how devices reach them:
//!
//! - host: system RAM, used in place by every device (DMA);
//! - device: moved into the device's VRAM at allocation; preferred there,
//!   so the devices of its owner group work on it in place over P2P and
//!   others migrate it (a CPU touch faults it home, as any device page);
//! - shared: wherever the last device or CPU that used it put it.
//!
//! Memory the driver did not allocate (`malloc`, the stack, files) is a
//! shared system allocation: `ZE_MEMORY_TYPE_UNKNOWN` in its properties.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::num::NonZeroUsize;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};

use msvm_rt::Location;
use nix::sys::mman::{mmap_anonymous, munmap, MapFlags, ProtFlags};

use crate::attrs::{Preferred, ATTRS};
use crate::context::{self, Context};
use crate::device::{self, Device};
use crate::driver::DRIVER;
use crate::result::{entry, input, output, retry, ZeResult};
use crate::sys::*;

/// The page size.
pub(crate) const PAGE: usize = 4096;

/// Allocation IDs (`ze_memory_allocation_properties_t::id`), from 1.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// One allocation.
#[derive(Debug)]
pub(crate) struct Alloc {
    /// The mapping behind it (from `map`, `map_len` bytes).
    map: usize,
    map_len: usize,
    /// What the application sees.
    size: usize,
    kind: ze_memory_type_t,
    device: Option<Arc<Device>>,
    id: u64,
}

/// The allocations of a context, by base address.
#[derive(Debug, Default)]
pub(crate) struct Allocs(BTreeMap<usize, Alloc>);

impl Allocs {
    /// The allocation holding `addr`, and its base.
    fn find(&self, addr: usize) -> Option<(usize, &Alloc)> {
        let (&base, a) = self.0.range(..=addr).next_back()?;
        (addr < base + a.size.max(1)).then_some((base, a))
    }

    /// Frees them all (a context's end).
    pub(crate) fn free_all(self) -> ZeResult {
        let mut r = Ok(());
        for a in self.0.into_values() {
            r = r.and(a.free());
        }
        r
    }
}

impl Alloc {
    /// Maps `size` bytes aligned to `align` (0 or a power of two).
    fn map(size: usize, align: usize, kind: ze_memory_type_t) -> ZeResult<(usize, Self)> {
        if size == 0 {
            return Err(ZE_RESULT_ERROR_UNSUPPORTED_SIZE);
        }
        if align != 0 && !align.is_power_of_two() {
            return Err(ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT);
        }
        let align = align.max(PAGE);
        let map_len = size
            .checked_next_multiple_of(PAGE)
            .and_then(|n| n.checked_add(align - PAGE))
            .ok_or(ZE_RESULT_ERROR_UNSUPPORTED_SIZE)?;
        let len = NonZeroUsize::new(map_len).ok_or(ZE_RESULT_ERROR_UNSUPPORTED_SIZE)?;
        // SAFETY: a new anonymous mapping, at an address of the kernel's
        // choosing: it aliases nothing.
        let p = unsafe {
            mmap_anonymous(
                None,
                len,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_PRIVATE,
            )
        }
        .map_err(|_| ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY)?;
        let map = p.as_ptr() as usize;
        let base = map.next_multiple_of(align);
        let a = Alloc {
            map,
            map_len,
            size,
            kind,
            device: None,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        };
        Ok((base, a))
    }

    /// The page range the application's bytes lie in.
    fn pages(&self, base: usize) -> (usize, usize) {
        (base, base + self.size.next_multiple_of(PAGE))
    }

    /// Unmaps it, its attributes back to the default first (msvm keeps a
    /// range's attributes past munmap; the next mapping there must not
    /// inherit them).
    fn free(self) -> ZeResult {
        let r = ATTRS.update(
            (self.map, self.map + self.map_len),
            |a| *a = Default::default(),
            DRIVER.devices(),
        );
        let p = NonNull::new(self.map as *mut c_void).ok_or(ZE_RESULT_ERROR_UNKNOWN)?;
        // SAFETY: the mapping `map` made; its allocation is gone from its
        // context, so no pointer the driver hands out points into it.
        unsafe { munmap(p, self.map_len) }.map_err(|_| ZE_RESULT_ERROR_UNKNOWN)?;
        r
    }
}

/// Registers `a` (at `base`) in `ctx` and writes the pointer out.
fn publish(ctx: &Context, base: usize, a: Alloc, out: &mut *mut c_void) -> ZeResult {
    ctx.allocs
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .0
        .insert(base, a);
    *out = base as *mut c_void;
    Ok(())
}

/// `zeMemAllocHost`: system RAM that every device uses in place.
///
/// # Safety
///
/// `desc` must be null or valid for reading; `out` null or valid for
/// writing.
pub(crate) unsafe extern "C" fn alloc_host(
    h: ze_context_handle_t,
    desc: *const ze_host_mem_alloc_desc_t,
    size: usize,
    align: usize,
    out: *mut *mut c_void,
) -> ze_result_t {
    entry(|| {
        let ctx = context::get(h)?;
        // SAFETY: the caller's contract.
        unsafe { input(desc) }?;
        // SAFETY: the caller's contract.
        let out = unsafe { output(out) }?;
        let (base, a) = Alloc::map(size, align, ZE_MEMORY_TYPE_HOST)?;
        let set = ATTRS.update(
            a.pages(base),
            |x| {
                x.preferred = Preferred::System;
                x.in_place = true;
            },
            DRIVER.devices(),
        );
        if let Err(r) = set {
            a.free()?;
            return Err(r);
        }
        publish(&ctx, base, a, out)
    })
}

/// `zeMemAllocDevice`: moved into the device's VRAM now, and preferred
/// there.
///
/// # Safety
///
/// As for [`alloc_host`].
pub(crate) unsafe extern "C" fn alloc_device(
    h: ze_context_handle_t,
    desc: *const ze_device_mem_alloc_desc_t,
    size: usize,
    align: usize,
    dev: ze_device_handle_t,
    out: *mut *mut c_void,
) -> ze_result_t {
    entry(|| {
        let ctx = context::get(h)?;
        let d = device::get(dev)?;
        // SAFETY: the caller's contract.
        unsafe { input(desc) }?;
        // SAFETY: the caller's contract.
        let out = unsafe { output(out) }?;
        if size as u64 > d.info.vram_size {
            return Err(ZE_RESULT_ERROR_UNSUPPORTED_SIZE);
        }
        let (base, mut a) = Alloc::map(size, align, ZE_MEMORY_TYPE_DEVICE)?;
        a.device = Some(d.clone());
        let (start, end) = a.pages(base);
        let placed = ATTRS
            .update(
                (start, end),
                |x| x.preferred = Preferred::Device(d.info.index),
                DRIVER.devices(),
            )
            .and_then(|()| retry(|| d.rt.migrate(start, end - start, Location::Device)));
        match placed {
            Ok(m) if m.no_vram == 0 => publish(&ctx, base, a, out),
            Ok(_) => {
                a.free()?;
                Err(ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)
            }
            Err(r) => {
                a.free()?;
                Err(r)
            }
        }
    })
}

/// `zeMemAllocShared`: pages go where they are used (`dev`, optional, is
/// only recorded).
///
/// # Safety
///
/// `device_desc` and `host_desc` must be null or valid for reading; `out`
/// null or valid for writing.
pub(crate) unsafe extern "C" fn alloc_shared(
    h: ze_context_handle_t,
    device_desc: *const ze_device_mem_alloc_desc_t,
    host_desc: *const ze_host_mem_alloc_desc_t,
    size: usize,
    align: usize,
    dev: ze_device_handle_t,
    out: *mut *mut c_void,
) -> ze_result_t {
    entry(|| {
        let ctx = context::get(h)?;
        let d = if dev.is_null() {
            None
        } else {
            Some(device::get(dev)?)
        };
        // SAFETY: the caller's contract.
        unsafe { input(device_desc) }?;
        // SAFETY: the caller's contract.
        unsafe { input(host_desc) }?;
        // SAFETY: the caller's contract.
        let out = unsafe { output(out) }?;
        let (base, mut a) = Alloc::map(size, align, ZE_MEMORY_TYPE_SHARED)?;
        a.device = d;
        publish(&ctx, base, a, out)
    })
}

/// `zeMemFree`.
pub(crate) extern "C" fn free(h: ze_context_handle_t, ptr: *mut c_void) -> ze_result_t {
    entry(|| {
        let ctx = context::get(h)?;
        if ptr.is_null() {
            return Err(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
        }
        let a = ctx
            .allocs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .0
            .remove(&(ptr as usize))
            .ok_or(ZE_RESULT_ERROR_INVALID_ARGUMENT)?;
        a.free()
    })
}

/// `zeMemGetAllocProperties`: `ZE_MEMORY_TYPE_UNKNOWN` for memory the
/// driver did not allocate (a shared system allocation).
///
/// # Safety
///
/// `props` must be null or valid for reading and writing; `dev` null or
/// valid for writing.
pub(crate) unsafe extern "C" fn get_alloc_properties(
    h: ze_context_handle_t,
    ptr: *const c_void,
    props: *mut ze_memory_allocation_properties_t,
    dev: *mut ze_device_handle_t,
) -> ze_result_t {
    entry(|| {
        let ctx = context::get(h)?;
        if ptr.is_null() {
            return Err(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
        }
        // SAFETY: the caller's contract.
        let p = unsafe { output(props) }?;
        let allocs = ctx.allocs.lock().unwrap_or_else(PoisonError::into_inner);
        let found = allocs.find(ptr as usize);
        p.type_ = found.map_or(ZE_MEMORY_TYPE_UNKNOWN, |(_, a)| a.kind);
        p.id = found.map_or(0, |(_, a)| a.id);
        p.pageSize = PAGE as u64;
        if !dev.is_null() {
            let h = found
                .and_then(|(_, a)| a.device.as_ref())
                .map_or(std::ptr::null_mut(), Device::handle);
            // SAFETY: non-null, so valid for writing (the caller's
            // contract).
            unsafe { dev.write(h) };
        }
        Ok(())
    })
}

/// `zeMemGetAddressRange`: the allocation holding `ptr`; an invalid
/// argument for memory the driver did not allocate.
///
/// # Safety
///
/// `base` and `size` must each be null or valid for writing.
pub(crate) unsafe extern "C" fn get_address_range(
    h: ze_context_handle_t,
    ptr: *const c_void,
    base: *mut *mut c_void,
    size: *mut usize,
) -> ze_result_t {
    entry(|| {
        let ctx = context::get(h)?;
        if ptr.is_null() {
            return Err(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
        }
        let allocs = ctx.allocs.lock().unwrap_or_else(PoisonError::into_inner);
        let (b, a) = allocs
            .find(ptr as usize)
            .ok_or(ZE_RESULT_ERROR_INVALID_ARGUMENT)?;
        if !base.is_null() {
            // SAFETY: non-null, so valid for writing.
            unsafe { base.write(b as *mut c_void) };
        }
        if !size.is_null() {
            // SAFETY: non-null, so valid for writing.
            unsafe { size.write(a.size) };
        }
        Ok(())
    })
}

/// `zeVirtualMemQueryPageSize`: the page size msvm places memory in. The
/// rest of the virtual memory API (reservations, physical memory) is
/// unsupported.
///
/// # Safety
///
/// `out` must be null or valid for writing.
pub(crate) unsafe extern "C" fn query_page_size(
    h: ze_context_handle_t,
    dev: ze_device_handle_t,
    _size: usize,
    out: *mut usize,
) -> ze_result_t {
    entry(|| {
        context::get(h)?;
        device::get(dev)?;
        // SAFETY: the caller's contract.
        *unsafe { output(out) }? = PAGE;
        Ok(())
    })
}
