// SPDX-License-Identifier: GPL-2.0

//! A misc character device whose open files reach the data of their
//! device: `kernel::miscdevice` hands `open` only the registration, so
//! [`Misc`] keeps the data beside it and finds it from there.

use core::marker::PhantomData;

use kernel::{
    fs::File,
    miscdevice::{MiscDevice, MiscDeviceOptions, MiscDeviceRegistration},
    mm::virt::VmaNew,
    prelude::*,
};

/// An open file of a [`Misc`] device.
pub(crate) trait MiscFile: Sized + Send + Sync + 'static {
    /// What the files of one device share.
    type Data: Send + Sync;

    /// A file is opened, by the calling task.
    fn open(data: &Self::Data) -> Result<Pin<KBox<Self>>>;

    /// `ioctl(2)` on the file.
    fn ioctl(this: Pin<&Self>, cmd: u32, arg: usize) -> Result<isize>;

    /// `mmap(2)` of the file.
    fn mmap(this: Pin<&Self>, vma: &VmaNew) -> Result;
}

/// The `MiscDevice` of a [`Misc`]: private, so that every registration of
/// it is a [`Misc`]'s.
struct Adapter<F>(PhantomData<F>);

/// A registered misc device `/dev/<name>`, and the data its files share;
/// deregistered on drop (open files keep what they took of the data).
///
/// # Invariants
///
/// Every `MiscDeviceRegistration<Adapter<F>>` is the `reg` of a `Misc<F>`.
#[pin_data]
pub(crate) struct Misc<F: MiscFile> {
    // Dropped (deregistered) before `data`.
    #[pin]
    reg: MiscDeviceRegistration<Adapter<F>>,
    data: F::Data,
}

impl<F: MiscFile> Misc<F> {
    /// Registers `/dev/<name>`, whose files reach `data`.
    pub(crate) fn register(name: &'static CStr, data: F::Data) -> impl PinInit<Self, Error> {
        // INVARIANT: the only registration of `Adapter<F>` (private) made
        // anywhere; `data` is set before the device is registered (the
        // initializer runs in order), so an open finds it.
        try_pin_init!(Self {
            data,
            reg <- MiscDeviceRegistration::register(MiscDeviceOptions { name }),
        })
    }

    /// The data the files share.
    pub(crate) fn data(&self) -> &F::Data {
        &self.data
    }
}

#[vtable]
impl<F: MiscFile> MiscDevice for Adapter<F> {
    type Ptr = Pin<KBox<F>>;

    fn open(_file: &File, misc: &MiscDeviceRegistration<Self>) -> Result<Self::Ptr> {
        let reg = core::ptr::from_ref(misc);
        // SAFETY: `misc` is the `reg` of a `Misc<F>` (invariant), which
        // lives while the open runs (deregistration waits for it under the
        // misc core's lock), so the containing `Misc` is valid to borrow.
        let dev = unsafe { &*kernel::container_of!(reg, Misc<F>, reg) };
        F::open(&dev.data)
    }

    fn ioctl(this: Pin<&F>, _file: &File, cmd: u32, arg: usize) -> Result<isize> {
        F::ioctl(this, cmd, arg)
    }

    fn mmap(this: Pin<&F>, _file: &File, vma: &VmaNew) -> Result {
        F::mmap(this, vma)
    }
}

#[kunit_tests(msvm_misc)]
mod tests {
    use super::super::kunit_mm::check;
    use super::*;

    /// Files that open and do nothing.
    struct Idle;

    impl MiscFile for Idle {
        type Data = u32;

        fn open(_data: &u32) -> Result<Pin<KBox<Self>>> {
            Ok(KBox::pin(Idle, GFP_KERNEL)?)
        }

        fn ioctl(_this: Pin<&Self>, _cmd: u32, _arg: usize) -> Result<isize> {
            Err(ENOTTY)
        }

        fn mmap(_this: Pin<&Self>, _vma: &VmaNew) -> Result {
            Err(ENODEV)
        }
    }

    /// A device registers with a minor of its own under its name, keeps
    /// its data, and is gone once dropped: the name can be had again.
    /// (Checks, not assertions: a failed assertion would end the case with
    /// the device registered, its name and operations in this module.)
    #[test]
    fn registers_and_deregisters() -> Result {
        for round in 0..2u32 {
            let dev = KBox::pin_init(
                Misc::<Idle>::register(c"msvm_kunit_misc", round),
                GFP_KERNEL,
            )?;
            check(*dev.data() == round)?;
            // SAFETY: the registration's `struct miscdevice`, registered
            // while `dev` lives; plain fields.
            let (minor, name) = unsafe {
                let raw = dev.reg.as_raw();
                ((*raw).minor, CStr::from_char_ptr((*raw).name))
            };
            check(minor != kernel::bindings::MISC_DYNAMIC_MINOR as i32)?;
            check(name == c"msvm_kunit_misc")?;
        }
        Ok(())
    }
}
