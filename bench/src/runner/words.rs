//! Command lines as a shell would read them, for messages.

use std::ffi::OsString;

/// A command line as a shell would need it, for messages: a word of
/// plain characters as it is (`console=ttyS0`, `--memory=1G`), a word
/// with control characters quoted as `$'...'` with them as escapes (`\e`,
/// `\x07`, safe on a terminal, read back the same by a shell), any other
/// quoted by `shlex`.
pub fn shell_words(argv: &[OsString]) -> String {
    argv.iter()
        .map(|a| {
            let s = a.to_string_lossy();
            let plain = |c: char| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c);
            if !s.is_empty() && s.chars().all(plain) {
                return s.into_owned();
            }
            if s.chars().any(char::is_control) {
                return ansi_c_quoted(&s);
            }
            shlex::try_quote(&s).map_or_else(|_| format!("{s:?}"), |q| q.into_owned())
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `s` in bash's ANSI-C quotes, its control characters as escapes.
fn ansi_c_quoted(s: &str) -> String {
    let mut out = String::from("$'");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{1b}' => out.push_str("\\e"),
            c if c.is_control() && u32::from(c) < 0x80 => {
                out.push_str(&format!("\\x{:02x}", u32::from(c)));
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}
