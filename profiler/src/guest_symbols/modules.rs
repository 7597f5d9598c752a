//! Exit sites in the guest kernel's module area named `function [module]`
//! from the guest's module list: the modules bootscope's VMM read out of
//! guest memory after the run, each with its core text and its own
//! kallsyms (runtime addresses, so no KASLR slide applies). A site no
//! loaded module's text holds stays an address tagged `[module]`.

use bootscope_model::modules::GuestModules;

use crate::sites::{in_module_space, ExitSites, SiteSymbols};

/// The most warnings about single modules carried into the profile; the
/// rest are counted in one more line.
const MAX_MODULE_WARNINGS: usize = 5;

/// Names every site of `sites` in the module area that a module of
/// `modules` holds, and says how in `sites.symbols` (`in_modules`,
/// `in_modules_named`, the module list, the warnings).
pub fn name_sites(sites: &mut ExitSites, modules: &GuestModules) {
    let mut named = 0u64;
    let mut in_modules = 0u64;
    for s in &mut sites.sites {
        let Some(rip) = s.rip.filter(|&r| in_module_space(r)) else {
            continue;
        };
        in_modules += 1;
        if let Some((m, Some((function, offset)))) = modules.locate(rip) {
            s.function = Some(function.to_string());
            s.offset = Some(offset);
            s.module = Some(m.name.clone());
            named += 1;
        }
    }
    let info = sites.symbols.get_or_insert_with(|| SiteSymbols {
        source: "none for the kernel image; modules from the guest's module list".into(),
        kaslr: "not needed for module sites (the modules' symbols are runtime addresses)".into(),
        ..SiteSymbols::default()
    });
    info.in_modules = in_modules;
    info.in_modules_named = named;
    info.modules = modules.modules.clone();
    if in_modules == 0 {
        return;
    }
    let extra = modules.warnings.len().saturating_sub(MAX_MODULE_WARNINGS);
    info.warnings.extend(
        modules
            .warnings
            .iter()
            .take(MAX_MODULE_WARNINGS)
            .map(|w| format!("module list: {w}")),
    );
    if extra > 0 {
        info.warnings
            .push(format!("module list: {extra} more warnings like these"));
    }
    let left = in_modules - named;
    if left > 0 && !modules.modules.is_empty() {
        info.warnings.push(format!(
            "{left} of {in_modules} sites in the module area are in no loaded module's text \
             (a module's init code, freed once it ran, or a module since unloaded): shown by \
             address"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sites::ExitSite;
    use bootscope_model::modules::{GuestModule, ModuleSymbol};

    fn site(rip: u64) -> ExitSite {
        ExitSite {
            reason: "npf".into(),
            rip: Some(rip),
            count: 3,
            ..Default::default()
        }
    }

    fn modules() -> GuestModules {
        let sym = |addr: u64, name: &str| ModuleSymbol {
            addr,
            name: name.into(),
        };
        GuestModules {
            modules: vec![GuestModule {
                name: "virtio_blk".into(),
                text_base: 0xffff_ffff_c05f_d000,
                text_size: 0x3000,
                text_symbols: 2,
                symbols: vec![
                    sym(0xffff_ffff_c05f_d000, "virtblk_remove"),
                    sym(0xffff_ffff_c05f_e0c1, "virtblk_probe"),
                ],
            }],
            warnings: vec![],
        }
    }

    #[test]
    fn module_sites_are_named_function_and_module() {
        let mut sites = ExitSites {
            sites: vec![
                site(0xffff_ffff_c05f_e0d3),
                // Freed init text of another module: in no module.
                site(0xffff_ffff_c100_0000),
                site(0xffff_ffff_8100_0000),
            ],
            symbols: Some(SiteSymbols {
                source: "kallsyms recovered from vmlinuz".into(),
                in_modules: 2,
                ..Default::default()
            }),
            ..Default::default()
        };
        name_sites(&mut sites, &modules());
        let s = &sites.sites[0];
        assert_eq!(s.label(), "virtblk_probe+0x12 [virtio_blk]");
        assert_eq!(s.function_name(), "virtblk_probe [virtio_blk]");
        assert_eq!(
            sites.sites[1].function_name(),
            "0xffffffffc1000000 [module]"
        );
        assert!(sites.sites[2].module.is_none());
        let info = sites.symbols.as_ref().unwrap();
        assert_eq!((info.in_modules, info.in_modules_named), (2, 1));
        assert_eq!(info.source, "kallsyms recovered from vmlinuz");
        assert_eq!(info.modules.len(), 1);
        assert!(info.warnings[0].starts_with("1 of 2 sites"), "{info:?}");
        let v = serde_json::to_value(info).unwrap();
        assert_eq!(v["in_modules_named"], 1);
        assert_eq!(v["modules"][0]["name"], "virtio_blk");
        assert!(v["modules"][0].get("symbols").is_none());
        // And back: the profile reads as it was written, the names kept.
        let back: ExitSites =
            serde_json::from_value(serde_json::to_value(&sites).unwrap()).unwrap();
        assert_eq!(back.sites[0].label(), "virtblk_probe+0x12 [virtio_blk]");
    }

    #[test]
    fn a_list_that_could_not_be_read_leaves_the_tag_and_says_why() {
        let mut sites = ExitSites {
            sites: vec![site(0xffff_ffff_c05f_e0d3)],
            ..Default::default()
        };
        let unread = GuestModules {
            modules: vec![],
            warnings: (0..8).map(|i| format!("problem {i}")).collect(),
        };
        name_sites(&mut sites, &unread);
        assert_eq!(
            sites.sites[0].function_name(),
            "0xffffffffc05fe0d3 [module]"
        );
        let info = sites.symbols.as_ref().unwrap();
        assert_eq!((info.in_modules, info.in_modules_named), (1, 0));
        assert_eq!(info.warnings[0], "module list: problem 0");
        assert_eq!(info.warnings.len(), 6, "{info:?}");
        assert!(info.warnings[5].contains("3 more"), "{info:?}");
        // Without sites in the module area: no warnings at all.
        let mut none = ExitSites {
            sites: vec![site(0xffff_ffff_8100_0000)],
            ..Default::default()
        };
        name_sites(&mut none, &unread);
        assert!(none.symbols.unwrap().warnings.is_empty());
    }
}
