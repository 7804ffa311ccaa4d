//! Placement policy: preferred location and access policy per range,
//! PREFETCH, the residency query, and several devices and the CPU working on
//! one range at once.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use msvm_rt::{Access, Attributes, Device, Exec, Location, Place, Residency, Stats};
use nix::errno::Errno;

use crate::check;
use crate::harness::{Outcome, Test};
use crate::multi::devices;
use crate::svm::{fill, Map, PAGE};

pub fn tests() -> Vec<Test> {
    vec![
        Test {
            name: "placement_residency_per_location",
            run: residency_per_location,
        },
        Test {
            name: "placement_prefetch_to_peer_and_errors",
            run: prefetch_to_peer_and_errors,
        },
        Test {
            name: "placement_every_location_access_and_op",
            run: matrix,
        },
        Test {
            name: "placement_attributes_split_and_reset",
            run: attributes_split_and_reset,
        },
        Test {
            name: "placement_concurrent_atomics_two_devices_cpu_and_migration",
            run: concurrent_atomics,
        },
        Test {
            name: "placement_full_device_evicts_data_used_once_not_the_working_set",
            run: oversubscription,
        },
        Test {
            name: "placement_full_device_a_new_working_set_displaces_the_old",
            run: new_working_set_displaces_the_old,
        },
        Test {
            name: "placement_full_device_explicit_migrate_evicts_least_recent",
            run: oversubscription_explicit,
        },
        Test {
            name: "placement_pingpong_blocks_are_pinned_and_used_in_place",
            run: pingpong_pinned,
        },
        Test {
            name: "placement_pingpong_on_a_range_with_thrashing_detection_off",
            run: pingpong_range_off,
        },
        Test {
            name: "placement_access_counters_move_blocks_used_in_place_from_a_peer_and_ram",
            run: access_counters_move,
        },
        Test {
            name: "placement_access_counters_leave_ranges_whose_attributes_say_where",
            run: access_counters_respect_attributes,
        },
    ]
}

fn e(x: msvm_rt::Error) -> String {
    x.to_string()
}

/// The three devices with their indices: `a` and `b` share an owner group,
/// `c` reaches neither.
struct Trio {
    a: Device,
    b: Device,
    c: Device,
    ia: usize,
    ib: usize,
    ic: usize,
}

fn trio() -> Result<Trio, String> {
    let (a, b, c) = devices()?;
    let (ia, ib, ic) = (
        a.index().map_err(e)? as usize,
        b.index().map_err(e)? as usize,
        c.index().map_err(e)? as usize,
    );
    Ok(Trio {
        a,
        b,
        c,
        ia,
        ib,
        ic,
    })
}

fn res(d: &Device, m: &Map) -> Result<Residency, String> {
    d.residency(m.addr(), m.len()).map_err(e)
}

const DEFAULT: Attributes = Attributes {
    preferred: Place::Default,
    access: Access::Migrate,
    thrash: true,
    counters: true,
    read_mostly: false,
};

/// Pages on every location, and untouched ones: the query counts each.
fn residency_per_location() -> Outcome {
    let t = trio()?;
    let mut m = Map::new(16 * PAGE)?;
    // Pages 0..12 written (system), 12..16 never touched.
    fill(&mut m.bytes_mut()[..12 * PAGE], 7);
    let r = res(&t.a, &m)?;
    check!(
        r.system == 12 * PAGE as u64 && r.none == 4 * PAGE as u64,
        "fresh: {r:?}"
    );
    check!(r.devices.iter().all(|&b| b == 0), "fresh: {r:?}");
    check!(
        r.attributes == DEFAULT && !r.mixed,
        "default attributes: {r:?}"
    );
    // Three pages to each device, by each device's own MIGRATE.
    for (k, d) in [&t.a, &t.b, &t.c].into_iter().enumerate() {
        let at = m.addr() + 3 * k * PAGE;
        let out = d.migrate(at, 3 * PAGE, Location::Device).map_err(e)?;
        check!(out.moved == 3, "park on device {k}: {out:?}");
    }
    // Every device sees the same picture, whatever its owner group.
    for d in [&t.a, &t.b, &t.c] {
        let r = res(d, &m)?;
        let p = PAGE as u64;
        check!(
            r.devices[t.ia] == 3 * p && r.devices[t.ib] == 3 * p && r.devices[t.ic] == 3 * p,
            "devices: {r:?}"
        );
        check!(r.system == 3 * p && r.none == 4 * p, "rest: {r:?}");
    }
    // The query moved nothing: the data is still where it was put.
    let before: Vec<u64> = [&t.a, &t.b, &t.c]
        .iter()
        .map(|d| d.stats().map(|s| s.to_system + s.to_device))
        .collect::<Result<_, _>>()
        .map_err(e)?;
    res(&t.a, &m)?;
    let after: Vec<u64> = [&t.a, &t.b, &t.c]
        .iter()
        .map(|d| d.stats().map(|s| s.to_system + s.to_device))
        .collect::<Result<_, _>>()
        .map_err(e)?;
    check!(before == after, "the query moved pages");
    // An unmapped hole counts as nowhere; a range beyond user space is
    // EFAULT; an unaligned one EINVAL.
    let hole = Map::new(4 * PAGE)?;
    let (addr, len) = (hole.addr(), hole.len());
    drop(hole);
    let r = t.a.residency(addr, len).map_err(e)?;
    check!(r.none == len as u64, "hole: {r:?}");
    check!(
        t.a.residency(m.addr() + 1, PAGE)
            .err()
            .and_then(|x| x.errno())
            == Some(Errno::EINVAL),
        "unaligned"
    );
    check!(
        t.a.residency(1 << 47, PAGE).err().and_then(|x| x.errno()) == Some(Errno::EFAULT),
        "beyond user space"
    );
    check!(
        t.a.residency(0, 1 << 33).err().and_then(|x| x.errno()) == Some(Errno::EINVAL),
        "too long"
    );
    Ok(())
}

