//! Results: what an entry point returns, msvm's errors as Level Zero
//! results (one result per errno, the table in
//! `Documentation/level-zero.rst`), and the guard that keeps a panic from
//! crossing the C ABI.

use std::panic::{catch_unwind, AssertUnwindSafe};

use nix::errno::Errno;

use crate::sys::*;

/// What an entry point's body returns: `Err` is a Level Zero result other
/// than success.
pub(crate) type ZeResult<T = ()> = Result<T, ze_result_t>;

/// The Level Zero result for an msvm ioctl's errno.
pub(crate) fn from_errno(e: Errno) -> ze_result_t {
    match e {
        // The range is not mapped, lies outside user space, or is memory no
        // device may reach.
        Errno::EFAULT => ZE_RESULT_ERROR_INVALID_ARGUMENT,
        // A size the kernel refuses (the driver checks the rest first).
        Errno::EINVAL => ZE_RESULT_ERROR_INVALID_SIZE,
        // Part of the range lacks the access the operation needs.
        Errno::EACCES => ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS,
        // The device's VM belongs to another process (a fork child using
        // its parent's driver): it must initialize its own.
        Errno::EPERM => ZE_RESULT_ERROR_UNINITIALIZED,
        // A device named (a preferred location, a prefetch's target) is
        // gone.
        Errno::ENOENT => ZE_RESULT_ERROR_NOT_AVAILABLE,
        // The device is going away (unbind, unplug).
        Errno::ENODEV => ZE_RESULT_ERROR_DEVICE_LOST,
        // The device cannot reach the one named over P2P.
        Errno::ENOLINK => ZE_RESULT_ERROR_UNSUPPORTED_FEATURE,
        Errno::ENOMEM => ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY,
        // The device's table of attribute ranges is full.
        Errno::ENOSPC => ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY,
        // Another device kept going away during the operation (retried
        // first, see `retry`).
        Errno::EAGAIN => ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE,
        // The calling thread was killed.
        Errno::EINTR => ZE_RESULT_NOT_READY,
        // ESRCH (the process is exiting) and anything undocumented.
        _ => ZE_RESULT_ERROR_UNKNOWN,
    }
}

/// The Level Zero result for an msvm runtime error.
pub(crate) fn from_rt(e: msvm_rt::Error) -> ze_result_t {
    match e.errno() {
        Some(errno) => from_errno(errno),
        None => ZE_RESULT_ERROR_UNKNOWN,
    }
}

/// Runs an msvm call again while it fails with `EAGAIN` (another device
/// going away), a few times.
pub(crate) fn retry<T>(mut f: impl FnMut() -> msvm_rt::Result<T>) -> ZeResult<T> {
    let mut left = 8;
    loop {
        match f() {
            Err(e) if e.errno() == Some(Errno::EAGAIN) && left > 0 => left -= 1,
            r => return r.map_err(from_rt),
        }
    }
}

/// An entry point's body, as the C ABI returns it: a panic (a bug) is
/// `ZE_RESULT_ERROR_UNKNOWN`, never an unwind into the caller.
pub(crate) fn entry(f: impl FnOnce() -> ZeResult) -> ze_result_t {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => ZE_RESULT_SUCCESS,
        Ok(Err(r)) => r,
        Err(_) => ZE_RESULT_ERROR_UNKNOWN,
    }
}

/// `*p`, for an input the API says is valid if not null.
///
/// # Safety
///
/// `p` must be null or point to a valid `T` for `'a`.
pub(crate) unsafe fn input<'a, T>(p: *const T) -> ZeResult<&'a T> {
    // SAFETY: null or valid (the caller's contract).
    unsafe { p.as_ref() }.ok_or(ZE_RESULT_ERROR_INVALID_NULL_POINTER)
}

/// `*p`, for an output the API says is valid if not null.
///
/// # Safety
///
/// `p` must be null or point to a valid `T`, not otherwise borrowed, for
/// `'a`.
pub(crate) unsafe fn output<'a, T>(p: *mut T) -> ZeResult<&'a mut T> {
    // SAFETY: null or valid and unaliased (the caller's contract).
    unsafe { p.as_mut() }.ok_or(ZE_RESULT_ERROR_INVALID_NULL_POINTER)
}

/// The Level Zero count protocol: with `*count == 0`, sets it to
/// `items.len()`; otherwise writes up to `*count` items to `out` and sets
/// `*count` to the number written.
///
/// # Safety
///
/// `count` must be null or valid for reading and writing; if `*count` is
/// not 0, `out` must be null or valid for writing `*count` items.
pub(crate) unsafe fn fill_count<T: Copy>(count: *mut u32, out: *mut T, items: &[T]) -> ZeResult {
    // SAFETY: the caller's contract.
    let count = unsafe { output(count) }?;
    let n = u32::try_from(items.len()).map_err(|_| ZE_RESULT_ERROR_UNKNOWN)?;
    if *count == 0 || out.is_null() {
        *count = n;
        return Ok(());
    }
    *count = (*count).min(n);
    for (i, &item) in items.iter().take(*count as usize).enumerate() {
        // SAFETY: `out` is valid for the caller's `*count` items, of which
        // `i` is one.
        unsafe { out.add(i).write(item) };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_errno_has_its_own_result() {
        let errnos = [
            Errno::EFAULT,
            Errno::EINVAL,
            Errno::EACCES,
            Errno::EPERM,
            Errno::ENOENT,
            Errno::ENODEV,
            Errno::ENOLINK,
            Errno::ENOMEM,
            Errno::ENOSPC,
            Errno::EAGAIN,
            Errno::EINTR,
            Errno::ESRCH,
        ];
        let mut seen: Vec<ze_result_t> = errnos.iter().map(|&e| from_errno(e)).collect();
        assert!(!seen.contains(&ZE_RESULT_SUCCESS));
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), errnos.len(), "two errnos share a result");
    }

    #[test]
    fn panics_do_not_unwind() {
        assert_eq!(entry(|| panic!("a bug")), ZE_RESULT_ERROR_UNKNOWN);
        assert_eq!(entry(|| Err(ZE_RESULT_NOT_READY)), ZE_RESULT_NOT_READY);
    }

    #[test]
    fn count_protocol() {
        let items = [1u32, 2, 3];
        let (mut count, mut out) = (0, [0u32; 2]);
        // SAFETY: `count` and `out` are live; `out` holds `count` items.
        unsafe { fill_count(&mut count, out.as_mut_ptr(), &items) }.unwrap();
        assert_eq!(count, 3);
        count = 2;
        // SAFETY: as above.
        unsafe { fill_count(&mut count, out.as_mut_ptr(), &items) }.unwrap();
        assert_eq!((count, out), (2, [1, 2]));
    }
}
