//! The channel that brings results out of the lab guest.
//!
//! The guest's second serial port (`/dev/ttyS1`) is connected to a file on
//! the host. After the program under test has finished, the guest writes a
//! line-oriented stream to it:
//!
//! ```text
//! BOOTSCOPE-LAB 1                       header, always first
//! KVM 1                                 whether /dev/kvm existed (1 or 0)
//! FILE <index> <size> <sha256> gzip     output <index> follows:
//! <base64 lines>                        its gzip-compressed contents
//! END <index>
//! MISSING <index>                       output <index> was not created
//! EXIT <code>                           the program's exit status, always last
//! ```
//!
//! Outputs are named by their index in the list the host asked for, so paths
//! never have to be escaped. Files are compressed because the emulated UART
//! moves well under 1 MB/s and bootscope's JSON timelines shrink more than
//! tenfold; base64 keeps the stream plain text, so no tty setting can mangle
//! it. Size and SHA-256 of the uncompressed contents are computed in the
//! guest and checked on the host; a stream without its `EXIT` record was cut
//! short and is reported as such.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::{LabError, Result};

/// First line of every stream; the number is the format version.
pub(crate) const HEADER: &str = "BOOTSCOPE-LAB 1";

/// What the guest reported.
#[derive(Debug, Default)]
pub(crate) struct Report {
    /// Exit status of the program under test.
    pub exit_code: i32,
    /// Whether `/dev/kvm` existed in the guest.
    pub nested_kvm: bool,
    /// Contents of each output that exists, by index, verified.
    pub files: BTreeMap<usize, Vec<u8>>,
}

/// Shell code for the guest's `/init`: defines `lab_send INDEX PATH`, which
/// writes one `FILE`/`MISSING` record to standard output.
pub(crate) const GUEST_SEND_FUNCTION: &str = r#"lab_send() {
	if [ -f "$2" ]; then
		lab_size=$(stat -c %s "$2")
		lab_sum=$(sha256sum < "$2")
		echo "FILE $1 $lab_size ${lab_sum%% *} gzip"
		gzip -c < "$2" | base64
		echo "END $1"
	else
		echo "MISSING $1"
	fi
}
"#;

