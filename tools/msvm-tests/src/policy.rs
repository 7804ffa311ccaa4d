//! The placement policies' state per process (`src/process.rs`):
//! `msvm-tests policy-scale`, after loading msvm with `access_threshold=1`
//! (a block one in-place job used is due, and the next in-place job over
//! it moves it to the device).
//!
//! The state used to be a global direct-mapped table of 4,096 slots keyed
//! by the `mm_struct`'s address: with more live blocks than slots the
//! counts pushed each other out, and a process whose `mm_struct` took a
//! dead one's address inherited its counts. These cases fail on that.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};

use msvm_rt::{Device, Exec};
use nix::sys::mman::{madvise, mmap_anonymous, munmap, MapFlags, MmapAdvise, ProtFlags};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult};

use crate::check;
use crate::multi::devices;
use crate::svm::{Map, PAGE};

const BLOCK: usize = 2 << 20;

/// `blocks` 2 MiB blocks of address space (reserved, not backed), at
/// `addr` if given (it must be free).
struct Blocks {
    addr: usize,
    len: usize,
}

impl Blocks {
    fn new(blocks: usize, addr: Option<usize>) -> Result<Self, String> {
        let len = blocks * BLOCK;
        let mut flags = MapFlags::MAP_PRIVATE | MapFlags::MAP_NORESERVE;
        if addr.is_some() {
            flags |= MapFlags::MAP_FIXED_NOREPLACE;
        }
        // SAFETY: a fresh anonymous mapping, at an address nothing uses
        // (MAP_FIXED_NOREPLACE fails otherwise), aliases nothing.
        let p = unsafe {
            mmap_anonymous(
                addr.and_then(NonZeroUsize::new),
                NonZeroUsize::new(len).ok_or("no blocks")?,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                flags,
            )
        }
        .map_err(|e| format!("mmap {len}: {e}"))?;
        // 4 KiB pages: a THP per block would take 2 MiB each.
        // SAFETY: advice on our own fresh mapping.
        unsafe { madvise(p, len, MmapAdvise::MADV_NOHUGEPAGE) }
            .map_err(|e| format!("madvise: {e}"))?;
        let addr = p.as_ptr() as usize;
        // The first page of each block, written: 8 bytes of its number.
        for b in 0..blocks {
            // SAFETY: within the mapping, aligned, and nothing else holds it.
            unsafe { ((addr + b * BLOCK) as *mut u64).write(b as u64 + 1) };
        }
        Ok(Self { addr, len })
    }

    fn at(&self, b: usize) -> usize {
        self.addr + b * BLOCK
    }
}

impl Drop for Blocks {
    fn drop(&mut self) {
        if let Some(p) = std::ptr::NonNull::new(self.addr as *mut std::ffi::c_void) {
            // SAFETY: our mapping, which nothing borrows any more.
            let _ = unsafe { munmap(p, self.len) };
        }
    }
}

/// An in-place checksum job of `d` over the first page of block `b`: the
/// pages it moved first. Its result is checked against the page's content.
fn job(d: &Device, m: &Blocks, b: usize) -> Result<u64, String> {
    let out = d
        .exec(Exec::Checksum, m.at(b), PAGE, true)
        .map_err(|e| format!("job on block {b}: {e}"))?;
    let mut page = vec![0u8; PAGE];
    page[..8].copy_from_slice(&(b as u64 + 1).to_ne_bytes());
    let want = msvm_rt::checksum(&page);
    check!(
        out.result == want,
        "block {b}: checksum {:#x} != {want:#x}",
        out.result
    );
    Ok(out.migrated)
}

/// One in-place job over every block, then a second: how many blocks the
/// second moved (each is due after the first, whatever the others do).
/// `ready` is called between the two rounds.
fn two_rounds(d: &Device, m: &Blocks, blocks: usize, ready: impl Fn()) -> Result<u64, String> {
    for b in 0..blocks {
        let moved = job(d, m, b)?;
        check!(moved == 0, "block {b}: the first job moved {moved} pages");
    }
    ready();
    let mut moved = 0;
    for b in 0..blocks {
        moved += job(d, m, b)?;
    }
    Ok(moved)
}

/// Runs `f` in a child process (its own mm and VMs); whether it succeeded.
fn in_child(f: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
    // SAFETY: the child only runs `f` and exits.
    match unsafe { fork() }.map_err(|e| e.to_string())? {
        ForkResult::Child => {
            let code = match f() {
                Ok(()) => 0,
                Err(e) => {
                    println!("# {e}");
                    1
                }
            };
            std::process::exit(code);
        }
        ForkResult::Parent { child } => match waitpid(child, None) {
            Ok(WaitStatus::Exited(_, 0)) => Ok(()),
            s => Err(format!("child: {s:?}")),
        },
    }
}

