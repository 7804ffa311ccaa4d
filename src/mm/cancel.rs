// SPDX-License-Identifier: GPL-2.0

//! Long operations on behalf of user space, and when they must stop.
//!
//! An ioctl may cover the whole address space (a MIGRATE over a 64 TiB
//! `MAP_NORESERVE` mapping, say). It works in steps; between steps it calls
//! [`Cancel::check`], which reschedules and stops the operation once its
//! task has a fatal signal pending (`EINTR`: the task is being killed) or
//! the device it runs on is being unplugged (`ENODEV`: unbind waits for the
//! ioctls in progress, see `drm_dev_unplug()`), or any other device of its
//! driver ([`Departures`]) began to go away since the ioctl started
//! (`EAGAIN`: `drm_dev_unplug()`
//! waits for the `drm_dev_enter()` sections of *every* DRM device, one
//! SRCU for all, and each ioctl runs in one: a long ioctl on one GPU would
//! hold up the unbind of another). Waits for a lock that a long operation
//! may hold are killable too ([`lock_killable`]).

use core::marker::PhantomData;
use core::ptr::NonNull;

use kernel::{
    bindings, drm,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        lock::Guard,
        Arc, Mutex, MutexGuard,
    },
};

use super::bindings as b;

/// The devices of one driver going away: what the ioctls of every device
/// of that driver stop for ([`Cancel::ioctl`]). A driver keeps one, in a
/// static; its counters are its own.
pub(crate) struct Departures {
    /// Devices that began to go away so far.
    gone: Atomic<u64>,
    /// Devices going away now: between their [`GoingAway`] and [`Gone`].
    going: Atomic<u64>,
}

impl Departures {
    /// No device gone.
    pub(crate) const fn new() -> Self {
        Self {
            gone: Atomic::new(0),
            going: Atomic::new(0),
        }
    }

    /// The two marks a bound device holds, [`GoingAway`] to drop first
    /// when it goes and [`Gone`] once its DRM device is unplugged. Dropped
    /// the other way round (a probe that failed), they do nothing.
    pub(crate) fn bind(&'static self) -> Result<(GoingAway, Gone)> {
        let state = Arc::new(Atomic::new(BOUND), GFP_KERNEL)?;
        Ok((
            GoingAway {
                departures: self,
                state: state.clone(),
            },
            Gone {
                departures: self,
                state,
            },
        ))
    }
}

/// Where the device of a pair of marks is: bound, going away (its
/// [`GoingAway`] dropped, its [`Gone`] not yet), settled (its [`Gone`]
/// dropped).
const BOUND: u32 = 0;
const GOING: u32 = 1;
const SETTLED: u32 = 2;

impl Default for Departures {
    fn default() -> Self {
        Self::new()
    }
}

/// Held by a bound device and dropped first when it goes (before its DRM
/// device is unplugged): every ioctl of its driver in progress then stops
/// at its next step ([`Cancel::check`]: `EAGAIN`), so that the unplug's
/// wait for them ends, until its [`Gone`] is dropped.
pub(crate) struct GoingAway {
    departures: &'static Departures,
    state: Arc<Atomic<u32>>,
}

impl Drop for GoingAway {
    fn drop(&mut self) {
        // Not after its `Gone`: that device never stops anyone.
        if self.state.cmpxchg(BOUND, GOING, Relaxed).is_ok() {
            self.departures.going.add(1, Relaxed);
            self.departures.gone.add(1, Relaxed);
        }
    }
}

/// Held by a bound device and dropped once its DRM device is unplugged
/// (no ioctl of it runs any more, and the unplug's wait for every DRM
/// device's is over), before its memory is torn down, which may take long:
/// the other devices' ioctls need not stop for it any more. Only a `Gone`
/// dropped after its [`GoingAway`] lowers the count its [`GoingAway`]
/// raised: every other order leaves it as it was.
pub(crate) struct Gone {
    departures: &'static Departures,
    state: Arc<Atomic<u32>>,
}

impl Drop for Gone {
    fn drop(&mut self) {
        if self.state.xchg(SETTLED, Relaxed) == GOING {
            self.departures.going.fetch_sub(1, Relaxed);
        }
    }
}

