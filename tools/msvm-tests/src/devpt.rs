//! Device page tables: what a VM's device maps of the process, kept across
//! jobs. A job's 2 MiB window that the table maps whole runs without a
//! fault (`pt_hits`); any other faults (`pt_faults`) and binds what stays
//! valid (`pt_bound`): the device's own pages, and pages elsewhere of
//! ranges used in place. Every change of the process's mappings zaps the
//! entries of its range first (`pt_invalidations`, `pt_zapped`): no job
//! ever uses a page through a stale entry.

use std::ptr::NonNull;

use msvm_rt::{Access, Attributes, Device, Exec, Location, Place, Stats};
use nix::errno::Errno;
use nix::sys::mman::{madvise, mprotect, MmapAdvise, ProtFlags};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult};

use crate::check;
use crate::harness::{Outcome, Test};
use crate::svm::{every_gpu_with_vm, fill, gpu0, stats, Map, PAGE};

pub fn tests() -> Vec<Test> {
    vec![
        Test {
            name: "devpt_warm_job_takes_no_fault",
            run: warm_job_takes_no_fault,
        },
        Test {
            name: "devpt_prefetch_binds_ahead",
            run: prefetch_binds_ahead,
        },
        Test {
            name: "devpt_device_writes_to_clean_pages_survive_pageout",
            run: device_writes_to_clean_pages_survive_pageout,
        },
        Test {
            name: "devpt_shrink_pass_empties_idle_tables",
            run: shrink_pass_empties_idle_tables,
        },
        Test {
            name: "devpt_cpu_write_after_bind_is_seen",
            run: cpu_write_after_bind_is_seen,
        },
        Test {
            name: "devpt_munmap_between_jobs",
            run: munmap_between_jobs,
        },
        Test {
            name: "devpt_mprotect_read_only",
            run: mprotect_read_only,
        },
        Test {
            name: "devpt_fork_cow",
            run: fork_cow,
        },
        Test {
            name: "devpt_in_place_system_pages_bound",
            run: in_place_system_pages_bound,
        },
        Test {
            name: "devpt_peer_in_place_warm",
            run: peer_in_place_warm,
        },
        Test {
            name: "devpt_munmap_counts_invalidation",
            run: munmap_counts_invalidation,
        },
        Test {
            name: "devpt_tlb_keeps_and_loses_translations",
            run: tlb_keeps_and_loses_translations,
        },
    ]
}

/// A job's window, and what one leaf of a device page table maps.
const HUGE: usize = 2 << 20;

/// The default attributes: jobs move the pages to the device that runs
/// them.
const MIGRATE: Attributes = Attributes {
    preferred: Place::Default,
    access: Access::Migrate,
    thrash: true,
    counters: true,
    read_mostly: false,
};

/// Access policy "in place": jobs use the pages where they are, and a
/// fault binds them there.
const IN_PLACE: Attributes = Attributes {
    access: Access::InPlace,
    ..MIGRATE
};

fn e(x: impl std::fmt::Display) -> String {
    x.to_string()
}

/// `len` bytes (a multiple of 2 MiB) of a fresh anonymous private mapping
/// at a 2 MiB-aligned address, so that a job over it has `len / 2 MiB`
/// windows and its entries fill whole leaves: (the mapping around it, the
/// buffer). The buffer is a mapping of its own, unmapped on drop (before
/// the one around it: bind them in this order); dropping it alone leaves
/// a hole that the mapping around it keeps for this process.
pub(crate) fn aligned(len: usize) -> Result<(Map, Map), String> {
    let outer = Map::new(len + HUGE)?;
    let at = outer.addr().next_multiple_of(HUGE);
    // SAFETY: `[at, at + len)` lies inside `outer`, a fresh mapping of ours
    // that nothing else uses or refers to.
    let buf = unsafe { Map::over(at, len) }?;
    Ok((outer, buf))
}

/// The device page table counters of `b` since `a`: windows that hit,
/// windows that faulted, entries bound.
fn pt(a: &Stats, b: &Stats) -> (u64, u64, u64) {
    (
        b.pt_hits - a.pt_hits,
        b.pt_faults - a.pt_faults,
        b.pt_bound - a.pt_bound,
    )
}

/// The invalidation counters of `b` since `a`: invalidations that zapped
/// entries, entries zapped.
fn zaps(a: &Stats, b: &Stats) -> (u64, u64) {
    (
        b.pt_invalidations - a.pt_invalidations,
        b.pt_zapped - a.pt_zapped,
    )
}

fn checksum_job(dev: &Device, m: &Map, in_place: bool) -> Result<msvm_rt::ExecOutcome, String> {
    dev.exec(Exec::Checksum, m.addr(), m.len(), in_place)
        .map_err(|x| format!("CHECKSUM: {x}"))
}

fn fill_job(dev: &Device, m: &Map, v: u64) -> Result<msvm_rt::ExecOutcome, String> {
    dev.exec(Exec::Fill(v), m.addr(), m.len(), false)
        .map_err(|x| format!("FILL {v:#x}: {x}"))
}

