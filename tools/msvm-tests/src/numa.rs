//! NUMA placement of pages coming home, on the 8-GPU server (two nodes, a
//! host bridge each; `msvm-tests topology8`).
//!
//! A NUMA policy decides first: the VMA's (`mbind`), else the task's
//! (`set_mempolicy`) if a thread of the process moves the pages. Without
//! one, the processor that wants the data decides: a CPU fault or a MIGRATE
//! takes pages on the node of the CPU doing it, an eviction on the node of
//! the device the pages leave, whichever task runs it. Where each page is
//! comes from `move_pages(2)` (and `/proc/self/numa_maps`, printed); the
//! small pages taken in bulk and one at a time from debugfs `numa`.

use std::path::Path;

use msvm_rt::{Device, Location};
use nix::libc;
use nix::sched::{sched_setaffinity, CpuSet};
use nix::unistd::Pid;

use crate::cgroup::Cgroup;
use crate::check;
use crate::harness::{Outcome, Test};
use crate::svm::{fill, verify, Map, PAGE};
use crate::sysfs;

pub fn tests() -> Vec<Test> {
    vec![
        Test {
            name: "numa_cpu_faults_and_migrate_bring_pages_to_the_cpus_node",
            run: cpu_node,
        },
        Test {
            name: "numa_mbind_and_set_mempolicy_decide_where_pages_come_home",
            run: policies,
        },
        Test {
            name: "numa_evicted_pages_go_to_the_evicting_devices_node",
            run: evictions,
        },
    ]
}

const MIB: usize = 1 << 20;
const MPOL_DEFAULT: i32 = 0;
const MPOL_PREFERRED: i32 = 1;
const MPOL_BIND: i32 = 2;

/// The first CPU of each NUMA node, by node.
pub fn cpus_by_node() -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for n in 0.. {
        let p = format!("/sys/devices/system/node/node{n}/cpulist");
        let Ok(list) = std::fs::read_to_string(&p) else {
            break;
        };
        let first = list
            .trim()
            .split([',', '-'])
            .next()
            .and_then(|c| c.parse().ok())
            .ok_or(format!("{p}: {list:?}"))?;
        out.push(first);
    }
    check!(out.len() >= 2, "NUMA nodes with CPUs: {out:?}, want 2");
    Ok(out)
}

/// Runs `f` on a thread of its own bound to `cpu` (its NUMA policy, which
/// `f` may set, ends with it).
fn on_cpu<T: Send>(cpu: usize, f: impl FnOnce() -> Result<T, String> + Send) -> Result<T, String> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut set = CpuSet::new();
            set.set(cpu).map_err(|e| e.to_string())?;
            sched_setaffinity(Pid::from_raw(0), &set).map_err(|e| format!("affinity: {e}"))?;
            f()
        })
        .join()
        .map_err(|_| "thread panicked".to_string())?
    })
}

/// A node mask of `node` for the NUMA system calls, and its `maxnode`.
fn mask(node: usize) -> ([libc::c_ulong; 1], libc::c_ulong) {
    ([1 << node], 65)
}

/// `mbind(2)` of `[addr, addr + len)` with `mode` on `node`.
fn mbind(addr: usize, len: usize, mode: i32, node: usize) -> Result<(), String> {
    let (m, max) = mask(node);
    // SAFETY: the system call reads `m` (one word, `max` - 1 bits) and
    // changes only the policy of our own range.
    let r = unsafe { libc::syscall(libc::SYS_mbind, addr, len, mode, m.as_ptr(), max, 0) };
    check!(r == 0, "mbind: {}", std::io::Error::last_os_error());
    Ok(())
}

/// `set_mempolicy(2)` of the calling thread.
fn set_mempolicy(mode: i32, node: Option<usize>) -> Result<(), String> {
    let (m, max) = mask(node.unwrap_or(0));
    let (p, max) = match node {
        Some(_) => (m.as_ptr(), max),
        None => (std::ptr::null(), 0),
    };
    // SAFETY: the system call reads at most one word of `m`.
    let r = unsafe { libc::syscall(libc::SYS_set_mempolicy, mode, p, max) };
    check!(r == 0, "set_mempolicy: {}", std::io::Error::last_os_error());
    Ok(())
}

