//! Mapping guest memory: the plan's regions laid over the guest-physical RAM
//! ranges, each piece mapped, advised and NUMA-bound before anything
//! touches it.
//!
//! Guest RAM is the concatenation of the plan's regions in guest node order.
//! The caller owns the guest-physical layout (the RAM ranges around the MMIO
//! gap, see `bootparams::ram_ranges`); [`allocate`] walks those ranges and
//! cuts them where a region ends, so a range may be backed by two regions
//! and a region may span two ranges. Each piece is its own mapping and its
//! own [`GuestRegionMmap`], owned by the returned [`GuestMemoryMmap`]: the
//! memory lives exactly as long as the guest memory object, no raw pointer
//! outlives its mapping.
//!
//! Anonymous memory (base pages or THP) is mapped `MAP_PRIVATE |
//! MAP_ANONYMOUS | MAP_NORESERVE`, as vm-memory does. Hugetlb memory is one
//! memfd per region (`MFD_HUGETLB | MFD_HUGE_2MB/1GB`), each piece mapping its
//! part `MAP_SHARED` without `MAP_NORESERVE` so the kernel reserves the pages
//! when mapping: a short pool fails here, not with SIGBUS later.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;

use vm_memory::mmap::MmapRegionBuilder;
use vm_memory::{FileOffset, GuestAddress, GuestMemoryMmap, GuestRegionMmap, MmapRegion};

use super::plan::{Binding, MemoryPlan, PageBacking, RegionPlan};
use super::spec::HugePageSize;
use super::sys;
use super::topology::Topology;
use super::MemoryError;

/// Alignment of anonymous guest memory in the host's address space: the
/// PMD size, so that a transparent huge page can back guest memory and KVM
/// can map it with one large nested page (KVM only does so when the host
/// address and the guest-physical address agree modulo this size).
pub const ANON_ALIGN: usize = 2 << 20;

/// An anonymous mapping at an [`ANON_ALIGN`]-aligned host address, unmapped
/// when the last holder drops it. vm-memory maps wherever mmap(2) puts it
/// (4 KiB aligned on kernels before 6.7), so anonymous pieces are mapped
/// here and handed to vm-memory as a raw pointer; every holder of the
/// piece's `MmapRegion` also holds this owner.
#[derive(Debug)]
pub struct AnonMapping {
    addr: *mut u8,
    len: usize,
}

// SAFETY: the struct only owns the address range; access to the memory goes
// through vm-memory, which is itself Send + Sync over raw mappings.
unsafe impl Send for AnonMapping {}
// SAFETY: as above; the struct has no interior state.
unsafe impl Sync for AnonMapping {}

impl AnonMapping {
    /// Maps `len` bytes (a multiple of the base page size) read-write,
    /// private, anonymous and without reservation, at an aligned address.
    pub fn new(len: usize) -> io::Result<Self> {
        let total = len
            .checked_add(ANON_ALIGN)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        // SAFETY: a fresh anonymous mapping at an address the kernel picks;
        // nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = base as usize;
        let start = base.next_multiple_of(ANON_ALIGN);
        let head = start - base;
        let tail = total - head - len;
        // SAFETY: both ranges lie inside the mapping just made and nothing
        // refers to them; trimming leaves exactly [start, start + len).
        unsafe {
            if head > 0 {
                libc::munmap(base as *mut libc::c_void, head);
            }
            if tail > 0 {
                libc::munmap((start + len) as *mut libc::c_void, tail);
            }
        }
        Ok(Self {
            addr: start as *mut u8,
            len,
        })
    }

    /// First byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.addr
    }
}

impl Drop for AnonMapping {
    fn drop(&mut self) {
        // SAFETY: the range was mapped by `new` and is owned by this value
        // alone; every user of it holds an `Arc` to this value.
        unsafe {
            libc::munmap(self.addr as *mut libc::c_void, self.len);
        }
    }
}

/// One mapping: a guest-physical range and the host memory behind it.
#[derive(Clone, Debug)]
pub struct Piece {
    guest_addr: GuestAddress,
    mapping: Arc<MmapRegion>,
    /// The owner of an anonymous mapping (`mapping` then does not own it),
    /// held only to keep the memory mapped as long as any clone of the piece.
    _owner: Option<Arc<AnonMapping>>,
}

impl Piece {
    /// First guest-physical address.
    pub fn guest_addr(&self) -> GuestAddress {
        self.guest_addr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.mapping.size()
    }

