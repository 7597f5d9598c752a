//! What the rules look at: one [`Evidence`] gathered from a run's timeline
//! and its profile (either or both), with what each lacks left empty so a
//! rule can say which data it would have needed.

use std::path::{Path, PathBuf};

use bootscope_model::document::{read_document, DocKind, Document, DocumentError};
use bootscope_model::profile::{Profile, PROFILE_SCHEMA_NAME};
use bootscope_model::timeline::{Timeline, TIMELINE_SCHEMA_NAME};
use serde::Serialize;

use crate::error::AdviseError;

/// Whose VMM booted the guest: bootscope's `run` (its options can be
/// tried), QEMU, Cloud Hypervisor, Firecracker (fixes in their own
/// options), or one advise does not know (bootscope's terms).
pub use bootscope_model::vmm::VmmKind as Vmm;

/// Exits by reason, and where they came from.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Exits {
    pub total: u64,
    pub by_reason: Vec<ReasonExits>,
    /// Port I/O per port (all directions).
    pub pio: Vec<(u32, u64)>,
    /// `--exit-sites`: exits by the guest function that made them.
    pub sites: Option<Vec<SiteExits>>,
}

/// Exits of one reason.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReasonExits {
    pub reason: String,
    pub count: u64,
    /// Sum of exit-to-entry latencies (VMX/SVM only).
    pub latency_ns: Option<u64>,
}

/// Exits of one reason at one guest function in one phase.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SiteExits {
    pub reason: String,
    pub phase: String,
    pub function: Option<String>,
    pub count: u64,
    pub latency_ns: u64,
}

/// One initcall.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Initcall {
    pub name: String,
    pub level: String,
    /// On the document's clock (0 when unknown).
    pub start_ns: u64,
    pub duration_ns: u64,
    pub ret: i64,
}

/// The initrd.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Initrd {
    pub path: String,
    /// Mapped from its file rather than copied (`--map-initrd`).
    pub mapped: bool,
    /// `gzip`, `xz`, `zstd`, ... or `none` (a plain cpio); absent when the
    /// file could not be read.
    pub compression: Option<String>,
    pub bytes: Option<u64>,
    /// Why the file was not read (it is not a regular file, it is
    /// missing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unread: Option<String>,
    /// When the guest's kernel freed it, the initramfs unpacked (the
    /// console's `Freeing initrd memory`: a timeline's `serial: initrd
    /// freed`), on the initcalls' clock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub freed_ns: Option<u64>,
    /// Its initramfs as one uncompressed cpio archive, in bootscope's
    /// cache (made by `bootscope advise` for a compressed initrd).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpio: Option<PathBuf>,
    /// Why no such archive was made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpio_error: Option<String>,
    /// Its initramfs with only the modules the boot loaded (and what they
    /// need), in bootscope's cache (made by `bootscope advise` where the
    /// boot's loaded modules are known).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modules_cpio: Option<PathBuf>,
    /// Why no such archive was made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modules_cpio_error: Option<String>,
}

/// The timeline mark of the initramfs unpacked (vmm/src/console.rs).
pub const INITRD_FREED_MARK: &str = "serial: initrd freed";

/// The kernel file another VMM was given (QEMU's `-kernel`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct VmmKernel {
    pub path: PathBuf,
    /// `bzImage` (a setup header: a compressed payload), `elf`, or
    /// `other`; absent when the file could not be read here.
    pub format: Option<String>,
    /// The decompressed payload (an ELF vmlinux) in bootscope's kernel
    /// cache, when the command made it ([`Evidence::vmm_kernel`]).
    pub vmlinux: Option<PathBuf>,
    /// Why no vmlinux could be made of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vmlinux_error: Option<String>,
}

impl VmmKernel {
    /// The kernel given by QEMU's `-kernel` in `command`, its format read
    /// from its first bytes.
    pub fn of_qemu(command: &[String]) -> Option<Self> {
        let path = PathBuf::from(bootscope_model::argv::flag_value(command, &["-kernel"])?);
        let format = kernel_format_of(&path);
        Some(Self {
            path,
            format,
            vmlinux: None,
            vmlinux_error: None,
        })
    }

    /// Whether it is a bzImage (a compressed payload).
    pub fn is_bzimage(&self) -> bool {
        self.format.as_deref() == Some("bzImage")
    }
}

