//! Names from outside on screen: a profiled process's thread names, the
//! guest's phase, unit and function names, the target's title. Whatever
//! they hold, no control character reaches the terminal (one would
//! retitle the window or clear the screen); they are drawn with their
//! control characters shown escaped (the text rule, model's `printable`).

use bootscope_model::profile::*;
use bootscope_tui::app::App;
use bootscope_tui::theme::Theme;
use bootscope_tui::ui;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::Terminal;

mod common;

use common::*;

/// What `prctl(PR_SET_NAME, ...)` lets any process call a thread.
const HOSTILE: &str = "\u{1b}]0;PWN\u{7}\u{1b}[2J";

fn draw(app: &App) -> Buffer {
    let mut term = Terminal::new(TestBackend::new(140, 44)).unwrap();
    term.draw(|f| ui::draw(f, app)).unwrap();
    term.backend().buffer().clone()
}

fn screen(buf: &Buffer) -> String {
    buf.content().iter().map(|c| c.symbol()).collect()
}

fn assert_no_control(buf: &Buffer) {
    for (i, cell) in buf.content().iter().enumerate() {
        assert!(
            !cell.symbol().chars().any(char::is_control),
            "cell {i} sends {:?}",
            cell.symbol()
        );
    }
}

fn hostile_profile() -> Profile {
    let mut p = fixture(2000);
    p.target.name = HOSTILE.into();
    for t in &mut p.threads {
        t.name = format!("{HOSTILE}{}", t.tid);
    }
    for ph in &mut p.phases {
        ph.name = format!("{HOSTILE}{}", ph.name);
    }
    p
}

#[test]
fn hostile_thread_and_phase_names_are_shown_escaped() {
    let mut app = App::new(format!("{HOSTILE} (pid 4242)"), Theme::unicode());
    app.update(hostile_profile());
    let buf = draw(&app);
    assert_no_control(&buf);
    let shown = screen(&buf);
    assert!(shown.contains("\\e]0;PWN"), "escaped names shown:\n{shown}");
}

#[test]
fn hostile_unit_names_from_a_timeline_are_shown_escaped() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/lab-initcalls.timeline.json");
    let mut doc: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    // Every mark, phase and initcall name, as a guest could have named
    // them.
    let hostile = |list: &mut serde_json::Value| {
        for item in list.as_array_mut().unwrap() {
            let n = item["name"].as_str().unwrap().to_string();
            item["name"] = format!("{HOSTILE}{n}").into();
        }
    };
    hostile(&mut doc["marks"]);
    hostile(&mut doc["phases"]);
    hostile(&mut doc["initcalls"]["initcalls"]);
    let profile = bootscope_model::timeline_profile::profile_from_timeline(&doc).unwrap();
    let mut app = App::new("bootscope run (pid 1)", Theme::unicode());
    app.finish(profile);
    app.initcalls = bootscope_tui::Initcalls::from_json(&doc);
    let buf = draw(&app);
    assert_no_control(&buf);
    assert!(screen(&buf).contains("\\e]0;PWN"), "{}", screen(&buf));
}
