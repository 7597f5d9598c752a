//! tracefs: where it is, and what its event format files say.
//!
//! Tracepoint field layouts differ between kernel versions, so the collectors
//! never hard-code them: each field's offset and size are read here from
//! `events/<system>/<event>/format` and handed to the BPF programs as
//! `const volatile` globals before load.

use std::path::{Path, PathBuf};

/// One field of a tracepoint record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldDesc {
    pub name: String,
    /// The C declaration without the name (`unsigned int`, `char[16]`).
    pub c_type: String,
    pub offset: u32,
    pub size: u32,
    pub signed: bool,
}

/// A parsed `format` file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventFormat {
    pub name: String,
    pub id: u32,
    /// Every field, the `common_*` header included.
    pub fields: Vec<FieldDesc>,
    /// The `print fmt:` line after its label.
    pub print_fmt: String,
}

/// A format file that is not what the kernel writes.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FormatError {
    /// A `field:` line lacks its offset or size.
    #[error("malformed field line {line:?}")]
    Field { line: String },
    /// No `name:` line.
    #[error("no \"name:\" line")]
    NoName,
}

impl EventFormat {
    /// The field called `name`.
    pub fn field(&self, name: &str) -> Option<&FieldDesc> {
        self.fields.iter().find(|f| f.name == name)
    }
}

/// Parses the text of a tracefs `format` file.
pub fn parse_format(text: &str) -> Result<EventFormat, FormatError> {
    let mut fmt = EventFormat::default();
    for raw in text.lines() {
        let line = raw.trim();
        if let Some(v) = line.strip_prefix("name:") {
            fmt.name = v.trim().to_string();
        } else if let Some(v) = line.strip_prefix("ID:") {
            fmt.id = v.trim().parse().unwrap_or(0);
        } else if let Some(v) = line.strip_prefix("print fmt:") {
            fmt.print_fmt = v.trim().to_string();
        } else if line.starts_with("field:") {
            fmt.fields.push(parse_field(line)?);
        }
    }
    if fmt.name.is_empty() {
        return Err(FormatError::NoName);
    }
    Ok(fmt)
}

/// `field:unsigned int exit_reason;\toffset:8;\tsize:4;\tsigned:0;`
fn parse_field(line: &str) -> Result<FieldDesc, FormatError> {
    let bad = || FormatError::Field {
        line: line.to_string(),
    };
    let mut decl = None;
    let (mut offset, mut size, mut signed) = (None, None, false);
    for part in line.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = part.split_once(':').ok_or_else(bad)?;
        match key.trim() {
            "field" => decl = Some(value.trim()),
            "offset" => offset = value.trim().parse().ok(),
            "size" => size = value.trim().parse().ok(),
            "signed" => signed = value.trim() == "1",
            _ => {}
        }
    }
    let decl = decl.ok_or_else(bad)?;
    // The name is the last word; an array suffix (`comm[16]`) belongs to the
    // type, as does a leading `*`.
    let split = decl.rfind(char::is_whitespace).ok_or_else(bad)?;
    let (ty, name) = (decl[..split].trim(), decl[split..].trim());
    let (name, suffix) = match name.find('[') {
        Some(i) => (&name[..i], &name[i..]),
        None => (name, ""),
    };
    let (stars, name) = {
        let n = name.trim_start_matches('*');
        (&name[..name.len() - n.len()], n)
    };
    if name.is_empty() {
        return Err(bad());
    }
    Ok(FieldDesc {
        name: name.to_string(),
        c_type: format!("{ty}{stars}{suffix}"),
        offset: offset.ok_or_else(bad)?,
        size: size.ok_or_else(bad)?,
        signed,
    })
}

/// One `__print_symbolic(expr, { value, "name" }, ...)` table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SymbolicTable {
    /// The value expression (`REC->exit_reason & 0xffff`).
    pub expr: String,
    pub entries: Vec<(i64, String)>,
}

/// Every `__print_symbolic` table in a print fmt, in order. Entries whose
/// value is not a plain integer expression are skipped.
pub fn parse_symbolic_tables(print_fmt: &str) -> Vec<SymbolicTable> {
    const OPEN: &str = "__print_symbolic(";
    let mut tables = Vec::new();
    let mut rest = print_fmt;
    while let Some(i) = rest.find(OPEN) {
        let body = &rest[i + OPEN.len()..];
        let Some(end) = matching_paren(body) else {
            break;
        };
        let args = split_top_level(&body[..end]);
        let mut table = SymbolicTable {
            expr: args
                .first()
                .map(|a| a.trim().to_string())
                .unwrap_or_default(),
            entries: Vec::new(),
        };
        for arg in args.iter().skip(1) {
            let inner = arg.trim();
            let Some(inner) = inner.strip_prefix('{').and_then(|s| s.strip_suffix('}')) else {
                continue;
            };
            let parts = split_top_level(inner);
            if parts.len() != 2 {
                continue;
            }
            if let (Some(v), Some(name)) = (eval_int(parts[0]), string_literal(parts[1])) {
                table.entries.push((v, name));
            }
        }
        tables.push(table);
        rest = &body[end..];
    }
    tables
}

