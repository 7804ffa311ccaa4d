//! `msvm`: the command-line tool of msvm.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use msvm_rt::{Device, DeviceInfo};

#[derive(Parser)]
#[command(name = "msvm", version, about = "Inspect and drive msvm GPUs")]
struct Cli {
    /// Print `info`, `stats` and `demo` (its steps with the buffer's
    /// residency after each) as JSON (for scripts).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List the msvm devices and the P2P matrix between them.
    Info,
    /// Show the counters of every device (migrations, faults, residency).
    Stats {
        /// Show where migration steps and engine jobs spend their time
        /// instead: count and microseconds of each phase, by size class.
        #[arg(long)]
        phases: bool,
    },
    /// Walk through shared virtual memory on the first device: a buffer of
    /// this process moves to the device, the device works on it, the CPU
    /// reads it back; the counters show each step.
    Demo {
        /// Buffer size in MiB.
        #[arg(long, default_value_t = 64)]
        mib: usize,
    },
    /// A live view of every device, refreshed each second: resident memory,
    /// pages and MiB per second migrated in and out, CPU faults per second,
    /// engine P2P traffic, chunks, their struct-page RAM, shrinker work.
    Top {
        /// Print one view (over one second) and exit: for scripts.
        #[arg(long)]
        once: bool,
    },
    /// Show what QUERY returns for one device.
    Query {
        /// Render node to ask through (default: the first msvm device).
        #[arg(long)]
        node: Option<PathBuf>,
        /// msvm index of the device to describe (default: the node's own).
        #[arg(long)]
        device: Option<u32>,
    },
}

fn main() -> ExitCode {
    // Like any Unix filter: a closed pipe (`msvm info | head`) ends the
    // program quietly instead of failing a write.
    // SAFETY: restoring the default disposition, before any thread exists.
    let _ = unsafe {
        nix::sys::signal::signal(
            nix::sys::signal::Signal::SIGPIPE,
            nix::sys::signal::SigHandler::SigDfl,
        )
    };
    let cli = Cli::parse();
    let res = match cli.command {
        Command::Info if cli.json => info_json(),
        Command::Stats { .. } if cli.json => stats_json(),
        Command::Info => info(),
        Command::Stats { phases: false } => stats(),
        Command::Stats { phases: true } => phases(),
        Command::Demo { mib } => demo(mib, cli.json),
        Command::Query { node, device } => query(node, device),
        Command::Top { once } => top(once),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("msvm: {e}");
            ExitCode::FAILURE
        }
    }
}

fn mib(bytes: u64) -> String {
    format!("{} MiB", bytes >> 20)
}

fn kib(bytes: u64) -> String {
    format!("{} KiB", bytes >> 10)
}

/// `msvm --json info`: every device as QUERY describes it, with its render
/// node, in index order.
fn info_json() -> msvm_rt::Result<()> {
    let mut out = Vec::new();
    for d in Device::all()? {
        let i = d.query()?;
        out.push(
            serde_json::json!({ "node": d.path(), "pci_address": i.pci.to_string(), "query": i }),
        );
    }
    out.sort_by_key(|v| v["query"]["index"].as_u64());
    println!("{}", serde_json::Value::Array(out));
    Ok(())
}

/// `msvm --json stats`: every device's STATS counters, by field name, in
/// index order (units as in the uAPI header: pages unless named otherwise).
fn stats_json() -> msvm_rt::Result<()> {
    let mut out = Vec::new();
    for d in Device::all()? {
        let i = d.query()?;
        out.push(serde_json::json!({ "index": i.index, "node": d.path(), "stats": d.stats()? }));
    }
    out.sort_by_key(|v| v["index"].as_u64());
    println!("{}", serde_json::Value::Array(out));
    Ok(())
}

