//! msvm-gpu's job engine and MMU at work (issue 45): jobs run on the
//! device, in the VM's context, through page tables msvm writes in the
//! device's format; the device's TLB is invalidated before a page goes,
//! which its checking mode would catch otherwise. debugfs `job_engine`
//! counts both sides.

use std::fs;
use std::num::NonZeroUsize;

use msvm_rt::{checksum, Device, Exec, Location};
use nix::sys::mman::{mmap_anonymous, munmap, MapFlags, ProtFlags};

use crate::check;
use crate::harness::{Outcome, Test};
use crate::hw::debugfs_row;
use crate::svm::{fill, verify, Map};
use crate::sysfs;

pub fn tests() -> Vec<Test> {
    vec![
        Test {
            name: "hw_jobs_run_on_the_job_engine",
            run: jobs_run_on_the_job_engine,
        },
        Test {
            name: "hw_munmap_invalidates_the_device_tlb",
            run: munmap_invalidates_the_device_tlb,
        },
        Test {
            name: "hw_contexts_come_and_go",
            run: contexts_come_and_go,
        },
    ]
}

const JOB_ENGINE: &str = "/sys/kernel/debug/msvm/job_engine";
const LEN: usize = 4 << 20;

fn e(x: impl std::fmt::Display) -> String {
    x.to_string()
}

/// One device's line of debugfs `job_engine`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct JobCounters {
    pub(crate) usable: u64,
    pub(crate) runs: u64,
    pub(crate) bytes_written: u64,
    pub(crate) bytes_read: u64,
    pub(crate) failed: u64,
    pub(crate) device_done: u64,
    pub(crate) invalidations: u64,
    pub(crate) stale: u64,
    /// The fault buffer's: stalls the driver took, records, overflows,
    /// replays and cancels it wrote.
    pub(crate) stalls: u64,
    pub(crate) records: u64,
    pub(crate) overflows: u64,
    pub(crate) replays: u64,
    pub(crate) cancels: u64,
    /// Jobs the device's watchdog stopped.
    pub(crate) watchdog: u64,
    /// Microseconds the device says its job engine ran jobs.
    pub(crate) busy_us: u64,
    /// Windows msvm queued behind a window running (a warm job's
    /// pipeline), and pipelines it ended early for a waiter.
    pub(crate) pipelined: u64,
    pub(crate) yields: u64,
}

/// The job engine's counters of device `index`, `None` if it has none.
pub(crate) fn job_counters(index: u32) -> Result<Option<JobCounters>, String> {
    Ok(debugfs_row(JOB_ENGINE, index, 22)?.map(|f| JobCounters {
        usable: f[1],
        runs: f[2],
        bytes_written: f[3],
        bytes_read: f[4],
        failed: f[6],
        device_done: f[7],
        invalidations: f[8],
        stale: f[12],
        stalls: f[13],
        records: f[14],
        overflows: f[15],
        replays: f[16],
        cancels: f[17],
        watchdog: f[18],
        busy_us: f[19],
        pipelined: f[20],
        yields: f[21],
    }))
}

/// Whether device `index` runs jobs on its job engine (msvm-gpu, the
/// engine in use and usable).
pub(crate) fn jobs_on_device(index: u32) -> Result<bool, String> {
    let text = fs::read_to_string(JOB_ENGINE).map_err(|x| format!("{JOB_ENGINE}: {x}"))?;
    let used = text.lines().next().is_some_and(|l| l.starts_with("use 1 "));
    Ok(used && job_counters(index)?.is_some_and(|c| c.usable == 1))
}

/// Turns the job engines' use on or off.
pub(crate) fn use_jobs(on: bool) -> Result<(), String> {
    fs::write(JOB_ENGINE, if on { "1" } else { "0" }).map_err(|x| format!("{JOB_ENGINE}: {x}"))
}