/// A kernel file's format by its first bytes: `bzImage` (the setup
/// header's `HdrS` at 0x202), `elf`, or `other`; None when unreadable.
fn kernel_format_of(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut head = Vec::with_capacity(0x206);
    std::fs::File::open(path)
        .ok()?
        .take(0x206)
        .read_to_end(&mut head)
        .ok()?;
    Some(
        if head.get(0x202..0x206) == Some(b"HdrS") {
            "bzImage"
        } else if head.starts_with(b"\x7fELF") {
            "elf"
        } else {
            "other"
        }
        .to_string(),
    )
}

/// Everything the rules can look at.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Evidence {
    /// The documents read.
    pub documents: Vec<PathBuf>,
    pub vmm: Vmm,
    /// `vmx`, `svm`, `pvm`, `none` or empty.
    pub host_kvm: String,
    /// The VMM's own command line (a profile's target), when known.
    pub vmm_command: Vec<String>,
    /// The kernel command line, when known.
    pub cmdline: Option<String>,
    pub kernel_format: Option<String>,
    /// `host` or `guest` (bzImage only).
    pub decompressed_by: Option<String>,
    pub kaslr: Option<bool>,
    pub initrd: Option<Initrd>,
    pub memory_bytes: Option<u64>,
    /// Phase name to duration, in boot order.
    pub phases: Vec<(String, u64)>,
    /// Preallocation of guest memory (`run --prealloc`).
    pub prealloc_ns: Option<u64>,
    /// Threads that preallocated guest memory, and their run time.
    pub prealloc_threads: Vec<(String, u64)>,
    pub exits: Option<Exits>,
    /// Guest page faults handled by KVM, when profiled.
    pub guest_faults: Option<u64>,
    /// `None`: not recorded (no `--initcalls`).
    pub initcalls: Option<Vec<Initcall>>,
    /// Why a recording of initcalls found none.
    pub initcalls_error: Option<String>,
    /// The VMM was inferred from the profile's command (no `target.vmm`).
    pub vmm_inferred: bool,
    /// A systemd guest's units (a timeline's `units`), when it has them.
    pub units: Option<bootscope_model::units::UnitsDoc>,
    /// QEMU's `-kernel` (a profile of QEMU).
    pub vmm_kernel: Option<VmmKernel>,
    /// The modules the guest's kernel had loaded, by name, as read from
    /// its memory (a profile's exit sites, or `guest_read`); `None`: not
    /// read.
    pub guest_modules: Option<Vec<String>>,
}

impl Evidence {
    /// What the documents named but `advise` did not read, and why: one
    /// line each.
    pub fn notes(&self) -> Vec<String> {
        let mut notes: Vec<String> = self
            .initrd
            .iter()
            .filter_map(|i| {
                let why = i.unread.as_ref()?;
                let why = bootscope_model::text::printable(why);
                Some(format!("the timeline's initrd was not read: {why}"))
            })
            .collect();
        if self.vmm == Vmm::Other {
            notes.push("the profile does not say which VMM ran, and its command is not QEMU, Cloud Hypervisor, Firecracker or bootscope run: VMM options are given in bootscope run's terms".into());
        } else if self.vmm_inferred && self.vmm != Vmm::Bootscope {
            notes.push(format!(
                "the profile does not record its VMM (target.vmm): {} inferred from its command",
                self.vmm.name()
            ));
        }
        notes
    }

    /// The duration of phase `name`.
    pub fn phase_ns(&self, name: &str) -> Option<u64> {
        self.phases.iter().find(|(n, _)| n == name).map(|(_, d)| *d)
    }

    /// The kernel command line's words.
    pub fn cmdline_words(&self) -> Vec<&str> {
        self.cmdline
            .as_deref()
            .map(|c| c.split_whitespace().collect())
            .unwrap_or_default()
    }

    /// Whether the kernel command line has `word` (or `word=...` when
    /// `word` has no `=`).
    pub fn cmdline_has(&self, word: &str) -> bool {
        self.cmdline_words().iter().any(|w| {
            *w == word || (!word.contains('=') && w.split_once('=').is_some_and(|(k, _)| k == word))
        })
    }

