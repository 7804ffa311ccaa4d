//! Typed errors of the runtime.

use std::path::PathBuf;

/// Every failure the runtime reports.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A render node could not be opened.
    #[error("cannot open {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The DRM directory could not be listed.
    #[error("cannot list {path}: {source}")]
    List {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An ioctl failed with an errno.
    #[error("{op} failed: {errno} ({desc})", desc = errno.desc())]
    Ioctl {
        op: &'static str,
        errno: nix::errno::Errno,
    },
    /// The module speaks another ABI version.
    #[error("msvm module ABI version {module}, this runtime knows {runtime}")]
    Version { module: u32, runtime: u32 },
}

impl Error {
    /// The errno of a failed ioctl, if that is what this error is.
    pub fn errno(&self) -> Option<nix::errno::Errno> {
        match self {
            Error::Ioctl { errno, .. } => Some(*errno),
            _ => None,
        }
    }
}

/// The runtime's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
