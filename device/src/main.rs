// SPDX-License-Identifier: GPL-2.0

//! `msvm-gpu --socket PATH [--vram SIZE] [--switch DIR --port N]`: serves
//! one msvm-gpu device to one QEMU (`-device vfio-user-pci,socket=PATH`)
//! and exits when QEMU closes the connection (the device unplugged, or
//! QEMU gone). The socket appears at PATH only once it accepts
//! connections. With `--switch`, the device sits on downstream port N (0
//! to 15) of the switch that every device started with the same DIR is
//! behind (`msvm_gpu::switch`): its VRAM is `DIR/portN.vram`, and its DMA
//! to a sibling's BAR stays inside the switch.

use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use msvm_gpu::device::Device;
use msvm_gpu::server::Connection;
use msvm_gpu::{sock, Error};

/// The command line.
struct Args {
    socket: PathBuf,
    vram: u64,
    /// The switch's directory and the device's port on it.
    switch: Option<(PathBuf, usize)>,
}

const USAGE: &str = "usage: msvm-gpu --socket PATH [--vram SIZE] [--switch DIR --port N]";

fn parse_size(s: &str) -> Option<u64> {
    let (n, mult) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 1 << 10),
        b'M' => (&s[..s.len() - 1], 1 << 20),
        b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    n.parse::<u64>().ok()?.checked_mul(mult)
}

fn args() -> Result<Args, String> {
    let mut socket = None;
    let mut vram = 256 << 20;
    let (mut switch, mut port) = (None, None);
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--socket" => socket = it.next().map(PathBuf::from),
            "--vram" => {
                vram = it
                    .next()
                    .and_then(|s| parse_size(&s))
                    .ok_or("--vram: a size, e.g. 256M")?
            }
            "--switch" => switch = Some(it.next().map(PathBuf::from).ok_or(USAGE)?),
            "--port" => {
                port = Some(
                    it.next()
                        .and_then(|s| s.parse::<usize>().ok())
                        .filter(|&n| n < msvm_gpu::switch::PORTS)
                        .ok_or("--port: a switch port, 0 to 15")?,
                )
            }
            _ => return Err(format!("unknown argument {a:?}")),
        }
    }
    let switch = match (switch, port) {
        (Some(dir), Some(port)) => Some((dir, port)),
        (None, None) => None,
        _ => return Err("--switch and --port go together".into()),
    };
    Ok(Args {
        socket: socket.ok_or(USAGE)?,
        vram,
        switch,
    })
}

fn run(a: Args) -> Result<(), Error> {
    let device = Arc::new(match &a.switch {
        Some((dir, port)) => Device::behind_switch(a.vram, dir, *port)?,
        None => Device::new(a.vram)?,
    });
    // Bound and listening under a temporary name, then renamed: whoever
    // sees PATH can connect.
    let tmp = a.socket.with_extension("listening");
    let _ = std::fs::remove_file(&tmp);
    let listener = UnixListener::bind(&tmp).map_err(Error::Io)?;
    std::fs::rename(&tmp, &a.socket).map_err(Error::Io)?;
    let place = match &a.switch {
        Some((dir, port)) => format!(", port {port} of the switch {}", dir.display()),
        None => String::new(),
    };
    eprintln!(
        "msvm-gpu: {} MiB of VRAM{place}, listening on {}",
        a.vram >> 20,
        a.socket.display()
    );
    let (stream, _) = listener.accept().map_err(Error::Io)?;
    drop(listener);
    let _ = std::fs::remove_file(&a.socket);
    let (rx, tx) = sock::split(stream)?;
    let conn = Arc::new(Connection::new(device, tx));
    let engine = {
        let conn = conn.clone();
        std::thread::spawn(move || conn.device().clone().run_copy_engine(&*conn))
    };
    let jobs = {
        let conn = conn.clone();
        std::thread::spawn(move || conn.device().clone().run_job_engine(&*conn))
    };
    let r = conn.serve(rx);
    conn.device().stop();
    let engine = match (engine.join(), jobs.join()) {
        (Ok(a), Ok(b)) => a.and(b),
        _ => Err(Error::Malformed("an engine panicked")),
    };
    let c = conn.device().dma_counts();
    let f = conn.device().fault_counts();
    eprintln!(
        "msvm-gpu: connection closed; DMA direct {} B, through QEMU {} B, through the switch {} B, refused {}; faults {} (overflows {}, replays {}, cancels {})",
        c.direct_bytes, c.remote_bytes, c.switch_bytes, c.refused, f.faults, f.overflows, f.replays, f.cancels
    );
    r.and(engine)
}

fn main() -> ExitCode {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("msvm-gpu: {e}");
            return ExitCode::from(2);
        }
    };
    match run(a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("msvm-gpu: {e}");
            ExitCode::FAILURE
        }
    }
}
