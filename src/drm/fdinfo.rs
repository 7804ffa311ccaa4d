// SPDX-License-Identifier: GPL-2.0

//! Per-client statistics in the DRM convention
//! (`Documentation/gpu/drm-usage-stats.rst`), in each open render node's
//! `/proc/<pid>/fdinfo/<fd>`: after the DRM core's `drm-driver: msvm`,
//! `drm-client-id` and `drm-pdev` lines,
//!
//! - `drm-engine-compute: <ns> ns`: the time the file's EXEC jobs took
//!   (placement and running: msvm's one engine, busy for the client);
//! - `drm-total-vram` and `drm-resident-vram`: the device memory that holds
//!   pages the file's VM's process brought to the device, and its read-only
//!   replicas there (`crate::vram::VramPool::held_by`; while a shrink pass
//!   or an eviction runs, the figure of the file's last read), while the
//!   device is bound; nothing without a VM. Every file with a VM of one
//!   process on one device shows that process's whole use of it. The
//!   VM's mm is read without the VM's lock (a key only: a VM destroyed
//!   meanwhile may give a figure for a process at its address).
//!
//! So standard per-process GPU tools (`gputop`, `nvtop`, `qmassa`) show
//! which process holds which device's memory. How the line gets there on a
//! 7.3 Rust DRM driver: `crate::mm::fdinfo`.

use kernel::{drm, sync::atomic::Relaxed};

use super::driver::MsvmDriver;
use crate::mm::fdinfo::{FdinfoOut, ShowFdinfo};

impl ShowFdinfo for MsvmDriver {
    fn show_fdinfo(
        dev: &drm::Device<Self, drm::Ioctl>,
        file: &drm::File<super::file::File>,
        out: &mut FdinfoOut<'_>,
    ) {
        let f = file.inner();
        out.engine(c"compute", f.engine_ns.load(Relaxed));
        let mm = f.mm_key.load(Relaxed);
        if mm == 0 {
            return;
        }
        // Only while the device is bound: its pool is the registration's.
        let Some(guard) = dev.registration_guard() else {
            return;
        };
        // With a shrink pass or an eviction under way, the last figure.
        let held = guard.registration_data_with(|gpu| gpu.vram().held_by(mm));
        let bytes = match held {
            Some(b) => {
                f.vram_seen.store(b, Relaxed);
                b
            }
            None => f.vram_seen.load(Relaxed),
        };
        out.size(c"total", c"vram", bytes);
        out.size(c"resident", c"vram", bytes);
    }
}
