//! The device's fault queue and its handler (`Documentation/design.rst`,
//! "Faults"): a job's miss raises the faults of its window and of the
//! windows after it; the device's handler services them in batches, and
//! the job replays from the table. Entries of pages used where they are
//! serve the next job in place, and no other job's placement pass; many
//! VMs fault on one device at once; a process killed while its faults are
//! queued leaves nothing behind.

use std::time::Duration;

use msvm_rt::{Exec, Stats};
use nix::sys::mman::{madvise, MmapAdvise};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult};

use crate::check;
use crate::harness::{Outcome, Test};
use crate::svm::{fill, gpu0, stats, Map, PAGE};

pub fn tests() -> Vec<Test> {
    vec![
        Test {
            name: "faults_batched_and_replayed",
            run: batched_and_replayed,
        },
        Test {
            name: "faults_entries_in_place_serve_jobs_in_place_only",
            run: entries_in_place_serve_jobs_in_place_only,
        },
        Test {
            name: "faults_copy_from_a_read_only_neighbour",
            run: copy_from_a_read_only_neighbour,
        },
        Test {
            name: "faults_the_job_services_what_the_handler_cannot",
            run: the_job_services_what_the_handler_cannot,
        },
        Test {
            name: "faults_storm_of_tenants",
            run: storm_of_tenants,
        },
        Test {
            name: "faults_killed_with_faults_queued",
            run: killed_with_faults_queued,
        },
    ]
}

const HUGE: usize = 2 << 20;

fn e(x: impl std::fmt::Display) -> String {
    x.to_string()
}

/// The fault counters from `a` to `b`: raised, batches, spans, pages.
fn fq(a: &Stats, b: &Stats) -> (u64, u64, u64, u64) {
    (
        b.fault_raised - a.fault_raised,
        b.fault_batches - a.fault_batches,
        b.fault_spans - a.fault_spans,
        b.fault_pages - a.fault_pages,
    )
}

/// 16 MiB in system RAM (2 MiB aligned), CHECKSUMmed in place twice by
/// gpu0 with the default attributes: nothing keeps pages in system RAM, so
/// the first job faults all 8 windows; its first miss raises the faults of
/// all 8 (one batch, or two if the handler woke between them), the handler
/// services every page once, each window replays, and the entries stay for
/// the next job in place (the table grew). The first job used every block
/// more than `access_threshold` times in place: the access counters have
/// them all due, so the second job runs its placement pass in spite of the
/// entries, moves them here (the move zaps the entries) and faults again.
fn batched_and_replayed() -> Outcome {
    let dev = gpu0()?;
    const LEN: usize = 8 * HUGE;
    let (pages, windows) = ((LEN / PAGE) as u64, (LEN / HUGE) as u64);
    let (_outer, mut m) = crate::devpt::aligned(LEN)?;
    let start = m.addr();
    fill(m.bytes_mut(), 401);
    let want = msvm_rt::checksum(m.bytes());
    for k in 0..2 {
        let s0 = stats(&dev)?;
        let j = dev.exec(Exec::Checksum, start, LEN, true).map_err(e)?;
        let s1 = stats(&dev)?;
        check!(
            j.result == want,
            "job {k}: checksum {:#x}, want {want:#x}",
            j.result
        );
        let (raised, batches, spans, served) = fq(&s0, &s1);
        let hits = s1.pt_hits - s0.pt_hits;
        let faults = s1.pt_faults - s0.pt_faults;
        let replays = s1.pt_replays - s0.pt_replays;
        check!(
            hits == 0 && faults == windows && replays == windows,
            "job {k}: hits/faults/replays ({hits}, {faults}, {replays}), want (0, {windows}, {windows})"
        );
        check!(
            raised == windows && spans == windows && served == pages,
            "job {k}: raised {raised}, spans {spans}, pages {served}, want {windows}, {windows}, {pages}"
        );
        // System RAM in place: every span resolved by DMA (the second job's
        // access counters may have moved blocks here first).
        let dma = s1.fault_dma_spans - s0.fault_dma_spans;
        check!(
            dma == spans || (k > 0 && j.migrated > 0),
            "job {k}: {dma} of {spans} spans resolved by DMA"
        );
        check!(
            (1..=2).contains(&batches),
            "job {k}: {batches} batches for {raised} faults raised at once"
        );
        check!(
            if k == 0 {
                j.migrated == 0 && s1.pt_bytes > s0.pt_bytes
            } else {
                j.migrated > 0
            },
            "job {k}: migrated {} pages, the table from {} to {} bytes",
            j.migrated,
            s0.pt_bytes,
            s1.pt_bytes
        );
    }
    Ok(())
}

