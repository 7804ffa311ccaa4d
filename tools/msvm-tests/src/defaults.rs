//! msvm as it loads with no parameter (`msvm-tests defaults`): 2 MiB device
//! folios are off (module parameter `large_folios`, see `design.rst`), so a
//! THP moves to a device in 4 KiB pages and no device page is ever mapped
//! by a PMD. That is what makes a device going away safe on a stock Linux
//! 7.3 however user space arms it: a device folio that a fork child maps
//! after its parent unmapped it or exited is collected by frame at
//! teardown, and 7.3's `zap_huge_pmd()` mishandles the PMD migration entry
//! if the child zaps it meanwhile (with `large_folios=1`: `VM_BUG_ON` on
//! this kernel, memory corruption on a production one).

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use msvm_rt::{Device, Location};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};

use crate::check;
use crate::harness::{Outcome, Test};
use crate::large::{bytes, thp_region};
use crate::race::{delays, Window, WINDOW_MS};
use crate::svm::{fill, stats, verify, PAGE};
use crate::sysfs;
use crate::unplug::{addrs, bind_again};

const HUGE: usize = 2 << 20;

pub fn tests() -> Vec<Test> {
    vec![
        Test {
            name: "defaults_thp_moves_in_small_pages",
            run: thp_moves_in_small_pages,
        },
        Test {
            name: "defaults_unbind_with_a_forked_thp_zapped_after_the_parent_unmapped_it",
            run: || forked_thp_zapped(LetGo::Unmaps),
        },
        Test {
            name: "defaults_unbind_with_a_forked_thp_zapped_after_the_parent_exited",
            run: || forked_thp_zapped(LetGo::Exits),
        },
    ]
}

/// Two THPs move to gpu0 as 1,024 small pages, none as a 2 MiB folio, and
/// come back with every byte.
fn thp_moves_in_small_pages() -> Outcome {
    let len = 2 * HUGE;
    let (_region, start) = thp_region(len, 101)?;
    let dev = crate::svm::gpu0()?;
    let s0 = stats(&dev)?;
    let out = dev
        .migrate(start, len, Location::Device)
        .map_err(|x| x.to_string())?;
    let s1 = stats(&dev)?;
    check!(
        out.moved == (len / PAGE) as u64,
        "moved {out:?}, want {} pages",
        len / PAGE
    );
    check!(
        s1.large_to_device == s0.large_to_device && s1.large_fallback == s0.large_fallback,
        "2 MiB folios to the device: +{} (fallbacks +{}), want none with large_folios off",
        s1.large_to_device - s0.large_to_device,
        s1.large_fallback - s0.large_fallback
    );
    let back = dev
        .migrate(start, len, Location::System)
        .map_err(|x| x.to_string())?;
    check!(back.moved == out.moved, "back: {back:?}");
    verify(bytes(start, len), 101)
}

/// How the process that placed the pages lets go of them before the
/// unbind, leaving a fork child the only mm that maps them.
#[derive(Clone, Copy)]
enum LetGo {
    Unmaps,
    Exits,
}

/// Files by which the processes of [`forked_thp_zapped`] say where they are.
const READY: &str = "/tmp/msvm-forked-ready";
const DONE: &str = "/tmp/msvm-forked-done";
const RESULT: &str = "/tmp/msvm-forked-result";