/// The SHA-256 digest of `data` as 64 lowercase hex digits, the form
/// busybox `sha256sum` prints in the guest.
fn sha256_hex(data: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Checks an output's contents against the size and SHA-256 the guest
/// sent.
fn verify(host_path: &Path, contents: &[u8], size: u64, sum: &str) -> Result<()> {
    if contents.len() as u64 != size {
        return Err(LabError::OutputDamaged {
            path: host_path.to_path_buf(),
            reason: format!("the guest sent {size} bytes, {} arrived", contents.len()),
        });
    }
    let actual = sha256_hex(contents);
    if !actual.eq_ignore_ascii_case(sum) {
        return Err(LabError::OutputDamaged {
            path: host_path.to_path_buf(),
            reason: format!("SHA-256 is {actual}, the guest computed {sum}"),
        });
    }
    Ok(())
}

/// Parses and verifies a stream. `outputs` are the host paths of the
/// requested outputs (for error messages and the index range); `stream_path`
/// is where the stream was read from.
pub(crate) fn parse(data: &[u8], stream_path: &Path, outputs: &[PathBuf]) -> Result<Report> {
    let corrupt = |line: usize, reason: String| corrupt_at(stream_path, line, reason);
    let truncated = |reason: String| truncated_at(stream_path, reason);
    // A last line without its newline was cut off mid-write: ignore it, so
    // the records before it decide which error describes the truncation.
    let complete = match data.iter().rposition(|&b| b == b'\n') {
        Some(last_newline) => &data[..=last_newline],
        None => &[],
    };
    let text = String::from_utf8_lossy(complete);
    let mut lines = text
        .split('\n')
        .map(|l| l.trim_end_matches('\r'))
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .filter(|(_, l)| !l.is_empty())
        .peekable();

    match lines.next() {
        None => {
            return Err(truncated(
                "the guest sent nothing, so it never finished running the program".into(),
            ))
        }
        Some((_, HEADER)) => {}
        Some((n, other)) => {
            return Err(corrupt(
                n,
                format!("expected {HEADER:?}, found {:?}", shorten(other)),
            ));
        }
    }

    let mut report = Report::default();
    let mut exit_code = None;
    while let Some((n, line)) = lines.next() {
        if exit_code.is_some() {
            return Err(corrupt(
                n,
                format!("unexpected {:?} after the EXIT record", shorten(line)),
            ));
        }
        let fields: Vec<&str> = line.split(' ').collect();
        match fields.as_slice() {
            ["KVM", flag] => report.nested_kvm = *flag == "1",
            ["EXIT", code] => {
                exit_code = Some(
                    code.parse::<i32>()
                        .map_err(|_| corrupt(n, format!("bad exit code {code:?}")))?,
                );
            }
            ["MISSING", index] => {
                parse_index(index, outputs).map_err(|r| corrupt(n, r))?;
            }
            ["FILE", index, size, sum, "gzip"] => {
                let index = parse_index(index, outputs).map_err(|r| corrupt(n, r))?;
                let size: u64 = size
                    .parse()
                    .map_err(|_| corrupt(n, format!("bad size {size:?}")))?;
                let contents = read_file(&mut lines, stream_path, &outputs[index], index)?;
                verify(&outputs[index], &contents, size, sum)?;
                report.files.insert(index, contents);
            }
            _ => return Err(corrupt(n, format!("unknown record {:?}", shorten(line)))),
        }
    }
    match exit_code {
        Some(code) => {
            report.exit_code = code;
            Ok(report)
        }
        None => Err(truncated("it has no EXIT record".into())),
    }
}

/// The stream's error for a bad record on `line`.
fn corrupt_at(stream_path: &Path, line: usize, reason: String) -> LabError {
    LabError::StreamCorrupt {
        path: stream_path.to_path_buf(),
        line,
        reason,
    }
}

/// The stream's error for a stream cut short.
fn truncated_at(stream_path: &Path, reason: String) -> LabError {
    LabError::StreamTruncated {
        path: stream_path.to_path_buf(),
        reason,
    }
}

/// The contents of output `index` (host path `host_path`): its base64
/// lines up to `END index`, decoded and gunzipped.
fn read_file<'a>(
    lines: &mut impl Iterator<Item = (usize, &'a str)>,
    stream_path: &Path,
    host_path: &Path,
    index: usize,
) -> Result<Vec<u8>> {
    let end = format!("END {index}");
    let mut encoded = Vec::new();
    let mut ended = false;
    for (m, body) in lines.by_ref() {
        if body == end {
            ended = true;
            break;
        }
        decode_base64_line(body, &mut encoded).map_err(|r| corrupt_at(stream_path, m, r))?;
    }
    if !ended {
        return Err(truncated_at(
            stream_path,
            format!(
                "the contents of {} stop before their end marker",
                host_path.display()
            ),
        ));
    }
    gunzip(&encoded).map_err(|reason| LabError::OutputDamaged {
        path: host_path.to_path_buf(),
        reason,
    })
}

fn parse_index(text: &str, outputs: &[PathBuf]) -> std::result::Result<usize, String> {
    match text.parse::<usize>() {
        Ok(i) if i < outputs.len() => Ok(i),
        _ => Err(format!(
            "output index {text:?} is not one of the {} requested outputs",
            outputs.len()
        )),
    }
}

fn shorten(line: &str) -> String {
    line.chars().take(80).collect()
}

/// Decodes one line of standard base64 (with padding) and appends the bytes.
fn decode_base64_line(line: &str, out: &mut Vec<u8>) -> std::result::Result<(), String> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode_vec(line.trim(), out)
        .map_err(|e| format!("bad base64 line: {e}"))
}

