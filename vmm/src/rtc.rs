//! The PC's CMOS real-time clock (MC146818) at ports 0x70/0x71, reporting the
//! host's UTC time.
//!
//! Why it is here: a Linux guest reads the wall clock from it at boot, and
//! its `rtc_cmos` driver probes it. On a bus where the ports read as all
//! ones the "update in progress" bit never clears, and the kernel spins on it
//! for seconds (20,000 port exits, ~6 s of a nested boot) before printing
//! "rtc_cmos: broken or not accessible". rust-vmm's vm-superio only has the
//! Arm PL031, so this small device is written here.
//!
//! What it does: time and date registers (BCD or binary, 12 or 24 hours, as
//! status register B says), status A with UIP clear, status D saying the
//! time is valid, the century at 0x32 (named in the FADT), and the rest of
//! the 128 bytes as CMOS RAM. Writes to the time registers are kept as an
//! offset from the host's clock, so a guest that sets the time reads it back
//! running. No interrupts are raised (no periodic, alarm or update IRQ).

use std::time::{SystemTime, UNIX_EPOCH};

pub mod persist;

/// Index port (bit 7 is the NMI mask, ignored).
pub const INDEX_PORT: u16 = 0x70;
/// Data port.
pub const DATA_PORT: u16 = 0x71;
/// The century register's index (the FADT's CENTURY field).
pub const CENTURY_REG: u8 = 0x32;

const SECONDS: u8 = 0x00;
const MINUTES: u8 = 0x02;
const HOURS: u8 = 0x04;
const WEEKDAY: u8 = 0x06;
const DAY: u8 = 0x07;
const MONTH: u8 = 0x08;
const YEAR: u8 = 0x09;
const STATUS_A: u8 = 0x0a;
const STATUS_B: u8 = 0x0b;
const STATUS_C: u8 = 0x0c;
const STATUS_D: u8 = 0x0d;
/// Status B: binary (not BCD) data mode.
const B_BINARY: u8 = 1 << 2;
/// Status B: 24-hour mode.
const B_24H: u8 = 1 << 1;
/// Status D: valid RAM and time.
const D_VRT: u8 = 1 << 7;
/// Status A: 32.768 kHz time base, 1024 Hz rate (the power-on value).
const A_DEFAULT: u8 = 0x26;

/// A broken-down UTC time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DateTime {
    pub year: i64,
    pub month: u8,
    pub day: u8,
    pub hour: u8,
    pub minute: u8,
    pub second: u8,
    /// 1 = Sunday, as the RTC counts.
    pub weekday: u8,
}

impl DateTime {
    /// From seconds since the Unix epoch (proleptic Gregorian calendar).
    pub fn from_unix(secs: i64) -> Self {
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        // Howard Hinnant's civil_from_days.
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u8;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
        let year = yoe + era * 400 + i64::from(month <= 2);
        Self {
            year,
            month,
            day,
            hour: (rem / 3600) as u8,
            minute: (rem / 60 % 60) as u8,
            second: (rem % 60) as u8,
            // 1970-01-01 was a Thursday (5 when Sunday is 1).
            weekday: ((days + 4).rem_euclid(7) + 1) as u8,
        }
    }

    /// Seconds since the Unix epoch.
    pub fn to_unix(&self) -> i64 {
        // Howard Hinnant's days_from_civil.
        let y = self.year - i64::from(self.month <= 2);
        let era = y.div_euclid(400);
        let yoe = y.rem_euclid(400);
        let m = i64::from(self.month);
        let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(self.day) - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        let days = era * 146_097 + doe - 719_468;
        days * 86_400
            + i64::from(self.hour) * 3600
            + i64::from(self.minute) * 60
            + i64::from(self.second)
    }
}

fn host_unix_now() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    }
}

fn to_bcd(v: u8) -> u8 {
    ((v / 10) << 4) | (v % 10)
}