fn info() -> msvm_rt::Result<()> {
    let devices = Device::all()?;
    if devices.is_empty() {
        println!("msvm: no devices (is msvm.ko loaded?)");
        return Ok(());
    }
    let mut infos: Vec<(DeviceInfo, &Device)> = Vec::new();
    for d in &devices {
        infos.push((d.query()?, d));
    }
    infos.sort_by_key(|(i, _)| i.index);
    println!(
        "msvm: {} device(s), ABI version {}",
        infos.len(),
        infos[0].0.version
    );
    println!(
        "{:<5} {:<20} {:<13} {:>10} {:>6}",
        "gpu", "node", "pci", "vram", "group"
    );
    for (i, d) in &infos {
        println!(
            "{:<5} {:<20} {:<13} {:>10} {:>6}",
            i.index,
            d.path().display(),
            i.pci.to_string(),
            mib(i.vram_size),
            i.owner_group
        );
    }
    println!();
    println!(
        "(group: owner group; GPUs of one group work on each other's memory in place over P2P)"
    );
    println!();
    println!("P2P matrix (row reads column's memory: pci_p2pdma distance, '-' = no P2P path):");
    print!("{:<6}", "");
    for (i, _) in &infos {
        print!("{:>6}", format!("gpu{}", i.index));
    }
    println!();
    for (row, _) in &infos {
        print!("{:<6}", format!("gpu{}", row.index));
        for (col, _) in &infos {
            let cell = if col.index == row.index {
                ".".to_string()
            } else {
                match row.peers.iter().find(|p| p.index == col.index) {
                    Some(p) if p.p2p => p.distance.map_or("?".into(), |d| d.to_string()),
                    Some(_) => "-".into(),
                    None => "?".into(),
                }
            };
            print!("{cell:>6}");
        }
        println!();
    }
    println!();
    println!("P2P paths (pci_p2pdma's, row reads column's memory):");
    for (row, _) in &infos {
        for p in &row.peers {
            println!(
                "gpu{} -> gpu{}: {} ({})",
                row.index,
                p.index,
                p.path,
                p.why()
            );
        }
    }
    Ok(())
}

/// `msvm stats --phases`: per device, the phase split of migration steps
/// by size class, then of engine jobs.
fn phases() -> msvm_rt::Result<()> {
    use msvm_rt::abi::{MSVM_SIZE_2M, MSVM_SIZE_4K, MSVM_SIZE_64K};
    let devices = Device::all()?;
    if devices.is_empty() {
        println!("msvm: no devices (is msvm.ko loaded?)");
        return Ok(());
    }
    println!(
        "{:<5} {:<6} {:>9} {:>12} {:>12} {:>12} {:>12} {:>9}",
        "gpu", "size", "steps", "collect_us", "alloc_us", "copy_us", "install_us", "us/step"
    );
    for d in &devices {
        let i = d.query()?;
        let s = d.stats()?;
        for (c, name) in [
            (MSVM_SIZE_4K, "4k"),
            (MSVM_SIZE_64K, "64k"),
            (MSVM_SIZE_2M, "2m"),
        ] {
            let total = s.phase_collect_us[c]
                + s.phase_alloc_us[c]
                + s.phase_copy_us[c]
                + s.phase_install_us[c];
            println!(
                "{:<5} {:<6} {:>9} {:>12} {:>12} {:>12} {:>12} {:>9.1}",
                i.index,
                name,
                s.phase_steps[c],
                s.phase_collect_us[c],
                s.phase_alloc_us[c],
                s.phase_copy_us[c],
                s.phase_install_us[c],
                total as f64 / s.phase_steps[c].max(1) as f64
            );
        }
    }
    println!();
    println!(
        "{:<5} {:>9} {:>12} {:>12} {:>12} {:>12}",
        "gpu", "jobs", "place_us", "walk_us", "bind_us", "exec_us"
    );
    for d in &devices {
        let i = d.query()?;
        let s = d.stats()?;
        println!(
            "{:<5} {:>9} {:>12} {:>12} {:>12} {:>12}",
            i.index, s.job_count, s.job_place_us, s.job_walk_us, s.job_bind_us, s.job_exec_us
        );
    }
    println!(
        "(steps: migration steps both ways: 4k in 4 KiB pages, 64k CPU fault windows, 2m whole \
         2 MiB folios; collect: migrate_vma_setup; install: migrate_vma_pages and _finalize; \
         jobs: place = migrations before the run, walk = hmm_range_fault, bind = DMA/P2P \
         mappings, exec = the operation)"
    );
    Ok(())
}

