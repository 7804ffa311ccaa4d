// SPDX-License-Identifier: GPL-2.0

//! An open `/dev/hmm_dmirror<N>` (`struct dmirror`): the mirror of the
//! opener's address space and the device's page table of it, and the
//! ioctls of `test_hmm`, each as that driver does it.

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

use kernel::{
    mm::{
        virt::{flags, VmaNew},
        Mm, MmWithUser,
    },
    new_mutex,
    page::Page,
    prelude::*,
    rbtree::{RBTree, RBTreeNode},
    sync::{aref::ARef, Arc, Mutex},
    uaccess::{UserPtr, UserSlice},
};

use crate::device::{copy_home, current_mm, set_backing, DeviceData};
use crate::memory::order_of;
use crate::mm::{
    backing::{self, Block},
    cancel::Cancel,
    hmm::HmmPfn,
    migrate::{Select, VmaMigration},
    misc::MiscFile,
    mmap::{ExclusiveVma, MmapRead, MmapWriteGuard, Wait},
    page::{BLOCK_SIZE, PAGE_SIZE},
    pagemap::map_of,
    pagetable::{PageTable, PtMirror, PtSpare, Target},
};
use crate::uapi::{self, prot, Cmd};

/// Pages one walk of SNAPSHOT covers (`test_hmm`'s `pfns[32]`).
const WALK: usize = 32;

/// Pages one walk that enters pages covers: a 2 MiB block.
const MAP_WALK: usize = BLOCK_SIZE / PAGE_SIZE;

/// Passes of EXCLUSIVE over a range whose entries an invalidation removed
/// before they were read back.
const EXCLUSIVE_TRIES: u32 = 8;

/// An open file of a device.
#[pin_data(PinnedDrop)]
pub(crate) struct DmirrorFile {
    dev: Arc<DeviceData>,
    mm: ARef<Mm>,
    mirror: Pin<KBox<PtMirror>>,
    flags: AtomicU64,
    /// The 2 MiB blocks of the opener's address space this file moved
    /// pages of to the device: where its eviction looks.
    #[pin]
    blocks: Mutex<RBTree<usize, ()>>,
}

impl MiscFile for DmirrorFile {
    type Data = Arc<DeviceData>;

    fn open(dev: &Arc<DeviceData>) -> Result<Pin<KBox<Self>>> {
        let mm = current_mm()?;
        let user = mm.mmget_not_zero().ok_or(EINVAL)?;
        // The whole address space, as `test_hmm` mirrors it.
        let mirror = PtMirror::create(
            &user,
            (0, usize::MAX & !(PAGE_SIZE - 1)),
            PageTable::new(),
            Some(dev.owner()),
        )?;
        KBox::pin_init(
            pin_init!(Self {
                dev: dev.clone(),
                mm,
                mirror,
                flags: AtomicU64::new(0),
                blocks <- new_mutex!(RBTree::new()),
            }),
            GFP_KERNEL,
        )
    }

    fn ioctl(this: Pin<&Self>, cmd: u32, arg: usize) -> Result<isize> {
        let mut c = Cmd::read(arg)?;
        let size = usize::try_from(c.npages)
            .ok()
            .and_then(|n| n.checked_mul(PAGE_SIZE))
            .ok_or(EINVAL)?;
        let start = usize::try_from(c.addr).map_err(|_| EINVAL)?;
        if start % PAGE_SIZE != 0 || start.checked_add(size).is_none_or(|e| e <= start) {
            return Err(EINVAL);
        }
        c.cpages = 0;
        c.faults = 0;
        match cmd {
            uapi::READ | uapi::READ_UNLOCKED => this.read(&mut c)?,
            uapi::WRITE => this.write(&mut c)?,
            uapi::MIGRATE_TO_DEV => this.migrate_to_dev(&mut c)?,
            uapi::MIGRATE_TO_SYS => this.migrate_to_sys(&mut c)?,
            uapi::SNAPSHOT => this.snapshot(&mut c)?,
            uapi::EXCLUSIVE => this.exclusive(&mut c)?,
            uapi::CHECK_EXCLUSIVE => {
                if this.mirror.lock().any_exclusive(start, start + size) {
                    return Err(EPERM);
                }
            }
            uapi::RELEASE => this.evict_own()?,
            uapi::FLAGS => this.flags.store(c.npages, Relaxed),
            _ => return Err(EINVAL),
        }
        c.write(arg)?;
        Ok(0)
    }

