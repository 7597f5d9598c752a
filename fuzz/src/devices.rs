//! The guest's port and MMIO accesses, any address, width, value and
//! order, through the same exit handler the vCPU loop calls.

use std::sync::Arc;

use bootscope_vmm::console::{ConsoleSink, MilestonePattern};
use bootscope_vmm::devices::Devices;
use bootscope_vmm::exit::{handle_exit, ExitAction};
use bootscope_vmm::layout;
use bootscope_vmm::pci;
use bootscope_vmm::rtc;
use bootscope_vmm::timeline::{Clock, Recorder, StopReason};
use bootscope_vmm::x86::acpi;
use kvm_ioctls::VcpuExit;
use vmm_sys_util::eventfd::EventFd;

/// Every port a device listens on, and the ports next to each range.
const PORTS: [u16; 36] = [
    0x3f7,
    0x3f8,
    0x3f9,
    0x3fa,
    0x3fb,
    0x3fc,
    0x3fd,
    0x3fe,
    0x3ff,
    0x400,
    layout::I8042_DATA_PORT,
    layout::I8042_DATA_PORT + 1,
    layout::I8042_COMMAND_PORT,
    layout::I8042_COMMAND_PORT + 1,
    rtc::INDEX_PORT - 1,
    rtc::INDEX_PORT,
    rtc::DATA_PORT,
    rtc::DATA_PORT + 1,
    layout::DEBUG_PORT,
    layout::DEBUG_PORT + 1,
    layout::BOOT_TIME_PORT,
    layout::BOOT_TIME_PORT + 1,
    acpi::SLEEP_CONTROL_PORT - 1,
    acpi::SLEEP_CONTROL_PORT,
    acpi::SLEEP_STATUS_PORT,
    acpi::RESET_PORT,
    acpi::RESET_PORT + 1,
    layout::RESET_CONTROL_PORT,
    layout::RESET_CONTROL_PORT + 1,
    pci::CONFIG_ADDRESS_PORT + 2,
    pci::CONFIG_ADDRESS_PORT + 3,
    pci::CONFIG_DATA_PORT,
    pci::CONFIG_DATA_PORT + 1,
    pci::CONFIG_DATA_PORT + 2,
    pci::CONFIG_DATA_PORT + 3,
    pci::CONFIG_DATA_PORT + 4,
];

/// The boot timer, its neighbours and the edges of the MMIO space.
const MMIO: [u64; 8] = [
    layout::BOOT_TIMER_MMIO,
    layout::BOOT_TIMER_MMIO + 1,
    layout::BOOT_TIMER_MMIO - 4,
    layout::MMIO_GAP_START,
    layout::IOAPIC_DEFAULT_BASE,
    layout::APIC_DEFAULT_BASE,
    layout::MMIO_GAP_END - 8,
    u64::MAX - 7,
];

/// Port accesses are 1, 2 or 4 bytes wide, MMIO accesses up to 8.
const PIO_WIDTHS: [usize; 4] = [1, 2, 4, 1];
const MMIO_WIDTHS: [usize; 4] = [1, 2, 4, 8];

/// Reads little-endian fields off the front of the input; past its end
/// everything reads as zero.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let n = self.0.len().min(N);
        out[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        out
    }
}

