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

// checks: [WIRE-27]
#[test]
fn crowd_level_is_the_grid_rounded_up() {
    let mut grid: Vec<usize> = (0..=8).collect();
    for e in 1..6 {
        grid.extend((5..=8).map(|m| m << e)); // 10..16, 20..32, ..., 160..256
    }
    for n in 0..=300usize {
        let want = grid
            .iter()
            .copied()
            .find(|&g| g >= n)
            .unwrap_or(256)
            .min(255);
        // 225..=256 round up to 256, written as 255 ("more than 224").
        let want = if n > 224 { 255 } else { want };
        assert_eq!(crowd_level(n) as usize, want, "count {n}");
        assert!(
            crowd_level(n) as usize >= n.min(255),
            "never below the count"
        );
    }
    assert_eq!(crowd_level(usize::MAX), 255);
    // On the grid, a level is its own level: a receiver could check it, but takes any value.
    for &g in &grid[..grid.len() - 1] {
        assert_eq!(crowd_level(g) as usize, g);
    }
}
