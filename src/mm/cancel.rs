// SPDX-License-Identifier: GPL-2.0

//! Long operations on behalf of user space, and when they must stop.
//!
//! An ioctl may cover the whole address space (a MIGRATE over a 64 TiB
//! `MAP_NORESERVE` mapping, say). It works in steps; between steps it calls
//! [`Cancel::check`], which reschedules and stops the operation once its
//! task has a fatal signal pending (`EINTR`: the task is being killed) or
//! the device it runs on is being unplugged (`ENODEV`: unbind waits for the
//! ioctls in progress, see `drm_dev_unplug()`). Waits for a lock that a
//! long operation may hold are killable too ([`lock_killable`]).

use core::marker::PhantomData;
use core::ptr::NonNull;

use kernel::{
    bindings, drm,
    prelude::*,
    sync::{lock::Guard, Mutex, MutexGuard},
};

use super::bindings as b;

/// The stop conditions of one long operation.
///
/// # Invariants
///
/// If `dev` is `Some`, it points to the `struct drm_device` of a registered
/// DRM device, valid for `'a`.
pub(crate) struct Cancel<'a> {
    dev: Option<NonNull<bindings::drm_device>>,
    _dev: PhantomData<&'a ()>,
}

impl<'a> Cancel<'a> {
    /// An ioctl on `dev`: stops on a fatal signal or when `dev` is being
    /// unplugged.
    pub(crate) fn ioctl<T: drm::Driver>(dev: &'a drm::Device<T, drm::Registered>) -> Self {
        // `drm::Device` is `#[repr(C)]` with its `struct drm_device` first.
        let raw = core::ptr::from_ref(dev)
            .cast::<bindings::drm_device>()
            .cast_mut();
        // INVARIANT: `dev` is registered and borrowed for `'a`.
        Self {
            dev: NonNull::new(raw),
            _dev: PhantomData,
        }
    }

    /// Work of the kernel's own (the eviction of a device going away):
    /// stops on a fatal signal of the task doing it only.
    pub(crate) fn task() -> Self {
        // INVARIANT: no device.
        Self {
            dev: None,
            _dev: PhantomData,
        }
    }

    /// Between two steps: lets other tasks run, then fails with `EINTR` if
    /// the calling task is being killed, `ENODEV` if the device is going
    /// away.
    pub(crate) fn check(&self) -> Result {
        // SAFETY: plain calls about the current task, in process context.
        unsafe { b::msvm_cond_resched() };
        // SAFETY: as above.
        if unsafe { b::msvm_fatal_signal_pending() } {
            return Err(EINTR);
        }
        if let Some(dev) = self.dev {
            // SAFETY: a registered DRM device, valid for `'a` (invariant).
            if unsafe { b::msvm_drm_dev_unplugged(dev.as_ptr()) } {
                return Err(ENODEV);
            }
        }
        Ok(())
    }
}

/// Locks `m`, or fails with `EINTR` if the task is killed while it waits
/// (`mutex_lock_killable`): for locks that an ioctl holds across a long
/// operation.
pub(crate) fn lock_killable<T: ?Sized>(m: &Mutex<T>) -> Result<MutexGuard<'_, T>> {
    // `Lock` is `#[repr(C)]` with its lock state, a `struct mutex` for a
    // `Mutex`, first (see `Lock::from_raw`).
    let raw = core::ptr::from_ref(m).cast::<bindings::mutex>().cast_mut();
    // SAFETY: `raw` is the initialised `struct mutex` of `m` (a `Mutex`
    // cannot exist uninitialised), alive for the borrow.
    if unsafe { b::msvm_mutex_lock_killable(raw) } != 0 {
        return Err(EINTR);
    }
    // SAFETY: the lock was just acquired; a mutex guard carries no state.
    Ok(unsafe { Guard::new(m, ()) })
}
