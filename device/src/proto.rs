// SPDX-License-Identifier: GPL-2.0

//! The vfio-user protocol as QEMU 10.1 and later speak it (version 0.0;
//! `hw/vfio-user/protocol.h` there): the message header, the commands, and
//! little-endian encoding of their bodies.

use crate::Error;

/// Bytes of a message header.
pub const HEADER_LEN: usize = 16;

/// Commands (`enum vfio_user_command`).
pub mod cmd {
    /// Version and capabilities, the first message.
    pub const VERSION: u16 = 1;
    /// A range of the device's DMA space, with an fd or without.
    pub const DMA_MAP: u16 = 2;
    /// A range of the DMA space withdrawn.
    pub const DMA_UNMAP: u16 = 3;
    /// Regions and interrupts the device has.
    pub const DEVICE_GET_INFO: u16 = 4;
    /// One region: size, access, mmap areas (and the fd to map them).
    pub const DEVICE_GET_REGION_INFO: u16 = 5;
    /// Interrupts of one index (INTx, MSI, MSI-X, ...).
    pub const DEVICE_GET_IRQ_INFO: u16 = 7;
    /// Eventfds to signal the interrupts of one index.
    pub const DEVICE_SET_IRQS: u16 = 8;
    /// A read of a region (config space, a BAR).
    pub const REGION_READ: u16 = 9;
    /// A write to a region.
    pub const REGION_WRITE: u16 = 10;
    /// Server to client: read DMA space the server has no fd for.
    pub const DMA_READ: u16 = 11;
    /// Server to client: write DMA space the server has no fd for.
    pub const DMA_WRITE: u16 = 12;
    /// Device reset.
    pub const DEVICE_RESET: u16 = 13;
}

/// Header flags.
pub mod flags {
    /// Message type mask.
    pub const TYPE: u32 = 0xf;
    /// A request.
    pub const REQUEST: u32 = 0x0;
    /// A reply.
    pub const REPLY: u32 = 0x1;
    /// A request that wants no reply (posted).
    pub const NO_REPLY: u32 = 0x10;
    /// A reply carrying an errno in `error`.
    pub const ERROR: u32 = 0x20;
}

/// A message header (`VFIOUserHdr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Matches a reply to its request.
    pub id: u16,
    /// One of [`cmd`].
    pub command: u16,
    /// Bytes of the whole message, header included.
    pub size: u32,
    /// [`flags`].
    pub flags: u32,
    /// An errno, in a reply with [`flags::ERROR`].
    pub error: u32,
}

impl Header {
    /// Decodes a header.
    pub fn decode(b: &[u8; HEADER_LEN]) -> Self {
        let mut r = Reader::new(b);
        // The lengths are the header's own: nothing can run short.
        Self {
            id: r.u16().unwrap_or(0),
            command: r.u16().unwrap_or(0),
            size: r.u32().unwrap_or(0),
            flags: r.u32().unwrap_or(0),
            error: r.u32().unwrap_or(0),
        }
    }

    /// Encodes a header.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut w = Writer::new();
        w.u16(self.id)
            .u16(self.command)
            .u32(self.size)
            .u32(self.flags)
            .u32(self.error);
        let mut out = [0; HEADER_LEN];
        out.copy_from_slice(&w.0);
        out
    }

    /// Whether this is a reply.
    pub fn is_reply(&self) -> bool {
        self.flags & flags::TYPE == flags::REPLY
    }

    /// The reply header to this request, for a body of `body` bytes.
    pub fn reply(&self, body: usize) -> Self {
        Self {
            id: self.id,
            command: self.command,
            size: (HEADER_LEN + body) as u32,
            flags: flags::REPLY,
            error: 0,
        }
    }

    /// The error reply to this request.
    pub fn error_reply(&self, errno: i32) -> Self {
        Self {
            id: self.id,
            command: self.command,
            size: HEADER_LEN as u32,
            flags: flags::REPLY | flags::ERROR,
            error: errno as u32,
        }
    }
}

/// Reads little-endian fields from a message body; running short is
/// [`Error::Malformed`].
pub struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, at: 0 }
    }

    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], Error> {
        let end = self.at.checked_add(n).ok_or(Error::Malformed("length"))?;
        let s = self
            .buf
            .get(self.at..end)
            .ok_or(Error::Malformed("short body"))?;
        self.at = end;
        Ok(s)
    }

    /// What is left.
    pub fn rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.at.min(self.buf.len())..];
        self.at = self.buf.len();
        s
    }

    /// A `u16`.
    pub fn u16(&mut self) -> Result<u16, Error> {
        let b = self.bytes(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    /// A `u32`.
    pub fn u32(&mut self) -> Result<u32, Error> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A `u64`.
    pub fn u64(&mut self) -> Result<u64, Error> {
        let mut a = [0; 8];
        a.copy_from_slice(self.bytes(8)?);
        Ok(u64::from_le_bytes(a))
    }
}

/// Builds a little-endian message body.
#[derive(Default)]
pub struct Writer(pub Vec<u8>);

impl Writer {
    /// An empty body.
    pub fn new() -> Self {
        Self(Vec::new())
    }

    /// Appends a `u16`.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends a `u32`.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends a `u64`.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends bytes.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.0.extend_from_slice(v);
        self
    }
}

