//! msvm-gpu's replayable faults (issue 45): a job access the device cannot
//! translate stalls it and writes a record into the fault buffer; msvm
//! services the fault and replays the access, or cancels the job,
//! services the window's rest in the job's own context and runs it on the
//! device again. debugfs `job_engine` counts both.

use std::time::Instant;

use msvm_rt::{checksum, Device, Exec, Location};

use crate::check;
use crate::harness::{Outcome, Test};
use crate::hw_jobs::{job_counters, jobs_on_device, Injection, JobCounters};
use crate::svm::{fill, Map};
use crate::sysfs;

pub fn tests() -> Vec<Test> {
    vec![
        Test {
            name: "hw_faults_stall_the_job_until_replayed_or_cancelled",
            run: faults_stall_the_job_until_replayed_or_cancelled,
        },
        Test {
            name: "hw_watchdog_resets_a_hung_queue_and_the_next_job_runs",
            run: watchdog_resets_a_hung_queue_and_the_next_job_runs,
        },
    ]
}

const LEN: usize = 4 << 20;

/// The windows of a job of [`LEN`] bytes at `addr`: the 2 MiB blocks it
/// meets (a window ends at a block's end).
fn windows(addr: usize) -> u64 {
    const BLOCK: usize = 2 << 20;
    ((addr + LEN).div_ceil(BLOCK) - addr / BLOCK) as u64
}

fn e(x: impl std::fmt::Display) -> String {
    x.to_string()
}

/// The first GPU, with a VM of this process, and its index, if it runs
/// jobs on a job engine (msvm-gpu); `None` otherwise (the test does not
/// apply).
pub(crate) fn first_gpu_with_jobs() -> Result<Option<(Device, u32)>, String> {
    let Some(gpu) = sysfs::msvm_gpus()?.into_iter().next() else {
        return Ok(None);
    };
    let dev = Device::open(&gpu.node).map_err(e)?;
    dev.vm_create().map_err(e)?;
    let index = dev.query().map_err(e)?.index;
    Ok(jobs_on_device(index)?.then_some((dev, index)))
}

/// The counters of device `index`, which runs jobs on its job engine.
pub(crate) fn counters(index: u32) -> Result<JobCounters, String> {
    job_counters(index)?.ok_or_else(|| format!("gpu{index}: no job engine line"))
}

