//! Sets of CPU or NUMA node numbers in the kernel's list format
//! (`0-3,8,10-11`): bootscope_model's, the one parser and printer of lists.

pub use bootscope_model::cpulist::{CpuListError, CpuSet, IdSet, NodeSet, MAX_ID};