fn stats() -> msvm_rt::Result<()> {
    let devices = Device::all()?;
    if devices.is_empty() {
        println!("msvm: no devices (is msvm.ko loaded?)");
        return Ok(());
    }
    println!(
        "{:<5} {:>10} {:>10} {:>10} {:>10} {:>10} {:>11} {:>10} {:>10} {:>9} {:>8} {:>8} {:>10} {:>13} {:>14}",
        "gpu",
        "resident",
        "to_dev",
        "from_peer",
        "to_sys",
        "cpu_fault",
        "2m_in/out",
        "p2p_rw",
        "evicted",
        "chunks",
        "memmap",
        "shrunk",
        "vram",
        "room/pins/hot",
        "cgroup/limited"
    );
    for d in &devices {
        let i = d.query()?;
        let s = d.stats()?;
        println!(
            "{:<5} {:>10} {:>10} {:>10} {:>10} {:>10} {:>11} {:>10} {:>10} {:>9} {:>8} {:>8} {:>10} {:>13} {:>14}",
            i.index,
            mib(s.resident * 4096),
            mib(s.to_device * 4096),
            mib(s.from_peer * 4096),
            mib(s.to_system * 4096),
            s.cpu_faults,
            format!("{}/{}", s.large_to_device, s.large_to_system),
            mib(s.engine_p2p_read + s.engine_p2p_written),
            mib(s.evicted * 4096),
            format!(
                "{}({})/{}",
                s.chunks_live,
                s.chunks_cached,
                s.vram_size / s.chunk_size.max(1)
            ),
            kib(s.memmap_bytes),
            s.chunks_destroyed,
            mib(s.vram_size),
            format!("{}/{}/{}", s.evict_blocks, s.thrash_pinned, s.access_due),
            format!("{}/{}", mib(s.cgroup_bytes), s.cgroup_limited)
        );
    }
    println!(
        "(sizes in MiB; from_peer: migrated in straight from a peer's memory; cpu_fault: CPU faults \
         on device pages, each bringing back up to 64 KiB or one 2 MiB folio; 2m_in/out: 2 MiB \
         folios moved whole in and out; p2p_rw: engine bytes read and written \
         in peers' memory; chunks: live(of which idle)/total, {} MiB each; memmap: RAM their \
         struct pages take; shrunk: pagemaps the shrinker removed; room/pins/hot: 2 MiB blocks \
         evicted to make room, blocks pinned by thrashing detection, and blocks the access \
         counters found due here; cgroup/limited: memory of the device charged to dmem cgroups \
         now, and pages migrations into it left behind because a cgroup was at its dmem.max)",
        devices[0].stats()?.chunk_size >> 20
    );
    Ok(())
}

/// The processes with an msvm render node open, from their fdinfo (those
/// this user may read): per client, its device, the device memory its
/// process holds there and the time its jobs took.
fn print_clients(devices: &[(DeviceInfo, Device)]) {
    let clients = msvm_rt::clients();
    println!();
    println!(
        "{:>7} {:<16} {:>6} {:<5} {:>10} {:>10}",
        "pid", "process", "client", "gpu", "resident", "jobs ms"
    );
    for c in &clients {
        let gpu = devices
            .iter()
            .find(|(i, _)| i.pci.to_string() == c.pdev)
            .map_or("?".to_string(), |(i, _)| i.index.to_string());
        println!(
            "{:>7} {:<16} {:>6} {:<5} {:>10} {:>10.1}",
            c.pid,
            c.comm,
            c.client_id,
            gpu,
            c.resident.map_or("-".to_string(), mib),
            c.engine_ns as f64 / 1e6
        );
    }
    if clients.is_empty() {
        println!("(no process has an msvm render node open)");
    }
}