    /// Whether the piece is empty (never: pieces are at least a page).
    pub fn is_empty(&self) -> bool {
        self.mapping.size() == 0
    }

    /// Host virtual address of the first byte (for KVM memory slots and the
    /// verification helpers; access memory through vm-memory instead).
    pub fn host_addr(&self) -> *mut u8 {
        self.mapping.as_ptr()
    }

    /// The mapping, shared with the guest memory object. Hold the piece
    /// (not only this) while using the memory: see [`AnonMapping`].
    pub fn mapping(&self) -> &Arc<MmapRegion> {
        &self.mapping
    }
}

/// A plan region once mapped.
#[derive(Clone, Debug)]
pub struct BackedRegion {
    plan: RegionPlan,
    pieces: Vec<Piece>,
}

impl BackedRegion {
    /// The region's plan.
    pub fn plan(&self) -> &RegionPlan {
        &self.plan
    }

    /// Guest node number.
    pub fn guest_node(&self) -> u32 {
        self.plan.guest_node
    }

    /// Bytes.
    pub fn size(&self) -> u64 {
        self.plan.size
    }

    /// The mappings in guest-physical order.
    pub fn pieces(&self) -> &[Piece] {
        &self.pieces
    }
}

/// Guest memory built from a [`MemoryPlan`].
///
/// The backing owns the memory: the guest memory object it lends out maps
/// anonymous pieces through raw pointers, so keep the backing alive for as
/// long as that object (or a clone of it) is used.
#[derive(Clone, Debug)]
pub struct GuestMemoryBacking {
    memory: GuestMemoryMmap,
    regions: Vec<BackedRegion>,
    backing: PageBacking,
    page_size: u64,
}

impl GuestMemoryBacking {
    /// The guest memory object (one vm-memory region per piece).
    pub fn guest_memory(&self) -> &GuestMemoryMmap {
        &self.memory
    }

    /// The regions in guest-physical order.
    pub fn regions(&self) -> &[BackedRegion] {
        &self.regions
    }

    /// The page backing.
    pub fn backing(&self) -> PageBacking {
        self.backing
    }

    /// The page size of the backing.
    pub fn page_size(&self) -> u64 {
        self.page_size
    }
}

fn memfd(guest_node: u32, size: HugePageSize, bytes: u64) -> Result<Arc<File>, MemoryError> {
    let err = |source| MemoryError::Memfd {
        guest_node,
        bytes,
        source,
    };
    let name = CString::new(format!("bootscope-guest-n{guest_node}"))
        .map_err(|_| err(io::ErrorKind::InvalidInput.into()))?;
    // SAFETY: `name` is a NUL-terminated string that lives for the call.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | size.memfd_flags()) };
    if fd < 0 {
        return Err(err(io::Error::last_os_error()));
    }
    // SAFETY: memfd_create just returned this descriptor; nothing else owns
    // it.
    let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    file.set_len(bytes).map_err(err)?;
    Ok(Arc::new(file))
}

fn map_piece(
    region: &RegionPlan,
    backing: PageBacking,
    file: Option<&Arc<File>>,
    file_offset: u64,
    len: usize,
) -> Result<(MmapRegion, Option<Arc<AnonMapping>>), MemoryError> {
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    let mut owner = None;
    let builder = MmapRegionBuilder::new(len).with_mmap_prot(rw);
    let mapped = match (backing, file) {
        (PageBacking::HugeTlb(size), Some(file)) => builder
            .with_file_offset(FileOffset::from_arc(file.clone(), file_offset))
            .with_mmap_flags(libc::MAP_SHARED)
            .with_hugetlbfs(true)
            .build()
            .map_err(|e| match e {
                vm_memory::mmap::MmapRegionError::Mmap(source)
                    if source.raw_os_error() == Some(libc::ENOMEM) =>
                {
                    MemoryError::HugePageReserve {
                        guest_node: region.guest_node,
                        size,
                        pages: len as u64 / size.bytes(),
                        source,
                    }
                }
                other => MemoryError::Map {
                    guest_node: region.guest_node,
                    bytes: len as u64,
                    source: io::Error::other(other),
                },
            })?,
        _ => {
            let map_err = |source| MemoryError::Map {
                guest_node: region.guest_node,
                bytes: len as u64,
                source,
            };
            let anon = AnonMapping::new(len).map_err(map_err)?;
            // SAFETY: `anon` maps exactly `len` bytes at this page-aligned
            // address and is kept alive next to the region (see Piece).
            let mapped = unsafe { builder.with_raw_mmap_pointer(anon.as_ptr()) }
                .with_mmap_flags(libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE)
                .build()
                .map_err(|e| map_err(io::Error::other(e)))?;
            owner = Some(Arc::new(anon));
            mapped
        }
    };
    if backing == PageBacking::Transparent {
        sys::madvise(mapped.as_ptr(), len, libc::MADV_HUGEPAGE).map_err(|source| {
            MemoryError::Madvise {
                guest_node: region.guest_node,
                advice: "MADV_HUGEPAGE",
                source,
            }
        })?;
    }
    if let Some(Binding { policy, nodes }) = &region.binding {
        sys::mbind(mapped.as_ptr(), len, *policy, nodes).map_err(|source| MemoryError::Mbind {
            guest_node: region.guest_node,
            nodes: nodes.clone(),
            policy: *policy,
            source,
        })?;
    }
    Ok((mapped, owner))
}

