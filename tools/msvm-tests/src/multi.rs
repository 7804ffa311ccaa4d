//! Several devices: execution out of a peer's memory over P2P, device to
//! device migration, and the fallback for a peer out of P2P reach.

use msvm_rt::{Device, Exec, Location, P2pPath, Stats};

use crate::check;
use crate::harness::{Outcome, Test};
use crate::svm::{fill, verify, Map, PAGE};
use crate::sysfs;

pub fn tests() -> Vec<Test> {
    vec![
        Test {
            name: "p2p_exec_in_place_on_peer_memory",
            run: exec_on_peer_memory,
        },
        Test {
            name: "p2p_device_to_device_migration",
            run: device_to_device_migration,
        },
        Test {
            name: "unreachable_peer_memory_goes_through_ram_for_exec",
            run: unreachable_peer,
        },
        Test {
            name: "migrate_from_unreachable_peer_goes_through_ram",
            run: migrate_from_unreachable,
        },
        Test {
            name: "debugfs_topology_matches_query",
            run: debugfs_topology,
        },
    ]
}

/// Devices by role: `a` and `b` reach each other over P2P, `c` reaches
/// neither. Each is opened with a VM of this process.
struct Roles {
    a: Device,
    b: Device,
    c: Device,
}

fn roles() -> Result<Roles, String> {
    let mut p2p = Vec::new();
    let mut alone = Vec::new();
    for g in sysfs::msvm_gpus()? {
        let d = Device::open(&g.node).map_err(|e| e.to_string())?;
        let i = d.query().map_err(|e| e.to_string())?;
        d.vm_create().map_err(|e| e.to_string())?;
        if i.peers.iter().any(|p| p.p2p) {
            p2p.push((i.index, d));
        } else {
            alone.push(d);
        }
    }
    p2p.sort_by_key(|(i, _)| *i);
    check!(
        p2p.len() >= 2 && !alone.is_empty(),
        "need a P2P pair and an isolated GPU"
    );
    let mut p2p = p2p.into_iter().map(|(_, d)| d);
    Ok(Roles {
        a: p2p.next().unwrap(),
        b: p2p.next().unwrap(),
        c: alone.remove(0),
    })
}

/// The P2P pair and the isolated device, each with a VM of this process.
pub fn devices() -> Result<(Device, Device, Device), String> {
    let r = roles()?;
    Ok((r.a, r.b, r.c))
}

fn st(d: &Device) -> Result<Stats, String> {
    d.stats().map_err(|e| e.to_string())
}

fn park(d: &Device, m: &Map) -> Outcome {
    let out = d
        .migrate(m.addr(), m.len(), Location::Device)
        .map_err(|e| e.to_string())?;
    check!(out.moved == (m.len() / PAGE) as u64, "park: {out:?}");
    Ok(())
}