/// The node of each page of `[addr, addr + len)` (`move_pages(2)` without
/// moving: a negative errno for a page not in system RAM).
fn nodes_of(addr: usize, len: usize) -> Result<Vec<i32>, String> {
    let pages: Vec<*mut libc::c_void> = (addr..addr + len)
        .step_by(PAGE)
        .map(|a| a as *mut libc::c_void)
        .collect();
    let mut status = vec![i32::MIN; pages.len()];
    // SAFETY: `pages` and `status` have `pages.len()` entries; with no node
    // list the call only reports.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0,
            pages.len(),
            pages.as_ptr(),
            std::ptr::null::<i32>(),
            status.as_mut_ptr(),
            0,
        )
    };
    check!(r == 0, "move_pages: {}", std::io::Error::last_os_error());
    Ok(status)
}

/// Checks that every page of `[addr, addr + len)` is in system RAM on
/// `node`, saying where they are otherwise, and prints `numa_maps`' line of
/// the mapping.
pub fn all_on(addr: usize, len: usize, node: usize, what: &str) -> Outcome {
    let st = nodes_of(addr, len)?;
    let mut by: std::collections::BTreeMap<i32, usize> = Default::default();
    for s in &st {
        *by.entry(*s).or_default() += 1;
    }
    println!(
        "# {what}: pages by node {by:?}; numa_maps {:?}",
        numa_maps(addr)
    );
    check!(
        by.len() == 1 && by.get(&(node as i32)) == Some(&st.len()),
        "{what}: pages by node (negative: not in RAM) {by:?}, want all {} on node {node}",
        st.len()
    );
    Ok(())
}

/// Waits up to `secs` seconds for every page of `[addr, addr + len)` to be
/// in system RAM (an unplug's drain runs after the device leaves sysfs).
pub fn wait_home(addr: usize, len: usize, secs: u64) -> Outcome {
    let start = std::time::Instant::now();
    loop {
        let away = nodes_of(addr, len)?.iter().filter(|&&s| s < 0).count();
        if away == 0 {
            return Ok(());
        }
        check!(
            start.elapsed().as_secs() < secs,
            "{away} pages not in RAM after {secs} s"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Binds the PCIe hot-plug interrupts (and so their threads, where an
/// unplug runs the driver's remove) to `cpu`; returns how many.
pub fn pciehp_irqs_to(cpu: usize) -> Result<usize, String> {
    let text = std::fs::read_to_string("/proc/interrupts").map_err(|e| e.to_string())?;
    let mut n = 0;
    for l in text.lines().filter(|l| l.contains("pciehp")) {
        let Some(irq) = l.split(':').next().map(str::trim) else {
            continue;
        };
        let p = format!("/proc/irq/{irq}/smp_affinity_list");
        std::fs::write(&p, cpu.to_string()).map_err(|e| format!("{p}: {e}"))?;
        n += 1;
    }
    Ok(n)
}

/// Frees the page cache, so that the node a test fills has free pages
/// above its watermarks (evictions take pages without reclaiming).
fn drop_caches() {
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
}

/// The `/proc/self/numa_maps` line of the mapping that holds `addr`.
fn numa_maps(addr: usize) -> String {
    let text = std::fs::read_to_string("/proc/self/numa_maps").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let start = usize::from_str_radix(l.split(' ').next()?, 16).ok()?;
            (start <= addr).then_some((start, l))
        })
        .max_by_key(|(s, _)| *s)
        .map_or(String::new(), |(_, l)| l.to_string())
}

/// Moves `[addr, addr + len)` to `dev`'s memory, every page.
fn to_device(dev: &Device, addr: usize, len: usize) -> Outcome {
    let out = dev
        .migrate(addr, len, Location::Device)
        .map_err(|e| e.to_string())?;
    check!(out.moved == (len / PAGE) as u64, "to the device: {out:?}");
    Ok(())
}

/// debugfs `numa`: small pages coming home taken in bulk and one by one.
fn counts() -> Result<(u64, u64), String> {
    let p = "/sys/kernel/debug/msvm/numa";
    let text = std::fs::read_to_string(p).map_err(|e| format!("{p}: {e}"))?;
    let get = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k)?.trim().parse::<u64>().ok())
            .ok_or(format!("{p}: no {k}: {text:?}"))
    };
    Ok((get("bulk_pages ")?, get("single_pages ")?))
}

