// SPDX-License-Identifier: GPL-2.0

//! The device's PCI configuration space (Documentation/hardware.rst,
//! "PCI identity"): a type 0 header, an MSI capability and a PCI Express
//! endpoint capability. QEMU emulates the BARs and the MSI capability
//! itself and forwards the rest; writes reach only the bits [`WRITABLE`]
//! names.
//!
//! MSI, one vector, not MSI-X: QEMU 11.1's vfio-user client aborts when a
//! device with MSI-X is unplugged (`vfio_user_msix_teardown()` removes a
//! PBA region already released: "memory_region_del_subregion: Assertion
//! `subregion->container == mr' failed"), and x86 without interrupt
//! remapping gives a device one MSI vector.

/// PCI vendor id (Red Hat, Inc., the range QEMU's own devices use: see
/// hardware.rst on why, and QEMU's `x-pci-vendor-id` to change it).
pub const VENDOR: u16 = 0x1b36;
/// PCI device id of msvm-gpu.
pub const DEVICE: u16 = 0x00f0;
/// Revision: the register interface's major version.
pub const REVISION: u8 = 1;
/// Class: display controller, 3D (0x0302), programming interface 0.
pub const CLASS: u32 = 0x03_02_00;

/// Bytes of configuration space (PCI Express: 4 KiB).
pub const SIZE: usize = 4096;

/// Offset of the MSI capability.
pub const CAP_MSI: usize = 0x40;
/// Offset of the PCI Express capability.
pub const CAP_EXP: usize = 0x50;

/// Configuration space registers: values and writable bits.
pub struct Config {
    bytes: [u8; SIZE],
}

/// (offset, size, writable mask) of every register a write can change.
const WRITABLE: &[(usize, usize, u32)] = &[
    // Command: memory space, bus master, SERR, INTx disable.
    (0x04, 2, 0x0546),
    // BAR0 (64-bit, 64 KiB) and BAR2 (64-bit, prefetchable): QEMU sizes
    // and places them itself; the device keeps what it is told.
    (0x10, 4, 0xffff_0000),
    (0x14, 4, 0xffff_ffff),
    (0x18, 4, 0xffff_fff0),
    (0x1c, 4, 0xffff_ffff),
    // Interrupt line.
    (0x3c, 1, 0xff),
    // MSI: message control's enable bit, address, data.
    (CAP_MSI + 2, 2, 0x0001),
    (CAP_MSI + 4, 4, 0xffff_fffc),
    (CAP_MSI + 8, 4, 0xffff_ffff),
    (CAP_MSI + 12, 2, 0xffff),
    // PCI Express device control (but its function-level-reset bit),
    // link control, device control 2.
    (CAP_EXP + 0x08, 2, 0x7fff),
    (CAP_EXP + 0x10, 2, 0x0fff),
    (CAP_EXP + 0x28, 2, 0xffff),
];

impl Config {
    /// The configuration space at reset, for a device with `vram` bytes of
    /// VRAM behind BAR2.
    pub fn new() -> Self {
        let mut c = Self { bytes: [0; SIZE] };
        c.put16(0x00, VENDOR);
        c.put16(0x02, DEVICE);
        // Status: capabilities list.
        c.put16(0x06, 0x0010);
        c.put32(0x08, (CLASS << 8) | u32::from(REVISION));
        // Header type 0; BAR0 64-bit memory, BAR2 64-bit prefetchable.
        c.put32(0x10, 0x4);
        c.put32(0x18, 0xc);
        c.put16(0x2c, VENDOR);
        c.put16(0x2e, DEVICE);
        c.bytes[0x34] = CAP_MSI as u8;
        // Interrupt pin 0: no INTx (a device with one loses the direct
        // mapping of BAR2 in QEMU while INTx is in use).
        c.bytes[0x3d] = 0;
        // MSI: one vector, 64-bit addresses.
        c.bytes[CAP_MSI] = 0x05;
        c.bytes[CAP_MSI + 1] = CAP_EXP as u8;
        c.put16(CAP_MSI + 2, 0x0080);
        // PCI Express capability, version 2, endpoint.
        c.bytes[CAP_EXP] = 0x10;
        c.bytes[CAP_EXP + 1] = 0;
        c.put16(CAP_EXP + 2, 0x0002);
        // Device capabilities: 256-byte payloads; no function-level reset
        // (a reset is VFIO's DEVICE_RESET).
        c.put32(CAP_EXP + 4, 0x0000_0001);
        // Link capabilities and status: 16 GT/s, x16.
        c.put32(CAP_EXP + 0x0c, (16 << 4) | 4);
        c.put16(CAP_EXP + 0x12, (16 << 4) | 4);
        c
    }

