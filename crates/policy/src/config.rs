//! What every policy's configuration type shares: [`ConfigError`], the error its `validate()`
//! returns, and the checks they make.
//!
//! A policy's config type is its schema: it derives its deserialisation (serde, durations written
//! with a unit, [`crate::duration`]), carries its defaults (`Default`, or serde defaults for the
//! fields a file may leave out) and checks what deserialisation cannot (`validate()`). Experiment
//! files and proxy files embed the types as they are, so a new parameter touches one file: the
//! policy's own.

use crate::duration::Dur;
use std::fmt;
use std::time::Duration;

/// A parameter that makes no sense: the dotted path of the field (relative to the config being
/// validated) and what was expected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The field at fault, as a dotted path (`values.1`); empty for the config as a whole.
    pub path: String,
    /// What was wrong and what was expected.
    pub message: String,
}

impl ConfigError {
    /// An error at field `path`.
    pub fn at(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError { path: path.into(), message: message.into() }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

/// What `validate()` returns.
pub type Check = Result<(), ConfigError>;

/// A duration above zero.
pub fn positive(field: &str, d: Duration) -> Check {
    if d.is_zero() {
        return Err(ConfigError::at(field, "expected a positive duration, got 0s"));
    }
    Ok(())
}

/// An optional duration above zero.
pub fn positive_or_none(field: &str, d: Option<Duration>) -> Check {
    d.map_or(Ok(()), |d| positive(field, d))
}

/// A count of at least 1.
pub fn at_least_one(field: &str, n: impl Into<u64>) -> Check {
    if n.into() == 0 {
        return Err(ConfigError::at(field, "expected a positive integer, got 0"));
    }
    Ok(())
}

/// A number from 0 to 1.
pub fn fraction(field: &str, x: f64) -> Check {
    if !(0.0..=1.0).contains(&x) {
        return Err(ConfigError::at(field, format!("expected a fraction between 0 and 1, got {x}")));
    }
    Ok(())
}

/// A finite number of at least 0.
pub fn non_negative(field: &str, x: f64) -> Check {
    at_least(field, x, 0.0)
}

/// A finite number of at least `min`.
pub fn at_least(field: &str, x: f64, min: f64) -> Check {
    if !(x.is_finite() && x >= min) {
        return Err(ConfigError::at(field, format!("expected a number >= {min}, got {x}")));
    }
    Ok(())
}

/// A finite number above 0.
pub fn above_zero(field: &str, x: f64) -> Check {
    if !(x.is_finite() && x > 0.0) {
        return Err(ConfigError::at(field, format!("expected a number > 0, got {x}")));
    }
    Ok(())
}

/// `max` at least `min` (both durations), blamed on `max`.
pub fn ordered(min_field: &str, min: Duration, max_field: &str, max: Duration) -> Check {
    if max < min {
        return Err(ConfigError::at(
            max_field,
            format!("expected at least {min_field} ({}), got {}", Dur(min), Dur(max)),
        ));
    }
    Ok(())
}
