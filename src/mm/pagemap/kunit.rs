// SPDX-License-Identifier: GPL-2.0

//! `Pagemap`'s KUnit tests.

#[kernel::macros::kunit_tests(msvm_pagemap)]
mod tests {
    use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    use kernel::{new_mutex, sync::Mutex};

    use super::super::super::dma::SysPage;
    use super::super::super::kunit_mm::{check, TestMapping};
    use super::super::super::migrate::{Select, VmaMigration};
    use super::super::super::mmap::{MmapRead, Wait};
    use super::super::super::page::How;
    use super::super::*;

    /// Counts the callbacks of the map's frees.
    struct Counting {
        freeing: AtomicUsize,
        freed: AtomicUsize,
        /// The pages in use after the last free.
        left: AtomicUsize,
    }

    impl PagemapOps for Counting {
        type Bus = ();

        fn folio_freeing(&self, _first: usize, nr: usize) {
            self.freeing.fetch_add(nr, Relaxed);
        }

        fn folio_freed(&self, freed: usize, left: usize) {
            self.freed.fetch_add(freed, Relaxed);
            self.left.store(left, Relaxed);
        }

        fn migrate_to_ram(&self, _fault: Fault<'_>) -> Result<(), FaultError> {
            Err(FaultError::Sigbus)
        }
    }

    static KEY: OwnerKey<Counting> = OwnerKey::new();
    static OTHER: OwnerKey<Counting> = OwnerKey::new();

    fn map(blocks: usize) -> Result<Arc<Pagemap<Counting>>> {
        Pagemap::new(
            blocks * BLOCK_PAGES * PAGE_SIZE,
            &KEY,
            c"msvm_kunit",
            Home::LOCAL,
            (),
            |_| {
                try_init!(Counting {
                    freeing: AtomicUsize::new(0),
                    freed: AtomicUsize::new(0),
                    left: AtomicUsize::new(usize::MAX),
                }? Error)
            },
        )
    }

    /// Pages handed out are the map's, known by its key only, and come
    /// back through the callbacks when their last reference goes: once
    /// each, to be handed out again.
    #[test]
    fn pages_out_are_the_maps_and_come_back_once() -> Result {
        let m = map(2)?;
        let mut scratch = KVec::with_capacity(3, GFP_KERNEL)?;
        let mut pages = KVec::with_capacity(3, GFP_KERNEL)?;
        let n = m.alloc_pages(5, &mut scratch, |i, p| {
            // Room for as many as the scratch holds.
            let _ = pages.push((i, p), GFP_KERNEL);
        });
        // No more than the scratch holds.
        assert_eq!(n, 3);
        assert_eq!(pages.len(), 3);
        assert_eq!(m.used(), 3);
        for (i, p) in &pages {
            let page = p.page();
            assert!(page.is_device_private());
            assert_eq!(map_of(page, &KEY).and_then(|m| m.index_of(page)), Some(*i));
            assert!(map_of(page, &OTHER).is_none());
            // A map that stands for no BAR gives no bus-side address.
            // SAFETY: the map has no range.
            assert!(unsafe { m.peer_addr(page) }.is_none());
        }
        drop(pages);
        assert_eq!(m.used(), 0);
        assert_eq!(m.data().freeing.load(Relaxed), 3);
        assert_eq!(m.data().freed.load(Relaxed), 3);
        assert_eq!(m.counts().free, 2 * BLOCK_PAGES);
        Ok(())
    }

    /// A map rekeyed is known by its new key only, and says which of its
    /// pages are in use; each free tells how many are left.
    #[test]
    fn rekeyed_maps_are_the_new_keys() -> Result {
        let m = map(1)?;
        let mut scratch = KVec::with_capacity(2, GFP_KERNEL)?;
        let mut pages = KVec::with_capacity(2, GFP_KERNEL)?;
        m.alloc_pages(2, &mut scratch, |i, p| {
            let _ = pages.push((i, p), GFP_KERNEL);
        });
        assert_eq!(pages.len(), 2);
        m.rekey(&OTHER);
        for (i, p) in &pages {
            assert!(map_of(p.page(), &KEY).is_none());
            assert_eq!(
                map_of(p.page(), &OTHER).and_then(|m| m.index_of(p.page())),
                Some(*i)
            );
            assert!(m.is_used(*i));
        }
        let first = pages[0].0;
        drop(pages.pop());
        assert_eq!(m.data().left.load(Relaxed), 1);
        drop(pages);
        assert_eq!(m.data().left.load(Relaxed), 0);
        assert!(!m.is_used(first));
        assert!(!m.is_used(m.npages()));
        Ok(())
    }

    /// A whole 2 MiB block goes out as one folio, only while a block is
    /// wholly free, and comes back whole.
    #[test]
    fn blocks_go_out_whole() -> Result {
        let m = map(2)?;
        // msvm's kernels migrate THPs (`CONFIG_ARCH_ENABLE_THP_MIGRATION`),
        // and the map's frames are aligned to 2 MiB blocks.
        assert!(m.holds_large());
        let mut scratch = KVec::with_capacity(1, GFP_KERNEL)?;
        let mut small = None;
        m.alloc_pages(1, &mut scratch, |_, p| small = Some(p));
        let (i, folio) = m.alloc_block().ok_or(ENOMEM)?;
        assert_eq!(i % BLOCK_PAGES, 0);
        assert_eq!(folio.page().folio_order(), BLOCK_PAGES.trailing_zeros());
        assert_eq!(m.block_use(i / BLOCK_PAGES), (BLOCK_PAGES, true));
        // The other block has a page out: no block is wholly free.
        assert!(m.alloc_block().is_none());
        drop(folio);
        assert_eq!(m.data().freeing.load(Relaxed), BLOCK_PAGES);
        assert_eq!(m.used(), 1);
        drop(small);
        assert_eq!(m.used(), 0);
        Ok(())
    }