/// Input: one flags byte (bit 0: the guest has ACPI), then accesses, each
/// an op byte (bits 0-1: port read, port write, MMIO read, MMIO write;
/// bits 2-3: width; bit 4: address from the table of device addresses
/// (one index byte) rather than raw (2 bytes for a port, 8 for MMIO); bits
/// 5-7: vCPU), the address, and for writes the value (width bytes).
///
/// Checks: nothing panics; reads and MMIO never stop the guest; a write
/// stops it only for a power request or a halt; absent ports and MMIO read
/// as all ones, the ACPI registers as zero, the reset control register as
/// its `SYS_RST` bit, the PCI address register as its latched bits (a
/// model of it is kept) and configuration data as all ones except the host
/// bridge's at 00:00.0; every marker write is counted.
pub fn port_and_mmio_accesses(data: &[u8]) {
    let mut input = Input(data);
    let [flags] = input.bytes::<1>();
    let recorder = Arc::new(Recorder::new(Clock::start()));
    let irq = EventFd::new(libc::EFD_NONBLOCK).expect("eventfd for the serial IRQ");
    let console = ConsoleSink::new(
        Box::new(std::io::sink()),
        MilestonePattern::defaults(),
        recorder.clone(),
    );
    let devices = Devices::new(irq, console, recorder, flags & 1 != 0);
    let (mut debug_port, mut boot_time_port, mut boot_timer) = (0u64, 0u64, 0u64);
    // The PCI address register as the guest's writes leave it.
    let mut pci_address = 0u32;
    while !input.0.is_empty() {
        let [op] = input.bytes::<1>();
        let width = usize::from((op >> 2) & 3);
        let from_table = op & 0x10 != 0;
        let vcpu = u32::from(op >> 5);
        let mut value = [0u8; 8];
        match op & 3 {
            kind @ (0 | 1) => {
                let port = if from_table {
                    PORTS[usize::from(input.bytes::<1>()[0]) % PORTS.len()]
                } else {
                    u16::from_le_bytes(input.bytes::<2>())
                };
                let value = &mut value[..PIO_WIDTHS[width]];
                if kind == 0 {
                    let action = handle_exit(VcpuExit::IoIn(port, value), &devices, vcpu);
                    assert_eq!(action, ExitAction::Continue, "port {port:#x} read stopped");
                    if pci::owns(port) && !(port == layout::RESET_CONTROL_PORT && value.len() == 1)
                    {
                        check_pci_read(port, value, pci_address);
                    } else {
                        check_port_read(port, value);
                    }
                } else {
                    value.copy_from_slice(&input.bytes::<8>()[..value.len()]);
                    if port == layout::DEBUG_PORT {
                        debug_port += 1;
                    }
                    if port == layout::BOOT_TIME_PORT {
                        boot_time_port += 1;
                    }
                    if port == pci::CONFIG_ADDRESS_PORT {
                        if let Ok(word) = <[u8; 4]>::try_from(&*value) {
                            pci_address = u32::from_le_bytes(word) & 0x80ff_fffc;
                        }
                    }
                    let action = handle_exit(VcpuExit::IoOut(port, value), &devices, vcpu);
                    check_write_action(&action, port);
                }
            }
            kind => {
                let addr = if from_table {
                    MMIO[usize::from(input.bytes::<1>()[0]) % MMIO.len()]
                } else {
                    u64::from_le_bytes(input.bytes::<8>())
                };
                let value = &mut value[..MMIO_WIDTHS[width]];
                let action = if kind == 2 {
                    let a = handle_exit(VcpuExit::MmioRead(addr, value), &devices, vcpu);
                    assert!(
                        value.iter().all(|b| *b == 0xff),
                        "MMIO {addr:#x} read {value:?}"
                    );
                    a
                } else {
                    value.copy_from_slice(&input.bytes::<8>()[..value.len()]);
                    if addr == layout::BOOT_TIMER_MMIO && value[0] == layout::BOOT_TIMER_MAGIC {
                        boot_timer += 1;
                    }
                    handle_exit(VcpuExit::MmioWrite(addr, value), &devices, vcpu)
                };
                assert_eq!(action, ExitAction::Continue, "MMIO {addr:#x} stopped");
            }
        }
    }
    let counts = devices.marker_counts();
    assert_eq!(counts.debug_port_total(), debug_port);
    assert_eq!(counts.boot_time_port.values().sum::<u64>(), boot_time_port);
    assert_eq!(counts.boot_timer, boot_timer);
}

fn check_port_read(port: u16, value: &[u8]) {
    let serial = (layout::SERIAL_PORT_BASE..layout::SERIAL_PORT_BASE + 8).contains(&port);
    let byte_wide = [
        layout::I8042_DATA_PORT,
        layout::I8042_COMMAND_PORT,
        rtc::INDEX_PORT,
        rtc::DATA_PORT,
    ]
    .contains(&port);
    if [
        acpi::SLEEP_CONTROL_PORT,
        acpi::SLEEP_STATUS_PORT,
        acpi::RESET_PORT,
    ]
    .contains(&port)
    {
        assert!(
            value.iter().all(|b| *b == 0),
            "ACPI port {port:#x} read {value:?}"
        );
    } else if port == layout::RESET_CONTROL_PORT && value.len() == 1 {
        assert_eq!(
            value[0] & !layout::RESET_CONTROL_SYS_RST,
            0,
            "reset control register read {value:?}"
        );
    } else if !((serial || byte_wide) && value.len() == 1) {
        assert!(
            value.iter().all(|b| *b == 0xff),
            "absent port {port:#x} (or a wide access) read {value:?}"
        );
    }
}

/// A read of the PCI configuration mechanism: the address register (32-bit)
/// reads back what was latched; configuration data reads all ones unless
/// the enabled address is the host bridge's (00:00.0); anything else reads
/// all ones.
fn check_pci_read(port: u16, value: &[u8], address: u32) {
    if port == pci::CONFIG_ADDRESS_PORT && value.len() == 4 {
        assert_eq!(
            u32::from_le_bytes(value.try_into().unwrap()),
            address,
            "PCI address register read back"
        );
        return;
    }
    let bridge = address & 0x8000_0000 != 0 && (address >> 8) & 0xffff == 0;
    if port < pci::CONFIG_DATA_PORT || !bridge {
        assert!(
            value.iter().all(|b| *b == 0xff),
            "PCI port {port:#x} read {value:?} with address {address:#x}"
        );
    }
}

fn check_write_action(action: &ExitAction, port: u16) {
    match action {
        ExitAction::Continue => {}
        ExitAction::Stop(StopReason::GuestHalt, _) => {}
        ExitAction::Stop(StopReason::AcpiPowerOff | StopReason::AcpiReset, _) => {}
        ExitAction::Stop(StopReason::I8042Reset | StopReason::Cf9Reset, _) => {}
        other => panic!("a write to port {port:#x} gave {other:?}"),
    }
}
