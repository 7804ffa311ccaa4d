// SPDX-License-Identifier: GPL-2.0

//! The C `struct device` behind a [`Device`], for the C calls that take one
//! (`Device::as_raw` is private to the `kernel` crate).

use kernel::{bindings, device::Device};

/// The raw `struct device` behind `dev`, valid for as long as the borrow.
///
/// `Device` is `#[repr(transparent)]` over `Opaque<bindings::device>` (its
/// documented layout), so the cast yields the C object.
pub(super) fn raw(dev: &Device) -> *mut bindings::device {
    core::ptr::from_ref(dev)
        .cast::<bindings::device>()
        .cast_mut()
}
