//! The loader smoke test: does the real Level Zero loader
//! (`libze_loader.so.1`) take this driver? Each test file is its own
//! process, since the loader reads its environment once, at `zeInit`.

use std::path::PathBuf;

use ze_msvm::sys::*;

#[link(name = "ze_loader")]
extern "C" {}

/// The cdylib that cargo built with this test. `cargo test` leaves it in
/// `deps/`, next to the test (it copies it up to `target/<triple>/<profile>/`
/// only on `cargo build`, so the copy there may be stale).
fn built_driver() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let so = exe.parent()?.join("libze_msvm.so");
    so.is_file().then_some(so)
}

/// Points the loader at the driver (unless `ZE_ENABLE_ALT_DRIVERS` already
/// does), sets `env`, and checks that `zeInit` and `zeDriverGet` go through
/// the loader to it and find one driver.
pub fn smoke(env: &[(&str, &str)]) {
    if std::env::var_os("ZE_ENABLE_ALT_DRIVERS").is_none() {
        let Some(so) = built_driver() else {
            eprintln!("SKIPPED: libze_msvm.so is not next to the test in deps/ (set ZE_ENABLE_ALT_DRIVERS)");
            return;
        };
        std::env::set_var("ZE_ENABLE_ALT_DRIVERS", so);
    }
    for (k, v) in env {
        std::env::set_var(k, v);
    }
    eprintln!(
        "ZE_ENABLE_ALT_DRIVERS={}",
        std::env::var("ZE_ENABLE_ALT_DRIVERS").unwrap_or_default()
    );

    // SAFETY: zeInit takes flags only.
    let r = unsafe { zeInit(0) };
    assert_eq!(r, ZE_RESULT_SUCCESS, "zeInit: {r:#x}");

    let mut count = 0;
    // SAFETY: with a count of 0, zeDriverGet writes only the count.
    let r = unsafe { zeDriverGet(&mut count, std::ptr::null_mut()) };
    assert_eq!(r, ZE_RESULT_SUCCESS, "zeDriverGet (count): {r:#x}");
    assert_eq!(count, 1, "drivers");

    let mut drivers = [std::ptr::null_mut(); 2];
    count = 2;
    // SAFETY: `drivers` has room for `count` handles.
    let r = unsafe { zeDriverGet(&mut count, drivers.as_mut_ptr()) };
    assert_eq!(r, ZE_RESULT_SUCCESS, "zeDriverGet: {r:#x}");
    assert_eq!(count, 1, "drivers");
    assert!(!drivers[0].is_null());
    eprintln!(
        "zeInit: ok; zeDriverGet: {count} driver, handle {:p}",
        drivers[0]
    );
}
