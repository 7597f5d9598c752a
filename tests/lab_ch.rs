//! Cloud Hypervisor in the lab (scripts/lab-ch.sh, driven by
//! scripts/bench-lab-ch-restore with one round): it boots Debian's kernel
//! (the vmlinux inside the bzImage, through its PVH note) with the default
//! guest's initramfs to the hello line, takes a snapshot of the restore
//! guest, and restores it with both memory modes; the guest's 32 MiB read
//! back after each restore has the checksum it had before the snapshot, and
//! the on-demand restore resumes sooner than the copying one of the same
//! snapshot. Skipped (SKIP line) without the lab or without
//! cloud-hypervisor and ch-remote (CH_BIN_DIR, default /usr/local/bin).

mod support;

use std::path::PathBuf;
use std::process::Command;

use support::*;

/// The directory holding cloud-hypervisor and ch-remote, or a SKIP line.
fn ch_bin_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os("CH_BIN_DIR").unwrap_or("/usr/local/bin".into()));
    for name in ["cloud-hypervisor", "ch-remote"] {
        if !dir.join(name).is_file() {
            skip(format_args!(
                "{} is missing (build Cloud Hypervisor as docs/lab.md says, or set CH_BIN_DIR)",
                dir.join(name).display()
            ));
            return None;
        }
    }
    Some(dir)
}

/// One row of the bench's TSV, by column name.
struct Row<'a> {
    names: &'a [&'a str],
    values: Vec<&'a str>,
}

impl Row<'_> {
    fn get(&self, name: &str) -> &str {
        let i = self.names.iter().position(|n| *n == name).unwrap();
        self.values[i]
    }

    fn ms(&self, name: &str) -> u64 {
        self.get(name)
            .parse()
            .unwrap_or_else(|e| panic!("{name} = {:?}: {e}", self.get(name)))
    }
}

#[test]
fn ch_boots_snapshots_and_restores_in_the_lab() {
    let Some(bin) = ch_bin_dir() else { return };
    if lab::lab_kernel().is_none() || lab::static_busybox().is_none() {
        return;
    }
    let dir = scratch("lab-ch");
    let o = Command::new("sh")
        .arg("scripts/bench-lab-ch-restore")
        .arg("1")
        .arg(&dir)
        .env("CH_BIN_DIR", &bin)
        .env("BOOTSCOPE", env!("CARGO_BIN_EXE_bootscope"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("sh runs");
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("boot check: default guest's hello line"),
        "{out}"
    );

    let tsv = std::fs::read_to_string(dir.join("ch-restore.tsv")).unwrap();
    let mut lines = tsv.lines();
    let names: Vec<&str> = lines.next().unwrap().split('\t').collect();
    let rows: Vec<Row> = lines
        .map(|l| Row {
            names: &names,
            values: l.split('\t').collect(),
        })
        .collect();
    // The warm-up round is not recorded: one round, two modes.
    assert_eq!(rows.len(), 2, "{tsv}");
    let mode = |m: &str| rows.iter().find(|r| r.get("mode") == m).expect(m);
    let (copy, ondemand) = (mode("copy"), mode("ondemand"));
    for r in [copy, ondemand] {
        assert_eq!(r.get("sum_ok"), "yes", "{tsv}");
        assert!(r.ms("restore_ms") > 0 && r.ms("done_ms") > 0, "{tsv}");
        assert!(r.ms("total_ms") >= r.ms("restore_ms"), "{tsv}");
        // Both restores come from the same boot and snapshot.
        assert_eq!(r.get("boot_ms"), copy.get("boot_ms"), "{tsv}");
    }
    // Copying 256 MiB before resuming takes longer than registering the
    // memory for faults on first touch.
    assert!(
        ondemand.ms("restore_ms") < copy.ms("restore_ms"),
        "{tsv}\n{out}"
    );
}
