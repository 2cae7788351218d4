//! [`Dur`]: a [`Duration`] written with its unit, as experiment files write durations
//! (`250ms`, `1.5s`, `10us`, `2m`).
//!
//! A bare number is refused: `250` could mean seconds or milliseconds, and guessing wrong makes an
//! experiment silently a thousand times off. Empirical data files are the one exception (their
//! numbers are milliseconds, see [`Dur::parse_or_ms`]).

use serde::de::{self, Deserialize, Deserializer, Visitor};
use serde::{Serialize, Serializer};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A duration written with a unit: `ns`, `us` (or `µs`), `ms`, `s`, `m` (minutes) or `h`.
/// Decimals are allowed (`1.5s`, `0.25ms`); the value is kept to the nanosecond.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Dur(pub Duration);

/// The units a duration may be written in, with their length in nanoseconds.
const UNITS: [(&str, u128); 8] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("min", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// The longest duration anything may be given: a year is past any run, timeout or fault, and
/// keeps sums of times (a deadline past now, a fault's end past the warm-up) far from
/// overflowing a clock.
pub const MAX: Duration = Duration::from_secs(365 * 24 * 3600);

/// What a duration must look like, for error messages.
pub const EXPECTED: &str = "a duration with a unit, such as \"250ms\", \"1.5s\", \"10us\" or \"2m\"";

impl Dur {
    /// No time at all.
    pub const ZERO: Dur = Dur(Duration::ZERO);

    /// The duration itself.
    pub fn get(self) -> Duration {
        self.0
    }

    /// Milliseconds, as a convenience for tests and examples.
    pub fn from_millis(ms: u64) -> Dur {
        Dur(Duration::from_millis(ms))
    }

    /// Parses `text`, which must carry a unit. The error says what was wrong and what was expected.
    pub fn parse(text: &str) -> Result<Dur, String> {
        parse(text, None)
    }

    /// Parses `text` into a [`Duration`]: the parser of every command-line duration flag
    /// (`value_parser = Dur::parse_duration`), so flags and files read durations alike.
    pub fn parse_duration(text: &str) -> Result<Duration, String> {
        parse(text, None).map(Dur::get)
    }

    /// Parses `text`, reading a bare number as milliseconds (empirical data files).
    pub fn parse_or_ms(text: &str) -> Result<Dur, String> {
        parse(text, Some(1_000_000))
    }
}

impl From<Duration> for Dur {
    fn from(d: Duration) -> Self {
        Dur(d)
    }
}

impl From<Dur> for Duration {
    fn from(d: Dur) -> Self {
        d.0
    }
}

impl FromStr for Dur {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Dur::parse(s)
    }
}

fn parse(text: &str, bare_unit: Option<u128>) -> Result<Dur, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = (&t[..split], t[split..].trim());
    if t.starts_with('-') {
        return Err(format!("expected {EXPECTED}, got {text:?}: durations cannot be negative"));
    }
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return Err(format!("expected {EXPECTED}, got {text:?}"));
    }
    let scale = if unit.is_empty() {
        match bare_unit {
            Some(scale) => scale,
            None => {
                return Err(format!("expected {EXPECTED}, got {text:?} without a unit (write {number}ms or {number}s)"))
            }
        }
    } else {
        match UNITS.iter().find(|(name, _)| *name == unit) {
            Some((_, scale)) => *scale,
            None => {
                return Err(format!(
                    "expected {EXPECTED}, got {text:?}: unknown unit {unit:?} (units: ns, us, ms, s, m, h)"
                ))
            }
        }
    };
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    let too_long = || format!("expected {EXPECTED}, got {text:?}: too long");
    let whole: u128 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| too_long())? };
    // The fraction is taken to the nanosecond: digits past what the unit resolves are dropped.
    let mut nanos = whole.checked_mul(scale).ok_or_else(too_long)?;
    let mut place = scale;
    for digit in frac.bytes() {
        place /= 10;
        if place == 0 {
            break;
        }
        nanos += u128::from(digit - b'0') * place;
    }
    if nanos > MAX.as_nanos() {
        return Err(format!("expected a duration of at most 8760h (a year), got {text:?}"));
    }
    Ok(Dur(Duration::new((nanos / 1_000_000_000) as u64, (nanos % 1_000_000_000) as u32)))
}

impl fmt::Display for Dur {
    /// The shortest exact spelling in the file syntax: `2m`, `1.5s`, `250ms`, `12.5us`, `0s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos = self.0.as_nanos();
        if nanos == 0 {
            return f.write_str("0s");
        }
        let units: [(&str, u128); 6] = [
            ("h", 3_600_000_000_000),
            ("m", 60_000_000_000),
            ("s", 1_000_000_000),
            ("ms", 1_000_000),
            ("us", 1_000),
            ("ns", 1),
        ];
        // A whole number of minutes or hours reads best in them; anything else in the largest
        // unit up to seconds that leaves at least 1, with decimals when needed.
        for (name, scale) in units {
            let exact_only = scale > 1_000_000_000;
            if nanos % scale == 0 || (!exact_only && nanos >= scale) {
                let whole = nanos / scale;
                let rest = nanos % scale;
                if rest == 0 {
                    return write!(f, "{whole}{name}");
                }
                let width = scale.ilog10() as usize;
                let frac = format!("{rest:0width$}");
                return write!(f, "{whole}.{}{name}", frac.trim_end_matches('0'));
            }
        }
        unreachable!("the nanosecond unit divides everything")
    }
}

impl Serialize for Dur {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(DurVisitor)
    }
}

