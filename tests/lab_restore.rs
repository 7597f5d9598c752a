//! Snapshot and restore of a real Linux guest with bootscope's VMM, in the
//! lab (real nested KVM), in one lab run: the restore guest
//! (`bootscope_lab::restore_guest`) boots with a virtio disk and is
//! snapshotted at its port 0x80 mark 0x61, after it filled 64 MiB of its
//! page cache; then it is restored under every `--memory-restore` mode,
//! lazily (`uffd`, which records the working set) and with `--prefetch` of
//! that record (also on 2 MiB huge pages). Each restore must read back the same 64 MiB (the same
//! SHA-256 as before the snapshot), see its uptime go on, draw random
//! bytes no other restore drew (the VM generation ID reseeds its RNG),
//! reach the next mark 0x62 and power off; the disk keeps the line written
//! before the snapshot and the last restore's line after it; a restore
//! after the disk changed is refused without `--force`. The lazy restore's
//! and the prefetching one's faults served on demand are printed (the
//! figures in docs/benchmarks.md, "Lab restore"). A restore still running
//! after [`RUN_TIMEOUT_S`] is stopped (the VMM's `--timeout`: its timeline
//! says where each vCPU was), printed with its console's end, and run once
//! more; the test checks the second run. One more `mmap` restore is
//! profiled: its fault tail (the guest's faults from its first `KVM_RUN` to
//! its next mark) must add up by time, kind and region, within KVM's own
//! count.

mod support;

use support::*;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use bootscope_lab::restore_guest::{GuestReport, LINE_PREFIX, NEXT_MARK, SNAPSHOT_MARK};

/// The restores, in the order the lab runs them: name and `run` flags.
const RESTORES: [(&str, &str); 6] = [
    ("copy", "--memory-restore copy --no-record"),
    ("mmap", "--memory-restore mmap --no-record --force"),
    ("lazy", "--memory-restore uffd --force"),
    ("prefetch", "--memory-restore uffd --prefetch --force"),
    ("mmap-prefetch", "--memory-restore mmap --prefetch --force"),
    (
        "prefetch-2m",
        "--memory-restore uffd --prefetch --hugepages 2M --force",
    ),
];

/// How long one restore in the lab may take before it counts as hung: a
/// restore takes seconds (the lazy one, the longest, about 6 s on an idle
/// host), so a hang costs minutes, not the lab's whole timeout.
const RUN_TIMEOUT_S: u32 = 240;

/// Every run's files in `out/`: console, timeline, bootscope's own output.
fn outputs(dir: &Path) -> Vec<PathBuf> {
    let mut files = vec![dir.join("out/result.txt"), dir.join("out/disk.txt")];
    files.push(dir.join("out/refused.run"));
    for ext in ["log", "json", "run", "timeline.json"] {
        files.push(dir.join(format!("out/profiled.{ext}")));
    }
    for name in std::iter::once("boot").chain(RESTORES.iter().map(|(n, _)| *n)) {
        for ext in ["log", "json", "run"] {
            files.push(dir.join(format!("out/{name}.{ext}")));
        }
    }
    for (name, _) in RESTORES {
        for ext in ["log", "json", "run"] {
            files.push(dir.join(format!("out/{name}.hung.{ext}")));
        }
    }
    files
}

