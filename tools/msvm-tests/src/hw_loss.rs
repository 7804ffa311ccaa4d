//! msvm-gpu lost under a job (issue 45): hot-unplugged while a job's fault
//! is pending, or its device process killed while a job runs. Nothing
//! hangs, the job ends with an error or its result, and every byte the
//! process wrote, in system RAM or in the device's memory, is intact.

use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use msvm_rt::{checksum, Device, Exec, Location};
use nix::errno::Errno;

use crate::check;
use crate::harness::{Outcome, Test};
use crate::hw_jobs::{hangs_left, job_counters, jobs_on_device, Injection};
use crate::svm::{fill, verify, Map};
use crate::sysfs;
use crate::unplug::{addrs, host_wait};

/// Run by `msvm-tests hotplug`, after the hot unplug and replug.
pub fn hotplug_tests() -> Vec<Test> {
    vec![Test {
        name: "hot_unplug_while_a_fault_is_pending",
        run: hot_unplug_while_a_fault_is_pending,
    }]
}

const LEN: usize = 4 << 20;
/// Each stall's service waits this long first (debugfs `job_engine`'s
/// `stall_delay`, its most), unless the ioctl must stop: a job that ends
/// before it did not wait it out, however slow the machine (the unplug
/// takes 5.3 s here).
const DELAY_MS: u64 = 30_000;

fn e(x: impl std::fmt::Display) -> String {
    x.to_string()
}

/// One msvm-gpu's part: its VM, a buffer in its memory and one in system
/// RAM that a job checksums in place.
struct Part {
    addr: String,
    dev: Device,
    index: u32,
    parked: Map,
    seed: u64,
    data: Map,
    sum: u64,
}

impl Part {
    fn new(addr: String, dev: Device, index: u32, seed: u64) -> Result<Self, String> {
        dev.vm_create().map_err(e)?;
        let mut parked = Map::new(2 << 20)?;
        fill(parked.bytes_mut(), seed);
        dev.migrate(parked.addr(), parked.len(), Location::Device)
            .map_err(|x| format!("{addr}: {x}"))?;
        // The mirror's first fault is left to the job's context: a small
        // job takes it.
        let mut first = Map::new(1 << 20)?;
        fill(first.bytes_mut(), seed + 1);
        dev.exec(Exec::Checksum, first.addr(), first.len(), true)
            .map_err(|x| format!("{addr}: the first job: {x}"))?;
        let mut data = Map::new(LEN)?;
        fill(data.bytes_mut(), seed + 2);
        let sum = checksum(data.bytes());
        Ok(Self {
            addr,
            dev,
            index,
            parked,
            seed,
            data,
            sum,
        })
    }

    /// Every byte of both buffers is what was written.
    fn intact(&self) -> Outcome {
        verify(self.parked.bytes(), self.seed)
            .map_err(|x| format!("{}: the data in its memory: {x}", self.addr))?;
        let sum = checksum(self.data.bytes());
        check!(
            sum == self.sum,
            "{}: the data in system RAM changed",
            self.addr
        );
        Ok(())
    }
}

/// The stall count of device `index`'s fault buffer.
fn stalls(index: u32) -> Result<u64, String> {
    Ok(job_counters(index)?.map_or(0, |c| c.stalls))
}

/// Every msvm-gpu runs a CHECKSUM in place over 4 MiB the CPU wrote,
/// which stalls on its first window; each stall's service waits 30 s
/// first (`stall_delay`) with the device parked. With every job stalled,
/// gpu1 is hot-unplugged: every job must end before the delay (the
/// departure stops the service; the others' too, `EAGAIN`), with its
/// checksum or `ENODEV`, `EAGAIN` or `EIO`; the unplugged device's
/// memory must reach system RAM whole, every other byte stay; then gpu1
/// is plugged back in.
fn hot_unplug_while_a_fault_is_pending() -> Outcome {
    let before = addrs()?;
    let r = unplug_while_stalled(&before);
    // Plugged back in whatever happened: the tests after it unplug it.
    let back = if addrs()? == before {
        Ok(())
    } else {
        host_wait("device_add", "GPU bound again", 40, || {
            Ok(addrs()? == before)
        })
    };
    r.and(back)
}

