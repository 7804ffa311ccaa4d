// SPDX-License-Identifier: GPL-2.0

//! The `dev_pagemap_ops` of a [`Pagemap<T>`]: what the mm core calls when
//! a page of the map is freed, when a folio of it is split, and when the
//! CPU touches one (`migrate_to_ram`), each dispatched to `T`.

use core::cell::Cell;

use kernel::bindings;

use super::super::bindings as b;
use super::super::fault::{Fault, FaultError, FaultLock};
use super::super::page::PageRef;
use super::{owner_of, PagemapOps};

/// The callbacks of every `Pagemap<T>`.
pub(super) struct OpsTable<T>(core::marker::PhantomData<T>);

impl<T: PagemapOps> OpsTable<T> {
    pub(super) const OPS: bindings::dev_pagemap_ops = bindings::dev_pagemap_ops {
        folio_free: Some(folio_free_cb::<T>),
        migrate_to_ram: Some(migrate_to_ram_cb::<T>),
        memory_failure: None,
        folio_split: Some(folio_split_cb::<T>),
    };
}

/// `dev_pagemap_ops.folio_free`.
///
/// # Safety
///
/// Called by the mm core with a folio of a pagemap registered with these ops.
unsafe extern "C" fn folio_free_cb<T: PagemapOps>(folio: *mut bindings::folio) {
    // `struct folio` starts with its first `struct page`.
    let page = folio.cast::<bindings::page>();
    // SAFETY: the folio is one of ours (these ops are only ours) and its
    // pagemap lives until `memunmap_pages` has seen every page freed.
    let map = unsafe { owner_of::<T>(page) };
    // SAFETY: the page stays valid for the callback.
    let Some(p) = (unsafe { PageRef::from_raw(page) }) else {
        return;
    };
    let Some(index) = map.index_of(p) else {
        return;
    };
    let nr = 1 << p.folio_order();
    map.data.folio_freeing(index, nr);
    // INVARIANT: the folio's last reference is gone: its pages are free.
    // Neither fails nor allocates.
    let (freed, left) = {
        let mut free = map.free.lock();
        let freed = free.put(index, nr);
        (freed, map.npages - free.nfree())
    };
    map.data.folio_freed(freed, left);
}

/// `dev_pagemap_ops.folio_split`: called for each new folio `tail` of a
/// split of `head`, then once with `tail` NULL.
///
/// # Safety
///
/// Called by the mm core with folios of a pagemap registered with these
/// ops, while it splits `head`.
unsafe extern "C" fn folio_split_cb<T: PagemapOps>(
    head: *mut bindings::folio,
    tail: *mut bindings::folio,
) {
    if !tail.is_null() {
        // SAFETY: both are valid folios of the split in progress (caller).
        unsafe { b::msvm_folio_split_tail(head, tail) };
        return;
    }
    let page = head.cast::<bindings::page>();
    // SAFETY: the folio is one of ours (these ops are only ours) and its
    // pagemap lives while any of its pages is in use.
    let map = unsafe { owner_of::<T>(page) };
    // SAFETY: the page stays valid for the callback.
    if let Some(index) = unsafe { PageRef::from_raw(page) }.and_then(|p| map.index_of(p)) {
        map.free.lock().split(index);
    }
}

/// `dev_pagemap_ops.migrate_to_ram`.
///
/// # Safety
///
/// Called by the fault path with a valid `vmf` whose page is one of ours.
unsafe extern "C" fn migrate_to_ram_cb<T: PagemapOps>(
    vmf: *mut bindings::vm_fault,
) -> bindings::vm_fault_t {
    // SAFETY: `vmf` is valid for the call (caller).
    let vmf = unsafe { &*vmf };
    // SAFETY: `vmf->page` is a page of one of our live pagemaps (caller).
    let map = unsafe { owner_of::<T>(vmf.page) };
    let lock = Cell::new(FaultLock::Held);
    // SAFETY: `vmf` is the fault this callback handles, until it returns,
    // with its lock held and its page referenced and locked (the fault
    // path's contract); `lock` starts `Held`.
    let r = map.data.migrate_to_ram(unsafe { Fault::new(vmf, &lock) });
    if lock.get() != FaultLock::Held {
        // The handler let go of the fault's lock (only a retry may
        // follow), or the fault may not wait (it is made again).
        return bindings::vm_fault_reason_VM_FAULT_RETRY;
    }
    match r {
        Ok(()) | Err(FaultError::Retry) => 0,
        Err(FaultError::Oom) => bindings::vm_fault_reason_VM_FAULT_OOM,
        Err(FaultError::Sigbus) => bindings::vm_fault_reason_VM_FAULT_SIGBUS,
    }
}