    /// Reads one or two documents: a timeline and/or a profile of one boot.
    /// Each is read by the model's document reader, as a bounded stream by
    /// the input rules ([`bootscope_model::document::read_document`]).
    pub fn read(paths: &[PathBuf]) -> Result<Self, AdviseError> {
        let mut timeline = None;
        let mut profile = None;
        for path in paths {
            let wrong = |problem: String| AdviseError::WrongDocument {
                path: path.clone(),
                problem,
            };
            match read_document(path, &[DocKind::Timeline, DocKind::Profile]) {
                Ok(Document::Timeline(t)) if timeline.is_none() => {
                    timeline = Some((path.clone(), *t));
                }
                Ok(Document::Profile(p)) if profile.is_none() => {
                    profile = Some((path.clone(), *p));
                }
                Ok(doc) => {
                    return Err(wrong(format!(
                        "a second {} document: give at most one timeline and one profile, of the same boot",
                        doc.kind().schema()
                    )))
                }
                Err(DocumentError::NotJson(source)) => {
                    return Err(AdviseError::NotJson {
                        path: path.clone(),
                        source,
                    })
                }
                Err(DocumentError::Read(source)) => return Err(AdviseError::Document { source }),
                Err(DocumentError::Schema { found }) => {
                    return Err(wrong(format!(
                        "its \"schema\" is {}, not {TIMELINE_SCHEMA_NAME} or {PROFILE_SCHEMA_NAME}",
                        found.map_or_else(|| "missing".into(), |s| format!("{s:?}"))
                    )))
                }
                Err(e) => return Err(wrong(e.to_string())),
            }
        }
        let mut ev = Evidence::default();
        if let Some((path, p)) = &profile {
            ev.documents.push(path.clone());
            ev.add_profile(p);
        }
        if let Some((path, t)) = &timeline {
            ev.documents.push(path.clone());
            ev.add_timeline(t);
        }
        if ev.documents.is_empty() {
            return Err(AdviseError::Usage(
                "give a timeline (bootscope run --timeline FILE) or a profile (bootscope profile --output FILE)".into(),
            ));
        }
        Ok(ev)
    }

    /// Adds what a timeline says (it wins over a profile where both do).
    pub fn add_timeline(&mut self, t: &Timeline) {
        self.vmm = Vmm::Bootscope;
        if !t.host_kvm.is_empty() {
            self.host_kvm.clone_from(&t.host_kvm);
        }
        if let Some(g) = &t.guest {
            if !g.cmdline.is_empty() {
                self.cmdline = Some(g.cmdline.clone());
            }
            if !g.kernel_format.is_empty() {
                self.kernel_format = Some(g.kernel_format.clone());
            }
            if let Some(kb) = &g.kernel_boot {
                self.decompressed_by = Some(kb.decompressed_by.clone());
                self.kaslr = kb.kaslr;
            }
            self.memory_bytes = g.memory_bytes.or(self.memory_bytes);
            if let Some(path) = &g.initrd {
                let mut initrd =
                    inspect_initrd(Path::new(path), g.initrd_mapped_from_file.unwrap_or(false));
                initrd.freed_ns = freed_at(
                    t.marks.iter().map(|m| (m.name.as_str(), m.t_ns, m.value)),
                    t.initcalls.as_ref(),
                );
                self.initrd = Some(initrd);
            }
        }
        self.phases = t
            .phases
            .iter()
            .map(|p| (p.name.clone(), p.end_ns.saturating_sub(p.start_ns)))
            .collect();
        self.prealloc_ns = t.memory.as_ref().and_then(|m| m.elapsed_ns);
        self.units = t.units.clone().filter(|u| u.error.is_none());
        if let Some(ic) = &t.initcalls {
            self.add_initcalls(ic);
        }
    }

    /// Adds the initcalls of a boot (a timeline's, or those read from
    /// another VMM's guest memory into a profile).
    fn add_initcalls(&mut self, ic: &bootscope_model::initcalls::InitcallsDoc) {
        self.initcalls_error.clone_from(&ic.error);
        self.initcalls = Some(
            ic.initcalls
                .iter()
                .map(|i| Initcall {
                    name: i.name.clone(),
                    level: i.level.clone(),
                    start_ns: i.start_ns,
                    duration_ns: i.duration_ns,
                    ret: i.ret,
                })
                .collect(),
        );
    }

