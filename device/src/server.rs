// SPDX-License-Identifier: GPL-2.0

//! One vfio-user connection, served in both directions at once.
//!
//! QEMU waits for the reply to a region access while holding its global
//! lock, and answers the device's `DMA_READ`/`DMA_WRITE` only with that
//! lock: a device that waited for a DMA reply before answering a region
//! access would stall both until QEMU's message timeout. So one thread
//! (the *serving* thread, [`Connection::serve`]) reads every message:
//! it answers requests without ever waiting for QEMU, and hands each reply
//! to the thread that waits for it ([`Connection::dma_read`] and
//! [`Connection::dma_write`], called from the device's engines only).

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::thread::ThreadId;
use std::time::Duration;

use crate::device::Device;
use crate::dma::Remote;
use crate::proto::{self, cmd, flags, ClientCaps, Header, Reader, Writer};
use crate::sock::{Message, Receiver, Sender};
use crate::Error;

/// How long the device waits for QEMU to answer a DMA request.
const DMA_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection to QEMU.
pub struct Connection {
    device: Arc<Device>,
    tx: Sender,
    caps: Mutex<ClientCaps>,
    next_id: AtomicU16,
    /// Requests of ours waiting for their reply, by message id; dropped
    /// (so the waiters see the connection gone) when it closes.
    waiting: Mutex<Option<HashMap<u16, mpsc::Sender<Message>>>>,
    serving: OnceLock<ThreadId>,
}

impl Connection {
    /// A connection on `tx` for `device`.
    pub fn new(device: Arc<Device>, tx: Sender) -> Self {
        Self {
            device,
            tx,
            caps: Mutex::new(ClientCaps::default()),
            next_id: AtomicU16::new(0),
            waiting: Mutex::new(Some(HashMap::new())),
            serving: OnceLock::new(),
        }
    }

    /// The device served.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// Serves messages from `rx` until QEMU closes the socket (`Ok`) or
    /// sends what cannot be decoded (`Err`). Waiters on DMA replies see
    /// [`Error::Closed`] once it returns.
    pub fn serve(&self, mut rx: Receiver) -> Result<(), Error> {
        let _ = self.serving.set(std::thread::current().id());
        let r = self.serve_loop(&mut rx);
        if let Ok(mut w) = self.waiting.lock() {
            *w = None;
        }
        r
    }

    fn serve_loop(&self, rx: &mut Receiver) -> Result<(), Error> {
        while let Some(msg) = rx.recv()? {
            if msg.hdr.is_reply() {
                let waiter = self
                    .waiting
                    .lock()
                    .map_err(|_| Error::Poisoned)?
                    .as_mut()
                    .and_then(|w| w.remove(&msg.hdr.id));
                // A reply nobody waits for any more (timed out): dropped.
                if let Some(w) = waiter {
                    let _ = w.send(msg);
                }
                continue;
            }
            let hdr = msg.hdr;
            let reply = self.request(msg);
            if hdr.flags & flags::NO_REPLY != 0 {
                if let Err(e) = reply {
                    eprintln!("msvm-gpu: posted command {} failed: {e}", hdr.command);
                }
                continue;
            }
            match reply {
                Ok((body, fd)) => {
                    let fds: Vec<_> = fd.into_iter().collect();
                    self.tx.send(hdr.reply(body.len()), &body, &fds)?
                }
                Err(e) => self.tx.send(hdr.error_reply(e.errno()), &[], &[])?,
            }
        }
        Ok(())
    }

    /// Answers one request: the reply's body and an fd to pass with it.
    fn request(&self, msg: Message) -> Result<(Vec<u8>, Option<std::os::fd::RawFd>), Error> {
        let d = &self.device;
        let mut r = Reader::new(&msg.body);
        match msg.hdr.command {
            cmd::VERSION => {
                let (major, _minor, caps) = proto::parse_version(&msg.body)?;
                if major != 0 {
                    return Err(Error::Malformed("protocol major version"));
                }
                *self.caps.lock().map_err(|_| Error::Poisoned)? = caps;
                Ok((proto::version_reply(), None))
            }
            cmd::DEVICE_GET_INFO => Ok((d.info(), None)),
            cmd::DEVICE_GET_REGION_INFO => {
                let argsz = r.u32()?;
                let _flags = r.u32()?;
                let index = r.u32()?;
                d.region_info(index, argsz)
            }
            cmd::DEVICE_GET_IRQ_INFO => {
                let _argsz = r.u32()?;
                let _flags = r.u32()?;
                Ok((d.irq_info(r.u32()?)?, None))
            }
            cmd::DEVICE_SET_IRQS => {
                let _argsz = r.u32()?;
                let fl = r.u32()?;
                let index = r.u32()?;
                let start = r.u32()?;
                let count = r.u32()?;
                d.set_irqs(fl, index, start, count, msg.fds, r.rest())?;
                Ok((Vec::new(), None))
            }
            cmd::REGION_READ => {
                let offset = r.u64()?;
                let region = r.u32()?;
                let count = r.u32()?;
                if count > proto::SERVER_MAX_DATA_XFER {
                    return Err(Error::Malformed("read count"));
                }
                let mut w = Writer::new();
                w.u64(offset).u32(region).u32(count);
                let at = w.0.len();
                w.0.resize(at + count as usize, 0);
                d.region_read(region, offset, &mut w.0[at..])?;
                Ok((w.0, None))
            }
            cmd::REGION_WRITE => {
                let offset = r.u64()?;
                let region = r.u32()?;
                let count = r.u32()?;
                let data = r.bytes(count as usize)?;
                d.region_write(region, offset, data)?;
                let mut w = Writer::new();
                w.u64(offset).u32(region).u32(count);
                Ok((w.0, None))
            }
            cmd::DMA_MAP => {
                let _argsz = r.u32()?;
                let prot = r.u32()?;
                let offset = r.u64()?;
                let iova = r.u64()?;
                let size = r.u64()?;
                let mut fds = msg.fds;
                let fd: Option<OwnedFd> = fds.pop();
                if !fds.is_empty() {
                    return Err(Error::Malformed("more than one fd"));
                }
                d.dma().map(iova, size, prot, fd.map(|f| (f, offset)))?;
                Ok((Vec::new(), None))
            }
            cmd::DMA_UNMAP => {
                let _argsz = r.u32()?;
                let fl = r.u32()?;
                let iova = r.u64()?;
                let size = r.u64()?;
                d.dma().unmap(iova, size, fl)?;
                Ok((msg.body, None))
            }
            cmd::DEVICE_RESET => {
                d.reset()?;
                Ok((Vec::new(), None))
            }
            c => Err(Error::NoCommand(c)),
        }
    }

