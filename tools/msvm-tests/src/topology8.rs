//! The 8-GPU server (`scripts/vm.py --gpus 8gpu`): two NUMA nodes, each
//! with its own PCIe host bridge (a pxb-pcie), three GPUs behind a switch
//! and one on its own root port. `msvm-tests topology8`.
//!
//! `pci_p2pdma` allows P2P below a common switch and refuses it through
//! any host bridge it does not know (QEMU's are on no whitelist; between
//! the sockets of most real servers too): QUERY's matrix must say so pair
//! by pair (checked against sysfs: P2P exactly where two GPUs share a
//! switch), the owner groups follow (a group of three and a lone GPU on
//! each bridge), jobs read a peer of their group over P2P and fault data
//! home from a device across the bridges, and a GPU of node 1 unplugged and
//! plugged back changes the matrix and nothing else.

use std::collections::BTreeMap;

use msvm_rt::{Device, Exec, Location};

use crate::check;
use crate::harness::{Outcome, Test};
use crate::svm::{fill, Map, PAGE};
use crate::sysfs::{self, SysGpu};

/// The NUMA tests (`crate::numa`) run before the unplug, on all 8 GPUs.
pub fn tests() -> Vec<Test> {
    let mut t = vec![
        Test {
            name: "eight_gpus_two_host_bridges_p2p_matrix_and_groups",
            run: matrix_and_groups,
        },
        Test {
            name: "eight_gpus_jobs_read_peers_of_their_group_over_p2p_only",
            run: jobs_across_bridges,
        },
    ];
    t.extend(crate::numa::tests());
    t.push(Test {
        name: "eight_gpus_a_gpu_of_node1_unplugged_and_plugged_back",
        run: unplug_node1,
    });
    t
}

/// A bound GPU: what sysfs says, its open device and what QUERY says.
struct Gpu {
    sys: SysGpu,
    dev: Device,
    info: msvm_rt::DeviceInfo,
}

/// The host bridge a GPU sits below: the domain and bus of its root port.
fn bridge(g: &SysGpu) -> String {
    g.chain
        .first()
        .map_or(String::new(), |c| c[..7].to_string())
}

fn gpus() -> Result<Vec<Gpu>, String> {
    let mut out = Vec::new();
    for sys in sysfs::msvm_gpus()? {
        let dev = Device::open(&sys.node).map_err(|e| e.to_string())?;
        let info = dev.query().map_err(|e| e.to_string())?;
        dev.vm_create().map_err(|e| e.to_string())?;
        out.push(Gpu { sys, dev, info });
    }
    Ok(out)
}

/// Checks QUERY's P2P matrix against sysfs, pair by pair, and returns the
/// owner groups (by group id: the members' msvm indices).
fn check_matrix(g: &[Gpu]) -> Result<BTreeMap<u32, Vec<u32>>, String> {
    for a in g {
        for b in g.iter().filter(|b| b.info.index != a.info.index) {
            let want = sysfs::expected_distance(&a.sys, &b.sys);
            let p = a
                .info
                .peers
                .iter()
                .find(|p| p.index == b.info.index)
                .ok_or(format!(
                    "gpu{} does not list gpu{}",
                    a.info.index, b.info.index
                ))?;
            check!(
                p.p2p == want.is_some() && p.distance == want,
                "gpu{} ({}) to gpu{} ({}): QUERY says p2p {} distance {:?}, sysfs {want:?}",
                a.info.index,
                a.sys.addr,
                b.info.index,
                b.sys.addr,
                p.p2p,
                p.distance
            );
        }
    }
    let mut groups: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for a in g {
        groups
            .entry(a.info.owner_group)
            .or_default()
            .push(a.info.index);
    }
    Ok(groups)
}

/// The sizes of the owner groups, smallest first.
fn sizes(groups: &BTreeMap<u32, Vec<u32>>) -> Vec<usize> {
    let mut s: Vec<usize> = groups.values().map(Vec::len).collect();
    s.sort_unstable();
    s
}

