// SPDX-License-Identifier: GPL-2.0

//! The DRM ioctl table of msvm.
//!
//! `kernel::declare_drm_ioctls!` only knows argument types of the kernel's own
//! `uapi` crate. msvm's ABI lives in its own header
//! (`include/uapi/drm/msvm_drm.h`), so this is the same macro for msvm's
//! types, with the same checks: ioctl numbers dense from `DRM_COMMAND_BASE`,
//! argument sizes encoded in the command, the handler run inside a
//! `drm_dev_enter()` section (so never after the device is unplugged).

/// Declares `const IOCTLS` for a `drm::Driver` impl.
///
/// Entries are `(NAME, nr, ArgType, flags, handler)`, in `nr` order from 0,
/// where `nr` is the `DRM_MSVM_*` number (a `u32`), `ArgType` a uAPI struct
/// all of whose bit patterns are valid (every generated `drm_msvm_*` struct
/// is plain integers), and `handler` has the shape
///
/// ```ignore
/// fn handler(dev: &drm::Device<Drv, Registered>, reg: &Drv::RegistrationData<'_>,
///            arg: &mut ArgType, file: &drm::File<Drv::File>) -> Result<u32>
/// ```
macro_rules! declare_msvm_ioctls {
    ($drv:ty; $(($name:ident, $nr:expr, $arg:ty, $flags:expr, $func:expr)),* $(,)?) => {
        const IOCTLS: &'static [::kernel::drm::ioctl::DrmIoctlDescriptor] = {
            const _: () = {
                let i: u32 = 0;
                $(
                    ::core::assert!($nr == i, "ioctls must be dense and in order");
                    let i: u32 = i + 1;
                )*
                let _ = i;
            };
            &[$(
                ::kernel::bindings::drm_ioctl_desc {
                    cmd: ::kernel::drm::ioctl::IOWR::<$arg>(
                        ::kernel::uapi::DRM_COMMAND_BASE + $nr,
                    ),
                    func: {
                        /// The C entry point of this ioctl.
                        ///
                        /// # Safety
                        ///
                        /// Only for the DRM core's ioctl dispatch: `raw_dev` a
                        /// registered device of this driver, `raw_data` its
                        /// kernel copy of the argument, `raw_file` the caller's
                        /// DRM file.
                        #[allow(non_snake_case)]
                        unsafe extern "C" fn $name(
                            raw_dev: *mut ::kernel::bindings::drm_device,
                            raw_data: *mut ::core::ffi::c_void,
                            raw_file: *mut ::kernel::bindings::drm_file,
                        ) -> ::core::ffi::c_int {
                            let dev: &::kernel::drm::Device<$drv, ::kernel::drm::Ioctl> =
                                // SAFETY: the DRM core calls ioctl handlers only on
                                // a device of this driver that is alive and was
                                // registered (`drm_dev_register()`), which is what
                                // the `Ioctl` context requires.
                                unsafe { ::kernel::drm::Device::from_raw(raw_dev) };
                            let Some(guard) = dev.registration_guard() else {
                                return ::kernel::error::code::ENODEV.to_errno();
                            };
                            // SAFETY: `drm_ioctl()` hands us a kernel copy of the
                            // argument of `_IOC_SIZE(cmd)` bytes, which is
                            // `size_of::<$arg>()` by construction of `cmd` above,
                            // exclusively ours until we return; every bit pattern
                            // is a valid `$arg` (plain integers).
                            let arg = unsafe { &mut *raw_data.cast::<$arg>() };
                            // SAFETY: `raw_file` is the `struct drm_file` of the
                            // caller, valid for the whole call.
                            let file = unsafe { ::kernel::drm::File::from_raw(raw_file) };
                            let res = guard.registration_data_with(|reg| $func(&*guard, reg, arg, file));
                            match res {
                                Err(e) => e.to_errno(),
                                Ok(v) => v
                                    .try_into()
                                    .unwrap_or(::kernel::error::code::ERANGE.to_errno()),
                            }
                        }
                        Some($name)
                    },
                    flags: $flags,
                    name: ::kernel::str::as_char_ptr_in_const_context(
                        ::kernel::c_str!(::core::stringify!($name)),
                    ),
                }
            ),*]
        };
    };
}

pub(crate) use declare_msvm_ioctls;