/// Moves all of `m` to `dev`.
fn park(dev: &Device, m: &Map) -> Outcome {
    let out = dev
        .migrate(m.addr(), m.len(), Location::Device)
        .map_err(e)?;
    check!(out.moved == (m.len() / PAGE) as u64, "park: {out:?}");
    Ok(())
}

/// The first 64-bit word of `b` that is not `v`, if any.
fn not_filled(b: &[u8], v: u64) -> Option<usize> {
    b.chunks(8).position(|w| w != v.to_ne_bytes())
}

/// Gives `m` the protection `prot`.
fn protect(m: &Map, prot: ProtFlags) -> Outcome {
    let p = NonNull::new(m.addr() as *mut std::ffi::c_void).ok_or("null map")?;
    // SAFETY: our own mapping, which no Rust reference spans while its
    // protection changes (the callers hold none across this call).
    unsafe { mprotect(p, m.len(), prot) }.map_err(|x| format!("mprotect: {x}"))
}

/// 4 MiB on gpu0, read twice by its engine: the first CHECKSUM faults both
/// windows and binds all 1024 pages (VRAM, nothing to move); the second
/// runs from the table alone, both windows hits, nothing bound or moved.
/// Both read the bytes the CPU wrote.
fn warm_job_takes_no_fault() -> Outcome {
    let dev = gpu0()?;
    const LEN: usize = 2 * HUGE;
    let (pages, windows) = ((LEN / PAGE) as u64, (LEN / HUGE) as u64);
    let (_outer, mut m) = aligned(LEN)?;
    fill(m.bytes_mut(), 301);
    let want = msvm_rt::checksum(m.bytes());
    park(&dev, &m)?;
    let s0 = stats(&dev)?;
    let j1 = checksum_job(&dev, &m, false)?;
    let s1 = stats(&dev)?;
    check!(
        pt(&s0, &s1) == (0, windows, pages),
        "first job: hits/faults/bound {:?}, want (0, {windows}, {pages})",
        pt(&s0, &s1)
    );
    check!(
        j1.migrated == 0 && s1.to_device == s0.to_device,
        "first job moved pages: {j1:?}, to_device +{}",
        s1.to_device - s0.to_device
    );
    check!(
        s1.engine_vram_read - s0.engine_vram_read == LEN as u64,
        "first job read {} bytes of VRAM",
        s1.engine_vram_read - s0.engine_vram_read
    );
    let j2 = checksum_job(&dev, &m, false)?;
    let s2 = stats(&dev)?;
    check!(
        pt(&s1, &s2) == (windows, 0, 0),
        "second job: hits/faults/bound {:?}, want ({windows}, 0, 0)",
        pt(&s1, &s2)
    );
    check!(
        j2.migrated == 0 && s2.to_device == s1.to_device,
        "second job moved pages: {j2:?}, to_device +{}",
        s2.to_device - s1.to_device
    );
    check!(
        s2.engine_vram_read - s1.engine_vram_read == LEN as u64
            && s2.engine_sys_read == s1.engine_sys_read,
        "second job read {} bytes of VRAM, {} of system RAM",
        s2.engine_vram_read - s1.engine_vram_read,
        s2.engine_sys_read - s1.engine_sys_read
    );
    check!(
        j1.result == want,
        "first checksum {:#x}, want {want:#x}",
        j1.result
    );
    check!(
        j2.result == want,
        "second checksum {:#x}, want {want:#x}",
        j2.result
    );
    Ok(())
}

/// `madvise(advice)` over `m`.
fn advise(m: &Map, advice: MmapAdvise) -> Outcome {
    let p = NonNull::new(m.addr() as *mut std::ffi::c_void).ok_or("null map")?;
    // SAFETY: our own mapping; the advice changes no memory a reference of
    // ours spans (the callers hold none across this call).
    unsafe { madvise(p, m.len(), advice) }.map_err(|x| format!("madvise {advice:?}: {x}"))
}

