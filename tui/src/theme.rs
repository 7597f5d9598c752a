//! Colours and symbols, chosen from the environment so the TUI stays
//! readable over ssh and on a serial console: `NO_COLOR` or `TERM=dumb`/`vt*`
//! give a monochrome style (emphasis by reverse video and bold only),
//! `TERM=linux` the 16 ANSI colours, a 256-colour terminal a few extra
//! shades; a locale that is not UTF-8 (or `TERM=dumb`) gives ASCII borders
//! and bars.

use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols;

/// How many colours the terminal is trusted with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColorMode {
    /// No colour at all.
    Mono,
    /// The 16 ANSI colours (Linux console, serial terminals).
    Ansi16,
    /// 256 colours.
    Ansi256,
}

/// The look of the TUI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Theme {
    pub colors: ColorMode,
    /// ASCII only: no box drawing or block characters.
    pub ascii: bool,
}

/// Box drawing with `+`, `-` and `|`.
const ASCII_BORDER: symbols::border::Set = symbols::border::Set {
    top_left: "+",
    top_right: "+",
    bottom_left: "+",
    bottom_right: "+",
    vertical_left: "|",
    vertical_right: "|",
    horizontal_top: "-",
    horizontal_bottom: "-",
};

/// Sparkline levels in ASCII.
const ASCII_BARS: symbols::bar::Set = symbols::bar::Set {
    full: "#",
    seven_eighths: "#",
    three_quarters: "=",
    five_eighths: "=",
    half: "-",
    three_eighths: "-",
    one_quarter: ".",
    one_eighth: ".",
    empty: " ",
};

const EIGHTHS: [&str; 8] = ["", "▏", "▎", "▍", "▌", "▋", "▊", "▉"];

impl Theme {
    /// Monochrome ASCII: what any terminal shows.
    pub fn plain() -> Self {
        Self {
            colors: ColorMode::Mono,
            ascii: true,
        }
    }

    /// 16 colours with Unicode box drawing.
    pub fn unicode() -> Self {
        Self {
            colors: ColorMode::Ansi16,
            ascii: false,
        }
    }

    /// From this process's environment.
    pub fn detect() -> Self {
        Self::from_env(|k| std::env::var(k).ok())
    }