/// 4 MiB in system RAM (2 MiB aligned, access counters off for the range,
/// default placement otherwise): a CHECKSUM in place faults both windows
/// and binds their pages where they are; a second one runs warm from those
/// entries (no fault raised: the latency of a job in place on a peer's or
/// a system page is an own-VRAM job's); a CHECKSUM
/// that is not in place still runs its placement pass (the entries do not
/// spare it): it moves every page to gpu0 (the move zaps the entries) and
/// faults again. Every checksum is the CPU's.
fn entries_in_place_serve_jobs_in_place_only() -> Outcome {
    let dev = gpu0()?;
    const LEN: usize = 2 * HUGE;
    let (pages, windows) = ((LEN / PAGE) as u64, (LEN / HUGE) as u64);
    let (_outer, mut m) = crate::devpt::aligned(LEN)?;
    let start = m.addr();
    fill(m.bytes_mut(), 404);
    let want = msvm_rt::checksum(m.bytes());
    let attrs = msvm_rt::Attributes {
        preferred: msvm_rt::Place::Default,
        access: msvm_rt::Access::Migrate,
        thrash: true,
        counters: false,
        read_mostly: false,
    };
    dev.set_attr(start, LEN, attrs).map_err(e)?;
    let run = |in_place: bool| -> Result<(msvm_rt::ExecOutcome, Stats, Stats), String> {
        let s0 = stats(&dev)?;
        let j = dev.exec(Exec::Checksum, start, LEN, in_place).map_err(e)?;
        let s1 = stats(&dev)?;
        check!(j.result == want, "checksum {:#x}, want {want:#x}", j.result);
        Ok((j, s0, s1))
    };
    let pt = |a: &Stats, b: &Stats| {
        (
            b.pt_hits - a.pt_hits,
            b.pt_faults - a.pt_faults,
            b.fault_raised - a.fault_raised,
        )
    };
    let (j, s0, s1) = run(true)?;
    check!(
        pt(&s0, &s1) == (0, windows, windows) && j.migrated == 0 && s1.pt_bytes > s0.pt_bytes,
        "first job in place: hits/faults/raised {:?}, migrated {}, table {} -> {} bytes",
        pt(&s0, &s1),
        j.migrated,
        s0.pt_bytes,
        s1.pt_bytes
    );
    // The second job runs from the table. Entries the kernel removed in
    // between (an invalidation of the process's page tables, a shrink
    // pass: the TLB invalidations count both) fault again, rightly: then
    // the pair runs again, up to 5 times.
    let mut before = s1;
    for attempt in 1.. {
        let (j, s0, s1) = run(true)?;
        if pt(&s0, &s1) == (windows, 0, 0) && j.migrated == 0 {
            break;
        }
        let removed = s1.pt_tlb_invalidations - before.pt_tlb_invalidations;
        check!(
            removed > 0 && attempt < 5,
            "second job in place: hits/faults/raised {:?}, migrated {}, entries removed meanwhile {removed} times (attempt {attempt})",
            pt(&s0, &s1),
            j.migrated
        );
        println!("# entries removed between the jobs ({removed} TLB invalidations): again");
        before = s1;
    }
    let (j, s0, s1) = run(false)?;
    check!(
        j.migrated == pages && pt(&s0, &s1).1 == windows,
        "a job not in place: migrated {} of {pages} pages, hits/faults/raised {:?}",
        j.migrated,
        pt(&s0, &s1)
    );
    check!(
        msvm_rt::checksum(m.bytes()) == want,
        "the CPU's bytes after the jobs"
    );
    Ok(())
}