/// Pages mapped writable but clean, which a write of the device through a
/// DMA mapping does not dirty: private ones freed lazily (`MADV_FREE`),
/// and shared anonymous (shmem) ones only read by the CPU (no
/// write-notify: a read fault maps them writable and clean). gpu0's engine
/// writes them in place: by a job in place (which faults), from entries
/// its table keeps (range in place, bound by a read: the FILL runs warm),
/// and the shmem ones by a job in place; reclaim
/// (`MADV_PAGEOUT`) must keep what the device wrote, not drop the pages as
/// clean (the CPU would read zeros).
fn device_writes_to_clean_pages_survive_pageout() -> Outcome {
    let dev = gpu0()?;
    const LEN: usize = HUGE;
    for (case, kept, shmem) in [
        ("lazily freed, a job in place", false, false),
        ("lazily freed, kept entries", true, false),
        ("shmem read by the CPU, a job in place", false, true),
    ] {
        let (_outer, mut m) = if shmem {
            (None, Map::shared(LEN)?)
        } else {
            let (o, m) = aligned(LEN)?;
            (Some(o), m)
        };
        if shmem {
            // Read faults only: every page mapped writable and clean.
            let sum: u64 = m.bytes().iter().step_by(PAGE).map(|&b| u64::from(b)).sum();
            check!(sum == 0, "{case}: a fresh page is not zero");
        } else {
            fill(m.bytes_mut(), 311);
            advise(&m, MmapAdvise::MADV_FREE)?;
        }
        if kept {
            dev.set_attr(m.addr(), LEN, IN_PLACE).map_err(e)?;
        }
        let v = 0x5eed_0000_0000_0001 + u64::from(kept) + 2 * u64::from(shmem);
        if kept {
            // Bound by a read (writable entries: the PTEs are writable),
            // so that the FILL runs from the table, without a fault.
            checksum_job(&dev, &m, true)?;
        }
        let s0 = stats(&dev)?;
        dev.exec(Exec::Fill(v), m.addr(), LEN, true)
            .map_err(|x| format!("{case}: FILL in place: {x}"))?;
        let hits = pt(&s0, &stats(&dev)?).0;
        check!(
            hits == u64::from(kept),
            "{case}: the FILL hit the table {hits} times"
        );
        advise(&m, MmapAdvise::MADV_PAGEOUT)?;
        let bad = not_filled(m.bytes(), v);
        check!(
            bad.is_none(),
            "{case}: after MADV_PAGEOUT, byte {:?} is not the device's fill {v:#x}",
            bad.map(|w| w * 8)
        );
    }
    Ok(())
}

/// 4 MiB on gpu0, bound by a CHECKSUM: a shrink pass (debugfs `shrink`,
/// what the shrinker's work runs under memory pressure) empties the tables
/// of the VMs not running a job, gpu0's bytes of tables drop to none; the
/// next CHECKSUM faults both windows in again and reads the same bytes.
fn shrink_pass_empties_idle_tables() -> Outcome {
    let dev = gpu0()?;
    const LEN: usize = 2 * HUGE;
    let (pages, windows) = ((LEN / PAGE) as u64, (LEN / HUGE) as u64);
    let (_outer, mut m) = aligned(LEN)?;
    fill(m.bytes_mut(), 313);
    let want = msvm_rt::checksum(m.bytes());
    park(&dev, &m)?;
    checksum_job(&dev, &m, false)?;
    let s0 = stats(&dev)?;
    check!(
        s0.pt_bytes > 0,
        "no table memory after a job: {}",
        s0.pt_bytes
    );
    crate::lifecycle::shrink("idle")?;
    let s1 = stats(&dev)?;
    check!(
        s1.pt_bytes == 0 && zaps(&s0, &s1) == (0, 0),
        "after a shrink pass: {} bytes of tables, invalidations/zapped {:?}",
        s1.pt_bytes,
        zaps(&s0, &s1)
    );
    let j = checksum_job(&dev, &m, false)?;
    let s2 = stats(&dev)?;
    check!(
        pt(&s1, &s2) == (0, windows, pages) && s2.to_device == s1.to_device,
        "job after the shrink pass: hits/faults/bound {:?}, to_device +{}",
        pt(&s1, &s2),
        s2.to_device - s1.to_device
    );
    check!(j.result == want, "checksum {:#x}, want {want:#x}", j.result);
    Ok(())
}

/// 4 MiB of system RAM PREFETCHed to gpu0: the prefetch moves every page
/// and binds it ("bind ahead"), so that the CHECKSUM that follows takes no
/// fault at all. A PREFETCH back to system RAM zaps the entries (the
/// moves invalidate), binds nothing, and the next job faults again.
fn prefetch_binds_ahead() -> Outcome {
    let dev = gpu0()?;
    const LEN: usize = 2 * HUGE;
    let (pages, windows) = ((LEN / PAGE) as u64, (LEN / HUGE) as u64);
    let (_outer, mut m) = aligned(LEN)?;
    fill(m.bytes_mut(), 307);
    let want = msvm_rt::checksum(m.bytes());
    let s0 = stats(&dev)?;
    let out = dev.prefetch(m.addr(), LEN, Place::Here).map_err(e)?;
    let s1 = stats(&dev)?;
    check!(out.moved == pages, "PREFETCH: {out:?}");
    check!(
        pt(&s0, &s1) == (0, 0, pages),
        "PREFETCH: hits/faults/bound {:?}, want (0, 0, {pages})",
        pt(&s0, &s1)
    );
    let j = checksum_job(&dev, &m, false)?;
    let s2 = stats(&dev)?;
    check!(
        pt(&s1, &s2) == (windows, 0, 0),
        "job after PREFETCH: hits/faults/bound {:?}, want ({windows}, 0, 0)",
        pt(&s1, &s2)
    );
    check!(j.result == want, "checksum {:#x}, want {want:#x}", j.result);
    dev.prefetch(m.addr(), LEN, Place::System).map_err(e)?;
    let s3 = stats(&dev)?;
    check!(
        zaps(&s2, &s3).1 == pages && pt(&s2, &s3).2 == 0,
        "PREFETCH to system RAM: zapped {:?}, bound {}",
        zaps(&s2, &s3),
        pt(&s2, &s3).2
    );
    let j = checksum_job(&dev, &m, false)?;
    let s4 = stats(&dev)?;
    check!(
        pt(&s3, &s4) == (0, windows, pages),
        "job after PREFETCH to system RAM: hits/faults/bound {:?}, want (0, {windows}, {pages})",
        pt(&s3, &s4)
    );
    check!(j.result == want, "checksum {:#x}, want {want:#x}", j.result);
    Ok(())
}

