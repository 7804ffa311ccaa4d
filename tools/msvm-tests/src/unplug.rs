//! PCI hot-unplug and re-plug of a GPU, driven by the host harness.
//!
//! The test prints `MSVM-HOST: device_del gpu1` on the console; the harness
//! (scripts/vm.py) unplugs that QEMU device through QMP. The guest sees the
//! PCIe slot power off (pciehp) and msvm's remove run.

use std::collections::BTreeSet;
use std::io::Write;
use std::time::{Duration, Instant};

use msvm_rt::{Device, Location};
use nix::errno::Errno;

use crate::check;
use crate::harness::{Outcome, Test};
use crate::svm;
use crate::sysfs;

/// The QEMU id of the GPU to unplug: the second GPU behind the switch.
const VICTIM: &str = "gpu1";

/// Unbind and re-bind through sysfs.
pub fn rebind_tests() -> Vec<Test> {
    vec![
        Test {
            name: "sysfs_unbind_and_rebind",
            run: sysfs_unbind_and_rebind,
        },
        Test {
            name: "sysfs_unbind_during_huge_migrate",
            run: unbind_during_huge_migrate,
        },
        Test {
            name: "sysfs_unbind_of_a_peer_during_huge_prefetch_to_it",
            run: unbind_peer_during_huge_prefetch,
        },
        Test {
            name: "sysfs_unbind_with_a_mremapped_device_folio_zapped_meanwhile",
            run: unbind_mremapped_folio_zapped,
        },
        Test {
            name: "sysfs_unbind_while_fork_children_exit",
            run: unbind_while_fork_children_exit,
        },
        Test {
            name: "sysfs_unbind_other_gpus_work_during_the_teardown",
            run: other_gpus_work_during_teardown,
        },
        Test {
            name: "sysfs_unbind_leaves_a_peers_pages_at_a_freed_folios_address",
            run: unbind_leaves_peer_pages_at_folio_record,
        },
    ]
}

/// A 2 MiB folio moves to the first GPU whole (its record: this process's
/// mm and the address), then to the second GPU, a P2P peer of its owner
/// group (the first GPU's folio is freed; its record stays until the
/// block is used again). Unbinding the first GPU moves its folios home
/// through their records: only the pages of its own block there, not the
/// second GPU's pages the address holds now (it once moved every page of
/// the owner group it found there: a peer's, another tenant's block's).
fn unbind_leaves_peer_pages_at_folio_record() -> Outcome {
    const HUGE: usize = 2 << 20;
    let gpus = sysfs::msvm_gpus()?;
    check!(gpus.len() >= 2, "need two GPUs");
    let (_region, start) = crate::large::thp_region(HUGE, 93)?;
    let d1 = Device::open(&gpus[1].node).map_err(|x| x.to_string())?;
    d1.vm_create().map_err(|x| x.to_string())?;
    let index1 = d1.index().map_err(|x| x.to_string())? as usize;
    {
        let d0 = Device::open(&gpus[0].node).map_err(|x| x.to_string())?;
        d0.vm_create().map_err(|x| x.to_string())?;
        let s0 = d0.stats().map_err(|x| x.to_string())?;
        d0.migrate(start, HUGE, Location::Device)
            .map_err(|x| x.to_string())?;
        let s1 = d0.stats().map_err(|x| x.to_string())?;
        check!(
            s1.large_to_device - s0.large_to_device == 1,
            "the folio did not move to the first GPU whole"
        );
    }
    d1.migrate(start, HUGE, Location::Device)
        .map_err(|x| x.to_string())?;
    let on_peer = |what: &str| -> Outcome {
        let r = d1.residency(start, HUGE).map_err(|x| x.to_string())?;
        check!(
            r.devices[index1] == HUGE as u64,
            "{what}: {} of {HUGE} bytes on the second GPU ({} in system RAM)",
            r.devices[index1],
            r.system
        );
        Ok(())
    };
    on_peer("before the unbind")?;
    let drv = "/sys/bus/pci/drivers/msvm";
    std::fs::write(format!("{drv}/unbind"), &gpus[0].addr).map_err(|x| format!("unbind: {x}"))?;
    let kept = on_peer("after the first GPU's unbind");
    let rebound = bind_again(&gpus[0].addr);
    kept?;
    rebound?;
    crate::svm::verify(crate::large::bytes(start, HUGE), 93)
}

/// PCIe hot-unplug and re-plug (run last on a lockdep kernel: the kernel's
/// own pciehp makes lockdep report, which turns lockdep off).
pub fn hotplug_tests() -> Vec<Test> {
    vec![Test {
        name: "hot_unplug_and_replug",
        run: hot_unplug_and_replug,
    }]
}

