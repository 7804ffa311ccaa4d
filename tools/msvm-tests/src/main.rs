//! msvm integration tests, run inside the QEMU guest with msvm.ko loaded.
//!
//! `msvm-tests [FILTER]` runs the device tests; `msvm-tests unplug` runs the
//! hot-unplug test, which asks the host harness (scripts/vm.py) to unplug and
//! re-plug a GPU. Output: one `ok`/`not ok` line per test, then a summary line
//! `N passed, N failed`. The exit status is non-zero if any test failed.

mod cases;
mod harness;
mod sysfs;
mod unplug;

use std::process::ExitCode;

fn main() -> ExitCode {
    let arg = std::env::args().nth(1);
    let tests: Vec<harness::Test> = match arg.as_deref() {
        Some("unplug") => unplug::tests(),
        Some("--list") => {
            for t in cases::tests().iter().chain(unplug::tests().iter()) {
                println!("{}", t.name);
            }
            return ExitCode::SUCCESS;
        }
        Some(filter) => cases::tests()
            .into_iter()
            .filter(|t| t.name.contains(filter))
            .collect(),
        None => cases::tests(),
    };
    if harness::run(&tests) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