/// Maps guest memory for `plan` over the guest-physical RAM ranges `layout`
/// (sorted, page aligned, adding up to the plan's total; typically
/// `bootparams::ram_ranges(plan.total())`). Nothing is touched: see
/// [`super::preallocate`].
pub fn allocate(
    plan: &MemoryPlan,
    layout: &[(GuestAddress, usize)],
) -> Result<GuestMemoryBacking, MemoryError> {
    let page_size = plan.page_size();
    let layout_total: u64 = layout.iter().map(|&(_, len)| len as u64).sum();
    if layout_total != plan.total() {
        return Err(MemoryError::LayoutMismatch {
            layout: layout_total,
            plan: plan.total(),
        });
    }
    let mut next_free: u64 = 0;
    for &(addr, len) in layout {
        if addr.0 % page_size != 0 || len as u64 % page_size != 0 {
            return Err(MemoryError::LayoutUnaligned {
                addr: addr.0,
                len: len as u64,
                page_size,
            });
        }
        let unsorted = MemoryError::LayoutUnsorted {
            addr: addr.0,
            len: len as u64,
        };
        if addr.0 < next_free {
            return Err(unsorted);
        }
        next_free = addr.0.checked_add(len as u64).ok_or(unsorted)?;
    }
    if let PageBacking::HugeTlb(_) = plan.backing() {
        // The pools may have changed since the plan was checked.
        plan.check_hugepage_pools(&Topology::read(plan.sysfs_root())?)?;
    }

    // Walk the layout once, handing out consecutive slices to the regions.
    let mut ranges = layout.iter().copied().filter(|&(_, len)| len > 0);
    let mut current: Option<(GuestAddress, usize)> = None;
    let mut regions = Vec::new();
    let mut guest_regions = Vec::new();
    for rp in plan.regions() {
        let file = match plan.backing() {
            PageBacking::HugeTlb(size) => Some(memfd(rp.guest_node, size, rp.size)?),
            _ => None,
        };
        let mut pieces = Vec::new();
        let mut offset: u64 = 0;
        while offset < rp.size {
            let (addr, len) = match current.take().or_else(|| ranges.next()) {
                Some(r) => r,
                // Unreachable: the totals match.
                None => {
                    return Err(MemoryError::LayoutMismatch {
                        layout: layout_total,
                        plan: plan.total(),
                    })
                }
            };
            let take = len.min((rp.size - offset) as usize);
            if take < len {
                current = Some((GuestAddress(addr.0 + take as u64), len - take));
            }
            let (mapping, owner) = map_piece(rp, plan.backing(), file.as_ref(), offset, take)?;
            let mapping = Arc::new(mapping);
            let guest = GuestRegionMmap::with_arc(mapping.clone(), addr).ok_or(
                MemoryError::LayoutUnaligned {
                    addr: addr.0,
                    len: take as u64,
                    page_size,
                },
            )?;
            guest_regions.push(Arc::new(guest));
            pieces.push(Piece {
                guest_addr: addr,
                mapping,
                _owner: owner,
            });
            offset += take as u64;
        }
        regions.push(BackedRegion {
            plan: rp.clone(),
            pieces,
        });
    }
    let memory = GuestMemoryMmap::from_arc_regions(guest_regions).map_err(MemoryError::Regions)?;
    Ok(GuestMemoryBacking {
        memory,
        regions,
        backing: plan.backing(),
        page_size,
    })
}

#[cfg(test)]
mod tests;
