//! Read-mostly ranges: read-only replicas of system pages in each reading
//! device's memory, dropped by every change of the pages' mappings, by a
//! shrink pass, and never a stale byte.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use msvm_rt::{checksum, Access, Attributes, Device, Exec, Place, Stats};
use nix::sys::mman::{mprotect, ProtFlags};

use crate::check;
use crate::harness::{Outcome, Test};
use crate::multi::devices;
use crate::svm::{fill, Map, PAGE};

pub fn tests() -> Vec<Test> {
    vec![
        Test {
            name: "read_mostly_replicas_on_every_device_dropped_by_a_cpu_write",
            run: replicas_follow_the_cpu,
        },
        Test {
            name: "read_mostly_device_jobs_never_see_stale_bytes_under_cpu_writes",
            run: concurrent_cpu_writes,
        },
        Test {
            name: "read_mostly_writable_mapping_is_read_in_place",
            run: writable_in_place,
        },
        Test {
            name: "read_mostly_replicas_are_charged_to_the_cgroup_of_their_process",
            run: replicas_charged,
        },
    ]
}

const HUGE: usize = 2 << 20;

const READ_MOSTLY: Attributes = Attributes {
    preferred: Place::Default,
    access: Access::Migrate,
    thrash: true,
    counters: true,
    read_mostly: true,
};

fn e(x: msvm_rt::Error) -> String {
    x.to_string()
}

/// `len` bytes of an anonymous private mapping, 2 MiB aligned (a job's
/// window is a 2 MiB block: a COPY's source has replicas only if it is
/// aligned as its destination is).
pub struct Buf {
    _map: Map,
    addr: usize,
    len: usize,
}

impl Buf {
    fn new(len: usize) -> Result<Self, String> {
        let map = Map::new(len + HUGE)?;
        let addr = map.addr().next_multiple_of(HUGE);
        Ok(Self {
            _map: map,
            addr,
            len,
        })
    }

    pub fn addr(&self) -> usize {
        self.addr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: a readable part of `_map`, which lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.addr as *const u8, self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: a part of `_map`, exclusively borrowed; the callers make
        // it writable first.
        unsafe { std::slice::from_raw_parts_mut(self.addr as *mut u8, self.len) }
    }
}

/// Gives `[addr, addr + len)` the protection `prot`.
fn protect(addr: usize, len: usize, prot: ProtFlags) -> Result<(), String> {
    let p = NonNull::new(addr as *mut c_void).ok_or("null")?;
    // SAFETY: a range of a mapping of ours, which no Rust reference spans
    // while it changes (the callers hold none across this call).
    unsafe { mprotect(p, len, prot) }.map_err(|x| format!("mprotect: {x}"))
}

/// The pages read-only: the CPU cannot write them without `mprotect`.
fn read_only(m: &Buf) -> Result<(), String> {
    protect(m.addr(), m.len(), ProtFlags::PROT_READ)
}

fn replicas(d: &Device, m: &Buf, i: usize) -> Result<u64, String> {
    Ok(d.residency(m.addr(), m.len()).map_err(e)?.replicas[i])
}

/// Replica counters of device `d` since `s0`: pages copied, pages read
/// from a replica made before.
fn delta(d: &Device, s0: &Stats) -> Result<(u64, u64), String> {
    let s = d.stats().map_err(e)?;
    Ok((
        s.replica_copied - s0.replica_copied,
        s.replica_hits - s0.replica_hits,
    ))
}