/// Hangs not yet queued (debugfs `job_engine`'s first line: `use U hang
/// N stall_delay MS pipeline P`).
pub(crate) fn hangs_left() -> Result<u32, String> {
    let text = fs::read_to_string(JOB_ENGINE).map_err(|x| format!("{JOB_ENGINE}: {x}"))?;
    let first = text.lines().next().unwrap_or("");
    let n = first.split_whitespace().skip_while(|&w| w != "hang").nth(1);
    n.and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("{JOB_ENGINE}: no hang count in {first:?}"))
}

/// A fault injection of debugfs `job_engine` in effect (`hang N`,
/// `stall_delay MS`), undone when dropped, however the test ends.
pub(crate) struct Injection {
    /// What undoes it.
    undo: &'static str,
}

impl Injection {
    fn write(what: &str) -> Result<(), String> {
        fs::write(JOB_ENGINE, what).map_err(|x| format!("{JOB_ENGINE}: {x}"))
    }

    /// Queues each of the next `n` jobs behind one that never ends.
    pub(crate) fn hang(n: u32) -> Result<Self, String> {
        Self::write(&format!("hang {n}"))?;
        Ok(Self { undo: "hang 0" })
    }

    /// Makes each service of a stalled job wait `ms` ms first.
    pub(crate) fn stall_delay(ms: u64) -> Result<Self, String> {
        Self::write(&format!("stall_delay {ms}"))?;
        Ok(Self {
            undo: "stall_delay 0",
        })
    }
}

impl Drop for Injection {
    fn drop(&mut self) {
        let _ = Self::write(self.undo);
    }
}

/// The 64-bit words of `bytes`, each plus `v`.
fn plus(bytes: &[u8], v: u64) -> Vec<u8> {
    bytes
        .chunks(8)
        .flat_map(|w| {
            let x = u64::from_ne_bytes(w.try_into().unwrap_or([0; 8]));
            x.wrapping_add(v).to_ne_bytes()
        })
        .collect()
}

