//! The guest kernel's own type information (BTF, `CONFIG_DEBUG_INFO_BTF`):
//! where a field sits in a kernel structure, for the structures no
//! VMCOREINFO line describes (the trace ring buffer's, the module list's).
//! The reader is the one the profiler uses for the host's kernel
//! ([`bootscope_model::btf`]); a guest's BTF is read as hostile input.

pub use bootscope_model::btf::Btf;