/// [`hot_unplug_while_a_fault_is_pending`] up to the re-plug.
fn unplug_while_stalled(before: &std::collections::BTreeSet<String>) -> Outcome {
    let mut parts = Vec::new();
    for (k, g) in sysfs::msvm_gpus()?.into_iter().enumerate() {
        let dev = Device::open(&g.node).map_err(e)?;
        let index = dev.query().map_err(e)?.index;
        if jobs_on_device(index)? {
            parts.push(Part::new(g.addr, dev, index, 4500 + 10 * k as u64)?);
        }
    }
    if parts.len() < 2 {
        return Ok(());
    }
    // Counted before the jobs start: a job may stall at once.
    let counts = parts
        .iter()
        .map(|p| stalls(p.index))
        .collect::<Result<Vec<_>, _>>()?;
    let delay = Injection::stall_delay(DELAY_MS)?;
    let parts: Vec<Arc<Part>> = parts.into_iter().map(Arc::new).collect();
    let start = Instant::now();
    let (tx, rx) = mpsc::channel();
    // Not scoped: a job stuck for good fails the test rather than hang it.
    for (k, p) in parts.iter().enumerate() {
        let (tx, p) = (tx.clone(), p.clone());
        std::thread::spawn(move || {
            let r = p.dev.exec(Exec::Checksum, p.data.addr(), LEN, true);
            let _ = tx.send((k, r.map(|o| o.result), start.elapsed()));
        });
    }
    drop(tx);
    // Every job stalled, its service waiting.
    let stalled = || -> Result<bool, String> {
        let mut all = true;
        for (p, &n) in parts.iter().zip(&counts) {
            all &= stalls(p.index)? > n;
        }
        Ok(all)
    };
    while !stalled()? {
        check!(
            start.elapsed() < Duration::from_secs(60),
            "not every job stalled within 60 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let asked = start.elapsed();
    let unplug = host_wait("device_del", "GPU unbound", 40, || {
        Ok(addrs()?.len() == before.len() - 1)
    });
    let mut ran = Vec::new();
    while ran.len() < parts.len() {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(r) => ran.push(r),
            Err(_) => return Err(format!("jobs still running after 60 s: {ran:?}")),
        }
    }
    drop(delay);
    unplug?;
    for (k, r, took) in &ran {
        let p = &parts[*k];
        match r {
            Ok(sum) => check!(*sum == p.sum, "{}: checksum {sum:#x}", p.addr),
            Err(x) => check!(
                matches!(x.errno(), Some(Errno::ENODEV | Errno::EAGAIN | Errno::EIO)),
                "{}: the job: {x}",
                p.addr
            ),
        }
        check!(
            took.as_millis() < u128::from(DELAY_MS),
            "{}: the job took {took:?}, the unplug asked for after {asked:?}: its stall's service waited out its {DELAY_MS} ms, not stopped by the departure",
            p.addr
        );
        println!(
            "# {}: {} after {took:?}",
            p.addr,
            match r {
                Ok(_) => "checksum".to_string(),
                Err(x) => x.to_string(),
            }
        );
    }
    for p in &parts {
        p.intact()?;
    }
    Ok(())
}

/// `msvm-tests device-lost` (the small-RAM guest, last): the last msvm-gpu's
/// device process is killed (`MSVM-HOST: kill gpuN`, N its position) while
/// a job runs on it (queued behind a WAIT: `hang 1`). The job must end
/// with `EIO` within 14 s (not at msvm's 15 s wait), msvm report the
/// device lost (its job engine unusable, nothing counted by the
/// watchdog), every byte in system RAM and in the device's memory
/// (which QEMU keeps mapped: the model's VRAM is memory) be intact, and
/// the next job run, on the CPU, right.
pub fn device_lost() -> Outcome {
    let gpus = sysfs::msvm_gpus()?;
    let Some((n, g)) = gpus.iter().enumerate().next_back() else {
        return Err("no GPU".into());
    };
    let dev = Device::open(&g.node).map_err(e)?;
    let index = dev.query().map_err(e)?.index;
    if !jobs_on_device(index)? {
        return Err(format!("{}: no job engine", g.addr));
    }
    let p = Part::new(g.addr.clone(), dev, index, 4600)?;
    let before = job_counters(index)?.ok_or("no job engine line")?;
    let mut target = Map::new(2 << 20)?;
    fill(target.bytes_mut(), 4610);
    let hang = Injection::hang(1)?;
    let start = Instant::now();
    let r = std::thread::scope(|s| {
        let job = s.spawn(|| {
            let r = p.dev.fill(&[0x3c], target.addr(), target.len(), true);
            (r, start.elapsed())
        });
        // Killed while the job waits, the driver asleep between two looks
        // at the engine: QEMU 11.1's vfio-user client aborts when the
        // server dies with a message of QEMU's unread (its socket reads
        // ECONNRESET, and it sets that error twice: "error_setv: Assertion
        // `*errp == NULL' failed"), such as the posted register writes of
        // a job's submission.
        let t = Instant::now();
        while hangs_left().unwrap_or(0) != 0 && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(500));
        // Twice: a console line can be cut by kernel messages (the harness
        // answers a repeated request once).
        for _ in 0..2 {
            println!("MSVM-HOST: kill gpu{n}");
        }
        job.join()
    });
    drop(hang);
    let (r, took) = r.map_err(|_| "the job's thread panicked")?;
    println!("# the job on the killed device: {r:?} after {took:?}");
    check!(
        r.as_ref().err().and_then(|x| x.errno()) == Some(Errno::EIO),
        "the job on the killed device: {r:?}, want EIO"
    );
    // A register of a device gone reads all ones: msvm's next look at the
    // engine tells (QEMU may first wait out its 5 s for a reply), before
    // msvm's own 15 s wait for a job would end it.
    check!(
        took < Duration::from_secs(14),
        "the job on the killed device ended after {took:?}: the device's loss went unseen"
    );
    let after = job_counters(index)?.ok_or("no job engine line")?;
    check!(
        after.usable == 0 && after.watchdog == before.watchdog,
        "msvm did not report the device lost, or the watchdog ended the job: {before:?} -> {after:?}"
    );
    p.intact()?;
    let sum = p
        .dev
        .exec(Exec::Checksum, p.data.addr(), LEN, true)
        .map_err(|x| format!("the next job: {x}"))?
        .result;
    check!(sum == p.sum, "the next job's checksum: {sum:#x}");
    Ok(())
}