/// The stop conditions of one long operation.
///
/// # Invariants
///
/// If `dev` is `Some`, it points to the `struct drm_device` of a registered
/// DRM device, valid for `'a`.
pub(crate) struct Cancel<'a> {
    dev: Option<NonNull<bindings::drm_device>>,
    /// The driver's departures, and how many devices had begun to go
    /// when the ioctl started (none for the kernel's own work).
    gone: Option<(&'a Departures, u64)>,
    /// More work to stop for: true once it must (a peer's memory this
    /// operation holds is being withdrawn, say).
    watch: Option<&'a dyn Fn() -> bool>,
    /// The conditions this one adds to ([`Cancel::watching`]).
    outer: Option<&'a Cancel<'a>>,
    _dev: PhantomData<&'a ()>,
}

impl<'a> Cancel<'a> {
    /// An ioctl on `dev`: stops on a fatal signal, when `dev` is being
    /// unplugged, or when another device of its driver (`departures`)
    /// begins to go away.
    pub(crate) fn ioctl<T: drm::Driver>(
        dev: &'a drm::Device<T, drm::Registered>,
        departures: &'a Departures,
    ) -> Self {
        // `drm::Device` is `#[repr(C)]` with its `struct drm_device` first.
        let raw = core::ptr::from_ref(dev)
            .cast::<bindings::drm_device>()
            .cast_mut();
        // INVARIANT: `dev` is registered and borrowed for `'a`.
        Self {
            dev: NonNull::new(raw),
            gone: Some((departures, departures.gone.load(Relaxed))),
            watch: None,
            outer: None,
            _dev: PhantomData,
        }
    }

    /// Work of the kernel's own (the eviction of a device going away):
    /// stops on a fatal signal of the task doing it only.
    pub(crate) fn task() -> Self {
        // INVARIANT: no device.
        Self {
            dev: None,
            gone: None,
            watch: None,
            outer: None,
            _dev: PhantomData,
        }
    }

    /// The same conditions, and `ENODEV` as soon as `gone` says so: for
    /// the part of an operation that holds another device's memory, which
    /// that device waits for before it goes (`crate::registry::PoolRef`).
    pub(crate) fn watching<'b>(&'b self, gone: &'b dyn Fn() -> bool) -> Cancel<'b>
    where
        'a: 'b,
    {
        // INVARIANT: no device of its own; `self`'s are checked through
        // `outer`.
        Cancel {
            dev: None,
            gone: None,
            watch: Some(gone),
            outer: Some(self),
            _dev: PhantomData,
        }
    }

