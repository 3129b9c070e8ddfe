//! Unit tests of the codec; the byte-exact vectors live in spec/vectors and tests/.
use super::*;

#[test]
fn sack_bit_order_on_wire() {
    let mut s = Sack256::default();
    s.set(0);
    s.set(9);
    s.set(255);
    let b = s.to_bytes();
    assert_eq!(b[0], 0x01);
    assert_eq!(b[1], 0x02);
    assert_eq!(b[31], 0x80);
    assert_eq!(Sack256::from_bytes(b), s);
    assert_eq!(s.highest(), Some(255));
}

#[test]
fn sack_shift_and_run() {
    let mut s = Sack256::default();
    for i in 0..70 {
        s.set(i);
    }
    s.set(100);
    assert_eq!(s.leading_run(), 70);
    s.shift_down(65);
    assert_eq!(s.leading_run(), 5);
    assert!(s.get(35));
    assert!(!s.get(36));
    s.shift_down(300);
    assert!(s.is_empty());
}

#[test]
fn psn_serial_arithmetic_wraps() {
    assert!(psn_lt(u32::MAX, 0));
    assert!(psn_lt(u32::MAX - 5, 3));
    assert!(!psn_lt(3, u32::MAX - 5));
    assert_eq!(psn_diff(2, u32::MAX), 3);
}