/// A 4 MiB read-only buffer in system RAM, read-mostly for all three
/// devices (the third out of P2P reach): each one's first CHECKSUM copies
/// it into replicas in its own memory and moves nothing; the second reads
/// only its replicas (own VRAM, no system RAM); RESIDENCY shows 4 MiB of
/// replicas on each and the pages still in system RAM. The CPU then
/// writes a page of the first block (made writable for it, then read-only
/// again): every device's replicas of that block are gone at once, the
/// other block's stay, and the next CHECKSUMs read the new bytes. A shrink
/// pass drops the rest.
fn replicas_follow_the_cpu() -> Outcome {
    let (a, b, c) = devices()?;
    let devs = [&a, &b, &c];
    let idx: Vec<usize> = devs
        .iter()
        .map(|d| d.index().map(|i| i as usize))
        .collect::<Result<_, _>>()
        .map_err(e)?;
    const LEN: usize = 2 * HUGE;
    let pages = (LEN / PAGE) as u64;
    let mut m = Buf::new(LEN)?;
    fill(m.bytes_mut(), 61);
    read_only(&m)?;
    let want = checksum(m.bytes());
    for d in devs {
        d.set_attr(m.addr(), LEN, READ_MOSTLY).map_err(e)?;
    }
    for (k, d) in devs.into_iter().enumerate() {
        let s0 = d.stats().map_err(e)?;
        let j1 = d.exec(Exec::Checksum, m.addr(), LEN, false).map_err(e)?;
        let d1 = delta(d, &s0)?;
        let s1 = d.stats().map_err(e)?;
        let j2 = d.exec(Exec::Checksum, m.addr(), LEN, false).map_err(e)?;
        let d2 = delta(d, &s1)?;
        let s2 = d.stats().map_err(e)?;
        check!(
            j1.result == want && j2.result == want,
            "device {k}: checksums {:#x} {:#x}, want {want:#x}",
            j1.result,
            j2.result
        );
        check!(
            j1.migrated == 0 && j2.migrated == 0,
            "device {k} moved pages: {j1:?} {j2:?}"
        );
        check!(
            d1 == (pages, 0) && d2 == (0, pages),
            "device {k}: replica pages copied/hit {d1:?} then {d2:?}"
        );
        let (vram, sys) = (
            s2.engine_vram_read - s1.engine_vram_read,
            s2.engine_sys_read - s1.engine_sys_read,
        );
        check!(
            vram == LEN as u64 && sys == 0,
            "device {k}: second job read {vram} B of own VRAM, {sys} B of system RAM"
        );
    }
    let r = a.residency(m.addr(), LEN).map_err(e)?;
    check!(
        r.system == LEN as u64 && idx.iter().all(|&i| r.replicas[i] == LEN as u64),
        "after the reads: {r:?}"
    );
    check!(r.attributes == READ_MOSTLY && !r.mixed, "attributes: {r:?}");
    // The CPU writes one page of the first block.
    protect(m.addr(), PAGE, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE)?;
    m.bytes_mut()[..PAGE].fill(0x5a);
    protect(m.addr(), PAGE, ProtFlags::PROT_READ)?;
    let want = checksum(m.bytes());
    for (k, &i) in idx.iter().enumerate() {
        let first = devs[k].residency(m.addr(), HUGE).map_err(e)?.replicas[i];
        let second = devs[k]
            .residency(m.addr() + HUGE, HUGE)
            .map_err(e)?
            .replicas[i];
        check!(
            first == 0 && second == HUGE as u64,
            "device {k} after the CPU's write: replicas {first} and {second} B"
        );
    }
    for (k, d) in devs.into_iter().enumerate() {
        let j = d.exec(Exec::Checksum, m.addr(), LEN, false).map_err(e)?;
        check!(
            j.result == want,
            "device {k} after the CPU's write: {:#x}, want {want:#x}",
            j.result
        );
    }
    check!(
        m.bytes()[..PAGE].iter().all(|&x| x == 0x5a),
        "the CPU's write"
    );
    // A shrink pass drops every replica.
    let s0: Vec<Stats> = devs
        .iter()
        .map(|d| d.stats())
        .collect::<Result<_, _>>()
        .map_err(e)?;
    crate::lifecycle::shrink("idle")?;
    for (k, &i) in idx.iter().enumerate() {
        let n = replicas(devs[k], &m, i)?;
        let dropped = devs[k].stats().map_err(e)?.replica_dropped - s0[k].replica_dropped;
        check!(
            n == 0 && dropped >= 2,
            "device {k} after a shrink pass: {n} B of replicas, {dropped} blocks dropped"
        );
        let j = devs[k]
            .exec(Exec::Checksum, m.addr(), LEN, false)
            .map_err(e)?;
        check!(j.result == want, "device {k} after the shrink pass");
    }
    Ok(())
}