/// The GPUs on the host bridge `br`.
fn on_bridge<'a>(g: &'a [Gpu], br: &str) -> Vec<&'a Gpu> {
    g.iter().filter(|x| bridge(&x.sys) == br).collect()
}

fn matrix_and_groups() -> Outcome {
    let g = gpus()?;
    check!(g.len() == 8, "{} GPUs bound, want 8", g.len());
    let groups = check_matrix(&g)?;
    check!(sizes(&groups) == [1, 1, 3, 3], "owner groups {groups:?}");
    // Two host bridges, each with a group of three and one alone.
    let mut bridges: Vec<String> = g.iter().map(|x| bridge(&x.sys)).collect();
    bridges.sort_unstable();
    bridges.dedup();
    check!(bridges.len() == 2, "host bridges {bridges:?}");
    for br in &bridges {
        let mine = on_bridge(&g, br);
        let mut s: Vec<usize> = mine
            .iter()
            .map(|x| groups[&x.info.owner_group].len())
            .collect();
        s.sort_unstable();
        check!(s == [1, 3, 3, 3], "bridge {br}: group sizes {s:?}");
    }
    println!("# groups {groups:?} on bridges {bridges:?}");
    Ok(())
}

/// Two GPUs of one group on `br` and one of the other bridge's group.
fn trio(g: &[Gpu], br: &str) -> Result<(usize, usize, usize), String> {
    let size = |x: &Gpu| {
        g.iter()
            .filter(|y| y.info.owner_group == x.info.owner_group)
            .count()
    };
    let pos = |x: &Gpu| {
        g.iter()
            .position(|y| y.info.index == x.info.index)
            .unwrap_or(0)
    };
    let mine: Vec<&Gpu> = on_bridge(g, br)
        .into_iter()
        .filter(|x| size(x) > 1)
        .collect();
    let other = g
        .iter()
        .find(|x| bridge(&x.sys) != br && size(x) > 1)
        .ok_or("no group on the other bridge")?;
    check!(
        mine.len() >= 2,
        "bridge {br}: {} GPUs in its group",
        mine.len()
    );
    Ok((pos(mine[0]), pos(mine[1]), pos(other)))
}

/// A buffer on GPU `a`: `b` (its peer) reads it in place over P2P; `c`
/// (across the bridges) cannot, and its in-place job faults it home first.
/// Every checksum is the CPU's.
fn read_across(g: &[Gpu], (a, b, c): (usize, usize, usize)) -> Outcome {
    const LEN: usize = 2 << 20;
    let mut m = Map::new(LEN)?;
    fill(m.bytes_mut(), 77);
    let want = msvm_rt::checksum(m.bytes());
    let e = |x: msvm_rt::Error| x.to_string();
    let out = g[a]
        .dev
        .migrate(m.addr(), LEN, Location::Device)
        .map_err(e)?;
    check!(
        out.moved == (LEN / PAGE) as u64,
        "to gpu{}: {out:?}",
        g[a].info.index
    );
    let s0 = g[b].dev.stats().map_err(e)?;
    let jb = g[b]
        .dev
        .exec(Exec::Checksum, m.addr(), LEN, true)
        .map_err(e)?;
    let p2p = g[b].dev.stats().map_err(e)?.engine_p2p_read - s0.engine_p2p_read;
    check!(
        jb.result == want && p2p == LEN as u64 && jb.migrated == 0,
        "gpu{} over P2P from gpu{}: {jb:?}, p2p read {p2p}",
        g[b].info.index,
        g[a].info.index
    );
    let s0 = g[c].dev.stats().map_err(e)?;
    let jc = g[c]
        .dev
        .exec(Exec::Checksum, m.addr(), LEN, true)
        .map_err(e)?;
    let p2p = g[c].dev.stats().map_err(e)?.engine_p2p_read - s0.engine_p2p_read;
    check!(
        jc.result == want && p2p == 0,
        "gpu{} across the bridges from gpu{}: {jc:?}, p2p read {p2p}",
        g[c].info.index,
        g[a].info.index
    );
    crate::svm::verify(m.bytes(), 77)
}