/// A GPU's NUMA node, from sysfs.
pub fn gpu_node(g: &sysfs::SysGpu) -> Result<usize, String> {
    let p = Path::new("/sys/bus/pci/devices")
        .join(&g.addr)
        .join("numa_node");
    let s = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    s.trim()
        .parse()
        .map_err(|_| format!("{}: {s:?}", p.display()))
}

/// A GPU on `node`, opened with a VM, and its dmem region.
fn gpu_on(node: usize) -> Result<(Device, String), String> {
    for g in sysfs::msvm_gpus()? {
        if gpu_node(&g)? == node {
            let dev = Device::open(&g.node).map_err(|e| e.to_string())?;
            dev.vm_create().map_err(|e| e.to_string())?;
            let region = crate::cgroup::region(&dev)?;
            // debugfs agrees with sysfs.
            let index = dev.index().map_err(|e| e.to_string())?;
            let p = "/sys/kernel/debug/msvm/numa";
            let text = std::fs::read_to_string(p).map_err(|e| format!("{p}: {e}"))?;
            check!(
                text.lines().any(|l| l == format!("{index} {node}")),
                "debugfs numa does not put gpu{index} on node {node}: {text:?}"
            );
            return Ok((dev, region));
        }
    }
    Err(format!("no GPU on node {node}"))
}

/// 4 MiB moved to gpu0 (node 0) and back, by CPU faults and by MIGRATE,
/// from a CPU of each node in turn: the pages come home to that CPU's node,
/// in the bulk path. Filled from the other node's CPU, so that where they
/// were first touched does not decide.
fn cpu_node() -> Outcome {
    let cpus = cpus_by_node()?;
    let (dev, _) = gpu_on(0)?;
    let len = 4 * MIB;
    for node in [1, 0] {
        let mut m = Map::small(len)?;
        on_cpu(cpus[1 - node], || {
            fill(m.bytes_mut(), 300 + node as u64);
            Ok(())
        })?;
        all_on(m.addr(), len, 1 - node, "first touch")?;
        to_device(&dev, m.addr(), len)?;
        let (bulk0, _) = counts()?;
        on_cpu(cpus[node], || verify(m.bytes(), 300 + node as u64))?;
        let (bulk1, _) = counts()?;
        all_on(m.addr(), len, node, &format!("CPU faults on node {node}"))?;
        check!(
            bulk1 - bulk0 >= (len / PAGE / 2) as u64,
            "CPU faults: {} pages in bulk, of {}",
            bulk1 - bulk0,
            len / PAGE
        );
        to_device(&dev, m.addr(), len)?;
        on_cpu(cpus[node], || {
            dev.migrate(m.addr(), len, Location::System)
                .map_err(|e| e.to_string())
                .map(drop)
        })?;
        all_on(m.addr(), len, node, &format!("MIGRATE on node {node}"))?;
        verify(m.bytes(), 300 + node as u64)?;
    }
    Ok(())
}

