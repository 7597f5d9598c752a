//! What a process costs the host in memory, from `/proc/PID/smaps_rollup`:
//! its resident set (RSS), its proportional share of the pages it shares
//! with other processes (PSS) and the pages only it maps (USS).
//!
//! The file is read once and parsed here, so the three figures are of the
//! same moment. USS is `Private_Clean + Private_Dirty` (pages mapped by
//! this process alone); pages of the hugetlb pool (`run --hugepages`) are
//! counted by the kernel apart (`Private_Hugetlb`, `Shared_Hugetlb`) and
//! reported here as [`MemoryUse::hugetlb`].

use serde::{Deserialize, Serialize};

/// One process's (or a group's summed) memory, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryUse {
    /// Resident set size (`Rss`).
    pub rss_bytes: u64,
    /// Proportional set size (`Pss`): every page divided by the number of
    /// processes mapping it.
    pub pss_bytes: u64,
    /// Unique set size (`Private_Clean + Private_Dirty`).
    pub uss_bytes: u64,
    /// Hugetlb pages mapped (`Private_Hugetlb + Shared_Hugetlb`), in
    /// neither RSS, PSS nor USS.
    #[serde(default)]
    pub hugetlb_bytes: u64,
}

impl MemoryUse {
    /// Parses the text of a `smaps_rollup` (or a single `smaps` entry):
    /// `Name:   1234 kB` lines. `None` when `Rss` or `Pss` is missing (not
    /// such a file).
    pub fn parse(text: &str) -> Option<Self> {
        let mut rss = None;
        let mut pss = None;
        let mut private = 0u64;
        let mut hugetlb = 0u64;
        for line in text.lines() {
            let Some((name, rest)) = line.split_once(':') else {
                continue;
            };
            let Some(kib) = rest
                .trim()
                .strip_suffix("kB")
                .and_then(|v| v.trim().parse::<u64>().ok())
            else {
                continue;
            };
            let bytes = kib.saturating_mul(1024);
            match name {
                "Rss" => rss = Some(bytes),
                "Pss" => pss = Some(bytes),
                "Private_Clean" | "Private_Dirty" => private = private.saturating_add(bytes),
                "Private_Hugetlb" | "Shared_Hugetlb" => hugetlb = hugetlb.saturating_add(bytes),
                _ => {}
            }
        }
        Some(Self {
            rss_bytes: rss?,
            pss_bytes: pss?,
            uss_bytes: private,
            hugetlb_bytes: hugetlb,
        })
    }

    /// Reads `/proc/PID/smaps_rollup` once.
    pub fn of_pid(pid: u32) -> std::io::Result<Self> {
        Self::read(&format!("/proc/{pid}/smaps_rollup"))
    }

    /// Reads this process's `/proc/self/smaps_rollup` once.
    pub fn of_self() -> std::io::Result<Self> {
        Self::read("/proc/self/smaps_rollup")
    }

    fn read(path: &str) -> std::io::Result<Self> {
        let text = std::fs::read_to_string(path)?;
        Self::parse(&text).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{path} has no Rss and Pss lines"),
            )
        })
    }

    /// The sum of two processes' figures (a process group's).
    #[must_use]
    pub fn plus(self, o: Self) -> Self {
        Self {
            rss_bytes: self.rss_bytes.saturating_add(o.rss_bytes),
            pss_bytes: self.pss_bytes.saturating_add(o.pss_bytes),
            uss_bytes: self.uss_bytes.saturating_add(o.uss_bytes),
            hugetlb_bytes: self.hugetlb_bytes.saturating_add(o.hugetlb_bytes),
        }
    }
}

/// A sample of [`MemoryUse`] taken at a named moment of a boot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemorySample {
    /// When: `userspace` (the first userspace mark), `memory set-up` (the
    /// end of `--stop-after memory`), `load` (`--stop-after load`).
    pub at: String,
    /// Nanoseconds since VMM start.
    pub t_ns: u64,
    #[serde(flatten)]
    pub usage: MemoryUse,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    const ROLLUP: &str = "55bd5dcb0000-7fffc4de1000 ---p 00000000 00:00 0    [rollup]
Rss:                1628 kB
Pss:                 238 kB
Pss_Dirty:           112 kB
Shared_Clean:       1476 kB
Private_Clean:        40 kB
Private_Dirty:       112 kB
Private_Hugetlb:    2048 kB
Swap:                  0 kB
";

    #[test]
    fn parses_a_rollup() {
        let m = MemoryUse::parse(ROLLUP).unwrap();
        assert_eq!(m.rss_bytes, 1628 * 1024);
        assert_eq!(m.pss_bytes, 238 * 1024);
        assert_eq!(m.uss_bytes, 152 * 1024);
        assert_eq!(m.hugetlb_bytes, 2048 * 1024);
        assert!(MemoryUse::parse("Swap: 0 kB\n").is_none());
        assert!(MemoryUse::parse("").is_none());
        let two = m.plus(m);
        assert_eq!(two.pss_bytes, 2 * m.pss_bytes);
    }

    /// The figures of a real process equal what the kernel says at the
    /// same moment: a stopped child (its memory cannot change) read through
    /// [`MemoryUse::of_pid`], and summed independently over every mapping
    /// of `/proc/PID/smaps`.
    #[test]
    fn equals_the_kernels_figures_for_a_real_process() {
        let mut child = Command::new("sh")
            .args(["-c", "kill -STOP $$; exit 0"])
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id();
        // Wait for it to stop itself.
        let stopped = (0..500).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| crate::proc::stat_field(&s, 3) == Some("T"))
        });
        assert!(stopped, "child {pid} did not stop");
        let m = MemoryUse::of_pid(pid).unwrap();
        let raw = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap();
        let field = |text: &str, name: &str| -> u64 {
            text.lines()
                .filter_map(|l| l.strip_prefix(&format!("{name}:")))
                .map(|v| {
                    v.trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .unwrap()
                })
                .sum::<u64>()
                * 1024
        };
        assert_eq!(m.rss_bytes, field(&raw, "Rss"));
        assert_eq!(m.pss_bytes, field(&raw, "Pss"));
        assert_eq!(
            m.uss_bytes,
            field(&raw, "Private_Clean") + field(&raw, "Private_Dirty")
        );
        // Per mapping: RSS and USS sum exactly; every mapping's PSS is
        // rounded down to a KiB, the rollup's is summed first.
        let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
        let mappings = smaps.lines().filter(|l| l.starts_with("Rss:")).count() as u64;
        assert_eq!(m.rss_bytes, field(&smaps, "Rss"));
        assert_eq!(
            m.uss_bytes,
            field(&smaps, "Private_Clean") + field(&smaps, "Private_Dirty")
        );
        let pss = field(&smaps, "Pss");
        assert!(
            m.pss_bytes >= pss && m.pss_bytes <= pss + mappings * 1024,
            "rollup {} against {pss} summed over {mappings} mappings",
            m.pss_bytes
        );
        assert!(m.uss_bytes > 0 && m.pss_bytes >= m.uss_bytes && m.rss_bytes >= m.pss_bytes);
        assert!(crate::proc::signal_group(pid, libc::SIGCONT));
        assert!(child.wait().unwrap().success());
        assert!(MemoryUse::of_pid(u32::MAX).is_err());
        assert!(MemoryUse::of_self().unwrap().rss_bytes > 0);
    }
}
