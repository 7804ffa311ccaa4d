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
    /// An ioctl failed with an errno: the render node it was issued on,
    /// which ioctl, and the errno (with its text in the message).
    #[error("{}: {op} failed: {errno}", node.display())]
    Ioctl {
        node: PathBuf,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_errors_name_the_node_and_the_errno() {
        let e = Error::Ioctl {
            node: "/dev/dri/renderD129".into(),
            op: "EXEC",
            errno: nix::errno::Errno::ENOLINK,
        };
        assert_eq!(
            e.to_string(),
            "/dev/dri/renderD129: EXEC failed: ENOLINK: Link has been severed"
        );
        assert_eq!(e.errno(), Some(nix::errno::Errno::ENOLINK));
    }
}
