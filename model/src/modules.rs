//! The guest kernel's loaded modules, read from its memory after the guest
//! stopped (bootscope's own VMM, `run --exit-sites`): each module's name,
//! where its code is, and its text symbols, for naming exit sites in the
//! kernel's module area as `function [module]`.

use serde::{Deserialize, Serialize};

/// One loaded module: its core text (`[text_base, text_base + text_size)`)
/// and the symbols in it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestModule {
    pub name: String,
    /// Runtime address of the module's core text.
    pub text_base: u64,
    /// Bytes of core text (the module's `.text*` sections as the loader
    /// laid them out; its init text is freed after its init and not in it).
    pub text_size: u64,
    /// How many of the module's symbols lie in its text.
    pub text_symbols: u64,
    /// Those symbols by runtime address, sorted; not serialized (the
    /// module's own kallsyms, exact as `/proc/kallsyms` shows them).
    #[serde(skip)]
    pub symbols: Vec<ModuleSymbol>,
}

/// A function symbol of a module at its runtime address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModuleSymbol {
    pub addr: u64,
    pub name: String,
}

impl GuestModule {
    /// True when `addr` lies in the module's core text.
    pub fn holds(&self, addr: u64) -> bool {
        addr >= self.text_base && addr - self.text_base < self.text_size
    }

    /// The function at `addr` in this module's text and the offset into
    /// it: the nearest symbol at or below it (as the kernel's own
    /// kallsyms lookup does); None outside the text or before its first
    /// symbol.
    pub fn function_at(&self, addr: u64) -> Option<(&str, u64)> {
        if !self.holds(addr) {
            return None;
        }
        let i = self.symbols.partition_point(|s| s.addr <= addr);
        let s = self.symbols.get(i.checked_sub(1)?)?;
        Some((s.name.as_str(), addr - s.addr))
    }
}

/// What the VMM read of the module list: the modules found, and why the
/// list is missing or incomplete when it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GuestModules {
    pub modules: Vec<GuestModule>,
    /// Why the list could not be read at all, or what was left out of it
    /// (an unreadable module, a list cut short).
    pub warnings: Vec<String>,
}

impl GuestModules {
    /// The module whose text holds `addr`, with the function there.
    pub fn locate(&self, addr: u64) -> Option<(&GuestModule, Option<(&str, u64)>)> {
        let m = self.modules.iter().find(|m| m.holds(addr))?;
        Some((m, m.function_at(addr)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn functions_are_found_by_the_nearest_symbol_below_in_the_text() {
        let sym = |addr: u64, name: &str| ModuleSymbol {
            addr,
            name: name.into(),
        };
        let m = GuestModule {
            name: "virtio_blk".into(),
            text_base: 0x1000,
            text_size: 0x100,
            text_symbols: 2,
            symbols: vec![sym(0x1010, "virtblk_probe"), sym(0x1080, "virtblk_remove")],
        };
        assert_eq!(m.function_at(0x1022), Some(("virtblk_probe", 0x12)));
        assert_eq!(m.function_at(0x1080), Some(("virtblk_remove", 0)));
        assert_eq!(m.function_at(0x10ff), Some(("virtblk_remove", 0x7f)));
        assert_eq!(m.function_at(0x1100), None, "past the text");
        assert_eq!(m.function_at(0x1008), None, "before the first symbol");
        let all = GuestModules {
            modules: vec![m],
            warnings: vec![],
        };
        assert_eq!(all.locate(0x1022).unwrap().0.name, "virtio_blk");
        assert!(all.locate(0x2000).is_none());
        // The symbols stay out of the document.
        let v = serde_json::to_value(&all.modules[0]).unwrap();
        assert!(v.get("symbols").is_none(), "{v}");
        assert_eq!(v["text_symbols"], 2);
    }
}