/// The lab machine's script: boot to the snapshot, restore each way, read
/// the disk.
fn lab_script(dir: &Path, exe: &Path, kernel: &Path, initrd: &Path) -> String {
    let (d, exe, k, i) = (
        dir.display(),
        exe.display(),
        kernel.display(),
        initrd.display(),
    );
    let bb = "/bin/busybox";
    let touch: Vec<String> = outputs(dir)
        .iter()
        .map(|p| format!("{bb} touch {}", p.display()))
        .collect();
    let restores: Vec<String> = RESTORES
        .iter()
        .map(|(name, flags)| format!("restore {name} {flags}"))
        .collect();
    format!(
        r#"cd {d}
{bb} mkdir -p out
{touch}
{bb} truncate -s 8M disk.raw
# The 2 MiB restore's pool: guest memory (128 pages) and some to spare.
echo 160 > /proc/sys/vm/nr_hugepages
common="--no-profile --no-summary"
# A restore takes seconds; one that has not ended in {timeout} s is hung.
restore_timeout="--timeout {timeout}"
{exe} run --kernel {k} --initrd {i} --memory 256M $common --timeout 1200 --disk {d}/disk.raw --snapshot {d}/snap --snapshot-at {snap:#04x} --serial {d}/out/boot.log --timeline {d}/out/boot.json > out/boot.run 2>&1
echo "boot exit $?" >> out/result.txt
attempt() {{
  name=$1; shift
  {exe} run --restore {d}/snap $common $restore_timeout --serial {d}/out/$name.log --timeline {d}/out/$name.json --working-set-until "port 0x80: userspace {next:#04x}" "$@" > out/$name.run 2>&1
}}
# A restore that timed out is kept as NAME.hung.* and run once more (with
# --force: the hung one may have written the disk).
restore() {{
  name=$1; shift
  attempt $name "$@"
  code=$?
  if {bb} grep -q '"reason": *"timeout"' out/$name.json; then
    for ext in log json run; do {bb} cp out/$name.$ext out/$name.hung.$ext; done
    echo "$name timed out" >> out/result.txt
    case " $* " in *" --force "*) ;; *) set -- "$@" --force ;; esac
    attempt $name "$@"
    code=$?
  fi
  echo "$name exit $code" >> out/result.txt
  [ -f {d}/snap/working-set ] && echo "$name working-set" >> out/result.txt
}}
{first}
{exe} run --restore {d}/snap $common $restore_timeout --serial {d}/out/refused.log > out/refused.run 2>&1
echo "refused exit $?" >> out/result.txt
# Profiled (the fault tail is on by default for a restore).
{exe} run --restore {d}/snap --no-summary $restore_timeout --force --memory-restore mmap --no-record --working-set-until "port 0x80: userspace {next:#04x}" --serial {d}/out/profiled.log --output {d}/out/profiled.json --timeline {d}/out/profiled.timeline.json > out/profiled.run 2>&1
echo "profiled exit $?" >> out/result.txt
{rest}
{bb} dd if=disk.raw bs=512 count=1 2>/dev/null | {bb} head -n 1 > out/disk.txt
{bb} dd if=disk.raw bs=512 skip=8 count=1 2>/dev/null | {bb} head -n 1 >> out/disk.txt
exit 0
"#,
        touch = touch.join("\n"),
        snap = SNAPSHOT_MARK,
        next = NEXT_MARK,
        timeout = RUN_TIMEOUT_S,
        first = restores[0],
        rest = restores[1..].join("\n"),
    )
}

/// `NAME exit CODE` from the result file.
fn exit_code(result: &str, name: &str) -> Option<i32> {
    result.lines().find_map(|l| {
        l.strip_prefix(&format!("{name} exit "))?
            .trim()
            .parse()
            .ok()
    })
}

