//! msvm integration tests, run inside the QEMU guest with msvm.ko loaded.
//!
//! `msvm-tests [FILTER]` runs the device and SVM tests; `msvm-tests rebind`
//! the sysfs unbind/re-bind test; `msvm-tests hotplug` the hot-unplug test,
//! which asks the host harness (scripts/vm.py) to unplug and re-plug a GPU;
//! `msvm-tests hold READY GO` parks data on a device across an rmmod. Output: one `ok`/`not ok` line per test, then a summary line
//! `N passed, N failed`. The exit status is non-zero if any test failed.

mod bench;
mod cases;
mod engine;
mod fuzz;
mod harness;
mod lifecycle;
mod multi;
mod placement;
mod scenarios;
mod stress;
mod svm;
mod sysfs;
mod unplug;

use std::process::ExitCode;

fn main() -> ExitCode {
    let arg = std::env::args().nth(1);
    let tests: Vec<harness::Test> = match arg.as_deref() {
        Some("bench") => {
            let mut a = std::env::args().skip(2);
            let mib = a.next().and_then(|m| m.parse().ok()).unwrap_or(64);
            let suffix = a.next().unwrap_or_default();
            return match bench::run(mib, &suffix) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    println!("bench: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Some("fuzz") => {
            let mut a = std::env::args().skip(2).map(|x| x.parse::<u64>().ok());
            let seed = a.next().flatten().unwrap_or(1);
            let calls = a.next().flatten().unwrap_or(100_000);
            let secs = a.next().flatten().unwrap_or(300);
            let ok = fuzz::run(seed, calls, secs);
            let (p, f) = if ok.is_ok() { (1, 0) } else { (0, 1) };
            if let Err(e) = ok {
                println!("fuzz: {e}");
            }
            println!("msvm-tests: {p} passed, {f} failed (fuzz)");
            return if f == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            };
        }
        Some("stress") => {
            let mut a = std::env::args().skip(2).map(|x| x.parse::<u64>().ok());
            let secs = a.next().flatten().unwrap_or(20);
            let procs = a.next().flatten().unwrap_or(3);
            let threads = a.next().flatten().unwrap_or(2);
            let res = stress::run(secs, procs, threads);
            if let Err(e) = &res {
                println!("stress: {e}");
            }
            let f = u32::from(res.is_err());
            println!("msvm-tests: {} passed, {f} failed (stress)", 1 - f);
            return if f == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            };
        }
        Some("bench-p2p") => {
            let mib = std::env::args()
                .nth(2)
                .and_then(|m| m.parse().ok())
                .unwrap_or(64);
            return match bench::run_p2p(mib) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    println!("bench-p2p: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Some("pressure") => {
            return match lifecycle::pressure() {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    println!("pressure: {e}");
                    println!("msvm-tests: 0 passed, 1 failed (pressure)");
                    ExitCode::FAILURE
                }
            };
        }
        Some("hog") => {
            let mib = std::env::args()
                .nth(2)
                .and_then(|m| m.parse().ok())
                .unwrap_or(256);
            return match lifecycle::hog(mib) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    println!("hog: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Some("unplug-loop") => {
            let rounds = std::env::args()
                .nth(2)
                .and_then(|m| m.parse().ok())
                .unwrap_or(20);
            let res = unplug::unplug_loop(rounds);
            if let Err(e) = &res {
                println!("unplug-loop: {e}");
            }
            let f = u32::from(res.is_err());
            println!("msvm-tests: {} passed, {f} failed (unplug loop)", 1 - f);
            return if f == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            };
        }
        Some("bench-lifecycle") => {
            let quick = std::env::args().nth(2).as_deref() == Some("quick");
            return match bench::run_lifecycle(quick) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    println!("bench-lifecycle: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Some("rebind") => unplug::rebind_tests(),
        Some("hotplug") => unplug::hotplug_tests(),
        Some("hold") => {
            let mut a = std::env::args().skip(2);
            let (Some(ready), Some(go)) = (a.next(), a.next()) else {
                eprintln!("usage: msvm-tests hold READY GO");
                return ExitCode::FAILURE;
            };
            return match unplug::hold(&ready, &go) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    println!("hold: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Some("--list") => {
            let all = [
                cases::tests(),
                svm::tests(),
                engine::tests(),
                multi::tests(),
                placement::tests(),
                lifecycle::tests(),
                scenarios::tests(),
                unplug::rebind_tests(),
                unplug::hotplug_tests(),
            ];
            for t in all.iter().flatten() {
                println!("{}", t.name);
            }
            return ExitCode::SUCCESS;
        }
        Some(filter) => cases::tests()
            .into_iter()
            .chain(svm::tests())
            .chain(engine::tests())
            .chain(multi::tests())
            .chain(placement::tests())
            .chain(lifecycle::tests())
            .chain(scenarios::tests())
            .filter(|t| t.name.contains(filter))
            .collect(),
        None => cases::tests()
            .into_iter()
            .chain(svm::tests())
            .chain(engine::tests())
            .chain(multi::tests())
            .chain(placement::tests())
            .chain(lifecycle::tests())
            .chain(scenarios::tests())
            .collect(),
    };
    if harness::run(&tests) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