pub(crate) fn addrs() -> Result<BTreeSet<String>, String> {
    Ok(sysfs::msvm_gpus()?.into_iter().map(|g| g.addr).collect())
}

fn host(action: &str, victim: &str) {
    println!("MSVM-HOST: {action} {victim}");
    let _ = std::io::stdout().flush();
}

/// Asks the host for `action` on the victim and waits up to `secs` for
/// `cond`, asking again every 10 s: the request is a console line, which
/// kernel messages printed at the same moment can cut (the harness answers
/// a repeated request once).
pub(crate) fn host_wait(
    action: &str,
    what: &str,
    secs: u64,
    cond: impl FnMut() -> Result<bool, String>,
) -> Outcome {
    host_wait_on(VICTIM, action, what, secs, cond)
}

/// As [`host_wait`], for the GPU the harness calls `victim` (`gpuN`).
pub(crate) fn host_wait_on(
    victim: &str,
    action: &str,
    what: &str,
    secs: u64,
    mut cond: impl FnMut() -> Result<bool, String>,
) -> Outcome {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(secs) {
        host(action, victim);
        let left = secs.saturating_sub(start.elapsed().as_secs()).min(10);
        if wait_for(what, left.max(1), &mut cond).is_ok() {
            return Ok(());
        }
    }
    Err(format!("{what}: not within {secs} s"))
}