/// A process places two THPs on the first GPU, forks a child, and unmaps
/// them or exits: only the child maps them, and the record of every page
/// leads to the parent. The GPU is unbound; while its eviction holds the
/// pages collected (debugfs `evict_delay_ms`), the child zaps the first
/// THP (`MADV_DONTNEED`). After the unbind, the second reads back whole in
/// the child, and the GPU binds again. With 2 MiB device folios (the
/// default before `large_folios`), the zap met a PMD migration entry:
/// kernel BUG at `page_ref.h` (`zap_huge_pmd()`, Linux 7.3).
fn forked_thp_zapped(how: LetGo) -> Outcome {
    const SEED: u64 = 103;
    let victim = sysfs::msvm_gpus()?.into_iter().next().ok_or("no GPU")?;
    for f in [READY, DONE, RESULT] {
        let _ = fs::remove_file(f);
    }
    // SAFETY: the child runs `placer`, which only maps, forks, waits on
    // files and exits, and leaves through `_exit`.
    let placer_pid = match unsafe { fork() }.map_err(|x| x.to_string())? {
        ForkResult::Child => {
            let code = match placer(&victim.node, how, SEED) {
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
    let run = unbind_against_the_child(&victim.addr, how, placer_pid);
    // The placer and the keeper stop waiting (the keeper fails if no
    // window opened before).
    let _ = say(DONE, "");
    let reaped = match how {
        // Reaped before the unbind, unless the run failed first (the
        // placer waits for nothing then).
        LetGo::Exits if run.is_err() => waitpid(placer_pid, None),
        LetGo::Exits => Ok(WaitStatus::Exited(placer_pid, 0)),
        LetGo::Unmaps => waitpid(placer_pid, None),
    };
    let result = wait_file(RESULT, 60);
    // The GPU comes back whatever happened, for the tests after this one.
    let bound = match addrs() {
        Ok(a) if a.contains(&victim.addr) => Ok(()),
        _ => bind_again(&victim.addr),
    };
    run?;
    check!(
        matches!(reaped, Ok(WaitStatus::Exited(_, 0))),
        "placer: {reaped:?}"
    );
    let result = result?;
    check!(result == "ok", "{result}");
    bound
}

/// The test process's part of [`forked_thp_zapped`]: once the placer has
/// let go (and, if it exits, has exited), unbinds the GPU with the
/// eviction window open.
fn unbind_against_the_child(addr: &str, how: LetGo, placer: Pid) -> Outcome {
    // The placer says why if it fails first.
    let t = Instant::now();
    while !Path::new(READY).exists() {
        if let Ok(why) = fs::read_to_string(RESULT) {
            return Err(why);
        }
        check!(
            t.elapsed() < Duration::from_secs(60),
            "the placer is not ready"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    if let LetGo::Exits = how {
        let st = waitpid(placer, None).map_err(|x| x.to_string())?;
        check!(matches!(st, WaitStatus::Exited(_, 0)), "placer: {st:?}");
    }
    let window = Window::open(WINDOW_MS)?;
    let unbound = fs::write("/sys/bus/pci/drivers/msvm/unbind", addr);
    drop(window);
    unbound.map_err(|x| format!("unbind: {x}"))
}

/// The placing process: two THPs to the GPU (its file closed after: no VM
/// is left), a child that keeps them, and then the unmap or the exit.
fn placer(node: &std::path::Path, how: LetGo, seed: u64) -> Outcome {
    let len = 2 * HUGE;
    let (region, start) = thp_region(len, seed)?;
    {
        let dev = Device::open(node).map_err(|x| x.to_string())?;
        dev.vm_create().map_err(|x| x.to_string())?;
        let out = dev
            .migrate(start, len, Location::Device)
            .map_err(|x| x.to_string())?;
        check!(out.moved == (len / PAGE) as u64, "placed {out:?}");
    }
    let d0 = delays()?;
    // SAFETY: the child runs `keeper` and leaves through `_exit`.
    match unsafe { fork() }.map_err(|x| x.to_string())? {
        ForkResult::Child => leave(RESULT, &keeper(start, len, seed, d0), true),
        ForkResult::Parent { .. } => {}
    }
    match how {
        LetGo::Unmaps => {
            drop(region);
            say(READY, "ready")?;
            // Alive (its mm too) until the test is done.
            wait_file(DONE, 120).map(drop)
        }
        LetGo::Exits => {
            // It exits mapping them: not unmapped first.
            std::mem::forget(region);
            say(READY, "ready")
        }
    }
}

/// The fork child: zaps the first THP inside the eviction's window, and
/// checks the second once the unbind is over.
fn keeper(start: usize, len: usize, seed: u64, d0: u64) -> Outcome {
    // As `race::in_window`, but the test may give up first (`DONE`): a
    // keeper of a failed run must not zap in the next one's window.
    while delays()? == d0 {
        check!(!Path::new(DONE).exists(), "no eviction entered the window");
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: advice on a mapping this process inherited and keeps.
    let r = unsafe {
        nix::libc::madvise(
            start as *mut nix::libc::c_void,
            HUGE,
            nix::libc::MADV_DONTNEED,
        )
    };
    check!(r == 0, "madvise: {}", std::io::Error::last_os_error());
    wait_file(DONE, 120)?;
    check!(
        bytes(start, HUGE).iter().all(|&b| b == 0),
        "the zapped THP does not read as zero"
    );
    let mut want = vec![0u8; len];
    fill(&mut want, seed);
    check!(
        bytes(start + HUGE, HUGE) == &want[HUGE..],
        "the second THP lost bytes across the unbind"
    );
    Ok(())
}

/// Ends a forked child with outcome `res`: says it in file `path` (a
/// success only if `say_ok`) and leaves through `_exit`.
pub(crate) fn leave(path: &str, res: &Outcome, say_ok: bool) -> ! {
    if res.is_err() || say_ok {
        let text = match res {
            Ok(()) => "ok".to_string(),
            Err(x) => format!("child: {x}"),
        };
        let _ = say(path, &text);
    }
    // SAFETY: leaving the child.
    unsafe { nix::libc::_exit(i32::from(res.is_err())) }
}

/// Writes `text` to file `path` whole: whoever sees the file sees all of
/// it.
pub(crate) fn say(path: &str, text: &str) -> Outcome {
    let tmp = format!("{path}.tmp");
    fs::write(&tmp, text).map_err(|x| format!("{tmp}: {x}"))?;
    fs::rename(&tmp, path).map_err(|x| format!("{path}: {x}"))
}

/// The text of file `path` once it exists (`secs` at most).
pub(crate) fn wait_file(path: &str, secs: u64) -> Result<String, String> {
    let t = Instant::now();
    while !Path::new(path).exists() {
        if t.elapsed() > Duration::from_secs(secs) {
            return Err(format!("timed out waiting for {path}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    fs::read_to_string(path).map_err(|x| format!("{path}: {x}"))
}