/// 4 MiB on gpu0, bound by a CHECKSUM; the CPU writes one byte in the
/// middle, which faults its page home: the invalidation zaps its entries,
/// and the next CHECKSUM on gpu0 reads the new byte (an entry left behind
/// would read the page the device had). A FILL then lands where the CPU
/// reads it.
fn cpu_write_after_bind_is_seen() -> Outcome {
    let dev = gpu0()?;
    const LEN: usize = 2 * HUGE;
    let (_outer, mut m) = aligned(LEN)?;
    fill(m.bytes_mut(), 302);
    // The CPU's copy: reading `m` once it is on the device would fault it
    // home (and zap what this test wants bound).
    let mut want = m.bytes().to_vec();
    park(&dev, &m)?;
    let j1 = checksum_job(&dev, &m, false)?;
    check!(
        j1.result == msvm_rt::checksum(&want),
        "checksum after the bind {:#x}",
        j1.result
    );
    let s1 = stats(&dev)?;
    let at = LEN / 2 + 5 * PAGE + 77;
    want[at] ^= 0xa5;
    m.bytes_mut()[at] = want[at];
    let s2 = stats(&dev)?;
    let (inv, zapped) = zaps(&s1, &s2);
    check!(
        inv >= 1 && zapped >= 1,
        "the CPU's write zapped nothing: {inv} invalidations, {zapped} entries"
    );
    let j2 = checksum_job(&dev, &m, false)?;
    let s3 = stats(&dev)?;
    let (_, faults, _) = pt(&s2, &s3);
    check!(faults >= 1, "no window faulted after the CPU's write");
    let new = msvm_rt::checksum(&want);
    check!(
        j2.result == new,
        "checksum after the CPU's write {:#x}, want {new:#x} (before the write: {:#x})",
        j2.result,
        j1.result
    );
    let v = 0x0123_4567_89ab_cdef;
    fill_job(&dev, &m, v)?;
    if let Some(i) = not_filled(m.bytes(), v) {
        return Err(format!("word {i} not filled after the FILL"));
    }
    Ok(())
}

/// 4 MiB on gpu0, bound by a CHECKSUM, then unmapped: a CHECKSUM fails
/// with `EFAULT`. Fresh memory with other bytes at the same address: a
/// CHECKSUM in place (the pages stay in system RAM, where no VRAM page
/// reused for them could hide a stale entry) faults both windows and reads
/// the new bytes; so does one that moves them to gpu0.
fn munmap_between_jobs() -> Outcome {
    let dev = gpu0()?;
    const LEN: usize = 2 * HUGE;
    let (pages, windows) = ((LEN / PAGE) as u64, (LEN / HUGE) as u64);
    let (_outer, mut m) = aligned(LEN)?;
    fill(m.bytes_mut(), 303);
    let old = msvm_rt::checksum(m.bytes());
    park(&dev, &m)?;
    let s0 = stats(&dev)?;
    let j = checksum_job(&dev, &m, false)?;
    check!(j.result == old, "checksum before munmap {:#x}", j.result);
    let s1 = stats(&dev)?;
    check!(
        pt(&s0, &s1) == (0, windows, pages),
        "bind: hits/faults/bound {:?}",
        pt(&s0, &s1)
    );
    let addr = m.addr();
    drop(m);
    let got = dev
        .exec(Exec::Checksum, addr, LEN, false)
        .err()
        .and_then(|x| x.errno());
    check!(
        got == Some(Errno::EFAULT),
        "CHECKSUM of unmapped memory: {got:?}"
    );
    // SAFETY: the hole `m` left in `_outer`, which nothing else uses; this
    // thread mapped nothing since.
    let mut m = unsafe { Map::over(addr, LEN) }?;
    fill(m.bytes_mut(), 304);
    let new = msvm_rt::checksum(m.bytes());
    check!(new != old, "the new bytes have the old checksum");
    let s2 = stats(&dev)?;
    let j = checksum_job(&dev, &m, true)?;
    let s3 = stats(&dev)?;
    check!(
        j.result == new,
        "in place after the remap: {:#x}, want {new:#x} (old bytes: {old:#x})",
        j.result
    );
    // Entries the placement policies look behind (the pages are not kept
    // in system RAM): bound, and there for the next job in place; the next
    // job that is not in place moves the pages first (below).
    check!(
        pt(&s2, &s3) == (0, windows, pages) && j.migrated == 0 && s3.pt_bytes > s2.pt_bytes,
        "in place after the remap: hits/faults/bound {:?}, {j:?}, table bytes {} -> {}",
        pt(&s2, &s3),
        s2.pt_bytes,
        s3.pt_bytes
    );
    let j = checksum_job(&dev, &m, false)?;
    let s4 = stats(&dev)?;
    check!(
        j.result == new,
        "on gpu0 after the remap: {:#x}, want {new:#x} (old bytes: {old:#x})",
        j.result
    );
    check!(
        pt(&s3, &s4) == (0, windows, pages) && j.migrated == pages,
        "on gpu0 after the remap: hits/faults/bound {:?}, {j:?}",
        pt(&s3, &s4)
    );
    Ok(())
}