struct DurVisitor;

impl DurVisitor {
    fn bare<E: de::Error>(number: impl fmt::Display) -> E {
        E::custom(format!("expected {EXPECTED}, got the bare number {number} (write {number}ms or {number}s)"))
    }
}

impl Visitor<'_> for DurVisitor {
    type Value = Dur;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(EXPECTED)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Dur, E> {
        Dur::parse(v).map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Dur, E> {
        Err(Self::bare(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dur, E> {
        Err(Self::bare(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Dur, E> {
        Err(Self::bare(v))
    }
}

/// `#[serde(with = "...")]` adapters for `Duration` fields of configuration types, written as
/// [`Dur`] is (`250ms`), so the policies keep plain `Duration`s.
pub mod text {
    use super::Dur;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        Dur(*d).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Dur::deserialize(d).map(Dur::get)
    }

    /// An optional duration.
    pub mod option {
        use super::*;

        pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
            d.map(Dur).serialize(s)
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
            Option::<Dur>::deserialize(d).map(|d| d.map(Dur::get))
        }
    }

    /// A list of durations.
    pub mod list {
        use super::*;

        pub fn serialize<S: Serializer>(d: &[Duration], s: S) -> Result<S::Ok, S::Error> {
            s.collect_seq(d.iter().map(|d| Dur(*d)))
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Duration>, D::Error> {
            Vec::<Dur>::deserialize(d).map(|v| v.into_iter().map(Dur::get).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(text: &str) -> Duration {
        Dur::parse(text).unwrap().get()
    }

    #[test]
    fn parses_every_unit() {
        assert_eq!(d("250ms"), Duration::from_millis(250));
        assert_eq!(d("1.5s"), Duration::from_millis(1500));
        assert_eq!(d("10us"), Duration::from_micros(10));
        assert_eq!(d("10µs"), Duration::from_micros(10));
        assert_eq!(d("7ns"), Duration::from_nanos(7));
        assert_eq!(d("2m"), Duration::from_secs(120));
        assert_eq!(d("2min"), Duration::from_secs(120));
        assert_eq!(d("1h"), Duration::from_secs(3600));
        assert_eq!(d(" 0.25 ms "), Duration::from_micros(250));
        assert_eq!(d(".5s"), Duration::from_millis(500));
        assert_eq!(d("0s"), Duration::ZERO);
    }

    #[test]
    fn decimals_are_exact_to_the_nanosecond() {
        assert_eq!(d("0.1s"), Duration::from_millis(100));
        assert_eq!(d("12.345678ms"), Duration::from_nanos(12_345_678));
        // Digits past the nanosecond are dropped.
        assert_eq!(d("1.0000000019s"), Duration::from_nanos(1_000_000_001));
    }

    #[test]
    fn refuses_bare_numbers_bad_units_and_negatives() {
        let e = Dur::parse("250").unwrap_err();
        assert!(e.contains("without a unit") && e.contains("250ms"), "{e}");
        let e = Dur::parse("3 parsecs").unwrap_err();
        assert!(e.contains("unknown unit \"parsecs\""), "{e}");
        let e = Dur::parse("-1s").unwrap_err();
        assert!(e.contains("negative"), "{e}");
        assert!(Dur::parse("ms").is_err());
        assert!(Dur::parse("1.2.3s").is_err());
        assert!(Dur::parse("").is_err());
    }

    #[test]
    fn refuses_more_than_a_year() {
        assert_eq!(d("8760h"), MAX);
        let e = Dur::parse("8760.000000001h").unwrap_err();
        assert_eq!(e, "expected a duration of at most 8760h (a year), got \"8760.000000001h\"");
        // Past a u64 of seconds too, where a number too long to hold was the error.
        let e = Dur::parse("99999999999999999999999h").unwrap_err();
        assert!(e.contains("too long") || e.contains("at most 8760h"), "{e}");
    }

    #[test]
    fn command_line_flags_parse_as_files_do() {
        assert_eq!(Dur::parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(Dur::parse_duration("10").unwrap_err().contains("without a unit"));
    }

    #[test]
    fn bare_numbers_are_milliseconds_in_data_files() {
        assert_eq!(Dur::parse_or_ms("12.5").unwrap().get(), Duration::from_micros(12_500));
        assert_eq!(Dur::parse_or_ms("2s").unwrap().get(), Duration::from_secs(2));
    }

    #[test]
    fn displays_in_the_file_syntax_and_round_trips() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_secs(120), "2m"),
            (Duration::from_secs(7200), "2h"),
            (Duration::from_secs(90), "90s"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_millis(250), "250ms"),
            (Duration::from_micros(12_500), "12.5ms"),
            (Duration::from_micros(10), "10us"),
            (Duration::from_nanos(1_001), "1.001us"),
            (Duration::from_nanos(7), "7ns"),
        ];
        for (duration, text) in cases {
            assert_eq!(Dur(duration).to_string(), text);
            assert_eq!(d(text), duration);
        }
    }

    #[test]
    fn deserialises_from_yaml_strings_only() {
        let ok: Dur = serde_yaml_ng::from_str("1.5s").unwrap();
        assert_eq!(ok, Dur(Duration::from_millis(1500)));
        let e = serde_yaml_ng::from_str::<Dur>("250").unwrap_err().to_string();
        assert!(e.contains("bare number 250") && e.contains("250ms"), "{e}");
        let e = serde_yaml_ng::from_str::<Dur>("2.5").unwrap_err().to_string();
        assert!(e.contains("bare number 2.5"), "{e}");
    }
}
