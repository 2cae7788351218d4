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

#[cfg(test)]
mod tests {
    use crate::admission::AdmissionConfig;
    use crate::balance::{BalancerConfig, OutlierConfig};
    use crate::hedge::HedgeConfig;
    use crate::retry::RetryConfig;
    use crate::timeout::{AdaptiveConfig, ControllerConfig, OptimizerConfig, TimeoutConfig, DEFAULT_INITIAL};
    use serde::de::DeserializeOwned;
    use serde::Serialize;
    use std::fmt::Debug;
    use std::time::Duration;

    fn yaml<T: DeserializeOwned>(text: &str) -> T {
        serde_yaml_ng::from_str(text).unwrap()
    }

    /// `config` validates, and its YAML reads back equal.
    fn round_trips<T: Serialize + DeserializeOwned + PartialEq + Debug>(config: T, validate: fn(&T) -> super::Check) {
        assert_eq!(validate(&config), Ok(()), "{config:?}");
        let text = serde_yaml_ng::to_string(&config).unwrap();
        assert_eq!(yaml::<T>(&text), config, "{text}");
    }

    #[test]
    fn every_kind_with_every_field_left_out_is_valid_and_round_trips() {
        for kind in ["random", "round-robin", "least-request", "peak-ewma", "bloc", "prequal", "oracle"] {
            round_trips(yaml::<BalancerConfig>(&format!("{{kind: {kind}}}")), BalancerConfig::validate);
        }
        for kind in ["controller", "optimizer", "adaptive"] {
            round_trips(yaml::<TimeoutConfig>(&format!("{{kind: {kind}}}")), TimeoutConfig::validate);
        }
        round_trips(yaml::<TimeoutConfig>("{kind: exp-backoff, first: 12ms}"), TimeoutConfig::validate);
        round_trips(yaml::<TimeoutConfig>("{kind: sequential, values: [1ms, 2.5ms]}"), TimeoutConfig::validate);
        round_trips(yaml::<HedgeConfig>("{kind: percentile}"), HedgeConfig::validate);
        round_trips(yaml::<HedgeConfig>("{kind: speculative, attempts: 2, patience: 1ms}"), HedgeConfig::validate);
        round_trips(yaml::<AdmissionConfig>("{kind: dynamic}"), AdmissionConfig::validate);
        round_trips(RetryConfig::default(), RetryConfig::validate);
        round_trips(yaml::<OutlierConfig>("{}"), OutlierConfig::validate);
        let outlier = yaml::<OutlierConfig>("{consecutive_failures: 3, base_ejection: 5s, max_ejected: 0.2}");
        assert_eq!(
            outlier,
            OutlierConfig {
                consecutive_failures: 3,
                base_ejection: Duration::from_secs(5),
                max_ejected: 0.2,
                ..OutlierConfig::default()
            }
        );
        round_trips(yaml::<RetryConfig>("{max_attempts: 3, backoff: 10ms, budget: 0.2}"), RetryConfig::validate);
    }

    #[test]
    fn fields_left_out_take_the_policys_defaults() {
        assert_eq!(
            yaml::<TimeoutConfig>("{kind: adaptive}"),
            TimeoutConfig::Adaptive(AdaptiveConfig::new(DEFAULT_INITIAL))
        );
        let ms = Duration::from_millis;
        let set = AdaptiveConfig { k: 3.0, ..AdaptiveConfig::new(ms(20)) };
        assert_eq!(yaml::<TimeoutConfig>("{kind: adaptive, initial: 20ms, k: 3}"), TimeoutConfig::Adaptive(set));
        let paper = TimeoutConfig::Controller(ControllerConfig::paper(ms(20)));
        assert_eq!(yaml::<TimeoutConfig>("{kind: controller, initial: 20ms}"), paper);
        let paper = TimeoutConfig::Optimizer(OptimizerConfig::paper(ms(20)));
        assert_eq!(yaml::<TimeoutConfig>("{kind: optimizer, initial: 20ms}"), paper);
        assert_eq!(
            yaml::<AdmissionConfig>("{kind: dynamic}"),
            AdmissionConfig::Dynamic { window: ms(30_000), headroom: 1.5, deviations: 2.33, floor: true }
        );
    }

    #[test]
    fn errors_name_the_field() {
        let invalid = |text: &str| yaml::<TimeoutConfig>(text).validate().unwrap_err().to_string();
        assert_eq!(invalid("{kind: controller, gain: 2}"), "gain: expected a fraction between 0 and 1, got 2");
        assert_eq!(invalid("{kind: adaptive, min: 2s, max: 1s}"), "max: expected at least min (2s), got 1s");
        assert_eq!(invalid("{kind: optimizer, window: 0}"), "window: expected a positive integer, got 0");
        assert_eq!(invalid("{kind: optimizer, sample_factor: 1}"), "sample_factor: expected a number >= 2, got 1");
        let e = serde_yaml_ng::from_str::<TimeoutConfig>("{kind: adaptive, intial: 20ms}").unwrap_err().to_string();
        assert!(e.contains("unknown field `intial`, expected one of `initial`, `level_window`"), "{e}");
        let e = serde_yaml_ng::from_str::<TimeoutConfig>("{kind: adaptive, hedge_on_timeout: true}").unwrap_err();
        assert!(e.to_string().contains("unknown field `hedge_on_timeout`"), "the retry policy's own: {e}");
    }
}
