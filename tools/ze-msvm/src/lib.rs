//! msvm's Level Zero driver.
//!
//! The oneAPI Level Zero loader (`libze_loader.so.1`) opens this library and
//! asks it for its DDI tables (`zeGetGlobalProcAddrTable` and the others),
//! through which it then calls the driver. Every entry is a stub that
//! returns `ZE_RESULT_ERROR_UNSUPPORTED_FEATURE` until `ddi`'s `fill_*`
//! functions set a real one.

pub mod sys;

mod attrs;
mod cmdlist;
mod context;
mod ddi;
mod device;
mod driver;
mod handle;
mod memory;
mod queue;
mod result;
mod sync;
