//! Text from outside (a server's error body, a guest's console, names
//! parsed from a document) made safe to print on a terminal: control
//! characters, which could move the cursor, retitle the window or hide
//! what follows, are shown escaped instead of sent.

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
}
