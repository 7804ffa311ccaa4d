//! Per-client statistics in `/proc/<pid>/fdinfo` (`src/drm/fdinfo.rs`),
//! read as standard DRM tools read them (`msvm_rt::clients`).

use std::os::fd::{AsFd, AsRawFd};

use msvm_rt::{Device, Exec, Location};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult};

use crate::check;
use crate::harness::{Outcome, Test};
use crate::svm::{fill, gpu0, Map, PAGE};

pub fn tests() -> Vec<Test> {
    vec![Test {
        name: "fdinfo_shows_each_clients_device_memory_and_job_time",
        run: client_memory_and_time,
    }]
}

/// This process's client of `d`, as its fdinfo says.
fn me(d: &Device) -> Result<msvm_rt::Client, String> {
    let fd = d.as_fd().as_raw_fd();
    let text = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}"))
        .map_err(|e| format!("fdinfo {fd}: {e}"))?;
    msvm_rt::parse_fdinfo(std::process::id(), "self", &text)
        .ok_or(format!("fdinfo {fd} is not an msvm client: {text}"))
}

/// A client's fdinfo names the device and shows the memory its process
/// holds there, exactly (4 MiB migrated in, then 1 MiB more in a child's
/// own client, which the parent's does not count), back to 0 when the
/// pages go home, and the time its jobs took growing with a job; every
/// process's clients are listed.
fn client_memory_and_time() -> Outcome {
    let d = gpu0()?;
    let e = |x: msvm_rt::Error| x.to_string();
    let pci = d.query().map_err(e)?.pci.to_string();
    let c0 = me(&d)?;
    check!(c0.pdev == pci, "drm-pdev {} for {pci}", c0.pdev);
    check!(c0.resident == Some(0), "before: {c0:?}");
    const LEN: usize = 4 << 20;
    let mut m = Map::new(LEN)?;
    fill(m.bytes_mut(), 5);
    let out = d.migrate(m.addr(), LEN, Location::Device).map_err(e)?;
    check!(out.moved == (LEN / PAGE) as u64, "migrate: {out:?}");
    let c1 = me(&d)?;
    check!(c1.resident == Some(LEN as u64), "after 4 MiB in: {c1:?}");
    d.exec(Exec::Checksum, m.addr(), LEN, false).map_err(e)?;
    let c2 = me(&d)?;
    check!(
        c2.engine_ns > c1.engine_ns,
        "a job's time: {c1:?} then {c2:?}"
    );
    // A child's own client and pages: its fdinfo shows 1 MiB, the
    // parent's still 4 MiB; the parent sees both clients.
    let (rd, wr) = nix::unistd::pipe().map_err(|x| x.to_string())?;
    let (rd2, wr2) = nix::unistd::pipe().map_err(|x| x.to_string())?;
    // SAFETY: the child only runs its part and exits.
    match unsafe { fork() }.map_err(|x| x.to_string())? {
        ForkResult::Child => {
            drop((rd, wr2));
            let r = (|| -> Outcome {
                let d = gpu0()?;
                let mut m = Map::new(1 << 20)?;
                fill(m.bytes_mut(), 6);
                d.migrate(m.addr(), 1 << 20, Location::Device).map_err(e)?;
                let c = me(&d)?;
                check!(c.resident == Some(1 << 20), "child: {c:?}");
                // Ready; wait for the parent to look.
                nix::unistd::write(&wr, b"r").map_err(|x| x.to_string())?;
                let mut b = [0u8; 1];
                nix::unistd::read(&rd2, &mut b).map_err(|x| x.to_string())?;
                Ok(())
            })();
            if let Err(x) = &r {
                println!("# child: {x}");
            }
            std::process::exit(i32::from(r.is_err()));
        }
        ForkResult::Parent { child } => {
            drop((wr, rd2));
            let mut b = [0u8; 1];
            let ready = nix::unistd::read(&rd, &mut b).map_err(|x| x.to_string())?;
            let c3 = me(&d)?;
            let all = msvm_rt::clients();
            let kid = all
                .iter()
                .find(|c| c.pid == child.as_raw() as u32 && c.resident == Some(1 << 20));
            let mine = all.iter().find(|c| c.client_id == c3.client_id);
            nix::unistd::write(&wr2, b"g").map_err(|x| x.to_string())?;
            let st = waitpid(child, None).map_err(|x| x.to_string())?;
            check!(
                ready == 1 && matches!(st, WaitStatus::Exited(_, 0)),
                "child: {st:?}"
            );
            check!(
                c3.resident == Some(LEN as u64),
                "parent with the child's pages: {c3:?}"
            );
            check!(kid.is_some() && mine.is_some(), "clients: {all:?}");
        }
    }
    // Home: nothing held any more.
    d.migrate(m.addr(), LEN, Location::System).map_err(e)?;
    let c4 = me(&d)?;
    check!(c4.resident == Some(0), "after the pages went home: {c4:?}");
    crate::svm::verify(m.bytes(), 5)
}
