//! VRAM limits per cgroup: each device's memory is a region of the kernel's
//! dmem cgroup controller (`drm/<pci address>/vram`), every page a process
//! moves in is charged to its cgroup, and `dmem.max` keeps a cgroup's pages
//! out (or makes room among its own) without touching another cgroup's.
//! `dmem.current` is checked against msvm's own residency at every step.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use msvm_rt::{Device, Exec, Location, Place};

use crate::check;
use crate::harness::{Outcome, Test};
use crate::svm::{fill, gpu0, verify, Map, PAGE};

pub fn tests() -> Vec<Test> {
    vec![
        Test {
            name: "cgroup_dmem_region_per_device",
            run: regions,
        },
        Test {
            name: "cgroup_dmem_max_limits_one_cgroup_not_its_sibling",
            run: limit,
        },
        Test {
            name: "cgroup_dmem_max_is_exact_in_4k_pages",
            run: limit_small,
        },
        Test {
            name: "cgroup_dmem_max_under_2m_moves_thps_in_4k_pages",
            run: limit_thp,
        },
        Test {
            name: "cgroup_dmem_max_on_a_full_device_evicts_only_its_own",
            run: limit_full,
        },
        Test {
            name: "cgroup_dmem_min_keeps_pages_on_a_full_device",
            run: protect,
        },
        Test {
            name: "cgroup_charges_of_migrate_prefetch_and_jobs_go_with_the_pages",
            run: follow,
        },
        Test {
            name: "cgroup_charges_go_when_a_process_exits_with_pages_on_a_device",
            run: exit,
        },
        Test {
            name: "cgroup_moved_process_keeps_its_old_charges",
            run: moved,
        },
    ]
}

const ROOT: &str = "/sys/fs/cgroup";
const MIB: u64 = 1 << 20;

fn read(path: &Path) -> Result<String, String> {
    fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn write(path: &Path, what: &str) -> Result<(), String> {
    fs::write(path, what).map_err(|e| format!("{} <- {what:?}: {e}", path.display()))
}

/// The dmem region of `dev`'s memory, as the controller names it.
pub fn region(dev: &Device) -> Result<String, String> {
    let q = dev.query().map_err(|e| e.to_string())?;
    Ok(format!("drm/{}/vram", q.pci))
}

/// The value of `region` in a dmem file (`<region> <value>` lines).
fn value(text: &str, region: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let (r, v) = l.split_once(' ')?;
        (r == region).then(|| v.trim().to_string())
    })
}

/// A cgroup under the root, with the dmem controller; removed on drop (the
/// calling process moved back to the root first if it is in it).
pub struct Cgroup {
    path: PathBuf,
}

impl Cgroup {
    pub fn new(name: &str) -> Result<Self, String> {
        let root = Path::new(ROOT);
        if !root.join("cgroup.controllers").exists() {
            return Err(format!("cgroup2 is not mounted on {ROOT}"));
        }
        let ctl = read(&root.join("cgroup.subtree_control"))?;
        if !ctl.split_whitespace().any(|c| c == "dmem") {
            write(&root.join("cgroup.subtree_control"), "+dmem")?;
        }
        let path = root.join(name);
        // A leftover of an earlier run that failed.
        let _ = fs::remove_dir(&path);
        fs::create_dir(&path).map_err(|e| format!("mkdir {}: {e}", path.display()))?;
        Ok(Self { path })
    }

    /// Moves the calling process (all its threads) into the cgroup.
    pub fn enter(&self) -> Result<(), String> {
        write(
            &self.path.join("cgroup.procs"),
            &std::process::id().to_string(),
        )
    }

    /// Sets `dmem.max` of `region` (`None`: no limit).
    pub fn set_max(&self, region: &str, bytes: Option<u64>) -> Result<(), String> {
        let v = bytes.map_or("max".to_string(), |b| b.to_string());
        write(&self.path.join("dmem.max"), &format!("{region} {v}"))
    }