/// Index of the `)` closing the `(` just before `s`.
fn matching_paren(s: &str) -> Option<usize> {
    let mut depth = 0i32;
    let mut in_str = false;
    let mut prev = '\0';
    for (i, c) in s.char_indices() {
        if in_str {
            if c == '"' && prev != '\\' {
                in_str = false;
            }
        } else {
            match c {
                '"' => in_str = true,
                '(' | '{' => depth += 1,
                ')' | '}' if depth > 0 => depth -= 1,
                ')' => return Some(i),
                _ => {}
            }
        }
        prev = c;
    }
    None
}

/// Splits at commas outside parentheses, braces and strings.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut in_str, mut start, mut prev) = (0i32, false, 0usize, '\0');
    for (i, c) in s.char_indices() {
        if in_str {
            if c == '"' && prev != '\\' {
                in_str = false;
            }
        } else {
            match c {
                '"' => in_str = true,
                '(' | '{' => depth += 1,
                ')' | '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.push(&s[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        prev = c;
    }
    if start < s.len() && !s[start..].trim().is_empty() {
        out.push(&s[start..]);
    }
    out
}

/// `"KVM_EXIT_" "IO"` -> `KVM_EXIT_IO` (adjacent literals concatenate).
fn string_literal(s: &str) -> Option<String> {
    let mut out = String::new();
    let mut rest = s.trim();
    if !rest.starts_with('"') {
        return None;
    }
    while let Some(r) = rest.strip_prefix('"') {
        let end = r.find('"')?;
        out.push_str(&r[..end]);
        rest = r[end + 1..].trim_start();
    }
    rest.is_empty().then_some(out)
}

/// Evaluates the integer expressions found in symbolic tables: decimal and
/// hex literals (with `U`/`L` suffixes), unary `-` and `~`, binary `+ - | &
/// <<`, parentheses. Anything else (casts, identifiers) gives None.
pub fn eval_int(s: &str) -> Option<i64> {
    let tokens = tokenize(s)?;
    let mut p = ExprParser { tokens, pos: 0 };
    let v = p.or()?;
    (p.pos == p.tokens.len()).then_some(v)
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Num(i64),
    Op(&'static str),
}

fn tokenize(s: &str) -> Option<Vec<Tok>> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < b.len() && b[i].is_ascii_alphanumeric() {
                i += 1;
            }
            let lit = s[start..i].trim_end_matches(['u', 'U', 'l', 'L']);
            let v = if let Some(h) = lit.strip_prefix("0x").or(lit.strip_prefix("0X")) {
                u64::from_str_radix(h, 16).ok()? as i64
            } else {
                lit.parse::<u64>().ok()? as i64
            };
            out.push(Tok::Num(v));
        } else if s[i..].starts_with("<<") {
            out.push(Tok::Op("<<"));
            i += 2;
        } else {
            let op = match c {
                b'+' => "+",
                b'-' => "-",
                b'|' => "|",
                b'&' => "&",
                b'~' => "~",
                b'(' => "(",
                b')' => ")",
                _ => return None,
            };
            out.push(Tok::Op(op));
            i += 1;
        }
    }
    Some(out)
}

struct ExprParser {
    tokens: Vec<Tok>,
    pos: usize,
}

impl ExprParser {
    fn eat(&mut self, op: &str) -> bool {
        let hit = matches!(self.tokens.get(self.pos), Some(Tok::Op(o)) if *o == op);
        if hit {
            self.pos += 1;
        }
        hit
    }

    fn or(&mut self) -> Option<i64> {
        let mut v = self.and()?;
        while self.eat("|") {
            v |= self.and()?;
        }
        Some(v)
    }

    fn and(&mut self) -> Option<i64> {
        let mut v = self.shift()?;
        while self.eat("&") {
            v &= self.shift()?;
        }
        Some(v)
    }

    fn shift(&mut self) -> Option<i64> {
        let mut v = self.sum()?;
        while self.eat("<<") {
            let s = self.sum()?;
            v = v.checked_shl(u32::try_from(s).ok()?)?;
        }
        Some(v)
    }

    fn sum(&mut self) -> Option<i64> {
        let mut v = self.unary()?;
        loop {
            if self.eat("+") {
                v = v.checked_add(self.unary()?)?;
            } else if self.eat("-") {
                v = v.checked_sub(self.unary()?)?;
            } else {
                return Some(v);
            }
        }
    }

    fn unary(&mut self) -> Option<i64> {
        if self.eat("-") {
            return self.unary()?.checked_neg();
        }
        if self.eat("~") {
            return Some(!self.unary()?);
        }
        if self.eat("(") {
            let v = self.or()?;
            return self.eat(")").then_some(v);
        }
        match self.tokens.get(self.pos) {
            Some(Tok::Num(n)) => {
                self.pos += 1;
                Some(*n)
            }
            _ => None,
        }
    }
}

/// The places tracefs is looked for, in order.
pub const TRACEFS_CANDIDATES: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// A mounted tracefs.
#[derive(Clone, Debug)]
pub struct Tracefs {
    root: PathBuf,
}