    /// Adds what a profile says.
    pub fn add_profile(&mut self, p: &Profile) {
        self.vmm_inferred = p.target.vmm.is_none();
        self.vmm = match &p.target.vmm {
            _ if p.target.kind == "self" => Vmm::Bootscope,
            Some(v) => v.kind,
            None => bootscope_model::vmm::kind_of(&p.target.command),
        };
        self.host_kvm.clone_from(&p.host.kvm);
        self.vmm_command.clone_from(&p.target.command);
        if self.vmm == Vmm::Qemu {
            self.vmm_kernel = VmmKernel::of_qemu(&p.target.command);
        }
        if self.initrd.is_none() {
            self.initrd = vmm_initrd(self.vmm, p);
        }
        if self.cmdline.is_none() {
            self.cmdline = p
                .target
                .vmm
                .as_ref()
                .and_then(|v| v.cmdline.clone())
                .or_else(|| cmdline_from_command(&p.target.command));
        }
        if self.phases.is_empty() {
            self.phases = p
                .phases
                .iter()
                .map(|ph| (ph.name.clone(), ph.end_ns.saturating_sub(ph.start_ns)))
                .collect();
        }
        self.prealloc_threads = p
            .threads
            .iter()
            .filter(|t| t.role == "prealloc")
            .map(|t| (t.name.clone(), t.run_ns))
            .collect();
        self.guest_faults = Some(p.page_faults.guest_total);
        // What the profile read of the guest (`profile --initcalls`, the
        // units of its disk), where a timeline gave none.
        if self.initcalls.is_none() {
            if let Some(ic) = p.guest_read.as_ref().and_then(|g| g.initcalls.as_ref()) {
                self.add_initcalls(ic);
            }
        }
        if self.units.is_none() {
            self.units = p.units.clone().filter(|u| u.error.is_none());
        }
        if self.guest_modules.is_none() {
            let own = p.exits.sites.as_ref().and_then(|s| s.symbols.as_ref());
            let read = p.guest_read.as_ref().and_then(|g| g.modules.as_ref());
            self.guest_modules = own
                .map(|s| &s.modules)
                .filter(|m| !m.is_empty())
                .or(read.map(|r| &r.modules))
                .map(|m| m.iter().map(|m| m.name.clone()).collect());
        }
        let e = &p.exits;
        if e.source.is_empty() && e.total == 0 {
            return;
        }
        let mut pio: Vec<(u32, u64)> = Vec::new();
        for row in &e.pio {
            match pio.iter_mut().find(|(port, _)| *port == row.port) {
                Some((_, n)) => *n += row.count,
                None => pio.push((row.port, row.count)),
            }
        }
        self.exits = Some(Exits {
            total: e.total,
            by_reason: e
                .by_reason
                .iter()
                .map(|r| ReasonExits {
                    reason: r.reason.clone(),
                    count: r.count,
                    latency_ns: r.latency_total_ns,
                })
                .collect(),
            pio,
            sites: e.sites.as_ref().map(|s| {
                s.sites
                    .iter()
                    .map(|r| SiteExits {
                        reason: r.reason.clone(),
                        phase: r.phase.clone(),
                        function: r.function.clone(),
                        count: r.count,
                        latency_ns: r.latency_total_ns,
                    })
                    .collect()
            }),
        });
    }
}

/// The kernel command line in a VMM's own command line: QEMU's `-append`,
/// Cloud Hypervisor's and bootscope's `--cmdline`, Firecracker's
/// `boot_args` ([`bootscope_model::vmm::kernel_cmdline_of`]).
pub fn cmdline_from_command(command: &[String]) -> Option<String> {
    match bootscope_model::vmm::kernel_cmdline_of(command) {
        Ok(Some(c)) => Some(c),
        // A VMM advise does not know: the usual spellings.
        _ => bootscope_model::argv::flag_value(command, &["-append", "--cmdline"])
            .map(str::to_string),
    }
}

