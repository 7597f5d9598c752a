//! The profile document (`bootscope profile --output`, `run --output`;
//! docs/profile-schema.md) as `advise` reads it: typed, with the fields its
//! rules use, tolerant of the others. The profile's one definition, which
//! its writer uses, is `bootscope_model::profile::Profile`; this view's
//! field names follow it.

use serde::Deserialize;

/// The profile's `schema` field.
pub const PROFILE_SCHEMA_NAME: &str = "bootscope.profile";
/// The profile versions read (version 2 added `exits.sites`).
pub const PROFILE_VERSIONS: [u64; 2] = [1, 2];

/// A profile, as far as the rules read it.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ProfileView {
    pub schema: String,
    pub version: u64,
    pub target: ProfileTarget,
    pub host: ProfileHost,
    pub exits: ProfileExits,
    pub page_faults: ProfileFaults,
    pub threads: Vec<ProfileThread>,
    pub phases: Vec<ProfilePhase>,
}

/// `target`: what was profiled.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ProfileTarget {
    /// `command`, `pid` or `self` (bootscope profiling its own VMM).
    pub kind: String,
    pub command: Vec<String>,
}

/// `host`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ProfileHost {
    pub kvm: String,
}

/// `exits`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ProfileExits {
    pub source: String,
    pub total: u64,
    pub by_reason: Vec<ReasonRow>,
    pub pio: Vec<PioRow>,
    pub sites: Option<ProfileSites>,
}

/// One of `exits.by_reason[]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ReasonRow {
    pub reason: String,
    pub count: u64,
    /// Absent on PVM and with `--collect exit-counts`.
    pub latency_total_ns: Option<u64>,
}

/// One of `exits.pio[]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct PioRow {
    pub port: u16,
    pub direction: String,
    pub count: u64,
}

/// `exits.sites` (`--exit-sites`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ProfileSites {
    pub sites: Vec<SiteRow>,
}

/// One of `exits.sites.sites[]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct SiteRow {
    pub reason: String,
    pub phase: String,
    pub count: u64,
    pub timed: u64,
    pub latency_total_ns: u64,
    /// The guest function, when the site was named.
    pub function: Option<String>,
}

/// `page_faults`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ProfileFaults {
    pub guest_total: u64,
    pub host_total: u64,
}

/// One of `threads[]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ProfileThread {
    pub name: String,
    /// `vcpu`, `prealloc`, `main`, `other`.
    pub role: String,
    pub run_ns: u64,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// One of `phases[]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ProfilePhase {
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// Why a JSON document is not a profile this reader reads.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    #[error("it is a version {0} profile; this bootscope reads versions 1 and 2")]
    Version(u64),
    #[error("a field has the wrong type: {0}")]
    Field(String),
}

impl ProfileView {
    /// Reads a profile whose `schema` was already found to be
    /// [`PROFILE_SCHEMA_NAME`], checking its version.
    pub fn parse(doc: &serde_json::Value) -> Result<Self, ProfileError> {
        let version = doc
            .get("version")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0);
        if !PROFILE_VERSIONS.contains(&version) {
            return Err(ProfileError::Version(version));
        }
        Self::deserialize(doc).map_err(|e| ProfileError::Field(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_versions_one_and_two_only() {
        let p = ProfileView::parse(&json!({"schema": PROFILE_SCHEMA_NAME, "version": 2,
            "exits": {"by_reason": [{"reason": "io", "count": 3, "latency_total_ns": 30}],
                      "sites": {"sites": [{"reason": "io", "phase": "kernel", "count": 3,
                                           "timed": 3, "latency_total_ns": 30,
                                           "function": "io_serial_out"}]}}}))
        .unwrap();
        assert_eq!(p.exits.by_reason[0].latency_total_ns, Some(30));
        assert_eq!(
            p.exits.sites.unwrap().sites[0].function.as_deref(),
            Some("io_serial_out")
        );
        assert_eq!(
            ProfileView::parse(&json!({"version": 3})).unwrap_err(),
            ProfileError::Version(3)
        );
        assert!(matches!(
            ProfileView::parse(&json!({"version": 1, "exits": {"total": "many"}})),
            Err(ProfileError::Field(_))
        ));
    }
}
