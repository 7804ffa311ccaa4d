//! msvm integration tests, run inside the QEMU guest with msvm.ko loaded.
//!
//! `msvm-tests [FILTER]` runs the device and SVM tests; `msvm-tests rebind`
//! the sysfs unbind/re-bind test; `msvm-tests hotplug` the hot-unplug test,
//! which asks the host harness (scripts/vm.py) to unplug and re-plug a GPU;
//! `msvm-tests hold READY GO` parks data on a device across an rmmod; the
//! other subcommands (defaults, fuzz, stress, soak, bench*, pressure, hog, unplug-loop,
//! oversub-off, oversub-stress, thrash-off, thrash-expiry, access-off,
//! policy-scale, topology8, read-mostly-off, generic, generic-bind,
//! tenant-stall) are
//! described where they are defined. Output: one `ok`/`not ok` line per
//! test, then a summary line `N passed, N failed`. The exit status is
//! non-zero if any test failed.

mod bench;
mod bench_faults;
mod bench_hw;
mod bench_iommu;
mod bench_jobs;
mod busy;
mod cases;
mod cgroup;
mod cli;
mod defaults;
mod devpt;
mod engine;
mod faults;
mod fdinfo;
mod fuzz;
mod generic;
mod harness;
mod hw;
mod hw_faults;
mod hw_jobs;
mod hw_loss;
mod hw_pipeline;
mod large;
mod lifecycle;
mod multi;
mod numa;
mod orphans;
mod paths;
mod placement;
mod policy;
mod race;
mod replicas;
mod scenarios;
mod soak;
mod stale;
mod stress;
mod svm;
mod sysfs;
mod tenants;
mod topology8;
mod trace;
mod trust;
mod unmap;
mod unplug;

use std::process::ExitCode;
use std::str::FromStr;

