//! AFL++ driver: `bootscope-fuzz TARGET` runs one target of
//! `bootscope_fuzz::TARGETS` in AFL++'s persistent mode. Built by
//! `cargo afl build --features afl`; see docs/fuzzing.md.

fn main() {
    let name = std::env::args().nth(1).unwrap_or_default();
    let Some(target) = bootscope_fuzz::target(&name) else {
        let names: Vec<_> = bootscope_fuzz::TARGETS.iter().map(|t| t.name).collect();
        eprintln!("usage: bootscope-fuzz TARGET (one of {})", names.join(", "));
        std::process::exit(2);
    };
    afl::fuzz!(|data: &[u8]| {
        (target.run)(data);
    });
}
