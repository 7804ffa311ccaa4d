// SPDX-License-Identifier: GPL-2.0

//! The owner tokens of device-private memory (`dev_private_owner`).

use core::ffi::c_void;
use core::marker::PhantomData;

use kernel::{prelude::*, types::Opaque};

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

    /// The token a C struct carries.
    pub(super) fn from_ptr(p: *mut c_void) -> Self {
        Self(p.cast_const())
    }

    /// The address, for the C structs that carry it.
    pub(super) fn as_ptr(self) -> *mut c_void {
        self.0.cast_mut()
    }
}

/// The object whose address is an owner group's [`Owner`] token, for
/// pagemaps of type `Pagemap<T>` (`super::pagemap::Pagemap`).
///
/// It has a byte of its own and interior mutability, so it is neither
/// zero-sized nor a promotable constant: no two keys share an address, and
/// a `&'static` one lives at that address for good.
///
/// # Invariants
///
/// Every device-private pagemap whose owner is a key's address is a
/// `Pagemap<T>`: only `Pagemap::new` (for a map made with that key) and
/// `Pagemap::rekey` (of a `Pagemap<T>`) give pagemaps a key's address as
/// owner, and nothing outside this crate knows it.
pub(crate) struct OwnerKey<T> {
    _byte: Opaque<u8>,
    _type: PhantomData<fn() -> T>,
}

// SAFETY: the key is never read or written: only its address is used.
unsafe impl<T> Sync for OwnerKey<T> {}

impl<T> OwnerKey<T> {
    /// A key, for a `static` (or a leaked allocation).
    pub(crate) const fn new() -> Self {
        // INVARIANT: no pagemap has a new key's address as owner: only
        // `Pagemap::new` and `Pagemap::rekey` give one, to a `Pagemap<T>`.
        Self {
            _byte: Opaque::uninit(),
            _type: PhantomData,
        }
    }

    /// The owner token of this key.
    pub(crate) fn owner(&'static self) -> Owner {
        Owner(core::ptr::from_ref(self).cast())
    }
}

impl<T> Default for OwnerKey<T> {
    fn default() -> Self {
        Self::new()
    }
}

#[kunit_tests(msvm_owner)]
mod tests {
    use super::*;

    static A: OwnerKey<u8> = OwnerKey::new();
    static B: OwnerKey<u8> = OwnerKey::new();

    /// Two keys, even of one type and built alike, are two owners, and
    /// neither is no owner.
    #[test]
    fn keys_are_distinct_owners() {
        assert!(A.owner() == A.owner());
        assert!(A.owner() != B.owner());
        assert!(A.owner() != Owner::NONE && B.owner() != Owner::NONE);
        assert!(Owner::from_ptr(A.owner().as_ptr()) == A.owner());
    }
}