/// `msvm top`: counters of every device one second apart, as rates.
fn top(once: bool) -> msvm_rt::Result<()> {
    let mut devices: Vec<(DeviceInfo, Device)> = Vec::new();
    for d in Device::all()? {
        devices.push((d.query()?, d));
    }
    devices.sort_by_key(|(i, _)| i.index);
    if devices.is_empty() {
        println!("msvm: no devices (is msvm.ko loaded?)");
        return Ok(());
    }
    let sample = |devices: &[(DeviceInfo, Device)]| -> msvm_rt::Result<Vec<msvm_rt::Stats>> {
        devices.iter().map(|(_, d)| d.stats()).collect()
    };
    let mut before = sample(&devices)?;
    let mut t0 = std::time::Instant::now();
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
        let now = sample(&devices)?;
        let secs = t0.elapsed().as_secs_f64().max(1e-3);
        t0 = std::time::Instant::now();
        if !once {
            // Clear the screen and go home, as top does.
            print!("\x1b[H\x1b[2J");
        }
        println!(
            "{:<5} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>11}",
            "gpu",
            "resident",
            "in pg/s",
            "in MiB/s",
            "out pg/s",
            "outMiB/s",
            "faults/s",
            "p2pMiB/s",
            "chunks",
            "memmap",
            "shrink"
        );
        for (((info, _), s), b) in devices.iter().zip(&now).zip(&before) {
            let rate = |n: u64| n as f64 / secs;
            let pages_in = s.to_device.saturating_sub(b.to_device);
            let pages_out = s.to_system.saturating_sub(b.to_system);
            let p2p = (s.engine_p2p_read + s.engine_p2p_written)
                .saturating_sub(b.engine_p2p_read + b.engine_p2p_written);
            println!(
                "{:<5} {:>10} {:>9.0} {:>9.1} {:>9.0} {:>9.1} {:>9.0} {:>9.1} {:>10} {:>10} {:>11}",
                info.index,
                mib(s.resident * 4096),
                rate(pages_in),
                rate(pages_in * 4096) / 1048576.0,
                rate(pages_out),
                rate(pages_out * 4096) / 1048576.0,
                rate(s.cpu_faults.saturating_sub(b.cpu_faults)),
                rate(p2p) / 1048576.0,
                format!("{}({})", s.chunks_live, s.chunks_cached),
                kib(s.memmap_bytes),
                format!(
                    "{}/{}",
                    s.shrink_scans.saturating_sub(b.shrink_scans),
                    s.chunks_destroyed.saturating_sub(b.chunks_destroyed)
                )
            );
        }
        println!(
            "(over {secs:.1} s; in/out: pages migrated to the device and to system RAM; faults: CPU \
             faults on its pages; p2p: engine bytes read and written in peers' memory; chunks: \
             live(idle); memmap: RAM their struct pages take; shrink: passes/pagemaps removed)"
        );
        print_clients(&devices);
        if once {
            return Ok(());
        }
        before = now;
    }
}

/// What `demo` says: lines for people, or, with `--json`, one document of
/// steps, each with its text and the buffer's residency after it.
struct Report {
    json: bool,
    steps: Vec<serde_json::Value>,
}

impl Report {
    fn step(&mut self, text: String) {
        if self.json {
            self.steps.push(serde_json::json!({ "text": text }));
        } else {
            println!("{text}");
        }
    }

    /// RESIDENCY of the buffer, as device `index` answered it.
    fn residency(&mut self, index: u32, r: &msvm_rt::Residency) {
        if self.json {
            if let Some(serde_json::Value::Object(step)) = self.steps.last_mut() {
                step.insert(
                    "residency".into(),
                    serde_json::json!({
                        "asked": index,
                        "system": r.system,
                        "none": r.none,
                        "devices": r.devices,
                        "pinned": r.pinned,
                        "replicas": r.replicas,
                        "mixed": r.mixed,
                    }),
                );
            }
            return;
        }
        let mut parts: Vec<String> = r
            .devices
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(i, &n)| format!("gpu{i} {} MiB", n >> 20))
            .collect();
        if r.system > 0 {
            parts.push(format!("system RAM {} MiB", r.system >> 20));
        }
        println!("   residency: {}", parts.join(", "));
    }

    fn finish(self) {
        if self.json {
            println!("{}", serde_json::json!({ "steps": self.steps }));
        }
    }
}