/// Positional argument `n` (after the subcommand is 1), or `default`.
fn arg<T: FromStr>(n: usize, default: T) -> T {
    std::env::args()
        .nth(n + 1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

/// The exit status of subcommand `name`, after printing its error if it
/// failed; with `summary`, also the `msvm-tests: N passed, N failed (…)`
/// line the host's test script counts.
fn finish(name: &str, res: Result<(), String>, summary: Option<&str>) -> ExitCode {
    if let Err(e) = &res {
        println!("{name}: {e}");
    }
    let f = u32::from(res.is_err());
    if let Some(what) = summary {
        println!("msvm-tests: {} passed, {f} failed ({what})", 1 - f);
    }
    if f == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The tests of `tests` whose names contain argument 1 (all without it).
fn named(tests: Vec<harness::Test>) -> Vec<harness::Test> {
    let only = arg(1, String::new());
    tests
        .into_iter()
        .filter(|t| t.name.contains(&only))
        .collect()
}

/// Every test of the main run, in order.
fn main_tests() -> Vec<harness::Test> {
    [
        cases::tests(),
        cli::tests(),
        svm::tests(),
        trust::tests(),
        engine::tests(),
        devpt::tests(),
        faults::tests(),
        multi::tests(),
        paths::tests(),
        unmap::tests(),
        placement::tests(),
        replicas::tests(),
        lifecycle::tests(),
        scenarios::tests(),
        large::tests(),
        trace::tests(),
        fdinfo::tests(),
        cgroup::tests(),
        race::tests(),
        stale::tests(),
        orphans::tests(),
        busy::tests(),
        hw::tests(),
        hw_jobs::tests(),
        hw_faults::tests(),
        hw_pipeline::tests(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The tests `msvm-tests integrity` runs.
const INTEGRITY: &[&str] = &[
    "svm_round_trip_by_cpu_fault",
    "svm_round_trip_explicit_sizes",
    "trust_round_trip_and_in_place_writes_keep_every_word",
    "exec_fill_in_place_uses_dma",
    "exec_checksum_matches_cpu",
    "exec_copy_unaligned_offsets",
    "exec_fill_patterns_any_bytes_every_path",
    "exec_copy_checksum_odd_bytes_every_path",
    "exec_atomic_add_both_paths",
    "large_folio_round_trip_whole",
    "p2p_device_to_device_migration",
    "migrate_from_unreachable_peer_goes_through_ram",
    "large_folio_to_system_in_small_pages_without_free_folio",
    "hw_migrations_copy_with_the_copy_engine",
    "hw_jobs_run_on_the_job_engine",
];

/// The tests `msvm-tests iommu` runs, in a boot behind a virtual IOMMU
/// (DMA addresses are IOVAs; a peer inside the switch is reached at its
/// bus address, which the switch routes): the data-integrity tests, the
/// P2P paths as `pci_p2pdma` decides them and taken, P2P jobs and copies,
/// and the fault buffer's records.
const IOMMU: &[&str] = &[
    "p2p_matrix_matches_pci_topology",
    "debugfs_topology_matches_query",
    "p2p_jobs_take_pci_p2pdma_paths",
    "freed_pages_are_unmapped_before_their_next_owner",
    "p2p_exec_in_place_on_peer_memory",
    "hw_peer_pages_move_over_p2p_by_the_copy_engine",
    "devpt_peer_in_place_warm",
    "unreachable_peer_memory_goes_through_ram_for_exec",
    "hw_faults_stall_the_job_until_replayed_or_cancelled",
];

/// The tests `msvm-tests paths` runs, in a boot whose host bridges pass
/// P2P (`tests/guest/paths.sh`): the paths, QUERY's and debugfs's, and
/// jobs and migrations along each, data checked (the tests that want a
/// GPU out of P2P reach, which this boot has not, run in the others).
const PATHS: &[&str] = &[
    "p2p_matrix_matches_pci_topology",
    "debugfs_topology_matches_query",
    "p2p_jobs_take_pci_p2pdma_paths",
];

/// The core tests `msvm-tests generic` runs after its own, with a generic
/// device (bound through `new_id`) in the roles of gpu0 and of the P2P
/// pair's second device (`tests/guest/generic.sh`).
const GENERIC: &[&str] = &[
    "query_matches_sysfs",
    "indices_are_unique_and_dense",
    "p2p_matrix_matches_pci_topology",
    "harness_topology_two_peers_one_isolated",
    "debugfs_topology_matches_query",
    "svm_round_trip_by_cpu_fault",
    "svm_round_trip_explicit_sizes",
    "svm_second_migrate_reports_already",
    "svm_write_after_fault_back",
    "exec_fill_migrates_then_cpu_reads",
    "exec_checksum_matches_cpu",
    "exec_copy_unaligned_offsets",
    "exec_fill_patterns_any_bytes_every_path",
    "exec_copy_checksum_odd_bytes_every_path",
    "exec_atomic_add_both_paths",
    "p2p_exec_in_place_on_peer_memory",
    "p2p_device_to_device_migration",
    "unreachable_peer_memory_goes_through_ram_for_exec",
    "migrate_from_unreachable_peer_goes_through_ram",
    "large_folio_round_trip_whole",
    "large_folio_to_peer_whole",
    "hw_migrations_copy_with_the_copy_engine",
    "hw_jobs_run_on_the_job_engine",
];

fn main() -> ExitCode {
    let cmd = std::env::args().nth(1);
    let tests: Vec<harness::Test> = match cmd.as_deref() {
        Some("bench") => {
            let res = bench::run(arg(1, 64), &arg(2, String::new()));
            return finish("bench", res, None);
        }
        Some("fuzz") => {
            let res = fuzz::run(arg(1, 1), arg(2, 100_000), arg(3, 300));
            return finish("fuzz", res, Some("fuzz"));
        }
        Some("stress") => {
            let thp = arg(4, String::new()) != "small";
            let res = stress::run(arg(1, 20), arg(2, 3), arg(3, 2), thp);
            return finish("stress", res, Some("stress"));
        }
        Some("soak") => return finish("soak", soak::run(arg(1, 600)), Some("soak")),
        Some("bench-p2p") => return finish("bench-p2p", bench::run_p2p(arg(1, 64)), None),
        Some("bench-hw") => {
            let res = bench_hw::run(arg(1, 64), &arg(2, String::new()));
            return finish("bench-hw", res, None);
        }
        Some("bench-jobs") => {
            let res = bench_jobs::run(arg(1, 64));
            return finish("bench-jobs", res, None);
        }
        Some("bench-faults") => {
            let res = bench_faults::run(&arg(1, "latency_hwfault".to_string()));
            return finish("bench-faults", res, None);
        }
        Some("bench-iommu") => return finish("bench-iommu", bench_iommu::run(arg(1, 64)), None),
        Some("bench-latency") => return finish("bench-latency", bench::run_latency(), None),
        Some("bench-devpt") => return finish("bench-devpt", bench::run_devpt(), None),
        Some("bench-scale") => return finish("bench-scale", bench::run_scale(), None),
        Some("bench-scale8") => return finish("bench-scale8", bench::run_scale8(), None),
        Some("bench-tenants") => {
            let res = bench::run_tenants(&arg(1, "on".to_string()));
            return finish("bench-tenants", res, None);
        }
        Some("bench-oversub") => {
            let res = bench::run_oversub(&arg(1, "on".to_string()));
            return finish("bench-oversub", res, None);
        }
        Some("bench-pingpong") => {
            let res = bench::run_pingpong(&arg(1, "on".to_string()));
            return finish("bench-pingpong", res, None);
        }
        Some("bench-read-shared") => {
            return finish("bench-read-shared", bench::run_read_shared(), None);
        }
        Some("bench-hot-remote") => {
            let res = bench::run_hot_remote(&arg(1, "on".to_string()));
            return finish("bench-hot-remote", res, None);
        }
        Some("bench-stream") => {
            let res = bench::run_stream(&arg(1, "on".to_string()));
            return finish("bench-stream", res, None);
        }
        Some("bench-lifecycle") => {
            let quick = arg(1, String::new()) == "quick";
            return finish("bench-lifecycle", bench::run_lifecycle(quick), None);
        }
        Some("pressure") => return finish("pressure", lifecycle::pressure(), Some("pressure")),
        Some("oversub-stress") => {
            let res = placement::oversub_stress(arg(1, 30));
            return finish("oversub-stress", res, Some("oversubscription stress"));
        }
        Some("thrash-expiry") => {
            let res = placement::pingpong_expiry(arg(1, 3000));
            return finish("thrash-expiry", res, Some("pins expire"));
        }
        Some("access-off") => {
            let res = placement::access_off();
            return finish("access-off", res, Some("in-place jobs, access_counters=0"));
        }
        Some("policy-scale") => {
            let res = policy::run(arg(1, 16384), arg(2, 8), arg(3, 2048));
            return finish("policy-scale", res, None);
        }
        Some("read-mostly-off") => {
            let res = replicas::read_mostly_off();
            return finish("read-mostly-off", res, Some("read_mostly=0"));
        }
        Some("thrash-off") => {
            let res = placement::pingpong_off();
            return finish("thrash-off", res, Some("ping-pong, thrash=0"));
        }
        Some("oversub-off") => {
            let res = placement::oversubscription_off();
            return finish("oversub-off", res, Some("full device, evict=0"));
        }
        Some("hog") => return finish("hog", lifecycle::hog(arg(1, 256)), None),
        Some("unplug-loop") => {
            let res = unplug::unplug_loop(arg(1, 20));
            return finish("unplug-loop", res, Some("unplug loop"));
        }
        Some("rebind") => named(unplug::rebind_tests()),
        Some("orphans") => {
            let res = orphans::rounds(arg(1, 20));
            return finish("orphans", res, Some("orphans"));
        }
        Some("tenant-stall") => {
            let res = tenants::tenant_stall(arg(1, 200));
            return finish("tenant-stall", res, Some("tenant stall"));
        }
        // The data-integrity tests, for a boot with bounce buffers
        // (`swiotlb=force`): every path that copies or writes through a
        // DMA mapping.
        Some("integrity") => main_tests()
            .into_iter()
            .filter(|t| INTEGRITY.contains(&t.name))
            .collect(),
        Some("iommu") => main_tests()
            .into_iter()
            .filter(|t| INTEGRITY.contains(&t.name) || IOMMU.contains(&t.name))
            .collect(),
        // With a CPU whose host bridges pass P2P (scripts/vm.py --cpu
        // zen): every pair has a path, inside the switch or through the
        // host bridge.
        Some("paths") => main_tests()
            .into_iter()
            .filter(|t| PATHS.contains(&t.name))
            .collect(),
        Some("hotplug") => unplug::hotplug_tests()
            .into_iter()
            .chain(hw_loss::hotplug_tests())
            .collect(),
        Some("device-lost") => {
            return finish("device-lost", hw_loss::device_lost(), Some("device lost"));
        }
        // On the 8-GPU server (scripts/vm.py --gpus 8gpu).
        Some("topology8") => topology8::tests(),
        // With msvm loaded with no parameter (2 MiB device folios off).
        Some("defaults") => named(defaults::tests()),
        Some("generic") => generic::tests()
            .into_iter()
            .chain(
                main_tests()
                    .into_iter()
                    .filter(|t| GENERIC.contains(&t.name)),
            )
            .collect(),
        Some("generic-bind") => generic::tests(),
        Some("hold") => {
            let (ready, go) = (arg(1, String::new()), arg(2, String::new()));
            if ready.is_empty() || go.is_empty() {
                eprintln!("usage: msvm-tests hold READY GO");
                return ExitCode::FAILURE;
            }
            return finish("hold", unplug::hold(&ready, &go), None);
        }
        Some("--list") => {
            let all = main_tests()
                .into_iter()
                .chain(unplug::rebind_tests())
                .chain(unplug::hotplug_tests())
                .chain(hw_loss::hotplug_tests())
                .chain(defaults::tests());
            for t in all {
                println!("{}", t.name);
            }
            return ExitCode::SUCCESS;
        }
        Some(filter) => main_tests()
            .into_iter()
            .filter(|t| t.name.contains(filter))
            .collect(),
        None => main_tests(),
    };
    if harness::run(&tests) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
