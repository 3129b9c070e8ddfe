//! An optional time in one word: an `Option<u64>` is two (its tag padded to eight bytes),
//! and an idle connection and path hold several of them.

/// A time in ns, or none (`u64::MAX`, a time nothing reaches: every time stored here is a
/// `now` or a `now` plus a timeout).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct At(u64);

impl At {
    pub(crate) const NONE: At = At(u64::MAX);

    #[inline]
    pub(crate) fn get(self) -> Option<u64> {
        (self.0 != u64::MAX).then_some(self.0)
    }

    #[inline]
    pub(crate) fn take(&mut self) -> Option<u64> {
        std::mem::replace(self, At::NONE).get()
    }
}

impl From<Option<u64>> for At {
    #[inline]
    fn from(t: Option<u64>) -> At {
        // Checked where the crate's own checks run (its tests, debug builds).
        #[cfg(any(test, debug_assertions))]
        assert!(t != Some(u64::MAX), "u64::MAX stands for none");
        At(t.unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::At;

    #[test]
    fn at_is_an_option_in_one_word() {
        assert_eq!(std::mem::size_of::<At>(), 8);
        let mut a = At::from(Some(5));
        assert_eq!(a.get(), Some(5));
        assert_eq!(a.take(), Some(5));
        assert_eq!(a, At::NONE);
        assert_eq!(a.get(), None);
        assert_eq!(At::from(Some(0)).get(), Some(0));
        assert_eq!(At::from(None), At::NONE);
    }
}
