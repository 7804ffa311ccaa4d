// SPDX-License-Identifier: GPL-2.0

//! One emulated device (`struct dmirror_device`): its memory in chunks of
//! device-private pages, each page backed by a system page that holds its
//! data (the device is the CPU), and the moves of its pages home.
//!
//! # Lock order
//!
//! `DeviceData::chunks`, then a chunk's `backing` (a leaf spinlock, also
//! taken when the mm core frees a page: nothing sleeps or allocates under
//! it).

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

use kernel::{
    mm::{virt::VmaRef, Mm, MmWithUser},
    new_mutex, new_spinlock,
    prelude::*,
    sync::{aref::ARef, Arc, Mutex, SpinLock},
};

use crate::memory::Memory;
use crate::mm::{
    backing::Block,
    fault::{Fault, FaultError, Relock},
    migrate::{device_folio_mapcount, Select, VmaMigration},
    numa::Home,
    owner::Owner,
    page::{How, NewPage, PageRef, BLOCK_SIZE, PAGE_SIZE},
    pagemap::{map_of, OwnerKey, Pagemap, PagemapOps},
};
use crate::uapi::FLAG_FAIL_ALLOC;

/// Bytes of one chunk of device memory (`DEVMEM_CHUNK_SIZE`).
const CHUNK_SIZE: usize = 256 << 20;

/// The owner tokens of the devices: each device is its own owner group, as
/// in `test_hmm` (a page of device 1 is not device 0's).
static KEYS: [OwnerKey<Chunk>; crate::NDEVICES] = [OwnerKey::new(), OwnerKey::new()];

/// A chunk of device memory: a device-private pagemap, and the system
/// pages behind the pages in use.
#[pin_data]
pub(crate) struct Chunk {
    #[pin]
    backing: SpinLock<Memory>,
}

impl PagemapOps for Chunk {
    type Bus = ();

    fn folio_freeing(&self, first: usize, nr: usize) {
        let mut i = first;
        while i < first + nr {
            // Freed outside the spinlock: a whole block at once.
            let (old, n) = self.backing.lock().take(i, first + nr - i);
            drop(old);
            i += n;
        }
    }

    fn folio_freed(&self, _freed: usize, _left: usize) {}

    fn migrate_to_ram(&self, fault: Fault<'_>) -> Result<(), FaultError> {
        let page = fault.page();
        let Some(key) = KEYS.iter().find(|k| map_of(page.page(), k).is_some()) else {
            return Err(FaultError::Sigbus);
        };
        if fault.is_pmd() {
            return pmd_fault(fault, key);
        }
        // The page (`dmirror_devmem_fault` of a page mapped by a PTE).
        let vma = fault.vma();
        let mut mig =
            VmaMigration::of_faulting_page(&fault, key.owner()).map_err(|_| FaultError::Sigbus)?;
        copy_home(&mut mig, key, Some(vma.vma()), None).map_err(|_| FaultError::Oom)?;
        mig.pages();
        Ok(())
    }
}

/// A fault on a 2 MiB device folio mapped whole: `test_hmm` moves it home
/// whole under the fault's own lock, which Linux 7.3's `zap_huge_pmd()`
/// does not survive (see `src/zap_huge_pmd.c`); the glue's way is to trade
/// that lock for the mmap lock held for writing, move the folio whole if
/// this mm alone maps it (else split it), and let the access fault again.
fn pmd_fault(fault: Fault<'_>, key: &'static OwnerKey<Chunk>) -> Result<(), FaultError> {
    let address = fault.address();
    let start = address & !(BLOCK_SIZE - 1);
    let excl = match fault.relock_exclusive() {
        Relock::Exclusive(x) => x,
        Relock::Retry => return Err(FaultError::Retry),
        Relock::Unsupported => return Err(FaultError::Sigbus),
    };
    let Some(vma) = excl.vma_lookup(start) else {
        return Err(FaultError::Retry);
    };
    if start < vma.start() || start + BLOCK_SIZE > vma.end() {
        return Err(FaultError::Retry);
    }
    if device_folio_mapcount(vma.locked(), start) != 1 {
        excl.split_whole_folio(start, key.owner());
        return Err(FaultError::Retry);
    }
    let r = VmaMigration::setup(
        vma.locked(),
        start,
        start + BLOCK_SIZE,
        Select::DevicePrivate,
        Some(&vma),
        key.owner(),
        Some(excl.page()),
    )
    .and_then(|mut mig| {
        copy_home(&mut mig, key, Some(&vma), None)?;
        mig.pages();
        Ok(())
    });
    match r {
        // Moved: the access faults again and finds it home.
        Ok(()) => Err(FaultError::Retry),
        Err(_) => Err(excl.fail(FaultError::Oom)),
    }
}