/// Decompresses gzip data (every member, as `gzip -dc` does).
fn gunzip(data: &[u8]) -> std::result::Result<Vec<u8>, String> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(data)
        .read_to_end(&mut out)
        .map_err(|e| format!("the compressed data is damaged: {e}"))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn sha256_is_what_sha256sum_prints() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    fn encode(data: &[u8]) -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(data)
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    fn stream(files: &[(usize, &[u8])], exit: Option<i32>) -> Vec<u8> {
        let mut s = format!("{HEADER}\r\nKVM 1\r\n");
        for (i, data) in files {
            s += &format!("FILE {i} {} {} gzip\n", data.len(), sha256_hex(data));
            let enc = encode(&gzip(data));
            for line in enc.as_bytes().chunks(76) {
                s += std::str::from_utf8(line).unwrap();
                s += "\n";
            }
            s += &format!("END {i}\n");
        }
        s += "MISSING 2\n";
        if let Some(code) = exit {
            s += &format!("EXIT {code}\n");
        }
        s.into_bytes()
    }

    #[test]
    fn base64_round_trip() {
        for len in 0..40 {
            let data: Vec<u8> = (0..len).map(|i| (i * 37 + 5) as u8).collect();
            let mut out = Vec::new();
            decode_base64_line(&encode(&data), &mut out).unwrap();
            assert_eq!(out, data);
        }
        let mut out = Vec::new();
        assert!(decode_base64_line("abc", &mut out).is_err());
        assert!(decode_base64_line("ab!d", &mut out).is_err());
    }

    #[test]
    fn good_stream() {
        let outputs = vec![
            PathBuf::from("/o/a"),
            PathBuf::from("/o/b"),
            PathBuf::from("/o/c"),
        ];
        let binary: Vec<u8> = (0..=255u8).cycle().take(5000).collect();
        let data = stream(&[(0, b"hello\n"), (1, &binary)], Some(3));
        let report = parse(&data, Path::new("s"), &outputs).unwrap();
        assert_eq!(report.exit_code, 3);
        assert!(report.nested_kvm);
        assert_eq!(report.files.len(), 2);
        assert_eq!(report.files[&0], b"hello\n");
        assert_eq!(report.files[&1], binary);
        // An empty file is sent as a gzip stream of nothing.
        let data = stream(&[(0, b"")], Some(0));
        let report = parse(&data, Path::new("s"), &outputs).unwrap();
        assert_eq!(report.files[&0], b"");
    }

    #[test]
    fn truncated_and_corrupt_streams() {
        let outputs = vec![
            PathBuf::from("/o/a"),
            PathBuf::from("/o/b"),
            PathBuf::from("/o/c"),
        ];
        let parse = |d: &[u8]| parse(d, Path::new("s"), &outputs);

        let err = parse(b"").unwrap_err();
        assert!(matches!(err, LabError::StreamTruncated { .. }), "{err}");

        let no_exit = stream(&[(0, b"x")], None);
        let err = parse(&no_exit).unwrap_err();
        assert!(err.to_string().contains("no EXIT record"), "{err}");

        let varied: Vec<u8> = (0..3000u32).map(|i| (i * i % 251) as u8).collect();
        let full = stream(&[(0, &varied)], Some(0));
        let end = full.windows(5).position(|w| w == b"END 0").unwrap();
        let in_body = &full[..end - 3];
        let err = parse(in_body).unwrap_err();
        assert!(matches!(err, LabError::StreamTruncated { .. }), "{err}");
        assert!(err.to_string().contains("/o/a"), "{err}");
        for cut in 1..full.len() {
            let err = parse(&full[..cut]).unwrap_err();
            assert!(
                matches!(err, LabError::StreamTruncated { .. }),
                "cut at {cut}: {err}"
            );
        }

        // Change one base64 character in the compressed data (past the
        // gzip header, whose time stamp nobody checks).
        let mut bad = full.clone();
        let pos = bad.windows(5).position(|w| w == b"gzip\n").unwrap() + 60;
        bad[pos] = if bad[pos] == b'A' { b'B' } else { b'A' };
        let err = parse(&bad).map(|_| ()).unwrap_err();
        assert!(matches!(err, LabError::OutputDamaged { .. }), "{err}");

        let wrong_size = String::from_utf8(full.clone())
            .unwrap()
            .replace("FILE 0 3000", "FILE 0 2999");
        let err = parse(wrong_size.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("2999"), "{err}");

        let err = parse(b"garbage\nEXIT 0\n").unwrap_err();
        assert!(
            matches!(err, LabError::StreamCorrupt { line: 1, .. }),
            "{err}"
        );

        let bad_index = format!("{HEADER}\nMISSING 9\nEXIT 0\n");
        let err = parse(bad_index.as_bytes()).unwrap_err();
        assert!(
            matches!(err, LabError::StreamCorrupt { line: 2, .. }),
            "{err}"
        );
    }
}
