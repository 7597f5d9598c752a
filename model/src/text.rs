//! Text from outside (a server's error body, a guest's console, names
//! parsed from a document, a profiled process's thread names, a guest's
//! function names) made safe to print on a terminal or to put in an SVG:
//! two rules, used everywhere.
//!
//! - [`printable`], for a terminal: control characters, which could move
//!   the cursor, retitle the window or hide what follows, are shown escaped
//!   (`\e`, `\u{07}`) instead of sent.
//! - [`xml_text`], for XML (every SVG bootscope writes): the same escapes
//!   (raw control characters make a document no XML parser accepts), then
//!   `&`, `<`, `>`, `"` and `'` as entities, so the result is safe both as
//!   element content and as an attribute value.

use std::borrow::Cow;

/// `s` with every control character (C0, DEL and C1, including escape,
/// carriage return and newline) written as an escape: `\n`, `\r`, `\t`,
/// `\e`, or `\u{XX}`. Printable text, in any script, is left alone.
pub fn printable(s: &str) -> Cow<'_, str> {
    printable_keeping(s, &[])
}

/// [`printable`], keeping the characters in `keep` as they are (such as
/// `\n` for text printed as several lines).
pub fn printable_keeping<'a>(s: &'a str, keep: &[char]) -> Cow<'a, str> {
    let bad = |c: char| c.is_control() && !keep.contains(&c);
    if !s.chars().any(bad) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if !bad(c) {
            out.push(c);
            continue;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{1b}' => out.push_str("\\e"),
            c => out.push_str(&format!("\\u{{{:02x}}}", u32::from(c))),
        }
    }
    Cow::Owned(out)
}

/// Bytes from outside as printable text: invalid UTF-8 as U+FFFD, control
/// characters escaped as by [`printable`] (keeping `keep`).
pub fn printable_bytes(b: &[u8], keep: &[char]) -> String {
    printable_keeping(&String::from_utf8_lossy(b), keep).into_owned()
}

/// `s` for XML element content or an attribute value: control characters
/// escaped as by [`printable`] (XML 1.0 allows no C0 character but tab,
/// newline and carriage return, not even as a character reference), the
/// non-characters U+FFFE and U+FFFF the same way, and `&<>"'` as entities.
pub fn xml_text(s: &str) -> Cow<'_, str> {
    let special = |c: char| matches!(c, '&' | '<' | '>' | '"' | '\'' | '\u{fffe}' | '\u{ffff}');
    let shown = printable(s);
    if !shown.chars().any(special) {
        return shown;
    }
    let mut out = String::with_capacity(shown.len() + 16);
    for c in shown.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\u{fffe}' | '\u{ffff}' => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_text_kept() {
        assert!(matches!(printable("plain ünïcode 漢字"), Cow::Borrowed(_)));
        assert_eq!(
            printable("\u{1b}]0;owned\u{7}\u{1b}[2Jred\r\n\u{9b}x\u{7f}"),
            "\\e]0;owned\\u{07}\\e[2Jred\\r\\n\\u{9b}x\\u{7f}"
        );
        assert_eq!(printable_keeping("a\nb\u{1b}", &['\n']), "a\nb\\e");
        assert_eq!(printable_bytes(b"\xff\x1b[m", &[]), "\u{fffd}\\e[m");
    }

    #[test]
    fn xml_text_has_no_markup_and_no_control_character() {
        assert!(matches!(xml_text("do_one_initcall ünï"), Cow::Borrowed(_)));
        assert_eq!(
            xml_text("\u{1b}]0;PWN\u{7}\u{1b}[2J<a href=\"x\">&'\u{8}\u{fffe}"),
            "\\e]0;PWN\\u{07}\\e[2J&lt;a href=&quot;x&quot;&gt;&amp;&apos;\\u{08}\\u{fffe}"
        );
        let all: String = (0u32..0x100).filter_map(char::from_u32).collect();
        let x = xml_text(&all);
        assert!(!x.chars().any(char::is_control), "{x}");
        assert!(!x.contains('<') && !x.contains('"'));
    }
}