    /// Sends a request of ours and waits for its reply.
    fn call(&self, command: u16, body: &[u8]) -> Result<Message, Error> {
        if self.serving.get() == Some(&std::thread::current().id()) {
            return Err(Error::WouldDeadlock);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        self.waiting
            .lock()
            .map_err(|_| Error::Poisoned)?
            .as_mut()
            .ok_or(Error::Closed)?
            .insert(id, tx);
        let hdr = Header {
            id,
            command,
            size: 0,
            flags: flags::REQUEST,
            error: 0,
        };
        let sent = self.tx.send(hdr, body, &[]);
        let reply = sent.and_then(|_| {
            rx.recv_timeout(DMA_TIMEOUT).map_err(|e| match e {
                mpsc::RecvTimeoutError::Timeout => Error::Timeout,
                mpsc::RecvTimeoutError::Disconnected => Error::Closed,
            })
        });
        if reply.is_err() {
            if let Ok(mut w) = self.waiting.lock() {
                if let Some(w) = w.as_mut() {
                    w.remove(&id);
                }
            }
        }
        let reply = reply?;
        if reply.hdr.flags & flags::ERROR != 0 {
            return Err(Error::Remote(reply.hdr.error));
        }
        Ok(reply)
    }
}

/// The body of a `DMA_READ` request, or of a `DMA_WRITE` with its data:
/// address, count (both `u64`), data (`VFIOUserDMARW`).
pub fn dma_request(addr: u64, count: usize, data: &[u8]) -> Vec<u8> {
    let mut w = Writer::new();
    w.u64(addr).u64(count as u64).bytes(data);
    w.0
}

impl Connection {
    /// The largest transfer one message carries: the smaller of the
    /// client's limit and the server's (whose replies must fit
    /// [`crate::sock::MAX_MESSAGE`]).
    fn max_xfer(&self) -> usize {
        let client = self.caps.lock().map(|c| c.max_data_xfer).unwrap_or(4096);
        client.min(proto::SERVER_MAX_DATA_XFER) as usize
    }
}

impl Remote for Connection {
    fn dma_read(&self, addr: u64, buf: &mut [u8]) -> Result<(), Error> {
        let max = self.max_xfer();
        for (i, piece) in buf.chunks_mut(max).enumerate() {
            let at = addr + (i * max) as u64;
            let reply = self.call(cmd::DMA_READ, &dma_request(at, piece.len(), &[]))?;
            let mut r = Reader::new(&reply.body);
            let (got_at, count) = (r.u64()?, r.u64()?);
            if got_at != at || count != piece.len() as u64 {
                return Err(Error::Malformed("DMA_READ reply"));
            }
            piece.copy_from_slice(r.bytes(piece.len())?);
        }
        Ok(())
    }

    fn dma_write(&self, addr: u64, data: &[u8]) -> Result<(), Error> {
        let max = self.max_xfer();
        for (i, piece) in data.chunks(max).enumerate() {
            let at = addr + (i * max) as u64;
            self.call(cmd::DMA_WRITE, &dma_request(at, piece.len(), piece))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dma_requests_are_qemus_vfio_user_dma_rw() {
        // QEMU's VFIOUserDMARW: header, u64 offset, u64 count, data.
        let b = dma_request(0x1122_3344_5566_7788, 3, &[9, 8, 7]);
        assert_eq!(b.len(), 16 + 3);
        assert_eq!(&b[..8], &0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(&b[8..16], &3u64.to_le_bytes());
        assert_eq!(&b[16..], &[9, 8, 7]);
        assert_eq!(dma_request(0, 4096, &[]).len(), 16);
    }
}
