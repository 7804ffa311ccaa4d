//! Handles: the opaque pointers that Level Zero's API passes around
//! (`ze_context_handle_t` is `*mut _ze_context_handle_t`), to and from the
//! driver's objects. Every conversion lives here.
//!
//! An object is published as `Arc::into_raw` of an `Arc` and its address is
//! its handle; a registry of live handles, with each one's kind, holds that
//! reference. A handle that comes in is looked up before it is turned back
//! into an object: a null, stale or foreign handle, or one of another kind,
//! is `ZE_RESULT_ERROR_INVALID_NULL_HANDLE`, never a dereference.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::driver::{Driver, DRIVER};
use crate::result::ZeResult;
use crate::sys::*;

/// The kinds of objects behind handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Device,
    Context,
    CommandList,
    CommandQueue,
    Fence,
    EventPool,
    Event,
}

/// An object that handles name.
pub(crate) trait Object: Send + Sync + 'static {
    const KIND: Kind;
}

/// The live handles and their kinds. Each holds one strong reference of
/// its object's `Arc`.
static LIVE: Mutex<BTreeMap<usize, Kind>> = Mutex::new(BTreeMap::new());

fn live() -> MutexGuard<'static, BTreeMap<usize, Kind>> {
    // The map is consistent at every unlock: a panic elsewhere leaves it so.
    LIVE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Publishes `obj`: the handle that names it until [`retire`].
pub(crate) fn publish<T: Object, H>(obj: Arc<T>) -> *mut H {
    let p = Arc::into_raw(obj);
    // INVARIANT: the registry now holds the reference `into_raw` gave up.
    live().insert(p as usize, T::KIND);
    p.cast_mut().cast()
}

/// Looks `h` up: its address, if it names a live object of kind `T`.
fn find<T: Object, H>(live: &BTreeMap<usize, Kind>, h: *mut H) -> ZeResult<*const T> {
    match live.get(&(h as usize)) {
        Some(&k) if k == T::KIND => Ok(h.cast_const().cast()),
        _ => Err(ZE_RESULT_ERROR_INVALID_NULL_HANDLE),
    }
}

/// The object `h` names.
pub(crate) fn get<T: Object, H>(h: *mut H) -> ZeResult<Arc<T>> {
    let live = live();
    let p = find::<T, H>(&live, h)?;
    // SAFETY: `p` is registered with kind `T`, so it came from
    // `Arc::<T>::into_raw` in `publish` and the registry still holds that
    // reference (only `retire` gives it up, under the lock held here): the
    // `Arc` is alive, and one more reference is taken for the caller.
    unsafe {
        Arc::increment_strong_count(p);
        Ok(Arc::from_raw(p))
    }
}

/// Unpublishes the object `h` names: the registry's reference, for the
/// caller to drop (the object goes when its last user is done).
pub(crate) fn retire<T: Object, H>(h: *mut H) -> ZeResult<Arc<T>> {
    let mut live = live();
    let p = find::<T, H>(&live, h)?;
    live.remove(&(p as usize));
    // SAFETY: as in `get`; the registry's reference, which it no longer
    // holds, passes to the caller.
    Ok(unsafe { Arc::from_raw(p) })
}

/// The handle of the driver (a static, never retired).
pub(crate) fn driver_handle(driver: &'static Driver) -> ze_driver_handle_t {
    // The loader and the application never write through a handle; the cast
    // to `*mut` is what the header's type asks for.
    core::ptr::from_ref(driver).cast_mut().cast()
}

/// The driver that `handle` names.
pub(crate) fn driver(handle: ze_driver_handle_t) -> ZeResult<&'static Driver> {
    if core::ptr::eq(handle.cast_const().cast(), &DRIVER) {
        Ok(&DRIVER)
    } else {
        Err(ZE_RESULT_ERROR_INVALID_NULL_HANDLE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Thing(u32);
    impl Object for Thing {
        const KIND: Kind = Kind::Fence;
    }
    struct Other;
    impl Object for Other {
        const KIND: Kind = Kind::Event;
    }

    #[test]
    fn driver_round_trip() {
        let h = driver_handle(&DRIVER);
        assert!(driver(h).is_ok_and(|d| core::ptr::eq(d, &DRIVER)));
        assert!(driver(core::ptr::null_mut()).is_err());
        assert!(driver(h.wrapping_byte_add(8)).is_err());
    }

    #[test]
    fn handles_are_checked() {
        let h: ze_fence_handle_t = publish(Arc::new(Thing(7)));
        assert_eq!(get::<Thing, _>(h).map(|t| t.0), Ok(7));
        // Another kind, null, an address inside the object.
        assert!(get::<Other, _>(h).is_err());
        assert!(get::<Thing, _>(core::ptr::null_mut::<_ze_fence_handle_t>()).is_err());
        assert!(get::<Thing, _>(h.wrapping_byte_add(1)).is_err());
        let held = get::<Thing, _>(h).unwrap();
        let t = retire::<Thing, _>(h).unwrap();
        assert_eq!(Arc::strong_count(&t), 2);
        // Stale: retired once.
        assert!(get::<Thing, _>(h).is_err());
        assert!(retire::<Thing, _>(h).is_err());
        drop(t);
        assert_eq!(held.0, 7);
    }
}
