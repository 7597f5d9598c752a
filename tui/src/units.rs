//! A systemd guest's units as the phase pane shows them under `userspace`
//! (`u`): the critical chain to the workload, then the other units. Read
//! from the timeline's `units` object (docs/guest.md), which a run has
//! once the guest has stopped, so the TUI gets it with the final data.

use bootscope_model::units::UnitsDoc;

/// One unit: when it began activating and how long it took.
#[derive(Clone, Debug, PartialEq)]
pub struct UnitRow {
    pub name: String,
    /// Timeline time (ns since VMM start).
    pub start_ns: u64,
    pub duration_ns: u64,
    /// It ended `failed`.
    pub failed: bool,
}

/// The units of a boot: the critical chain (target first, as
/// `systemd-analyze critical-chain` prints it) and every other unit.
#[derive(Clone, Debug, PartialEq)]
pub struct Units {
    /// The unit the chain leads to.
    pub target: String,
    pub chain: Vec<UnitRow>,
    pub others: Vec<UnitRow>,
}

impl Units {
    /// The units of a timeline's `units` object; None when it has none
    /// (its `error` says why).
    pub fn from_doc(doc: &UnitsDoc) -> Option<Units> {
        if doc.units.is_empty() {
            return None;
        }
        let row = |name: &str| {
            let u = doc.unit(name)?;
            Some(UnitRow {
                name: u.name.clone(),
                start_ns: u.start_ns,
                duration_ns: u.duration_ns,
                failed: u.state == "failed",
            })
        };
        let chain: Vec<UnitRow> = doc
            .critical_chain
            .iter()
            .filter_map(|l| row(&l.name))
            .collect();
        let others = doc
            .units
            .iter()
            .filter(|u| !chain.iter().any(|c| c.name == u.name))
            .filter_map(|u| row(&u.name))
            .collect();
        Some(Units {
            target: doc.chain_target.clone(),
            chain,
            others,
        })
    }

    /// How many units in all.
    pub fn len(&self) -> usize {
        self.chain.len() + self.others.len()
    }

    /// No unit at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bootscope_model::units::{ChainLink, Unit};

    #[test]
    fn the_chain_comes_apart_from_the_others() {
        let unit = |name: &str, start_ns, state: &str| Unit {
            name: name.into(),
            start_ns,
            duration_ns: 10,
            state: state.into(),
            ..Default::default()
        };
        let doc = UnitsDoc {
            units: vec![
                unit("a.service", 1, "active"),
                unit("b.service", 2, "failed"),
                unit("w.service", 3, "active"),
            ],
            chain_target: "w.service".into(),
            critical_chain: vec![
                ChainLink {
                    name: "w.service".into(),
                    ..Default::default()
                },
                ChainLink {
                    name: "a.service".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let u = Units::from_doc(&doc).unwrap();
        assert_eq!(u.len(), 3);
        assert_eq!(u.chain[0].name, "w.service");
        assert_eq!(u.others.len(), 1);
        assert!(u.others[0].failed);
        assert!(Units::from_doc(&UnitsDoc::default()).is_none());
    }
}
