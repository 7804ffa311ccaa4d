// SPDX-License-Identifier: GPL-2.0

//! Messages on the vfio-user socket: a header, a body, and fds passed with
//! `SCM_RIGHTS` on the header's first byte.

use std::io::{IoSlice, IoSliceMut, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Mutex;

use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};

use crate::proto::{Header, HEADER_LEN, SERVER_MAX_MSG_FDS};
use crate::Error;

/// Largest message the server accepts: a 1 MiB transfer and its header.
pub const MAX_MESSAGE: u32 = (HEADER_LEN as u32) + 64 + crate::proto::SERVER_MAX_DATA_XFER;

/// One message as received.
pub struct Message {
    /// Its header.
    pub hdr: Header,
    /// The bytes after the header.
    pub body: Vec<u8>,
    /// The fds that came with it.
    pub fds: Vec<OwnedFd>,
}

/// The receiving half (one thread reads).
pub struct Receiver(UnixStream);

/// The sending half, shared by every thread that sends.
pub struct Sender(Mutex<UnixStream>);

/// Splits a connected socket into its two halves.
pub fn split(s: UnixStream) -> Result<(Receiver, Sender), Error> {
    let w = s.try_clone().map_err(Error::Io)?;
    Ok((Receiver(s), Sender(Mutex::new(w))))
}

impl Receiver {
    /// The next message; `None` when the peer closed the socket.
    pub fn recv(&mut self) -> Result<Option<Message>, Error> {
        let mut hb = [0u8; HEADER_LEN];
        let mut got = 0;
        let mut fds = Vec::new();
        while got < HEADER_LEN {
            let mut cbuf = nix::cmsg_space!([RawFd; SERVER_MAX_MSG_FDS as usize]);
            let mut iov = [IoSliceMut::new(&mut hb[got..])];
            let msg = recvmsg::<()>(
                self.0.as_raw_fd(),
                &mut iov,
                Some(&mut cbuf),
                MsgFlags::MSG_CMSG_CLOEXEC,
            )
            .map_err(Error::Sys)?;
            for c in msg.cmsgs().map_err(Error::Sys)? {
                if let ControlMessageOwned::ScmRights(r) = c {
                    // SAFETY: the kernel installed these fds in this
                    // process for this message; nothing else owns them.
                    fds.extend(r.into_iter().map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }));
                }
            }
            if msg.bytes == 0 {
                return if got == 0 {
                    Ok(None)
                } else {
                    Err(Error::Malformed("short header"))
                };
            }
            got += msg.bytes;
        }
        let hdr = Header::decode(&hb);
        if (hdr.size as usize) < HEADER_LEN || hdr.size > MAX_MESSAGE {
            return Err(Error::Malformed("message size"));
        }
        let mut body = vec![0; hdr.size as usize - HEADER_LEN];
        self.0.read_exact(&mut body).map_err(Error::Io)?;
        Ok(Some(Message { hdr, body, fds }))
    }
}

impl Sender {
    /// Sends `hdr` (its size set to the header and `body`), then `body`,
    /// with `fds` on the first byte.
    pub fn send(&self, mut hdr: Header, body: &[u8], fds: &[RawFd]) -> Result<(), Error> {
        hdr.size = (HEADER_LEN + body.len()) as u32;
        let h = hdr.encode();
        let s = self.0.lock().map_err(|_| Error::Poisoned)?;
        let mut sent = 0;
        let total = HEADER_LEN + body.len();
        while sent < total {
            let (a, b) = if sent < HEADER_LEN {
                (&h[sent..], body)
            } else {
                (&[][..], &body[sent - HEADER_LEN..])
            };
            let iov = [IoSlice::new(a), IoSlice::new(b)];
            let rights = [ControlMessage::ScmRights(fds)];
            let cmsgs: &[ControlMessage] = if sent == 0 && !fds.is_empty() {
                &rights
            } else {
                &[]
            };
            let n = sendmsg::<()>(s.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None)
                .map_err(Error::Sys)?;
            sent += n;
        }
        Ok(())
    }
}
