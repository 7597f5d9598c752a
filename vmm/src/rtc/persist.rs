//! The CMOS RTC's state in a snapshot: its index register, its RAM and the
//! offset of the guest's clock from the host's (the time itself is the
//! host's, read again after a restore).

use serde::{Deserialize, Serialize};

use super::CmosRtc;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RtcState {
    pub index: u8,
    pub ram: Vec<u8>,
    pub offset: i64,
}

impl CmosRtc {
    pub fn save_state(&self) -> RtcState {
        RtcState {
            index: self.index,
            ram: self.ram.to_vec(),
            offset: self.offset,
        }
    }

    /// Loads `state`; false when its RAM is not the CMOS's 128 bytes.
    pub fn restore_state(&mut self, state: &RtcState) -> bool {
        let Ok(ram) = <[u8; 128]>::try_from(state.ram.as_slice()) else {
            return false;
        };
        self.index = state.index;
        self.ram = ram;
        self.offset = state.offset;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rtc_comes_back_as_saved() {
        let mut rtc = CmosRtc::default();
        rtc.write(crate::rtc::INDEX_PORT, 0x30);
        rtc.write(crate::rtc::DATA_PORT, 0x42);
        let s = rtc.save_state();
        let mut back = CmosRtc::default();
        assert!(back.restore_state(&s));
        assert_eq!(back.save_state(), s);
        assert!(!back.restore_state(&RtcState {
            ram: vec![0; 3],
            ..s
        }));
    }
}
