//! RFC 3339 event times.

use super::*;

#[test]
fn rfc3339_parsing() {
    assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
    assert_eq!(
        parse_rfc3339_ms("2026-01-01T00:00:00Z"),
        Some(1_767_225_600_000)
    );
    assert_eq!(
        parse_rfc3339_ms("2026-01-01T01:00:00.250+01:00"),
        Some(1_767_225_600_250)
    );
    assert_eq!(
        parse_rfc3339_ms("2025-12-31T19:00:00-05:00"),
        Some(1_767_225_600_000)
    );
    assert_eq!(
        parse_rfc3339_ms("2026-01-01T00:00:00.999999999Z"),
        Some(1_767_225_600_999)
    );
    assert_eq!(
        parse_rfc3339_ms("1969-12-31T23:59:59.9999Z"),
        Some(-1),
        "floors, not truncates"
    );
    assert_eq!(parse_rfc3339_ms("1969-12-31T23:59:59.001Z"), Some(-999));
    assert_eq!(parse_rfc3339_ms("1969-12-31T23:59:59.000001Z"), Some(-1000));
    assert_eq!(
        parse_rfc3339_ms("2026-01-01t00:00:00z"),
        Some(1_767_225_600_000)
    );
    assert_eq!(
        parse_rfc3339_ms("2026-01-01 00:00:00Z"),
        Some(1_767_225_600_000)
    );
    for bad in [
        "2026-01-01T00:00:00",
        "2026-01-01",
        "yesterday",
        "",
        "2026-13-01T00:00:00Z",
        "2026-01-01T00:00:00Z junk",
        " 2026-01-01T00:00:00Z",
    ] {
        assert_eq!(parse_rfc3339_ms(bad), None, "{bad:?}");
    }
}