fn jobs_across_bridges() -> Outcome {
    let g = gpus()?;
    check!(g.len() == 8, "{} GPUs bound, want 8", g.len());
    let mut bridges: Vec<String> = g.iter().map(|x| bridge(&x.sys)).collect();
    bridges.dedup();
    for br in &bridges {
        read_across(&g, trio(&g, br)?)?;
    }
    Ok(())
}

/// The harness's name of node 1's second GPU behind its switch
/// (`scripts/vm.py`'s 8gpu: gpu4 to gpu6 there, gpu7 on a root port).
const NODE1_VICTIM: &str = "gpu5";

fn unplug_node1() -> Outcome {
    use crate::unplug::host_wait_on;
    let count = || -> Result<usize, String> { Ok(sysfs::msvm_gpus()?.len()) };
    check!(count()? == 8, "{} GPUs bound, want 8", count()?);
    // 256 KiB parked on each GPU of node 1, their files kept open: the
    // unplugged one's pages go home to node 1 (its node), though the
    // unplug runs on a CPU of node 0 (the hot-plug interrupts' threads
    // are bound there).
    let cpu0 = crate::numa::cpus_by_node()?[0];
    let irqs = crate::numa::pciehp_irqs_to(cpu0)?;
    check!(irqs > 0, "no pciehp interrupt");
    let mut parked = Vec::new();
    for (k, sys) in sysfs::msvm_gpus()?.into_iter().enumerate() {
        if crate::numa::gpu_node(&sys)? != 1 {
            continue;
        }
        let dev = Device::open(&sys.node).map_err(|e| e.to_string())?;
        dev.vm_create().map_err(|e| e.to_string())?;
        let mut m = Map::small(64 * PAGE)?;
        fill(m.bytes_mut(), 900 + k as u64);
        let out = dev
            .migrate_slice(m.bytes(), Location::Device)
            .map_err(|e| format!("{}: {e}", sys.addr))?;
        check!(out.moved == 64, "{}: {out:?}", sys.addr);
        parked.push((sys.addr, dev, m, 900 + k as u64));
    }
    check!(parked.len() == 4, "{} GPUs on node 1", parked.len());
    host_wait_on(NODE1_VICTIM, "device_del", "7 GPUs", 60, || {
        Ok(count()? == 7)
    })?;
    let left: Vec<String> = sysfs::msvm_gpus()?.into_iter().map(|g| g.addr).collect();
    let gone: Vec<_> = parked.iter().filter(|p| !left.contains(&p.0)).collect();
    check!(gone.len() == 1, "{} of node 1's GPUs gone", gone.len());
    let (addr, _, m, _) = gone[0];
    crate::numa::wait_home(m.addr(), m.len(), 60)?;
    let what =
        format!("parked on {addr}, unplugged by a thread on CPU {cpu0} ({irqs} pciehp IRQs)");
    crate::numa::all_on(m.addr(), m.len(), 1, &what)?;
    for (addr, _, m, seed) in &parked {
        crate::svm::verify(m.bytes(), *seed).map_err(|e| format!("parked on {addr}: {e}"))?;
    }
    drop(parked);
    let g = gpus()?;
    let groups = check_matrix(&g)?;
    check!(
        sizes(&groups) == [1, 1, 2, 3],
        "owner groups after the unplug {groups:?}"
    );
    // Node 1's group is the pair now: P2P still works in it.
    let br = g
        .iter()
        .find(|x| groups[&x.info.owner_group].len() == 2)
        .map(|x| bridge(&x.sys))
        .ok_or("no pair")?;
    read_across(&g, trio(&g, &br)?)?;
    drop(g);
    host_wait_on(NODE1_VICTIM, "device_add", "8 GPUs", 60, || {
        Ok(count()? == 8)
    })?;
    let g = gpus()?;
    let groups = check_matrix(&g)?;
    check!(
        sizes(&groups) == [1, 1, 3, 3],
        "owner groups after the replug {groups:?}"
    );
    Ok(())
}
