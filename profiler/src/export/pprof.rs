//! Exit sites as a pprof profile (`profile.proto`, gzipped), as `go tool
//! pprof` reads it: one sample per site, its stack the guest function under
//! the exit reason, its values the exits and their time (ns), its labels
//! the reason, phase and vCPU. The default sample type is the exits (the
//! ranking of the profile's summary); `-sample_index=exit_time` shows time.
//!
//! The protobuf wire format needs only varints and length-delimited
//! fields; the few messages are written here field by field (numbers from
//! github.com/google/pprof/proto/profile.proto).

use std::collections::HashMap;
use std::io::Write;

use crate::profile::Profile;

/// One protobuf message being written.
#[derive(Default)]
pub(super) struct Msg(pub(super) Vec<u8>);

impl Msg {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    /// A varint field (wire type 0).
    pub(super) fn uint(&mut self, field: u32, v: u64) -> &mut Self {
        self.varint(u64::from(field) << 3);
        self.varint(v);
        self
    }
    /// A length-delimited field (wire type 2): a message, or packed
    /// varints.
    pub(super) fn bytes(&mut self, field: u32, b: &[u8]) -> &mut Self {
        self.varint((u64::from(field) << 3) | 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
        self
    }
    pub(super) fn packed(&mut self, field: u32, vs: &[u64]) -> &mut Self {
        let mut p = Msg::default();
        for &v in vs {
            p.varint(v);
        }
        self.bytes(field, &p.0)
    }
}

/// The string table: index 0 is "".
pub(super) struct Strings {
    index: HashMap<String, u64>,
    pub(super) list: Vec<String>,
}

impl Strings {
    pub(super) fn new() -> Self {
        Strings {
            index: HashMap::from([(String::new(), 0)]),
            list: vec![String::new()],
        }
    }
    pub(super) fn id(&mut self, s: &str) -> u64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.list.len() as u64;
        self.list.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// The sites of a profile as a gzipped `profile.proto` (empty profile when
/// it has none).
pub fn to_pprof(p: &Profile) -> Vec<u8> {
    let mut strings = Strings::new();
    let mut out = Msg::default();
    for (kind, unit) in [("exits", "count"), ("exit_time", "nanoseconds")] {
        let mut vt = Msg::default();
        vt.uint(1, strings.id(kind)).uint(2, strings.id(unit));
        out.bytes(1, &vt.0);
    }
    // One function and one location per name (functions and reasons).
    let mut ids: HashMap<String, u64> = HashMap::new();
    let mut frames: Vec<String> = Vec::new();
    let mut frame = |name: &str| -> u64 {
        *ids.entry(name.to_string()).or_insert_with(|| {
            frames.push(name.to_string());
            frames.len() as u64
        })
    };
    let mut samples = Vec::new();
    for s in p.exits.sites.iter().flat_map(|x| &x.sites) {
        let leaf = frame(&s.function_name());
        let root = frame(&s.reason);
        let mut m = Msg::default();
        m.packed(1, &[leaf, root])
            .packed(2, &[s.count, s.latency_total_ns]);
        for (key, value) in [("reason", &s.reason), ("phase", &s.phase)] {
            let mut l = Msg::default();
            l.uint(1, strings.id(key)).uint(2, strings.id(value));
            m.bytes(3, &l.0);
        }
        let mut l = Msg::default();
        l.uint(1, strings.id("vcpu")).uint(3, u64::from(s.vcpu));
        m.bytes(3, &l.0);
        samples.push(m);
    }
    for m in samples {
        out.bytes(2, &m.0);
    }
    // pprof shows the last sample type unless told: exits, as the summary
    // ranks.
    finish(out, &frames, &mut strings, "exits")
}

/// Ends a pprof profile whose samples are in `out`: a location and a
/// function per frame name (ids from 1, in `frames`' order), the default
/// sample type (Profile.default_sample_type, field 14), the string table,
/// gzip-compressed.
pub(super) fn finish(
    mut out: Msg,
    frames: &[String],
    strings: &mut Strings,
    default_type: &str,
) -> Vec<u8> {
    for (i, name) in frames.iter().enumerate() {
        let id = i as u64 + 1;
        let mut line = Msg::default();
        line.uint(1, id);
        let mut loc = Msg::default();
        loc.uint(1, id).bytes(4, &line.0);
        out.bytes(4, &loc.0);
        let mut f = Msg::default();
        let n = strings.id(name);
        f.uint(1, id).uint(2, n).uint(3, n);
        out.bytes(5, &f.0);
    }
    out.uint(14, strings.id(default_type));
    for s in &strings.list {
        out.bytes(6, s.as_bytes());
    }
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing to a Vec cannot fail.
    let _ = gz.write_all(&out.0);
    gz.finish().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_fields_follow_the_wire_format() {
        let mut m = Msg::default();
        m.uint(1, 300);
        assert_eq!(m.0, [0x08, 0xac, 0x02]);
        let mut m = Msg::default();
        m.bytes(6, b"io");
        assert_eq!(m.0, [0x32, 2, b'i', b'o']);
        let gz = to_pprof(&Profile::new());
        assert_eq!(&gz[..2], &[0x1f, 0x8b]);
    }
}
