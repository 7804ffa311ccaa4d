// SPDX-License-Identifier: GPL-2.0

//! Backing pages: system pages that hold the memory of a device the CPU
//! emulates (the "device memory" of `test_hmm`'s dmirror, one system page
//! behind each device-private page), and the copies between them and the
//! pages a migration moves.
//!
//! A backing page is a [`Page`] its device owns: allocated by it, freed
//! when its device-private page is. The copies are C's (`copy_highpage`):
//! the pages they read may be written by user space at the same time (see
//! [`SysPage`]).

use kernel::{page::Page, prelude::*};

use super::bindings as b;
use super::dma::SysPage;
use super::page::{NewPage, PageRef};

/// The contents of `page`, to read and write.
pub(crate) fn contents(page: &Page) -> SysPage<'_> {
    // SAFETY: `page` owns a system page (`kernel::page::Page` allocates
    // from the page allocator), valid while borrowed.
    let p = unsafe { PageRef::from_raw(page.as_ptr()) }.expect("a page");
    SysPage::new(p).expect("an allocated page is in the direct map")
}

/// Copies the system page `src` (a migration's source) into `dst`:
/// `EINVAL` for a device-private or secretmem page (no memory behind it,
/// or none in the kernel's map).
pub(crate) fn copy_in(dst: &Page, src: PageRef<'_>) -> Result {
    if src.is_device_private() || src.is_secretmem() {
        return Err(EINVAL);
    }
    // SAFETY: both are valid system pages in the direct map (checked), for
    // the borrows; distinct (`dst` is owned by the caller, `src` is a
    // process's). A racy copy, as every kernel copy of a user page.
    kernel::error::to_result(unsafe { b::msvm_copy_highpage(dst.as_ptr(), src.as_ptr()) })
}

/// Copies `src` into page `k` of `dst`, a folio a migration will install:
/// `EINVAL` past its end.
pub(crate) fn copy_out(dst: &NewPage, k: usize, src: &Page) -> Result {
    let d = dst.page().nth(k).ok_or(EINVAL)?;
    // SAFETY: `d` is a page of a folio we hold locked and nobody else
    // sees; `copy_highpage` refuses device pages (no memory behind them);
    // `src` is a system page we own.
    kernel::error::to_result(unsafe { b::msvm_copy_highpage(d.as_ptr(), src.as_ptr()) })
}

/// A buffer of `size` zero bytes, for the data a device's reads and writes
/// carry to and from user space: zeroed by the allocator (`__GFP_ZERO`),
/// not byte by byte. `ENOMEM`, without a warning, for a size user space
/// chose too large.
pub(crate) fn zeroed_buffer(size: usize) -> Result<KVVec<u8>> {
    let mut v = KVVec::with_capacity(size, GFP_KERNEL | __GFP_ZERO | __GFP_NOWARN)?;
    // SAFETY: the capacity is at least `size` (just allocated for it), and
    // the allocator zeroed it all (`__GFP_ZERO`): zero is a valid `u8`.
    unsafe { v.inc_len(size) };
    Ok(v)
}
