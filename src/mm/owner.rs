// SPDX-License-Identifier: GPL-2.0

//! The owner tokens of device-private memory (`dev_private_owner`).

use core::ffi::c_void;

/// A `dev_private_owner` token: the identity of an owner group of
/// device-private memory (HMM and migration tell its pages from others' by
/// it). An address, compared and never dereferenced.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Owner(*const c_void);

// SAFETY: an address that is only compared, never dereferenced.
unsafe impl Send for Owner {}
// SAFETY: see `Send`.
unsafe impl Sync for Owner {}

impl Owner {
    /// No owner: a walk with it reports no device-private page as it is.
    pub(crate) const NONE: Self = Self(core::ptr::null());

    /// The token at the address of `token`: a static of its own, not a
    /// zero-sized or promoted constant (their addresses may coincide), so
    /// that no two groups share a token.
    pub(crate) fn of<T>(token: &'static T) -> Self {
        Self(core::ptr::from_ref(token).cast())
    }

    /// The address, for the C structs that carry it.
    pub(super) fn as_ptr(self) -> *mut c_void {
        self.0.cast_mut()
    }
}
