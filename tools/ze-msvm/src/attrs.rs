//! Placement attributes of this process's memory, as Level Zero sets them
//! (allocation kinds, `zeCommandListAppendMemAdvise`), kept by address and
//! handed to every device's VM (`DRM_IOCTL_MSVM_SET_ATTR`).
//!
//! msvm's SET_ATTR replaces a range's attributes whole, on one device; Level
//! Zero's advice changes one property of a range for all devices. This map
//! is the driver's record of each range's properties, from which each
//! device's attributes are computed.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use msvm_rt::{Access, Attributes, Place};

use crate::device::Device;
use crate::result::{retry, ZeResult};

/// Where a range's pages should live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Preferred {
    /// Wherever the device running a job is (msvm's default).
    #[default]
    Default,
    /// System RAM.
    System,
    /// The device of this msvm index.
    Device(u32),
}

/// A range's properties.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Attr {
    pub(crate) preferred: Preferred,
    /// Devices use the pages where they are (host allocations).
    pub(crate) in_place: bool,
    /// Read-mostly: devices read replicas, move nothing.
    pub(crate) read_mostly: bool,
    /// Hints kept and reported, with no effect on msvm's placement:
    /// non-atomic-mostly, and the cache bias (0 none, 1 cached, 2
    /// uncached).
    pub(crate) non_atomic: bool,
    pub(crate) bias: u8,
}

impl Attr {
    /// What device `d` is told, for a range with these properties.
    fn for_device(&self, d: &Device, by_index: impl Fn(u32) -> Option<Arc<Device>>) -> Attributes {
        let preferred = match self.preferred {
            Preferred::Default => Place::Default,
            Preferred::System => Place::System,
            // A device works in place only on its owner group's memory:
            // others keep their default (they migrate the pages to
            // themselves, through system RAM, as a GPU without the link).
            Preferred::Device(i) => match by_index(i) {
                Some(p) if d.reaches(&p) => Place::Device(i),
                _ => Place::Default,
            },
        };
        Attributes {
            preferred,
            access: if self.in_place {
                Access::InPlace
            } else {
                Access::Migrate
            },
            thrash: true,
            counters: true,
            read_mostly: self.read_mostly,
        }
    }
}

/// The process's map (attributes belong to the process's VMs).
pub(crate) static ATTRS: Map = Map::new();

/// The properties of the process's ranges that are not the default, by
/// start: `start -> (end, attr)`, disjoint, page aligned.
#[derive(Debug, Default)]
pub(crate) struct Map {
    ranges: Mutex<BTreeMap<usize, (usize, Attr)>>,
}

impl Map {
    pub(crate) const fn new() -> Self {
        Self {
            ranges: Mutex::new(BTreeMap::new()),
        }
    }

    /// Changes the properties of `[start, end)` (page aligned) with `f`,
    /// and tells every device in `devices` the attributes of each piece.
    pub(crate) fn update(
        &self,
        (start, end): (usize, usize),
        f: impl Fn(&mut Attr),
        devices: &[Arc<Device>],
    ) -> ZeResult {
        // Held through the SET_ATTRs: two updates reach the devices in the
        // order they change the map.
        let mut map = self.ranges.lock().unwrap_or_else(PoisonError::into_inner);
        let pieces = split(&mut map, start, end);
        let by_index = |i: u32| devices.iter().find(|d| d.info.index == i).cloned();
        for (s, e, mut a) in pieces {
            f(&mut a);
            if a == Attr::default() {
                map.remove(&s);
            } else {
                map.insert(s, (e, a));
            }
            for d in devices {
                retry(|| d.rt.set_attr(s, e - s, a.for_device(d, by_index)))?;
            }
        }
        merge(&mut map, start, end);
        Ok(())
    }

    /// The properties at `addr`.
    #[cfg(test)]
    pub(crate) fn at(&self, addr: usize) -> Attr {
        let map = self.ranges.lock().unwrap_or_else(PoisonError::into_inner);
        match map.range(..=addr).next_back() {
            Some((_, &(end, a))) if addr < end => a,
            _ => Attr::default(),
        }
    }
}

