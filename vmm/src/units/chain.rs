//! The critical chain to a unit, computed as `systemd-analyze
//! critical-chain` does: from the unit, follow its `After=` dependencies to
//! the one that became active last (before start-up finished), and so on
//! down; a unit is visited once. As systemd-analyze, it does not ask
//! whether a dependency became active before the unit above it (systemd's
//! own chains end `-.mount` then `-.slice`, active 1.4 ms later): the
//! `After=` lists say what waited for what ([`super::order`]). Linear in the record: units are looked
//! up by name in an index, and each unit's `After=` list is read at most
//! once (a unit is on the chain once).

use std::collections::{HashMap, HashSet};

use super::record::{Record, UnitProps};

/// A link: the unit and its activation times (guest µs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Link {
    pub name: String,
    pub activating_us: u64,
    pub activated_us: u64,
}

impl Link {
    fn of(u: &UnitProps) -> Link {
        Link {
            name: u.id.clone(),
            activating_us: u.inactive_exit_us,
            activated_us: u.active_enter_us,
        }
    }

    /// How long it took to activate (`+` in systemd-analyze), 0 when it
    /// never had to (already active, or never active).
    pub fn duration_us(&self) -> u64 {
        if self.activated_us >= self.activating_us && self.activating_us > 0 {
            self.activated_us - self.activating_us
        } else {
            0
        }
    }
}

/// The chain from `target` down: `target` first, then the dependency it
/// waited for last, and so on. Empty when `target` is not in the record.
pub fn critical_chain(record: &Record, target: &str) -> Vec<Link> {
    critical_chain_counted(record, target).0
}

/// [`critical_chain`], and its work: how many `After=` names it looked
/// up (at most the record's `After=` names, whatever the chain's length).
pub fn critical_chain_counted(record: &Record, target: &str) -> (Vec<Link>, usize) {
    let mut lookups = 0;
    let finish = record.manager_us("FinishTimestampMonotonic");
    // systemd-analyze counts only units activated during the boot: active
    // (at some point) and no later than start-up finished.
    let in_range =
        |u: &UnitProps| u.active_enter_us > 0 && (finish == 0 || u.active_enter_us <= finish);
    // The first unit of each name, as `Record::unit` finds it.
    let mut by_name: HashMap<&str, &UnitProps> = HashMap::with_capacity(record.units.len());
    for u in &record.units {
        by_name.entry(u.id.as_str()).or_insert(u);
    }
    let Some(&top) = by_name.get(target) else {
        return (Vec::new(), lookups);
    };
    let mut chain = vec![Link::of(top)];
    let mut seen: HashSet<&str> = HashSet::from([top.id.as_str()]);
    let mut current = top;
    loop {
        // Among the dependencies in range, the latest activation; ties go to
        // the first in After= order (systemd-analyze sorts them stably by
        // activation, latest first, and follows the first).
        let mut best: Option<&UnitProps> = None;
        for dep in &current.after {
            lookups += 1;
            let Some(&u) = by_name.get(dep.as_str()) else {
                continue;
            };
            if !in_range(u) {
                continue;
            }
            if best.is_none_or(|b| u.active_enter_us > b.active_enter_us) {
                best = Some(u);
            }
        }
        let Some(next) = best else { break };
        if !seen.insert(next.id.as_str()) {
            break;
        }
        chain.push(Link::of(next));
        current = next;
    }
    (chain, lookups)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(id: &str, start: u64, active: u64, after: &[&str]) -> UnitProps {
        UnitProps {
            id: id.into(),
            active_state: "active".into(),
            inactive_exit_us: start,
            active_enter_us: active,
            after: after.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    fn record(units: Vec<UnitProps>, finish: u64) -> Record {
        let mut r = Record {
            units,
            ..Default::default()
        };
        r.manager
            .insert("FinishTimestampMonotonic".into(), finish.to_string());
        r
    }

    #[test]
    fn follows_the_latest_dependency_and_skips_the_rest() {
        let r = record(
            vec![
                unit(
                    "w.service",
                    900,
                    910,
                    &["multi-user.target", "early.service"],
                ),
                unit(
                    "multi-user.target",
                    800,
                    800,
                    &["a.service", "b.service", "late.service"],
                ),
                unit("a.service", 100, 700, &["basic.target"]),
                unit("b.service", 100, 300, &["basic.target"]),
                // Active after start-up finished: not on the chain.
                unit("late.service", 100, 5000, &[]),
                unit("early.service", 10, 20, &[]),
                unit("basic.target", 50, 60, &["never.service"]),
                // Never active: not on the chain.
                unit("never.service", 0, 0, &[]),
            ],
            1000,
        );
        let names: Vec<_> = critical_chain(&r, "w.service")
            .into_iter()
            .map(|l| l.name)
            .collect();
        assert_eq!(
            names,
            [
                "w.service",
                "multi-user.target",
                "a.service",
                "basic.target"
            ]
        );
        assert!(critical_chain(&r, "missing.service").is_empty());
        assert_eq!(critical_chain(&r, "a.service")[0].duration_us(), 600);
    }

    #[test]
    fn a_cycle_ends_the_chain() {
        let r = record(
            vec![unit("x", 10, 20, &["y"]), unit("y", 5, 15, &["x"])],
            100,
        );
        assert_eq!(critical_chain(&r, "x").len(), 2);
    }
}
