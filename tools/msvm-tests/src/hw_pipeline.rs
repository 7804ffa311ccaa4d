//! A warm job's windows pipelined on msvm-gpu's job engine (issue 45):
//! each window is still one job, but msvm queues the next behind the one
//! running, a CHECKSUM's hash carried from job to job by the device
//! (CHAIN). debugfs `job_engine` counts the windows queued so
//! (`pipelined`) and the pipelines ended early for a waiter (`yields`).

use std::fs;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use msvm_rt::{checksum, Device, Exec, Location};
use nix::sys::mman::{madvise, MmapAdvise};

use crate::check;
use crate::harness::{Outcome, Test};
use crate::hw_faults::{counters, first_gpu_with_jobs};
use crate::hw_jobs::JobCounters;
use crate::svm::{fill, Map};

pub fn tests() -> Vec<Test> {
    vec![
        Test {
            name: "hw_warm_windows_are_pipelined_and_right",
            run: warm_windows_are_pipelined_and_right,
        },
        Test {
            name: "hw_a_pipeline_yields_to_an_invalidation",
            run: a_pipeline_yields_to_an_invalidation,
        },
    ]
}

const JOB_ENGINE: &str = "/sys/kernel/debug/msvm/job_engine";

fn e(x: impl std::fmt::Display) -> String {
    x.to_string()
}

/// Turns pipelining on or off (debugfs `job_engine`'s `pipeline`).
pub(crate) fn set_pipeline(on: bool) -> Result<(), String> {
    fs::write(JOB_ENGINE, if on { "pipeline 1" } else { "pipeline 0" })
        .map_err(|x| format!("{JOB_ENGINE}: {x}"))
}

/// Pipelining off, on again when dropped, however the test ends.
struct Unpipelined;

impl Unpipelined {
    fn new() -> Result<Self, String> {
        set_pipeline(false)?;
        Ok(Self)
    }
}

impl Drop for Unpipelined {
    fn drop(&mut self) {
        let _ = set_pipeline(true);
    }
}

/// A job over `len` bytes of `m` from byte `at`, with what the counters
/// of `index` did meanwhile.
fn exec(
    dev: &Device,
    index: u32,
    job: Exec,
    (m, at, len): (&Map, usize, usize),
) -> Result<(u64, JobCounters, JobCounters), String> {
    let before = counters(index)?;
    let r = dev
        .exec(job, m.addr() + at, len, false)
        .map_err(|x| format!("{job:?}: {x}"))?;
    Ok((r.result, before, counters(index)?))
}

/// 2 MiB windows of `len` bytes from `addr` (the first and last may be
/// short).
fn windows(addr: usize, len: usize) -> u64 {
    let block = 2 << 20;
    ((addr + len).div_ceil(block) - addr / block) as u64
}

