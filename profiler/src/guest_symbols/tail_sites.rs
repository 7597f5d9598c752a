//! The fault tail's exit sites (`fault_tail.sites`: the guest code whose
//! nested page faults a restore served) named as the profile's exit sites
//! are: the kernel image's by its symbol table with the slide the exit
//! sites' naming found, the module area's from the guest's module list.
//! Each name goes into the site's `label`: `function+0xOFF` or
//! `function+0xOFF [module]`.

use bootscope_model::fault_tail::FaultTail;
use bootscope_model::modules::GuestModules;

use super::SymbolTable;
use crate::sites::{in_module_space, KERNEL_HALF};

/// Labels `tail`'s sites: the image's with `table` at KASLR slide `slide`
/// (None: the slide is not known, those stay addresses), the module
/// area's from `modules`. Returns how many were named.
pub fn name_tail_sites(
    tail: &mut FaultTail,
    table: Option<&SymbolTable>,
    slide: Option<u64>,
    modules: Option<&GuestModules>,
) -> usize {
    let mut named = 0;
    if let Some(m) = modules {
        for s in &mut tail.sites {
            let Some(rip) = s.rip.filter(|&r| in_module_space(r)) else {
                continue;
            };
            if let Some((module, Some((f, off)))) = m.locate(rip) {
                s.label = Some(format!("{f}+0x{off:x} [{}]", module.name));
                named += 1;
            }
        }
    }
    let (Some(table), Some(slide)) = (table, slide) else {
        return named;
    };
    let image: Vec<usize> = (0..tail.sites.len())
        .filter(|&i| {
            tail.sites[i]
                .rip
                .is_some_and(|r| r >= KERNEL_HALF && !in_module_space(r))
        })
        .collect();
    let addrs: Vec<u64> = image
        .iter()
        .map(|&i| tail.sites[i].rip.unwrap_or(0).wrapping_sub(slide))
        .collect();
    for (i, name) in image.into_iter().zip(table.names(&addrs)) {
        if let Some((f, off)) = name {
            tail.sites[i].label = Some(format!("{f}+0x{off:x}"));
            named += 1;
        }
    }
    named
}

#[cfg(test)]
mod tests {
    use super::*;
    use bootscope_model::fault_tail::TailWhere;
    use bootscope_model::modules::{GuestModule, ModuleSymbol};

    #[test]
    fn module_sites_are_named_from_the_module_list() {
        let base = 0xffff_ffff_c000_0000u64;
        let modules = GuestModules {
            modules: vec![GuestModule {
                name: "virtio_blk".into(),
                text_base: base,
                text_size: 0x1000,
                symbols: vec![ModuleSymbol {
                    name: "virtblk_probe".into(),
                    addr: base + 0x100,
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let site = |rip| TailWhere {
            rip: Some(rip),
            faults: 1,
            ..Default::default()
        };
        let mut t = FaultTail {
            sites: vec![
                site(base + 0x112),
                site(0xffff_ffff_8100_0000),
                site(base + 0x5000),
            ],
            ..Default::default()
        };
        // No table: the image's site stays an address; so does the one in
        // no module's text.
        assert_eq!(name_tail_sites(&mut t, None, Some(0), Some(&modules)), 1);
        assert_eq!(
            t.sites[0].label.as_deref(),
            Some("virtblk_probe+0x12 [virtio_blk]")
        );
        assert_eq!(
            (t.sites[1].label.as_ref(), t.sites[2].label.as_ref()),
            (None, None)
        );
    }
}