fn from_bcd(v: u8) -> u8 {
    (v >> 4) * 10 + (v & 0x0f)
}

/// The CMOS RTC.
pub struct CmosRtc {
    index: u8,
    ram: [u8; 128],
    /// Guest time minus host time, in seconds (the guest may set the clock).
    offset: i64,
    /// The host's clock (a function so tests can fix it).
    now: fn() -> i64,
}

impl Default for CmosRtc {
    fn default() -> Self {
        Self::with_clock(host_unix_now)
    }
}

impl CmosRtc {
    /// An RTC reading `now()` (seconds since the epoch) as the host time.
    pub fn with_clock(now: fn() -> i64) -> Self {
        let mut ram = [0u8; 128];
        ram[STATUS_A as usize] = A_DEFAULT;
        ram[STATUS_B as usize] = B_24H;
        ram[STATUS_D as usize] = D_VRT;
        Self {
            index: 0,
            ram,
            offset: 0,
            now,
        }
    }

    fn encode(&self, v: u8) -> u8 {
        if self.ram[STATUS_B as usize] & B_BINARY != 0 {
            v
        } else {
            to_bcd(v)
        }
    }

    fn decode(&self, v: u8) -> u8 {
        if self.ram[STATUS_B as usize] & B_BINARY != 0 {
            v
        } else {
            from_bcd(v)
        }
    }

    fn current(&self) -> DateTime {
        DateTime::from_unix((self.now)() + self.offset)
    }

    fn read_register(&mut self, reg: u8) -> u8 {
        let t = self.current();
        let b = self.ram[STATUS_B as usize];
        match reg {
            SECONDS => self.encode(t.second),
            MINUTES => self.encode(t.minute),
            HOURS if b & B_24H != 0 => self.encode(t.hour),
            HOURS => {
                let h12 = match t.hour % 12 {
                    0 => 12,
                    h => h,
                };
                self.encode(h12) | if t.hour >= 12 { 0x80 } else { 0 }
            }
            WEEKDAY => self.encode(t.weekday),
            DAY => self.encode(t.day),
            MONTH => self.encode(t.month),
            YEAR => self.encode(t.year.rem_euclid(100) as u8),
            CENTURY_REG => self.encode(t.year.div_euclid(100).clamp(0, 99) as u8),
            // Update in progress is never set: reads are always consistent.
            STATUS_A => self.ram[STATUS_A as usize] & 0x7f,
            STATUS_C => std::mem::take(&mut self.ram[STATUS_C as usize]),
            STATUS_D => D_VRT,
            r => self.ram[r as usize],
        }
    }

    fn write_register(&mut self, reg: u8, value: u8) {
        let time_field = matches!(
            reg,
            SECONDS | MINUTES | HOURS | DAY | MONTH | YEAR | CENTURY_REG
        );
        if !time_field {
            match reg {
                STATUS_C | STATUS_D => {}
                STATUS_A => self.ram[STATUS_A as usize] = value & 0x7f,
                r => self.ram[r as usize] = value,
            }
            return;
        }
        let mut t = self.current();
        let b = self.ram[STATUS_B as usize];
        match reg {
            SECONDS => t.second = self.decode(value).min(59),
            MINUTES => t.minute = self.decode(value).min(59),
            HOURS if b & B_24H != 0 => t.hour = self.decode(value).min(23),
            HOURS => {
                let h = self.decode(value & 0x7f) % 12;
                t.hour = h + if value & 0x80 != 0 { 12 } else { 0 };
            }
            DAY => t.day = self.decode(value).clamp(1, 31),
            MONTH => t.month = self.decode(value).clamp(1, 12),
            YEAR => t.year = t.year.div_euclid(100) * 100 + i64::from(self.decode(value) % 100),
            _ => t.year = i64::from(self.decode(value)) * 100 + t.year.rem_euclid(100),
        }
        self.offset = t.to_unix() - (self.now)();
    }