/// PREFETCH from A to B moves A's pages straight over P2P; to C (no P2P
/// path) is ENOLINK; unknown devices ENOENT; system brings everyone's
/// pages to system RAM.
fn prefetch_to_peer_and_errors() -> Outcome {
    let t = trio()?;
    let n = 32;
    let mut m = Map::new(n * PAGE)?;
    fill(m.bytes_mut(), 99);
    let want = m.bytes().to_vec();
    t.a.prefetch(m.addr(), m.len(), Place::Here).map_err(e)?;
    let b0 = t.b.stats().map_err(e)?;
    let out =
        t.a.prefetch(m.addr(), m.len(), Place::Device(t.ib as u32))
            .map_err(e)?;
    check!(out.moved == n as u64, "to peer: {out:?}");
    let b1 = t.b.stats().map_err(e)?;
    check!(
        b1.from_peer - b0.from_peer == n as u64,
        "B took {} pages from its peer over P2P",
        b1.from_peer - b0.from_peer
    );
    let r = res(&t.a, &m)?;
    check!(r.devices[t.ib] == m.len() as u64, "on B: {r:?}");
    let again =
        t.a.prefetch(m.addr(), m.len(), Place::Device(t.ib as u32))
            .map_err(e)?;
    check!(again.already == n as u64, "again: {again:?}");
    for (place, errno, what) in [
        (Place::Device(t.ic as u32), Errno::ENOLINK, "unreachable"),
        (Place::Device(15), Errno::ENOENT, "absent"),
        (Place::Device(99), Errno::ENOENT, "beyond the maximum"),
        (Place::Default, Errno::EINVAL, "default is no place"),
    ] {
        let got = t.a.prefetch(m.addr(), m.len(), place).err();
        check!(
            got.as_ref().and_then(|x| x.errno()) == Some(errno),
            "prefetch {what}: {got:?}"
        );
        if place != Place::Default {
            let attrs = Attributes {
                preferred: place,
                access: Access::Migrate,
                thrash: true,
                counters: true,
                read_mostly: false,
            };
            let got = t.a.set_attr(m.addr(), m.len(), attrs).err();
            check!(
                got.as_ref().and_then(|x| x.errno()) == Some(errno),
                "set_attr {what}: {got:?}"
            );
        }
    }
    // C (another owner group) brings B's pages to system RAM: system RAM
    // is reachable by all.
    let mut half =
        t.c.prefetch(m.addr(), m.len() / 2, Place::Here)
            .map_err(e)?;
    check!(half.total() == (n / 2) as u64, "C: {half:?}");
    half = t.a.prefetch(m.addr(), m.len(), Place::System).map_err(e)?;
    // C's pages and those B still had (fetching through RAM may have
    // brought some of B's neighbours back already: a CPU-fault window).
    check!(
        half.moved >= (n / 2) as u64 && half.moved + half.already == n as u64,
        "to system from B and C: {half:?}"
    );
    let r = res(&t.a, &m)?;
    check!(r.system == m.len() as u64, "in system RAM: {r:?}");
    check!(m.bytes() == &want[..], "data changed on its way");
    Ok(())
}

/// Where a job's data starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    System,
    A,
    B,
    C,
}

/// Every preferred location x access policy x op x starting place: the
/// CPU checks the data afterwards, the residency query checks where the
/// pages went, the counters how the engine reached them.
fn matrix() -> Outcome {
    let t = trio()?;
    let n = 8;
    let len = n * PAGE;
    let mut seed = 1000;
    for preferred in [Place::Default, Place::System, Place::Device(t.ib as u32)] {
        for access in [Access::Migrate, Access::InPlace] {
            for start in [Start::System, Start::A, Start::B, Start::C] {
                for op in 0..4 {
                    seed += 1;
                    one_case(&t, preferred, access, start, op, len, seed)
                        .map_err(|w| format!("{preferred:?}/{access:?}/{start:?}/op{op}: {w}"))?;
                }
            }
        }
    }
    Ok(())
}

fn one_case(
    t: &Trio,
    preferred: Place,
    access: Access,
    start: Start,
    op: usize,
    len: usize,
    seed: u64,
) -> Outcome {
    // Destination then source, in one mapping.
    let mut m = Map::new(2 * len)?;
    fill(m.bytes_mut(), seed);
    let before = m.bytes().to_vec();
    let (dst, src) = (m.addr(), m.addr() + len);
    let attrs = Attributes {
        preferred,
        access,
        thrash: true,
        counters: true,
        read_mostly: false,
    };
    t.a.set_attr(m.addr(), m.len(), attrs).map_err(e)?;
    let park = match start {
        Start::System => None,
        Start::A => Some(&t.a),
        Start::B => Some(&t.b),
        Start::C => Some(&t.c),
    };
    if let Some(d) = park {
        let out = d.migrate(m.addr(), m.len(), Location::Device).map_err(e)?;
        check!(out.moved == (2 * len / PAGE) as u64, "park: {out:?}");
    }
    let s0 = t.a.stats().map_err(e)?;
    let value = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let job = match op {
        0 => Exec::Fill(value),
        1 => Exec::Copy { src },
        2 => Exec::AtomicAdd(value),
        _ => Exec::Checksum,
    };
    let out = t.a.exec(job, dst, len, false).map_err(e)?;
    let s1 = t.a.stats().map_err(e)?;
    // Where the pages the job touched are now (before the CPU touches
    // them): the destination, and COPY's source.
    let touched = if op == 1 { 2 * len } else { len };
    let r = t.a.residency(dst, touched).map_err(e)?;
    let total = touched as u64;
    let expect_at = match (access, start) {
        (Access::Migrate, _) => match preferred {
            Place::System => None,
            Place::Device(i) => Some(i as usize),
            _ => Some(t.ia),
        },
        (Access::InPlace, Start::System | Start::C) => None,
        (Access::InPlace, Start::A) => Some(t.ia),
        (Access::InPlace, Start::B) => Some(t.ib),
    };
    match expect_at {
        None => check!(r.system == total, "want all in RAM: {r:?}"),
        Some(i) => check!(r.devices[i] == total, "want all on device {i}: {r:?}"),
    }
    // How the engine reached them.
    let peer = |s: &Stats| s.engine_p2p_read + s.engine_p2p_written;
    let sys = |s: &Stats| s.engine_sys_read + s.engine_sys_written;
    let vram = |s: &Stats| s.engine_vram_read + s.engine_vram_written;
    let (p2p, dma, local) = (
        peer(&s1) - peer(&s0),
        sys(&s1) - sys(&s0),
        vram(&s1) - vram(&s0),
    );
    match expect_at {
        Some(i) if i == t.ia => check!(local > 0 && p2p == 0 && dma == 0, "want VRAM only"),
        Some(_) => check!(p2p > 0 && local == 0 && dma == 0, "want P2P only"),
        None => check!(dma > 0 && p2p == 0 && local == 0, "want DMA only"),
    }
    if access == Access::InPlace && start != Start::C {
        check!(out.migrated == 0, "in place migrated {}", out.migrated);
    }
    // The CPU's view: what the job must have done.
    let mut want = before.clone();
    match job {
        Exec::Fill(v) => {
            for w in want[..len].chunks_mut(8) {
                w.copy_from_slice(&v.to_ne_bytes());
            }
        }
        Exec::Copy { .. } => {
            let (d, s) = want.split_at_mut(len);
            d.copy_from_slice(s);
        }
        Exec::AtomicAdd(v) => {
            for w in want[..len].chunks_mut(8) {
                let x = u64::from_ne_bytes(w.try_into().unwrap()).wrapping_add(v);
                w.copy_from_slice(&x.to_ne_bytes());
            }
        }
        Exec::Checksum => {
            check!(
                out.result == msvm_rt::checksum(&before[..len]),
                "checksum differs"
            );
        }
    }
    if let Some(i) = m.bytes().iter().zip(&want).position(|(x, y)| x != y) {
        return Err(format!("byte {i} differs"));
    }
    t.a.set_attr(m.addr(), m.len(), DEFAULT).map_err(e)?;
    Ok(())
}

