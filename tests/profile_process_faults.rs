//! A launched command's page faults as the kernel counts them
//! (`target.faults`, wait4's rusage: what /proc/PID/stat shows) against the
//! page-fault exceptions the profile counted for its threads
//! (`page_faults.host_total`), over the same interval: the command's life
//! from its release to exec (less `target.faults.held`).

mod support;

use support::*;

#[test]
fn a_launched_command_s_faults_equal_the_kernel_s_count() {
    require_bpf!();
    let d = scratch("process-faults");
    let out = d.join("p.json");
    // 64 MiB read from /dev/zero into a buffer of 4 KiB pages: one fault a
    // page, taken in kernel mode by the copy into it.
    let mut cmd = bootscope();
    cmd.args(["profile", "--collect", "faults", "--no-summary", "--output"])
        .arg(&out)
        .args([
            "--",
            "dd",
            "if=/dev/zero",
            "of=/dev/null",
            "bs=64M",
            "count=1",
        ]);
    let o = run(&mut cmd, None);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let p = read_json(&out);
    let kernel = &p["target"]["faults"];
    // The faults of its start before the exec came before the profile's
    // counts began (`held`): the same interval is the rest.
    let life = kernel["minflt"].as_u64().unwrap() + kernel["majflt"].as_u64().unwrap();
    let counted = life - kernel["held"].as_u64().unwrap();
    let profiled = p["page_faults"]["host_total"].as_u64().unwrap();
    assert!(counted >= 16_384, "{kernel}");
    let diff = profiled.abs_diff(counted) as f64 / counted as f64;
    assert!(
        diff <= 0.01,
        "profile {profiled}, kernel {counted}: {:.2} %",
        diff * 100.0
    );
    let _ = std::fs::remove_dir_all(&d);
}