    /// From an environment given as a lookup function.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Self {
        let set = |k: &str| var(k).filter(|v| !v.is_empty());
        let term = set("TERM").unwrap_or_default();
        let dumb = term.is_empty() || term == "dumb";
        let colors = if set("NO_COLOR").is_some() || dumb || term.starts_with("vt") {
            ColorMode::Mono
        } else if term == "linux" {
            ColorMode::Ansi16
        } else if term.contains("256color")
            || matches!(set("COLORTERM").as_deref(), Some("truecolor" | "24bit"))
        {
            ColorMode::Ansi256
        } else {
            ColorMode::Ansi16
        };
        // The first locale variable set decides, as in setlocale(3).
        let locale = ["LC_ALL", "LC_CTYPE", "LANG"]
            .iter()
            .find_map(|k| set(k))
            .unwrap_or_default()
            .to_ascii_lowercase();
        let utf8 = locale.contains("utf-8") || locale.contains("utf8");
        Self {
            colors,
            ascii: dumb || !utf8,
        }
    }

    fn color(&self, c16: Color, c256: Color) -> Style {
        match self.colors {
            ColorMode::Mono => Style::new(),
            ColorMode::Ansi16 => Style::new().fg(c16),
            ColorMode::Ansi256 => Style::new().fg(c256),
        }
    }

    pub fn border_set(&self) -> symbols::border::Set {
        if self.ascii {
            ASCII_BORDER
        } else {
            symbols::border::PLAIN
        }
    }

    pub fn sparkline_set(&self) -> symbols::bar::Set {
        if self.ascii {
            ASCII_BARS
        } else {
            symbols::bar::NINE_LEVELS
        }
    }

    /// Pane titles.
    pub fn title(&self) -> Style {
        self.color(Color::Cyan, Color::Indexed(81))
            .add_modifier(Modifier::BOLD)
    }

    /// The selected row and the running phase.
    pub fn highlight(&self) -> Style {
        Style::new().add_modifier(Modifier::REVERSED | Modifier::BOLD)
    }

    /// Secondary text.
    pub fn dim(&self) -> Style {
        match self.colors {
            ColorMode::Mono => Style::new(),
            ColorMode::Ansi16 => Style::new().fg(Color::DarkGray),
            ColorMode::Ansi256 => Style::new().fg(Color::Indexed(245)),
        }
    }

    /// Something to look at: lost events, fallbacks.
    pub fn warn(&self) -> Style {
        self.color(Color::Yellow, Color::Indexed(214))
            .add_modifier(Modifier::BOLD)
    }

    pub fn good(&self) -> Style {
        self.color(Color::Green, Color::Indexed(78))
    }

    pub fn bad(&self) -> Style {
        self.color(Color::Red, Color::Indexed(203))
    }

    /// Guest-side series.
    pub fn guest(&self) -> Style {
        self.color(Color::Cyan, Color::Indexed(117))
    }

    /// Host-side series.
    pub fn host(&self) -> Style {
        self.color(Color::Magenta, Color::Indexed(176))
    }

    /// Bars of the exit chart and histogram.
    pub fn bar(&self) -> Style {
        self.color(Color::Blue, Color::Indexed(75))
    }

    /// The colour of the n-th phase.
    pub fn phase(&self, n: usize) -> Style {
        const C16: [Color; 6] = [
            Color::Cyan,
            Color::Green,
            Color::Yellow,
            Color::Magenta,
            Color::Blue,
            Color::Red,
        ];
        const C256: [u8; 6] = [81, 114, 221, 176, 75, 210];
        self.color(C16[n % 6], Color::Indexed(C256[n % 6]))
    }

    /// The separator in titles.
    pub fn dot(&self) -> &'static str {
        if self.ascii {
            "-"
        } else {
            "·"
        }
    }

    /// The running-phase marker.
    pub fn marker(&self) -> &'static str {
        if self.ascii {
            ">"
        } else {
            "▶"
        }
    }

    /// A horizontal bar of `frac` (0..=1) of `width` cells, with eighth
    /// cells in Unicode; never empty for a non-zero fraction.
    pub fn bar_text(&self, frac: f64, width: usize) -> String {
        let frac = if frac.is_finite() {
            frac.clamp(0.0, 1.0)
        } else {
            0.0
        };
        if width == 0 {
            return String::new();
        }
        if self.ascii {
            let mut n = (frac * width as f64).round() as usize;
            if frac > 0.0 {
                n = n.max(1);
            }
            return "#".repeat(n.min(width));
        }
        let eighths = (frac * width as f64 * 8.0).round() as usize;
        let eighths = if frac > 0.0 { eighths.max(1) } else { 0 };
        let full = (eighths / 8).min(width);
        let mut s = "█".repeat(full);
        if full < width {
            s.push_str(EIGHTHS[eighths % 8]);
        }
        s
    }

    /// The filled and empty symbols of a gauge.
    pub fn gauge_symbols(&self) -> (&'static str, &'static str) {
        if self.ascii {
            ("#", ".")
        } else {
            ("█", "░")
        }
    }

    /// The symbol of a phase's bar on the timeline, and of the time
    /// before and after it.
    pub fn timeline_symbols(&self) -> (&'static str, &'static str) {
        if self.ascii {
            ("=", " ")
        } else {
            ("█", " ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Theme {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Theme::from_env(move |k| {
            pairs
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn environment_decides() {
        let utf8 = ("LANG", "en_US.UTF-8");
        assert_eq!(
            env(&[("TERM", "xterm-256color"), utf8]),
            Theme {
                colors: ColorMode::Ansi256,
                ascii: false
            }
        );
        assert_eq!(env(&[("TERM", "xterm"), utf8]).colors, ColorMode::Ansi16);
        assert_eq!(
            env(&[("TERM", "xterm"), ("COLORTERM", "truecolor"), utf8]).colors,
            ColorMode::Ansi256
        );
        assert_eq!(env(&[("TERM", "linux"), utf8]).colors, ColorMode::Ansi16);
        assert_eq!(
            env(&[("TERM", "xterm-256color"), ("NO_COLOR", "1"), utf8]).colors,
            ColorMode::Mono
        );
        // An empty NO_COLOR does not count (no-color.org).
        assert_eq!(
            env(&[("TERM", "xterm"), ("NO_COLOR", ""), utf8]).colors,
            ColorMode::Ansi16
        );
        assert_eq!(env(&[("TERM", "dumb"), utf8]), Theme::plain());
        assert_eq!(env(&[utf8]), Theme::plain());
        assert_eq!(env(&[("TERM", "vt100"), utf8]).colors, ColorMode::Mono);
        // Not UTF-8: ASCII.
        assert!(env(&[("TERM", "linux")]).ascii);
        assert!(env(&[("TERM", "linux"), ("LANG", "C")]).ascii);
        assert!(!env(&[("TERM", "linux"), ("LC_ALL", "C.UTF-8"), ("LANG", "C")]).ascii);
        assert!(env(&[("TERM", "linux"), ("LC_ALL", "C"), ("LANG", "C.UTF-8")]).ascii);
    }

    #[test]
    fn bars() {
        let u = Theme::unicode();
        assert_eq!(u.bar_text(1.0, 4), "████");
        assert_eq!(u.bar_text(0.5, 4), "██");
        assert_eq!(u.bar_text(0.0, 4), "");
        assert_eq!(u.bar_text(0.001, 4), "▏");
        assert_eq!(u.bar_text(0.3, 4), "█▎");
        assert_eq!(u.bar_text(f64::NAN, 4), "");
        let a = Theme::plain();
        assert_eq!(a.bar_text(0.5, 4), "##");
        assert_eq!(a.bar_text(0.001, 4), "#");
        assert_eq!(a.bar_text(2.0, 4), "####");
    }
}