/// Gives each device page of `key`'s device that `mig` collected a system
/// page with its data, a whole 2 MiB device folio a 2 MiB system folio
/// (for `vma` if the move goes through one): `ENOMEM` if a page cannot be
/// had. `fail` is the file's `HMM_DMIRROR_FLAG_FAIL_ALLOC`, taken by the
/// first page that moves: a small one then fails (`ENOMEM`), a folio moves
/// in small pages.
pub(crate) fn copy_home(
    mig: &mut VmaMigration<'_>,
    key: &'static OwnerKey<Chunk>,
    vma: Option<&VmaRef>,
    fail: Option<&AtomicU64>,
) -> Result {
    let mut i = 0;
    while i < mig.npages() {
        let src = mig.src(i);
        let nr = src.nr_pages();
        let here = i;
        i += nr;
        if !src.migrate() || mig.src_page(here).is_none() {
            continue;
        }
        let failed =
            fail.is_some_and(|f| f.fetch_and(!FLAG_FAIL_ALLOC, Relaxed) & FLAG_FAIL_ALLOC != 0);
        let base = mig.start();
        let at = |k: usize| vma.map(|v| (v, base + (here + k) * PAGE_SIZE));
        // Page `k` of the source folio, held by the migration.
        let source = |mig: &VmaMigration<'_>, k: usize, dst: &NewPage, j: usize| -> Result {
            let p = mig.src_page(here).and_then(|p| p.nth(k)).ok_or(EINVAL)?;
            copy_from_device(dst, j, p, key)
        };
        if src.compound() {
            let large = if failed {
                None
            } else {
                NewPage::home(at(0), Home::LOCAL, How::Large)
            };
            if let Some(dst) = large {
                // The folio's data at once, under one lock of its chunk.
                let head = mig.src_page(here).ok_or(EINVAL)?;
                copy_run_from_device(&dst, head, nr, key)?;
                mig.set_dst(here, dst, src.write())?;
                continue;
            }
            // No 2 MiB folio: small pages, the core splits the source.
            for k in 0..nr {
                let dst = NewPage::home(at(k), Home::LOCAL, How::Migrate).ok_or(ENOMEM)?;
                source(mig, k, &dst, 0)?;
                mig.set_dst(here + k, dst, src.write())?;
            }
            continue;
        }
        if failed {
            return Err(ENOMEM);
        }
        let dst = NewPage::home(at(0), Home::LOCAL, How::Migrate).ok_or(ENOMEM)?;
        source(mig, 0, &dst, 0)?;
        mig.set_dst(here, dst, src.write())?;
    }
    Ok(())
}

/// Copies the data of the `nr` device pages of `key`'s device from `first`
/// on (a folio's) into pages `0..nr` of `dst`, under one lock of their
/// chunk (`test_hmm` copies a folio at once too).
fn copy_run_from_device(
    dst: &NewPage,
    first: PageRef<'_>,
    nr: usize,
    key: &'static OwnerKey<Chunk>,
) -> Result {
    let map = map_of(first, key).ok_or(EINVAL)?;
    let index = map.index_of(first).ok_or(EINVAL)?;
    let backing = map.data().backing.lock();
    for k in 0..nr {
        let (src, j) = backing.get(index + k).ok_or(EINVAL)?;
        src.copy_out(j, dst, k)?;
    }
    Ok(())
}

/// Copies the data of `page`, a device page of `key`'s device, into page
/// `k` of `dst`.
fn copy_from_device(
    dst: &NewPage,
    k: usize,
    page: PageRef<'_>,
    key: &'static OwnerKey<Chunk>,
) -> Result {
    let map = map_of(page, key).ok_or(EINVAL)?;
    let index = map.index_of(page).ok_or(EINVAL)?;
    let backing = map.data().backing.lock();
    let (src, j) = backing.get(index).ok_or(EINVAL)?;
    src.copy_out(j, dst, k)
}

/// One emulated device.
#[pin_data]
pub(crate) struct DeviceData {
    id: usize,
    /// Its chunks of memory.
    #[pin]
    chunks: Mutex<KVec<Arc<Pagemap<Chunk>>>>,
}

/// A device page just allocated, with the chunk it is in and its index
/// there.
pub(crate) struct DevPage {
    pub(crate) chunk: Arc<Pagemap<Chunk>>,
    pub(crate) index: usize,
    pub(crate) page: NewPage,
}

impl DeviceData {
    /// Device `id`, with one chunk of memory.
    pub(crate) fn new(id: usize) -> Result<Arc<Self>> {
        if id >= KEYS.len() {
            return Err(EINVAL);
        }
        let d = Arc::pin_init(
            try_pin_init!(Self {
                id,
                chunks <- new_mutex!(KVec::new()),
            }),
            GFP_KERNEL,
        )?;
        let c = d.new_chunk()?;
        d.chunks.lock().push(c, GFP_KERNEL)?;
        Ok(d)
    }