impl Tracefs {
    /// tracefs rooted at `root` (must hold `events/`).
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The first candidate with an `events/` directory.
    pub fn find() -> Option<Self> {
        TRACEFS_CANDIDATES
            .iter()
            .map(Path::new)
            .find(|p| p.join("events").is_dir())
            .map(Self::at)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The format of `system:event`; None when this kernel has no such
    /// tracepoint.
    pub fn format(&self, system: &str, event: &str) -> Result<Option<EventFormat>, std::io::Error> {
        let path = self
            .root
            .join("events")
            .join(system)
            .join(event)
            .join("format");
        match crate::pseudo::read(&path) {
            Ok(text) => parse_format(&text).map(Some).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{}: {e}", path.display()),
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KVM_PIO: &str = "name: kvm_pio
ID: 110
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:unsigned int rw;\toffset:8;\tsize:4;\tsigned:0;
\tfield:unsigned int port;\toffset:12;\tsize:4;\tsigned:0;
\tfield:unsigned int size;\toffset:16;\tsize:4;\tsigned:0;
\tfield:unsigned int count;\toffset:20;\tsize:4;\tsigned:0;
\tfield:unsigned int val;\toffset:24;\tsize:4;\tsigned:0;

print fmt: \"pio_%s at 0x%x size %d count %d val 0x%x %s\", REC->rw ? \"write\" : \"read\", REC->port, REC->size, REC->count, REC->val, REC->count > 1 ? \"(...)\" : \"\"
";

    #[test]
    fn parses_kvm_pio_format() {
        let f = parse_format(KVM_PIO).unwrap();
        assert_eq!(f.name, "kvm_pio");
        assert_eq!(f.id, 110);
        assert_eq!(f.fields.len(), 9);
        let port = f.field("port").unwrap();
        assert_eq!((port.offset, port.size, port.signed), (12, 4, false));
        assert_eq!(port.c_type, "unsigned int");
        assert!(f.field("common_pid").unwrap().signed);
        assert!(f.print_fmt.starts_with("\"pio_%s"));
        assert!(f.field("nonexistent").is_none());
    }

    #[test]
    fn parses_arrays_pointers_and_data_loc() {
        let text = "name: x
\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;
\tfield:__data_loc char[] parent_comm;\toffset:8;\tsize:4;\tsigned:0;
\tfield:u64 * sptep;\toffset:32;\tsize:8;\tsigned:0;
\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;
";
        let f = parse_format(text).unwrap();
        assert_eq!(f.field("prev_comm").unwrap().c_type, "char[16]");
        assert_eq!(f.field("prev_comm").unwrap().size, 16);
        assert_eq!(f.field("parent_comm").unwrap().c_type, "__data_loc char[]");
        assert_eq!(f.field("sptep").unwrap().c_type, "u64 *");
        assert!(f.field("prev_state").unwrap().signed);
    }

    #[test]
    fn rejects_malformed_lines() {
        assert_eq!(parse_format("ID: 3\n"), Err(FormatError::NoName));
        assert!(matches!(
            parse_format("name: x\n\tfield:int a;\toffset:4;\n"),
            Err(FormatError::Field { .. })
        ));
    }

    #[test]
    fn evaluates_table_values() {
        assert_eq!(eval_int("0x040 + 13"), Some(0x4d));
        assert_eq!(eval_int("-1"), Some(-1));
        assert_eq!(eval_int("(1 << 0) | (1 << 3)"), Some(9));
        assert_eq!(eval_int("0x80000001"), Some(0x8000_0001));
        assert_eq!(eval_int("((((1UL))) << (10))"), Some(1024));
        assert_eq!(eval_int("( unsigned long)3"), None);
        assert_eq!(eval_int("FOO"), None);
        assert_eq!(eval_int(""), None);
    }

    #[test]
    fn parses_symbolic_tables_with_concatenated_names() {
        let fmt = r#""reason %s (%d)", REC->errno < 0 ? (REC->errno == -4 ? "restart" : "error") : __print_symbolic(REC->reason, { 0, "KVM_EXIT_" "UNKNOWN" }, { 2, "KVM_EXIT_" "IO" }, { 6, "KVM_EXIT_" "MMIO" }), REC->errno < 0 ? -REC->errno : REC->reason"#;
        let t = parse_symbolic_tables(fmt);
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].expr, "REC->reason");
        assert_eq!(
            t[0].entries,
            vec![
                (0, "KVM_EXIT_UNKNOWN".to_string()),
                (2, "KVM_EXIT_IO".to_string()),
                (6, "KVM_EXIT_MMIO".to_string())
            ]
        );
    }

    #[test]
    fn tracefs_format_reads_and_reports_missing() {
        let dir = std::env::temp_dir().join(format!("bootscope-tracefs-{}", std::process::id()));
        let ev = dir.join("events/kvm/kvm_pio");
        std::fs::create_dir_all(&ev).unwrap();
        std::fs::write(ev.join("format"), KVM_PIO).unwrap();
        let t = Tracefs::at(&dir);
        assert_eq!(t.format("kvm", "kvm_pio").unwrap().unwrap().id, 110);
        assert!(t.format("kvm", "kvm_nope").unwrap().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