/// Compression of a file by its first bytes: what the kernel's
/// `unpack_to_rootfs` recognizes (lib/decompress.c's magic table).
pub fn compression_of(head: &[u8]) -> &'static str {
    const MAGIC: [(&[u8], &str); 8] = [
        (b"070701", "none"),
        (b"070702", "none"),
        (&[0x1f, 0x8b], "gzip"),
        (&[0xfd, b'7', b'z', b'X', b'Z', 0], "xz"),
        (&[0x28, 0xb5, 0x2f, 0xfd], "zstd"),
        (&[0x02, 0x21, 0x4c, 0x18], "lz4"),
        (b"BZh", "bzip2"),
        (&[0x89, b'L', b'Z', b'O'], "lzo"),
    ];
    MAGIC.iter().find(|(m, _)| head.starts_with(m)).map_or(
        if head.first() == Some(&0x5d) {
            "lzma"
        } else {
            "unknown"
        },
        |(_, n)| n,
    )
}

/// The initrd another VMM was given (QEMU's `-initrd`, Cloud Hypervisor's
/// `--initramfs`), and when its guest freed it.
fn vmm_initrd(vmm: Vmm, p: &Profile) -> Option<Initrd> {
    let flag: &[&str] = match vmm {
        Vmm::Qemu => &["-initrd"],
        Vmm::CloudHypervisor => &["--initramfs"],
        _ => return None,
    };
    let args = p.target.command.get(1..).unwrap_or_default();
    let path = bootscope_model::argv::flag_value(args, flag)?;
    let mut initrd = inspect_initrd(Path::new(path), false);
    initrd.freed_ns = freed_at(
        p.marks.iter().map(|m| (m.name.as_str(), m.t_ns, m.value)),
        p.guest_read.as_ref().and_then(|g| g.initcalls.as_ref()),
    );
    Some(initrd)
}

/// When the guest's kernel freed its initrd, on the initcalls' clock: the
/// console line's own printk timestamp moved by the initcalls' alignment
/// (the line reaches a slow console later), else when the line was read.
fn freed_at<'a>(
    mut marks: impl Iterator<Item = (&'a str, u64, Option<u64>)>,
    initcalls: Option<&bootscope_model::initcalls::InitcallsDoc>,
) -> Option<u64> {
    let (_, read_ns, logged) = marks.find(|(name, _, _)| *name == INITRD_FREED_MARK)?;
    let offset = initcalls
        .and_then(|ic| ic.clock.as_ref())
        .map(|c| c.offset_ns);
    match (logged, offset) {
        (Some(guest), Some(off)) => u64::try_from(i128::from(guest) + i128::from(off))
            .ok()
            .filter(|&t| t <= read_ns)
            .or(Some(read_ns)),
        _ => Some(read_ns),
    }
}