    /// `dmem.current` of `region`, in bytes.
    pub fn current(&self, region: &str) -> Result<u64, String> {
        let text = read(&self.path.join("dmem.current"))?;
        value(&text, region)
            .ok_or_else(|| format!("no {region} in dmem.current: {text:?}"))?
            .parse()
            .map_err(|e| format!("dmem.current of {region}: {e}"))
    }
}

/// Moves the calling process back to the root cgroup.
pub fn leave() -> Result<(), String> {
    write(
        &Path::new(ROOT).join("cgroup.procs"),
        &std::process::id().to_string(),
    )
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let procs = fs::read_to_string(self.path.join("cgroup.procs")).unwrap_or_default();
        if procs
            .lines()
            .any(|p| p.trim() == std::process::id().to_string())
        {
            let _ = leave();
        }
        let _ = fs::remove_dir(&self.path);
    }
}

/// Bytes of `m` that RESIDENCY finds in `dev`'s memory.
fn on_device(dev: &Device, m: &Map) -> Result<u64, String> {
    let index = dev.index().map_err(|e| e.to_string())? as usize;
    let r = dev
        .residency(m.addr(), m.len())
        .map_err(|e| e.to_string())?;
    Ok(r.devices[index])
}

/// Every msvm device is a region whose capacity is its memory in chunks.
fn regions() -> Outcome {
    // The controller enabled under the root.
    drop(Cgroup::new("msvm-test-regions")?);
    let cap = read(&Path::new(ROOT).join("dmem.capacity"))?;
    let devs = crate::svm::every_gpu_with_vm()?;
    check!(!devs.is_empty(), "no GPU");
    for d in &devs {
        let r = region(d)?;
        let size = d.stats().map_err(|e| e.to_string())?.vram_size;
        check!(
            value(&cap, &r) == Some(size.to_string()),
            "{r}: capacity {:?}, VRAM {size}: {cap:?}",
            value(&cap, &r)
        );
    }
    Ok(())
}

