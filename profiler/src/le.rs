//! Little-endian integers read at a byte offset, `None` past the end: the
//! ELF objects and kernel images the profiler parses.

pub(crate) fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        b.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}

pub(crate) fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

pub(crate) fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_within_the_bytes_only() {
        let b = [1, 2, 3, 4, 5, 6, 7, 8];
        assert_eq!(u16_at(&b, 6), Some(0x0807));
        assert_eq!(u32_at(&b, 0), Some(0x0403_0201));
        assert_eq!(u64_at(&b, 0), Some(0x0807_0605_0403_0201));
        assert_eq!(u32_at(&b, 5), None);
        assert_eq!(u64_at(&b, usize::MAX), None);
    }
}