#[test]
fn a_restored_linux_guest_reads_back_its_memory_in_every_mode_in_the_lab() {
    let kernel = require_lab!();
    let busybox = require_busybox!();
    let dir = scratch("lab-restore");
    let Some(initrd) = lab::restore_guest(&dir) else {
        return;
    };
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_bootscope"));
    let script = dir.join("lab.sh");
    std::fs::write(&script, lab_script(&dir, &exe, &kernel, &initrd)).unwrap();
    let out = run_lab(&dir, &exe, &busybox, &kernel, &initrd, &script);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{stderr}");
    let read = |n: &str| std::fs::read_to_string(dir.join("out").join(n)).unwrap_or_default();
    let result = read("result.txt");
    let context = |name: &str| {
        format!(
            "result:\n{result}\n{name}.run:\n{}\n{name}.log:\n{}",
            read(&format!("{name}.run")),
            read(&format!("{name}.log"))
        )
    };
    report_hangs(&dir, &result);
    assert_eq!(exit_code(&result, "boot"), Some(0), "{}", context("boot"));
    let boot = GuestReport::parse(&read("boot.log"));
    let before = boot
        .before_sum
        .clone()
        .expect("the checksum before the mark");
    assert_eq!(before.len(), 64, "{}", context("boot"));
    assert_eq!(boot.marks, vec![SNAPSHOT_MARK], "{}", context("boot"));
    assert_eq!(boot.vmgenid, Some(true), "{}", context("boot"));
    assert_eq!(
        boot.disk.as_deref(),
        Some("/dev/vda"),
        "{}",
        context("boot")
    );
    let boot_doc = read_json(dir.join("out/boot.json"));
    assert_eq!(boot_doc["host_kvm"], "svm", "the lab is real nested SVM");

    // A disk written since the snapshot: refused (exit 2) without --force.
    assert_eq!(
        exit_code(&result, "refused"),
        Some(2),
        "{}",
        context("refused")
    );
    assert!(
        read("refused.run").contains("--force"),
        "{}",
        context("refused")
    );

    assert_eq!(
        exit_code(&result, "profiled"),
        Some(0),
        "{}",
        context("profiled")
    );
    check_profiled_fault_tail(
        &read_json(dir.join("out/profiled.json")),
        &read_json(dir.join("out/profiled.timeline.json"))["kvm_stats"],
    );

    let mut randoms = HashSet::new();
    let mut last_random = String::new();
    for (name, _) in RESTORES {
        assert_eq!(exit_code(&result, name), Some(0), "{}", context(name));
        let guest = GuestReport::parse(&read(&format!("{name}.log")));
        check_restored_guest(name, &boot, &guest, &context(name));
        let random = guest.after_random.clone().unwrap();
        assert!(
            randoms.insert(random.clone()),
            "{name} drew another restore's random bytes: {random}"
        );
        last_random = random;
        check_restore_timeline(name, &read_json(dir.join(format!("out/{name}.json"))));
    }
    // The lazy uffd restore recorded the working set.
    assert!(
        result.contains("lazy working-set") && !result.contains("mmap working-set"),
        "{result}"
    );
    report_faults(&dir);

    // The disk kept the line written before the snapshot and the last
    // restore's line after it.
    let disk = read("disk.txt");
    let lines: Vec<&str> = disk.lines().collect();
    let want_before = format!("{LINE_PREFIX} before {}", boot.before_random.unwrap());
    let want_after = format!("{LINE_PREFIX} after {last_random}");
    assert_eq!(lines, [want_before.as_str(), want_after.as_str()], "{disk}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each restore that timed out and was run again: its outcome (where each
/// vCPU was) and the end of its console, printed (the test goes on with
/// the second run's files).
fn report_hangs(dir: &Path, result: &str) {
    for (name, _) in RESTORES {
        if !result.contains(&format!("{name} timed out")) {
            continue;
        }
        let hung = |ext: &str| {
            std::fs::read_to_string(dir.join(format!("out/{name}.hung.{ext}"))).unwrap_or_default()
        };
        let doc: serde_json::Value = serde_json::from_str(&hung("json")).unwrap_or_default();
        let console = hung("log");
        // The guest's text, its control characters escaped for the terminal.
        let tail: Vec<String> = console
            .lines()
            .rev()
            .take(20)
            .map(|l| {
                l.chars()
                    .map(|c| {
                        if c.is_control() {
                            c.escape_default().to_string()
                        } else {
                            c.to_string()
                        }
                    })
                    .collect()
            })
            .collect();
        println!(
            "lab restore: {name} timed out after {RUN_TIMEOUT_S} s and was run again; outcome {}; devices {}; its console's end:\n{}",
            doc["outcome"],
            doc["devices"],
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
}

/// The profiled restore's fault tail: the guest's faults from its first
/// `KVM_RUN` to its next mark (its pages coming back: at least a thousand
/// on SVM's nested paging), no more than KVM's own statistics say it took
/// over the VM's life (`kvm`: the timeline's), and the curve, the kinds and
/// the regions each adding up to them.
fn check_profiled_fault_tail(p: &serde_json::Value, kvm: &serde_json::Value) {
    let t = &p["fault_tail"];
    let faults = fault_tail_parts_add_up(t);
    assert!(faults >= 1000, "{t}");
    assert!(t["window"]["end_mark"].is_string(), "{}", t["window"]);
    let pf_taken = kvm["pf_taken"].as_u64().expect("KVM's pf_taken");
    assert!(faults <= pf_taken, "{faults} against KVM's {kvm}");
    assert_eq!(p["map_overflows"], 0, "map overflows");
    println!(
        "lab restore: profiled mmap restore: {faults} guest faults in the window, {} regions, KVM's pf_taken {}",
        t["regions"].as_array().unwrap().len(),
        kvm["pf_taken"]
    );
}

/// `bootscope lab` running `script` on busybox with the VMM, the kernel
/// and the guest's initramfs carried in and every output brought back.
fn run_lab(
    dir: &Path,
    exe: &Path,
    busybox: &Path,
    kernel: &Path,
    initrd: &Path,
    script: &Path,
) -> std::process::Output {
    let mut cmd = bootscope();
    cmd.args([
        "lab",
        "--timeout",
        "3000",
        "--retries",
        "2",
        "--memory",
        "2G",
    ])
    .arg("--exe")
    .arg(busybox)
    .arg("--program")
    .arg(exe)
    .arg("--input")
    .arg(kernel)
    .arg("--input")
    .arg(initrd);
    for file in outputs(dir) {
        cmd.arg("--output").arg(file);
    }
    cmd.arg("--")
        .arg("sh")
        .arg(script)
        .output()
        .expect("bootscope lab runs")
}

/// One restore's guest: the buffer read back intact, the uptime not gone
/// back, random bytes unlike the boot's, the next mark, the RNG reseeded.
fn check_restored_guest(name: &str, boot: &GuestReport, guest: &GuestReport, context: &str) {
    assert_eq!(
        guest.after_sum, boot.before_sum,
        "{name}: the buffer changed: {context}"
    );
    let (t0, t1) = (boot.before_uptime.unwrap(), guest.after_uptime);
    let t1 = t1.unwrap_or_else(|| panic!("{name}: no uptime after the restore: {context}"));
    assert!(
        t1 >= t0,
        "{name}: uptime went back from {t0} to {t1}: {context}"
    );
    assert_ne!(guest.after_random, boot.before_random, "{context}");
    assert_eq!(guest.marks, vec![NEXT_MARK], "{name}: {context}");
    assert!(
        context.contains("crng reseeded due to virtual machine fork"),
        "{name}: the guest's RNG was not reseeded from the new VM generation ID: {context}"
    );
}

/// One restore's timeline: clean, a restore of this mode, the next mark
/// reached and ending the working-set window.
fn check_restore_timeline(name: &str, doc: &serde_json::Value) {
    assert_eq!(doc["outcome"]["clean"], true, "{name}: {}", doc["outcome"]);
    let next = format!("port 0x80: userspace {NEXT_MARK:#04x}");
    let marks = doc["marks"].as_array().expect("marks");
    assert!(
        marks.iter().any(|m| m["name"] == next.as_str()),
        "{name}: no {next} in {marks:?}"
    );
    assert!(
        marks
            .iter()
            .any(|m| m["name"] == "restore: new VM generation ID"),
        "{name}: {marks:?}"
    );
    let memory = &doc["restore_memory"];
    let mode = if name.starts_with("mmap") {
        "mmap"
    } else if name == "copy" {
        "copy"
    } else {
        "uffd"
    };
    assert_eq!(memory["mode"], mode, "{name}: {memory}");
    let page: u64 = if name.ends_with("-2m") { 2 << 20 } else { 4096 };
    assert_eq!(memory["page_bytes"], page, "{name}: {memory}");
    if mode != "copy" {
        assert_eq!(memory["window_end"], next.as_str(), "{name}: {memory}");
    }
}

/// A mark's time in a timeline, in ms.
fn mark_ms(doc: &serde_json::Value, name: &str) -> Option<f64> {
    doc["marks"]
        .as_array()?
        .iter()
        .find(|m| m["name"] == name)
        .and_then(|m| m["t_ns"].as_f64())
        .map(|ns| ns / 1e6)
}

/// Each restore's figures (restore to the next mark, the window from the
/// first `KVM_RUN` to it, faults on demand, the prefetch) printed for
/// docs/benchmarks.md; the cut in faults the issue asks for (at least
/// 90 %) and the prefetch's coverage (at least 95 % of the touched pages)
/// checked.
fn report_faults(dir: &Path) {
    let doc = |name: &str| read_json(dir.join(format!("out/{name}.json")));
    let next = format!("port 0x80: userspace {NEXT_MARK:#04x}");
    println!("lab restore: run, restore to next mark ms, window ms, faults on demand, prefetched pages, misses");
    for (name, _) in RESTORES {
        let d = doc(name);
        let m = &d["restore_memory"];
        let to_mark = mark_ms(&d, &next).unwrap_or(f64::NAN)
            - mark_ms(&d, "vmm: process start").unwrap_or(0.0);
        println!(
            "lab restore: {name}, {to_mark:.0}, {:.0}, {}, {}, {}",
            m["window_ns"].as_f64().unwrap_or(f64::NAN) / 1e6,
            m["faults"]["count"],
            m["prefetch"]["pages"],
            m["prefetch"]["misses"],
        );
    }
    let (lazy, prefetch) = (doc("lazy"), doc("prefetch"));
    let (lazy, prefetch) = (&lazy["restore_memory"], &prefetch["restore_memory"]);
    let faults = |m: &serde_json::Value| m["faults"]["count"].as_u64().unwrap_or(0);
    let touched = lazy["working_set"]["pages"].as_u64().unwrap_or(0);
    let pages = prefetch["prefetch"]["pages"].as_u64().unwrap_or(0);
    let misses = prefetch["prefetch"]["misses"].as_u64().unwrap_or(u64::MAX);
    // The guest read back 64 MiB: at least that many pages were touched.
    assert!(touched >= 64 << 8, "{lazy}");
    assert!(faults(lazy) >= 64 << 8, "{lazy}");
    assert_eq!(
        pages, touched,
        "the record is the lazy restore's: {prefetch}"
    );
    assert!(
        faults(prefetch) * 10 <= faults(lazy),
        "the prefetch must cut the faults on demand by 90 %: {prefetch} against {lazy}"
    );
    // Touched pages of this restore outside the record: at most 5 %.
    assert!(misses * 20 <= touched, "{prefetch}");
}
