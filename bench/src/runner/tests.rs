use super::*;
use std::time::Instant;

#[test]
fn dates() {
    assert_eq!(rfc3339_utc(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00Z");
    let t = SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400 + 3_661);
    assert_eq!(rfc3339_utc(t), "2000-02-29T01:01:01Z");
    let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_599);
    assert_eq!(rfc3339_utc(t), "2025-12-31T23:59:59Z");
}

#[test]
fn console_patterns() {
    let p = ConsolePattern::parse("init=Run \\S+ as init").unwrap();
    assert_eq!(p.name, "init");
    assert_eq!(p.spec(), "init=Run \\S+ as init");
    assert!(ConsolePattern::parse("no-equals").is_err());
    assert!(ConsolePattern::parse("=x").is_err());
    assert!(ConsolePattern::parse("x=(").is_err());
}

#[test]
fn executes_and_times_console_lines() {
    let pats = vec![
        ConsolePattern::parse("two=^two").unwrap(),
        ConsolePattern::parse("never=nowhere").unwrap(),
    ];
    let argv: Vec<OsString> = [
        "sh",
        "-c",
        "echo one; sleep 0.05; echo two; echo oops >&2; exit 3",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    let e = execute(&argv, &pats, Duration::from_secs(30), None).unwrap();
    assert_eq!(e.exit_code, Some(3));
    assert!(!e.timed_out);
    assert!(e.console["two"] >= Duration::from_millis(40), "{e:?}");
    assert!(e.wall >= e.console["two"]);
    assert!(!e.console.contains_key("never"));
    assert_eq!(e.stderr_tail, "oops");
}

#[test]
fn overstaying_runs_are_killed() {
    let argv: Vec<OsString> = ["sleep", "30"].iter().map(OsString::from).collect();
    let e = execute(&argv, &[], Duration::from_millis(100), None).unwrap();
    assert!(e.timed_out);
    assert_eq!(e.exit_code, None);
    assert!(e.wall < Duration::from_secs(10));
}

#[test]
fn missing_programs_are_bad_input() {
    let argv = vec![OsString::from("/nonexistent/vmm")];
    let e = execute(&argv, &[], Duration::from_secs(1), None).unwrap_err();
    assert!(e.is_bad_input(), "{e}");
    assert!(e.to_string().contains("/nonexistent/vmm"), "{e}");
}

#[test]
fn interleaved_command_bench() {
    let cmd = |s: &str| -> Vec<OsString> { ["sh", "-c", s].iter().map(OsString::from).collect() };
    let plan = BenchPlan {
        exe: PathBuf::from("/nonexistent/bootscope"),
        configs: vec![
            ConfigPlan {
                label: "fast".into(),
                side: Side::Command(cmd("echo 'Linux version 1.0'")),
            },
            ConfigPlan {
                label: "slow".into(),
                side: Side::Command(cmd("sleep 0.02; echo 'Linux version 1.0'; exit 1")),
            },
        ],
        runs: 2,
        warmup: 1,
        profile: false,
        run_profiles_itself: false,
        console_patterns: DEFAULT_CONSOLE_PATTERNS
            .iter()
            .map(|s| ConsolePattern::parse(s).unwrap())
            .collect(),
        run_timeout: Duration::from_secs(30),
        work_dir: std::env::temp_dir().join(format!("bench-unit-{}", std::process::id())),
        machine: Machine::detect("none"),
        stop: None,
        parallel: None,
    };
    let mut seen = Vec::new();
    let doc = plan
        .run(|p| seen.push((p.done, p.label.to_string(), p.run.warmup)))
        .unwrap();
    // ABBA: round 0 fast, slow; round 1 slow, fast; round 2 fast, slow.
    let labels: Vec<&str> = seen.iter().map(|s| s.1.as_str()).collect();
    assert_eq!(labels, ["fast", "slow", "slow", "fast", "fast", "slow"]);
    assert_eq!(seen.iter().filter(|s| s.2).count(), 2);
    assert!(doc.settings.interleaved);
    let fast = &doc.configs[0];
    assert_eq!(fast.kind, ConfigKind::Command);
    assert_eq!(fast.measured().count(), 2);
    assert!(fast.summary.contains_key("console:kernel banner"));
    let slow = &doc.configs[1];
    assert_eq!(slow.failures(), 2);
    assert!(slow.runs[0]
        .error
        .as_deref()
        .unwrap()
        .contains("exit status 1"));
    let _ = std::fs::remove_dir_all(&plan.work_dir);
}

#[test]
fn a_stopped_bench_keeps_its_finished_runs() {
    let stop = Arc::new(AtomicBool::new(false));
    let plan = BenchPlan {
        exe: PathBuf::from("/nonexistent/bootscope"),
        configs: vec![ConfigPlan {
            label: "a".into(),
            side: Side::Command(["sleep", "0.2"].iter().map(OsString::from).collect()),
        }],
        runs: 1000,
        warmup: 0,
        profile: false,
        run_profiles_itself: false,
        console_patterns: Vec::new(),
        run_timeout: Duration::from_secs(30),
        work_dir: std::env::temp_dir().join(format!("bench-stop-{}", std::process::id())),
        machine: Machine::default(),
        stop: Some(stop.clone()),
        parallel: None,
    };
    let setter = stop.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(700));
        setter.store(true, Ordering::SeqCst);
    });
    let started = Instant::now();
    let doc = plan.run(|_| {}).unwrap();
    t.join().unwrap();
    // The run under way was stopped at once, not waited for.
    assert!(started.elapsed() < Duration::from_secs(3));
    let runs = &doc.configs[0].runs;
    assert!((1..10).contains(&runs.len()), "{} runs", runs.len());
    assert!(runs.iter().all(|r| r.ok), "{runs:?}");
    let _ = std::fs::remove_dir_all(&plan.work_dir);
}