/// B, unlimited, moves 128 MiB to gpu0; then A, limited to 64 MiB there,
/// moves 128 MiB: 64 MiB lands, the rest is `no_vram`, and B keeps all of
/// its pages. A's next request makes room among A's own pages only, though
/// B's are older. `dmem.current` is the residency msvm reports at every
/// step (printed), and every byte is intact.
fn limit() -> Outcome {
    let dev = gpu0()?;
    let r = region(&dev)?;
    let a = Cgroup::new("msvm-test-a")?;
    let b = Cgroup::new("msvm-test-b")?;
    a.set_max(&r, Some(64 * MIB))?;
    let (ca, cb) = (a.current(&r)?, b.current(&r)?);
    println!("# limit: fresh cgroups: dmem.current A {ca}, B {cb}");
    check!(ca == 0 && cb == 0, "fresh cgroups charged");
    let pages = |bytes: u64| bytes / PAGE as u64;

    b.enter()?;
    let mut mb = Map::new(128 * MIB as usize)?;
    fill(mb.bytes_mut(), 18);
    let out = dev
        .migrate_slice(mb.bytes(), Location::Device)
        .map_err(|e| e.to_string())?;
    let (cb, rb) = (b.current(&r)?, on_device(&dev, &mb)?);
    println!("# limit: B moved 128 MiB: {out:?}; dmem.current B {cb}, B on gpu0 {rb}");
    check!(out.moved == pages(128 * MIB), "B, unlimited: {out:?}");
    check!(
        cb == 128 * MIB && rb == cb,
        "B: dmem.current {cb}, on gpu0 {rb}"
    );

    a.enter()?;
    let mut ma = Map::new(128 * MIB as usize)?;
    fill(ma.bytes_mut(), 17);
    let s0 = dev.stats().map_err(|e| e.to_string())?;
    let out = dev
        .migrate_slice(ma.bytes(), Location::Device)
        .map_err(|e| e.to_string())?;
    let s1 = dev.stats().map_err(|e| e.to_string())?;
    // STATS: the device's charges, and the pages the limit kept out.
    check!(
        s1.cgroup_limited - s0.cgroup_limited == pages(64 * MIB) && s1.cgroup_bytes == 192 * MIB,
        "STATS: cgroup_limited +{}, cgroup_bytes {}",
        s1.cgroup_limited - s0.cgroup_limited,
        s1.cgroup_bytes
    );
    let (ca, ra) = (a.current(&r)?, on_device(&dev, &ma)?);
    let (cb, rb) = (b.current(&r)?, on_device(&dev, &mb)?);
    println!(
        "# limit: A moved 128 MiB: {out:?}; dmem.current A {ca}, A on gpu0 {ra}; B {cb}, B on gpu0 {rb}"
    );
    check!(
        out.moved == pages(64 * MIB) && out.no_vram == pages(64 * MIB),
        "A over its limit: {out:?}"
    );
    check!(
        ca == 64 * MIB && ra == ca,
        "A: dmem.current {ca}, on gpu0 {ra}"
    );
    check!(
        cb == 128 * MIB && rb == cb,
        "B: dmem.current {cb}, on gpu0 {rb}"
    );

    // A's next request: its own older blocks go home to make room for it,
    // none of B's (older still).
    let mut ma2 = Map::new(32 * MIB as usize)?;
    fill(ma2.bytes_mut(), 19);
    let out = dev
        .migrate_slice(ma2.bytes(), Location::Device)
        .map_err(|e| e.to_string())?;
    let (ca, ra) = (
        a.current(&r)?,
        on_device(&dev, &ma)? + on_device(&dev, &ma2)?,
    );
    let (cb, rb) = (b.current(&r)?, on_device(&dev, &mb)?);
    println!(
        "# limit: A moved 32 MiB more: {out:?}; dmem.current A {ca}, A on gpu0 {ra}; B {cb}, B on gpu0 {rb}"
    );
    check!(
        out.moved == pages(32 * MIB),
        "A's second request, room made among its own pages: {out:?}"
    );
    check!(
        ca == 64 * MIB && ra == ca,
        "A: dmem.current {ca}, on gpu0 {ra}"
    );
    check!(
        cb == 128 * MIB && rb == cb,
        "B lost pages to A: dmem.current {cb}, on gpu0 {rb}"
    );

    // Every byte, by the CPU (which faults the pages home: no charge left).
    verify(ma.bytes(), 17)?;
    verify(mb.bytes(), 18)?;
    verify(ma2.bytes(), 19)?;
    let (ca, cb) = (a.current(&r)?, b.current(&r)?);
    println!("# limit: every byte read back by the CPU: dmem.current A {ca}, B {cb}");
    check!(
        ca == 0 && cb == 0,
        "charges left after fault-back: A {ca}, B {cb}"
    );
    leave()
}

/// A limit that is no multiple of 2 MiB, for 4 KiB pages: exactly what it
/// allows moves, and STATS counts the rest as kept out by the limit.
fn limit_small() -> Outcome {
    let dev = gpu0()?;
    let r = region(&dev)?;
    let c = Cgroup::new("msvm-test-small")?;
    c.set_max(&r, Some(1536 * 1024))?;
    c.enter()?;
    let mut m = Map::small(4 * MIB as usize)?;
    fill(m.bytes_mut(), 51);
    let s0 = dev.stats().map_err(|e| e.to_string())?;
    let out = dev
        .migrate_slice(m.bytes(), Location::Device)
        .map_err(|e| e.to_string())?;
    let s1 = dev.stats().map_err(|e| e.to_string())?;
    let (cur, res) = (c.current(&r)?, on_device(&dev, &m)?);
    println!("# limit 1536K: {out:?}; dmem.current {cur}, on gpu0 {res}");
    check!(out.moved == 384 && out.no_vram == 640, "{out:?}");
    check!(
        cur == 1536 * 1024 && res == cur,
        "dmem.current {cur}, on gpu0 {res}"
    );
    check!(
        s1.cgroup_limited - s0.cgroup_limited == 640,
        "STATS cgroup_limited +{}",
        s1.cgroup_limited - s0.cgroup_limited
    );
    // debugfs says the same.
    let index = dev.index().map_err(|e| e.to_string())?;
    let dbg = read(Path::new("/sys/kernel/debug/msvm/cgroup"))?;
    let want = format!("{index} {} {}", s1.cgroup_bytes, s1.cgroup_limited);
    check!(
        s1.cgroup_bytes == cur && dbg.lines().any(|l| l == want),
        "debugfs cgroup {dbg:?}, STATS {want:?}"
    );
    verify(m.bytes(), 51)?;
    check!(c.current(&r)? == 0, "after fault-back: {}", c.current(&r)?);
    leave()
}