/// Data on B; A runs jobs on it in place: over P2P, with no migration and
/// no system RAM traffic, and the results are right.
fn exec_on_peer_memory() -> Outcome {
    let r = roles()?;
    let len = 64 * PAGE;
    let mut m = Map::new(len)?;
    fill(m.bytes_mut(), 201);
    let want = m.bytes().to_vec();
    park(&r.b, &m)?;
    let (a0, b0) = (st(&r.a)?, st(&r.b)?);
    let sum =
        r.a.exec(Exec::Checksum, m.addr(), len, true)
            .map_err(|e| e.to_string())?;
    check!(
        sum.result == msvm_rt::checksum(&want),
        "checksum over P2P differs"
    );
    check!(sum.migrated == 0, "migrated {}", sum.migrated);
    let (a1, b1) = (st(&r.a)?, st(&r.b)?);
    check!(
        a1.engine_p2p_read - a0.engine_p2p_read == len as u64,
        "A p2p read {}",
        a1.engine_p2p_read - a0.engine_p2p_read
    );
    // Counted against the peer it came from.
    let bi = r.b.query().map_err(|e| e.to_string())?.index as usize;
    check!(
        a1.peer_read[bi] - a0.peer_read[bi] == len as u64
            && a1.peer_read.iter().sum::<u64>() - a0.peer_read.iter().sum::<u64>() == len as u64,
        "A's per-peer counters: {:?}",
        a1.peer_read
    );
    check!(
        a1.engine_sys_read == a0.engine_sys_read && a1.engine_vram_read == a0.engine_vram_read,
        "A read other memory"
    );
    check!(
        b1.resident == b0.resident && b1.to_system == b0.to_system,
        "B's pages moved"
    );
    check!(a1.to_device == a0.to_device, "A migrated");
    // Writes and atomics over P2P land in B's memory.
    r.a.exec(Exec::Fill(5), m.addr(), len, true)
        .map_err(|e| e.to_string())?;
    r.a.exec(Exec::AtomicAdd(1), m.addr(), len, true)
        .map_err(|e| e.to_string())?;
    r.b.exec(Exec::AtomicAdd(2), m.addr(), len, true)
        .map_err(|e| e.to_string())?;
    let (a2, b2) = (st(&r.a)?, st(&r.b)?);
    check!(
        a2.engine_p2p_written - a1.engine_p2p_written == 2 * len as u64,
        "A p2p written {}",
        a2.engine_p2p_written - a1.engine_p2p_written
    );
    check!(
        b2.engine_vram_written - b1.engine_vram_written == len as u64,
        "B local writes"
    );
    check!(b2.resident == b0.resident, "B's pages moved");
    // The CPU sees it all (its reads bring the pages back from B).
    // SAFETY: reading our own mapping as words.
    let words = unsafe { std::slice::from_raw_parts(m.addr() as *const u64, len / 8) };
    check!(
        words.iter().all(|&w| w == 8),
        "CPU sees {:?}",
        words.iter().find(|&&w| w != 8)
    );
    Ok(())
}

/// Data on B; MIGRATE to A moves it straight from B's memory to A's.
fn device_to_device_migration() -> Outcome {
    let r = roles()?;
    let len = 128 * PAGE;
    let mut m = Map::new(len)?;
    fill(m.bytes_mut(), 202);
    park(&r.b, &m)?;
    let (a0, b0) = (st(&r.a)?, st(&r.b)?);
    let out =
        r.a.migrate(m.addr(), len, Location::Device)
            .map_err(|e| e.to_string())?;
    check!(out.moved == 128, "{out:?}");
    let (a1, b1) = (st(&r.a)?, st(&r.b)?);
    check!(
        a1.from_peer - a0.from_peer == 128,
        "from_peer +{}",
        a1.from_peer - a0.from_peer
    );
    check!(
        b1.to_system == b0.to_system && b1.cpu_faults == b0.cpu_faults,
        "went through RAM"
    );
    check!(
        b1.resident + 128 == b0.resident,
        "B still holds {}",
        b0.resident - b1.resident
    );
    check!(
        a1.resident == a0.resident + 128,
        "A holds {}",
        a1.resident - a0.resident
    );
    verify(m.bytes(), 202)
}

/// Data on C, which A cannot reach: A's job still sees the right bytes, the
/// pages having come back to system RAM first (never silent P2P).
fn unreachable_peer() -> Outcome {
    let r = roles()?;
    let len = 32 * PAGE;
    let mut m = Map::new(len)?;
    fill(m.bytes_mut(), 203);
    let want = m.bytes().to_vec();
    park(&r.c, &m)?;
    let (a0, c0) = (st(&r.a)?, st(&r.c)?);
    let sum =
        r.a.exec(Exec::Checksum, m.addr(), len, true)
            .map_err(|e| e.to_string())?;
    check!(sum.result == msvm_rt::checksum(&want), "checksum differs");
    let (a1, c1) = (st(&r.a)?, st(&r.c)?);
    check!(
        a1.engine_p2p_read == a0.engine_p2p_read,
        "P2P read from an unreachable device"
    );
    check!(
        a1.engine_sys_read - a0.engine_sys_read == len as u64,
        "A sys read {}",
        a1.engine_sys_read - a0.engine_sys_read
    );
    check!(
        c1.to_system - c0.to_system == 32,
        "C sent {} pages to system RAM",
        c1.to_system - c0.to_system
    );
    verify(m.bytes(), 203)
}

