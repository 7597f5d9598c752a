use super::*;
use bootscope_model::profile::{ExitReasonStat, PhaseSpan, VcpuExits};
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

fn key(c: char) -> KeyEvent {
    KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)
}

fn profile(t_ms: u64, io: u64, msr: u64) -> Profile {
    let mut p = Profile::new();
    p.duration_ns = t_ms * 1_000_000;
    p.exits.total = io + msr;
    p.exits.by_reason = vec![
        ExitReasonStat {
            reason: "io".into(),
            count: io,
            ..Default::default()
        },
        ExitReasonStat {
            reason: "msr".into(),
            count: msr,
            ..Default::default()
        },
    ];
    p.exits.by_vcpu = vec![
        VcpuExits {
            vcpu: 0,
            tid: 10,
            by_reason: [("io".to_string(), io)].into(),
        },
        VcpuExits {
            vcpu: 1,
            tid: 11,
            by_reason: [("msr".to_string(), msr)].into(),
        },
    ];
    p
}

#[test]
fn rates_come_from_consecutive_snapshots() {
    let mut app = App::new("t", Theme::plain());
    app.update(profile(1000, 100, 10));
    // The first snapshot's rate is its average since profiling started.
    assert_eq!(app.exit_rows()[0].rate, 100.0);
    app.update(profile(1500, 600, 10));
    let rows = app.exit_rows();
    assert_eq!(rows[0].reason, "io");
    assert_eq!(rows[0].rate, 1000.0);
    assert_eq!(rows[1].rate, 0.0);
    assert_eq!(app.exit_total(), (610, 1000.0));
    // Once finished: averages over the whole profile.
    app.finish(profile(2000, 600, 10));
    assert_eq!(app.exit_rows()[0].rate, 300.0);
}

#[test]
fn keys() {
    let mut app = App::new("t", Theme::plain());
    app.update(profile(1000, 100, 10));
    assert_eq!(app.on_key(key('q')), Action::Quit);
    assert_eq!(
        app.on_key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
        Action::Quit
    );
    assert_eq!(app.on_key(key('e')), Action::WriteSnapshot);
    app.on_key(key('p'));
    assert!(app.paused);
    app.on_key(key('p'));
    assert!(!app.paused);
    app.on_key(key('?'));
    assert!(app.show_help);
    app.on_key(KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE));
    assert!(!app.show_help);
    assert_eq!(app.sort, SortMode::Total);
    app.on_key(key('s'));
    assert_eq!(app.sort, SortMode::Rate);
    app.on_key(key('s'));
    app.on_key(key('s'));
    assert_eq!(app.sort, SortMode::Total);
    assert!(!app.show_sites);
    assert_eq!(app.on_key(key('x')), Action::Redraw);
    assert!(app.show_sites);
    app.on_key(key('x'));
    assert!(!app.show_sites);
    assert_eq!(app.on_key(key('z')), Action::None);
}

#[test]
fn vcpu_cycle_filters_reasons() {
    let mut app = App::new("t", Theme::plain());
    app.update(profile(1000, 100, 10));
    app.on_key(key('v'));
    assert_eq!(app.vcpu, Some(0));
    let rows = app.exit_rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].reason, "io");
    app.on_key(key('v'));
    assert_eq!(app.vcpu, Some(1));
    assert_eq!(app.exit_rows()[0].reason, "msr");
    assert_eq!(app.exit_total().0, 10);
    app.on_key(key('v'));
    assert_eq!(app.vcpu, None);
}

#[test]
fn selection_moves_and_sticks_to_its_reason() {
    let mut app = App::new("t", Theme::plain());
    app.update(profile(1000, 100, 10));
    assert_eq!(app.selected_reason_stat().unwrap().reason, "io");
    app.on_key(KeyEvent::new(KeyCode::Down, KeyModifiers::NONE));
    assert_eq!(app.selected_reason_stat().unwrap().reason, "msr");
    app.on_key(KeyEvent::new(KeyCode::Down, KeyModifiers::NONE));
    assert_eq!(app.selected_reason_stat().unwrap().reason, "msr");
    // Sorting by name keeps msr selected though it moved.
    app.sort = SortMode::Name;
    assert_eq!(app.selected_reason_stat().unwrap().reason, "msr");
    app.on_key(key('k'));
    assert_eq!(app.selected_reason_stat().unwrap().reason, "io");
}

#[test]
fn pause_is_ignored_once_finished() {
    let mut app = App::new("t", Theme::plain());
    app.finish(profile(1000, 1, 1));
    app.on_key(key('p'));
    assert!(!app.paused);
}

#[test]
fn current_phase_is_the_open_last_one() {
    let mut app = App::new("t", Theme::plain());
    let mut p = profile(1000, 0, 0);
    p.phases = vec![
        PhaseSpan {
            name: "vmm setup".into(),
            start_ns: 0,
            end_ns: 400_000_000,
        },
        PhaseSpan {
            name: "guest boot".into(),
            start_ns: 400_000_000,
            end_ns: 1_000_000_000,
        },
    ];
    app.update(p.clone());
    assert_eq!(app.current_phase(), Some(1));
    p.target.ended_ns = Some(1_000_000_000);
    app.update(p);
    assert_eq!(app.current_phase(), None);
}

#[test]
fn fault_rates_from_history_without_samples() {
    let mut app = App::new("t", Theme::plain());
    for (t, g) in [(0u64, 0u64), (500, 50), (1000, 150)] {
        let mut p = Profile::new();
        p.duration_ns = t * 1_000_000;
        p.page_faults.guest_total = g;
        app.update(p);
    }
    let (guest, host) = app.fault_rates();
    assert_eq!(guest, vec![100, 200]);
    assert_eq!(host, vec![0, 0]);
}