/// Attributes split where a range cuts them, are reported per range, and
/// reset to the default.
fn attributes_split_and_reset() -> Outcome {
    let t = trio()?;
    let m = Map::new(8 * PAGE)?;
    let sys = Attributes {
        preferred: Place::System,
        access: Access::Migrate,
        thrash: true,
        counters: true,
        read_mostly: false,
    };
    let peer = Attributes {
        preferred: Place::Device(t.ib as u32),
        access: Access::InPlace,
        thrash: true,
        counters: true,
        read_mostly: false,
    };
    t.a.set_attr(m.addr(), m.len(), sys).map_err(e)?;
    t.a.set_attr(m.addr() + 2 * PAGE, 2 * PAGE, peer)
        .map_err(e)?;
    let at = |p: usize, n: usize| t.a.residency(m.addr() + p * PAGE, n * PAGE).map_err(e);
    let r = at(0, 2)?;
    check!(r.attributes == sys && !r.mixed, "head: {r:?}");
    let r = at(2, 2)?;
    check!(r.attributes == peer && !r.mixed, "middle: {r:?}");
    let r = at(1, 4)?;
    check!(r.attributes == sys && r.mixed, "across: {r:?}");
    // Another device's VM has its own attributes.
    let r = t.b.residency(m.addr(), m.len()).map_err(e)?;
    check!(r.attributes == DEFAULT, "B's view: {r:?}");
    // Naming this device by index is the default location.
    let here = Attributes {
        preferred: Place::Device(t.ia as u32),
        access: Access::Migrate,
        thrash: true,
        counters: true,
        read_mostly: false,
    };
    t.a.set_attr(m.addr(), m.len(), here).map_err(e)?;
    let r = at(0, 8)?;
    check!(r.attributes == DEFAULT && !r.mixed, "reset: {r:?}");
    // Bad input.
    let bad = |addr: usize, len: usize| t.a.set_attr(addr, len, sys).err().and_then(|x| x.errno());
    check!(bad(m.addr() + 1, PAGE) == Some(Errno::EINVAL), "unaligned");
    check!(bad(m.addr(), 0) == Some(Errno::EINVAL), "empty");
    check!(
        bad(1 << 47, PAGE) == Some(Errno::EFAULT),
        "beyond user space"
    );
    let mut raw = msvm_rt::abi::DrmMsvmSetAttr {
        addr: m.addr() as u64,
        length: PAGE as u64,
        location: 9,
        ..Default::default()
    };
    check!(
        t.a.set_attr_raw(&mut raw).err().and_then(|x| x.errno()) == Some(Errno::EINVAL),
        "unknown location"
    );
    raw.location = msvm_rt::abi::MSVM_LOC_SYSTEM;
    raw.reserved[0] = 1;
    check!(
        t.a.set_attr_raw(&mut raw).err().and_then(|x| x.errno()) == Some(Errno::EINVAL),
        "reserved"
    );
    // The range limit: every other page its own range.
    let many = Map::new(2 * 4100 * PAGE)?;
    let mut hit = None;
    for k in 0..4100 {
        if let Err(x) = t.a.set_attr(many.addr() + 2 * k * PAGE, PAGE, sys) {
            hit = Some((k, x.errno()));
            break;
        }
    }
    check!(hit == Some((4096, Some(Errno::ENOSPC))), "limit: {hit:?}");
    t.a.set_attr(many.addr(), many.len(), DEFAULT).map_err(e)?;
    t.a.set_attr(m.addr(), m.len(), DEFAULT).map_err(e)?;
    Ok(())
}

/// Two devices add to every word of one array in place, the CPU adds to
/// them too, and another thread keeps moving the array between the
/// devices and RAM: the totals are exact.
fn concurrent_atomics() -> Outcome {
    let t = trio()?;
    let words = 2 * PAGE / 8;
    let m = Map::new(2 * PAGE)?;
    // SAFETY: the mapping is readable, writable, 8-byte aligned and lives
    // until the end of this function; the words are only used atomically.
    let cells: &[AtomicU64] =
        unsafe { std::slice::from_raw_parts(m.addr() as *const AtomicU64, words) };
    for c in cells {
        c.store(0, Ordering::Relaxed);
    }
    t.a.migrate(m.addr(), m.len(), Location::Device)
        .map_err(e)?;
    let rounds = 200u64;
    let stop = AtomicBool::new(false);
    let result: Result<(), String> = std::thread::scope(|s| {
        let (addr, len) = (m.addr(), m.len());
        let tt = &t;
        let ha = s.spawn(move || adder(&tt.a, addr, len, 1, rounds));
        let hb = s.spawn(move || adder(&tt.b, addr, len, 1000, rounds));
        let hc = s.spawn(|| {
            for _ in 0..rounds {
                for c in cells {
                    c.fetch_add(1_000_000, Ordering::Relaxed);
                }
            }
        });
        let (t, stop) = (&t, &stop);
        let mover = s.spawn(move || -> Outcome {
            let places = [Place::Device(t.ib as u32), Place::System, Place::Here];
            let mut k = 0;
            while !stop.load(Ordering::Relaxed) {
                t.a.prefetch(addr, len, places[k % 3]).map_err(e)?;
                k += 1;
            }
            check!(k >= 3, "the array moved only {k} times");
            Ok(())
        });
        let ra = ha.join().map_err(|_| "A panicked".to_string())?;
        let rb = hb.join().map_err(|_| "B panicked".to_string())?;
        hc.join().map_err(|_| "CPU panicked".to_string())?;
        stop.store(true, Ordering::Relaxed);
        let rm = mover.join().map_err(|_| "mover panicked".to_string())?;
        ra.and(rb).and(rm)
    });
    result?;
    let want = rounds * (1 + 1000 + 1_000_000);
    let bad = cells
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .enumerate()
        .find(|&(_, v)| v != want);
    check!(bad.is_none(), "word {:?}, want {want}", bad);
    Ok(())
}

