//! Rendering tests: every pane drawn into ratatui's `TestBackend`, with and
//! without data, compared with the text snapshots in `tests/snapshots/`
//! (one `.txt` per case, the screen's characters with trailing spaces cut).
//!
//! After an intended change of the drawing, rewrite them with
//! `UPDATE_SNAPSHOTS=1 cargo test -p bootscope-tui --test render` and
//! review the diff.

use std::path::PathBuf;

use bootscope_model::profile::*;
use bootscope_tui::app::App;
use bootscope_tui::theme::Theme;
use bootscope_tui::{ui, Console};
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier};
use ratatui::{Frame, Terminal};

mod common;

use common::*;

fn render(w: u16, h: u16, draw: impl FnOnce(&mut Frame, Rect)) -> Buffer {
    let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
    term.draw(|f| {
        let area = f.area();
        draw(f, area)
    })
    .unwrap();
    term.backend().buffer().clone()
}

fn text(buf: &Buffer) -> String {
    let mut out = String::new();
    for y in 0..buf.area.height {
        let mut line = String::new();
        for x in 0..buf.area.width {
            line.push_str(buf[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Compares with (or, with UPDATE_SNAPSHOTS=1, writes) `snapshots/NAME.txt`.
fn snapshot(name: &str, buf: &Buffer) {
    let got = text(buf);
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(format!("{name}.txt"));
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; create it with UPDATE_SNAPSHOTS=1\n{got}",
            path.display()
        )
    });
    assert!(
        got == want,
        "{name} differs from {}:\n--- got\n{got}--- want\n{want}",
        path.display()
    );
}

/// The cell positions where `needle` starts on screen.
fn find(buf: &Buffer, needle: &str) -> Option<(u16, u16)> {
    let t = text(buf);
    for (y, line) in t.lines().enumerate() {
        if let Some(byte) = line.find(needle) {
            let x = line[..byte].chars().count();
            return Some((x as u16, y as u16));
        }
    }
    None
}

type PaneFn = fn(&mut Frame, Rect, &App);

const PANES: [(&str, PaneFn, u16, u16); 6] = [
    ("phases", ui::draw_phases, 56, 8),
    ("exits", ui::draw_exits, 66, 11),
    ("latency", ui::draw_latency, 56, 10),
    ("faults", ui::draw_faults, 66, 8),
    ("threads", ui::draw_threads, 82, 9),
    ("numa", ui::draw_numa, 38, 8),
];

#[test]
fn panes_with_data() {
    let app = live_app(Theme::unicode());
    for (name, pane, w, h) in PANES {
        snapshot(
            &format!("{name}-data"),
            &render(w, h, |f, a| pane(f, a, &app)),
        );
    }
}

#[test]
fn panes_without_data() {
    let app = empty_app(Theme::unicode());
    for (name, pane, w, h) in PANES {
        snapshot(
            &format!("{name}-empty"),
            &render(w, h, |f, a| pane(f, a, &app)),
        );
    }
}

/// With run-queue waits (`--collect sched`) the threads pane lists the
/// vCPU threads beside the preallocation threads, with their waits.
#[test]
fn threads_pane_with_runqueue_waits() {
    let waits = |p: &mut Profile| {
        for (i, t) in p.threads.iter_mut().enumerate() {
            if t.role == "main" {
                continue;
            }
            t.runqueue_wait = Some(RunqueueWait {
                total_ns: (i as u64 + 1) * 150 * MS,
                count: 10,
                hist: Vec::new(),
                by_phase: Vec::new(),
            });
        }
    };
    let mut app = App::new("qemu-system-x86_64 (pid 4242)", Theme::unicode());
    let mut p = fixture(2000);
    waits(&mut p);
    app.update(p);
    let buf = render(92, 9, |f, a| ui::draw_threads(f, a, &app));
    snapshot("threads-waits", &buf);
    let t = text(&buf);
    assert!(t.contains("Preallocation and vCPU threads (4 of 5)"), "{t}");
    assert!(t.contains("CPU WAIT") && t.contains("600.0 ms"), "{t}");
    // Narrow: the wait stays.
    let narrow = text(&render(70, 9, |f, a| ui::draw_threads(f, a, &app)));
    assert!(
        narrow.contains("CPU WAIT") && !narrow.contains("ROLE"),
        "{narrow}"
    );
}

#[test]
fn status_line_live_paused_and_ended() {
    let mut app = live_app(Theme::unicode());
    app.profile.lost_events = 3;
    snapshot(
        "status-live",
        &render(140, 2, |f, a| ui::draw_status(f, a, &app)),
    );
    app.paused = true;
    app.stretched_refresh = Some(std::time::Duration::from_millis(400));
    app.message = Some("snapshot written to ./bootscope-snapshot-1700000000.json".into());
    snapshot(
        "status-paused",
        &render(140, 2, |f, a| ui::draw_status(f, a, &app)),
    );
    app.paused = false;
    // Profiled with --bpf-stats: the programs' cost so far.
    for s in app.profile.sources.iter_mut().take(2) {
        s.runs = Some(21_500);
        s.run_ns = Some(43_250_000);
    }
    snapshot(
        "status-bpf-stats",
        &render(160, 2, |f, a| ui::draw_status(f, a, &app)),
    );
    let mut last = fixture(2000);
    last.target.exit_code = Some(0);
    last.target.ended_ns = Some(2000 * MS);
    app.finish(last);
    snapshot(
        "status-ended",
        &render(140, 2, |f, a| ui::draw_status(f, a, &app)),
    );
}

#[test]
fn whole_screen_unicode_colour() {
    let mut app = live_app(Theme::unicode());
    app.console = Some(Console {
        title: "Guest console: /tmp/bootscope-tui-1/console.log".into(),
        lines: vec![
            "Linux version 6.1.0 (debian-kernel@lists.debian.org)".into(),
            "Run /init as init process".into(),
            "bootscope-guest: hello from userspace".into(),
        ],
    });
    let buf = render(120, 40, |f, _| ui::draw(f, &app));
    snapshot("screen-120x40", &buf);
    // The running phase and the selected reason stand out.
    let (x, y) = find(&buf, "userspace").unwrap();
    assert!(buf[(x, y)].modifier.contains(Modifier::REVERSED));
    let (x, y) = find(&buf, "io ").unwrap();
    assert!(buf[(x, y)].modifier.contains(Modifier::REVERSED));
    let (x, y) = find(&buf, "kernel").unwrap();
    assert!(!buf[(x, y)].modifier.contains(Modifier::REVERSED));
}

#[test]
fn whole_screen_plain_for_serial_consoles() {
    let app = live_app(Theme::plain());
    let buf = render(80, 24, |f, _| ui::draw(f, &app));
    snapshot("screen-80x24-plain", &buf);
    for cell in buf.content() {
        assert!(cell.symbol().is_ascii(), "non-ASCII {:?}", cell.symbol());
        assert_eq!(cell.fg, Color::Reset, "a colour in monochrome mode");
        assert_eq!(cell.bg, Color::Reset, "a colour in monochrome mode");
    }
}

#[test]
fn help_over_the_screen() {
    let mut app = live_app(Theme::unicode());
    app.show_help = true;
    snapshot("help-100x30", &render(100, 30, |f, _| ui::draw(f, &app)));
}

#[test]
fn per_vcpu_and_sorted_by_name() {
    let mut app = live_app(Theme::unicode());
    app.cycle_vcpu();
    app.sort = bootscope_tui::app::SortMode::Name;
    snapshot(
        "exits-vcpu0-by-name",
        &render(66, 11, |f, a| ui::draw_exits(f, a, &app)),
    );
}

#[test]
fn pvm_fallback_explains_missing_latency() {
    let mut p = fixture(2000);
    p.exits.source = "tracepoint:kvm:kvm_userspace_exit".into();
    p.exits.isa = "userspace".into();
    for r in &mut p.exits.by_reason {
        r.latency_hist.clear();
        r.latency_total_ns = None;
    }
    let mut app = App::new("bootscope (pid 1)", Theme::unicode());
    app.update(p);
    snapshot(
        "latency-pvm",
        &render(56, 6, |f, a| ui::draw_latency(f, a, &app)),
    );
}

#[test]
fn tiny_terminal_gets_a_message() {
    let app = live_app(Theme::unicode());
    let buf = render(40, 10, |f, _| ui::draw(f, &app));
    assert!(text(&buf).contains("terminal too small"));
}

#[test]
fn replay_grows_phases_and_threads() {
    use bootscope_tui::{ProfileSource, ReplaySource};
    let mut src = ReplaySource::stepped(fixture(2000), 500 * MS);
    let mut app = App::new(src.title(), Theme::unicode());
    let mut seen = Vec::new();
    while !src.finished() {
        app.update(src.snapshot());
        seen.push(app.profile.phases.len());
    }
    app.finish(src.snapshot());
    assert_eq!(seen, vec![2, 3, 3, 4]);
    let buf = render(120, 40, |f, _| ui::draw(f, &app));
    let t = text(&buf);
    assert!(t.contains("touch_pages"));
    assert!(t.contains("userspace"));
    assert!(t.contains("ENDED"));
}

/// An app that has seen one of the profiles captured in the lab on two
/// NUMA nodes (tests/fixtures/README.md says how they were made).
fn lab_app(name: &str) -> App {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let profile: Profile = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let mut app = App::new("bootscope (pid 122)", Theme::unicode());
    app.update(profile);
    app
}

#[test]
fn numa_pane_from_real_two_node_profiles() {
    // Bound: every page on its own node, all local.
    let app = lab_app("lab-two-nodes-bound.profile.json");
    let buf = render(38, 8, |f, a| ui::draw_numa(f, a, &app));
    snapshot("numa-lab-bound", &buf);
    let t = text(&buf);
    assert!(t.contains("node 0") && t.contains("node 1"), "{t}");
    assert!(t.contains("remote 0 "), "{t}");
    // Crossed: threads on node 0 touched node 1's pages, which the pane
    // shows as remote.
    let app = lab_app("lab-two-nodes-crossed.profile.json");
    let buf = render(38, 8, |f, a| ui::draw_numa(f, a, &app));
    snapshot("numa-lab-crossed", &buf);
    let t = text(&buf);
    let node1 = t.lines().find(|l| l.contains("node 1")).unwrap();
    assert!(node1.trim_end_matches('│').ends_with("0%"), "{t}");
    assert!(t.contains("remote 65,536 (256 MiB)"), "{t}");
}

/// The final state of a `run --initcalls` boot from the lab
/// (tests/fixtures/README.md): its phases and its initcalls, as the
/// timeline holds them.
fn initcalls_app(theme: Theme) -> App {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/lab-initcalls.timeline.json");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let profile = bootscope_model::timeline_profile::profile_from_timeline(&doc).unwrap();
    let mut app = App::new("bootscope run (pid 1)", theme);
    app.finish(profile);
    app.initcalls = bootscope_tui::Initcalls::from_json(&doc);
    app
}

fn press(app: &mut App, code: crossterm::event::KeyCode) {
    app.on_key(crossterm::event::KeyEvent::new(
        code,
        crossterm::event::KeyModifiers::NONE,
    ));
}

#[test]
fn kernel_expands_into_the_initcalls_of_a_lab_boot() {
    use crossterm::event::KeyCode;
    let mut app = initcalls_app(Theme::unicode());
    let ic = app.initcalls.clone().expect("initcalls in the fixture");
    assert_eq!(ic.len(), 670);
    assert_eq!(ic.exits_label, "exits");
    // Collapsed: the phases only (the timeline's initcall phases are not
    // listed among them), and a hint.
    let buf = render(64, 10, |f, a| ui::draw_phases(f, a, &app));
    snapshot("phases-initcalls-collapsed", &buf);
    let t = text(&buf);
    assert!(t.contains("i: 670 initcalls"), "{t}");
    assert!(t.contains("kernel ▸"), "{t}");
    assert!(!t.contains("initcalls: device"), "{t}");

    // Expanded: the kernel's span as the axis, the levels in the order
    // they ran, each with its slowest initcalls and their exits.
    press(&mut app, KeyCode::Char('i'));
    let buf = render(64, 30, |f, a| ui::draw_phases(f, a, &app));
    snapshot("phases-initcalls-slowest", &buf);
    let t = text(&buf);
    assert!(
        t.contains("670 initcalls · slowest first · exits · 1-28/"),
        "{t}"
    );
    assert!(t.contains("kernel ▾"), "{t}");
    let early = t.find(" early (30)").expect("the early level");
    let core = t.find(" core (53)").expect("the core level");
    assert!(early < core, "levels in time order: {t}");
    // The device level's slowest initcall, with the exits the profiler
    // counted in it (the timeline's own figure).
    let shpcd = ic
        .groups
        .iter()
        .flat_map(|g| &g.calls)
        .find(|c| c.name == "shpcd_init")
        .unwrap();
    // Further down: a page at a time.
    let mut page = t.clone();
    for _ in 0..10 {
        if page.contains("shpcd_init") {
            break;
        }
        press(&mut app, KeyCode::PageDown);
        page = text(&render(64, 30, |f, a| ui::draw_phases(f, a, &app)));
    }
    let line = page
        .lines()
        .find(|l| l.contains("shpcd_init"))
        .unwrap_or_else(|| panic!("{page}"));
    assert!(page.contains(" device (204)"), "{page}");
    assert!(line.contains("622.8 ms"), "{line}");
    assert!(
        line.contains(&format!(" {}", ui::fmt_count(shpcd.exits.unwrap()))),
        "{line}"
    );
    assert!(t.contains("more"), "the rest of a level in one row: {t}");

    // Scrolling down reaches the last level; time order lists every
    // initcall of a level in the order they ran.
    for _ in 0..20 {
        press(&mut app, KeyCode::PageDown);
    }
    let t = text(&render(64, 30, |f, a| ui::draw_phases(f, a, &app)));
    assert!(t.contains(" late (109)"), "{t}");
    assert!(t.contains("userspace"), "{t}");
    press(&mut app, KeyCode::Char('o'));
    let buf = render(64, 30, |f, a| ui::draw_phases(f, a, &app));
    snapshot("phases-initcalls-time-order", &buf);
    let t = text(&buf);
    assert!(t.contains("time order"), "{t}");
    assert!(t.contains("time order · exits · 1-28/"), "{t}");
    let first = ic.groups[0].calls[0].name.as_str();
    assert!(t.contains(first), "{first} first: {t}");

    // Collapsing again gives the phases back.
    press(&mut app, KeyCode::Char('i'));
    let t = text(&render(64, 10, |f, a| ui::draw_phases(f, a, &app)));
    assert!(t.contains("kernel ▸"), "{t}");

    // Plain ASCII for serial consoles.
    let mut app = initcalls_app(Theme::plain());
    press(&mut app, KeyCode::Char('i'));
    let buf = render(64, 16, |f, a| ui::draw_phases(f, a, &app));
    snapshot("phases-initcalls-plain", &buf);
    assert!(text(&buf).contains("kernel -"));
}

#[test]
fn initcalls_key_without_initcalls_says_where_they_come_from() {
    let mut app = live_app(Theme::unicode());
    press(&mut app, crossterm::event::KeyCode::Char('i'));
    assert!(!app.expand_kernel);
    assert!(app.message.as_deref().unwrap().contains("--initcalls"));
}

/// An app that has seen a real lab profile with exit sites
/// (tests/fixtures/README.md at the workspace root says how it was made).
fn sites_app(name: &str) -> App {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name);
    let profile = Profile::read(&path).unwrap();
    let mut app = App::new("bootscope run (pid 122)", Theme::unicode());
    app.finish(profile);
    app
}

#[test]
fn exit_sites_pane_from_a_real_lab_profile() {
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    let mut app = sites_app("lab-sites-loud.profile.json");
    let key = |c| KeyEvent::new(c, KeyModifiers::NONE);
    // `x` swaps the latency pane for the sites of the selected reason.
    let whole = render(120, 40, |f, _| ui::draw(f, &app));
    assert!(text(&whole).contains(" Exit latency "));
    app.on_key(key(KeyCode::Char('x')));
    let whole = render(120, 40, |f, _| ui::draw(f, &app));
    assert!(
        text(&whole).contains(" Exit sites · io "),
        "{}",
        text(&whole)
    );
    let sites = app.profile.exits.sites.clone().unwrap();
    let buf = render(56, 10, |f, a| ui::draw_sites(f, a, &app));
    snapshot("sites-lab-io", &buf);
    let t = text(&buf);
    // The top rows are the profile's own top io functions, with their
    // counts: the serial console.
    let top = sites.top_functions("io");
    for f in top.iter().take(2) {
        let line = t.lines().find(|l| l.contains(f.name.as_str()));
        let line = line.unwrap_or_else(|| panic!("{} missing:\n{t}", f.name));
        assert!(line.contains(&ui::fmt_count(f.count)), "{line}");
        assert!(f.name.starts_with("io_serial_"), "{}", f.name);
    }
    let io_total: u64 = top.iter().map(|f| f.count).sum();
    assert!(
        t.contains(&format!("{} exits at", ui::fmt_count(io_total))),
        "{t}"
    );
    // Down selects the next reason; the pane follows it.
    app.on_key(key(KeyCode::Down));
    let next = app.selected_reason_stat().unwrap().reason.clone();
    let buf = render(56, 10, |f, a| ui::draw_sites(f, a, &app));
    let t = text(&buf);
    assert!(t.contains(&format!("Exit sites · {next} ")), "{t}");
    let first = &sites.top_functions(&next)[0];
    assert!(t.contains(first.name.as_str()), "{t}");
    // A profile without sites says so.
    let mut bare = live_app(Theme::unicode());
    bare.show_sites = true;
    let t = text(&render(56, 10, |f, a| ui::draw_sites(f, a, &bare)));
    assert!(t.contains("exit sites not collected"), "{t}");
}

/// `bootscope tui` on a recorded lab boot: the browser over the profile
/// (tests/fixtures/README.md at the workspace root says how it was made),
/// drawn as the position moves.
fn browse_app(browser: &bootscope_tui::Browser, app: &mut App) -> Buffer {
    browser.show(app);
    render(120, 40, |f, _| ui::draw(f, app))
}

/// The exits of the sites in `io_serial_out`, of one phase or of all.
fn io_serial_out(p: &Profile, phase: Option<&str>) -> u64 {
    p.exits
        .sites
        .as_ref()
        .unwrap()
        .sites
        .iter()
        .filter(|s| s.function.as_deref() == Some("io_serial_out"))
        .filter(|s| phase.is_none_or(|ph| s.phase == ph))
        .map(|s| s.count)
        .sum()
}

#[test]
fn browsing_a_recorded_profile_moves_every_pane() {
    use bootscope_tui::browse::BrowseKey;
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    let key = |c| KeyEvent::new(c, KeyModifiers::NONE);
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/lab-sites-loud.profile.json");
    let saved = Profile::read(&path).unwrap();
    let mut b = bootscope_tui::Browser::new(saved.clone(), None, 1.0);
    let mut app = App::new(
        "lab-sites-loud.profile.json (bootscope 122)",
        Theme::unicode(),
    );
    // Opens at the end: the saved profile, as the final live screen.
    let buf = browse_app(&b, &mut app);
    snapshot("browse-end", &buf);
    let t = text(&buf);
    assert_eq!(app.profile, saved);
    assert!(t.contains("REPLAY ‖"), "{t}");
    let n = saved.samples.len();
    assert!(t.contains(&format!("sample {n}/{n}")), "{t}");
    assert!(t.contains("vmm teardown"), "{t}");
    // The start: nothing recorded yet.
    assert_eq!(b.on_key(key(KeyCode::Home)), BrowseKey::Moved);
    let t = text(&browse_app(&b, &mut app));
    assert!(t.contains(&format!("sample 0/{n}")), "{t}");
    assert!(!t.contains("vmm teardown"), "{t}");
    // The kernel phase's start (the fourth phase): it is the running one,
    // and the exits so far are those of the samples by then.
    b.on_key(key(KeyCode::Char('4')));
    let buf = browse_app(&b, &mut app);
    snapshot("browse-kernel-start", &buf);
    let t = text(&buf);
    assert!(t.contains("| kernel |"), "{t}");
    assert!(t.contains("▶ kernel"), "{t}");
    // The profile's samples stop long before (the lab machine was busy):
    // the exits are those of the phases before the kernel.
    let kernel = saved.phases.iter().find(|p| p.name == "kernel").unwrap();
    let last = saved
        .samples
        .iter()
        .rfind(|s| s.t_ns <= kernel.start_ns)
        .unwrap();
    assert!(kernel.start_ns - last.t_ns > 1_000_000_000);
    let before: u64 = saved
        .exits
        .by_phase
        .iter()
        .filter(|p| p.phase != "kernel" && p.phase != "userspace")
        .flat_map(|p| p.by_reason.values())
        .sum();
    assert_eq!(app.profile.exits.total, before);
    assert!(
        t.contains(&format!("total {}", ui::fmt_count(before))),
        "{t}"
    );
    // Sites at the kernel's start: those of the phases before it in full,
    // none of the kernel's.
    let before_kernel = io_serial_out(&saved, Some("guest boot"));
    assert_eq!(io_serial_out(&app.profile, None), before_kernel);
    // Halfway through the kernel: half of the kernel's besides.
    app.show_sites = true;
    b.seek(kernel.start_ns + (kernel.end_ns - kernel.start_ns) / 2);
    let t = text(&browse_app(&b, &mut app));
    let (half, full) = (
        io_serial_out(&app.profile, Some("kernel")),
        io_serial_out(&saved, Some("kernel")),
    );
    assert!(half.abs_diff(full / 2) <= 1, "{half} of {full}");
    assert!(
        t.contains("Exit sites") && t.contains("io_serial_out"),
        "{t}"
    );
    // Stepping right from there reaches the next stop: a sample or a
    // phase's start, whichever comes first.
    let now = b.t_ns();
    let next = saved
        .samples
        .iter()
        .map(|s| s.t_ns)
        .chain(saved.phases.iter().map(|p| p.start_ns))
        .chain([saved.duration_ns])
        .filter(|&t| t > now)
        .min()
        .unwrap();
    b.on_key(key(KeyCode::Right));
    browse_app(&b, &mut app);
    assert_eq!(app.replay.as_ref().unwrap().t_ns, next);
    assert_eq!(app.profile.duration_ns, next);
    // Help lists the replay's keys; plain ASCII has no arrows.
    app.show_help = true;
    let t = text(&browse_app(&b, &mut app));
    assert!(t.contains("jump to the start of phase 1-9"), "{t}");
    let mut plain = App::new("p", Theme::plain());
    let t = text(&browse_app(&b, &mut plain));
    assert!(
        t.contains("REPLAY ||") && t.contains("left/right step"),
        "{t}"
    );
}

#[test]
fn browsing_a_timeline_shows_the_initcalls_started_by_the_position() {
    use crossterm::event::KeyCode;
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/lab-initcalls.timeline.json");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let profile = bootscope_model::timeline_profile::profile_from_timeline(&doc).unwrap();
    let ic = bootscope_tui::Initcalls::from_json(&doc).unwrap();
    let device = ic
        .groups
        .iter()
        .find(|g| g.level == "device")
        .unwrap()
        .clone();
    let mut b = bootscope_tui::Browser::new(profile, Some(ic), 1.0);
    let mut app = App::new("lab-initcalls.timeline.json", Theme::unicode());
    // In the middle of the device level: its first initcalls, none after.
    let mid = device.calls[device.calls.len() / 2].start_ns;
    b.seek(mid);
    browse_app(&b, &mut app);
    press(&mut app, KeyCode::Char('i'));
    let shown = app.initcalls.as_ref().unwrap();
    let dev = shown.groups.iter().find(|g| g.level == "device").unwrap();
    assert_eq!(dev.calls.len(), device.calls.len() / 2 + 1);
    assert!(!shown.groups.iter().any(|g| g.level == "late"));
    // Tall enough for every row.
    let buf = render(64, 70, |f, a| ui::draw_phases(f, a, &app));
    snapshot("browse-initcalls-device", &buf);
    let t = text(&buf);
    assert!(t.contains("▶ kernel ▾") && t.contains(" device ("), "{t}");
    assert!(!t.contains(" late ("), "{t}");
    // The initcall running at the position: cut there, no exits yet.
    assert_eq!(dev.calls.last().unwrap().exits, Some(0));
}