/// 2 MiB on gpu0, bound writable by a FILL. `mprotect(PROT_READ)` zaps
/// every entry; a FILL fails with `EACCES`; a CHECKSUM faults and binds
/// read-only entries, which serve the next CHECKSUM. Writable again, a
/// FILL finds no writable entry (it faults) and lands.
fn mprotect_read_only() -> Outcome {
    let dev = gpu0()?;
    let pages = (HUGE / PAGE) as u64;
    let (_outer, mut m) = aligned(HUGE)?;
    fill(m.bytes_mut(), 305);
    park(&dev, &m)?;
    let (a, b) = (0x1111_2222_3333_4444u64, 0x5555_6666_7777_8888u64);
    let s0 = stats(&dev)?;
    fill_job(&dev, &m, a)?;
    let s1 = stats(&dev)?;
    check!(
        pt(&s0, &s1) == (0, 1, pages),
        "FILL: hits/faults/bound {:?}, want (0, 1, {pages})",
        pt(&s0, &s1)
    );
    protect(&m, ProtFlags::PROT_READ)?;
    let s2 = stats(&dev)?;
    let (inv, zapped) = zaps(&s1, &s2);
    check!(
        inv >= 1 && zapped == pages,
        "mprotect: {inv} invalidations zapped {zapped} entries, want {pages}"
    );
    let got = dev
        .exec(Exec::Fill(b), m.addr(), m.len(), false)
        .err()
        .and_then(|x| x.errno());
    check!(
        got == Some(Errno::EACCES),
        "FILL of read-only memory: {got:?}"
    );
    let want = msvm_rt::checksum(&a.to_ne_bytes().repeat(HUGE / 8));
    let s3 = stats(&dev)?;
    let j = checksum_job(&dev, &m, false)?;
    let s4 = stats(&dev)?;
    check!(
        j.result == want,
        "read-only checksum {:#x}, want {want:#x}",
        j.result
    );
    check!(
        pt(&s3, &s4) == (0, 1, pages),
        "read-only CHECKSUM: hits/faults/bound {:?}, want (0, 1, {pages})",
        pt(&s3, &s4)
    );
    let j = checksum_job(&dev, &m, false)?;
    let s5 = stats(&dev)?;
    check!(
        j.result == want && pt(&s4, &s5) == (1, 0, 0),
        "second read-only CHECKSUM: {:#x}, hits/faults/bound {:?}",
        j.result,
        pt(&s4, &s5)
    );
    protect(&m, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE)?;
    let s6 = stats(&dev)?;
    fill_job(&dev, &m, b)?;
    let s7 = stats(&dev)?;
    let (hits, faults, _) = pt(&s6, &s7);
    check!(
        hits == 0 && faults == 1,
        "FILL after mprotect back: {hits} hits, {faults} faults (read-only entries must not serve a write)"
    );
    if let Some(i) = not_filled(m.bytes(), b) {
        return Err(format!("word {i} not filled after mprotect back"));
    }
    Ok(())
}