    /// Port read.
    pub fn read(&mut self, port: u16) -> u8 {
        match port {
            DATA_PORT => self.read_register(self.index),
            _ => 0xff,
        }
    }

    /// Port write.
    pub fn write(&mut self, port: u16, value: u8) {
        match port {
            INDEX_PORT => self.index = value & 0x7f,
            DATA_PORT => self.write_register(self.index, value),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // 2026-11-22 13:45:07 UTC, a Sunday.
    const FIXED: i64 = 1_795_355_107;

    fn fixed() -> i64 {
        FIXED
    }

    fn reg(rtc: &mut CmosRtc, r: u8) -> u8 {
        rtc.write(INDEX_PORT, r | 0x80);
        rtc.read(DATA_PORT)
    }

    #[test]
    fn calendar_round_trips() {
        let t = DateTime::from_unix(FIXED);
        assert_eq!(
            t,
            DateTime {
                year: 2026,
                month: 11,
                day: 22,
                hour: 13,
                minute: 45,
                second: 7,
                weekday: 1
            }
        );
        for secs in [0, 951_782_400, 4_107_542_400, FIXED, -86_400] {
            assert_eq!(DateTime::from_unix(secs).to_unix(), secs);
        }
        // 2000-02-29 exists, 1970-01-01 was a Thursday.
        let leap = DateTime::from_unix(951_782_400);
        assert_eq!((leap.year, leap.month, leap.day), (2000, 2, 29));
        assert_eq!(DateTime::from_unix(0).weekday, 5);
    }

    #[test]
    fn reads_the_time_in_bcd_then_binary_and_12_hour() {
        let mut rtc = CmosRtc::with_clock(fixed);
        assert_eq!(reg(&mut rtc, STATUS_A) & 0x80, 0, "UIP must be clear");
        assert_eq!(reg(&mut rtc, STATUS_D), D_VRT);
        let bcd: Vec<u8> = [
            SECONDS,
            MINUTES,
            HOURS,
            WEEKDAY,
            DAY,
            MONTH,
            YEAR,
            CENTURY_REG,
        ]
        .iter()
        .map(|&r| reg(&mut rtc, r))
        .collect();
        assert_eq!(bcd, vec![0x07, 0x45, 0x13, 0x01, 0x22, 0x11, 0x26, 0x20]);
        rtc.write(INDEX_PORT, STATUS_B);
        rtc.write(DATA_PORT, B_24H | B_BINARY);
        assert_eq!(reg(&mut rtc, HOURS), 13);
        assert_eq!(reg(&mut rtc, DAY), 22);
        rtc.write(INDEX_PORT, STATUS_B);
        rtc.write(DATA_PORT, B_BINARY);
        assert_eq!(reg(&mut rtc, HOURS), 0x80 | 1, "1 PM");
    }

    #[test]
    fn the_guest_can_set_the_clock_and_keep_cmos_ram() {
        let mut rtc = CmosRtc::with_clock(fixed);
        rtc.write(INDEX_PORT, YEAR);
        rtc.write(DATA_PORT, 0x30);
        rtc.write(INDEX_PORT, HOURS);
        rtc.write(DATA_PORT, 0x08);
        assert_eq!(reg(&mut rtc, YEAR), 0x30);
        assert_eq!(reg(&mut rtc, HOURS), 0x08);
        assert_eq!(reg(&mut rtc, MINUTES), 0x45, "other fields keep running");
        rtc.write(INDEX_PORT, 0x40);
        rtc.write(DATA_PORT, 0xab);
        assert_eq!(reg(&mut rtc, 0x40), 0xab);
        // Status C reads clear, status D cannot be written.
        rtc.write(INDEX_PORT, STATUS_D);
        rtc.write(DATA_PORT, 0);
        assert_eq!(reg(&mut rtc, STATUS_D), D_VRT);
        assert_eq!(rtc.read(INDEX_PORT), 0xff);
    }
}