/// A limit of 1 MiB, for THPs: no 2 MiB folio fits, so the first is moved
/// in 4 KiB pages, as many as the limit takes (256); the second, with the
/// cgroup at its limit, stays whole in RAM.
fn limit_thp() -> Outcome {
    let dev = gpu0()?;
    let r = region(&dev)?;
    let c = Cgroup::new("msvm-test-thp")?;
    c.set_max(&r, Some(MIB))?;
    c.enter()?;
    let len = 4 * MIB as usize;
    let (_big, start) = crate::large::thp_region(len, 61)?;
    let out = dev
        .migrate(start, len, Location::Device)
        .map_err(|e| e.to_string())?;
    let cur = c.current(&r)?;
    println!("# limit 1M, THPs: {out:?}; dmem.current {cur}");
    check!(out.moved == 256 && out.no_vram == 768, "{out:?}");
    check!(cur == MIB, "dmem.current {cur}");
    // The first THP was split to move 1 MiB of it; the second, with the
    // cgroup at its limit, stayed whole.
    let thps = crate::large::thps_at(start)?;
    check!(thps == 1, "{thps} THPs left of 2");
    crate::svm::verify(crate::large::bytes(start, len), 61)?;
    check!(c.current(&r)? == 0, "after fault-back: {}", c.current(&r)?);
    leave()
}

/// gpu0 full: B's 192 MiB, then A's 64 MiB, A at its 64 MiB limit. A's next
/// 32 MiB make room among A's own pages, though B's are older and the
/// device has no free page: room for a full device would take B's.
fn limit_full() -> Outcome {
    let dev = gpu0()?;
    let r = region(&dev)?;
    let vram = dev.stats().map_err(|e| e.to_string())?.vram_size;
    let a = Cgroup::new("msvm-test-fa")?;
    let b = Cgroup::new("msvm-test-fb")?;
    a.set_max(&r, Some(64 * MIB))?;
    b.enter()?;
    let mut mb = Map::new((vram - 64 * MIB) as usize)?;
    fill(mb.bytes_mut(), 71);
    dev.migrate_slice(mb.bytes(), Location::Device)
        .map_err(|e| e.to_string())?;
    a.enter()?;
    let mut ma = Map::new(64 * MIB as usize)?;
    fill(ma.bytes_mut(), 72);
    dev.migrate_slice(ma.bytes(), Location::Device)
        .map_err(|e| e.to_string())?;
    let free = vram - on_device(&dev, &mb)? - on_device(&dev, &ma)?;
    check!(free == 0, "gpu0 not full: {free} bytes free");
    let mut ma2 = Map::new(32 * MIB as usize)?;
    fill(ma2.bytes_mut(), 73);
    let out = dev
        .migrate_slice(ma2.bytes(), Location::Device)
        .map_err(|e| e.to_string())?;
    let (ca, rb) = (a.current(&r)?, on_device(&dev, &mb)?);
    println!("# full: A's 32 MiB more: {out:?}; dmem.current A {ca}; B on gpu0 {rb}");
    check!(
        rb == vram - 64 * MIB && b.current(&r)? == rb,
        "B lost pages to A: {rb} bytes left"
    );
    check!(
        out.moved == 8192 && ca == 64 * MIB,
        "A: {out:?}, dmem.current {ca}"
    );
    verify(mb.bytes(), 71)?;
    verify(ma.bytes(), 72)?;
    verify(ma2.bytes(), 73)?;
    leave()
}