/// 4 MiB on gpu0 filled with A by its engine (writable entries, which a
/// second FILL hits). `fork` write-protects the pages for copy-on-write:
/// its invalidation zaps every entry. The parent's FILL with B faults
/// (and breaks the sharing); the child, released after it, still reads A
/// everywhere; the parent reads B. A table that kept its writable entries
/// would have let the parent's device write the pages the child shares.
fn fork_cow() -> Outcome {
    let dev = gpu0()?;
    const LEN: usize = 2 * HUGE;
    let (pages, windows) = ((LEN / PAGE) as u64, (LEN / HUGE) as u64);
    let (_outer, mut m) = aligned(LEN)?;
    fill(m.bytes_mut(), 306);
    park(&dev, &m)?;
    let (a, b) = (0xaaaa_0000_aaaa_0001u64, 0xbbbb_0000_bbbb_0002u64);
    let s0 = stats(&dev)?;
    fill_job(&dev, &m, a)?;
    fill_job(&dev, &m, a)?;
    let s1 = stats(&dev)?;
    check!(
        pt(&s0, &s1) == (windows, windows, pages),
        "two FILLs: hits/faults/bound {:?}, want ({windows}, {windows}, {pages})",
        pt(&s0, &s1)
    );
    let (rd, wr) = nix::unistd::pipe().map_err(e)?;
    // SAFETY: the child only waits, reads its memory and exits.
    let child = match unsafe { fork() }.map_err(e)? {
        ForkResult::Child => {
            drop(wr);
            let mut x = [0u8; 1];
            let _ = nix::unistd::read(&rd, &mut x);
            let ok = not_filled(m.bytes(), a).is_none();
            // SAFETY: leaving the child at once.
            unsafe { nix::libc::_exit(i32::from(!ok)) };
        }
        ForkResult::Parent { child } => child,
    };
    drop(rd);
    let res = (|| -> Outcome {
        let s2 = stats(&dev)?;
        let (inv, zapped) = zaps(&s1, &s2);
        check!(
            inv >= 1 && zapped == pages,
            "fork: {inv} invalidations zapped {zapped} entries, want {pages}"
        );
        fill_job(&dev, &m, b)?;
        let s3 = stats(&dev)?;
        let (hits, faults, _) = pt(&s2, &s3);
        check!(
            hits == 0 && faults == windows,
            "FILL after fork: {hits} hits, {faults} faults, want 0 and {windows}"
        );
        Ok(())
    })();
    // Let the child check its copy, whatever happened here.
    let _ = nix::unistd::write(&wr, b"x");
    drop(wr);
    let st = waitpid(child, None).map_err(e)?;
    res?;
    check!(
        st == WaitStatus::Exited(child, 0),
        "the child's copy changed (1: not all A): {st:?}"
    );
    if let Some(i) = not_filled(m.bytes(), b) {
        return Err(format!("parent: word {i} is not the parent's fill"));
    }
    Ok(())
}

/// 4 MiB in system RAM, in place for gpu0 (SET_ATTR): the first CHECKSUM
/// faults and binds every page by DMA, the second hits; neither moves a
/// page, each reads the buffer from system RAM. Back to the default
/// attributes (which zaps the range), the next CHECKSUM faults, moves the
/// buffer to gpu0 and binds it there.
fn in_place_system_pages_bound() -> Outcome {
    let dev = gpu0()?;
    const LEN: usize = 2 * HUGE;
    let (pages, windows) = ((LEN / PAGE) as u64, (LEN / HUGE) as u64);
    let (_outer, mut m) = aligned(LEN)?;
    fill(m.bytes_mut(), 307);
    let want = msvm_rt::checksum(m.bytes());
    dev.set_attr(m.addr(), LEN, IN_PLACE).map_err(e)?;
    let s0 = stats(&dev)?;
    let j1 = checksum_job(&dev, &m, false)?;
    let s1 = stats(&dev)?;
    let j2 = checksum_job(&dev, &m, false)?;
    let s2 = stats(&dev)?;
    for (k, (j, a, b, p)) in [
        (j1, &s0, &s1, (0, windows, pages)),
        (j2, &s1, &s2, (windows, 0, 0)),
    ]
    .into_iter()
    .enumerate()
    {
        check!(
            j.result == want,
            "job {k} in place: {:#x}, want {want:#x}",
            j.result
        );
        check!(
            pt(a, b) == p,
            "job {k} in place: hits/faults/bound {:?}, want {p:?}",
            pt(a, b)
        );
        check!(
            j.migrated == 0 && b.to_device == a.to_device,
            "job {k} in place moved pages: {j:?}, to_device +{}",
            b.to_device - a.to_device
        );
        check!(
            b.engine_sys_read - a.engine_sys_read == LEN as u64,
            "job {k} in place read {} bytes of system RAM",
            b.engine_sys_read - a.engine_sys_read
        );
    }
    dev.set_attr(m.addr(), LEN, MIGRATE).map_err(e)?;
    let s3 = stats(&dev)?;
    let j3 = checksum_job(&dev, &m, false)?;
    let s4 = stats(&dev)?;
    check!(
        j3.result == want,
        "after the default attributes: {:#x}, want {want:#x}",
        j3.result
    );
    check!(
        pt(&s3, &s4) == (0, windows, pages),
        "after the default attributes: hits/faults/bound {:?}, want (0, {windows}, {pages})",
        pt(&s3, &s4)
    );
    check!(
        j3.migrated == pages && s4.to_device - s3.to_device == pages,
        "after the default attributes: {j3:?}, to_device +{}",
        s4.to_device - s3.to_device
    );
    Ok(())
}

/// Two devices that reach each other over P2P in one owner group (the
/// lowest indices that do), each with a VM of this process: (the one that
/// runs the jobs, the one that holds the pages); `None` without them.
fn p2p_pair() -> Result<Option<(Device, Device)>, String> {
    let mut devs: Vec<_> = every_gpu_with_vm()?
        .into_iter()
        .map(|d| d.query().map(|i| (i, Some(d))))
        .collect::<Result<_, _>>()
        .map_err(e)?;
    devs.sort_by_key(|(i, _)| i.index);
    let reach = |x: usize, y: usize| {
        let (a, b) = (&devs[x].0, &devs[y].0);
        a.owner_group == b.owner_group && a.peers.iter().any(|p| p.p2p && p.index == b.index)
    };
    let n = devs.len();
    let Some((x, y)) = (0..n)
        .flat_map(|x| (0..n).map(move |y| (x, y)))
        .find(|&(x, y)| x != y && reach(x, y))
    else {
        return Ok(None);
    };
    let a = devs[x].1.take().ok_or("no device")?;
    let b = devs[y].1.take().ok_or("no device")?;
    Ok(Some((a, b)))
}

