//! `msvm`: the command-line tool of msvm.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use msvm_rt::{Device, DeviceInfo};

#[derive(Parser)]
#[command(name = "msvm", version, about = "Inspect and drive msvm GPUs")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List the msvm devices and the P2P matrix between them.
    Info,
    /// Show the counters of every device (migrations, faults, residency).
    Stats,
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
    let cli = Cli::parse();
    let res = match cli.command {
        Command::Info => info(),
        Command::Stats => stats(),
        Command::Query { node, device } => query(node, device),
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
    println!("{:<5} {:<20} {:<13} {:>10}", "gpu", "node", "pci", "vram");
    for (i, d) in &infos {
        println!(
            "{:<5} {:<20} {:<13} {:>10}",
            i.index,
            d.path().display(),
            i.pci.to_string(),
            mib(i.vram_size)
        );
    }
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
    Ok(())
}

fn stats() -> msvm_rt::Result<()> {
    let devices = Device::all()?;
    if devices.is_empty() {
        println!("msvm: no devices (is msvm.ko loaded?)");
        return Ok(());
    }
    println!(
        "{:<5} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>10}",
        "gpu", "resident", "to_dev", "to_sys", "cpu_fault", "evicted", "no_vram", "chunks", "vram"
    );
    for d in &devices {
        let i = d.query()?;
        let s = d.stats()?;
        println!(
            "{:<5} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>10}",
            i.index,
            mib(s.resident * 4096),
            mib(s.to_device * 4096),
            mib(s.to_system * 4096),
            s.cpu_faults,
            mib(s.evicted * 4096),
            mib(s.no_vram * 4096),
            format!("{}/{}", s.chunks_live, s.vram_size / s.chunk_size.max(1)),
            mib(s.vram_size)
        );
    }
    println!("(sizes in MiB; cpu_fault counts pages brought home by CPU access; chunks: live/total, {} MiB each)",
        devices[0].stats()?.chunk_size >> 20);
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
    for p in &i.peers {
        match p.distance {
            Some(d) => println!("peer gpu{}:   P2P, distance {d}", p.index),
            None => println!("peer gpu{}:   no P2P path", p.index),
        }
    }
    Ok(())
}
