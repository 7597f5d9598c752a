use super::*;
use bootscope_testkit::btf::{BtfWriter, KIND_CONST, KIND_TYPEDEF, KIND_UNION};

#[test]
fn finds_fields_through_members_and_anonymous_structs() {
    let mut w = BtfWriter::new();
    let long = w.int();
    let inner = w.strukt("array_buffer", 16, &[("tr", long, 0), ("buffer", long, 8)]);
    let anon = w.strukt("", 8, &[("hidden", long, 0)]);
    // A declaration only: skipped for the full definition.
    w.record("trace_array", kind::STRUCT, 0, 0);
    w.strukt(
        "trace_array",
        64,
        &[
            ("list", long, 0),
            ("array_buffer", inner, 16),
            ("", anon, 40),
        ],
    );
    let btf = Btf::parse(&w.finish()).unwrap();
    assert_eq!(btf.offset_of("trace_array", "array_buffer.buffer"), Ok(24));
    assert_eq!(btf.offset_of("trace_array", "hidden"), Ok(40));
    assert_eq!(btf.size_of("trace_array"), Some(64));
    let e = btf
        .offset_of("trace_array", "array_buffer.nope")
        .unwrap_err();
    assert!(e.contains("no member nope"), "{e}");
    assert!(btf
        .offset_of("nothing", "x")
        .unwrap_err()
        .contains("struct nothing"));
}

#[test]
fn a_member_of_an_array_is_that_of_its_first_element() {
    let mut w = BtfWriter::new();
    let long = w.int();
    let mem = w.strukt(
        "module_memory",
        16,
        &[("base", long, 0), ("size", long, 12)],
    );
    let arr = w.array(mem, 7);
    w.strukt("module", 200, &[("state", long, 0), ("mem", arr, 64)]);
    let btf = Btf::parse(&w.finish()).unwrap();
    assert_eq!(btf.offset_of("module", "mem.base"), Ok(64));
    assert_eq!(btf.offset_of("module", "mem.size"), Ok(76));
    assert!(btf.offset_of("module", "mem.nope").is_err());
}

/// 1: unsigned long; 2: int; 3: typedef ulong -> 1; 4: const 3;
/// 5: task_struct { int pid @0; const ulong min_flt @8; ulong maj_flt @16 }.
#[test]
fn records_members_and_sizes_through_typedefs_and_qualifiers() {
    let mut w = BtfWriter::new();
    let ulong = w.int_named("long unsigned int", 8);
    let int = w.int_named("int", 4);
    let td = w.refer("ulong", KIND_TYPEDEF, ulong);
    let c = w.refer("", KIND_CONST, td);
    let task = w.strukt(
        "task_struct",
        24,
        &[("pid", int, 0), ("min_flt", c, 8), ("maj_flt", ulong, 16)],
    );
    let btf = Btf::parse(&w.finish()).unwrap();
    assert_eq!(btf.type_count(), 5);
    assert_eq!(
        btf.ids_named(kind::STRUCT, "task_struct")
            .collect::<Vec<_>>(),
        [task]
    );
    let (i, m) = btf.member_named(task, "min_flt").unwrap();
    assert_eq!((i, m.bit_offset, m.is_bitfield()), (1, 64, false));
    assert_eq!(btf.type_size(m.ty), Ok(8));
    assert_eq!(btf.type_size(int), Ok(4));
    assert_eq!(btf.type_size(task), Ok(24));
    assert!(btf.member_named(task, "exit_code").is_none());
    assert!(btf.type_size(0).unwrap_err().contains("no size"));
    assert!(btf.type_size(99).unwrap_err().contains("out of range"));
    // Where each record starts: headers of 12 bytes, an int's 4 more.
    assert_eq!(btf.record_offset(1), Some(0));
    assert_eq!(btf.record_offset(3), Some(32));
    assert_eq!(btf.record_offset(0), None);
    assert_eq!(btf.record_offset(6), None);
    assert_eq!(btf.members(int).count(), 0);
    assert_eq!(btf.members(task).count(), 3);
}