/// P, with `dmem.min` 64 MiB on gpu0, has 64 MiB there; Q fills the whole
/// device after it. Making room on the full device evicts the oldest blocks
/// first, which would be P's: `dmem.min` keeps them, and Q's request gets
/// what is left.
fn protect() -> Outcome {
    let dev = gpu0()?;
    let r = region(&dev)?;
    let vram = dev.stats().map_err(|e| e.to_string())?.vram_size;
    let p = Cgroup::new("msvm-test-p")?;
    let q = Cgroup::new("msvm-test-q")?;
    write(&p.path.join("dmem.min"), &format!("{r} {}", 64 * MIB))?;
    p.enter()?;
    let mut mp = Map::new(64 * MIB as usize)?;
    fill(mp.bytes_mut(), 41);
    dev.migrate_slice(mp.bytes(), Location::Device)
        .map_err(|e| e.to_string())?;
    check!(p.current(&r)? == 64 * MIB, "P: {}", p.current(&r)?);
    q.enter()?;
    let mut mq = Map::new(vram as usize)?;
    fill(mq.bytes_mut(), 42);
    let out = dev
        .migrate_slice(mq.bytes(), Location::Device)
        .map_err(|e| e.to_string())?;
    let (pres, qres) = (on_device(&dev, &mp)?, on_device(&dev, &mq)?);
    println!(
        "# protect: Q moved {} pages, no_vram {}; dmem.current P {} Q {}",
        out.moved,
        out.no_vram,
        p.current(&r)?,
        q.current(&r)?
    );
    check!(
        pres == 64 * MIB && p.current(&r)? == pres,
        "P's protected pages evicted: {pres} bytes left on gpu0, {out:?}"
    );
    check!(
        qres + pres <= vram && qres == q.current(&r)? && out.no_vram >= 64 * MIB / PAGE as u64,
        "Q: {qres} bytes on gpu0, {out:?}"
    );
    verify(mp.bytes(), 41)?;
    verify(mq.bytes(), 42)?;
    check!(
        p.current(&r)? == 0 && q.current(&r)? == 0,
        "charges left: P {}, Q {}",
        p.current(&r)?,
        q.current(&r)?
    );
    leave()
}

/// Charges follow the pages: taken by MIGRATE, PREFETCH and a job that
/// migrates; gone after a CPU fault-back and after MIGRATE to system RAM
/// (consolidation: `lifecycle_consolidation_keeps_data`).
fn follow() -> Outcome {
    let dev = gpu0()?;
    let r = region(&dev)?;
    let c = Cgroup::new("msvm-test-follow")?;
    c.enter()?;
    let mut m = Map::small(8 * MIB as usize)?;
    fill(m.bytes_mut(), 21);
    dev.migrate_slice(m.bytes(), Location::Device)
        .map_err(|e| e.to_string())?;
    let (cur, res) = (c.current(&r)?, on_device(&dev, &m)?);
    check!(
        cur == 8 * MIB && res == cur,
        "after MIGRATE: dmem.current {cur}, on gpu0 {res}"
    );
    verify(m.bytes(), 21)?;
    check!(c.current(&r)? == 0, "after fault-back: {}", c.current(&r)?);

    dev.migrate_slice(m.bytes(), Location::Device)
        .map_err(|e| e.to_string())?;
    check!(c.current(&r)? == 8 * MIB, "again: {}", c.current(&r)?);
    dev.migrate_slice(m.bytes(), Location::System)
        .map_err(|e| e.to_string())?;
    check!(
        c.current(&r)? == 0,
        "after MIGRATE home: {}",
        c.current(&r)?
    );

    // PREFETCH, and a job that migrates its pages first: the same charges.
    dev.prefetch(m.addr(), m.len(), Place::Here)
        .map_err(|e| e.to_string())?;
    check!(
        c.current(&r)? == 8 * MIB,
        "after PREFETCH: {}",
        c.current(&r)?
    );
    verify(m.bytes(), 21)?;
    check!(c.current(&r)? == 0, "after fault-back: {}", c.current(&r)?);
    let job = dev
        .exec(Exec::Fill(0x5a5a_5a5a_5a5a_5a5a), m.addr(), m.len(), false)
        .map_err(|e| e.to_string())?;
    let (cur, res) = (c.current(&r)?, on_device(&dev, &m)?);
    check!(
        cur == 8 * MIB && res == cur,
        "after an EXEC that migrated {} pages: dmem.current {cur}, on gpu0 {res}",
        job.migrated
    );
    check!(m.bytes().iter().all(|&b| b == 0x5a), "FILL's bytes");
    check!(c.current(&r)? == 0, "after fault-back: {}", c.current(&r)?);
    leave()
}