    fn mmap(_this: Pin<&Self>, vma: &VmaNew) -> Result {
        let vma = vma.set_mixedmap();
        let mut addr = vma.start();
        while addr < vma.end() {
            let page = Page::alloc_page(GFP_KERNEL | __GFP_ZERO)?;
            // The mapping takes its own reference; ours goes with `page`.
            vma.vm_insert_page(addr, &page)?;
            addr += PAGE_SIZE;
        }
        Ok(())
    }
}

#[pinned_drop]
impl PinnedDrop for DmirrorFile {
    fn drop(self: Pin<&mut Self>) {
        // As `test_hmm`'s release, the device's memory goes home: what
        // this file moved there (the pages other processes map go at their
        // own release, or when their CPU touches them).
        // It fails only when the closing task is being killed (`EINTR`)
        // or out of memory: the pages then stay on the device, still
        // mapped, until the CPU touches them or the process unmaps them
        // (no log: a user could flood it).
        let _ = self.evict_own();
    }
}

/// Runs a migration's steps over `[start, end)` of `mm`, under its mmap
/// lock held for writing (so that 2 MiB folios move whole: see
/// `pmd_fault` in `device.rs`): `step(vma, addr, next)` for each piece of
/// the range in one 2 MiB block and one VMA. `EINVAL` at a page not mapped
/// readable, as `test_hmm` says.
fn steps(
    mm: &MmWithUser,
    start: usize,
    end: usize,
    mut step: impl FnMut(&ExclusiveVma<'_>, usize, usize) -> Result,
) -> Result {
    let cancel = Cancel::task();
    let mmap = MmapWriteGuard::lock_killable(mm)?;
    let mut addr = start;
    while addr < end {
        cancel.check()?;
        let vma = mmap.vma_lookup(addr).ok_or(EINVAL)?;
        if vma.flags() & flags::READ == 0 {
            return Err(EINVAL);
        }
        let next = end.min((addr / BLOCK_SIZE + 1) * BLOCK_SIZE).min(vma.end());
        step(&vma, addr, next)?;
        addr = next;
    }
    Ok(())
}

/// The range of `c`: its first and last address.
fn range(c: &Cmd) -> (usize, usize) {
    // CAST: checked by `ioctl` to fit.
    let start = c.addr as usize;
    (start, start + c.npages as usize * PAGE_SIZE)
}

/// A buffer of `size` bytes, zeroed (`dmirror_bounce`).
fn bounce(size: usize) -> Result<KVVec<u8>> {
    backing::zeroed_buffer(size)
}

impl DmirrorFile {
    /// Moves this device's pages in the blocks this file moved pages of
    /// home, through the opener's mappings (under its mmap lock held for
    /// writing, 2 MiB folios whole: see `pmd_fault` in `device.rs`).
    /// Nothing to do once the opener's address space is gone.
    fn evict_own(&self) -> Result {
        let Some(mm) = self.mm.mmget_not_zero() else {
            return Ok(());
        };
        let cancel = Cancel::task();
        let mmap = MmapWriteGuard::lock_killable(&mm)?;
        // Forgotten only once all went home: a try that fails (a fatal
        // signal, no memory) leaves them for the next.
        let mut blocks = self.blocks.lock();
        for (&b, ()) in blocks.iter() {
            let mut addr = b;
            while addr < b + BLOCK_SIZE {
                cancel.check()?;
                let Some(vma) = mmap.vma_lookup(addr) else {
                    addr += PAGE_SIZE;
                    continue;
                };
                let next = (b + BLOCK_SIZE).min(vma.end());
                self.home(&vma, addr, next, None)?;
                addr = next;
            }
        }
        *blocks = RBTree::new();
        Ok(())
    }

    /// Moves this device's pages of `[addr, next)`, in one 2 MiB block of
    /// `vma`, home (2 MiB folios whole; `fail`: the file's flags, whose
    /// `FAIL_ALLOC` fails the next such allocation). Returns the pages
    /// collected.
    fn home(
        &self,
        vma: &ExclusiveVma<'_>,
        addr: usize,
        next: usize,
        fail: Option<&AtomicU64>,
    ) -> Result<u64> {
        let mut mig = VmaMigration::setup(
            vma.locked(),
            addr,
            next,
            Select::DevicePrivate,
            Some(vma),
            self.dev.owner(),
            None,
        )?;
        copy_home(&mut mig, self.dev.key(), Some(vma), fail)?;
        mig.pages();
        Ok((0..mig.npages())
            .filter(|&i| mig.src(i).migrate() && mig.src_page(i).is_some())
            .count() as u64)
    }

    fn user(&self) -> Result<ARef<MmWithUser>> {
        self.mm.mmget_not_zero().ok_or(EFAULT)
    }

    /// Runs `enter` over `[start, end)` in windows of up to `MAP_WALK`
    /// pages, each with room for its entries, again while it says `EAGAIN`
    /// (an invalidation since its walk) or `EBUSY` (one during it).
    fn by_windows(
        &self,
        start: usize,
        end: usize,
        mut enter: impl FnMut(usize, &mut [HmmPfn], &mut PtSpare) -> Result,
    ) -> Result {
        let cancel = Cancel::task();
        let mut pfns = KVec::from_elem(HmmPfn::NONE, MAP_WALK, GFP_KERNEL)?;
        let mut addr = start;
        while addr < end {
            let n = ((end - addr) / PAGE_SIZE).min(MAP_WALK);
            loop {
                cancel.check()?;
                let mut spare = PtSpare::new(addr, n)?;
                match enter(addr, &mut pfns[..n], &mut spare) {
                    Err(e) if e == EAGAIN || e == EBUSY => continue,
                    r => break r?,
                }
            }
            addr += n * PAGE_SIZE;
        }
        Ok(())
    }

    /// Faults `[start, end)` in and enters it in the page table
    /// (`dmirror_fault`).
    fn fault(&self, start: usize, end: usize, write: bool) -> Result {
        let mm = self.user()?;
        self.by_windows(start, end, |addr, pfns, spare| {
            let walk =
                self.mirror
                    .fault(&mm, addr, pfns, write, self.dev.owner(), &Cancel::task())?;
            let mut table = self.mirror.lock();
            table.map(&walk, spare)
        })
    }

    /// Copies the pages of `[start, end)` entered in the page table into
    /// `buf` (from the page of `base` on), counting them in `done`:
    /// `ENOENT` at the first that is not (`dmirror_do_read`).
    fn do_read(
        &self,
        start: usize,
        end: usize,
        base: usize,
        buf: &mut [u8],
        done: &mut u64,
    ) -> Result {
        let g = self.mirror.lock();
        let mut addr = start;
        while addr < end {
            let off = addr - base;
            match g.target(addr, false).ok_or(ENOENT)? {
                Target::Sys(p) => {
                    p.read(0, &mut buf[off..off + PAGE_SIZE]);
                    *done += 1;
                    addr += PAGE_SIZE;
                }
                Target::Device(p) => {
                    // The device pages that follow it in its chunk, read
                    // at once.
                    let left = ((end - addr) / PAGE_SIZE).min(MAP_WALK);
                    let run = (1..left)
                        .find(|&k| {
                            !matches!(g.target(addr + k * PAGE_SIZE, false),
                                Some(Target::Device(q)) if q.pfn() == p.pfn() + k)
                        })
                        .unwrap_or(left);
                    let b = &mut buf[off..off + run * PAGE_SIZE];
                    let run = self.dev.read_run(p, run, b)?;
                    *done += run as u64;
                    addr += run * PAGE_SIZE;
                }
            }
        }
        Ok(())
    }

    /// `dmirror_do_write`.
    fn do_write(
        &self,
        start: usize,
        end: usize,
        base: usize,
        buf: &[u8],
        done: &mut u64,
    ) -> Result {
        let g = self.mirror.lock();
        let mut addr = start;
        while addr < end {
            let off = addr - base;
            let b = &buf[off..off + PAGE_SIZE];
            match g.target(addr, true).ok_or(ENOENT)? {
                Target::Sys(p) => {
                    p.write(0, b);
                    p.written();
                }
                Target::Device(p) => self.dev.write_page(p, b)?,
            }
            *done += 1;
            addr += PAGE_SIZE;
        }
        Ok(())
    }

    /// Runs `access` over `c`'s range from its first page not yet done,
    /// faulting in (writable, if `write`) from the first it finds missing
    /// (`ENOENT`) and running it again, until it is done: the loop of
    /// `dmirror_read` and `dmirror_write`. Counts the pages done and the
    /// faults in `c`.
    fn faulting(
        &self,
        c: &mut Cmd,
        write: bool,
        mut access: impl FnMut(usize, &mut u64) -> Result,
    ) -> Result {
        let (base, end) = range(c);
        let mut done = 0;
        let r = loop {
            let start = base + done as usize * PAGE_SIZE;
            match access(start, &mut done) {
                Err(e) if e == ENOENT => {}
                r => break r,
            }
            let start = base + done as usize * PAGE_SIZE;
            if let Err(e) = self.fault(start, end, write) {
                break Err(e);
            }
            c.faults += 1;
        };
        c.cpages = done;
        r
    }

    /// `dmirror_read`: what the device reads of `[addr, +npages)`,
    /// faulting in what it has not entered.
    fn read(&self, c: &mut Cmd) -> Result {
        let (base, end) = range(c);
        let mut buf = bounce(end - base)?;
        self.faulting(c, false, |start, done| {
            self.do_read(start, end, base, &mut buf, done)
        })?;
        UserSlice::new(UserPtr::from_addr(c.ptr as usize), buf.len())
            .writer()
            .write_slice(&buf)
    }

    /// `dmirror_write`.
    fn write(&self, c: &mut Cmd) -> Result {
        let (base, end) = range(c);
        let mut buf = bounce(end - base)?;
        UserSlice::new(UserPtr::from_addr(c.ptr as usize), buf.len())
            .reader()
            .read_slice(&mut buf)?;
        self.faulting(c, true, |start, done| {
            self.do_write(start, end, base, &buf, done)
        })
    }

    /// `dmirror_migrate_to_device`: moves `[addr, +npages)` to the
    /// device, then returns what the device reads there.
    fn migrate_to_dev(&self, c: &mut Cmd) -> Result {
        let (start, end) = range(c);
        let mm = self.user().map_err(|_| EINVAL)?;
        let key = self.dev.key();
        // Whether some step's pages must be found by a walk.
        let mut walk = false;
        steps(&mm, start, end, |vma, addr, next| {
            let block = addr & !(BLOCK_SIZE - 1);
            if self.blocks.lock().get(&block).is_none() {
                let node = RBTreeNode::new(block, (), GFP_KERNEL)?;
                self.blocks.lock().insert(node);
            }
            let mut spare = PtSpare::new(addr, (next - addr) / PAGE_SIZE)?;
            // A failed allocation of a folio moves it in small pages.
            let fail =
                self.flags.fetch_and(!uapi::FLAG_FAIL_ALLOC, Relaxed) & uapi::FLAG_FAIL_ALLOC != 0;
            let mut mig = VmaMigration::setup(
                vma.locked(),
                addr,
                next,
                Select::System,
                (!fail).then_some(vma),
                self.dev.owner(),
                None,
            )?;
            let seq = self.mirror.begin();
            // This device's pages of the step stay, and are found by a
            // walk.
            walk |= self.alloc_and_copy(&mut mig)?;
            mig.pages();
            // The moved pages into the device's page table
            // (`dmirror_migrate_finalize_and_map`); after an
            // invalidation, by a walk.
            match self
                .mirror
                .lock()
                .map_migrated(&mig, seq, &mut spare, |p| map_of(p, key).is_some())
            {
                Err(e) if e == EAGAIN => walk = true,
                r => r?,
            }
            Ok(())
        })?;
        // This device's pages that did not move now (already here), or
        // that an invalidation hid, from walks; then what the device
        // reads: `ENOENT` if a page is not here.
        if walk {
            self.map_moved(&mm, start, end)?;
        }
        self.read_back(c)
    }

    /// Copies what the device reads of `c`'s range, entered in the page
    /// table, to `c`'s buffer, counting the pages in `c`: `ENOENT` at the
    /// first not entered (the end of `dmirror_migrate_to_device` and
    /// `dmirror_exclusive`).
    fn read_back(&self, c: &mut Cmd) -> Result {
        let (start, end) = range(c);
        let mut buf = bounce(end - start)?;
        let mut done = 0;
        let r = self.do_read(start, end, start, &mut buf, &mut done);
        c.cpages = done;
        r?;
        UserSlice::new(UserPtr::from_addr(c.ptr as usize), buf.len())
            .writer()
            .write_slice(&buf)
    }

    /// Enters this device's pages of `[start, end)` in the page table, from
    /// walks that fault nothing in.
    fn map_moved(&self, mm: &MmWithUser, start: usize, end: usize) -> Result {
        let key = self.dev.key();
        self.by_windows(start, end, |addr, pfns, spare| {
            let walk = self
                .mirror
                .snapshot(mm, addr, pfns, self.dev.owner(), &Cancel::task())?;
            let mut table = self.mirror.lock();
            table.map_some(&walk, spare, |p| map_of(p, key).is_some())
        })
    }

    /// Device pages for the system pages `mig` collected, with their data
    /// (`dmirror_migrate_alloc_and_copy`); a 2 MiB folio (or hole) takes a
    /// 2 MiB device folio, if one is free. Returns whether some of the
    /// pages were this device's already.
    fn alloc_and_copy(&self, mig: &mut VmaMigration<'_>) -> Result<bool> {
        // This device's own pages stay where they are.
        let moves = |mig: &VmaMigration<'_>, i: usize| {
            mig.src(i).migrate() && !mig.src_page(i).is_some_and(|p| p.is_device_private())
        };
        let want = (0..mig.npages())
            .filter(|&i| moves(mig, i) && !mig.src(i).compound())
            .count();
        let stayed = (0..mig.npages()).any(|i| {
            mig.src(i).migrate() && mig.src_page(i).is_some_and(|p| p.is_device_private())
        });
        let mut pages = self.dev.alloc_pages(want)?.into_iter();
        let mut i = 0;
        while i < mig.npages() {
            let src = mig.src(i);
            let (here, nr) = (i, src.nr_pages());
            i += nr;
            if !moves(mig, here) {
                continue;
            }
            let spage = mig.src_page(here);
            let d = if src.compound() {
                match self.dev.alloc_block()? {
                    Some(d) => d,
                    // None free: the block stays.
                    None => continue,
                }
            } else {
                match pages.next() {
                    Some(d) => d,
                    None => continue,
                }
            };
            // The data: a block of system pages behind the device folio
            // (`test_hmm`'s backing page or folio), or a page each if the
            // allocator has no block that large.
            let block = |order: u32, from: usize| -> Result<Block> {
                let b = Block::alloc(order, spage.is_none())?;
                if let Some(p) = spage {
                    for k in 0..b.nr_pages() {
                        b.copy_in(k, p.nth(from + k).ok_or(EINVAL)?)?;
                    }
                }
                Ok(b)
            };
            // (Unlike `test_hmm`, which then takes small device pages, the
            // device folio stays whole over small system pages.)
            match order_of(nr).ok_or(ENOMEM).and_then(|o| block(o, 0)) {
                Ok(b) => set_backing(&d.chunk, d.index, [b])?,
                Err(e) if e == ENOMEM && nr > 1 => {
                    let mut pages = KVec::with_capacity(nr, GFP_KERNEL)?;
                    for k in 0..nr {
                        pages.push(block(0, k)?, GFP_KERNEL)?;
                    }
                    set_backing(&d.chunk, d.index, pages)?;
                }
                Err(e) => return Err(e),
            }
            mig.set_dst(here, d.page, src.write())?;
        }
        Ok(stayed)
    }

    /// `dmirror_migrate_to_system`.
    fn migrate_to_sys(&self, c: &mut Cmd) -> Result {
        let (start, end) = range(c);
        let mm = self.user().map_err(|_| EINVAL)?;
        steps(&mm, start, end, |vma, addr, next| {
            c.cpages += self.home(vma, addr, next, Some(&self.flags))?;
            Ok(())
        })
    }

    /// `dmirror_snapshot`: what maps each page of `[addr, +npages)`, as
    /// `HMM_DMIRROR_PROT_*` bytes.
    fn snapshot(&self, c: &mut Cmd) -> Result {
        let (start, end) = range(c);
        let mm = self.user().map_err(|_| EINVAL)?;
        let cancel = Cancel::task();
        let mut out = UserSlice::new(UserPtr::from_addr(c.ptr as usize), end - start).writer();
        let mut addr = start;
        while addr < end {
            let n = ((end - addr) / PAGE_SIZE).min(WALK);
            let mut pfns = [HmmPfn::NONE; WALK];
            let mut perm = [0u8; WALK];
            loop {
                cancel.check()?;
                let walk =
                    match self
                        .mirror
                        .snapshot(&mm, addr, &mut pfns[..n], self.dev.owner(), &cancel)
                    {
                        Err(e) if e == EBUSY => continue,
                        r => r?,
                    };
                let g = self.mirror.lock();
                let pages = match g.pages(&walk) {
                    Err(e) if e == EAGAIN => continue,
                    r => r?,
                };
                for (i, p) in perm[..n].iter_mut().enumerate() {
                    *p = self.prot(pages.entry(i).unwrap_or(HmmPfn::NONE), pages.page(i));
                }
                break;
            }
            out.write_slice(&perm[..n])?;
            c.cpages += n as u64;
            addr += n * PAGE_SIZE;
        }
        Ok(())
    }

    /// `dmirror_mkentry`.
    fn prot(&self, e: HmmPfn, page: Option<crate::mm::page::PageRef<'_>>) -> u8 {
        if e.is_error() {
            return prot::ERROR;
        }
        let Some(page) = page.filter(|_| e.is_valid()) else {
            return prot::NONE;
        };
        let mut p = if page.is_device_private() {
            if map_of(page, self.dev.key()).is_some() {
                prot::DEV_PRIVATE_LOCAL
            } else {
                prot::DEV_PRIVATE_REMOTE
            }
        } else if page.is_zero_page() {
            prot::ZERO
        } else {
            prot::NONE
        };
        p |= if e.writable() {
            prot::WRITE
        } else {
            prot::READ
        };
        match e.map_order() {
            9 => p |= prot::PMD,
            18 => p |= prot::PUD,
            _ => {}
        }
        p
    }

    /// `dmirror_exclusive`: makes `[addr, +npages)` exclusive to the
    /// device, then returns what the device reads there.
    fn exclusive(&self, c: &mut Cmd) -> Result {
        let (start, end) = range(c);
        let cancel = Cancel::task();
        let mut tries = 0;
        loop {
            self.make_exclusive(start, end, &cancel)?;
            match self.read_back(c) {
                // An invalidation removed an entry made above once the mmap
                // lock was let go (a page migrated by compaction, a
                // collapse attempt): `test_hmm` fails with `ENOENT` there;
                // a device would map the range again, and so does this, a
                // few times (not forever: something may invalidate the
                // range as fast as it is mapped).
                Err(e) if e == ENOENT && tries < EXCLUSIVE_TRIES => {
                    tries += 1;
                    cancel.check()?;
                }
                r => return r,
            }
        }
    }

    /// Makes each page of `[start, end)` device-exclusive and enters it in
    /// the table (the loop of `dmirror_exclusive`).
    fn make_exclusive(&self, start: usize, end: usize, cancel: &Cancel<'_>) -> Result {
        let mm = self.user().map_err(|_| EINVAL)?;
        // Held across the range, as `test_hmm` does (an unmap between two
        // pages would remove the entries made before it), and let go only
        // to fault a page in.
        let mut mmap = Some(MmapRead::lock(&mm, Wait::Always)?);
        let mut addr = start;
        while addr < end {
            cancel.check()?;
            let mut spare = PtSpare::new(addr, 1)?;
            let locked = match mmap.as_ref() {
                Some(m) => m,
                None => mmap.insert(MmapRead::lock(&mm, Wait::Always)?),
            };
            let page = self.mirror.make_exclusive(locked, addr)?;
            let entered = {
                let mut table = self.mirror.lock();
                table.map_exclusive(&page, &mut spare)
            };
            // The folio unlocked, with the mirror's lock let go.
            drop(page);
            match entered {
                // An invalidation came since the sequence was read: maybe
                // the core's own on its way (a THP split, a COW, or the
                // fault that turns back a page made exclusive by a try
                // before, which every next try would meet again). The page
                // faulted in writable first (without the mmap lock, which
                // the fault takes), the next try starts from a plain page.
                Err(e) if e == EAGAIN => {
                    mmap = None;
                    self.fault(addr, addr + PAGE_SIZE, true)?;
                }
                r => {
                    r?;
                    addr += PAGE_SIZE;
                }
            }
        }
        Ok(())
    }
}
