//! Number text shared by the formats.

/// Appends `x` in decimal.
#[inline]
pub(super) fn write_int(x: i64, out: &mut Vec<u8>) {
    out.extend_from_slice(itoa::Buffer::new().format(x).as_bytes());
}

/// Appends a finite `x` as the shortest text that parses back to the same
/// bits; an integral value keeps its `.0` (`2.0`), so readers that infer
/// types still see a float.
#[inline]
pub(super) fn write_finite_float(x: f64, out: &mut Vec<u8>) {
    debug_assert!(x.is_finite());
    out.extend_from_slice(ryu::Buffer::new().format_finite(x).as_bytes());
}

/// 2^53: every integer of smaller magnitude is exact as an `f64`, so an
/// integral float below it names exactly one `int`.
pub(super) const EXACT_INT_LIMIT: f64 = 9_007_199_254_740_992.0;
