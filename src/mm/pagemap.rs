// SPDX-License-Identifier: GPL-2.0

//! Device-private memory: a `dev_pagemap` of type `MEMORY_DEVICE_PRIVATE`
//! whose callbacks are dispatched to a Rust trait.
//!
//! A [`Pagemap`] reserves a free physical address range (it is never
//! accessed: device-private pages are not CPU-addressable), creates its
//! `struct page`s with `memremap_pages` and removes them on drop with
//! `memunmap_pages`, which waits until every page of the map is free again.

use core::cell::Cell;
use core::marker::PhantomPinned;
use core::ptr::NonNull;

use kernel::{bindings, prelude::*, types::Opaque};

use super::bindings as b;
use super::fault::{Fault, FaultError, FaultLock};
use super::migrate::DeviceMigration;
use super::page::{NewPage, PageRef};

pub(crate) use super::owner::Owner;
pub(crate) use super::page::PAGE_SIZE;

/// What a device-private pagemap's owner does when the mm core calls.
pub(crate) trait PagemapOps: Send + Sync + Sized + 'static {
    /// The last reference to the folio starting at `page` (a page of this
    /// map), of `1 << order` pages, is gone; they are free for the device to
    /// reuse. May run in any context that can put a page: must not sleep.
    fn folio_free(&self, page: PageRef<'_>, order: u32);

    /// The core has split the large folio that starts at `head` into
    /// smaller ones (each comes back through [`Self::folio_free`] on its
    /// own). Runs with the folio frozen: must not sleep.
    fn folio_split(&self, head: PageRef<'_>);

    /// The CPU touched `fault.page()`, a page of this map mapped in a process:
    /// move it (and maybe its neighbours) to system RAM.
    fn migrate_to_ram(&self, fault: Fault<'_>) -> Result<(), FaultError>;
}

/// A `MEMORY_DEVICE_PRIVATE` pagemap of `len` bytes, its callbacks going to
/// `T`.
///
/// # Invariants
///
/// - `pgmap` is the first field (`#[repr(C)]`), so a `dev_pagemap` pointer of
///   this map is a pointer to the `Pagemap`;
/// - `res` is the region `pgmap` covers, reserved by
///   `request_free_mem_region`; if `mapped`, `pgmap` was successfully passed
///   to `memremap_pages`; both are undone in `drop`.
#[repr(C)]
#[pin_data(PinnedDrop)]
pub(crate) struct Pagemap<T: PagemapOps> {
    #[pin]
    pgmap: Opaque<bindings::dev_pagemap>,
    res: NonNull<bindings::resource>,
    pfn_first: usize,
    npages: usize,
    #[pin]
    data: T,
    /// `memremap_pages` succeeded.
    mapped: bool,
    #[pin]
    _pin: PhantomPinned,
}

// SAFETY: the C parts are only touched through the mm core's own locking;
// `T` is `Send + Sync`.
unsafe impl<T: PagemapOps> Send for Pagemap<T> {}
// SAFETY: see `Send`.
unsafe impl<T: PagemapOps> Sync for Pagemap<T> {}

struct OpsTable<T>(core::marker::PhantomData<T>);

impl<T: PagemapOps> OpsTable<T> {
    const OPS: bindings::dev_pagemap_ops = bindings::dev_pagemap_ops {
        folio_free: Some(folio_free_cb::<T>),
        migrate_to_ram: Some(migrate_to_ram_cb::<T>),
        memory_failure: None,
        folio_split: Some(folio_split_cb::<T>),
    };
}

/// The `Pagemap` a page of one of ours belongs to.
///
/// # Safety
///
/// `page` must be a valid page of a `Pagemap<T>` that is alive.
unsafe fn owner_of<'a, T: PagemapOps>(page: *mut bindings::page) -> &'a Pagemap<T> {
    // SAFETY: `page` is a device page (caller), so it has a pagemap.
    let pgmap = unsafe { b::msvm_page_pgmap(page) };
    // SAFETY: the pagemap is the first field of a live `Pagemap<T>` (type
    // invariant, caller).
    unsafe { &*pgmap.cast::<Pagemap<T>>() }
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
    if let Some(p) = unsafe { PageRef::from_raw(page) } {
        map.data.folio_free(p, p.folio_order());
    }
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
    if let Some(p) = unsafe { PageRef::from_raw(page) } {
        map.data.folio_split(p);
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

impl<T: PagemapOps> Pagemap<T> {
    /// Creates a pagemap of `len` bytes (a multiple of [`PAGE_SIZE`]) whose
    /// `owner` (the `dev_private_owner` of HMM and migration) is `owner`; `data`
    /// is built from the first page frame number of the map.
    pub(crate) fn new<I: PinInit<T, Error>>(
        len: usize,
        owner: Owner,
        name: &'static CStr,
        data: impl FnOnce(usize) -> I,
    ) -> Result<Pin<KBox<Self>>> {
        // A pagemap without an owner would take every other's pages as
        // its own (and `memremap_pages` refuses it).
        if len == 0 || len % PAGE_SIZE != 0 || owner == Owner::NONE {
            return Err(EINVAL);
        }
        // SAFETY: `name` is a static NUL-terminated string.
        let res = unsafe { b::msvm_request_devmem(len, name.as_char_ptr()) };
        let res = NonNull::new(res).ok_or(ENOSPC)?;
        // SAFETY: `res` is the region just reserved.
        let start = unsafe { (*res.as_ptr()).start } as usize;
        let first_pfn = start / PAGE_SIZE;
        let release = || {
            // SAFETY: the region is ours and not used by a pagemap.
            unsafe { b::msvm_release_devmem(res.as_ptr()) }
        };
        let mut map = KBox::pin_init(
            try_pin_init!(Self {
                pgmap <- Opaque::ffi_init(|p: *mut bindings::dev_pagemap| {
                    // SAFETY: `p` is valid for writes; all-zeroes is a valid
                    // `dev_pagemap` before its fields are set.
                    unsafe {
                        core::ptr::write_bytes(p, 0, 1);
                        (*p).type_ = bindings::memory_type_MEMORY_DEVICE_PRIVATE;
                        (*p).nr_range = 1;
                        let range = (*p).__bindgen_anon_1.range.as_mut();
                        range.start = start as u64;
                        range.end = (start + len - 1) as u64;
                        (*p).ops = &OpsTable::<T>::OPS;
                        (*p).owner = owner.as_ptr();
                    }
                }),
                res,
                pfn_first: first_pfn,
                npages: len / PAGE_SIZE,
                data <- data(first_pfn),
                mapped: false,
                _pin: PhantomPinned,
            }? Error),
            GFP_KERNEL,
        )
        .inspect_err(|_| release())?;
        // From here on, dropping `map` releases the region.
        // SAFETY: `pgmap` is initialised above and pinned in the box; the
        // node id is a valid one.
        let ret = unsafe { bindings::memremap_pages(map.pgmap.get(), b::msvm_numa_node_id()) };
        kernel::error::from_err_ptr(ret)?;
        // SAFETY: setting a flag moves nothing out of the pinned box.
        unsafe { map.as_mut().get_unchecked_mut() }.mapped = true;
        Ok(map)
    }

    /// The owner's data.
    pub(crate) fn data(&self) -> &T {
        &self.data
    }

    /// Number of pages in the map.
    pub(crate) fn npages(&self) -> usize {
        self.npages
    }

    /// The folio of `1 << order` pages starting at page `index` of the map,
    /// prepared for use as the destination of a migration (refcount one,
    /// locked). Whatever larger
    /// folio its pages belonged to before, they now belong to this one.
    ///
    /// # Safety
    ///
    /// Pages `index..index + (1 << order)` must be free (not in use by any
    /// mapping or migration) and within the map, `index` aligned to the
    /// folio size, and owned by the caller from now until it hands the folio
    /// to a migration.
    pub(crate) unsafe fn init_folio(&self, index: usize, order: u32) -> NewPage {
        debug_assert!(index + (1 << order) <= self.npages);
        // SAFETY: `index` is within the map, whose `struct page`s exist.
        let page = unsafe { PageRef::from_pfn(self.pfn_first + index) };
        // SAFETY: the pages are free and ours (caller); `pgmap` is their map.
        unsafe { b::msvm_zone_device_folio_init(page.as_ptr(), self.pgmap.get(), order) };
        // SAFETY: `zone_device_folio_init` gave the folio one reference and
        // locked it, for us (the pages were ours, caller).
        unsafe { NewPage::from_locked(core::ptr::NonNull::new(page.as_ptr()).expect("non-null")) }
    }

    /// An eviction of the pages in use among `n` pages of this map from
    /// page `first`: `EINVAL` unless they lie in the map.
    pub(crate) fn device_migration(&self, first: usize, n: usize) -> Result<DeviceMigration<'_>> {
        if first.checked_add(n).is_none_or(|end| end > self.npages) {
            return Err(EINVAL);
        }
        // SAFETY: the frames are this map's, which the borrow keeps alive
        // while the migration lives.
        unsafe { DeviceMigration::range(self.pfn_first + first, n) }
    }

    /// The index in this map of `page`, if it is one of its pages.
    pub(crate) fn index_of(&self, page: PageRef<'_>) -> Option<usize> {
        let pfn = page.pfn();
        (pfn >= self.pfn_first && pfn < self.pfn_first + self.npages).then(|| pfn - self.pfn_first)
    }
}

/// The `Pagemap<T>` that owns `page`, if `page` is a device-private page whose
/// map has owner `owner`.
///
/// # Safety
///
/// `page` must be valid, and every device-private pagemap with owner `owner`
/// must be a `Pagemap<T>`.
pub(crate) unsafe fn map_of<'a, T: PagemapOps>(
    page: PageRef<'a>,
    owner: Owner,
) -> Option<&'a Pagemap<T>> {
    if !page.is_device_private() {
        return None;
    }
    // SAFETY: device-private pages have a pagemap.
    let pgmap = unsafe { b::msvm_page_pgmap(page.as_ptr()) };
    // SAFETY: `pgmap` is valid while the page is.
    let map_owner = unsafe { (*pgmap).owner };
    if map_owner != owner.as_ptr() {
        return None;
    }
    // SAFETY: the owner is ours, hence so is the map (caller).
    Some(unsafe { owner_of::<T>(page.as_ptr()) })
}

#[pinned_drop]
impl<T: PagemapOps> PinnedDrop for Pagemap<T> {
    fn drop(self: Pin<&mut Self>) {
        if self.mapped {
            // SAFETY: `pgmap` was mapped by `memremap_pages` (type invariant);
            // this waits until every page of it is free, then removes them.
            unsafe { bindings::memunmap_pages(self.pgmap.get()) };
        }
        // SAFETY: the region is ours and no longer used by the map.
        unsafe { b::msvm_release_devmem(self.res.as_ptr()) };
    }
}