/// From a CPU of node 0, with gpu0 on node 0 too: a buffer bound to node 1
/// (`mbind`, MPOL_BIND) comes home to node 1 by CPU faults and by
/// MIGRATE, one page at a time (the bulk path follows no policy), and so
/// does a THP region;
/// a thread that prefers node 1 (`set_mempolicy`) gets its unbound
/// buffer's pages there.
fn policies() -> Outcome {
    let cpus = cpus_by_node()?;
    let (dev, _) = gpu_on(0)?;
    let len = 4 * MIB;
    on_cpu(cpus[0], || {
        let mut m = Map::small(len)?;
        mbind(m.addr(), len, MPOL_BIND, 1)?;
        fill(m.bytes_mut(), 41);
        all_on(m.addr(), len, 1, "bound to node 1, first touch")?;
        to_device(&dev, m.addr(), len)?;
        let (b0, s0) = counts()?;
        verify(m.bytes(), 41)?;
        let (b1, s1) = counts()?;
        all_on(m.addr(), len, 1, "bound to node 1, CPU faults on node 0")?;
        let line = numa_maps(m.addr());
        check!(
            line.contains("bind:1") && line.contains(&format!("N1={}", len / PAGE)),
            "numa_maps: {line:?}"
        );
        check!(
            b1 == b0 && s1 - s0 >= (len / PAGE) as u64,
            "a bound buffer's pages came in bulk ({}) or not one by one ({})",
            b1 - b0,
            s1 - s0
        );
        to_device(&dev, m.addr(), len)?;
        dev.migrate(m.addr(), len, Location::System)
            .map_err(|e| e.to_string())?;
        all_on(m.addr(), len, 1, "bound to node 1, MIGRATE on node 0")?;
        verify(m.bytes(), 41)?;

        // A THP region bound to node 1 (moved in 4 KiB pages unless the
        // module moves 2 MiB folios whole, `large_folios`).
        let tl = 4 * MIB;
        let (_big, start) = crate::scenarios::huge(tl)?;
        mbind(start, tl, MPOL_BIND, 1)?;
        // SAFETY: inside `_big`, readable and writable.
        let b = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, tl) };
        fill(b, 42);
        to_device(&dev, start, tl)?;
        verify(b, 42)?;
        all_on(start, tl, 1, "THPs bound to node 1, CPU faults on node 0")?;

        // The thread's own policy.
        set_mempolicy(MPOL_PREFERRED, Some(1))?;
        let mut u = Map::small(len)?;
        fill(u.bytes_mut(), 43);
        all_on(u.addr(), len, 1, "preferring node 1, first touch")?;
        to_device(&dev, u.addr(), len)?;
        verify(u.bytes(), 43)?;
        all_on(u.addr(), len, 1, "preferring node 1, CPU faults on node 0")?;
        set_mempolicy(MPOL_DEFAULT, None)?;
        // And without any policy, node 0 again.
        to_device(&dev, u.addr(), len)?;
        verify(u.bytes(), 43)?;
        all_on(u.addr(), len, 0, "no policy, CPU faults on node 0")
    })
}

/// A process limited to 2 MiB of a GPU (dmem.max) moves 2 MiB there, then
/// another 2 MiB: room is made among its own pages, and the first 2 MiB
/// go home to the GPU's node, though the CPU doing it all is on the other
/// node; bound to the CPU's node (`mbind`), they go there instead. For a
/// GPU of each node.
fn evictions() -> Outcome {
    let cpus = cpus_by_node()?;
    for gpu_at in [1, 0] {
        let cpu_at = 1 - gpu_at;
        drop_caches();
        let (dev, region) = gpu_on(gpu_at)?;
        let cg = Cgroup::new("msvm-test-numa")?;
        cg.set_max(&region, Some(2 * MIB as u64))?;
        cg.enter()?;
        let r = on_cpu(cpus[cpu_at], || {
            let len = 2 * MIB;
            let mut a = Map::small(len)?;
            let mut b = Map::small(len)?;
            fill(a.bytes_mut(), 51);
            fill(b.bytes_mut(), 52);
            to_device(&dev, a.addr(), len)?;
            to_device(&dev, b.addr(), len)?;
            all_on(
                a.addr(),
                len,
                gpu_at,
                &format!("evicted from the GPU of node {gpu_at} by a CPU of node {cpu_at}"),
            )?;
            verify(a.bytes(), 51)?;
            mbind(a.addr(), len, MPOL_BIND, cpu_at)?;
            to_device(&dev, a.addr(), len)?;
            to_device(&dev, b.addr(), len)?;
            all_on(
                a.addr(),
                len,
                cpu_at,
                &format!("bound to node {cpu_at}, evicted from the GPU of node {gpu_at}"),
            )?;
            verify(a.bytes(), 51)?;
            verify(b.bytes(), 52)
        });
        crate::cgroup::leave()?;
        r?;
    }
    Ok(())
}
