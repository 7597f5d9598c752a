//! The loaded object split in two: its maps, which the collector reads
//! and writes all along, and the object holding its programs, which may be
//! on another thread while the programs the guest needs are attached
//! ([`super::guest`]).

use std::collections::HashMap;

use aya::maps::Map;
use aya::programs::Program;
use aya::Ebpf;

pub(super) struct BpfObject {
    maps: HashMap<String, Map>,
    /// None while the guest programs are being attached on their thread.
    programs: Option<Ebpf>,
}

impl BpfObject {
    /// Takes every map out of `ebpf`. The programs' instructions refer to
    /// the maps by descriptor (relocated when the object was loaded), so a
    /// program loaded later uses these maps as long as they are open: they
    /// live as long as the collector.
    pub(super) fn new(mut ebpf: Ebpf) -> Self {
        let names: Vec<String> = ebpf.maps().map(|(n, _)| n.to_string()).collect();
        let maps = names
            .into_iter()
            .filter_map(|n| ebpf.take_map(&n).map(|m| (n, m)))
            .collect();
        BpfObject {
            maps,
            programs: Some(ebpf),
        }
    }

    pub(super) fn map(&self, name: &str) -> Option<&Map> {
        self.maps.get(name)
    }

    pub(super) fn map_mut(&mut self, name: &str) -> Option<&mut Map> {
        self.maps.get_mut(name)
    }

    pub(super) fn take_map(&mut self, name: &str) -> Option<Map> {
        self.maps.remove(name)
    }

    /// A program, unless the object is on the guest programs' thread.
    pub(super) fn program(&self, name: &str) -> Option<&Program> {
        self.programs.as_ref()?.program(name)
    }

    /// A program to detach, unless the object is on the guest programs'
    /// thread.
    pub(super) fn program_mut(&mut self, name: &str) -> Option<&mut Program> {
        self.programs.as_mut()?.program_mut(name)
    }

    /// The object with the programs, for attaching more of them elsewhere.
    pub(super) fn take_programs(&mut self) -> Option<Ebpf> {
        self.programs.take()
    }

    pub(super) fn put_programs(&mut self, ebpf: Ebpf) {
        self.programs = Some(ebpf);
    }
}