/// One 2 MiB block: its first half read-only (filled, then
/// `mprotect(PROT_READ)`), its second half writable; a COPY in place from
/// the first half to the second. The source's read fault and the
/// destination's write fault meet in one block, side by side: the handler
/// must not merge them into one write (the read-only half would refuse
/// it), and serves both, so the window replays from the table.
fn copy_from_a_read_only_neighbour() -> Outcome {
    let dev = gpu0()?;
    const HALF: usize = HUGE / 2;
    let outer = Map::new(2 * HUGE)?;
    let start = outer.addr().next_multiple_of(HUGE);
    // SAFETY: inside `outer`, which lives to the end.
    let bytes = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, HUGE) };
    fill(&mut bytes[..HALF], 404);
    fill(&mut bytes[HALF..], 405);
    let p = std::ptr::NonNull::new(start as *mut std::ffi::c_void).ok_or("null")?;
    // SAFETY: our own mapping; nothing writes the first half after this.
    unsafe { nix::sys::mman::mprotect(p, HALF, nix::sys::mman::ProtFlags::PROT_READ) }
        .map_err(e)?;
    let s0 = stats(&dev)?;
    dev.exec(Exec::Copy { src: start }, start + HALF, HALF, true)
        .map_err(e)?;
    let s1 = stats(&dev)?;
    check!(
        bytes[HALF..] == bytes[..HALF],
        "the COPY did not copy the read-only half"
    );
    let (raised, _, spans, _) = fq(&s0, &s1);
    let replays = s1.pt_replays - s0.pt_replays;
    check!(
        raised == 2 && spans == 2 && replays == 1,
        "raised {raised}, spans {spans}, replays {replays}: want 2, 2, 1"
    );
    Ok(())
}

/// 16 MiB never touched, CHECKSUMmed in place by gpu0: its pages are not
/// present, so the handler, which faults nothing in, gives every window
/// back to the job, which faults them in itself and reads zeroes. The
/// windows given back are not raised again: one raise of 8 faults for the
/// 8 windows, no replay (raised again at each turn, they made 36).
fn the_job_services_what_the_handler_cannot() -> Outcome {
    let dev = gpu0()?;
    const LEN: usize = 8 * HUGE;
    let windows = (LEN / HUGE) as u64;
    let outer = Map::new(LEN + HUGE)?;
    let start = outer.addr().next_multiple_of(HUGE);
    let want = msvm_rt::checksum(&vec![0u8; LEN]);
    let s0 = stats(&dev)?;
    let j = dev.exec(Exec::Checksum, start, LEN, true).map_err(e)?;
    let s1 = stats(&dev)?;
    check!(
        j.result == want,
        "checksum {:#x}, want {want:#x} (zeroes)",
        j.result
    );
    let (raised, ..) = fq(&s0, &s1);
    let replays = s1.pt_replays - s0.pt_replays;
    let faults = s1.pt_faults - s0.pt_faults;
    check!(
        raised == windows && replays == 0 && faults == windows,
        "raised {raised}, replays {replays}, faulting windows {faults}: want {windows}, 0, {windows}"
    );
    Ok(())
}

/// A small xorshift generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// One tenant of the storm: its own VM on gpu0 and 8 MiB, and a model of
/// what the buffer must hold. Random jobs (FILL, ATOMIC_ADD, CHECKSUM, in
/// place or not) over random page ranges, between random CPU writes and
/// `MADV_DONTNEED`s of 2 MiB; every CHECKSUM, and the buffer at the end,
/// must match the model.
fn tenant(seed: u64) -> Outcome {
    let dev = gpu0()?;
    const LEN: usize = 4 * HUGE;
    let mut m = Map::new(LEN)?;
    fill(m.bytes_mut(), seed);
    let mut model = m.bytes().to_vec();
    let mut rng = Rng(seed | 1);
    let words = |b: &mut [u8], f: &mut dyn FnMut(u64) -> u64| {
        for c in b.chunks_mut(8) {
            let v = f(u64::from_ne_bytes(c.try_into().unwrap()));
            c.copy_from_slice(&v.to_ne_bytes());
        }
    };
    for round in 0..24 {
        let first = rng.below(LEN / PAGE);
        let n = 1 + rng.below((LEN / PAGE - first).min(512));
        let (off, len) = (first * PAGE, n * PAGE);
        let addr = m.addr() + off;
        let in_place = rng.below(2) == 0;
        let what = rng.below(5);
        let r = &mut model[off..off + len];
        match what {
            0 => {
                let v = rng.next();
                dev.exec(Exec::Fill(v), addr, len, in_place).map_err(e)?;
                words(r, &mut |_| v);
            }
            1 => {
                let v = rng.next() >> 8;
                dev.exec(Exec::AtomicAdd(v), addr, len, in_place)
                    .map_err(e)?;
                words(r, &mut |w| w.wrapping_add(v));
            }
            2 => {
                let j = dev.exec(Exec::Checksum, addr, len, in_place).map_err(e)?;
                let want = msvm_rt::checksum(r);
                check!(
                    j.result == want,
                    "tenant {seed} round {round}: CHECKSUM of pages {first}+{n}: {:#x}, want {want:#x}",
                    j.result
                );
            }
            3 => {
                let v = rng.next();
                let b = &mut m.bytes_mut()[off..off + 8];
                b.copy_from_slice(&v.to_ne_bytes());
                r[..8].copy_from_slice(&v.to_ne_bytes());
            }
            _ => {
                let block = rng.below(LEN / HUGE) * HUGE;
                let p = std::ptr::NonNull::new((m.addr() + block) as *mut std::ffi::c_void)
                    .ok_or("null")?;
                // SAFETY: 2 MiB of our own mapping; its pages read as
                // zeroes after this, as the model says.
                unsafe { madvise(p, HUGE, MmapAdvise::MADV_DONTNEED) }.map_err(e)?;
                model[block..block + HUGE].fill(0);
            }
        }
    }
    if let Some(i) = m.bytes().iter().zip(&model).position(|(a, b)| a != b) {
        return Err(format!(
            "tenant {seed}: byte {i} differs from the model at the end"
        ));
    }
    Ok(())
}