    /// Between two steps: lets other tasks run, then fails with `EINTR` if
    /// the calling task is being killed, `ENODEV` if the device is going
    /// away (or what [`Cancel::watching`] watches is), `EAGAIN` if a device
    /// of the ioctl's driver is going away, or began to since the ioctl
    /// started.
    pub(crate) fn check(&self) -> Result {
        if let Some(outer) = self.outer {
            outer.check()?;
        }
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
        if self.watch.is_some_and(|gone| gone()) {
            return Err(ENODEV);
        }
        // A device going away now, or since the ioctl began: the ioctl may
        // have entered its `drm_dev_enter()` section before the unplug's
        // wait for them began, and looked at the count after.
        if self
            .gone
            .is_some_and(|(d, g)| d.going.load(Relaxed) != 0 || d.gone.load(Relaxed) != g)
        {
            return Err(EAGAIN);
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

/// Lets other tasks run (`cond_resched`), between two steps of a long loop
/// that may sleep but has no task to cancel (an invalidation's zap).
pub(crate) fn cond_resched() {
    // SAFETY: a plain call, in a context that may sleep (the caller's
    // promise, which a safe function cannot check: `cond_resched` in
    // atomic context is a bug the kernel reports, not undefined behaviour).
    unsafe { b::msvm_cond_resched() };
}

/// `e`, but `ERESTARTSYS` for an `EINTR` while no fatal signal is pending:
/// for calls that stop for any signal (`mm_take_all_locks`), which the
/// system call restarts once the signal is handled.
pub(crate) fn restart_unless_killed(e: Error) -> Error {
    // SAFETY: a plain call about the current task.
    if e == EINTR && !unsafe { b::msvm_fatal_signal_pending() } {
        return ERESTARTSYS;
    }
    e
}

/// Sleeps a jiffy, killably (`schedule_timeout_killable`): between two
/// looks at something that no wakeup announces (a mirror's invalidations
/// in flight ending), in a loop that checks its [`Cancel`].
pub(crate) fn nap() {
    // SAFETY: a plain call, in a context that may sleep (as
    // `cond_resched`); a fatal signal ends the sleep, which the caller's
    // next check sees.
    unsafe { bindings::schedule_timeout_killable(1) };
}

#[kunit_tests(msvm_cancel)]
mod tests {
    use core::sync::atomic::{AtomicBool, Ordering};

    use kernel::new_mutex;

    use super::*;

    /// An ioctl's conditions for `departures`, without a device (what
    /// [`Cancel::ioctl`] makes, less the unplug check).
    fn driver_work(departures: &Departures) -> Cancel<'_> {
        // INVARIANT: no device.
        Cancel {
            dev: None,
            gone: Some((departures, departures.gone.load(Relaxed))),
            watch: None,
            outer: None,
            _dev: PhantomData,
        }
    }

    /// The kernel's own work goes on; what it watches stops it (`ENODEV`),
    /// and only it.
    #[test]
    fn watching_stops_on_its_condition() -> Result {
        let task = Cancel::task();
        task.check()?;
        let withdrawn = AtomicBool::new(false);
        let gone = || withdrawn.load(Ordering::Relaxed);
        let peer = task.watching(&gone);
        peer.check()?;
        withdrawn.store(true, Ordering::Relaxed);
        assert_eq!(peer.check(), Err(ENODEV));
        task.check()?;
        Ok(())
    }

    /// A device of the driver going away stops the driver's work
    /// (`EAGAIN`) from its `GoingAway` on: work begun before stays stopped
    /// after its `Gone`, work begun after goes on; another driver's work is
    /// not stopped.
    #[test]
    fn departures_stop_the_drivers_work() -> Result {
        static MINE: Departures = Departures::new();
        static OTHER: Departures = Departures::new();
        let before = driver_work(&MINE);
        let other = driver_work(&OTHER);
        let (going, gone) = MINE.bind()?;
        before.check()?;
        drop(going);
        assert_eq!(before.check(), Err(EAGAIN));
        // Through a watching one too.
        let never = || false;
        assert_eq!(before.watching(&never).check(), Err(EAGAIN));
        assert_eq!(driver_work(&MINE).check(), Err(EAGAIN));
        other.check()?;
        drop(gone);
        assert_eq!(before.check(), Err(EAGAIN));
        driver_work(&MINE).check()?;
        Ok(())
    }

    /// A `Gone` dropped before its `GoingAway` (a probe that failed)
    /// changes nothing, nor does the `GoingAway` after it: the driver's
    /// work is not stopped for good (the count would have stayed raised),
    /// another device's departure is not cut short, and the next pair
    /// balances.
    #[test]
    fn marks_out_of_order_change_nothing() -> Result {
        static D: Departures = Departures::new();
        let before = driver_work(&D);
        let (going, gone) = D.bind()?;
        drop(gone);
        drop(going);
        before.check()?;
        // Another device going away stays so while these go.
        let (going_b, gone_b) = D.bind()?;
        drop(going_b);
        let (going, gone) = D.bind()?;
        drop(gone);
        drop(going);
        assert_eq!(driver_work(&D).check(), Err(EAGAIN));
        drop(gone_b);
        driver_work(&D).check()?;
        let (going, gone) = D.bind()?;
        drop(going);
        drop(gone);
        driver_work(&D).check()?;
        Ok(())
    }

    /// An unheld lock is had at once, and let go with its guard.
    #[test]
    fn lock_killable_locks() -> Result {
        let m = KBox::pin_init(new_mutex!(1u32), GFP_KERNEL)?;
        *lock_killable(&m)? += 1;
        assert!(m.try_lock().is_some());
        assert_eq!(*lock_killable(&m)?, 2);
        Ok(())
    }
}
