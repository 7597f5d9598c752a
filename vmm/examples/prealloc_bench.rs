//! Guest memory preallocation speed, against two baselines.
//!
//! ```text
//! cargo run --release -p bootscope-vmm --example prealloc_bench -- [SIZE] [THREADS] [ROUNDS]
//! ```
//!
//! SIZE (default 1G) is faulted in by each variant in every round:
//!
//! * `mmap-populate`: one anonymous `mmap(MAP_POPULATE)` (baseline);
//! * `memset`: an anonymous mapping written end to end by one thread
//!   (baseline);
//! * `4K` with 1 and THREADS threads, `4K touch` (one write per page instead
//!   of MADV_POPULATE_WRITE), `THP` (MADV_HUGEPAGE) and, if the host's pool
//!   has enough free pages, `hugetlb 2M`: the memory module's `allocate` +
//!   `preallocate`, timed together.
//!
//! The first touch of host memory the machine has not used yet is slower than
//! later ones (the host may itself be a VM), so a warm-up round is thrown
//! away, the variants run interleaved with their order rotated every round,
//! and the table gives medians and ratios to `mmap-populate`.

use std::time::{Duration, Instant};

use bootscope_vmm::memory::{
    allocate, parse_size, preallocate_with, HugePageSize, MemoryOptions, MemoryPlan, MethodChoice,
    ThpChoice, ThpMode, Topology,
};
use vm_memory::GuestAddress;

#[derive(Clone, Copy)]
enum Variant {
    MmapPopulate,
    Memset,
    Module {
        threads: usize,
        thp: bool,
        hugetlb: bool,
        touch: bool,
    },
}

impl Variant {
    fn name(&self) -> String {
        match *self {
            Variant::MmapPopulate => "mmap-populate".into(),
            Variant::Memset => "memset".into(),
            Variant::Module {
                threads,
                thp,
                hugetlb,
                touch,
            } => {
                let kind = if hugetlb {
                    "hugetlb 2M"
                } else if thp {
                    "THP"
                } else if touch {
                    "4K touch"
                } else {
                    "4K"
                };
                format!("{kind}, {threads} thr")
            }
        }
    }
}

/// Maps `size` bytes anonymous private with extra `flags`.
fn map_anon(size: usize, flags: i32) -> *mut u8 {
    // SAFETY: a fresh anonymous mapping at an address the kernel picks.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | flags,
            -1,
            0,
        )
    };
    assert_ne!(
        p,
        libc::MAP_FAILED,
        "mmap: {}",
        std::io::Error::last_os_error()
    );
    p.cast()
}

fn unmap(p: *mut u8, size: usize) {
    // SAFETY: `p` came from map_anon with this size and is not used again.
    unsafe { libc::munmap(p.cast(), size) };
}

fn run(variant: Variant, size: u64, topo: &Topology) -> Result<Duration, String> {
    let len = size as usize;
    match variant {
        Variant::MmapPopulate => {
            let t = Instant::now();
            let p = map_anon(len, libc::MAP_POPULATE);
            let d = t.elapsed();
            unmap(p, len);
            Ok(d)
        }
        Variant::Memset => {
            let p = map_anon(len, 0);
            let t = Instant::now();
            // SAFETY: `p..p+len` is the mapping just made.
            unsafe { std::ptr::write_bytes(p, 0, len) };
            std::hint::black_box(p);
            let d = t.elapsed();
            unmap(p, len);
            Ok(d)
        }
        Variant::Module {
            threads,
            thp,
            hugetlb,
            touch,
        } => {
            let opts = MemoryOptions {
                total: Some(size),
                prealloc: true,
                prealloc_threads: threads,
                thp: if thp {
                    ThpChoice::Required
                } else {
                    ThpChoice::Off
                },
                hugepages: hugetlb.then_some(HugePageSize::Size2M),
                ..Default::default()
            };
            let plan = MemoryPlan::new(&opts, topo).map_err(|e| e.to_string())?;
            let method = if touch {
                MethodChoice::Touch
            } else {
                MethodChoice::Auto
            };
            let t = Instant::now();
            let backing = allocate(&plan, &[(GuestAddress(0), len)]).map_err(|e| e.to_string())?;
            let report = preallocate_with(&backing, &plan, method).map_err(|e| e.to_string())?;
            let d = t.elapsed();
            assert_eq!(report.bytes(), size);
            drop(backing);
            Ok(d)
        }
    }
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2
    }
}