/// On the first msvm-gpu, 16 MiB (plus a page) in its memory, warm (the
/// VM's table maps them): a CHECKSUM from an odd address, an ATOMIC_ADD,
/// a COPY into a second warm range, and a FILL with a 3-byte pattern from
/// an odd address, each over 8 or 9 windows. Each runs one job per window,
/// all but the first window (or more, if a waiter made a pipeline end
/// early: `yields`) queued behind the one running (`pipelined`), nothing
/// fails; the CHECKSUM, with pipelining and without, is the CPU's, and the
/// CPU finds every byte the jobs wrote. Without the device's CHAIN (each
/// job hashing from its own seed), the pipelined CHECKSUM differs.
fn warm_windows_are_pipelined_and_right() -> Outcome {
    let Some((dev, index)) = first_gpu_with_jobs()? else {
        return Ok(());
    };
    // (A benchmark stopped early may have left it off.)
    set_pipeline(true)?;
    let len = (16 << 20) + 4096;
    let mut a = Map::new(len)?;
    let mut b = Map::new(len)?;
    fill(a.bytes_mut(), 0x91);
    fill(b.bytes_mut(), 0x92);
    let want_a = a.bytes().to_vec();
    // In the device's memory, the VM's table mapping them writable (the
    // first jobs fault it in).
    for m in [&a, &b] {
        dev.migrate(m.addr(), len, Location::Device).map_err(e)?;
        dev.exec(Exec::AtomicAdd(0), m.addr(), len, false)
            .map_err(e)?;
    }
    // Each job: a device job per window, windows queued behind the one
    // before. `all`: every window but the first, less two a yield (the
    // window after it runs alone, the next pipeline's first is not
    // queued behind one); otherwise at least one (an invalidation of the
    // process may make a window cold, which then faults).
    let pipelined =
        |what: &str, n: u64, (x, y): (&JobCounters, &JobCounters), all: bool| -> Outcome {
            let (runs, queued, yields) = (
                y.runs - x.runs,
                y.pipelined - x.pipelined,
                y.yields - x.yields,
            );
            check!(
                runs == n && y.failed == x.failed,
                "{what}: {runs} device jobs for {n} windows; {x:?} -> {y:?}"
            );
            let enough = if all {
                queued + 2 * yields + 1 >= n
            } else {
                queued >= 1
            };
            check!(
                enough && queued < n,
                "{what}: {queued} of {n} windows pipelined, {yields} yields"
            );
            Ok(())
        };
    let odd = 4096 + 40;
    let n = len - odd - 8;
    let w = windows(a.addr() + odd, n);
    // The counts once more if an invalidation made a window cold (the
    // data is checked every time).
    let mut counted = Err(String::new());
    for _ in 0..2 {
        let (sum, x, y) = exec(&dev, index, Exec::Checksum, (&a, odd, n))?;
        check!(
            sum == checksum(&want_a[odd..odd + n]),
            "pipelined CHECKSUM {sum:#x}, want the CPU's {:#x}",
            checksum(&want_a[odd..odd + n])
        );
        counted = pipelined("CHECKSUM", w, (&x, &y), true);
        if counted.is_ok() {
            break;
        }
    }
    counted?;
    {
        let _off = Unpipelined::new()?;
        let (sum, x, y) = exec(&dev, index, Exec::Checksum, (&a, odd, n))?;
        check!(
            sum == checksum(&want_a[odd..odd + n]),
            "CHECKSUM, pipelining off: {sum:#x}"
        );
        check!(
            y.pipelined == x.pipelined && y.runs - x.runs == w,
            "pipelining off, yet {} windows pipelined ({} jobs)",
            y.pipelined - x.pipelined,
            y.runs - x.runs
        );
    }
    // Every word of a, plus 7; then a over b.
    let w_all = windows(a.addr(), len);
    let (_, x, y) = exec(&dev, index, Exec::AtomicAdd(7), (&a, 0, len))?;
    pipelined("ATOMIC_ADD", w_all, (&x, &y), false)?;
    let (_, x, y) = exec(&dev, index, Exec::Copy { src: a.addr() }, (&b, 0, len))?;
    pipelined("COPY", windows(b.addr(), len), (&x, &y), false)?;
    let pattern = [0x5au8, 0xa5, 0x3c];
    let before = counters(index)?;
    dev.fill(&pattern, b.addr() + odd, n, false)
        .map_err(|x| format!("FILL: {x}"))?;
    let w_b = windows(b.addr() + odd, n);
    pipelined("FILL", w_b, (&before, &counters(index)?), false)?;
    // The CPU reads both (faulting them home).
    let got_a = a.bytes();
    let plus7 = |k: usize| {
        let word = u64::from_ne_bytes(want_a[k & !7..(k & !7) + 8].try_into().unwrap_or([0; 8]));
        word.wrapping_add(7).to_ne_bytes()[k % 8]
    };
    if let Some(k) = (0..len).find(|&k| got_a[k] != plus7(k)) {
        return Err(format!("a: byte {k} is {:#x} after ATOMIC_ADD 7", got_a[k]));
    }
    let got_b = b.bytes();
    for k in 0..len {
        let want = if (odd..odd + n).contains(&k) {
            pattern[(k - odd) % 3]
        } else {
            plus7(k)
        };
        check!(
            got_b[k] == want,
            "b: byte {k} is {:#x}, want {want:#x} (COPY, then FILL from byte {odd})",
            got_b[k]
        );
    }
    Ok(())
}

