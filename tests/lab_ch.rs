//! Cloud Hypervisor in the lab: one round of
//! scripts/bench-lab-restore-vs-ch, the restore guest under both CH and
//! bootscope in one lab machine. CH boots Debian's kernel (the vmlinux
//! inside the bzImage, through its PVH note) with the restore guest's
//! initramfs, takes a snapshot, and restores it with both memory modes;
//! bootscope restores its own snapshot of the same guest in every mode.
//! The guest's 64 MiB read back after each restore has the checksum it had
//! before the snapshot. scripts/bench-lab-ch-restore (CH alone, the
//! default guest) shares its CH steps (scripts/lab-ch.sh) with this one
//! and is not run here: one lab machine for CH keeps the suite short.
//! Skipped (SKIP line) without the lab or without cloud-hypervisor and
//! ch-remote (CH_BIN_DIR, default /usr/local/bin).

mod support;

use support::*;

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
}

/// The rows of scripts/bench-lab-restore-vs-ch's TSV.
fn tsv_rows(tsv: &str) -> (Vec<&str>, Vec<Vec<&str>>) {
    let mut lines = tsv.lines();
    let names = lines.next().unwrap().split('\t').collect();
    (names, lines.map(|l| l.split('\t').collect()).collect())
}

/// scripts/bench-lab-restore-vs-ch with one round: the restore guest under
/// Cloud Hypervisor (snapshotted while it waits for a console line after
/// 0x61) and under bootscope (snapshotted at 0x61) in one lab machine,
/// each restore mode once, and a boot. Every restore reads back the
/// buffer's checksum; bootscope's prefetch serves at most a tenth of the
/// lazy restore's faults on demand, 2 MiB pages need a tenth of the nested
/// page faults of 4 KiB ones, and the 2 MiB prefetch reaches the next mark
/// before CH's on-demand restore, which resumes before CH's copying one.
#[test]
fn bootscope_and_ch_restore_one_guest_in_one_lab_run() {
    let Some((dir, out)) =
        ch::run_lab_script("bench-lab-restore-vs-ch", &["1"], "lab-restore-vs-ch")
    else {
        return;
    };
    let tsv = std::fs::read_to_string(dir.join("restore-vs-ch.tsv")).unwrap();
    let (names, values) = tsv_rows(&tsv);
    let rows: Vec<Row> = values
        .into_iter()
        .map(|values| Row {
            names: &names,
            values,
        })
        .collect();
    let mode = |m: &str| {
        rows.iter()
            .find(|r| r.get("mode") == m)
            .unwrap_or_else(|| panic!("no {m} row: {tsv}\n{out}"))
    };
    let modes = [
        "ch-copy",
        "ch-ondemand",
        "copy",
        "mmap",
        "uffd",
        "uffd-prefetch",
        "uffd-prefetch-2m",
        "uffd-prefetch-bg",
        "uffd-prefetch-bg-2m",
        "boot",
    ];
    for m in modes {
        assert_eq!(mode(m).get("sum_ok"), "yes", "{m}: {tsv}");
    }
    assert_eq!(rows.len(), modes.len(), "{tsv}");
    let num = |m: &str, c: &str| -> f64 {
        let v = mode(m).get(c);
        v.parse()
            .unwrap_or_else(|e| panic!("{m} {c} = {v:?}: {e}\n{tsv}"))
    };
    assert!(
        num("uffd-prefetch", "uffd_faults") * 10.0 <= num("uffd", "uffd_faults"),
        "{tsv}"
    );
    assert!(
        num("uffd-prefetch-2m", "pf_fixed") * 10.0 <= num("uffd-prefetch", "pf_fixed"),
        "{tsv}"
    );
    // CH's nested page faults are read from KVM's debugfs while it runs.
    assert!(num("ch-ondemand", "pf_fixed") > 0.0, "{tsv}");
    assert!(
        num("uffd-prefetch-2m", "to_next_ms") < num("ch-ondemand", "to_next_ms"),
        "{tsv}"
    );
    assert!(
        num("ch-ondemand", "resume_ms") < num("ch-copy", "resume_ms"),
        "{tsv}"
    );
}