fn wait_for(what: &str, secs: u64, cond: &mut dyn FnMut() -> Result<bool, String>) -> Outcome {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(secs) {
        if cond()? {
            println!("# {what} after {:.1} s", start.elapsed().as_secs_f64());
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(format!("{what}: not within {secs} s"))
}

/// A process MIGRATEs a 64 TiB `MAP_NORESERVE` mapping to the first GPU
/// (a long run of 2 MiB steps) when the GPU is unbound: the unbind
/// completes (the ioctl stops with `ENODEV`, the DRM core waits for it),
/// and the GPU binds again.
fn unbind_during_huge_migrate() -> Outcome {
    use crate::trust::{huge_child, reap_within, Huge};
    let victim = sysfs::msvm_gpus()?.into_iter().next().ok_or("no GPU")?;
    let (pid, rd) = huge_child(Huge::Migrate)?;
    let mut b = [0u8; 1];
    check!(
        nix::unistd::read(&rd, &mut b).map_err(|x| x.to_string())? == 1,
        "the child did not start"
    );
    std::thread::sleep(Duration::from_secs(2));
    let drv = "/sys/bus/pci/drivers/msvm";
    let addr = victim.addr.clone();
    let t = Instant::now();
    let unbind = std::thread::spawn(move || std::fs::write(format!("{drv}/unbind"), addr));
    while !unbind.is_finished() && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
    }
    check!(
        unbind.is_finished(),
        "unbind still blocked after 30 s behind the MIGRATE"
    );
    unbind
        .join()
        .map_err(|_| "unbind thread panicked")?
        .map_err(|x| format!("unbind: {x}"))?;
    println!("# unbind took {} ms", t.elapsed().as_millis());
    // The MIGRATE ended with an error, and the child exits (3).
    let st = reap_within(pid, Duration::from_secs(10));
    check!(
        matches!(st, Some((nix::sys::wait::WaitStatus::Exited(_, 3), _))),
        "the child: {st:?}"
    );
    bind_again(&victim.addr)
}

/// A process PREFETCHes a 64 TiB `MAP_NORESERVE` mapping, through the
/// second GPU, to the first (its P2P peer), when the first is unbound. The
/// unplug of the first GPU's DRM device waits for every ioctl in progress
/// on any DRM device (one SRCU for all), this one too, which also holds the
/// first GPU's memory: it once waited for the whole 64 TiB. The ioctl stops
/// with `EAGAIN` at its next step once a GPU begins to go away, so the
/// unbind completes.
fn unbind_peer_during_huge_prefetch() -> Outcome {
    use crate::trust::{huge_child, reap_within, Huge};
    let victim = sysfs::msvm_gpus()?.into_iter().next().ok_or("no GPU")?;
    let (pid, rd) = huge_child(Huge::PrefetchToPeer)?;
    let mut b = [0u8; 1];
    check!(
        nix::unistd::read(&rd, &mut b).map_err(|x| x.to_string())? == 1,
        "the child did not start"
    );
    std::thread::sleep(Duration::from_secs(2));
    // Still in its PREFETCH (it ends only with an error).
    let running = matches!(
        nix::sys::wait::waitpid(pid, Some(nix::sys::wait::WaitPidFlag::WNOHANG)),
        Ok(nix::sys::wait::WaitStatus::StillAlive)
    );
    let drv = "/sys/bus/pci/drivers/msvm";
    let addr = victim.addr.clone();
    let t = Instant::now();
    let unbind = std::thread::spawn(move || std::fs::write(format!("{drv}/unbind"), addr));
    // The PREFETCH ends with EAGAIN once the GPU begins to go away, and the
    // child exits (4).
    let st = reap_within(pid, Duration::from_secs(30));
    let stopped = t.elapsed();
    while !unbind.is_finished() && t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    if st.is_none() {
        // Let the unbind go on (the test has failed).
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(pid, None);
    }
    check!(
        unbind.is_finished(),
        "unbind still blocked after 60 s behind the PREFETCH to it"
    );
    unbind
        .join()
        .map_err(|_| "unbind thread panicked")?
        .map_err(|x| format!("unbind: {x}"))?;
    println!(
        "# the PREFETCH stopped {} ms after the unbind began; the unbind took {} ms",
        stopped.as_millis(),
        t.elapsed().as_millis()
    );
    check!(running, "the PREFETCH ended before the unbind");
    check!(
        matches!(st, Some((nix::sys::wait::WaitStatus::Exited(_, 4), _))),
        "the child (4: the PREFETCH stopped with EAGAIN): {st:?}"
    );
    check!(
        stopped < Duration::from_secs(5),
        "the PREFETCH to the peer went on {} ms after the unbind began",
        stopped.as_millis()
    );
    bind_again(&victim.addr)
}

/// A 2 MiB device folio moved by `mremap()` after it was migrated in (its
/// record leads to the old address), zapped (`MADV_DONTNEED`) while the
/// unbind tears its chunk down. Once, the eviction collected it whole by
/// frame, its PMD a migration entry, which Linux 7.3's `zap_huge_pmd()`
/// mishandles (the folio freed under the migration: `VM_BUG_ON` on this
/// kernel), so the zap had to wait for it. Now nothing collects it: it
/// stays mapped as an orphan (`vram/orphans.rs`), and debugfs
/// `evict_delay_ms` holds the teardown open just before its copy is
/// taken; the zap frees it there. The kernel log stays clean, the zapped
/// range reads as zero, and the GPU binds again.
fn unbind_mremapped_folio_zapped() -> Outcome {
    use crate::race::{delays, in_window, Window, WINDOW_MS};
    const HUGE: usize = 2 << 20;
    let victim = sysfs::msvm_gpus()?.into_iter().next().ok_or("no GPU")?;
    let (_old, start) = crate::large::thp_region(HUGE, 97)?;
    {
        let dev = Device::open(&victim.node).map_err(|x| x.to_string())?;
        dev.vm_create().map_err(|x| x.to_string())?;
        let s0 = dev.stats().map_err(|x| x.to_string())?;
        dev.migrate(start, HUGE, Location::Device)
            .map_err(|x| x.to_string())?;
        let s1 = dev.stats().map_err(|x| x.to_string())?;
        check!(
            s1.large_to_device - s0.large_to_device == 1,
            "the folio did not move whole"
        );
    }
    let (_new, to) = crate::scenarios::huge(HUGE)?;
    // SAFETY: both ranges are this test's own mappings; `to` is replaced.
    let moved = unsafe {
        nix::libc::mremap(
            start as *mut nix::libc::c_void,
            HUGE,
            HUGE,
            nix::libc::MREMAP_MAYMOVE | nix::libc::MREMAP_FIXED,
            to as *mut nix::libc::c_void,
        )
    };
    check!(
        moved as usize == to,
        "mremap: {}",
        std::io::Error::last_os_error()
    );
    let d0 = delays()?;
    let window = Window::open(WINDOW_MS)?;
    let drv = "/sys/bus/pci/drivers/msvm";
    let addr = victim.addr.clone();
    let unbind = std::thread::spawn(move || std::fs::write(format!("{drv}/unbind"), addr));
    let zapped = in_window(d0).and_then(|()| {
        let t = Instant::now();
        // SAFETY: advice on this test's own mapping.
        let r = unsafe {
            nix::libc::madvise(to as *mut nix::libc::c_void, HUGE, nix::libc::MADV_DONTNEED)
        };
        check!(r == 0, "madvise: {}", std::io::Error::last_os_error());
        Ok(t.elapsed())
    });
    let unbound = unbind.join().map_err(|_| "unbind thread panicked")?;
    drop(window);
    unbound.map_err(|x| format!("unbind: {x}"))?;
    let zapped = zapped?;
    println!(
        "# the zap took {} ms inside the teardown's window",
        zapped.as_millis()
    );
    check!(
        crate::large::bytes(to, HUGE).iter().all(|&b| b == 0),
        "the zapped folio does not read as zero"
    );
    bind_again(&victim.addr)
}

/// 64 KiB of 4 KiB pages of a process on the first GPU when it is unbound
/// (2 MiB device folios go home by a path without the window), with
/// debugfs `evict_delay_ms` holding each eviction step open: once the teardown
/// evicts (its DRM device is unplugged by then), migrations and jobs on
/// the last GPU run as usual, and end before the teardown does: a device's
/// teardown
/// stops other devices' ioctls only while its DRM device is unplugged,
/// not for its whole eviction (they failed with `EAGAIN` throughout).
fn other_gpus_work_during_teardown() -> Outcome {
    use crate::race::{delays, in_window, Window, WINDOW_MS};
    let gpus = sysfs::msvm_gpus()?;
    check!(gpus.len() >= 2, "{} GPUs", gpus.len());
    let (victim, other) = (&gpus[0], &gpus[gpus.len() - 1]);
    let mut parked = svm::Map::small(64 << 10)?;
    svm::fill(parked.bytes_mut(), 501);
    {
        let dev = Device::open(&victim.node).map_err(|x| x.to_string())?;
        dev.vm_create().map_err(|x| x.to_string())?;
        let out = dev
            .migrate_slice(parked.bytes(), Location::Device)
            .map_err(|x| x.to_string())?;
        check!(out.moved == 16, "park: {out:?}");
    }
    let dev = Device::open(&other.node).map_err(|x| x.to_string())?;
    dev.vm_create().map_err(|x| x.to_string())?;
    let mut m = svm::Map::small(64 << 10)?;
    svm::fill(m.bytes_mut(), 502);
    let want = msvm_rt::checksum(m.bytes());
    let d0 = delays()?;
    let window = Window::open(WINDOW_MS)?;
    let drv = "/sys/bus/pci/drivers/msvm";
    let addr = victim.addr.clone();
    let unbind = std::thread::spawn(move || std::fs::write(format!("{drv}/unbind"), addr));
    let worked = in_window(d0).and_then(|()| {
        let t = Instant::now();
        for to in [Location::Device, Location::System] {
            dev.migrate_slice(m.bytes(), to)
                .map_err(|x| format!("MIGRATE on {} during the teardown: {x}", other.addr))?;
            let j = dev
                .exec(msvm_rt::Exec::Checksum, m.addr(), m.len(), true)
                .map_err(|x| format!("EXEC on {} during the teardown: {x}", other.addr))?;
            check!(j.result == want, "checksum during the teardown");
        }
        Ok(t.elapsed())
    });
    let during = !unbind.is_finished();
    let unbound = unbind.join().map_err(|_| "unbind thread panicked")?;
    drop(window);
    unbound.map_err(|x| format!("unbind: {x}"))?;
    let took = worked?;
    println!(
        "# {} worked for {} ms during the teardown of {}",
        other.addr,
        took.as_millis(),
        victim.addr
    );
    check!(during, "the teardown ended before the other GPU's work did");
    svm::verify(parked.bytes(), 501)?;
    bind_again(&victim.addr)
}

/// Binds the GPU at PCI address `addr` to msvm again, and checks it is.
pub(crate) fn bind_again(addr: &str) -> Outcome {
    let drv = "/sys/bus/pci/drivers/msvm";
    std::fs::write(format!("{drv}/bind"), addr).map_err(|x| format!("bind: {x}"))?;
    check!(addrs()?.contains(addr), "{addr} not bound again");
    Ok(())
}

/// A process keeps 32 MiB of THP-backed data on the first GPU as 2 MiB
/// device folios and forks children that exit at once, in a loop, while
/// the GPU is unbound: eviction must not collect a folio whole while a
/// child's exit can zap its PMD migration entry (Linux 7.3's
/// `zap_huge_pmd()` bug: a use-after-free). Every byte reads back, and
/// the GPU binds again.
fn unbind_while_fork_children_exit() -> Outcome {
    use std::sync::atomic::{AtomicBool, Ordering};
    let victim = sysfs::msvm_gpus()?.into_iter().next().ok_or("no GPU")?;
    let len = 32 << 20;
    let (_region, start) = crate::large::thp_region(len, 91)?;
    {
        let dev = Device::open(&victim.node).map_err(|x| x.to_string())?;
        dev.vm_create().map_err(|x| x.to_string())?;
        let s0 = dev.stats().map_err(|x| x.to_string())?;
        dev.migrate(start, len, Location::Device)
            .map_err(|x| x.to_string())?;
        let s1 = dev.stats().map_err(|x| x.to_string())?;
        check!(
            s1.large_to_device - s0.large_to_device == (len >> 21) as u64,
            "{} folios moved whole, want {}",
            s1.large_to_device - s0.large_to_device,
            len >> 21
        );
    }
    let stop = AtomicBool::new(false);
    let drv = "/sys/bus/pci/drivers/msvm";
    let (forks, unbind) = std::thread::scope(|s| {
        let forker = s.spawn(|| {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // SAFETY: the child exits at once.
                match unsafe { nix::unistd::fork() } {
                    Ok(nix::unistd::ForkResult::Child) => {
                        // SAFETY: leaving the child at once.
                        unsafe { nix::libc::_exit(0) }
                    }
                    Ok(nix::unistd::ForkResult::Parent { child }) => {
                        let _ = nix::sys::wait::waitpid(child, None);
                        n += 1;
                    }
                    Err(_) => break,
                }
            }
            n
        });
        std::thread::sleep(Duration::from_millis(300));
        let unbind = std::fs::write(format!("{drv}/unbind"), &victim.addr);
        stop.store(true, Ordering::Relaxed);
        (forker.join().unwrap_or(0), unbind)
    });
    unbind.map_err(|x| format!("unbind: {x}"))?;
    println!("# {forks} children forked and exited around the unbind");
    check!(forks > 0, "no child forked");
    crate::svm::verify(crate::large::bytes(start, len), 91)?;
    bind_again(&victim.addr)
}