/// Adds `v` to every word of `[addr, addr + len)` on `d`, in place,
/// `rounds` times.
fn adder(d: &Device, addr: usize, len: usize, v: u64, rounds: u64) -> Outcome {
    for _ in 0..rounds {
        d.exec(Exec::AtomicAdd(v), addr, len, true).map_err(e)?;
    }
    Ok(())
}

/// The set-up of the oversubscription tests on the isolated device `c`: a
/// working set placed by MIGRATE, then data used once by a job (placed on
/// access) that fills the device but for 16 MiB, then another job's data
/// that needs 48 MiB more than is free. Returns the maps (working set,
/// first, second), the stats before the second job and after it, and
/// whether both jobs' checksums matched the CPU's.
struct Oversub {
    hot: Map,
    first: Map,
    second: Map,
    before: Stats,
    after: Stats,
}

fn oversub(d: &Device) -> Result<Oversub, String> {
    let s0 = d.stats().map_err(e)?;
    let free = (s0.vram_size as usize).saturating_sub(s0.resident as usize * PAGE);
    check!(free >= 128 << 20, "only {free} bytes of the device free");
    const MIB: usize = 1 << 20;
    let hot_len = 32 * MIB;
    let first_len = (free - hot_len - 16 * MIB) & !(2 * MIB - 1);
    let mut hot = Map::new(hot_len)?;
    fill(hot.bytes_mut(), 1);
    // In 2 MiB folios where THP allows (evicted through their mm), and in
    // 4 KiB pages.
    let mut first = Map::new(first_len)?;
    fill(first.bytes_mut(), 2);
    let mut second = Map::small(64 * MIB)?;
    fill(second.bytes_mut(), 3);
    let (want_first, want_second) = (
        msvm_rt::checksum(first.bytes()),
        msvm_rt::checksum(second.bytes()),
    );
    let o = d
        .migrate(hot.addr(), hot_len, Location::Device)
        .map_err(e)?;
    check!(o.moved == (hot_len / PAGE) as u64, "working set: {o:?}");
    let r = d
        .exec(Exec::Checksum, first.addr(), first_len, false)
        .map_err(e)?;
    check!(r.result == want_first, "first checksum");
    let before = d.stats().map_err(e)?;
    let r = d
        .exec(Exec::Checksum, second.addr(), second.len(), false)
        .map_err(e)?;
    check!(r.result == want_second, "second checksum");
    let after = d.stats().map_err(e)?;
    Ok(Oversub {
        hot,
        first,
        second,
        before,
        after,
    })
}

/// With the default policy (module parameter `evict=2`), the second job
/// evicts blocks of the first one's data (inactive: placed on access, used
/// by one request) and none of the working set (active: placed by MIGRATE),
/// and runs with all its pages on the device; every byte of all three
/// survives.
fn oversubscription() -> Outcome {
    let t = trio()?;
    let o = oversub(&t.c)?;
    let (b, a) = (&o.before, &o.after);
    check!(
        a.evict_blocks > b.evict_blocks && a.evict_pages > b.evict_pages,
        "no eviction: blocks {} -> {}, pages {} -> {}",
        b.evict_blocks,
        a.evict_blocks,
        b.evict_pages,
        a.evict_pages
    );
    check!(
        a.no_vram == b.no_vram,
        "no_vram {} -> {}",
        b.no_vram,
        a.no_vram
    );
    let hot = res(&t.c, &o.hot)?;
    check!(
        hot.devices[t.ic] == o.hot.len() as u64,
        "working set evicted: {hot:?}"
    );
    let second = res(&t.c, &o.second)?;
    check!(
        second.devices[t.ic] == o.second.len() as u64,
        "second job's data not all on the device: {second:?}"
    );
    let first = res(&t.c, &o.first)?;
    check!(
        first.system > 0,
        "nothing of the first job's data evicted: {first:?}"
    );
    crate::svm::verify(o.hot.bytes(), 1)?;
    crate::svm::verify(o.first.bytes(), 2)?;
    crate::svm::verify(o.second.bytes(), 3)
}

/// `msvm-tests oversub-off`, after loading msvm with `evict=0`: the same
/// set-up, and today's behaviour without a policy: the device stays as it
/// is, the second job's pages that do not fit count as `no_vram` and are
/// used in system RAM, and every byte survives.
pub fn oversubscription_off() -> Result<(), String> {
    let t = trio()?;
    let o = oversub(&t.c)?;
    let (b, a) = (&o.before, &o.after);
    check!(
        a.evict_blocks == b.evict_blocks && a.evict_demoted == b.evict_demoted,
        "evicted with the policy off: {} -> {} blocks",
        b.evict_blocks,
        a.evict_blocks
    );
    check!(a.no_vram > b.no_vram, "no page without room: {}", a.no_vram);
    check!(
        a.engine_sys_read > b.engine_sys_read,
        "the second job read nothing from system RAM"
    );
    let first = res(&t.c, &o.first)?;
    check!(
        first.devices[t.ic] == o.first.len() as u64,
        "first job's data moved: {first:?}"
    );
    crate::svm::verify(o.hot.bytes(), 1)?;
    crate::svm::verify(o.first.bytes(), 2)?;
    crate::svm::verify(o.second.bytes(), 3)
}

