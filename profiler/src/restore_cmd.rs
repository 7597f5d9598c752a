//! Which command lines restore a VM from a snapshot: the fault-tail
//! collector is on by default for them (`bootscope run --restore`,
//! `cloud-hypervisor --restore source_url=...`, QEMU's `-incoming`).
//! Firecracker loads a snapshot through its API, which no command line
//! shows: name the collector (`--collect ...,tail`) there.

use bootscope_model::argv::flag_value;
use bootscope_model::fault_tail::RestoreOf;

/// The restore a command line asks for, if any: the VMM and the memory
/// restore mode it names (its default where it names none).
pub fn restore_of<S: AsRef<str>>(command: &[S]) -> Option<RestoreOf> {
    let program = command.first()?.as_ref();
    let base = program.rsplit('/').next().unwrap_or(program);
    let args = &command[1..];
    let of = |vmm: &str, mode: Option<&str>| RestoreOf {
        vmm: vmm.to_string(),
        memory_mode: mode.map(str::to_string),
    };
    if base.starts_with("cloud-hypervisor") {
        let spec = flag_value(args, &["--restore"])?;
        // memory_restore_mode=copy|ondemand; copy when not given.
        let mode = spec
            .split(',')
            .find_map(|kv| kv.strip_prefix("memory_restore_mode="))
            .unwrap_or("copy");
        return Some(of("cloud-hypervisor", Some(mode)));
    }
    if base.starts_with("bootscope") {
        let run = args.first().map(AsRef::as_ref) == Some("run");
        flag_value(args, &["--restore"]).filter(|_| run)?;
        let mode = flag_value(args, &["--memory-restore"]).unwrap_or("copy");
        return Some(of("bootscope", Some(mode)));
    }
    if base.starts_with("qemu-system") {
        flag_value(args, &["-incoming"])?;
        return Some(of("qemu", None));
    }
    None
}

/// Names the restore in a profile's fault tail from its target's command
/// line (`fault_tail.restore`).
pub fn note_restore(profile: &mut crate::profile::Profile) {
    let restore = restore_of(&profile.target.command);
    if let Some(t) = profile.fault_tail.as_mut() {
        t.restore = restore;
    }
}

/// [`note_restore`] on a profile taken by value.
pub fn noted(mut profile: crate::profile::Profile) -> crate::profile::Profile {
    note_restore(&mut profile);
    profile
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(cmd: &str) -> Option<RestoreOf> {
        let v: Vec<&str> = cmd.split_whitespace().collect();
        restore_of(&v)
    }

    #[test]
    fn restores_are_told_from_boots() {
        let ch = of(
            "/usr/bin/cloud-hypervisor --restore source_url=file:///s,memory_restore_mode=ondemand",
        )
        .unwrap();
        assert_eq!(
            (ch.vmm.as_str(), ch.memory_mode.as_deref()),
            ("cloud-hypervisor", Some("ondemand"))
        );
        let ch = of("cloud-hypervisor --restore=source_url=file:///s").unwrap();
        assert_eq!(ch.memory_mode.as_deref(), Some("copy"));
        let b = of("bootscope run --restore /s --memory-restore mmap").unwrap();
        assert_eq!(
            (b.vmm.as_str(), b.memory_mode.as_deref()),
            ("bootscope", Some("mmap"))
        );
        assert_eq!(
            of("./target/release/bootscope run --restore /s")
                .unwrap()
                .memory_mode
                .as_deref(),
            Some("copy")
        );
        assert_eq!(
            of("qemu-system-x86_64 -incoming exec:cat\\ s").unwrap().vmm,
            "qemu"
        );
        assert!(of("cloud-hypervisor --kernel k").is_none());
        assert!(of("bootscope run --kernel k").is_none());
        assert!(of("bootscope profile --restore x").is_none());
        assert!(of("qemu-system-x86_64 -kernel k").is_none());
        assert!(restore_of::<&str>(&[]).is_none());
    }
}
