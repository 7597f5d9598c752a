//! The phase pane's rows of the [`App`]: the boot phases and, expanded,
//! the kernel's initcalls by level and the guest's units (`i`, `u`, `o`).

use bootscope_model::profile::PhaseSpan;

use super::App;

/// Order of the initcalls under each level when `kernel` is expanded (`o`
/// switches).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InitcallOrder {
    /// The slowest of each level first ([`SLOWEST_PER_LEVEL`] of them, the
    /// rest summed in one row).
    #[default]
    Slowest,
    /// Every initcall, in the order they ran.
    Time,
}

impl InitcallOrder {
    pub fn label(self) -> &'static str {
        match self {
            InitcallOrder::Slowest => "slowest first",
            InitcallOrder::Time => "time order",
        }
    }
}

/// Initcalls listed per level, slowest first.
pub const SLOWEST_PER_LEVEL: usize = 5;

/// One row of the phase pane.
#[derive(Clone, Debug, PartialEq)]
pub enum PhaseRow {
    /// A boot phase; `index` is its place among the phases (its colour).
    Phase {
        index: usize,
        name: String,
        start_ns: u64,
        end_ns: u64,
        running: bool,
        /// `kernel` with initcalls to show: whether they are shown.
        initcalls: Option<bool>,
    },
    /// An initcall level under `kernel`.
    Level {
        level: String,
        calls: usize,
        start_ns: u64,
        end_ns: u64,
        exits: Option<u64>,
    },
    /// An initcall under its level.
    Call {
        name: String,
        start_ns: u64,
        duration_ns: u64,
        ret: i64,
        exits: Option<u64>,
    },
    /// The initcalls of a level not listed (slowest first): how many, their
    /// time and exits.
    More {
        calls: usize,
        duration_ns: u64,
        exits: Option<u64>,
    },
}

/// Whether a profile phase is an initcall or level that a timeline
/// converted to a profile carries (`initcall: NAME`, `initcalls: LEVEL`):
/// the pane shows those under `kernel` instead.
pub fn is_initcall_phase(name: &str) -> bool {
    name.starts_with("initcall: ")
        || name.starts_with("initcalls: ")
        || name.starts_with(bootscope_model::profile::UNIT_PHASE_PREFIX)
}

impl App {
    /// Index of the phase running now: the last one (initcall spans left
    /// out), while the target runs and nothing has ended it.
    pub fn current_phase(&self) -> Option<usize> {
        if self.finished || self.profile.target.ended_ns.is_some() {
            return None;
        }
        // The initcall spans a timeline carries are not boot phases.
        let last = self
            .profile
            .phases
            .iter()
            .rposition(|p| !is_initcall_phase(&p.name))?;
        let p: &PhaseSpan = &self.profile.phases[last];
        (p.end_ns >= self.profile.duration_ns).then_some(last)
    }

    /// The phase pane's rows: the boot phases and, with `kernel` expanded,
    /// its initcall levels (in the order they ran), each with its initcalls
    /// in [`App::initcall_order`].
    pub fn phase_rows(&self) -> Vec<PhaseRow> {
        let current = self.current_phase();
        let mut rows = Vec::new();
        for (index, s) in self.profile.phases.iter().enumerate() {
            if is_initcall_phase(&s.name) {
                continue;
            }
            let has_initcalls = s.name == "kernel" && self.initcalls.is_some();
            let has_units = s.name == "userspace" && self.units.is_some();
            let expandable = if has_units {
                Some(self.expand_userspace)
            } else {
                has_initcalls.then_some(self.expand_kernel)
            };
            rows.push(PhaseRow::Phase {
                index,
                name: s.name.clone(),
                start_ns: s.start_ns,
                end_ns: s.end_ns,
                running: current == Some(index),
                initcalls: expandable,
            });
            if has_initcalls && self.expand_kernel {
                self.initcall_rows(&mut rows);
            }
            if has_units && self.expand_userspace {
                self.unit_rows(&mut rows);
            }
        }
        rows
    }

    /// The units under `userspace`: the critical chain (deepest first, the
    /// order they became active), then the other units in
    /// [`App::initcall_order`] (slowest first: the first
    /// [`SLOWEST_PER_LEVEL`] * 2, the rest summed).
    fn unit_rows(&self, rows: &mut Vec<PhaseRow>) {
        let Some(units) = &self.units else { return };
        let call = |u: &crate::units::UnitRow| PhaseRow::Call {
            name: u.name.clone(),
            start_ns: u.start_ns,
            duration_ns: u.duration_ns,
            ret: 0,
            exits: None,
        };
        let span = |list: &[crate::units::UnitRow]| {
            let start = list.iter().map(|u| u.start_ns).min().unwrap_or(0);
            let end = list
                .iter()
                .map(|u| u.start_ns + u.duration_ns)
                .max()
                .unwrap_or(0);
            (start, end)
        };
        let (start_ns, end_ns) = span(&units.chain);
        rows.push(PhaseRow::Level {
            level: format!("chain to {}", units.target),
            calls: units.chain.len(),
            start_ns,
            end_ns,
            exits: None,
        });
        rows.extend(units.chain.iter().rev().map(call));
        let (start_ns, end_ns) = span(&units.others);
        rows.push(PhaseRow::Level {
            level: "other units".into(),
            calls: units.others.len(),
            start_ns,
            end_ns,
            exits: None,
        });
        let mut others: Vec<_> = units.others.iter().collect();
        let shown = match self.initcall_order {
            InitcallOrder::Time => others.len(),
            InitcallOrder::Slowest => {
                others.sort_by_key(|u| std::cmp::Reverse(u.duration_ns));
                (2 * SLOWEST_PER_LEVEL).min(others.len())
            }
        };
        rows.extend(others[..shown].iter().map(|u| call(u)));
        let rest = &others[shown..];
        if !rest.is_empty() {
            rows.push(PhaseRow::More {
                calls: rest.len(),
                duration_ns: rest.iter().map(|u| u.duration_ns).sum(),
                exits: None,
            });
        }
    }

    fn initcall_rows(&self, rows: &mut Vec<PhaseRow>) {
        let Some(ic) = &self.initcalls else {
            return;
        };
        for g in &ic.groups {
            rows.push(PhaseRow::Level {
                level: g.level.clone(),
                calls: g.calls.len(),
                start_ns: g.start_ns,
                end_ns: g.end_ns,
                exits: g.exits,
            });
            let mut calls: Vec<_> = g.calls.iter().collect();
            let shown = match self.initcall_order {
                InitcallOrder::Time => calls.len(),
                InitcallOrder::Slowest => {
                    calls.sort_by(|a, b| {
                        b.duration_ns
                            .cmp(&a.duration_ns)
                            .then(a.start_ns.cmp(&b.start_ns))
                    });
                    SLOWEST_PER_LEVEL.min(calls.len())
                }
            };
            for c in &calls[..shown] {
                rows.push(PhaseRow::Call {
                    name: c.name.clone(),
                    start_ns: c.start_ns,
                    duration_ns: c.duration_ns,
                    ret: c.ret,
                    exits: c.exits,
                });
            }
            let rest = &calls[shown..];
            if !rest.is_empty() {
                let exits = rest.iter().map(|c| c.exits).sum::<Option<u64>>();
                rows.push(PhaseRow::More {
                    calls: rest.len(),
                    duration_ns: rest.iter().map(|c| c.duration_ns).sum(),
                    exits,
                });
            }
        }
    }
}