/// A working set `A` (5/8 of the isolated device's memory) read by
/// jobs of 32 MiB each, twice (its blocks become active), then another one,
/// `B`, as large, read the same way five times. `B`'s first jobs fill the
/// room `A` left; its later ones find only `A`'s blocks (active) and `B`'s
/// own earlier ones (inactive: placed on access), and evict those. They
/// come back in `B`'s next round within the device's size of their
/// eviction: refaults, placed active (STATS `evict_refaults`), so that `B`
/// pushes `A`, which nobody uses any more, out. In its fifth round at least
/// 3/4 of `B` is read from the device's memory without moving it. Without
/// refault detection none was: `B` cycled through the room `A` left,
/// evicting itself, and `A` stayed. Every byte of both survives.
fn new_working_set_displaces_the_old() -> Outcome {
    const MIB: usize = 1 << 20;
    const JOB: usize = 32 * MIB;
    let t = trio()?;
    let d = &t.c;
    let s0 = d.stats().map_err(e)?;
    let free = (s0.vram_size as usize).saturating_sub(s0.resident as usize * PAGE);
    check!(free >= 128 * MIB, "only {free} bytes of the device free");
    // Of the whole device: what other tests left there goes first.
    let len = (s0.vram_size as usize * 5 / 8) & !(JOB - 1);
    let mut a = Map::new(len)?;
    fill(a.bytes_mut(), 11);
    let mut b = Map::new(len)?;
    fill(b.bytes_mut(), 12);
    let (want_a, want_b) = (
        (0..len / JOB)
            .map(|k| msvm_rt::checksum(&a.bytes()[k * JOB..(k + 1) * JOB]))
            .collect::<Vec<_>>(),
        (0..len / JOB)
            .map(|k| msvm_rt::checksum(&b.bytes()[k * JOB..(k + 1) * JOB]))
            .collect::<Vec<_>>(),
    );
    // One round over `m`: its jobs in order; the bytes read from the
    // device's memory without moving them there first.
    let round = |m: &Map, want: &[u64]| -> Result<u64, String> {
        let s = d.stats().map_err(e)?;
        for (k, w) in want.iter().enumerate() {
            let r = d
                .exec(Exec::Checksum, m.addr() + k * JOB, JOB, false)
                .map_err(e)?;
            check!(
                r.result == *w,
                "job {k}: checksum {:#x}, want {w:#x}",
                r.result
            );
        }
        let s1 = d.stats().map_err(e)?;
        let moved_in = (s1.to_device - s.to_device) * PAGE as u64;
        Ok((s1.engine_vram_read - s.engine_vram_read).saturating_sub(moved_in))
    };
    for _ in 0..2 {
        round(&a, &want_a)?;
    }
    let s1 = d.stats().map_err(e)?;
    let mut hits = Vec::new();
    for _ in 0..5 {
        hits.push(round(&b, &want_b)? * 100 / len as u64);
    }
    let s2 = d.stats().map_err(e)?;
    check!(
        s2.evict_refaults > s1.evict_refaults,
        "no refault: {} blocks evicted, B's share read from VRAM by round {hits:?} %",
        s2.evict_blocks - s1.evict_blocks
    );
    check!(
        hits[4] >= 75,
        "B's fifth round read {} % of it from VRAM (rounds: {hits:?} %; {} refaults, {} \
         blocks evicted)",
        hits[4],
        s2.evict_refaults - s1.evict_refaults,
        s2.evict_blocks - s1.evict_blocks
    );
    crate::svm::verify(a.bytes(), 11)?;
    crate::svm::verify(b.bytes(), 12)
}

/// An explicit MIGRATE into a device full of data an earlier MIGRATE placed
/// (active blocks only): it asked for the room, so it gets it, the blocks
/// used longest ago going to system RAM, and every byte survives.
fn oversubscription_explicit() -> Outcome {
    let t = trio()?;
    let d = &t.c;
    let s0 = d.stats().map_err(e)?;
    let free = (s0.vram_size as usize).saturating_sub(s0.resident as usize * PAGE);
    const MIB: usize = 1 << 20;
    check!(free >= 64 * MIB, "only {free} bytes of the device free");
    let old_len = (free - 8 * MIB) & !(2 * MIB - 1);
    let mut old = Map::small(old_len)?;
    fill(old.bytes_mut(), 4);
    let mut new = Map::small(32 * MIB)?;
    fill(new.bytes_mut(), 5);
    let o = d
        .migrate(old.addr(), old_len, Location::Device)
        .map_err(e)?;
    check!(o.moved == (old_len / PAGE) as u64, "first MIGRATE: {o:?}");
    let s1 = d.stats().map_err(e)?;
    let o = d
        .migrate(new.addr(), new.len(), Location::Device)
        .map_err(e)?;
    check!(
        o.moved == (new.len() / PAGE) as u64 && o.no_vram == 0,
        "second MIGRATE: {o:?}"
    );
    let s2 = d.stats().map_err(e)?;
    check!(
        s2.evict_blocks > s1.evict_blocks,
        "no block evicted: {} -> {}",
        s1.evict_blocks,
        s2.evict_blocks
    );
    let r = res(d, &old)?;
    check!(r.system >= 16 * MIB as u64, "too little evicted: {r:?}");
    crate::svm::verify(old.bytes(), 4)?;
    crate::svm::verify(new.bytes(), 5)
}

/// `msvm-tests oversub-stress SECS`: three processes, each with 128 MiB (half
/// in THPs, half in 4 KiB pages) on the isolated device of 256 MiB. Each
/// first places its whole set on the device (together 384 MiB: the device
/// fills and blocks are evicted however slow the machine), then races the
/// others for `SECS` seconds: MIGRATEs of random pieces to the device,
/// CHECKSUM jobs on random pieces (placed on access), CPU writes of random
/// pages and CPU reads of random pieces, all checked against what each
/// process knows it wrote. Blocks are evicted under every other operation,
/// each process's and the others'. A fourth
/// process churns: its children each place 8 MiB of 4 KiB pages on the full
/// device and exit at once (every other one is killed instead), so that
/// blocks of processes going away are evicted while they go (and theirs
/// evict the others').
pub fn oversub_stress(secs: u64) -> Result<(), String> {
    use nix::sys::wait::{waitpid, WaitStatus};
    use nix::unistd::{fork, ForkResult};
    const PROCS: u64 = 3;
    let before = trio()?.c.stats().map_err(e)?;
    let race = std::time::Duration::from_secs(secs);
    let mut children = Vec::new();
    for p in 0..PROCS {
        // SAFETY: the child runs its loop and exits without returning.
        match unsafe { fork() }.map_err(|x| x.to_string())? {
            ForkResult::Child => {
                let code = match oversub_worker(p, race) {
                    Ok(ops) => {
                        println!("# oversub-stress {p}: {ops} operations, every byte right");
                        0
                    }
                    Err(x) => {
                        println!("# oversub-stress {p}: {x}");
                        1
                    }
                };
                // SAFETY: leaving the child.
                unsafe { nix::libc::_exit(code) };
            }
            ForkResult::Parent { child } => children.push(child),
        }
    }
    // SAFETY: the child runs its loop and exits without returning.
    match unsafe { fork() }.map_err(|x| x.to_string())? {
        ForkResult::Child => {
            let code = match churn(std::time::Instant::now() + race) {
                Ok(n) => {
                    println!("# oversub-stress churn: {n} processes placed 8 MiB and went away");
                    0
                }
                Err(x) => {
                    println!("# oversub-stress churn: {x}");
                    1
                }
            };
            // SAFETY: leaving the child.
            unsafe { nix::libc::_exit(code) };
        }
        ForkResult::Parent { child } => children.push(child),
    }
    let mut failed = 0;
    for c in children {
        if !matches!(waitpid(c, None), Ok(WaitStatus::Exited(_, 0))) {
            failed += 1;
        }
    }
    let after = trio()?.c.stats().map_err(e)?;
    println!(
        "# oversub-stress: {} blocks evicted ({} MiB), {} demoted",
        after.evict_blocks - before.evict_blocks,
        ((after.evict_pages - before.evict_pages) * PAGE as u64) >> 20,
        after.evict_demoted - before.evict_demoted
    );
    check!(failed == 0, "{failed} of {} processes failed", PROCS + 1);
    check!(
        after.evict_blocks > before.evict_blocks,
        "nothing was evicted"
    );
    Ok(())
}