/// On the first msvm-gpu:
/// - a CHECKSUM in place over 4 MiB the CPU wrote (present, with no entry
///   in the VM's table): the device stalls on its first access of a
///   window, msvm binds the pages (of that window and the next) and
///   replays; a record per stall, none cancelled, no job fails, the device
///   runs a job per window, the checksum is right; and again;
/// - a FILL in place over 4 MiB never touched (nothing present: a fault
///   only the job's own context can service): the device's fault is
///   cancelled, the job ends there, the job's context faults the rest in
///   and binds it, and the device runs it (more jobs than windows: the
///   cancelled window's rest is a job of its own, and the next windows'),
///   every byte is filled, no job fails, and the next job runs on the
///   device (a cancelled fault ends only its job).
fn faults_stall_the_job_until_replayed_or_cancelled() -> Outcome {
    let Some((dev, index)) = first_gpu_with_jobs()? else {
        return Ok(());
    };
    let mut a = Map::new(LEN)?;
    fill(a.bytes_mut(), 0x45f);
    let want = checksum(a.bytes());
    // The mirror's first walk cannot tell whether an invalidation begun
    // before it is over (`crate::mm::inflight`'s lost period): a job's
    // first fault is left to its context (cancelled). A small job takes it.
    let mut first = Map::new(1 << 20)?;
    fill(first.bytes_mut(), 0x460);
    dev.exec(Exec::Checksum, first.addr(), 1 << 20, true)
        .map_err(|x| format!("the first job: {x}"))?;
    let x = counters(index)?;
    let sum = dev
        .exec(Exec::Checksum, a.addr(), LEN, true)
        .map_err(|x| format!("CHECKSUM: {x}"))?
        .result;
    let y = counters(index)?;
    check!(sum == want, "CHECKSUM in place: {sum:#x}, want {want:#x}");
    check!(
        y.stalls > x.stalls && y.replays > x.replays && y.cancels == x.cancels,
        "the device stalled {} times, {} replays, {} cancels, for two windows it had no entry of: {x:?} -> {y:?}",
        y.stalls - x.stalls,
        y.replays - x.replays,
        y.cancels - x.cancels
    );
    check!(
        y.records - x.records == y.stalls - x.stalls && y.overflows == x.overflows,
        "a stall without its record, or an overflow: {x:?} -> {y:?}"
    );
    check!(
        y.failed == x.failed && y.stale == x.stale && y.runs - x.runs == 2,
        "jobs failed, a translation was stale, or not one job per window: {x:?} -> {y:?}"
    );
    let sum = dev
        .exec(Exec::Checksum, a.addr(), LEN, true)
        .map_err(|x| format!("CHECKSUM again: {x}"))?
        .result;
    let z = counters(index)?;
    check!(sum == want, "CHECKSUM again: {sum:#x}");
    check!(
        z.cancels == y.cancels && z.failed == y.failed && z.runs - y.runs == 2,
        "the second run left the device or failed: {y:?} -> {z:?}"
    );
    // Nothing present: cancelled, serviced in the job's context, the rest
    // on the device.
    let b = Map::new(LEN)?;
    let pattern = [0x5au8, 0xc3, 0x17];
    dev.fill(&pattern, b.addr(), LEN, true)
        .map_err(|x| format!("FILL: {x}"))?;
    let w = counters(index)?;
    check!(
        w.cancels > z.cancels && w.failed == z.failed,
        "no fault cancelled, or a job failed: {z:?} -> {w:?}"
    );
    // A job per window, and one more for each cancelled window's rest:
    // on the CPU, the device ran only the first window.
    check!(
        w.runs - z.runs > windows(b.addr()),
        "the device ran {} jobs for the FILL's {} windows and their rest after a cancel (the rest not run on the device): {z:?} -> {w:?}",
        w.runs - z.runs,
        windows(b.addr())
    );
    let got = b.bytes();
    if let Some(k) = (0..LEN).find(|&k| got[k] != pattern[k % 3]) {
        return Err(format!("FILL: byte {k} is {:#x}", got[k]));
    }
    // A window the device starts and cannot finish: its first 512 KiB
    // written by the CPU (in small pages: a huge one would make the whole
    // 2 MiB present), then by a FILL in place (its entries bound writable;
    // 128 pages, below the access counters' threshold: the block stays),
    // the rest never touched. The device adds to the first, its fault at
    // the second is cancelled, the job's context faults the rest in, the
    // device adds to it: every word once.
    const HEAD: usize = 512 << 10;
    let mut c = Map::new(LEN)?;
    // SAFETY: advice on a mapping of this function's own.
    let r = unsafe {
        nix::libc::madvise(
            c.addr() as *mut nix::libc::c_void,
            LEN,
            nix::libc::MADV_NOHUGEPAGE,
        )
    };
    check!(r == 0, "madvise: {}", std::io::Error::last_os_error());
    fill(&mut c.bytes_mut()[..HEAD], 0x461);
    let eight = 0x0123_4567_89ab_cdefu64.to_ne_bytes();
    dev.fill(&eight, c.addr(), HEAD, true)
        .map_err(|x| format!("FILL of the head: {x}"))?;
    let head = eight.repeat(HEAD / 8);
    let u = counters(index)?;
    dev.exec(Exec::AtomicAdd(7), c.addr(), LEN, true)
        .map_err(|x| format!("ATOMIC_ADD: {x}"))?;
    let t = counters(index)?;
    check!(
        t.cancels > u.cancels && t.failed == u.failed,
        "ATOMIC_ADD: no fault cancelled, or a job failed: {u:?} -> {t:?}"
    );
    check!(
        t.runs - u.runs > windows(c.addr()),
        "ATOMIC_ADD: the device ran {} jobs for {} windows and their rest after a cancel: {u:?} -> {t:?}",
        t.runs - u.runs,
        windows(c.addr())
    );
    let word = |b: &[u8], k: usize| u64::from_ne_bytes(b[k..k + 8].try_into().unwrap_or([0; 8]));
    let got = c.bytes();
    if let Some(k) = (0..LEN).step_by(8).find(|&k| {
        let base = if k < HEAD { word(&head, k) } else { 0 };
        word(got, k) != base.wrapping_add(7)
    }) {
        return Err(format!(
            "ATOMIC_ADD: word at {k:#x} is {:#x}, want its value plus 7 once",
            word(got, k)
        ));
    }
    let sum = dev
        .exec(Exec::Checksum, a.addr(), LEN, true)
        .map_err(|x| format!("CHECKSUM after the cancels: {x}"))?
        .result;
    let v = counters(index)?;
    check!(sum == want, "CHECKSUM after the cancels: {sum:#x}");
    check!(
        v.runs - t.runs == 2 && v.failed == t.failed,
        "after a cancel, the next job did not run on the device: {t:?} -> {v:?}"
    );
    Ok(())
}

