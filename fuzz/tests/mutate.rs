//! A blind mutation run of one target, for a machine without AFL++: the
//! target's corpus, each input changed a few times at random (bytes set,
//! cut, doubled, removed, pieces of other inputs spliced in), fed to the
//! target for a while. No coverage feedback: AFL++ (`scripts/fuzz`) is the
//! fuzzer; this only shakes a target near its corpus.
//!
//! ```text
//! MUTATE_TARGET=http_request MUTATE_SECONDS=600 \
//!   cargo test --release -p bootscope-fuzz --test mutate -- --ignored --nocapture
//! ```
//!
//! An input that fails is written to `target/mutate-TARGET-crash` (under
//! `CARGO_TARGET_DIR` if set) before the test fails.

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// xorshift64: reproducible from its seed, enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Changes `d` once, at random, with pieces from `seeds`.
fn mutate(d: &mut Vec<u8>, seeds: &[Vec<u8>], rng: &mut Rng) {
    let at = rng.below(d.len() + 1);
    match rng.below(6) {
        0 if !d.is_empty() => {
            let i = at.min(d.len() - 1);
            d[i] = rng.next() as u8;
        }
        1 => d.truncate(at),
        2 => {
            let end = (at + 1 + rng.below(16)).min(d.len());
            d.drain(at.min(end)..end);
        }
        3 => {
            let other = &seeds[rng.below(seeds.len())];
            let from = rng.below(other.len() + 1);
            let to = (from + rng.below(64)).min(other.len());
            d.splice(at..at, other[from..to].iter().copied());
        }
        4 => {
            let end = (at + rng.below(32)).min(d.len());
            let piece = d[at..end].to_vec();
            d.splice(at..at, piece);
        }
        _ => d.extend_from_slice(&seeds[rng.below(seeds.len())]),
    }
}

#[test]
#[ignore = "a fuzzing run, minutes long: see the file's documentation"]
fn mutate_one_target() {
    let name = std::env::var("MUTATE_TARGET").expect("MUTATE_TARGET: the target to run");
    let target = bootscope_fuzz::target(&name).expect("a target of bootscope_fuzz::TARGETS");
    let seconds: u64 = std::env::var("MUTATE_SECONDS")
        .ok()
        .map(|s| s.parse().expect("MUTATE_SECONDS: a number"))
        .unwrap_or(60);
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(&name);
    let seeds: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .expect("the target's corpus")
        .map(|e| std::fs::read(e.expect("a corpus entry").path()).expect("a corpus file"))
        .collect();
    assert!(!seeds.is_empty(), "{} is empty", dir.display());
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let until = Instant::now() + Duration::from_secs(seconds);
    let mut runs = 0u64;
    while Instant::now() < until {
        let mut d = seeds[rng.below(seeds.len())].clone();
        for _ in 0..=rng.below(8) {
            mutate(&mut d, &seeds, &mut rng);
        }
        if std::panic::catch_unwind(|| (target.run)(&d)).is_err() {
            let out = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"))
                .join(format!("mutate-{name}-crash"));
            std::fs::write(&out, &d).expect("writing the failing input");
            panic!("{name}: input {runs} failed; written to {}", out.display());
        }
        runs += 1;
    }
    println!("{name}: {runs} mutated inputs in {seconds} s, no failure");
}