/// The CPU writes a 2 MiB read-mostly buffer over and over (every byte the
/// round's number, made writable for each round and read-only again) while
/// gpu0, gpu1 and the isolated device COPY it into buffers of their own:
/// every byte a device copied is from a round no older than the last one
/// the CPU had finished when the job began, and no newer than the last it
/// had begun when it ended (a replica never outlives a write); replicas
/// are made and read meanwhile; at the end the CPU reads its own last
/// round.
fn concurrent_cpu_writes() -> Outcome {
    let (a, b, c) = devices()?;
    const ROUNDS: u8 = 40;
    let mut m = Buf::new(HUGE)?;
    m.bytes_mut().fill(1);
    read_only(&m)?;
    for d in [&a, &b, &c] {
        d.set_attr(m.addr(), HUGE, READ_MOSTLY).map_err(e)?;
    }
    let s0: Vec<Stats> = [&a, &b, &c]
        .iter()
        .map(|d| d.stats())
        .collect::<Result<_, _>>()
        .map_err(e)?;
    let done_round = AtomicU64::new(1);
    let begun_round = AtomicU64::new(1);
    let stop = AtomicBool::new(false);
    let addr = m.addr();
    let jobs = std::thread::scope(|s| -> Result<u64, String> {
        let readers: Vec<_> = [&a, &b, &c]
            .into_iter()
            .map(|d| {
                let (done_round, begun_round, stop) = (&done_round, &begun_round, &stop);
                s.spawn(move || -> Result<u64, String> {
                    let mut dst = Buf::new(HUGE)?;
                    let mut jobs = 0;
                    while !stop.load(Ordering::SeqCst) {
                        let lo = done_round.load(Ordering::SeqCst) as u8;
                        d.exec(Exec::Copy { src: addr }, dst.addr(), HUGE, false)
                            .map_err(e)?;
                        let hi = begun_round.load(Ordering::SeqCst) as u8;
                        if let Some(i) = dst.bytes().iter().position(|&x| x < lo || x > hi) {
                            return Err(format!(
                                "job {jobs}: byte {i} is from round {}, not {lo}..={hi}",
                                dst.bytes()[i]
                            ));
                        }
                        dst.bytes_mut()[0] = 0;
                        jobs += 1;
                    }
                    Ok(jobs)
                })
            })
            .collect();
        let writer = (|| -> Result<(), String> {
            for round in 2..=ROUNDS {
                protect(addr, HUGE, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE)?;
                begun_round.store(u64::from(round), Ordering::SeqCst);
                // SAFETY: our own mapping, writable now; no reference to
                // it is held across the mprotect calls around this.
                unsafe { std::ptr::write_bytes(addr as *mut u8, round, HUGE) };
                protect(addr, HUGE, ProtFlags::PROT_READ)?;
                done_round.store(u64::from(round), Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Ok(())
        })();
        stop.store(true, Ordering::SeqCst);
        let mut jobs = 0;
        for r in readers {
            jobs += r.join().map_err(|_| "a reader panicked")??;
        }
        writer?;
        Ok(jobs)
    })?;
    check!(
        m.bytes().iter().all(|&x| x == ROUNDS),
        "the CPU does not read its last round"
    );
    let (mut copied, mut hits) = (0, 0);
    for (k, d) in [&a, &b, &c].into_iter().enumerate() {
        let (cp, h) = delta(d, &s0[k])?;
        copied += cp;
        hits += h;
    }
    check!(
        jobs >= 3 && copied > 0,
        "{jobs} jobs, {copied} replica pages copied, {hits} read again"
    );
    Ok(())
}

/// A read-mostly range the CPU may write (a writable mapping) has no
/// replicas: the jobs read its pages in place (system RAM) and move
/// nothing.
fn writable_in_place() -> Outcome {
    let (a, _, _) = devices()?;
    let mut m = Buf::new(HUGE)?;
    fill(m.bytes_mut(), 62);
    a.set_attr(m.addr(), HUGE, READ_MOSTLY).map_err(e)?;
    let s0 = a.stats().map_err(e)?;
    for _ in 0..2 {
        let j = a.exec(Exec::Checksum, m.addr(), HUGE, false).map_err(e)?;
        check!(j.migrated == 0 && j.result == checksum(m.bytes()), "{j:?}");
    }
    let (copied, hits) = delta(&a, &s0)?;
    let sys = a.stats().map_err(e)?.engine_sys_read - s0.engine_sys_read;
    check!(
        copied == 0 && hits == 0 && sys == 2 * HUGE as u64,
        "writable: {copied} copied, {hits} hits, {sys} B read in place"
    );
    Ok(())
}

/// `msvm-tests read-mostly-off`, after loading msvm with `read_mostly=0`:
/// the attribute is kept (RESIDENCY reports it) but changes nothing: a
/// CHECKSUM of a read-only read-mostly buffer migrates it as before, and
/// no replica is made.
pub fn read_mostly_off() -> Result<(), String> {
    let (a, _, _) = devices()?;
    let mut m = Buf::new(HUGE)?;
    fill(m.bytes_mut(), 63);
    read_only(&m)?;
    a.set_attr(m.addr(), HUGE, READ_MOSTLY).map_err(e)?;
    let j = a.exec(Exec::Checksum, m.addr(), HUGE, false).map_err(e)?;
    check!(
        j.migrated == (HUGE / PAGE) as u64 && j.result == checksum(m.bytes()),
        "with read_mostly=0: {j:?}"
    );
    let s = a.stats().map_err(e)?;
    let r = a.residency(m.addr(), HUGE).map_err(e)?;
    check!(
        s.replica_copied == 0 && s.replica_blocks == 0 && r.replicas.iter().all(|&n| n == 0),
        "replicas with read_mostly=0: {} {} {r:?}",
        s.replica_copied,
        s.replica_blocks
    );
    check!(r.attributes == READ_MOSTLY, "attribute: {r:?}");
    Ok(())
}

/// For the hot-unplug test: a 2 MiB read-only buffer, read-mostly on every
/// device of `devs` and read by each (replicas everywhere); its checksum.
pub fn replicated_everywhere<'a>(
    devs: impl Iterator<Item = &'a Device>,
) -> Result<(Buf, u64), String> {
    let mut m = Buf::new(HUGE)?;
    fill(m.bytes_mut(), 64);
    read_only(&m)?;
    let want = checksum(m.bytes());
    for d in devs {
        d.set_attr(m.addr(), HUGE, READ_MOSTLY).map_err(e)?;
        let j = d.exec(Exec::Checksum, m.addr(), HUGE, false).map_err(e)?;
        check!(j.result == want, "read-mostly checksum");
        let i = d.index().map_err(e)? as usize;
        let n = replicas(d, &m, i)?;
        check!(n == HUGE as u64, "device {i}: {n} B of replicas");
    }
    Ok((m, want))
}

/// For the hot-unplug test: a 2 MiB buffer whose words the devices of
/// `group` (one owner group, at least two) add 1 to in turn, moving it
/// between them, until thrashing detection pins it where it is (a CPU
/// read brings it home once first: a CPU fault starts a block's
/// history); the buffer and the value every word must have.
pub fn pinned_between(group: &[&Device]) -> Result<(Buf, u64), String> {
    check!(group.len() >= 2, "one device in the first owner group");
    let mut m = Buf::new(HUGE)?;
    for w in m.bytes_mut().chunks_mut(8) {
        w.copy_from_slice(&7u64.to_le_bytes());
    }
    group[0]
        .exec(Exec::AtomicAdd(1), m.addr(), HUGE, false)
        .map_err(e)?;
    let mut adds = 1;
    // A CPU fault brings it home: its history starts.
    let sum: u64 = m.bytes().iter().step_by(PAGE).map(|&b| u64::from(b)).sum();
    check!(sum == 8 * (HUGE / PAGE) as u64, "CPU read: {sum}");
    for round in 1..8 {
        let d = group[round % 2];
        d.exec(Exec::AtomicAdd(1), m.addr(), HUGE, false)
            .map_err(e)?;
        adds += 1;
    }
    let r = group[0].residency(m.addr(), HUGE).map_err(e)?;
    check!(
        r.pinned == HUGE as u64 && r.system == 0,
        "not pinned on a device: {r:?}"
    );
    Ok((m, 7 + adds))
}

/// Every word of a [`pinned_between`] buffer has its value.
pub fn check_pinned((m, want): &(Buf, u64)) -> Result<(), String> {
    let want = want.to_le_bytes();
    if let Some(i) = m.bytes().chunks(8).position(|w| w != want) {
        return Err(format!(
            "pinned buffer: word {i} is not {}",
            u64::from_le_bytes(want)
        ));
    }
    Ok(())
}

/// A process in a cgroup whose `dmem.max` on gpu0 is 4 MiB:
/// - reads an 8 MiB read-mostly buffer `A` in system RAM on gpu0: its first
///   two 2 MiB blocks get replicas, charged to the cgroup (`dmem.current`
///   4 MiB, STATS `cgroup_bytes` with them); the other two find the cgroup
///   at its limit and are read in place (no replica), and a second job
///   reads the replicas it has;
/// - unmaps `A` (its replicas are stale, still charged) and reads a 4 MiB
///   read-mostly buffer `B`: the stale replicas make way, `B` gets two;
/// - MIGRATEs 2 MiB of other memory to gpu0: a replica makes way for the
///   pages (replicas go before pages), which all move;
/// - a shrink pass drops the last replica and gives its charge back.
///
/// Every checksum is the CPU's. (Before replicas were charged: 8 MiB of
/// replicas, `dmem.current` 0.)
fn replicas_charged() -> Outcome {
    use crate::cgroup::{leave, region, Cgroup};
    let d = crate::svm::gpu0()?;
    let i = d.index().map_err(e)? as usize;
    let r = region(&d)?;
    const MAX: u64 = 2 * HUGE as u64;
    // Room for replica chunks: idle chunks earlier tests left go.
    crate::lifecycle::shrink("idle")?;
    let read_mostly = |len: usize, seed: u64| -> Result<(Buf, u64), String> {
        let mut m = Buf::new(len)?;
        fill(m.bytes_mut(), seed);
        read_only(&m)?;
        d.set_attr(m.addr(), len, READ_MOSTLY).map_err(e)?;
        let want = checksum(m.bytes());
        Ok((m, want))
    };
    let (a, want_a) = read_mostly(4 * HUGE, 62)?;
    let (b, want_b) = read_mostly(2 * HUGE, 63)?;
    let mut c = Map::new(HUGE)?;
    fill(c.bytes_mut(), 64);
    let g = Cgroup::new("msvm-test-replicas")?;
    g.set_max(&r, Some(MAX))?;
    g.enter()?;
    let run = |a: Buf| -> Outcome {
        let s0 = d.stats().map_err(e)?;
        let j1 = d
            .exec(Exec::Checksum, a.addr(), a.len(), false)
            .map_err(e)?;
        let s1 = d.stats().map_err(e)?;
        let (held, cur) = (replicas(&d, &a, i)?, g.current(&r)?);
        check!(j1.result == want_a, "A: checksum {:#x}", j1.result);
        check!(
            held == MAX && cur == MAX,
            "A: replicas {held} B, dmem.current {cur} B, want {MAX} each"
        );
        check!(
            s1.cgroup_bytes >= s0.cgroup_bytes + MAX,
            "STATS cgroup_bytes {} -> {}",
            s0.cgroup_bytes,
            s1.cgroup_bytes
        );
        check!(
            s1.engine_sys_read - s0.engine_sys_read >= (a.len() / 2) as u64 && j1.migrated == 0,
            "A's blocks without a replica: {} B read from system RAM, {j1:?}",
            s1.engine_sys_read - s0.engine_sys_read
        );
        let j2 = d
            .exec(Exec::Checksum, a.addr(), a.len(), false)
            .map_err(e)?;
        let (_, hits) = delta(&d, &s1)?;
        check!(j2.result == want_a, "A again: checksum {:#x}", j2.result);
        check!(
            hits == (MAX as usize / PAGE) as u64 && g.current(&r)? == MAX,
            "A again: {hits} replica pages read, dmem.current {}",
            g.current(&r)?
        );
        drop(a);
        let s2 = d.stats().map_err(e)?;
        let jb = d
            .exec(Exec::Checksum, b.addr(), b.len(), false)
            .map_err(e)?;
        let s3 = d.stats().map_err(e)?;
        let (held, cur) = (replicas(&d, &b, i)?, g.current(&r)?);
        check!(jb.result == want_b, "B: checksum {:#x}", jb.result);
        check!(
            held == MAX && cur == MAX && s3.replica_dropped - s2.replica_dropped >= 2,
            "B after A's unmap: replicas {held} B, dmem.current {cur} B, {} blocks dropped",
            s3.replica_dropped - s2.replica_dropped
        );
        let out = d
            .migrate(c.addr(), HUGE, msvm_rt::Location::Device)
            .map_err(e)?;
        let (held, cur) = (replicas(&d, &b, i)?, g.current(&r)?);
        check!(
            out.moved == (HUGE / PAGE) as u64 && held == MAX / 2 && cur == MAX,
            "MIGRATE at the limit: {out:?}; B's replicas {held} B, dmem.current {cur} B"
        );
        crate::lifecycle::shrink("idle")?;
        let (held, cur) = (replicas(&d, &b, i)?, g.current(&r)?);
        check!(
            held == 0 && cur == MAX / 2,
            "after a shrink pass: replicas {held} B, dmem.current {cur} B (C's pages: {})",
            MAX / 2
        );
        crate::svm::verify(c.bytes(), 64)
    };
    let out = run(a);
    leave()?;
    out
}