/// Waits until `f` says yes, for at most `secs` seconds.
/// A child that parks 1 MiB on gpu0 (`msvm-tests hold READY GO`), born in
/// the calling process's cgroup.
pub fn spawn_hold(ready: &str, go: &str) -> Result<std::process::Child, String> {
    let _ = fs::remove_file(ready);
    let _ = fs::remove_file(go);
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    std::process::Command::new(exe)
        .args(["hold", ready, go])
        .stdout(std::process::Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())
}

/// Polls `f` every 50 ms until it holds, for `secs` at most.
pub fn wait(secs: u64, what: &str, f: &mut dyn FnMut() -> Result<bool, String>) -> Outcome {
    let t = Instant::now();
    while !f()? {
        if t.elapsed() > Duration::from_secs(secs) {
            return Err(format!("timed out waiting for {what}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// A child that parks 1 MiB on gpu0 and is killed: its cgroup's charge goes
/// with its address space.
fn exit() -> Outcome {
    let dev = gpu0()?;
    let r = region(&dev)?;
    let c = Cgroup::new("msvm-test-exit")?;
    let (ready, go) = ("/tmp/cg-ready", "/tmp/cg-go");
    // The child is born in the cgroup.
    c.enter()?;
    let child = spawn_hold(ready, go);
    leave()?;
    let mut child = child?;
    let parked = wait(60, "the child's pages", &mut || {
        Ok(Path::new(ready).exists())
    });
    let cur = c.current(&r);
    let _ = child.kill();
    let _ = child.wait();
    parked?;
    check!(
        cur.clone()? == MIB,
        "child's pages on gpu0: dmem.current {cur:?}"
    );
    check!(
        c.current(&r)? == 0,
        "after the child's exit: {}",
        c.current(&r)?
    );
    Ok(())
}

/// A process moved to another cgroup keeps the charges of the pages it has
/// (as memcg does); its new pages are charged to the new cgroup.
fn moved() -> Outcome {
    let dev = gpu0()?;
    let r = region(&dev)?;
    let (e, f) = (Cgroup::new("msvm-test-e")?, Cgroup::new("msvm-test-f")?);
    e.enter()?;
    let mut m1 = Map::new(4 * MIB as usize)?;
    fill(m1.bytes_mut(), 31);
    dev.migrate_slice(m1.bytes(), Location::Device)
        .map_err(|e| e.to_string())?;
    f.enter()?;
    check!(
        e.current(&r)? == 4 * MIB && f.current(&r)? == 0,
        "after the move: E {}, F {}",
        e.current(&r)?,
        f.current(&r)?
    );
    let mut m2 = Map::new(4 * MIB as usize)?;
    fill(m2.bytes_mut(), 32);
    dev.migrate_slice(m2.bytes(), Location::Device)
        .map_err(|e| e.to_string())?;
    check!(
        e.current(&r)? == 4 * MIB && f.current(&r)? == 4 * MIB,
        "new pages: E {}, F {}",
        e.current(&r)?,
        f.current(&r)?
    );
    verify(m1.bytes(), 31)?;
    check!(
        e.current(&r)? == 0,
        "E after its pages went home: {}",
        e.current(&r)?
    );
    verify(m2.bytes(), 32)?;
    check!(
        f.current(&r)? == 0,
        "F after its pages went home: {}",
        f.current(&r)?
    );
    leave()
}