/// Unbinds the first GPU through sysfs and binds it again: its render node
/// goes and comes back, with the same index and P2P links.
fn sysfs_unbind_and_rebind() -> Outcome {
    let before = sysfs::msvm_gpus()?;
    let victim = before.first().ok_or("no GPU")?;
    let info = Device::open(&victim.node)
        .and_then(|d| d.query())
        .map_err(|e| e.to_string())?;
    // A VM that outlives the unbind, its device page table holding DMA
    // mappings of system pages (a range used in place) and entries of the
    // device's own pages: the unbind empties the table first; the VM's
    // later invalidations and its end find nothing to unmap.
    let held = Device::open(&victim.node).map_err(|e| e.to_string())?;
    held.vm_create().map_err(|e| e.to_string())?;
    let (mut sys, mut own) = (
        svm::Map::new(64 * svm::PAGE)?,
        svm::Map::new(64 * svm::PAGE)?,
    );
    svm::fill(sys.bytes_mut(), 21);
    svm::fill(own.bytes_mut(), 22);
    let in_place = msvm_rt::Attributes {
        preferred: msvm_rt::Place::Default,
        access: msvm_rt::Access::InPlace,
        thrash: true,
        counters: false,
        read_mostly: false,
    };
    held.set_attr(sys.addr(), sys.len(), in_place)
        .map_err(|e| e.to_string())?;
    let s0 = held.stats().map_err(|e| e.to_string())?;
    for m in [&sys, &own] {
        held.exec(msvm_rt::Exec::Checksum, m.addr(), m.len(), false)
            .map_err(|e| format!("CHECKSUM: {e}"))?;
    }
    let s1 = held.stats().map_err(|e| e.to_string())?;
    check!(
        s1.pt_bound - s0.pt_bound == 128,
        "bound {} entries before the unbind, want 128",
        s1.pt_bound - s0.pt_bound
    );
    let drv = "/sys/bus/pci/drivers/msvm";
    std::fs::write(format!("{drv}/unbind"), &victim.addr).map_err(|e| format!("unbind: {e}"))?;
    // The VM's pages came home intact; its invalidations (the CPU writes,
    // the unmaps) find its table empty.
    svm::verify(own.bytes(), 22)
        .map_err(|e| format!("the device's pages after the unbind: {e}"))?;
    svm::verify(sys.bytes(), 21).map_err(|e| format!("the pages used in place: {e}"))?;
    own.bytes_mut()[0] ^= 1;
    sys.bytes_mut()[0] ^= 1;
    check!(
        held.stats().is_err(),
        "STATS on the unbound device's file worked"
    );
    drop((sys, own, held));
    let gone = addrs()?;
    check!(!gone.contains(&victim.addr), "{} still bound", victim.addr);
    check!(
        !victim.node.exists(),
        "{} still exists",
        victim.node.display()
    );
    std::fs::write(format!("{drv}/bind"), &victim.addr).map_err(|e| format!("bind: {e}"))?;
    let g = sysfs::msvm_gpus()?
        .into_iter()
        .find(|g| g.addr == victim.addr)
        .ok_or("not bound again")?;
    let again = Device::open(&g.node)
        .and_then(|d| d.query())
        .map_err(|e| e.to_string())?;
    check!(
        again.index == info.index,
        "index {} after re-bind, was {}",
        again.index,
        info.index
    );
    check!(
        again.peers == info.peers,
        "peers {:?} after re-bind, were {:?}",
        again.peers,
        info.peers
    );
    Ok(())
}

