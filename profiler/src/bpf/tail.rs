//! Mirrors of bpf/tail.h (the fault-tail collector), sizes checked.

use aya::Pod;

/// `enum bs_tail_state`.
pub const TAIL_OFF: u32 = 0;
pub const TAIL_ARMED: u32 = 1;

/// `enum bs_tail_kind`: what serving a guest fault took on the host.
pub const KINDS: usize = 5;

/// `enum bs_tail_total`.
pub mod total {
    pub const GUEST_ALL: usize = 0;
    pub const GUEST: usize = 1;
    pub const MINOR_IN_FAULT: usize = 2;
    pub const MAJOR_IN_FAULT: usize = 3;
    pub const MINOR_OTHER: usize = 4;
    pub const MAJOR_OTHER: usize = 5;
    pub const EXC_USER: usize = 6;
    pub const EXC_KERNEL: usize = 7;
    pub const PAGES: usize = 8;
    pub const PAGES_BEYOND: usize = 9;
    pub const COUNT: usize = 10;
}

/// `BS_TAIL_REGION_SHIFT`: regions are 2 MiB of guest-physical memory.
pub const REGION_SHIFT: u32 = 21;

/// `struct bs_tail_window`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BsTailWindow {
    pub state: u32,
    pub pad: u32,
    pub end_ns: u64,
}

/// `struct bs_tail_start`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BsTailStart {
    pub tgid: u32,
    pub pad: u32,
    pub start_ns: u64,
}

/// `struct bs_tail_thread`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BsTailThread {
    pub walk_ns: u64,
    pub first_min: u64,
    pub first_maj: u64,
    pub last_min: u64,
    pub last_maj: u64,
    pub tgid: u32,
    pub file: u32,
}

/// `struct bs_tail_curve_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BsTailCurveKey {
    pub tgid: u32,
    pub bucket: u32,
    pub kind: u32,
    pub pad: u32,
}

/// `struct bs_tail_where_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BsTailWhereKey {
    pub tgid: u32,
    pub kind: u32,
    pub at: u64,
}

/// `struct bs_tail_where`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BsTailWhere {
    pub count: u64,
    pub total_ns: u64,
}

const _: () = assert!(size_of::<BsTailWindow>() == 16);
const _: () = assert!(size_of::<BsTailStart>() == 16);
const _: () = assert!(size_of::<BsTailThread>() == 48);
const _: () = assert!(size_of::<BsTailCurveKey>() == 16);
const _: () = assert!(size_of::<BsTailWhereKey>() == 16);
const _: () = assert!(size_of::<BsTailWhere>() == 16);

macro_rules! pod {
    ($($t:ty),*) => {
        $(
            // SAFETY: a #[repr(C)] struct of integers with no padding
            // (sizes asserted above): every bit pattern is valid.
            unsafe impl Pod for $t {}
        )*
    };
}

pod!(
    BsTailWindow,
    BsTailStart,
    BsTailThread,
    BsTailCurveKey,
    BsTailWhereKey,
    BsTailWhere
);