/// Two 4 MiB ranges in the first GPU's memory: CHECKSUM of one, COPY of
/// it over the other, ATOMIC_ADD over that, CHECKSUM of it, then a FILL
/// with a 3-byte pattern; each result checked on the CPU. On msvm-gpu the
/// device runs them (debugfs `job_engine`: jobs and bytes each way, no
/// failure, as many jobs done on the device's side as on the driver's,
/// no stale translation); with `job_engine` 0 a CHECKSUM leaves its
/// counters alone and is still right. On other devices, no such line.
fn jobs_run_on_the_job_engine() -> Outcome {
    let gpu = sysfs::msvm_gpus()?.into_iter().next().ok_or("no GPU")?;
    let dev = Device::open(&gpu.node).map_err(e)?;
    dev.vm_create().map_err(e)?;
    let index = dev.query().map_err(e)?.index;
    let before = job_counters(index)?;
    let mut a = Map::new(LEN)?;
    let mut b = Map::new(LEN)?;
    fill(a.bytes_mut(), 0x10b);
    fill(b.bytes_mut(), 0x10c);
    let want_a = a.bytes().to_vec();
    for m in [&a, &b] {
        dev.migrate(m.addr(), m.len(), Location::Device)
            .map_err(e)?;
    }
    let job = |j: Exec, m: &Map| {
        dev.exec(j, m.addr(), m.len(), false)
            .map_err(|x| format!("{j:?}: {x}"))
    };
    let sum = job(Exec::Checksum, &a)?.result;
    check!(sum == checksum(&want_a), "CHECKSUM of a: {sum:#x}");
    job(Exec::Copy { src: a.addr() }, &b)?;
    job(Exec::AtomicAdd(0x0101), &b)?;
    let want_b = plus(&want_a, 0x0101);
    let sum = job(Exec::Checksum, &b)?.result;
    check!(
        sum == checksum(&want_b),
        "CHECKSUM of b after COPY and ADD: {sum:#x}"
    );
    let pattern = [0xa1u8, 0xb2, 0xc3];
    dev.fill(&pattern, a.addr() + 5, LEN - 10, false)
        .map_err(|x| format!("FILL: {x}"))?;
    let after = job_counters(index)?;
    // The CPU reads both (faulting them home).
    check!(b.bytes() == &want_b[..], "b after COPY and ADD differs");
    let got = a.bytes();
    check!(
        got[..5] == want_a[..5] && got[LEN - 5..] == want_a[LEN - 5..],
        "FILL wrote outside its range"
    );
    if let Some(k) = (5..LEN - 5).find(|&k| got[k] != pattern[(k - 5) % 3]) {
        return Err(format!("FILL: byte {k} is {:#x}", got[k]));
    }
    let (Some(x), Some(y)) = (before, after) else {
        check!(
            before.is_none() && after.is_none(),
            "{}: a job engine line on one side only",
            gpu.addr
        );
        return Ok(());
    };
    check!(x.usable == 1 && y.usable == 1, "not usable: {y:?}");
    // Four 4 MiB jobs and a FILL, 2 MiB windows each.
    check!(
        y.runs - x.runs >= 10,
        "{} jobs ran on the device for 10 windows: {x:?} -> {y:?}",
        y.runs - x.runs
    );
    check!(
        y.bytes_written - x.bytes_written >= 3 * LEN as u64 - 10
            && y.bytes_read - x.bytes_read >= 2 * LEN as u64,
        "bytes by the job engine: {x:?} -> {y:?}"
    );
    check!(
        y.failed == x.failed && y.stale == x.stale,
        "jobs failed or a translation was stale: {x:?} -> {y:?}"
    );
    check!(
        y.device_done - x.device_done == y.runs - x.runs,
        "the device completed {} jobs, the driver counted {}",
        y.device_done - x.device_done,
        y.runs - x.runs
    );
    // The CPU's baseline: the same job, the engine off.
    let mut c = Map::new(LEN)?;
    fill(c.bytes_mut(), 0x10d);
    let want_c = c.bytes().to_vec();
    dev.migrate(c.addr(), c.len(), Location::Device)
        .map_err(e)?;
    use_jobs(false)?;
    let r = job(Exec::Checksum, &c);
    let off = job_counters(index);
    use_jobs(true)?;
    check!(r?.result == checksum(&want_c), "CHECKSUM on the CPU");
    let off = off?.ok_or("the job engine line went")?;
    let now = job_counters(index)?.ok_or("the job engine line went")?;
    check!(
        off.runs == now.runs && now.runs == y.runs,
        "job_engine 0, yet the device ran jobs: {y:?} -> {off:?}"
    );
    verify(c.bytes(), 0x10d)
}

