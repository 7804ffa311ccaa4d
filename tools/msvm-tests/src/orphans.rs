//! A GPU unbound while a fork child alone maps pages its parent moved to
//! the GPU and left: no record leads msvm to the child, so the pages
//! cannot go home through an mm. Before orphans, the teardown moved them
//! by frame (`migrate_device_pfns`), holding nothing of the child's: the
//! child exiting inside that move freed the pages' `anon_vma` under it
//! (KASAN: `slab-use-after-free in rmap_walk_anon`). Now the pages stay
//! mapped, their data copied to system RAM, their chunk an *orphan* that
//! holds the module until the last page goes (`vram/orphans.rs`).

use std::fs;
use std::time::{Duration, Instant};

use msvm_rt::{Device, Location};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult};

use crate::check;
use crate::defaults::{leave, say, wait_file};
use crate::harness::{Outcome, Test};
use crate::race::{delays, Window, WINDOW_MS};
use crate::svm::{fill, verify, Map, PAGE};
use crate::sysfs;
use crate::unplug::{addrs, bind_again};

pub fn tests() -> Vec<Test> {
    vec![
        Test {
            name: "orphans_unbind_while_the_only_mapper_exits",
            run: || unbind_against_the_child(Child::Exits(Duration::ZERO), 0),
        },
        Test {
            name: "orphans_keep_a_fork_childs_data_and_the_module_until_freed",
            run: || unbind_against_the_child(Child::Keeps, 0),
        },
    ]
}

/// `msvm-tests orphans ROUNDS` (`make soak`): both tests, `ROUNDS` times
/// each, the exiting child leaving at another point of the window each
/// round (0 to 400 ms into it).
pub fn rounds(n: u32) -> Outcome {
    for r in 0..n {
        let late = Duration::from_millis(u64::from(r % 5) * 100);
        unbind_against_the_child(Child::Exits(late), r)
            .map_err(|x| format!("round {r}, the child exits: {x}"))?;
        unbind_against_the_child(Child::Keeps, r)
            .map_err(|x| format!("round {r}, the child keeps: {x}"))?;
    }
    println!("# orphans: {n} rounds of both");
    Ok(())
}

/// What the fork child does with the pages once the GPU goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Child {
    /// Exits inside the teardown's window (debugfs `evict_delay_ms`), this
    /// long after it opened.
    Exits(Duration),
    /// Reads them back after the unbind, then exits.
    Keeps,
}

const LEN: usize = 1 << 20;
const SEED: u64 = 111;
const READY: &str = "/tmp/msvm-orphans-ready";
const DONE: &str = "/tmp/msvm-orphans-done";
const RESULT: &str = "/tmp/msvm-orphans-result";
const REFCNT: &str = "/sys/module/msvm/refcnt";

/// How many dmem regions are named `name` (`dmem.capacity` of the root).
fn regions(name: &str) -> Result<usize, String> {
    // The controller enabled under the root (its files then listed).
    drop(crate::cgroup::Cgroup::new("msvm-test-orphans")?);
    let path = "/sys/fs/cgroup/dmem.capacity";
    let text = fs::read_to_string(path).map_err(|x| format!("{path}: {x}"))?;
    Ok(text
        .lines()
        .filter(|l| l.split_whitespace().next() == Some(name))
        .count())
}

/// The module's reference count.
fn refcnt() -> Result<u64, String> {
    let text = fs::read_to_string(REFCNT).map_err(|x| format!("{REFCNT}: {x}"))?;
    text.trim()
        .parse()
        .map_err(|x| format!("{REFCNT}: {text:?}: {x}"))
}