/// 4 MiB on gpu1, in place for gpu0 (a P2P peer): gpu0's first CHECKSUM
/// faults and binds the peer's pages, its second hits; both read over P2P
/// and move nothing. The CPU then writes a byte of the second window (its
/// page comes home from gpu1: gpu0's entries there are zapped); gpu0's
/// next CHECKSUM faults that window only and reads the new byte.
fn peer_in_place_warm() -> Outcome {
    let Some((a, b)) = p2p_pair()? else {
        println!("# devpt_peer_in_place_warm: no two devices reach each other over P2P, skipped");
        return Ok(());
    };
    let ib = b.index().map_err(e)? as usize;
    const LEN: usize = 2 * HUGE;
    let (pages, windows) = ((LEN / PAGE) as u64, (LEN / HUGE) as u64);
    let (_outer, mut m) = aligned(LEN)?;
    fill(m.bytes_mut(), 308);
    let mut want = m.bytes().to_vec();
    let sum = msvm_rt::checksum(&want);
    park(&b, &m)?;
    a.set_attr(m.addr(), LEN, IN_PLACE).map_err(e)?;
    let s0 = stats(&a)?;
    let j1 = checksum_job(&a, &m, false)?;
    let s1 = stats(&a)?;
    let j2 = checksum_job(&a, &m, false)?;
    let s2 = stats(&a)?;
    for (k, (j, x, y, p)) in [
        (j1, &s0, &s1, (0, windows, pages)),
        (j2, &s1, &s2, (windows, 0, 0)),
    ]
    .into_iter()
    .enumerate()
    {
        check!(
            j.result == sum,
            "job {k} over P2P: {:#x}, want {sum:#x}",
            j.result
        );
        check!(
            pt(x, y) == p,
            "job {k} over P2P: hits/faults/bound {:?}, want {p:?}",
            pt(x, y)
        );
        check!(
            j.migrated == 0 && y.to_device == x.to_device,
            "job {k} over P2P moved pages: {j:?}"
        );
        check!(
            y.engine_p2p_read - x.engine_p2p_read == LEN as u64
                && y.peer_read[ib] - x.peer_read[ib] == LEN as u64,
            "job {k} read {} bytes over P2P ({} from gpu{ib})",
            y.engine_p2p_read - x.engine_p2p_read,
            y.peer_read[ib] - x.peer_read[ib]
        );
    }
    let r = a.residency(m.addr(), LEN).map_err(e)?;
    check!(
        r.devices[ib] == LEN as u64,
        "no longer all on gpu{ib}: {r:?}"
    );
    let at = HUGE + HUGE / 2 + 3 * PAGE + 5;
    want[at] ^= 0x3c;
    m.bytes_mut()[at] = want[at];
    let s3 = stats(&a)?;
    let (inv, zapped) = zaps(&s2, &s3);
    check!(
        inv >= 1 && zapped >= 1,
        "the CPU's write zapped nothing of gpu0's: {inv} invalidations, {zapped} entries"
    );
    let j3 = checksum_job(&a, &m, false)?;
    let s4 = stats(&a)?;
    let new = msvm_rt::checksum(&want);
    check!(
        j3.result == new,
        "after the CPU's write: {:#x}, want {new:#x} (before it: {sum:#x})",
        j3.result
    );
    // The faulting window binds what the write zapped at least, the whole
    // window at most (serviced in the job's context, it binds all of it;
    // by the handler, from its first page lacking an entry to its last).
    let (hits, faults, bound) = pt(&s3, &s4);
    check!(
        hits == 1 && faults == 1 && bound >= zapped && bound <= pages / 2,
        "after the CPU's write: hits/faults/bound {:?}, want (1, 1, {zapped} to {})",
        pt(&s3, &s4),
        pages / 2
    );
    let (p2p, sys) = (
        s4.engine_p2p_read - s3.engine_p2p_read,
        s4.engine_sys_read - s3.engine_sys_read,
    );
    check!(
        p2p >= HUGE as u64 && sys > 0 && p2p + sys == LEN as u64,
        "after the CPU's write: {p2p} bytes over P2P, {sys} from system RAM"
    );
    Ok(())
}