/// On the first msvm-gpu, a job queued behind one that never ends (debugfs
/// `job_engine`'s `hang 1`: a WAIT on a word nothing writes): the device's
/// watchdog stops the WAIT and halts the engine, msvm resets it, and the
/// job fails with `EIO`, unrun (its range, in the device's memory, keeps
/// every byte; another range too). The next job runs on the device.
fn watchdog_resets_a_hung_queue_and_the_next_job_runs() -> Outcome {
    const LEN: usize = 2 << 20;
    let Some((dev, index)) = first_gpu_with_jobs()? else {
        return Ok(());
    };
    let mut a = Map::new(LEN)?;
    let mut b = Map::new(LEN)?;
    fill(a.bytes_mut(), 0x462);
    fill(b.bytes_mut(), 0x463);
    let (want_a, want_b) = (a.bytes().to_vec(), checksum(b.bytes()));
    for m in [&a, &b] {
        dev.migrate(m.addr(), LEN, Location::Device).map_err(e)?;
    }
    // A job first: the mirror's first fault is left to its context.
    let sum = dev
        .exec(Exec::Checksum, b.addr(), LEN, true)
        .map_err(|x| format!("the first job: {x}"))?
        .result;
    check!(sum == want_b, "the first CHECKSUM: {sum:#x}");
    let x = counters(index)?;
    let (r, took, y) = {
        let _hang = Injection::hang(1)?;
        let start = Instant::now();
        let r = dev.fill(&[0xa5], a.addr(), LEN, true);
        (r, start.elapsed(), counters(index)?)
    };
    check!(
        r.as_ref().err().and_then(|x| x.errno()) == Some(nix::errno::Errno::EIO),
        "a FILL behind a hung job: {:?}, want EIO",
        r.map(|_| ())
    );
    check!(
        y.watchdog == x.watchdog + 1 && y.failed == x.failed + 1,
        "the watchdog stopped {} jobs, {} failed, in {took:?}; want 1 and 1: {x:?} -> {y:?}",
        y.watchdog - x.watchdog,
        y.failed - x.failed
    );
    if let Some(k) = (0..LEN).find(|&k| a.bytes()[k] != want_a[k]) {
        return Err(format!("byte {k} of the failed job's range changed"));
    }
    let sum = checksum(b.bytes());
    check!(sum == want_b, "the other range: {sum:#x}, want {want_b:#x}");
    dev.fill(&[0x5a], a.addr(), LEN, true)
        .map_err(|x| format!("the next FILL: {x}"))?;
    let z = counters(index)?;
    check!(
        z.runs > y.runs && z.failed == y.failed && z.watchdog == y.watchdog,
        "the next job did not run on the device: {y:?} -> {z:?}"
    );
    if let Some(k) = (0..LEN).find(|&k| a.bytes()[k] != 0x5a) {
        return Err(format!("the next FILL: byte {k} is {:#x}", a.bytes()[k]));
    }
    println!("# hw_watchdog: the hung queue reset, its job failed, in {took:?}");
    Ok(())
}
