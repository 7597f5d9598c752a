//! Reading exit sites (`--exit-sites`): the in-kernel counts by guest RIP,
//! each exit still open added at its RIP, and every reason's rest that the
//! site map had no room for as one unattributed row, so that the sites of
//! a reason add up to its count.

use std::collections::BTreeMap;

use super::maps::percpu_sum;
use super::state::State;
use crate::bpf::{self, BsExitKey, BsSiteKey, BsSiteVal};
use crate::sites::{ExitSite, ExitSites, NpfRange};

/// The reason key of a site (its RIP left out).
pub(super) fn reason_key(k: &BsSiteKey) -> BsExitKey {
    BsExitKey {
        tgid: k.tgid,
        vcpu_id: k.vcpu_id,
        reason: k.reason,
        isa: k.isa,
        phase: k.phase,
    }
}

/// Adds `rest` to the unattributed remainder of each reason key: what its
/// count has beyond its sites.
pub(super) fn remainders(
    reasons: &BTreeMap<BsExitKey, u64>,
    sites: &BTreeMap<BsSiteKey, BsSiteVal>,
) -> BTreeMap<BsExitKey, u64> {
    let mut attributed: BTreeMap<BsExitKey, u64> = BTreeMap::new();
    for (k, v) in sites {
        *attributed.entry(reason_key(k)).or_default() += v.count;
    }
    reasons
        .iter()
        .filter_map(|(k, &n)| {
            let rest = n.saturating_sub(attributed.get(k).copied().unwrap_or(0));
            (rest > 0).then_some((*k, rest))
        })
        .collect()
}

impl State {
    /// The site counts, with each exit still open (no kvm_entry has
    /// counted it) added at its RIP without a latency, as
    /// [`State::exit_stats`] adds it to its reason.
    fn site_counts(&self) -> BTreeMap<BsSiteKey, BsSiteVal> {
        // Each site's histogram: its exits, those timed (ended by
        // kvm_entry: in a latency slot) and their latency.
        let mut out: BTreeMap<BsSiteKey, BsSiteVal> = self
            .entries::<BsSiteKey, bpf::BsHist>("exit_sites")
            .into_iter()
            .map(|(k, h)| {
                let v = BsSiteVal {
                    count: h.count,
                    timed: h.slots.iter().sum(),
                    total_ns: h.total_ns,
                };
                (k, v)
            })
            .collect();
        let open = self.entries::<u32, bpf::BsExitStart>("exit_start");
        for (_, e) in open.into_iter().filter(|(_, e)| e.ts_ns != 0) {
            let key = BsSiteKey {
                tgid: e.tgid,
                vcpu_id: e.vcpu_id,
                reason: e.reason,
                isa: e.isa,
                phase: e.phase,
                pad: 0,
                rip: e.rip,
            };
            out.entry(key).or_default().count += 1;
        }
        out
    }

    /// `exits.sites`, when collected.
    pub(super) fn exit_sites(&self) -> Option<ExitSites> {
        if !self.setup.exit_sites {
            return None;
        }
        let sites = self.site_counts();
        let reasons: BTreeMap<BsExitKey, u64> = self
            .exit_stats()
            .into_iter()
            .map(|(k, h)| (k, h.count))
            .collect();
        let site = |k: &BsExitKey, rip, count, timed, latency_total_ns| ExitSite {
            reason: self.setup.reasons.exit_name(k.isa, k.reason),
            vcpu: k.vcpu_id,
            phase: self.log.phase_names.name(k.phase),
            rip,
            count,
            timed,
            latency_total_ns,
            function: None,
            offset: None,
            module: None,
        };
        let mut out = ExitSites {
            overflows: percpu_sum(&self.bpf, "exit_site_overflows", 0),
            ..Default::default()
        };
        for (k, v) in &sites {
            let r = reason_key(k);
            out.sites
                .push(site(&r, Some(k.rip), v.count, v.timed, v.total_ns));
        }
        for (k, rest) in remainders(&reasons, &sites) {
            out.sites.push(site(&k, None, rest, 0, 0));
        }
        out.sites
            .sort_by(|a, b| b.count.cmp(&a.count).then(a.rip.cmp(&b.rip)));
        let mut npf: BTreeMap<(u64, u32), BsSiteVal> = BTreeMap::new();
        for (k, v) in self.entries::<bpf::BsNpfKey, BsSiteVal>("npf_ranges") {
            let e = npf.entry((k.range, k.phase)).or_default();
            e.count += v.count;
            e.timed += v.timed;
            e.total_ns += v.total_ns;
        }
        out.npf_ranges = npf
            .into_iter()
            .map(|((range, phase), v)| NpfRange {
                gpa_start: range << bpf::NPF_RANGE_SHIFT,
                gpa_end: (range + 1) << bpf::NPF_RANGE_SHIFT,
                phase: self.log.phase_names.name(phase),
                count: v.count,
                timed: v.timed,
                latency_total_ns: v.total_ns,
                label: None,
            })
            .collect();
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reasons_rest_beyond_its_sites_is_unattributed() {
        let r = |reason| BsExitKey {
            tgid: 1,
            vcpu_id: 0,
            reason,
            isa: 2,
            phase: 0,
        };
        let s = |reason, rip| BsSiteKey {
            tgid: 1,
            vcpu_id: 0,
            reason,
            isa: 2,
            phase: 0,
            pad: 0,
            rip,
        };
        let v = |count| BsSiteVal {
            count,
            timed: count,
            total_ns: 0,
        };
        let reasons = BTreeMap::from([(r(0x7b), 100), (r(0x7c), 5)]);
        let sites = BTreeMap::from([(s(0x7b, 1), v(60)), (s(0x7b, 2), v(30)), (s(0x7c, 3), v(5))]);
        let rest = remainders(&reasons, &sites);
        assert_eq!(rest, BTreeMap::from([(r(0x7b), 10)]));
    }
}