/// 64 MiB on gpu0, bound by a CHECKSUM (16384 entries in 32 leaves), then
/// unmapped: the unmap's invalidations zap exactly those entries, and the
/// tables' memory goes back to what it was before the job.
fn munmap_counts_invalidation() -> Outcome {
    let dev = gpu0()?;
    const LEN: usize = 64 << 20;
    let (pages, windows) = ((LEN / PAGE) as u64, (LEN / HUGE) as u64);
    let s = stats(&dev)?;
    let free = (s.vram_size as usize).saturating_sub(s.resident as usize * PAGE);
    check!(free >= LEN, "only {free} bytes of gpu0 free");
    let (_outer, mut m) = aligned(LEN)?;
    fill(m.bytes_mut(), 309);
    let want = msvm_rt::checksum(m.bytes());
    park(&dev, &m)?;
    let s0 = stats(&dev)?;
    let j = checksum_job(&dev, &m, false)?;
    let s1 = stats(&dev)?;
    check!(j.result == want, "checksum {:#x}, want {want:#x}", j.result);
    check!(
        pt(&s0, &s1) == (0, windows, pages),
        "bind: hits/faults/bound {:?}, want (0, {windows}, {pages})",
        pt(&s0, &s1)
    );
    let grown = s1.pt_bytes.saturating_sub(s0.pt_bytes);
    check!(
        grown > 0 && grown % windows == 0,
        "table memory {} -> {} bytes for {windows} leaves",
        s0.pt_bytes,
        s1.pt_bytes
    );
    drop(m);
    let s2 = stats(&dev)?;
    let (inv, zapped) = zaps(&s1, &s2);
    check!(
        inv >= 1 && zapped == pages,
        "munmap: {inv} invalidations zapped {zapped} entries, want {pages}"
    );
    check!(
        s2.pt_zap_ns > s1.pt_zap_ns,
        "zapping {zapped} entries took no time"
    );
    check!(
        s2.pt_bytes <= s0.pt_bytes,
        "table memory {} bytes after munmap, {} before the job",
        s2.pt_bytes,
        s0.pt_bytes
    );
    Ok(())
}

/// The TLB counters of `b` since `a`: hits, misses, invalidations.
fn tlb(a: &Stats, b: &Stats) -> (u64, u64, u64) {
    (
        b.pt_tlb_hits - a.pt_tlb_hits,
        b.pt_tlb_misses - a.pt_tlb_misses,
        b.pt_tlb_invalidations - a.pt_tlb_invalidations,
    )
}

/// 8 pages on gpu0, read by its engine. The first CHECKSUM binds them (by
/// the fault handler, or in the job's context); the second runs from the
/// table, and the third finds every translation in the TLB: 16 hits (each
/// page looked up by the accounting pass and by the read; on msvm-gpu 8,
/// its job engine's own TLB's), no walk. The
/// CPU then writes the first page, which faults it home: the zap
/// invalidates the TLB, and the next CHECKSUM walks again and reads the
/// new bytes (a translation left in the TLB would read the old page).
fn tlb_keeps_and_loses_translations() -> Outcome {
    let dev = gpu0()?;
    const PAGES: usize = 8;
    let (_outer, mut m) = aligned(HUGE)?;
    fill(m.bytes_mut(), 310);
    let mut want = m.bytes()[..PAGES * PAGE].to_vec();
    park(&dev, &m)?;
    let addr = m.addr();
    let job = |d: &Device| {
        d.exec(Exec::Checksum, addr, PAGES * PAGE, false)
            .map_err(|x| format!("CHECKSUM: {x}"))
    };
    let j1 = job(&dev)?;
    job(&dev)?;
    let s1 = stats(&dev)?;
    let p = PAGES as u64;
    let j2 = job(&dev)?;
    let s2 = stats(&dev)?;
    // msvm's engine looks each page up twice (the accounting, the read),
    // msvm-gpu's job engine once (the read; the counts are its TLB's).
    let per_page = if crate::hw_jobs::jobs_on_device(dev.index().map_err(e)?)? {
        1
    } else {
        2
    };
    check!(
        tlb(&s1, &s2) == (per_page * p, 0, 0) && pt(&s1, &s2) == (1, 0, 0),
        "third job: TLB hits/misses/invalidations {:?}, want ({}, 0, 0); \
         hits/faults/bound {:?}",
        tlb(&s1, &s2),
        per_page * p,
        pt(&s1, &s2)
    );
    let old = msvm_rt::checksum(&want);
    check!(
        j1.result == old && j2.result == old,
        "checksums {:#x} {:#x}, want {old:#x}",
        j1.result,
        j2.result
    );
    want[100] ^= 0x5a;
    m.bytes_mut()[100] = want[100];
    let s3 = stats(&dev)?;
    let (_, _, inv) = tlb(&s2, &s3);
    check!(inv >= 1, "the CPU's write invalidated no TLB");
    let j3 = job(&dev)?;
    let s4 = stats(&dev)?;
    let new = msvm_rt::checksum(&want);
    check!(
        j3.result == new,
        "checksum after the CPU's write {:#x}, want {new:#x} (before: {old:#x})",
        j3.result
    );
    let (_, misses, _) = tlb(&s3, &s4);
    check!(misses >= 1, "the job after the write walked no entry");
    Ok(())
}
