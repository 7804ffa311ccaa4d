// SPDX-License-Identifier: GPL-2.0

//! The engines' files: `copy_engine`, `job_engine` and `dma_paths` (see
//! the parent's documentation).

use kernel::{fmt, prelude::*, sync::atomic::Relaxed, uaccess::UserSliceReader};

use crate::engine::{pipelining, set_pipelining};
use crate::gpu::job::{
    hang_jobs, hangs_left, jobs_used, set_stall_delay, stall_delay_ms, use_jobs,
};
use crate::vram::{engine_used, fail_runs, use_engine};

use super::per_device;

/// What `r` writes, as text (`EINVAL` if longer than `buf`).
fn read_text<'a>(r: &mut UserSliceReader, buf: &'a mut [u8]) -> Result<&'a str> {
    let n = r.len();
    if n > buf.len() {
        return Err(EINVAL);
    }
    r.read_slice(&mut buf[..n])?;
    core::str::from_utf8(buf[..n].trim_ascii()).map_err(|_| EINVAL)
}

/// `copy_engine`: `1` makes migrations copy with the copy engine of a
/// device that has one, `0` with the CPU (the benchmark's baseline);
/// `fail N` makes the next `N` runs of an engine fail.
pub(super) fn write_copy_engine(_: &(), r: &mut UserSliceReader) -> Result {
    let mut buf = [0u8; 24];
    let text = read_text(r, &mut buf)?;
    match text {
        "0" => use_engine(false),
        "1" => use_engine(true),
        _ => {
            let count = text.strip_prefix("fail ").ok_or(EINVAL)?;
            fail_runs(count.trim().parse().map_err(|_| EINVAL)?);
        }
    }
    Ok(())
}

/// `copy_engine`: whether migrations use copy engines, then per device
/// with one its counters.
pub(super) fn show_copy_engine(_: &(), f: &mut fmt::Formatter<'_>) -> fmt::Result {
    writeln!(f, "use {}", u8::from(engine_used()))?;
    per_device(
        f,
        "gpu usable runs commands bytes_in bytes_out bytes_zeroed bytes_p2p bytes_within woken failed device_done",
        |f, i, p| {
            let Some(e) = p.engine() else {
                return Ok(());
            };
            let (q, s) = (&e.queue, &e.stats);
            writeln!(
                f,
                "{i} {} {} {} {} {} {} {} {} {} {} {}",
                u8::from(e.usable()),
                q.runs.load(Relaxed),
                q.commands.load(Relaxed),
                s.bytes_in.load(Relaxed),
                s.bytes_out.load(Relaxed),
                s.bytes_zeroed.load(Relaxed),
                s.bytes_p2p.load(Relaxed),
                s.bytes_within.load(Relaxed),
                q.woken.load(Relaxed),
                q.failed.load(Relaxed),
                e.done().unwrap_or(0),
            )
        },
    )
}

/// `job_engine`: `1` runs jobs on the job engine of a device that has
/// one, `0` on the CPU (the benchmark's baseline); `hang N` queues each of
/// the next `N` jobs behind one that never ends; `stall_delay MS` makes
/// each stall's service wait `MS` ms first; `pipeline 0` runs a warm
/// job's windows one at a time, `pipeline 1` queues each behind the one
/// running (`crate::engine`'s pipeline, the default).
pub(super) fn write_job_engine(_: &(), r: &mut UserSliceReader) -> Result {
    let mut buf = [0u8; 24];
    let text = read_text(r, &mut buf)?;
    match text {
        "0" => use_jobs(false),
        "1" => use_jobs(true),
        _ => {
            let (what, n) = text.split_once(' ').ok_or(EINVAL)?;
            let n = n.trim().parse().map_err(|_| EINVAL)?;
            match what {
                "hang" => hang_jobs(n),
                "stall_delay" => set_stall_delay(n)?,
                "pipeline" if n <= 1 => set_pipelining(n == 1),
                _ => return Err(EINVAL),
            }
        }
    }
    Ok(())
}

/// `job_engine`: whether jobs run on job engines, then per device with
/// one its counters and its MMU's.
pub(super) fn show_job_engine(_: &(), f: &mut fmt::Formatter<'_>) -> fmt::Result {
    writeln!(
        f,
        "use {} hang {} stall_delay {} pipeline {}",
        u8::from(jobs_used()),
        hangs_left(),
        stall_delay_ms(),
        u8::from(pipelining())
    )?;
    per_device(
        f,
        "gpu usable runs bytes_written bytes_read woken failed device_done invalidations inv_ns table_writes no_room stale stalls fault_records overflows replays cancels watchdog busy_us pipelined yields",
        |f, i, p| {
            let Some(hw) = p.hw() else {
                return Ok(());
            };
            let (j, q, m) = (&hw.jobs, &hw.jobs.queue, &hw.mmu.stats);
            let fs = &hw.faults.stats;
            writeln!(
                f,
                "{i} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {}",
                u8::from(j.usable() && hw.mmu.usable()),
                q.runs.load(Relaxed),
                j.stats.bytes_written.load(Relaxed),
                j.stats.bytes_read.load(Relaxed),
                q.woken.load(Relaxed),
                q.failed.load(Relaxed),
                j.done().unwrap_or(0),
                m.invalidations.load(Relaxed),
                m.inv_ns.load(Relaxed),
                m.writes.load(Relaxed),
                m.no_room.load(Relaxed),
                hw.mmu.stale().unwrap_or(0),
                fs.stalls.load(Relaxed),
                fs.records.load(Relaxed),
                fs.overflows.load(Relaxed),
                fs.replays.load(Relaxed),
                fs.cancels.load(Relaxed),
                q.watchdog.load(Relaxed),
                j.busy_us().unwrap_or(0),
                j.stats.pipelined.load(Relaxed),
                j.stats.yields.load(Relaxed),
            )
        },
    )
}

/// `dma_paths`: per device with the counters, the bytes its DMA moved
/// directly, through the root complex, and inside its switch.
pub(super) fn show_dma_paths(_: &(), f: &mut fmt::Formatter<'_>) -> fmt::Result {
    per_device(f, "gpu direct remote switch", |f, i, p| {
        let Some(d) = p.hw().and_then(|h| h.dma_paths()) else {
            return Ok(());
        };
        writeln!(f, "{i} {} {} {}", d.direct, d.remote, d.switch)
    })
}