fn hot_unplug_and_replug() -> Outcome {
    let before = addrs()?;
    check!(before.len() >= 2, "need at least 2 GPUs");
    // Keep every device open across the unplug.
    let mut open: Vec<(String, Device, msvm_rt::DeviceInfo)> = Vec::new();
    for g in sysfs::msvm_gpus()? {
        let dev = Device::open(&g.node).map_err(|e| e.to_string())?;
        let info = dev.query().map_err(|e| e.to_string())?;
        open.push((g.addr, dev, info));
    }

    // Data on every device, each through its own VM: the unplugged
    // device's pages must reach system RAM intact.
    let mut parked = Vec::new();
    let mut parked_thp = Vec::new();
    for (k, (addr, dev, _)) in open.iter().enumerate() {
        dev.vm_create().map_err(|e| format!("{addr}: {e}"))?;
        let mut m = svm::Map::new(64 * svm::PAGE)?;
        svm::fill(m.bytes_mut(), 1000 + k as u64);
        let out = dev
            .migrate_slice(m.bytes(), Location::Device)
            .map_err(|e| format!("{addr}: {e}"))?;
        check!(out.moved == 64, "{addr}: {out:?}");
        parked.push((addr.clone(), m, 1000 + k as u64));
        // And two 2 MiB folios (THPs on the device).
        let (big, start) = crate::scenarios::huge(4 << 20)?;
        // SAFETY: inside `big`, readable and writable.
        let b = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, 4 << 20) };
        svm::fill(b, 2000 + k as u64);
        let before_large = dev.stats().map_err(|e| e.to_string())?.large_to_device;
        dev.migrate(start, 4 << 20, Location::Device)
            .map_err(|e| format!("{addr}: {e}"))?;
        let large = dev.stats().map_err(|e| e.to_string())?.large_to_device - before_large;
        check!(large == 2, "{addr}: {large} folios moved whole");
        parked_thp.push((addr.clone(), big, start, 2000 + k as u64));
    }
    // Replicas on every device of a read-only read-mostly buffer, and a
    // block pinned on a device by the devices of the first owner group
    // taking turns on it: the unplug drops the one and evicts the other.
    let (shared, shared_sum) = crate::replicas::replicated_everywhere(open.iter().map(|o| &o.1))?;
    let group: Vec<&Device> = open
        .iter()
        .filter(|o| o.2.owner_group == open[0].2.owner_group)
        .map(|o| &o.1)
        .collect();
    let pinned = crate::replicas::pinned_between(&group)?;
    // The unplugged device's first 2 MiB system folios fail: its eviction
    // retries until they come.
    crate::large::fail_large_system(3)?;

    host_wait("device_del", "GPU unbound", 40, || {
        Ok(addrs()?.len() == before.len() - 1)
    })?;
    let after = addrs()?;
    let gone: Vec<&String> = before.difference(&after).collect();
    check!(gone.len() == 1, "vanished: {gone:?}");
    let (_, gone_dev, gone_info) = open
        .iter()
        .find(|(a, _, _)| a == gone[0])
        .ok_or("lost track of the unplugged device")?;
    let gone_info = gone_info.clone();

    // Nothing was lost: the unplugged device's pages were evicted to RAM.
    for (addr, m, seed) in &parked {
        svm::verify(m.bytes(), *seed).map_err(|e| format!("data parked on {addr}: {e}"))?;
    }
    drop(parked);
    for (addr, _big, start, seed) in &parked_thp {
        // SAFETY: inside `_big`, alive.
        let b = unsafe { std::slice::from_raw_parts(*start as *const u8, 4 << 20) };
        svm::verify(b, *seed).map_err(|e| format!("2 MiB folios parked on {addr}: {e}"))?;
    }
    drop(parked_thp);
    check!(
        msvm_rt::checksum(shared.bytes()) == shared_sum,
        "the read-mostly buffer changed"
    );
    crate::replicas::check_pinned(&pinned)?;
    for (addr, dev, _) in open.iter().filter(|(a, _, _)| a != gone[0]) {
        // The sysfs link goes before the driver's remove runs: while the
        // unplugged device's memory goes home, a job on another stops
        // with EAGAIN (uapi.rst), and is run again.
        let mut tries = 0;
        let j = loop {
            match dev.exec(msvm_rt::Exec::Checksum, shared.addr(), shared.len(), false) {
                Err(e) if e.errno() == Some(Errno::EAGAIN) && tries < 300 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(100));
                }
                r => break r.map_err(|e| format!("{addr}: {e}"))?,
            }
        };
        check!(
            j.result == shared_sum,
            "{addr}: read-mostly checksum after the unplug"
        );
    }
    drop((shared, pinned));
    let left = std::fs::read_to_string("/sys/kernel/debug/msvm/fail_large_system")
        .map_err(|e| e.to_string())?;
    crate::large::fail_large_system(0)?;
    check!(
        left.trim() == "0",
        "eviction did not retry its 2 MiB folios: {} injected failures left",
        left.trim()
    );

    // New work on the unplugged device fails at once with ENODEV.
    let r = gone_dev.query().err().and_then(|e| e.errno());
    check!(r == Some(Errno::ENODEV), "QUERY on unplugged device: {r:?}");
    // The others no longer see it.
    for (addr, dev, _) in open.iter().filter(|(a, _, _)| a != gone[0]) {
        // The sysfs link goes before the driver's remove runs: the device
        // leaves the topology once its memory is in system RAM.
        wait_for("topology updated", 30, &mut || {
            Ok(
                dev.query().map_err(|e| format!("{addr}: {e}"))?.num_devices as usize
                    == after.len(),
            )
        })?;
        let i = dev.query().map_err(|e| format!("{addr}: {e}"))?;
        check!(
            i.num_devices as usize == after.len(),
            "{addr}: num_devices {}",
            i.num_devices
        );
        check!(
            i.peers.iter().all(|p| p.index != gone_info.index),
            "{addr} still lists gpu{}",
            gone_info.index
        );
        let r = dev
            .query_device(Some(gone_info.index))
            .err()
            .and_then(|e| e.errno());
        check!(
            r == Some(Errno::ENOENT),
            "{addr}: QUERY gpu{}: {r:?}",
            gone_info.index
        );
    }
    open.clear();

    host_wait("device_add", "GPU bound again", 40, || {
        Ok(addrs()? == before)
    })?;
    // It is back, with its index and its P2P links.
    let gpus = sysfs::msvm_gpus()?;
    let back = gpus
        .iter()
        .find(|g| &g.addr == gone[0])
        .ok_or("re-plugged GPU missing")?;
    let dev = Device::open(&back.node).map_err(|e| e.to_string())?;
    let info = dev.query().map_err(|e| e.to_string())?;
    check!(
        info.index == gone_info.index,
        "index {} after re-plug, was {}",
        info.index,
        gone_info.index
    );
    check!(
        info.peers == gone_info.peers,
        "peers {:?} after re-plug, were {:?}",
        info.peers,
        gone_info.peers
    );
    Ok(())
}