/// Four tenants (a VM each) run their storms on gpu0 at once: their
/// faults share the device's queue and handler.
fn storm_of_tenants() -> Outcome {
    let dev = gpu0()?;
    let s0 = stats(&dev)?;
    let results: Vec<Outcome> = std::thread::scope(|s| {
        let hs: Vec<_> = (1..=4u64)
            .map(|t| s.spawn(move || tenant(0x5eed_0000 + t)))
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("tenant panicked".into())))
            .collect()
    });
    for r in results {
        r?;
    }
    let s1 = stats(&dev)?;
    let (raised, batches, spans, _) = fq(&s0, &s1);
    check!(
        raised > 0 && batches > 0 && spans <= raised,
        "raised {raised}, batches {batches}, spans {spans}"
    );
    Ok(())
}

/// A child runs in-place CHECKSUMs of fresh 8 MiB buffers on gpu0 without
/// end (each job raises faults for all 4 windows at once: a fresh buffer
/// has no access counts to move it); it is killed mid-job. Its faults
/// were serviced or dropped with it: the device's tables are back to
/// their size, and the device runs the parent's job.
fn killed_with_faults_queued() -> Outcome {
    let dev = gpu0()?;
    let s0 = stats(&dev)?;
    // SAFETY: the child only runs jobs until it is killed.
    let child = match unsafe { fork() }.map_err(e)? {
        ForkResult::Child => {
            let run = || -> Outcome {
                let dev = gpu0()?;
                loop {
                    let mut m = Map::new(4 * HUGE)?;
                    fill(m.bytes_mut(), 402);
                    dev.exec(Exec::Checksum, m.addr(), m.len(), true)
                        .map_err(e)?;
                }
            };
            let _ = run();
            // SAFETY: leaving the child at once.
            unsafe { nix::libc::_exit(1) };
        }
        ForkResult::Parent { child } => child,
    };
    // Until the child has faulted a while.
    let mut raised = 0;
    for _ in 0..200 {
        std::thread::sleep(Duration::from_millis(20));
        raised = stats(&dev)?.fault_raised - s0.fault_raised;
        if raised >= 16 {
            break;
        }
    }
    kill(child, Signal::SIGKILL).map_err(e)?;
    let st = waitpid(child, None).map_err(e)?;
    check!(
        st == WaitStatus::Signaled(child, Signal::SIGKILL, false),
        "the child ended as {st:?} (it ran {raised} faults)"
    );
    check!(raised >= 16, "the child raised only {raised} faults");
    let s1 = stats(&dev)?;
    check!(
        s1.pt_bytes == s0.pt_bytes,
        "the tables take {} bytes after the child, {} before",
        s1.pt_bytes,
        s0.pt_bytes
    );
    let mut m = Map::new(HUGE)?;
    fill(m.bytes_mut(), 403);
    let want = msvm_rt::checksum(m.bytes());
    let j = dev.exec(Exec::Checksum, m.addr(), HUGE, true).map_err(e)?;
    check!(
        j.result == want,
        "parent's job after the kill: {:#x}",
        j.result
    );
    Ok(())
}