/// A process moves 1 MiB (4 KiB pages) to the first GPU, forks a child
/// that keeps them, and exits: only the child maps them, and their records
/// name the parent's dead mm. The GPU is unbound; the child exits inside
/// the teardown's window (`Child::Exits`: the kernel log must stay clean),
/// or reads every byte back afterwards (`Child::Keeps`: meanwhile the
/// orphan holds the module, and lets it go once the child exits; the GPU's
/// dmem region goes at the unbind, and the GPU binds again beside its
/// orphan, with one region). The GPU binds again.
fn unbind_against_the_child(how: Child, round: u32) -> Outcome {
    let victim = sysfs::msvm_gpus()?.into_iter().next().ok_or("no GPU")?;
    for f in [READY, DONE, RESULT] {
        let _ = fs::remove_file(f);
    }
    // SAFETY: the child runs `placer`, which maps, migrates, forks and
    // exits through `_exit`.
    let placer_pid = match unsafe { fork() }.map_err(|x| x.to_string())? {
        ForkResult::Child => {
            let code = match placer(&victim.node, how, SEED + u64::from(round)) {
                Ok(()) => 0,
                Err(x) => {
                    let _ = say(RESULT, &format!("placer: {x}"));
                    1
                }
            };
            // SAFETY: leaving the child.
            unsafe { nix::libc::_exit(code) }
        }
        ForkResult::Parent { child } => child,
    };
    let run = (|| {
        let ready = wait_file(READY, 60);
        let st = waitpid(placer_pid, None).map_err(|x| x.to_string())?;
        check!(matches!(st, WaitStatus::Exited(_, 0)), "placer: {st:?}");
        ready?;
        let before = refcnt()?;
        match how {
            Child::Exits(_) => {
                let window = Window::open(WINDOW_MS)?;
                let unbound = fs::write("/sys/bus/pci/drivers/msvm/unbind", &victim.addr);
                drop(window);
                unbound.map_err(|x| format!("unbind: {x}"))?;
            }
            Child::Keeps => {
                let name = format!("drm/{}/vram", victim.addr);
                fs::write("/sys/bus/pci/drivers/msvm/unbind", &victim.addr)
                    .map_err(|x| format!("unbind: {x}"))?;
                let during = refcnt()?;
                check!(
                    during > before,
                    "refcnt {during} with the child's pages orphaned, {before} before: nothing holds the module"
                );
                // The device's dmem region went with it, though its pages
                // are still charged; bound again, it has one region.
                check!(
                    regions(&name)? == 0,
                    "{name} still a dmem region after the unbind"
                );
                bind_again(&victim.addr)?;
                check!(
                    regions(&name)? == 1,
                    "{name}: {} dmem regions once bound again beside its orphan",
                    regions(&name)?
                );
            }
        }
        say(DONE, "")?;
        let result = wait_file(RESULT, 60)?;
        check!(result == "ok", "{result}");
        if how == Child::Keeps {
            // The child is gone: its pages are freed, and the orphan with
            // them (a work item).
            let t = Instant::now();
            while refcnt()? != before {
                check!(
                    t.elapsed() < Duration::from_secs(30),
                    "refcnt {} 30 s after the child exited, {before} before the unbind: the orphan stayed",
                    refcnt()?
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    })();
    let _ = say(DONE, "");
    // The GPU comes back whatever happened, for the tests after this one.
    let bound = match addrs() {
        Ok(a) if a.contains(&victim.addr) => Ok(()),
        _ => bind_again(&victim.addr),
    };
    run?;
    bound
}

/// The placing process: 1 MiB to the GPU (its file closed after: no VM is
/// left), then a child that keeps it, then its own exit, mapping it.
fn placer(node: &std::path::Path, how: Child, seed: u64) -> Outcome {
    let mut m = Map::small(LEN)?;
    fill(m.bytes_mut(), seed);
    {
        let dev = Device::open(node).map_err(|x| x.to_string())?;
        dev.vm_create().map_err(|x| x.to_string())?;
        let out = dev
            .migrate(m.addr(), LEN, Location::Device)
            .map_err(|x| x.to_string())?;
        check!(out.moved == (LEN / PAGE) as u64, "placed {out:?}");
    }
    let d0 = delays()?;
    // SAFETY: the child runs `keeper` and leaves through `_exit`.
    match unsafe { fork() }.map_err(|x| x.to_string())? {
        // The child exiting in the window says so first: its exit is the
        // point.
        ForkResult::Child => leave(RESULT, &keeper(&m, how, d0, seed), how == Child::Keeps),
        ForkResult::Parent { .. } => {}
    }
    // It exits mapping them: not unmapped first.
    std::mem::forget(m);
    say(READY, "ready")
}

/// The fork child: exits once the teardown is in its window, or reads the
/// pages back once the unbind is over.
fn keeper(m: &Map, how: Child, d0: u64, seed: u64) -> Outcome {
    match how {
        Child::Exits(late) => {
            // A keeper of a failed run must not exit in the next one's
            // window: the test gives up by `DONE`.
            while delays()? == d0 {
                check!(
                    !std::path::Path::new(DONE).exists(),
                    "no teardown entered the window"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            std::thread::sleep(late);
            say(RESULT, "ok")
        }
        Child::Keeps => {
            wait_file(DONE, 120)?;
            verify(m.bytes(), seed).map_err(|x| format!("after the unbind: {x}"))
        }
    }
}