    fn put16(&mut self, off: usize, v: u16) {
        self.bytes[off..off + 2].copy_from_slice(&v.to_le_bytes());
    }

    fn put32(&mut self, off: usize, v: u32) {
        self.bytes[off..off + 4].copy_from_slice(&v.to_le_bytes());
    }

    /// A little-endian 16-bit register.
    pub fn get16(&self, off: usize) -> u16 {
        u16::from_le_bytes([self.bytes[off], self.bytes[off + 1]])
    }

    /// Reads `buf.len()` bytes at `off`; `None` past the end.
    pub fn read(&self, off: u64, buf: &mut [u8]) -> Option<()> {
        let off = usize::try_from(off).ok()?;
        buf.copy_from_slice(self.bytes.get(off..off.checked_add(buf.len())?)?);
        Some(())
    }

    /// Writes `data` at `off`, byte by byte through the writable masks;
    /// `None` past the end.
    pub fn write(&mut self, off: u64, data: &[u8]) -> Option<()> {
        let off = usize::try_from(off).ok()?;
        off.checked_add(data.len()).filter(|&e| e <= SIZE)?;
        for (i, &b) in data.iter().enumerate() {
            let at = off + i;
            let mask = WRITABLE
                .iter()
                .find(|(o, n, _)| (*o..o + n).contains(&at))
                .map(|(o, _, m)| (m >> (8 * (at - o))) as u8)
                .unwrap_or(0);
            self.bytes[at] = (self.bytes[at] & !mask) | (b & mask);
        }
        Some(())
    }

    /// Whether the device may master the bus (command register bit 2):
    /// without it, the device starts no DMA.
    pub fn bus_master(&self) -> bool {
        self.get16(0x04) & 0x4 != 0
    }

    /// Whether the device decodes memory accesses (command register bit
    /// 1): a switch routes a peer's request to its BAR only then.
    pub fn memory(&self) -> bool {
        self.get16(0x04) & 0x2 != 0
    }

    /// BAR2's bus address, as last written (BAR2 and BAR3, 64 bits; the
    /// type bits are not part of it). QEMU places the BARs and forwards
    /// its writes of them here.
    pub fn bar2(&self) -> u64 {
        let w = |off: usize| u64::from(self.get16(off)) | (u64::from(self.get16(off + 2)) << 16);
        (w(0x18) | (w(0x1c) << 32)) & !0xf
    }
}

impl Default for Config {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_and_capabilities_chain() {
        let c = Config::new();
        let mut b = [0; 4];
        c.read(0, &mut b).unwrap();
        assert_eq!(u32::from_le_bytes(b), 0x00f0_1b36);
        // Capabilities: MSI, then PCI Express, then the end.
        let mut at = c.bytes[0x34] as usize;
        let mut ids = vec![];
        while at != 0 {
            ids.push(c.bytes[at]);
            at = c.bytes[at + 1] as usize;
        }
        assert_eq!(ids, [0x05, 0x10]);
        assert_eq!(c.bytes[0x3d], 0, "no INTx pin");
        assert!(c.read(4095, &mut [0; 2]).is_none());
    }

    #[test]
    fn writes_reach_only_writable_bits() {
        let mut c = Config::new();
        // The id is read-only.
        c.write(0, &[0xff, 0xff, 0xff, 0xff]).unwrap();
        assert_eq!(c.get16(0), VENDOR);
        // Bus master, then MSI enable; the 64-bit bit and the vector count
        // (one) stay.
        assert!(!c.bus_master());
        c.write(4, &[0x06, 0x00]).unwrap();
        assert!(c.bus_master());
        c.write((CAP_MSI + 2) as u64, &[0xff, 0xff]).unwrap();
        assert_eq!(c.get16(CAP_MSI + 2), 0x0081);
        // BAR0's low type bits stay.
        c.write(0x10, &[0xff; 4]).unwrap();
        let mut b = [0; 4];
        c.read(0x10, &mut b).unwrap();
        assert_eq!(u32::from_le_bytes(b), 0xffff_0004);
        // BAR2's address, and memory decoding.
        c.write(0x18, &0x8000_0000_u32.to_le_bytes()).unwrap();
        c.write(0x1c, &0x12_u32.to_le_bytes()).unwrap();
        assert_eq!(c.bar2(), 0x12_8000_0000);
        assert!(c.memory());
        c.write(4, &[0x04, 0x00]).unwrap();
        assert!(!c.memory() && c.bus_master());
        assert!(c.write(4095, &[0, 0]).is_none());
    }
}