    /// Pages moved to the device keep their data in a store of the test's
    /// (the memory a device would have), by index in the map.
    #[pin_data]
    struct Trip {
        #[pin]
        store: Mutex<KVec<(usize, KVec<u8>)>>,
        homes: AtomicUsize,
    }

    impl PagemapOps for Trip {
        type Bus = ();

        fn folio_freeing(&self, _first: usize, _nr: usize) {}

        fn folio_freed(&self, _freed: usize, _left: usize) {}

        /// Moves the page home, with its data (`dmirror_devmem_fault`).
        fn migrate_to_ram(&self, fault: Fault<'_>) -> Result<(), FaultError> {
            let page = fault.page();
            let map = map_of(page.page(), &TRIP).ok_or(FaultError::Sigbus)?;
            let index = map.index_of(page.page()).ok_or(FaultError::Sigbus)?;
            let addr = fault.address() & !(PAGE_SIZE - 1);
            let vma = fault.vma();
            let owner = TRIP.owner();
            let end = addr + PAGE_SIZE;
            let mut mig = VmaMigration::setup(
                vma,
                addr,
                end,
                Select::DevicePrivate,
                None,
                owner,
                Some(page),
            )
            .map_err(|_| FaultError::Sigbus)?;
            if mig.src(0).migrate() && mig.src_page(0).is_some() {
                let dst = NewPage::home(Some((vma.vma(), addr)), Home::LOCAL, How::Migrate)
                    .ok_or(FaultError::Oom)?;
                {
                    let store = self.store.lock();
                    let (_, data) = store
                        .iter()
                        .find(|(i, _)| *i == index)
                        .ok_or(FaultError::Sigbus)?;
                    SysPage::new(dst.page())
                        .ok_or(FaultError::Sigbus)?
                        .write(0, data);
                }
                let write = mig.src(0).write();
                mig.set_dst(0, dst, write).map_err(|_| FaultError::Sigbus)?;
            }
            mig.pages();
            self.homes.fetch_add(1, Relaxed);
            Ok(())
        }
    }

    static TRIP: OwnerKey<Trip> = OwnerKey::new();

    /// Pages of a process go to the device (its memory holds their data)
    /// and come home, one by one, when the process touches them: a read
    /// finds the data they left with, a write lands on it; each device
    /// page is freed as its page comes home.
    #[test]
    fn pages_go_to_the_device_and_fault_home() -> Result {
        // Before the mapping, so that it goes after: dropping a map waits
        // for its pages, which the mapping may still hold if a check
        // fails.
        let map = Pagemap::new(
            BLOCK_PAGES * PAGE_SIZE,
            &TRIP,
            c"msvm_kunit_trip",
            Home::LOCAL,
            (),
            |_| {
                try_pin_init!(Trip {
                    store <- new_mutex!(KVec::new()),
                    homes: AtomicUsize::new(0),
                }? Error)
            },
        )?;
        let m = TestMapping::new(2 * PAGE_SIZE)?;
        m.fill(0, PAGE_SIZE, 0x31)?;
        m.fill(PAGE_SIZE, PAGE_SIZE, 0x32)?;
        {
            let mmap = MmapRead::lock(m.mm(), Wait::Always)?;
            let vma = mmap.vma_lookup(m.addr()).ok_or(ENOENT)?;
            let end = m.addr() + 2 * PAGE_SIZE;
            let mut mig =
                VmaMigration::setup(vma, m.addr(), end, Select::System, None, TRIP.owner(), None)?;
            let mut scratch = KVec::with_capacity(2, GFP_KERNEL)?;
            let mut out = KVec::with_capacity(2, GFP_KERNEL)?;
            map.alloc_pages(2, &mut scratch, |i, p| {
                // Room for two.
                let _ = out.push((i, p), GFP_KERNEL);
            });
            check(out.len() == 2)?;
            for (k, (index, dst)) in out.into_iter().enumerate() {
                let src = mig.src_page(k).ok_or(EINVAL)?;
                let mut data = KVec::from_elem(0u8, PAGE_SIZE, GFP_KERNEL)?;
                SysPage::new(src).ok_or(EINVAL)?.read(0, &mut data);
                map.data().store.lock().push((index, data), GFP_KERNEL)?;
                mig.set_dst(k, dst, true)?;
            }
            mig.pages();
            check(mig.src(0).migrate() && mig.src(1).migrate())?;
        }
        check(map.used() == 2)?;
        check(map.data().homes.load(Relaxed) == 0)?;
        // A read brings the second page home, with its data.
        check(m.holds(PAGE_SIZE, PAGE_SIZE, 0x32)?)?;
        check(map.data().homes.load(Relaxed) == 1)?;
        check(map.used() == 1)?;
        // A write brings the first home, then lands.
        m.fill(0, 8, 0x41)?;
        check(map.data().homes.load(Relaxed) == 2)?;
        check(map.used() == 0)?;
        check(m.holds(0, 8, 0x41)? && m.holds(8, PAGE_SIZE - 8, 0x31)?)?;
        check(m.holds(PAGE_SIZE, PAGE_SIZE, 0x32)?)?;
        check(map.data().homes.load(Relaxed) == 2)?;
        Ok(())
    }
}