#[test]
fn plan_checks() {
    let mut plan = BenchPlan {
        exe: PathBuf::from("bootscope"),
        configs: vec![ConfigPlan {
            label: "a".into(),
            side: Side::Bootscope(vec!["--timeline".into(), "x.json".into()]),
        }],
        runs: 1,
        warmup: 0,
        profile: false,
        run_profiles_itself: false,
        console_patterns: Vec::new(),
        run_timeout: Duration::from_secs(1),
        work_dir: PathBuf::from("/tmp"),
        machine: Machine::default(),
        stop: None,
        parallel: None,
    };
    let e = plan.validate().unwrap_err().to_string();
    assert!(e.contains("leave out --timeline"), "{e}");
    plan.configs[0].side = Side::Bootscope(Vec::new());
    plan.runs = 0;
    assert!(plan.validate().is_err());
    plan.runs = 1;
    plan.validate().unwrap();
    let (argv, t, p) = plan.argv(&plan.configs[0], 4);
    assert!(p.is_none());
    assert_eq!(t.unwrap(), PathBuf::from("/tmp/timeline-4.json"));
    assert_eq!(
        argv,
        [
            "bootscope",
            "run",
            "--timeline",
            "/tmp/timeline-4.json",
            "--no-summary"
        ]
        .map(OsString::from)
    );
    // A run that profiles itself is told not to, or where to write it.
    plan.run_profiles_itself = true;
    let (argv, _, _) = plan.argv(&plan.configs[0], 4);
    assert_eq!(argv.last().unwrap(), "--no-profile");
    plan.profile = true;
    let (argv, _, p) = plan.argv(&plan.configs[0], 4);
    assert_eq!(argv[0], "bootscope");
    assert_eq!(
        &argv[argv.len() - 2..],
        ["--output", "/tmp/profile-4.json"].map(OsString::from)
    );
    assert_eq!(p.unwrap(), PathBuf::from("/tmp/profile-4.json"));
    // Other commands are wrapped in `bootscope profile`.
    let cmd = ConfigPlan {
        label: "q".into(),
        side: Side::Command(vec!["qemu".into()]),
    };
    let (argv, t, p) = plan.argv(&cmd, 5);
    assert!(t.is_none());
    assert_eq!(
        argv,
        [
            "bootscope",
            "profile",
            "--no-summary",
            "--output",
            "/tmp/profile-5.json",
            "--",
            "qemu"
        ]
        .map(OsString::from)
    );
    assert!(p.is_some());
    plan.configs[0].side = Side::Bootscope(vec!["-o".into(), "p.json".into()]);
    let e = plan.validate().unwrap_err().to_string();
    assert!(e.contains("leave out -o"), "{e}");
    // `run --profile` profiles that configuration alone.
    plan.profile = false;
    plan.configs[0].side = Side::Bootscope(vec!["--profile".into()]);
    plan.validate().unwrap();
    let (argv, _, p) = plan.argv(&plan.configs[0], 6);
    assert_eq!(
        &argv[argv.len() - 2..],
        ["--output", "/tmp/profile-6.json"].map(OsString::from)
    );
    assert!(!argv.iter().any(|a| a == "--no-profile"));
    assert_eq!(p.unwrap(), PathBuf::from("/tmp/profile-6.json"));
}

#[test]
fn quoting_for_messages() {
    let argv: Vec<OsString> = ["run", "--cmdline", "a b", "it's"]
        .iter()
        .map(OsString::from)
        .collect();
    assert_eq!(shell_words(&argv), r#"run --cmdline 'a b' "it's""#);
    let odd: Vec<OsString> = ["", "$x", "console=ttyS0"]
        .iter()
        .map(OsString::from)
        .collect();
    assert_eq!(shell_words(&odd), "'' '$x' console=ttyS0");
}

#[test]
fn control_characters_are_quoted_as_escapes_a_shell_reads_back() {
    let hostile = "x\u{1b}]0;PWN\u{7}\u{1b}[2J'\\\u{9b}\n";
    let argv = vec![OsString::from("--cmdline"), OsString::from(hostile)];
    let line = shell_words(&argv);
    assert_eq!(
        line, r"--cmdline $'x\e]0;PWN\x07\e[2J\'\\\u009b\n'",
        "{line}"
    );
    assert!(!line.chars().any(char::is_control), "{line:?}");
    // bash reads the same word back.
    let Ok(out) = std::process::Command::new("bash")
        .args(["-c", &format!("printf %s {}", &line["--cmdline ".len()..])])
        .output()
    else {
        return;
    };
    assert_eq!(String::from_utf8_lossy(&out.stdout), hostile);
}