/// The churn of [`oversub_stress`]: until `deadline`, a child at a time
/// places 8 MiB of 4 KiB pages on the full device and exits (or, every
/// other one, is killed as soon as they are there). Returns how many went.
fn churn(deadline: std::time::Instant) -> Result<u64, String> {
    use nix::sys::signal::{kill, Signal};
    use nix::sys::wait::{waitpid, WaitStatus};
    use nix::unistd::{fork, ForkResult};
    const LEN: usize = 8 << 20;
    let mut n = 0u64;
    while std::time::Instant::now() < deadline {
        let (r, w) = nix::unistd::pipe().map_err(|x| x.to_string())?;
        // SAFETY: the child places its pages and exits without returning.
        match unsafe { fork() }.map_err(|x| x.to_string())? {
            ForkResult::Child => {
                let placed = (|| {
                    let t = trio()?;
                    let mut m = Map::small(LEN)?;
                    fill(m.bytes_mut(), n);
                    if n % 2 == 1 {
                        // Killed while its pages move in.
                        let _ = nix::unistd::write(&w, b"x");
                    }
                    t.c.migrate(m.addr(), LEN, Location::Device).map_err(e)?;
                    // Gone with the process.
                    std::mem::forget(m);
                    Ok::<_, String>(())
                })();
                let _ = nix::unistd::write(&w, b"x");
                // SAFETY: leaving the child.
                unsafe { nix::libc::_exit(i32::from(placed.is_err())) };
            }
            ForkResult::Parent { child } => {
                drop(w);
                let mut b = [0u8; 1];
                let _ = nix::unistd::read(&r, &mut b);
                if n % 2 == 1 {
                    let _ = kill(child, Signal::SIGKILL);
                }
                match waitpid(child, None) {
                    Ok(WaitStatus::Exited(_, 0)) => {}
                    Ok(WaitStatus::Signaled(_, Signal::SIGKILL, _)) if n % 2 == 1 => {}
                    other => return Err(format!("churn child {n}: {other:?}")),
                }
            }
        }
        n += 1;
    }
    Ok(n)
}

/// One process of [`oversub_stress`]: places its whole set on the device,
/// then races the others for `race`; returns the operations it did.
fn oversub_worker(p: u64, race: std::time::Duration) -> Result<u64, String> {
    const MIB: usize = 1 << 20;
    let t = trio()?;
    let d = &t.c;
    let mut big = Map::new(64 * MIB)?;
    let mut small = Map::small(64 * MIB)?;
    // Page `i` of a map holds the pattern of (process, map, page, version).
    let seed = |m: u64, i: usize, v: u64| (p << 48) ^ (m << 40) ^ ((i as u64) << 8) ^ v;
    let mut versions = [vec![0u64; big.len() / PAGE], vec![0u64; small.len() / PAGE]];
    for (m, map) in [&mut big, &mut small].into_iter().enumerate() {
        for (i, page) in map.bytes_mut().chunks_mut(PAGE).enumerate() {
            fill(page, seed(m as u64, i, 0));
        }
    }
    let expect = |m: usize, first: usize, n: usize, v: &[Vec<u64>; 2]| -> Vec<u8> {
        let mut out = vec![0u8; n * PAGE];
        for (k, page) in out.chunks_mut(PAGE).enumerate() {
            fill(page, seed(m as u64, first + k, v[m][first + k]));
        }
        out
    };
    // The whole set first: the three sets are more than the device holds,
    // so the device is full (and evicting) before the race, on any machine.
    let mut placed = 0;
    for map in [&big, &small] {
        let o = d
            .migrate(map.addr(), map.len(), Location::Device)
            .map_err(e)?;
        // (A page busy for a moment under the others' eviction stays.)
        check!(
            o.total() == (map.len() / PAGE) as u64,
            "placing the set: {o:?}"
        );
        placed += o.moved + o.already;
    }
    println!(
        "# oversub-stress {p}: placed {} of 128 MiB before the race",
        (placed * PAGE as u64) >> 20
    );
    let deadline = std::time::Instant::now() + race;
    let mut r = p.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = |n: usize| {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        (r % n as u64) as usize
    };
    let mut ops = 0u64;
    while std::time::Instant::now() < deadline {
        let m = next(2);
        let map = if m == 0 { &big } else { &small };
        let pages = map.len() / PAGE;
        let n = 1 + next(4 * 512).min(pages - 1);
        let first = next(pages - n + 1);
        let (addr, len) = (map.addr() + first * PAGE, n * PAGE);
        match next(10) {
            0..=3 => {
                d.migrate(addr, len, Location::Device).map_err(e)?;
            }
            4..=7 => {
                let want = msvm_rt::checksum(&expect(m, first, n, &versions));
                let got = d.exec(Exec::Checksum, addr, len, false).map_err(e)?;
                check!(
                    got.result == want,
                    "checksum of {n} pages at {first} of map {m}"
                );
            }
            8 => {
                let i = first;
                versions[m][i] += 1;
                let v = versions[m][i];
                let bytes = if m == 0 {
                    big.bytes_mut()
                } else {
                    small.bytes_mut()
                };
                fill(&mut bytes[i * PAGE..(i + 1) * PAGE], seed(m as u64, i, v));
            }
            _ => {
                let want = expect(m, first, n, &versions);
                check!(
                    map.bytes()[first * PAGE..(first + n) * PAGE] == want[..],
                    "bytes of {n} pages at {first} of map {m}"
                );
            }
        }
        ops += 1;
    }
    for (m, map) in [&big, &small].into_iter().enumerate() {
        let want = expect(m, 0, map.len() / PAGE, &versions);
        check!(map.bytes() == &want[..], "map {m} at the end");
    }
    Ok(ops)
}

/// One round of a ping-pong between the CPU and device `d` over `m`: the
/// CPU stores `r` in every 64-bit word, `d` adds 1 to each (a job,
/// migrate-on-access), and the CPU checks every word. Returns the pages the
/// job migrated.
fn pingpong_round(d: &Device, m: &mut Map, r: u64) -> Result<u64, String> {
    for w in m.bytes_mut().chunks_mut(8) {
        w.copy_from_slice(&r.to_le_bytes());
    }
    let done = d
        .exec(Exec::AtomicAdd(1), m.addr(), m.len(), false)
        .map_err(e)?;
    let want = (r + 1).to_le_bytes();
    if let Some(i) = m.bytes().chunks(8).position(|w| w != want) {
        return Err(format!("round {r}: word {i} is not {}", r + 1));
    }
    Ok(done.migrated)
}