/// What the initrd a timeline names is: its size and compression, read
/// from its first bytes if it is a regular file
/// ([`bootscope_model::input::open_named`]: a device, FIFO or socket is
/// not opened, whatever the timeline says).
fn inspect_initrd(path: &Path, mapped: bool) -> Initrd {
    use std::io::Read;
    let mut head = [0u8; 8];
    let read = bootscope_model::input::open_named(path)
        .map_err(|e| e.to_string())
        .and_then(|(mut f, meta)| {
            let n = f.read(&mut head).map_err(|e| e.to_string())?;
            Ok((meta.len(), n))
        });
    let (compression, bytes, unread) = match read {
        Ok((len, n)) => (
            Some(compression_of(&head[..n]).to_string()),
            Some(len),
            None,
        ),
        Err(why) => (None, None, Some(why)),
    };
    Initrd {
        path: path.display().to_string(),
        mapped,
        compression,
        bytes,
        unread,
        ..Initrd::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compression_by_magic() {
        assert_eq!(compression_of(b"070701000"), "none");
        assert_eq!(compression_of(&[0x1f, 0x8b, 8, 0]), "gzip");
        assert_eq!(compression_of(&[0xfd, b'7', b'z', b'X', b'Z', 0, 0]), "xz");
        assert_eq!(compression_of(&[0x28, 0xb5, 0x2f, 0xfd]), "zstd");
        assert_eq!(compression_of(b"xyz"), "unknown");
    }

    #[test]
    fn cmdline_from_vmm_commands() {
        let words = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        assert_eq!(
            cmdline_from_command(&words("qemu -kernel k -append quiet")).as_deref(),
            Some("quiet")
        );
        assert_eq!(
            cmdline_from_command(&words("ch --cmdline=console=hvc0")).as_deref(),
            Some("console=hvc0")
        );
        assert_eq!(cmdline_from_command(&words("firecracker --no-api")), None);
    }

    #[test]
    fn cmdline_words_match_keys() {
        let ev = Evidence {
            cmdline: Some("console=ttyS0 quiet 8250.nr_uarts=1".into()),
            ..Evidence::default()
        };
        assert!(ev.cmdline_has("quiet"));
        assert!(ev.cmdline_has("8250.nr_uarts"));
        assert!(ev.cmdline_has("8250.nr_uarts=1"));
        assert!(!ev.cmdline_has("8250.nr_uarts=4"));
        assert!(!ev.cmdline_has("loglevel"));
    }

    /// A profile of another VMM carries the initcalls read from its
    /// guest's memory; a timeline's win where both have them.
    #[test]
    fn a_profiles_guest_initcalls_are_evidence() {
        use bootscope_model::initcalls::{Initcall as Call, InitcallsDoc};
        let doc = |name: &str| InitcallsDoc {
            initcalls: vec![Call {
                name: name.into(),
                level: "device".into(),
                duration_ns: 5_000_000,
                ..Call::default()
            }],
            ..InitcallsDoc::default()
        };
        let p = Profile {
            guest_read: Some(bootscope_model::guest_read::GuestRead {
                initcalls: Some(doc("cmos_init")),
                ..Default::default()
            }),
            ..Profile::default()
        };
        let mut ev = Evidence::default();
        ev.add_profile(&p);
        let calls = ev.initcalls.as_ref().unwrap();
        assert_eq!(
            (calls[0].name.as_str(), calls[0].duration_ns),
            ("cmos_init", 5_000_000)
        );
        let t = Timeline {
            initcalls: Some(doc("serial8250_init")),
            ..Timeline::default()
        };
        let mut ev = Evidence::default();
        ev.add_timeline(&t);
        ev.add_profile(&p);
        assert_eq!(ev.initcalls.unwrap()[0].name, "serial8250_init");
    }

    /// QEMU's `-initrd` is the profile's initrd, freed when its kernel
    /// logged it (the console line's printk stamp on the initcalls' clock).
    #[test]
    fn another_vmms_initrd_and_its_freeing_are_evidence() {
        use bootscope_model::initcalls::{ClockAlignment, InitcallsDoc};
        use bootscope_model::profile::{Mark, MarkSource};
        let dir = tempfile::tempdir().unwrap();
        let initrd = dir.path().join("initrd.img");
        std::fs::write(&initrd, [0x1f, 0x8b, 8, 0]).unwrap();
        let mut p = Profile::default();
        p.target.command = ["qemu-system-x86_64", "-kernel", "k", "-initrd"]
            .iter()
            .map(|s| s.to_string())
            .chain([initrd.display().to_string()])
            .collect();
        p.marks = vec![Mark {
            name: INITRD_FREED_MARK.into(),
            source: MarkSource::Serial,
            t_ns: 9_000_000_000,
            value: Some(2_000_000_000),
            ..Mark::default()
        }];
        p.guest_read = Some(bootscope_model::guest_read::GuestRead {
            initcalls: Some(InitcallsDoc {
                clock: Some(ClockAlignment {
                    offset_ns: 1_500_000_000,
                    ..ClockAlignment::default()
                }),
                ..InitcallsDoc::default()
            }),
            ..Default::default()
        });
        let mut ev = Evidence::default();
        ev.add_profile(&p);
        assert_eq!(ev.vmm, Vmm::Qemu);
        let i = ev.initrd.as_ref().unwrap();
        assert_eq!(i.compression.as_deref(), Some("gzip"));
        assert_eq!(i.freed_ns, Some(3_500_000_000));
        // Without the alignment: when the line was read.
        p.guest_read = None;
        let mut ev = Evidence::default();
        ev.add_profile(&p);
        assert_eq!(ev.initrd.unwrap().freed_ns, Some(9_000_000_000));
        // Firecracker's is in its configuration file: none here.
        p.target.command[0] = "firecracker".into();
        let mut ev = Evidence::default();
        ev.add_profile(&p);
        assert!(ev.initrd.is_none());
    }
}
