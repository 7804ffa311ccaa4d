// SPDX-License-Identifier: GPL-2.0

//! DRM client statistics (fdinfo, `Documentation/gpu/drm-usage-stats.rst`)
//! for a Rust DRM driver.
//!
//! Linux 7.3's Rust DRM abstraction builds a driver's `drm_driver` (with
//! `show_fdinfo` NULL) and its `file_operations` (with no `show_fdinfo`)
//! as constants, and offers no way to add fdinfo. The least invasive way:
//! before the device is registered, point it at a copy of both with the
//! two filled in (`msvm_drm_add_fdinfo` in `src/helpers.c`), every other
//! field as the abstraction made it. The DRM core's `drm_show_fdinfo()`
//! then prints its lines (`drm-driver`, `drm-client-id`, `drm-pdev`) and
//! calls the driver's [`ShowFdinfo::show_fdinfo`] for the rest.
//! Upstream, `drm::Driver` would gain a `show_fdinfo` of this shape.

use core::marker::PhantomData;

use kernel::{drm, prelude::*};

use super::bindings as b;

/// A driver whose files show statistics in fdinfo.
pub(crate) trait ShowFdinfo: drm::Driver + Sized {
    /// Writes the statistics of `file`, a file of `dev`, to `out` (after
    /// the DRM core's lines). Runs in the reader's context (may sleep),
    /// for a file that stays open meanwhile.
    fn show_fdinfo(
        dev: &drm::Device<Self, drm::Ioctl>,
        file: &drm::File<Self::File>,
        out: &mut FdinfoOut<'_>,
    );
}

/// Where [`ShowFdinfo::show_fdinfo`] writes: the reader's `drm_printer`.
///
/// # Invariants
///
/// `p` is the `drm_printer` the DRM core passed to `show_fdinfo`, valid
/// for `'a`.
pub(crate) struct FdinfoOut<'a> {
    p: *mut b::drm_printer,
    _life: PhantomData<&'a mut b::drm_printer>,
}

impl FdinfoOut<'_> {
    /// `drm-<stat>-<region>: <size>` (`drm_fdinfo_print_size`: in B, KiB
    /// or MiB, whichever divides it).
    pub(crate) fn size(&mut self, stat: &CStr, region: &CStr, bytes: u64) {
        // SAFETY: `self.p` is valid (type invariant); the strings are
        // NUL-terminated and outlive the call.
        unsafe { b::msvm_fdinfo_size(self.p, stat.as_char_ptr(), region.as_char_ptr(), bytes) };
    }

    /// `drm-engine-<engine>: <ns> ns`.
    pub(crate) fn engine(&mut self, engine: &CStr, ns: u64) {
        // SAFETY: as in `size`.
        unsafe { b::msvm_fdinfo_engine(self.p, engine.as_char_ptr(), ns) };
    }
}

/// The `show_fdinfo` of a driver `T`.
///
/// # Safety
///
/// Only for the DRM core's `drm_show_fdinfo()` on a device of driver `T`:
/// `p` its printer, `f` the DRM file of an open file of the device.
unsafe extern "C" fn show<T: ShowFdinfo>(p: *mut b::drm_printer, f: *mut b::drm_file) {
    // SAFETY: `f` is an open file's `drm_file` (the caller's promise): its
    // minor and the minor's device are valid while the file is open, and
    // the file holds a reference on the device. The device was registered
    // (its render node was opened), which is what `Ioctl` asks, and it is
    // a device of `T` (the caller's promise).
    let dev = unsafe { drm::Device::<T, drm::Ioctl>::from_raw((*(*f).minor).dev) };
    // SAFETY: `f` is valid for the call and its `driver_priv` is `T`'s file
    // (the abstraction's `open` callback made it).
    let file = unsafe { drm::File::<T::File>::from_raw(f) };
    // INVARIANT: `p` is the printer of this call.
    let mut out = FdinfoOut {
        p,
        _life: PhantomData,
    };
    T::show_fdinfo(dev, file, &mut out);
}

/// Makes the files of `dev`, a DRM device of `parent`, show fdinfo through
/// `T`'s [`ShowFdinfo::show_fdinfo`]: before it is registered. Fails with
/// `EINVAL` if another driver's devices took the module's one copy of the
/// DRM tables first, or if `dev` does not start with its `drm_device`.
pub(crate) fn add_fdinfo<T: ShowFdinfo>(
    dev: &drm::UnregisteredDevice<T>,
    parent: &kernel::device::Device,
) -> Result {
    let dev: &drm::Device<T> = dev;
    // The `drm_device` is the first field of the `#[repr(C)]`
    // `drm::Device` (its layout in this kernel, the same in every
    // context), checked: its parent is `parent`.
    let raw = core::ptr::from_ref(dev).cast_mut().cast::<b::drm_device>();
    // `device::Device` is `#[repr(transparent)]` over
    // `Opaque<bindings::device>`.
    let parent = core::ptr::from_ref(parent)
        .cast::<kernel::bindings::device>()
        .cast_mut();
    // SAFETY: `raw` points into `dev`, at least a `drm_device`'s size (the
    // `Opaque` first field): reading its `dev` field reads initialised
    // memory of the device, which `drm_dev_init` set.
    if unsafe { (*raw).dev } != parent {
        return Err(EINVAL);
    }
    // SAFETY: `raw` is the device's `drm_device`, alive while `dev` is
    // borrowed, and not registered yet (`UnregisteredDevice`): nothing
    // reads its `driver` concurrently. The copy keeps every callback of the
    // abstraction's tables, and `show::<T>` is the `show_fdinfo` of a
    // device of `T`, which the helper gives only devices of the driver the
    // copy was made from.
    let ret = unsafe { b::msvm_drm_add_fdinfo(raw, Some(show::<T>)) };
    kernel::error::to_result(ret)
}