/// Data on C, out of A's reach; MIGRATE to A moves it anyway, through RAM:
/// C sends it to system RAM, A takes it from there.
fn migrate_from_unreachable() -> Outcome {
    let r = roles()?;
    let len = 64 * PAGE;
    let mut m = Map::new(len)?;
    fill(m.bytes_mut(), 204);
    park(&r.c, &m)?;
    let (a0, c0) = (st(&r.a)?, st(&r.c)?);
    let out =
        r.a.migrate(m.addr(), len, Location::Device)
            .map_err(|e| e.to_string())?;
    check!(out.moved == 64 && out.total() == 64, "{out:?}");
    let (a1, c1) = (st(&r.a)?, st(&r.c)?);
    check!(
        c1.to_system - c0.to_system == 64,
        "C sent {} pages to system RAM",
        c1.to_system - c0.to_system
    );
    check!(a1.from_peer == a0.from_peer, "counted as a P2P copy");
    check!(
        a1.resident - a0.resident == 64,
        "A holds {}",
        a1.resident - a0.resident
    );
    verify(m.bytes(), 204)
}

/// `/sys/kernel/debug/msvm/topology` says what QUERY says: each device's
/// PCI address and group, each distance, and the members of each group.
fn debugfs_topology() -> Outcome {
    let text = std::fs::read_to_string("/sys/kernel/debug/msvm/topology")
        .map_err(|e| format!("read debugfs: {e}"))?;
    let mut infos = Vec::new();
    for g in sysfs::msvm_gpus()? {
        let d = Device::open(&g.node).map_err(|e| e.to_string())?;
        infos.push(d.query().map_err(|e| e.to_string())?);
    }
    infos.sort_by_key(|i| i.index);
    check!(
        text.lines().next() == Some(&format!("devices: {}", infos.len())[..]),
        "first line of:\n{text}"
    );
    for i in &infos {
        let line = format!(
            "gpu{}: {} {} MiB group {}",
            i.index,
            i.pci,
            i.vram_size >> 20,
            i.owner_group
        );
        check!(text.lines().any(|l| l == line), "no '{line}' in:\n{text}");
        // The matrix row: one cell per device, in index order.
        let row = text
            .lines()
            .find(|l| l.starts_with(&format!("gpu{} ", i.index)))
            .ok_or(format!("no matrix row for gpu{}", i.index))?;
        let cells: Vec<&str> = row.split_whitespace().skip(1).collect();
        for (k, other) in infos.iter().enumerate() {
            let want = if other.index == i.index {
                ".".to_string()
            } else {
                let p = i.peers.iter().find(|p| p.index == other.index);
                match p.and_then(|p| p.distance) {
                    Some(d) => d.to_string(),
                    None => "-".to_string(),
                }
            };
            check!(
                cells.get(k) == Some(&&want[..]),
                "gpu{} -> gpu{}: {:?}, want {want}",
                i.index,
                other.index,
                cells.get(k)
            );
        }
        // Each pair's path line says what QUERY's flags say.
        for p in &i.peers {
            let head = format!("gpu{} -> gpu{}: ", i.index, p.index);
            let line = text
                .lines()
                .find(|l| l.starts_with(&head))
                .ok_or(format!("no '{head}' line in:\n{text}"))?;
            let want = match p.path {
                P2pPath::BusAddr => "P2P inside the switch",
                P2pPath::HostBridge => "P2P through the host bridge",
                P2pPath::None => "no P2P path",
            };
            check!(
                line[head.len()..].starts_with(want),
                "'{line}', want {want}"
            );
        }
        let members: Vec<String> = infos
            .iter()
            .filter(|o| o.owner_group == i.owner_group)
            .map(|o| format!("gpu{}", o.index))
            .collect();
        let gline = format!("group {}: {}", i.owner_group, members.join(" "));
        check!(text.lines().any(|l| l == gline), "no '{gline}' in:\n{text}");
    }
    Ok(())
}