/// 16,384 live blocks in one process: every one is moved by its count.
fn one_process(blocks: usize) -> Result<(), String> {
    in_child(|| {
        let (a, _, _) = devices()?;
        let m = Blocks::new(blocks, None)?;
        let s0 = a.stats().map_err(|e| e.to_string())?;
        let moved = two_rounds(&a, &m, blocks, || ())?;
        let s1 = a.stats().map_err(|e| e.to_string())?;
        let due = s1.access_due - s0.access_due;
        println!("# one process, {blocks} blocks: {due} due, {moved} moved");
        check!(
            moved == blocks as u64 && due == blocks as u64,
            "one process, {blocks} blocks: {due} due, {moved} moved"
        );
        Ok(())
    })
}

/// `procs` processes with `blocks` live blocks each, all live at once (the
/// second rounds start when every first round is done).
fn many_processes(procs: usize, blocks: usize) -> Result<(), String> {
    let sync = Map::shared(PAGE)?;
    // SAFETY: a shared page, aligned, that only atomics touch.
    let ready = unsafe { &*(sync.addr() as *const AtomicU64) };
    let mut children = Vec::new();
    for _ in 0..procs {
        // SAFETY: the child runs its rounds and exits.
        match unsafe { fork() }.map_err(|e| e.to_string())? {
            ForkResult::Child => {
                let r = (|| {
                    let (a, _, _) = devices()?;
                    let m = Blocks::new(blocks, None)?;
                    let moved = two_rounds(&a, &m, blocks, || {
                        ready.fetch_add(1, Ordering::SeqCst);
                        let t = std::time::Instant::now();
                        while ready.load(Ordering::SeqCst) < procs as u64
                            && t.elapsed().as_secs() < 120
                        {
                            std::thread::sleep(std::time::Duration::from_millis(5));
                        }
                    })?;
                    check!(
                        moved == blocks as u64,
                        "a process of {procs}: {moved} of {blocks} blocks moved"
                    );
                    Ok::<(), String>(())
                })();
                if let Err(e) = &r {
                    println!("# {e}");
                }
                std::process::exit(i32::from(r.is_err()));
            }
            ForkResult::Parent { child } => children.push(child),
        }
    }
    let mut failed = 0;
    for c in children {
        if !matches!(waitpid(c, None), Ok(WaitStatus::Exited(_, 0))) {
            failed += 1;
        }
    }
    println!("# {procs} processes x {blocks} blocks: {failed} failed");
    check!(failed == 0, "{failed} of {procs} processes failed");
    Ok(())
}

/// Processes one after another, each with one block at the same address:
/// each leaves its block due when it exits; the next one's first job there
/// must move nothing (it inherits no count), its second must move the page.
/// Then the state goes with the VMs: a process that leaves a block due,
/// closes its devices and opens them again starts afresh too.
///
/// (On the debug kernel KASAN's quarantine keeps a freed `mm_struct`'s
/// address from being reused soon, so the first part rarely meets a reused
/// address there; the second fails on state that outlives its VMs.)
fn reused_address(rounds: usize) -> Result<(), String> {
    const AT: usize = 0x7e00_0000_0000;
    for r in 0..rounds {
        in_child(|| {
            let (a, _, _) = devices()?;
            let m = Blocks::new(1, Some(AT))?;
            let first = job(&a, &m, 0)?;
            check!(first == 0, "process {r}: its first job moved {first} pages");
            let second = job(&a, &m, 0)?;
            check!(
                second == 1,
                "process {r}: its second job moved {second} pages"
            );
            Ok(())
        })?;
    }
    in_child(|| {
        let m = Blocks::new(1, Some(AT))?;
        {
            let (a, _, _) = devices()?;
            let first = job(&a, &m, 0)?;
            check!(
                first == 0,
                "before reopening: the first job moved {first} pages"
            );
        }
        // Every VM of the process is gone; new ones start afresh.
        let (a, _, _) = devices()?;
        let again = job(&a, &m, 0)?;
        check!(
            again == 0,
            "after reopening: the first job moved {again} pages"
        );
        Ok(())
    })
}

/// `msvm-tests policy-scale BLOCKS PROCS PER_PROC`: `BLOCKS` live blocks in
/// one process, `PROCS` processes of `PER_PROC` each, a reused address;
/// counted as tests. (The old table of 4,096 slots lost a share of the
/// blocks to collisions at any of these sizes.)
pub fn run(blocks: usize, procs: usize, per_proc: usize) -> Result<(), String> {
    type Case<'a> = (&'a str, &'a dyn Fn() -> Result<(), String>);
    let cases: [Case; 3] = [
        ("policy_live_blocks_in_one_process_all_act", &|| {
            one_process(blocks)
        }),
        ("policy_processes_with_live_blocks_all_act", &|| {
            many_processes(procs, per_proc)
        }),
        (
            "policy_a_new_process_or_vm_at_a_reused_address_inherits_nothing",
            &|| reused_address(8),
        ),
    ];
    let mut failed = 0;
    for (name, f) in cases {
        let t = std::time::Instant::now();
        match f() {
            Ok(()) => println!("ok {name} ({:.1} s)", t.elapsed().as_secs_f64()),
            Err(e) => {
                println!("FAIL {name}: {e}");
                failed += 1;
            }
        }
    }
    println!(
        "msvm-tests: {} passed, {failed} failed (policy-scale)",
        3 - failed
    );
    check!(failed == 0, "{failed} policy-scale cases failed");
    Ok(())
}