fn demo(mib: usize, json: bool) -> msvm_rt::Result<()> {
    let mut rep = Report {
        json,
        steps: Vec::new(),
    };
    use msvm_rt::{Exec, Location};
    let mut devs = Vec::new();
    for node in Device::render_nodes()? {
        let d = Device::open(node)?;
        d.vm_create()?;
        let i = d.query()?;
        devs.push((i, d));
    }
    devs.sort_by_key(|(i, _)| i.index);
    let Some((_, g0)) = devs.first() else {
        println!("msvm: no devices (is msvm.ko loaded?)");
        return Ok(());
    };
    let len = mib << 20;
    // A page-aligned buffer of this process, written by the CPU.
    let mut buf = vec![0u64; len / 8 + 512];
    let off = buf.as_ptr().align_offset(4096);
    let words = &mut buf[off..off + len / 8];
    for (i, w) in words.iter_mut().enumerate() {
        *w = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    let addr = words.as_ptr() as usize;
    let fnv = |ws: &[u64]| {
        let bytes: Vec<u8> = ws.iter().flat_map(|w| w.to_ne_bytes()).collect();
        msvm_rt::checksum(&bytes)
    };
    let cpu_sum = fnv(words);
    let same = |r: u64| {
        if r == cpu_sum {
            "equal to the CPU's"
        } else {
            "DIFFERENT from the CPU's"
        }
    };
    let m = |pages: u64| (pages * 4096) >> 20;
    let b = |bytes: u64| bytes >> 20;
    // RESIDENCY: where the buffer lives now.
    let whereis = |rep: &mut Report, d: &Device| -> msvm_rt::Result<()> {
        rep.residency(d.index()?, &d.residency(addr, len)?);
        Ok(())
    };

    let t = std::time::Instant::now();
    let out = g0.migrate(addr, len, Location::Device)?;
    rep.step(format!(
        "1. MIGRATE {mib} MiB to gpu0: {} pages moved in {:.0} ms; gpu0 now holds {} MiB of this process",
        out.moved,
        t.elapsed().as_secs_f64() * 1e3,
        m(g0.stats()?.resident)
    ));
    whereis(&mut rep, g0)?;
    let s0 = g0.stats()?;
    let sum = g0.exec(Exec::Checksum, addr, len, false)?;
    let s1 = g0.stats()?;
    rep.step(format!(
        "2. EXEC CHECKSUM on gpu0: {:#018x}, {}; read {} MiB from its VRAM",
        sum.result,
        same(sum.result),
        b(s1.engine_vram_read - s0.engine_vram_read)
    ));
    // A peer of gpu0 over P2P, and a device out of its reach.
    let peer = devs
        .iter()
        .find(|(i, _)| devs[0].0.peers.iter().any(|p| p.p2p && p.index == i.index));
    let far = devs
        .iter()
        .find(|(i, _)| devs[0].0.peers.iter().any(|p| !p.p2p && p.index == i.index));
    let g0i = devs[0].0.index as usize;
    if let Some((pi, pd)) = peer {
        let p0 = pd.stats()?;
        let sum = pd.exec(Exec::Checksum, addr, len, true)?;
        let p1 = pd.stats()?;
        rep.step(format!(
            "3. EXEC CHECKSUM on gpu{} in place: {}; read {} MiB from gpu0 over P2P, migrated {} pages, \
             gpu0 still holds {} MiB",
            pi.index,
            same(sum.result),
            b(p1.peer_read[g0i] - p0.peer_read[g0i]),
            sum.migrated,
            m(g0.stats()?.resident)
        ));
        whereis(&mut rep, pd)?;
    }
    if let Some((fi, fd)) = far {
        g0.migrate(addr, len, Location::System)?;
        let f0 = fd.stats()?;
        let sum = fd.exec(Exec::Checksum, addr, len, false)?;
        let f1 = fd.stats()?;
        rep.step(format!(
            "4. gpu{} has no P2P path to gpu0: the data went through system RAM, then EXEC on gpu{} migrated {} pages to it: {}",
            fi.index,
            fi.index,
            f1.to_device - f0.to_device,
            same(sum.result)
        ));
        whereis(&mut rep, fd)?;
    }
    let ok = words
        .iter()
        .enumerate()
        .all(|(i, &w)| w == (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let faults: u64 = devs
        .iter()
        .map(|(_, d)| d.stats().map(|s| s.cpu_faults).unwrap_or(0))
        .sum();
    rep.step(format!(
        "5. CPU reads the buffer: {} (CPU faults so far on all GPUs: {faults})",
        if ok {
            "every byte intact"
        } else {
            "DATA DIFFERS"
        }
    ));
    rep.finish();
    Ok(())
}

fn query(node: Option<PathBuf>, device: Option<u32>) -> msvm_rt::Result<()> {
    let dev = match node {
        Some(p) => Device::open(p)?,
        None => match Device::render_nodes()?.first() {
            Some(p) => Device::open(p)?,
            None => {
                println!("msvm: no devices (is msvm.ko loaded?)");
                return Ok(());
            }
        },
    };
    let i = dev.query_device(device)?;
    println!("version:     {}", i.version);
    println!("index:       {}", i.index);
    println!("num_devices: {}", i.num_devices);
    println!("pci:         {}", i.pci);
    println!("vram_size:   {} ({})", i.vram_size, mib(i.vram_size));
    println!("owner_group: {}", i.owner_group);
    for p in &i.peers {
        match p.distance {
            Some(d) => println!(
                "peer gpu{}:   P2P {}, distance {d} ({})",
                p.index,
                p.path,
                p.why()
            ),
            None => println!("peer gpu{}:   no P2P path ({})", p.index, p.why()),
        }
    }
    Ok(())
}