/// The variants this host can run, with a line for each it cannot.
fn variants(threads: usize, size: u64, topo: &Topology) -> Vec<Variant> {
    let module = |threads, thp, hugetlb, touch| Variant::Module {
        threads,
        thp,
        hugetlb,
        touch,
    };
    let mut variants = vec![
        Variant::MmapPopulate,
        Variant::Memset,
        module(1, false, false, false),
    ];
    if threads > 1 {
        variants.push(module(threads, false, false, false));
    }
    variants.push(module(threads, false, false, true));
    if matches!(topo.thp, ThpMode::Always | ThpMode::Madvise) {
        variants.push(module(threads, true, false, false));
    } else {
        println!("THP skipped: transparent huge pages are {}", topo.thp);
    }
    let free_huge = topo
        .hugepages
        .get(&HugePageSize::Size2M)
        .map_or(0, |p| p.free);
    if free_huge >= size / (2 << 20) {
        variants.push(module(threads, false, true, false));
    } else {
        println!(
            "hugetlb skipped: {} free 2 MiB pages, {} needed (echo {} > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages)",
            free_huge,
            size / (2 << 20),
            size / (2 << 20)
        );
    }
    variants
}

fn main() {
    // Lossy: an argument that is not UTF-8 then fails to parse as a number.
    let mut args = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned());
    let size = match args.next().map(|s| parse_size(&s)) {
        None => 1 << 30,
        Some(Ok(s)) => s,
        Some(Err(e)) => {
            eprintln!("prealloc_bench: SIZE: {e}");
            std::process::exit(2);
        }
    };
    let num =
        |what: &str, default: usize, arg: Option<String>| match arg.map(|s| s.parse::<usize>()) {
            None => default,
            Some(Ok(n)) if n > 0 => n,
            _ => {
                eprintln!("prealloc_bench: {what} must be a positive number");
                std::process::exit(2);
            }
        };
    let threads = num("THREADS", 2, args.next());
    let rounds = num("ROUNDS", 5, args.next());
    if size % (2 << 20) != 0 {
        eprintln!("prealloc_bench: SIZE must be a multiple of 2 MiB");
        std::process::exit(2);
    }
    let topo = match Topology::host() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("prealloc_bench: {e}");
            std::process::exit(1);
        }
    };

    let variants = variants(threads, size, &topo);

    println!(
        "preallocating {} MiB, {rounds} rounds (+1 warm-up), host CPUs {}",
        size >> 20,
        topo.online_cpus
    );
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); variants.len()];
    for round in 0..=rounds {
        for k in 0..variants.len() {
            let i = (k + round) % variants.len();
            match run(variants[i], size, &topo) {
                Ok(d) if round > 0 => times[i].push(d),
                Ok(_) => {}
                Err(e) => {
                    eprintln!("prealloc_bench: {}: {e}", variants[i].name());
                    std::process::exit(1);
                }
            }
        }
    }

    let gib = size as f64 / (1u64 << 30) as f64;
    let base = median(&mut times[0].clone()).as_secs_f64();
    println!(
        "{:<18} {:>10} {:>12} {:>8} {:>17}",
        "variant", "median ms", "min-max ms", "GiB/s", "vs mmap-populate"
    );
    for (v, t) in variants.iter().zip(times.iter_mut()) {
        let m = median(t).as_secs_f64();
        let ms = |d: &Duration| d.as_secs_f64() * 1e3;
        let spread = format!("{:.0}-{:.0}", ms(&t[0]), ms(&t[t.len() - 1]));
        println!(
            "{:<18} {:>10.1} {:>12} {:>8.2} {:>16.2}x",
            v.name(),
            m * 1e3,
            spread,
            gib / m,
            base / m
        );
    }
}