/// Joins the entries of the same properties that touch, from the one
/// before `start` to the one at `end` (what an update may have split).
fn merge(map: &mut BTreeMap<usize, (usize, Attr)>, start: usize, end: usize) {
    let first = map.range(..start).next_back().map_or(start, |(&s, _)| s);
    let keys: Vec<usize> = map.range(first..=end).map(|(&s, _)| s).collect();
    let mut prev: Option<usize> = None;
    for k in keys {
        let (e, a) = map[&k];
        match prev {
            Some(p) if map[&p].0 == k && map[&p].1 == a => {
                map.remove(&k);
                if let Some(x) = map.get_mut(&p) {
                    x.0 = e;
                }
            }
            _ => prev = Some(k),
        }
    }
}

/// Splits the map's ranges at `start` and `end`, and returns the pieces of
/// `[start, end)`, in order, with their properties (the default for the
/// gaps), each one entry of the map or a gap.
fn split(
    map: &mut BTreeMap<usize, (usize, Attr)>,
    start: usize,
    end: usize,
) -> Vec<(usize, usize, Attr)> {
    for cut in [start, end] {
        let over = map
            .range(..cut)
            .next_back()
            .map(|(&s, &(e, a))| (s, e, a))
            .filter(|&(_, e, _)| e > cut);
        if let Some((s, e, a)) = over {
            map.insert(s, (cut, a));
            map.insert(cut, (e, a));
        }
    }
    let mut pieces = Vec::new();
    let mut at = start;
    for (&s, &(e, a)) in map.range(start..end) {
        if s > at {
            pieces.push((at, s, Attr::default()));
        }
        pieces.push((s, e, a));
        at = e;
    }
    if at < end {
        pieces.push((at, end, Attr::default()));
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn updates_split_and_merge_nothing_they_should_not() {
        let m = Map::new();
        let rm = |a: &mut Attr| a.read_mostly = true;
        m.update((0x1000, 0x5000), rm, &[]).unwrap();
        m.update(
            (0x3000, 0x8000),
            |a| a.preferred = Preferred::Device(1),
            &[],
        )
        .unwrap();
        assert!(m.at(0x1000).read_mostly && m.at(0x1000).preferred == Preferred::Default);
        assert!(m.at(0x3000).read_mostly && m.at(0x3000).preferred == Preferred::Device(1));
        assert!(!m.at(0x5000).read_mostly && m.at(0x7fff).preferred == Preferred::Device(1));
        assert_eq!(m.at(0x8000), Attr::default());
        assert_eq!(m.at(0), Attr::default());
        // Back to the default: the entries go.
        m.update((0, 0x10000), |a| *a = Attr::default(), &[])
            .unwrap();
        assert!(m.ranges.lock().unwrap().is_empty());
    }

    #[test]
    fn updates_merge_equal_neighbours() {
        let m = Map::new();
        let rm = |a: &mut Attr| a.read_mostly = true;
        for k in 0..8 {
            m.update((0x1000 * k, 0x1000 * (k + 1)), rm, &[]).unwrap();
        }
        assert_eq!(m.ranges.lock().unwrap().len(), 1);
        m.update((0x3000, 0x4000), |a| a.in_place = true, &[])
            .unwrap();
        assert_eq!(m.ranges.lock().unwrap().len(), 3);
        m.update((0x3000, 0x4000), |a| a.in_place = false, &[])
            .unwrap();
        assert_eq!(
            m.ranges.lock().unwrap().iter().next(),
            Some((
                &0,
                &(
                    0x8000,
                    Attr {
                        read_mostly: true,
                        ..Attr::default()
                    }
                )
            ))
        );
    }

    #[test]
    fn split_pieces_cover_the_range() {
        let mut map = BTreeMap::new();
        let a = Attr {
            in_place: true,
            ..Attr::default()
        };
        map.insert(0x2000, (0x4000, a));
        let p = split(&mut map, 0x1000, 0x3000);
        assert_eq!(
            p,
            vec![(0x1000, 0x2000, Attr::default()), (0x2000, 0x3000, a)]
        );
        assert_eq!(map.get(&0x3000), Some(&(0x4000, a)));
    }
}