const PINGPONG_LEN: usize = 4 << 20;

/// With thrashing detection on (the default), a buffer the CPU and a
/// device take turns on moves four times (in, home, in, home: the third
/// thrashing event pins its blocks at home), then its blocks stay in system
/// RAM, where the device's jobs work on them in place (DMA) while the CPU
/// keeps writing them without faults; RESIDENCY reports them pinned; every
/// word is right each round. (`msvm-tests thrash-expiry` sees the pins
/// expire.)
fn pingpong_pinned() -> Outcome {
    let t = trio()?;
    let d = &t.a;
    let pages = (PINGPONG_LEN / PAGE) as u64;
    let mut m = Map::new(PINGPONG_LEN)?;
    let s0 = d.stats().map_err(e)?;
    let mut migrated = Vec::new();
    for r in 0..6 {
        migrated.push(pingpong_round(d, &mut m, r * 10)?);
    }
    let s1 = d.stats().map_err(e)?;
    check!(migrated[0] == pages, "first job migrated {migrated:?}");
    check!(
        migrated[3..].iter().all(|&n| n == 0),
        "jobs still migrate: {migrated:?}"
    );
    let blocks = (PINGPONG_LEN >> 21) as u64;
    check!(
        s1.thrash_pinned - s0.thrash_pinned >= blocks
            && s1.thrash_detected >= s1.thrash_pinned
            && s1.thrash_avoided - s0.thrash_avoided >= 3 * blocks,
        "thrash counters: detected {} pinned {} avoided {} (before: {} {} {})",
        s1.thrash_detected,
        s1.thrash_pinned,
        s1.thrash_avoided,
        s0.thrash_detected,
        s0.thrash_pinned,
        s0.thrash_avoided
    );
    check!(
        s1.engine_sys_written > s0.engine_sys_written,
        "the jobs wrote nothing to system RAM"
    );
    let r = res(d, &m)?;
    check!(
        r.pinned == PINGPONG_LEN as u64 && r.system == PINGPONG_LEN as u64,
        "pinned buffer: {r:?}"
    );
    Ok(())
}

/// `msvm-tests thrash-off`, after loading msvm with `thrash=0`: the same
/// ping-pong moves the whole buffer each round, as before the policy, and
/// the thrashing counters stay at zero.
pub fn pingpong_off() -> Result<(), String> {
    let t = trio()?;
    let d = &t.a;
    let pages = (PINGPONG_LEN / PAGE) as u64;
    let mut m = Map::new(PINGPONG_LEN)?;
    for r in 0..6 {
        let n = pingpong_round(d, &mut m, r * 10)?;
        check!(n == pages, "round {r}: job migrated {n} of {pages}");
    }
    let s = d.stats().map_err(e)?;
    check!(
        s.thrash_detected == 0 && s.thrash_pinned == 0 && s.thrash_avoided == 0,
        "thrash counters with the policy off: {} {} {}",
        s.thrash_detected,
        s.thrash_pinned,
        s.thrash_avoided
    );
    let r = res(d, &m)?;
    check!(r.pinned == 0, "pinned with the policy off: {r:?}");
    Ok(())
}

/// The per-range off switch (`MSVM_ATTR_THRASH_OFF`): the same ping-pong on
/// a range whose attributes turn thrashing detection off for gpu0's jobs
/// moves the whole buffer every round, as before the policy; RESIDENCY
/// reports the attribute and no pin; no block is pinned meanwhile.
fn pingpong_range_off() -> Outcome {
    let t = trio()?;
    let d = &t.a;
    let pages = (PINGPONG_LEN / PAGE) as u64;
    let mut m = Map::new(PINGPONG_LEN)?;
    let off = Attributes {
        thrash: false,
        counters: true,
        read_mostly: false,
        ..DEFAULT
    };
    d.set_attr(m.addr(), m.len(), off).map_err(e)?;
    let s0 = d.stats().map_err(e)?;
    for r in 0..6 {
        let n = pingpong_round(d, &mut m, r * 10)?;
        check!(n == pages, "round {r}: job migrated {n} of {pages}");
    }
    let s1 = d.stats().map_err(e)?;
    check!(
        s1.thrash_pinned == s0.thrash_pinned && s1.thrash_avoided == s0.thrash_avoided,
        "pins with the range's detection off: {} -> {}, avoided {} -> {}",
        s0.thrash_pinned,
        s1.thrash_pinned,
        s0.thrash_avoided,
        s1.thrash_avoided
    );
    let r = res(d, &m)?;
    check!(
        r.pinned == 0 && r.attributes == off && !r.mixed,
        "range with detection off: {r:?}"
    );
    Ok(())
}

/// `msvm-tests thrash-expiry PIN_MS`, after loading msvm with
/// `thrash_pin_ms=PIN_MS`: the ping-pong pins the buffer; after `PIN_MS`
/// nothing is pinned any more, the next job migrates the whole buffer
/// again, and the expired pins are counted.
pub fn pingpong_expiry(pin_ms: u64) -> Result<(), String> {
    let t = trio()?;
    let d = &t.a;
    let pages = (PINGPONG_LEN / PAGE) as u64;
    let blocks = (PINGPONG_LEN >> 21) as u64;
    let mut m = Map::new(PINGPONG_LEN)?;
    let mut migrated = Vec::new();
    for r in 0..4 {
        migrated.push(pingpong_round(d, &mut m, r * 10)?);
    }
    let r = res(d, &m)?;
    check!(
        r.pinned == PINGPONG_LEN as u64,
        "not pinned: {r:?}, jobs migrated {migrated:?}"
    );
    let s1 = d.stats().map_err(e)?;
    std::thread::sleep(std::time::Duration::from_millis(pin_ms + 500));
    let r = res(d, &m)?;
    check!(r.pinned == 0, "still pinned after {pin_ms} ms: {r:?}");
    let n = pingpong_round(d, &mut m, 100)?;
    check!(n == pages, "job after the pins migrated {n} of {pages}");
    let s2 = d.stats().map_err(e)?;
    check!(
        s2.thrash_unpinned - s1.thrash_unpinned >= blocks,
        "expired pins: {} -> {}",
        s1.thrash_unpinned,
        s2.thrash_unpinned
    );
    Ok(())
}

/// The change of device `d`'s access counters between two STATS: pages
/// counted, blocks due, pages moved.
fn access_delta(d: &Device, s0: &Stats) -> Result<(u64, u64, u64), String> {
    let s1 = d.stats().map_err(e)?;
    Ok((
        s1.access_counted - s0.access_counted,
        s1.access_due - s0.access_due,
        s1.access_moved - s0.access_moved,
    ))
}