/// `msvm-tests hold READY GO`: parks data on the first device through a VM
/// whose file is then closed, creates READY, waits for GO to exist (the
/// module is unloaded meanwhile: every page must reach system RAM), then
/// checks the data. Exit status 0 when every byte is intact.
pub fn hold(ready: &str, go: &str) -> Outcome {
    let dev = svm::gpu0()?;
    let mut m = svm::Map::new(256 * svm::PAGE)?;
    svm::fill(m.bytes_mut(), 4242);
    let out = dev
        .migrate_slice(m.bytes(), Location::Device)
        .map_err(|e| e.to_string())?;
    check!(out.moved == 256, "{out:?}");
    drop(dev);
    std::fs::write(ready, "").map_err(|e| e.to_string())?;
    wait_for("go", 120, &mut || Ok(std::path::Path::new(go).exists()))?;
    svm::verify(m.bytes(), 4242)?;
    println!("# hold: 256 pages parked on the device before it went away are intact");
    Ok(())
}

/// `msvm-tests unplug-loop ROUNDS`: hot-unplugs the victim GPU (P2P peer of
/// gpu0) and plugs it back, ROUNDS times. Each round, with fresh random
/// data: data parked on it; a thread running gpu0 jobs in place on other
/// data on it (peer execution over P2P); a thread migrating a third buffer
/// to it and back; a forked child sharing copy-on-write pages that live on
/// it. After the unplug every byte is checked, by the parent and by the
/// child, and every job's checksum was right. Prints a line per round.
pub fn unplug_loop(rounds: u32) -> Outcome {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let before = addrs()?;
    for round in 0..rounds {
        let t0 = Instant::now();
        let gpus = sysfs::msvm_gpus()?;
        check!(
            gpus.len() == before.len(),
            "round {round}: {} GPUs",
            gpus.len()
        );
        let devs: Vec<Device> = gpus
            .iter()
            .map(|g| {
                let d = Device::open(&g.node).map_err(|e| e.to_string())?;
                d.vm_create().map_err(|e| e.to_string())?;
                Ok(d)
            })
            .collect::<Result<_, String>>()?;
        // gpu0 and its P2P peer (the victim, QEMU's "gpu1").
        let (g0, victim) = (&devs[0], &devs[1]);
        let seed = 0x5eed_0000 + u64::from(round) * 16;
        let bufs: Vec<svm::Map> = (0..4)
            .map(|k| {
                let mut m = svm::Map::new(64 * svm::PAGE)?;
                svm::fill(m.bytes_mut(), seed + k);
                Ok(m)
            })
            .collect::<Result<_, String>>()?;
        // Parked (A), executed on by the peer (B), COW-shared with a child (D).
        for k in [0, 1, 3] {
            let out = victim
                .migrate_slice(bufs[k].bytes(), Location::Device)
                .map_err(|e| e.to_string())?;
            check!(out.moved == 64, "round {round}: park {k}: {out:?}");
        }
        let (rd, wr) = nix::unistd::pipe().map_err(|e| e.to_string())?;
        // SAFETY: the child only reads its memory, waits on a pipe and exits.
        let child = match unsafe { nix::unistd::fork() }.map_err(|e| e.to_string())? {
            nix::unistd::ForkResult::Child => {
                drop(wr);
                let mut b = [0u8; 1];
                let _ = nix::unistd::read(&rd, &mut b);
                let ok = svm::verify(bufs[3].bytes(), seed + 3).is_ok();
                // SAFETY: leaving the child without the parent's destructors.
                unsafe { nix::libc::_exit(if ok { 0 } else { 1 }) }
            }
            nix::unistd::ForkResult::Parent { child } => child,
        };
        drop(rd);
        let stop = AtomicBool::new(false);
        let jobs = AtomicU64::new(0);
        let moves = AtomicU64::new(0);
        let res = std::thread::scope(|s| -> Outcome {
            let want_b = msvm_rt::checksum(bufs[1].bytes());
            let (b, blen) = (bufs[1].addr(), bufs[1].len());
            let (c, clen) = (bufs[2].addr(), bufs[2].len());
            let (stop, jobs, moves) = (&stop, &jobs, &moves);
            let peer_exec = s.spawn(move || -> Outcome {
                while !stop.load(Ordering::Relaxed) {
                    let r = match g0.exec(msvm_rt::Exec::Checksum, b, blen, true) {
                        // The victim began to go away during the job: it
                        // stopped short; again.
                        Err(e) if e.errno() == Some(Errno::EAGAIN) => continue,
                        r => r.map_err(|e| e.to_string())?,
                    };
                    check!(r.result == want_b, "peer job checksum differs");
                    jobs.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            });
            let migrator = s.spawn(move || -> Outcome {
                while !stop.load(Ordering::Relaxed) {
                    for to in [Location::Device, Location::System] {
                        match victim.migrate(c, clen, to) {
                            Ok(_) => moves.fetch_add(1, Ordering::Relaxed),
                            // The device is gone, or going.
                            Err(e) if e.errno() == Some(Errno::ENODEV) => return Ok(()),
                            Err(e) if e.errno() == Some(Errno::EAGAIN) => continue,
                            Err(e) => return Err(format!("migration: {e}")),
                        };
                    }
                }
                Ok(())
            });
            // The unplug races both only once both run, however slow the
            // machine (a thread that failed ends the wait too).
            let t = Instant::now();
            while (jobs.load(Ordering::Relaxed) == 0 || moves.load(Ordering::Relaxed) == 0)
                && !peer_exec.is_finished()
                && !migrator.is_finished()
                && t.elapsed() < Duration::from_secs(60)
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            let gone = host_wait("device_del", "GPU unbound", 60, || {
                Ok(addrs()?.len() == before.len() - 1)
            });
            stop.store(true, Ordering::Relaxed);
            let r1 = peer_exec
                .join()
                .map_err(|_| "peer job panicked".to_string())?;
            let r2 = migrator
                .join()
                .map_err(|_| "migrator panicked".to_string())?;
            gone.and(r1).and(r2)?;
            check!(
                jobs.load(Ordering::Relaxed) > 0 && moves.load(Ordering::Relaxed) > 0,
                "no peer job or no migration ran before the unplug"
            );
            Ok(())
        });
        // Let the child check its copy-on-write pages now.
        let _ = nix::unistd::write(&wr, b"g");
        drop(wr);
        let st = nix::sys::wait::waitpid(child, None).map_err(|e| e.to_string())?;
        res.map_err(|e| format!("round {round}: {e}"))?;
        check!(
            matches!(st, nix::sys::wait::WaitStatus::Exited(_, 0)),
            "round {round}: child's copy-on-write data: {st:?}"
        );
        for (k, m) in bufs.iter().enumerate() {
            svm::verify(m.bytes(), seed + k as u64)
                .map_err(|e| format!("round {round}: buffer {k}: {e}"))?;
        }
        drop(devs);
        host_wait("device_add", "GPU bound again", 60, || {
            Ok(addrs()? == before)
        })?;
        println!(
            "# unplug round {}/{rounds}: {} peer jobs, {} migrations during the unplug, 4 x 256 KiB intact, {:.1} s",
            round + 1,
            jobs.load(Ordering::Relaxed),
            moves.load(Ordering::Relaxed),
            t0.elapsed().as_secs_f64()
        );
    }
    println!("# unplug loop: {rounds} rounds, 0 bytes lost");
    Ok(())
}