    fn new_chunk(&self) -> Result<Arc<Pagemap<Chunk>>> {
        let npages = CHUNK_SIZE / PAGE_SIZE;
        let slots = Memory::new(npages)?;
        let map = Pagemap::new(
            CHUNK_SIZE,
            self.key(),
            c"hmm_dmirror",
            Home::LOCAL,
            (),
            |_| {
                try_pin_init!(Chunk {
                    backing <- new_spinlock!(slots),
                }? Error)
            },
        )?;
        pr_info!(
            "hmm_dmirror{}: added a {} MB chunk\n",
            self.id,
            CHUNK_SIZE >> 20
        );
        Ok(map)
    }

    /// The device's owner token.
    pub(crate) fn key(&self) -> &'static OwnerKey<Chunk> {
        &KEYS[self.id]
    }

    /// The device's owner.
    pub(crate) fn owner(&self) -> Owner {
        self.key().owner()
    }

    /// Up to `want` free device pages, in new chunks if the device has too
    /// few.
    pub(crate) fn alloc_pages(&self, want: usize) -> Result<KVec<DevPage>> {
        let mut out = KVec::with_capacity(want, GFP_KERNEL)?;
        let mut scratch = KVec::with_capacity(want, GFP_KERNEL)?;
        let mut chunks = self.chunks.lock();
        let mut k = 0;
        while out.len() < want {
            if k == chunks.len() {
                let c = self.new_chunk()?;
                chunks.push(c, GFP_KERNEL)?;
            }
            let chunk = chunks[k].clone();
            let left = want - out.len();
            let mut err: Result = Ok(());
            chunk.alloc_pages(left, &mut scratch, |index, page| {
                // Room reserved above (`want`).
                if let Err(e) = out.push(
                    DevPage {
                        chunk: chunk.clone(),
                        index,
                        page,
                    },
                    GFP_KERNEL,
                ) {
                    err = Err(e.into());
                }
            });
            err?;
            k += 1;
        }
        Ok(out)
    }

    /// A free 2 MiB block of device memory, as one folio, in a new chunk if
    /// no chunk has one; `None` if the kernel cannot migrate such folios.
    pub(crate) fn alloc_block(&self) -> Result<Option<DevPage>> {
        let mut chunks = self.chunks.lock();
        for c in chunks.iter() {
            if let Some((index, page)) = c.alloc_block() {
                let chunk = c.clone();
                return Ok(Some(DevPage { chunk, index, page }));
            }
        }
        let chunk = self.new_chunk()?;
        chunks.push(chunk.clone(), GFP_KERNEL)?;
        Ok(chunk
            .alloc_block()
            .map(|(index, page)| DevPage { chunk, index, page }))
    }

    /// Reads up to `n` device pages of this device from `first` on (one
    /// after another) into `buf`, under one lock: those up to the end of
    /// `first`'s chunk (the next chunk's pages may follow in frame
    /// numbers). Returns how many.
    pub(crate) fn read_run(&self, first: PageRef<'_>, n: usize, buf: &mut [u8]) -> Result<usize> {
        let map = map_of(first, self.key()).ok_or(EFAULT)?;
        let index = map.index_of(first).ok_or(EFAULT)?;
        let n = n.min(map.npages() - index);
        if buf.len() < n * PAGE_SIZE {
            return Err(EINVAL);
        }
        let backing = map.data().backing.lock();
        for (k, b) in buf.chunks_exact_mut(PAGE_SIZE).take(n).enumerate() {
            let (p, j) = backing.get(index + k).ok_or(EFAULT)?;
            p.contents(j).ok_or(EFAULT)?.read(0, b);
        }
        Ok(n)
    }

    /// Writes `buf` to device page `page` (one of this device's).
    pub(crate) fn write_page(&self, page: PageRef<'_>, buf: &[u8]) -> Result {
        let map = map_of(page, self.key()).ok_or(EFAULT)?;
        let index = map.index_of(page).ok_or(EFAULT)?;
        let backing = map.data().backing.lock();
        let (p, j) = backing.get(index).ok_or(EFAULT)?;
        p.contents(j).ok_or(EFAULT)?.write(0, buf);
        Ok(())
    }
}

/// Puts `blocks` behind the pages of `chunk` from `first` on, one after
/// another: `EINVAL` past the chunk's end, `EBUSY` over data already there
/// (see [`Memory::set`]).
pub(crate) fn set_backing(
    chunk: &Pagemap<Chunk>,
    first: usize,
    blocks: impl IntoIterator<Item = Block>,
) -> Result {
    chunk.data().backing.lock().set(first, blocks)
}

/// The mm of the calling task, referenced.
pub(crate) fn current_mm() -> Result<ARef<Mm>> {
    let task = kernel::current!();
    let mm: &MmWithUser = task.mm().ok_or(EINVAL)?;
    Ok(ARef::from(&**mm))
}