/// On the first msvm-gpu, CHECKSUMs of 32 MiB in its memory, warm, while
/// another thread of the process invalidates a page of its own again and
/// again (`MADV_DONTNEED`: the mm core tells every mirror of the process,
/// whose lock a pipeline holds): the pipelines end early for it
/// (`yields`; 4 to 20 jobs, until one did and the thread made 10 calls),
/// every CHECKSUM is right, and
/// the other thread gets through: the median wait of its calls made
/// while a job ran is under a third of a CHECKSUM's time alone (a
/// window to three of 16: those queued, not the rest of the job).
fn a_pipeline_yields_to_an_invalidation() -> Outcome {
    let Some((dev, index)) = first_gpu_with_jobs()? else {
        return Ok(());
    };
    let len = 32 << 20;
    let mut a = Map::new(len)?;
    fill(a.bytes_mut(), 0x93);
    let want = checksum(a.bytes());
    dev.migrate(a.addr(), len, Location::Device).map_err(e)?;
    dev.exec(Exec::Checksum, a.addr(), len, false).map_err(e)?;
    // A CHECKSUM's time with no one waiting, the best of two.
    let mut alone = f64::MAX;
    for _ in 0..2 {
        let t = Instant::now();
        dev.exec(Exec::Checksum, a.addr(), len, false).map_err(e)?;
        alone = alone.min(t.elapsed().as_secs_f64());
    }
    let other = Map::new(4096)?;
    let page = other.addr();
    let stop = AtomicBool::new(false);
    // A CHECKSUM is running (the calls counted are those made meanwhile).
    let running = AtomicBool::new(false);
    let calls = std::sync::Mutex::new(Vec::new());
    let start = counters(index)?;
    let r = std::thread::scope(|s| {
        s.spawn(|| -> Outcome {
            let p = NonNull::new(page as *mut std::ffi::c_void).ok_or("null map")?;
            while !stop.load(Ordering::Relaxed) {
                // SAFETY: `other` is this test's page, which no reference
                // spans: its contents may go.
                unsafe { p.as_ptr().cast::<u8>().write_volatile(1) };
                let during = running.load(Ordering::Acquire);
                let t = Instant::now();
                // SAFETY: as above.
                let _ = unsafe { madvise(p, 4096, MmapAdvise::MADV_DONTNEED) };
                let took = t.elapsed().as_secs_f64();
                if during {
                    calls.lock().map_err(|_| "poisoned")?.push(took);
                }
            }
            Ok(())
        });
        let r = (|| -> Result<(usize, JobCounters), String> {
            for k in 1..=20 {
                running.store(true, Ordering::Release);
                let ran = dev.exec(Exec::Checksum, a.addr(), len, false);
                running.store(false, Ordering::Release);
                let sum = ran.map_err(|x| format!("CHECKSUM {k}: {x}"))?.result;
                let y = counters(index)?;
                check!(sum == want, "CHECKSUM {k}: {sum:#x}, want {want:#x}");
                let made = calls.lock().map_err(|_| "poisoned")?.len();
                if y.yields > start.yields && k >= 4 && made >= 10 {
                    return Ok((k, y));
                }
            }
            let y = counters(index)?;
            check!(
                y.yields > start.yields,
                "20 pipelined CHECKSUMs never yielded to the invalidations"
            );
            Ok((20, y))
        })();
        stop.store(true, Ordering::Relaxed);
        r
    });
    let (jobs, y) = r?;
    let mut calls = calls.into_inner().map_err(|_| "poisoned")?;
    calls.sort_by(f64::total_cmp);
    let (Some(&p50), Some(&longest)) = (calls.get(calls.len() / 2), calls.last()) else {
        return Err("the other thread made no call".into());
    };
    println!(
        "# {jobs} CHECKSUMs of 32 MiB ({:.1} ms alone): {} yields, {} windows pipelined; {} invalidations meanwhile, p50 {:.1} ms, the longest {:.1} ms",
        alone * 1e3,
        y.yields - start.yields,
        y.pipelined - start.pipelined,
        calls.len(),
        p50 * 1e3,
        longest * 1e3
    );
    check!(y.failed == start.failed, "jobs failed: {start:?} -> {y:?}");
    // A call made while a job ran waits for up to three windows of its 16,
    // not for the rest of the job.
    let short = p50 < alone / 3.0;
    check!(
        short,
        "the invalidations' median wait {:.1} ms, a CHECKSUM alone {:.1} ms",
        p50 * 1e3,
        alone * 1e3
    );
    Ok(())
}