#[test]
fn damaged_blobs_are_refused() {
    assert!(Btf::parse(b"").unwrap_err().contains("shorter than"));
    assert!(Btf::parse(&[0u8; 24]).unwrap_err().contains("magic"));
    assert!(Btf::parse(b"\x9f\xeb\x01\x00")
        .unwrap_err()
        .contains("header cut short"));
    let mut w = BtfWriter::new();
    let long = w.int();
    w.strukt("s", 8, &[("a", long, 0)]);
    let good = w.finish();
    let mut b = good.clone();
    b.truncate(b.len() - 10);
    assert!(Btf::parse(&b).unwrap_err().contains("past the end"));
    // A type record cut in the middle.
    let mut b = good.clone();
    let tl = u32::from_le_bytes(b[12..16].try_into().unwrap());
    b[12..16].copy_from_slice(&(tl - 4).to_le_bytes());
    assert!(Btf::parse(&b).unwrap_err().contains("cut short"));
    // A header shorter than its fixed part, sections whose ends overflow.
    let mut b = good.clone();
    b[4..8].copy_from_slice(&8u32.to_le_bytes());
    assert!(Btf::parse(&b).unwrap_err().contains("header length 8"));
    for field in [8, 16] {
        let mut b = good.clone();
        b[field..field + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Btf::parse(&b).unwrap_err().contains("past the end"));
    }
    // Kinds this reader does not know, kind 0 among them.
    for k in [0, 20, 31] {
        let mut w = BtfWriter::new();
        w.int();
        w.raw(&[0, k << 24, 0]);
        let e = Btf::parse(&w.finish()).unwrap_err();
        assert!(
            e.contains(&format!("BTF type 2 at byte 16 is of unknown kind {k}")),
            "{e}"
        );
    }
    // A struct claiming more members than the section has.
    let mut w = BtfWriter::new();
    w.raw(&[0, (kind::STRUCT << 24) | 0xffff, 8]);
    assert!(Btf::parse(&w.finish()).unwrap_err().contains("cut short"));
}

/// Crafted blobs: loops of typedefs, a struct whose anonymous member is
/// itself, anonymous structs nested wide and deep, names past the string
/// section: each lookup ends, with an error or nothing, quickly.
#[test]
fn hostile_blobs_end_every_walk() {
    let mut w = BtfWriter::new();
    let long = w.int();
    // 2 -> 3 -> 2: a typedef loop; 4: a struct holding it.
    w.refer("a", KIND_TYPEDEF, 3);
    w.refer("b", KIND_TYPEDEF, 2);
    w.strukt("looped", 8, &[("x", 2, 0)]);
    // 5: a struct whose anonymous member is itself.
    w.strukt("selfish", 8, &[("", 5, 0), ("y", long, 0)]);
    // 6..: ten levels of unions, each with 200 anonymous members of the
    // level below (200^10 paths if nothing bounded the search).
    let mut below = w.strukt("", 8, &[("deep", long, 0)]);
    for _ in 0..10 {
        let members: Vec<(&str, u32, u32)> = (0..200).map(|_| ("", below, 0)).collect();
        below = w.composite("", KIND_UNION, false, 8, &members);
    }
    w.strukt("wide", 8, &[("", below, 0)]);
    // A name past the string section.
    w.raw(&[u32::MAX, kind::STRUCT << 24, 0]);
    let btf = Btf::parse(&w.finish()).unwrap();
    assert!(btf.resolve(2).is_none());
    assert!(btf.type_size(2).unwrap_err().contains("chain"));
    assert!(btf
        .offset_of("looped", "x.z")
        .unwrap_err()
        .contains("type 2"));
    assert_eq!(btf.offset_of("selfish", "y"), Ok(0));
    assert!(btf.offset_of("selfish", "nope").is_err());
    assert!(btf.offset_of("wide", "deep").is_err());
    assert!(btf.offset_of("wide", "nope").is_err());
    assert_eq!(btf.name(u32::MAX), b"");
    assert!(btf.record(btf.type_count()).is_some());
    // Bit fields are refused for an offset in bytes.
    let mut w = BtfWriter::new();
    let long = w.int();
    w.composite("bits", kind::STRUCT, true, 8, &[("f", long, (3 << 24) | 4)]);
    let btf = Btf::parse(&w.finish()).unwrap();
    assert!(btf
        .offset_of("bits", "f")
        .unwrap_err()
        .contains("bit field"));
    let (_, m) = btf.member_named(2, "f").unwrap();
    assert_eq!(
        (m.bitfield_size, m.bit_offset, m.is_bitfield()),
        (3, 4, true)
    );
}

#[test]
fn reads_the_host_kernel_btf_when_there_is_one() {
    let Ok(b) = std::fs::read("/sys/kernel/btf/vmlinux") else {
        eprintln!("SKIP: no /sys/kernel/btf/vmlinux on this host");
        return;
    };
    let btf = Btf::from_vec(b).unwrap();
    // Fields the trace reader needs, in a real kernel's types.
    assert!(btf.offset_of("trace_array", "array_buffer.buffer").is_ok());
    assert!(btf.offset_of("ring_buffer_per_cpu", "head_page").is_ok());
    assert_eq!(btf.offset_of("buffer_data_page", "time_stamp"), Ok(0));
    assert_eq!(btf.offset_of("trace_entry", "type"), Ok(0));
    let task: Vec<u32> = btf.ids_named(kind::STRUCT, "task_struct").collect();
    assert_eq!(task.len(), 1);
    let (_, m) = btf.member_named(task[0], "min_flt").unwrap();
    assert_eq!(btf.type_size(m.ty), Ok(8));
    assert_eq!(
        btf.offset_of("task_struct", "min_flt"),
        Ok(u64::from(m.bit_offset / 8))
    );
}
