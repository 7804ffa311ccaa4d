// SPDX-License-Identifier: GPL-2.0

//! A device that maps for DMA, for KUnit cases ([`with_device`]): a
//! device of KUnit's bus, bound to a driver of its own while a case uses
//! it, and whether a frame is RAM ([`pfn_valid`]), for cases that map
//! made-up bus addresses. Cases that need memory of a process take it
//! from [`super::kunit_mm`].

#![cfg(CONFIG_KUNIT = "y")]

use kernel::{
    device::{Bound, Device},
    error::from_err_ptr,
    prelude::*,
};

use super::bindings as b;

/// Calls `f` with a device of the running KUnit case, bound (to a driver
/// of its own on KUnit's bus) for as long as `f` runs, and unregistered
/// after it: what DMA mappings are made for ([`super::dma`],
/// [`super::p2p`]). Its DMA mask is 64 bits, and no IOMMU stands behind it
/// (a bus address is the physical address). `EINVAL` outside a KUnit
/// case, the kernel's error if the device cannot be made (registered, or
/// given its mask). A case that fails an assertion in `f` leaves the
/// device to KUnit, which unregisters it after the case.
pub(crate) fn with_device<R>(f: impl FnOnce(&Device<Bound>) -> R) -> Result<R> {
    if !kernel::kunit::in_kunit_test() {
        return Err(EINVAL);
    }
    // SAFETY: a plain call, from a KUnit case's kthread (checked above).
    let raw = from_err_ptr(unsafe { b::msvm_kunit_device() })?;
    // Never NULL (an error is an `ERR_PTR`), but said rather than assumed.
    let raw = core::ptr::NonNull::new(raw).ok_or(ENOMEM)?;
    // SAFETY: a registered device, whose registration holds a reference
    // and which is bound to its driver until it is unregistered below (or,
    // if the case ends inside `f`, by KUnit after the case): so for every
    // borrow `f` gets, which cannot outlive the call.
    let r = f(unsafe { Device::<Bound>::from_raw(raw.as_ptr()) });
    // SAFETY: made above by `msvm_kunit_device()` in this case, not
    // unregistered yet; no borrow of it is left (`f` returned).
    unsafe { b::msvm_kunit_device_unregister(raw.as_ptr()) };
    Ok(r)
}

/// Whether page frame `pfn` has a `struct page` (`pfn_valid()`): RAM, or
/// device memory the kernel made pages for. A case that maps a made-up
/// bus address for DMA maps none such (`dma_map_resource` is for MMIO).
pub(crate) fn pfn_valid(pfn: usize) -> bool {
    // SAFETY: a plain lookup of a frame number, any.
    unsafe { b::msvm_pfn_valid(pfn) }
}