/// A range the device ran jobs on (its TLB holds its translations) is
/// unmapped; its VRAM pages go to another range; a new mapping at the same
/// address, in system RAM, runs jobs in place: they must see the new
/// pages (the right checksum, no stale translation counted, an
/// invalidation counted), which only the device's TLB invalidation at the
/// unmap ensures (a module that skips it fails here: the device's
/// checking mode halts the job, `EIO`).
fn munmap_invalidates_the_device_tlb() -> Outcome {
    let gpu = sysfs::msvm_gpus()?.into_iter().next().ok_or("no GPU")?;
    let dev = Device::open(&gpu.node).map_err(e)?;
    dev.vm_create().map_err(e)?;
    let index = dev.query().map_err(e)?.index;
    let len = 2 << 20;
    let m = Map::new(len)?;
    let addr = m.addr();
    let sum = |what: &str, want: &[u8], in_place: bool| -> Outcome {
        // Twice: the second runs from the device's TLB.
        for k in 0..2 {
            let got = dev
                .exec(Exec::Checksum, addr, len, in_place)
                .map_err(|x| format!("{what}: CHECKSUM {k}: {x}"))?
                .result;
            check!(got == checksum(want), "{what}: CHECKSUM {k}: {got:#x}");
        }
        Ok(())
    };
    let bytes = |seed: u64| {
        let mut v = vec![0u8; len];
        fill(&mut v, seed);
        v
    };
    // SAFETY: `m` owns `[addr, addr + len)`: its contents are written
    // here only.
    let old = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) };
    old.copy_from_slice(&bytes(0x71));
    dev.migrate(addr, len, Location::Device).map_err(e)?;
    sum("before the unmap", &bytes(0x71), false)?;
    let before = job_counters(index)?;
    // SAFETY: the range is `m`'s, and nothing borrows it now (`old` is
    // not used again); it is mapped anew below, before `m` unmaps it.
    unsafe { munmap(std::ptr::NonNull::new(addr as *mut _).ok_or("null")?, len) }
        .map_err(|x| format!("munmap: {x}"))?;
    // Its VRAM pages go to another range.
    let mut other = Map::new(len)?;
    fill(other.bytes_mut(), 0x72);
    dev.migrate(other.addr(), len, Location::Device)
        .map_err(e)?;
    // SAFETY: the address range was just unmapped and is `m`'s to drop.
    let p = unsafe {
        mmap_anonymous(
            Some(NonZeroUsize::new(addr).ok_or("null")?),
            NonZeroUsize::new(len).ok_or("empty")?,
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_PRIVATE | MapFlags::MAP_FIXED,
        )
    }
    .map_err(|x| format!("mmap at {addr:#x}: {x}"))?;
    check!(p.as_ptr() as usize == addr, "mapped elsewhere");
    // SAFETY: the new mapping at `addr`, written here only.
    let new = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) };
    new.copy_from_slice(&bytes(0x73));
    // Read where they are (system RAM, by DMA): the device's entries for
    // the addresses change kind, whatever VRAM pages the allocator hands
    // out.
    sum("after the unmap", &bytes(0x73), true)?;
    verify(other.bytes(), 0x72)?;
    drop(m);
    if let (Some(x), Some(y)) = (before, job_counters(index)?) {
        check!(
            y.stale == x.stale && y.failed == x.failed,
            "a stale translation or a failed job: {x:?} -> {y:?}"
        );
        check!(
            y.invalidations > x.invalidations && y.runs > x.runs,
            "no invalidation, or no job on the device: {x:?} -> {y:?}"
        );
    }
    Ok(())
}

/// VMs come and go on one device while others run jobs: A and B run jobs,
/// A goes (its MMU context and page tables freed), C comes and runs jobs,
/// then B again: every checksum right, no job failed. (When the context
/// table's page counted as context 0's, A's end freed it, C's root took
/// it, and B's next job found its context gone: `EIO`.)
fn contexts_come_and_go() -> Outcome {
    let gpu = sysfs::msvm_gpus()?.into_iter().next().ok_or("no GPU")?;
    let vm = || -> Result<Device, String> {
        let d = Device::open(&gpu.node).map_err(e)?;
        d.vm_create().map_err(e)?;
        Ok(d)
    };
    let len = 2 << 20;
    let mut m = Map::new(len)?;
    fill(m.bytes_mut(), 0x5c);
    let want = checksum(m.bytes());
    let run = |d: &Device, who: &str| -> Outcome {
        for k in 0..2 {
            let got = d
                .exec(Exec::Checksum, m.addr(), len, false)
                .map_err(|x| format!("{who}: CHECKSUM {k}: {x}"))?
                .result;
            check!(got == want, "{who}: CHECKSUM {k}: {got:#x}");
        }
        Ok(())
    };
    let a = vm()?;
    let b = vm()?;
    a.migrate(m.addr(), len, Location::Device).map_err(e)?;
    run(&a, "A")?;
    run(&b, "B")?;
    drop(a);
    let c = vm()?;
    run(&c, "C")?;
    run(&b, "B after A went and C came")?;
    drop((b, c));
    verify(m.bytes(), 0x5c)
}