/// What the client said of itself in its version message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientCaps {
    /// Most data bytes in one DMA_READ/DMA_WRITE the client takes.
    pub max_data_xfer: u32,
    /// Most fds in one message the client takes.
    pub max_msg_fds: u32,
}

impl Default for ClientCaps {
    /// The protocol's defaults for a client that names none.
    fn default() -> Self {
        Self {
            max_data_xfer: 1 << 20,
            max_msg_fds: 8,
        }
    }
}

/// The server's capabilities: what QEMU may send us.
pub const SERVER_MAX_DATA_XFER: u32 = 1 << 20;
/// Most fds the server takes in one message.
pub const SERVER_MAX_MSG_FDS: u32 = 16;

/// Decodes a VERSION request's body: the version and the client's
/// capabilities (a NUL-terminated JSON object).
pub fn parse_version(body: &[u8]) -> Result<(u16, u16, ClientCaps), Error> {
    let mut r = Reader::new(body);
    let major = r.u16()?;
    let minor = r.u16()?;
    let json = r.rest();
    let json = json.split(|&b| b == 0).next().unwrap_or(&[]);
    let mut caps = ClientCaps::default();
    if !json.is_empty() {
        let v: serde_json::Value =
            serde_json::from_slice(json).map_err(|_| Error::Malformed("version JSON"))?;
        let c = &v["capabilities"];
        if let Some(x) = c["max_data_xfer_size"].as_u64() {
            caps.max_data_xfer = x.clamp(4096, 64 << 20) as u32;
        }
        if let Some(x) = c["max_msg_fds"].as_u64() {
            caps.max_msg_fds = x.min(16) as u32;
        }
    }
    Ok((major, minor, caps))
}

/// The body of the server's VERSION reply: version 0.0 and its
/// capabilities.
pub fn version_reply() -> Vec<u8> {
    let json = serde_json::json!({
        "capabilities": {
            "max_msg_fds": SERVER_MAX_MSG_FDS,
            "max_data_xfer_size": SERVER_MAX_DATA_XFER,
            "pgsizes": 4096,
            "max_dma_maps": 65535,
        }
    })
    .to_string();
    let mut w = Writer::new();
    w.u16(0).u16(0).bytes(json.as_bytes()).bytes(&[0]);
    w.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips() {
        let h = Header {
            id: 0x1234,
            command: cmd::REGION_WRITE,
            size: 40,
            flags: flags::NO_REPLY,
            error: 0,
        };
        assert_eq!(Header::decode(&h.encode()), h);
        assert!(!h.is_reply());
        let r = h.error_reply(22);
        assert!(r.is_reply());
        assert_eq!(
            (r.flags & flags::ERROR, r.error, r.size),
            (flags::ERROR, 22, 16)
        );
    }

    #[test]
    fn version_parses_qemus_capabilities() {
        let json = br#"{"capabilities":{"migration":{"pgsize":4096,"max_bitmap_size":268435456},"max_msg_fds":16,"max_data_xfer_size":1048576,"pgsizes":4096,"max_dma_maps":65535,"write_multiple":true}}"#;
        let mut w = Writer::new();
        w.u16(0).u16(0).bytes(json).bytes(&[0]);
        let (major, minor, caps) = parse_version(&w.0).unwrap();
        assert_eq!((major, minor), (0, 0));
        assert_eq!(caps.max_data_xfer, 1 << 20);
        assert_eq!(caps.max_msg_fds, 16);
        // A body cut short is malformed, not a panic.
        assert!(parse_version(&[0]).is_err());
        // The reply is NUL-terminated JSON after the version.
        let r = version_reply();
        assert_eq!(&r[..4], &[0, 0, 0, 0]);
        assert_eq!(*r.last().unwrap(), 0);
        let v: serde_json::Value = serde_json::from_slice(&r[4..r.len() - 1]).unwrap();
        assert_eq!(v["capabilities"]["max_msg_fds"], 16);
    }

    #[test]
    fn reader_reports_short_bodies() {
        let mut r = Reader::new(&[1, 2, 3]);
        assert_eq!(r.u16().unwrap(), 0x0201);
        assert!(r.u32().is_err());
        assert!(r.u64().is_err());
    }
}