/// With the access counters on (the default, threshold 256 pages), jobs
/// that run in place keep using a 4 MiB buffer on a peer (over P2P) or in
/// system RAM (by DMA): the first job runs in place and counts each page
/// once; the next moves the two blocks to the device that runs it (their
/// counts are due), and the one after reads its own VRAM and counts
/// nothing. A block below the threshold stays. Every checksum is the same.
fn access_counters_move() -> Outcome {
    let t = trio()?;
    let (a, b) = (&t.a, &t.b);
    const LEN: usize = 4 << 20;
    let pages = (LEN / PAGE) as u64;
    let mut m = Map::new(LEN)?;
    fill(m.bytes_mut(), 41);
    let want = a
        .exec(Exec::Checksum, m.addr(), LEN, true)
        .map_err(e)?
        .result;
    // From a peer: the buffer on gpu0, gpu1's jobs in place.
    let out = a.prefetch(m.addr(), LEN, Place::Here).map_err(e)?;
    check!(out.moved + out.already == pages, "to gpu0: {out:?}");
    let s0 = b.stats().map_err(e)?;
    let j1 = b.exec(Exec::Checksum, m.addr(), LEN, true).map_err(e)?;
    let d1 = access_delta(b, &s0)?;
    let p2p = b.stats().map_err(e)?.engine_p2p_read - s0.engine_p2p_read;
    check!(
        j1.migrated == 0 && d1 == (pages, 0, 0) && p2p == LEN as u64,
        "first job in place: {j1:?}, counters {d1:?}, p2p read {p2p}"
    );
    let j2 = b.exec(Exec::Checksum, m.addr(), LEN, true).map_err(e)?;
    let d2 = access_delta(b, &s0)?;
    check!(
        j2.migrated == pages && d2 == (pages, 2, pages),
        "second job: {j2:?}, counters {d2:?}"
    );
    let r = res(b, &m)?;
    check!(r.devices[t.ib] == LEN as u64, "after the move: {r:?}");
    let s2 = b.stats().map_err(e)?;
    let j3 = b.exec(Exec::Checksum, m.addr(), LEN, true).map_err(e)?;
    let d3 = access_delta(b, &s2)?;
    let own = b.stats().map_err(e)?.engine_vram_read - s2.engine_vram_read;
    check!(
        j3.migrated == 0 && d3 == (0, 0, 0) && own == LEN as u64,
        "third job: {j3:?}, counters {d3:?}, own VRAM read {own}"
    );
    for (k, j) in [j1, j2, j3].iter().enumerate() {
        check!(
            j.result == want,
            "checksum of job {k}: {:#x} != {want:#x}",
            j.result
        );
    }
    // From system RAM, 128 pages of a fresh block at a time: due after two
    // jobs, moved by the third (only the pages it uses).
    let mut m2 = Map::new(2 << 20)?;
    fill(m2.bytes_mut(), 42);
    let part = 128 * PAGE;
    let s0 = a.stats().map_err(e)?;
    let mut moved = Vec::new();
    for _ in 0..4 {
        moved.push(
            a.exec(Exec::Checksum, m2.addr(), part, true)
                .map_err(e)?
                .migrated,
        );
    }
    let d = access_delta(a, &s0)?;
    check!(
        moved == [0, 0, 128, 0] && d == (256, 1, 128),
        "from RAM: moved {moved:?}, counters {d:?}"
    );
    let r = res(a, &m2)?;
    check!(
        r.devices[t.ia] == part as u64 && r.system == (2 << 20) - part as u64,
        "from RAM: {r:?}"
    );
    Ok(())
}

/// Jobs that run in place over ranges whose attributes say where the pages
/// go never move them, however often they use them: access policy "in
/// place", a preferred location elsewhere (system RAM), and the counters
/// off for the range (`MSVM_ATTR_ACCESS_OFF`, which RESIDENCY reports).
fn access_counters_respect_attributes() -> Outcome {
    let t = trio()?;
    let d = &t.a;
    const LEN: usize = 2 << 20;
    let cases = [
        Attributes {
            access: Access::InPlace,
            ..DEFAULT
        },
        Attributes {
            preferred: Place::System,
            ..DEFAULT
        },
        Attributes {
            counters: false,
            read_mostly: false,
            ..DEFAULT
        },
    ];
    for attrs in cases {
        let mut m = Map::new(LEN)?;
        fill(m.bytes_mut(), 43);
        d.set_attr(m.addr(), LEN, attrs).map_err(e)?;
        let s0 = d.stats().map_err(e)?;
        for k in 0..4 {
            let j = d.exec(Exec::Checksum, m.addr(), LEN, true).map_err(e)?;
            check!(j.migrated == 0, "{attrs:?}: job {k} moved {}", j.migrated);
        }
        let (counted, due, moved) = access_delta(d, &s0)?;
        check!(
            counted == 4 * (LEN / PAGE) as u64 && due == 0 && moved == 0,
            "{attrs:?}: counters {counted} {due} {moved}"
        );
        let r = res(d, &m)?;
        check!(
            r.system == LEN as u64 && r.attributes == attrs && !r.mixed,
            "{attrs:?}: {r:?}"
        );
    }
    Ok(())
}

/// `msvm-tests access-off`, after loading msvm with `access_counters=0`:
/// jobs that run in place over a peer's pages and system RAM never move
/// them, and the access counters stay at zero.
pub fn access_off() -> Result<(), String> {
    let t = trio()?;
    const LEN: usize = 4 << 20;
    let mut m = Map::new(LEN)?;
    fill(m.bytes_mut(), 44);
    let mut m2 = Map::new(LEN)?;
    fill(m2.bytes_mut(), 45);
    t.a.prefetch(m.addr(), LEN, Place::Here).map_err(e)?;
    for k in 0..4 {
        for (d, m) in [(&t.b, &m), (&t.b, &m2), (&t.a, &m2)] {
            let j = d.exec(Exec::Checksum, m.addr(), LEN, true).map_err(e)?;
            check!(j.migrated == 0, "job {k} moved {}", j.migrated);
        }
    }
    for d in [&t.a, &t.b] {
        let s = d.stats().map_err(e)?;
        check!(
            s.access_counted == 0 && s.access_due == 0 && s.access_moved == 0,
            "access counters with the policy off: {} {} {}",
            s.access_counted,
            s.access_due,
            s.access_moved
        );
    }
    let r = res(&t.a, &m)?;
    check!(r.devices[t.ia] == LEN as u64, "peer's buffer: {r:?}");
    let r = res(&t.a, &m2)?;
    check!(r.system == LEN as u64, "RAM buffer: {r:?}");
    Ok(())
}
