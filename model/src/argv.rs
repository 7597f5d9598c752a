//! Flags in another program's command line (a VMM's, bootscope's own
//! `run` arguments): `FLAG VALUE` or `FLAG=VALUE`, one reading for every
//! crate that looks into an argv.

/// Every value given to one of `flags` in `args`, in order, with the index
/// of the argument that names the flag: `FLAG VALUE` (the value is the
/// next argument, skipped) or `FLAG=VALUE`. A flag that ends the list
/// without its value gives nothing.
pub fn flag_values<'a, 'f, S: AsRef<str>>(
    args: &'a [S],
    flags: &'f [&'f str],
) -> impl Iterator<Item = (usize, &'a str)> + use<'a, 'f, S> {
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < args.len() {
            let at = i;
            let a = args[at].as_ref();
            i += 1;
            if flags.contains(&a) {
                let value = args.get(at + 1)?;
                i += 1;
                return Some((at, value.as_ref()));
            }
            let joined = flags
                .iter()
                .find_map(|f| a.strip_prefix(f).and_then(|r| r.strip_prefix('=')));
            if let Some(v) = joined {
                return Some((at, v));
            }
        }
        None
    })
}

/// The first value given to one of `flags` in `args` ([`flag_values`]).
pub fn flag_value<'a, S: AsRef<str>>(args: &'a [S], flags: &[&str]) -> Option<&'a str> {
    flag_values(args, flags).next().map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_spellings_in_order() {
        let args = [
            "qemu",
            "-m",
            "1G",
            "--cmdline=quiet x",
            "-serial",
            "file:a",
            "-serial=b",
        ];
        assert_eq!(flag_value(&args, &["-m"]), Some("1G"));
        assert_eq!(flag_value(&args, &["--cmdline"]), Some("quiet x"));
        let serial: Vec<_> = flag_values(&args, &["-serial", "--serial"]).collect();
        assert_eq!(serial, [(4, "file:a"), (6, "b")]);
        assert_eq!(flag_value(&args, &["-x"]), None);
        // A prefix of a longer flag is not the flag.
        assert_eq!(flag_value(&["--memory-x=3"], &["--memory"]), None);
        // A flag without its value, and a value that looks like a flag.
        assert_eq!(flag_value(&["run", "--kernel"], &["--kernel"]), None);
        assert_eq!(
            flag_value(&["--kernel", "--kernel=x"], &["--kernel"]),
            Some("--kernel=x")
        );
        let owned = vec![String::from("--cmdline"), String::from("")];
        assert_eq!(flag_values(&owned, &["--cmdline"]).next(), Some((0, "")));
    }
}
