//! Service-time distributions: a [`Sampler`] built once from a [`Distribution`] and sampled on the
//! simulator's hot path.
//!
//! Everything that can be computed ahead is: parameters are converted to nanoseconds as `f64`,
//! rand_distr's distributions are constructed once, and an empirical file is read into memory
//! (shared between clones), so [`Sampler::sample`] is one draw and one conversion.

use crate::duration::Dur;
use crate::error::ModelError;
use crate::schema::Distribution;
use rand::{Rng, RngCore};
use rand_distr::{Distribution as _, Exp, LogNormal, Pareto, Uniform};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Draws durations from a distribution.
#[derive(Clone, Debug)]
pub struct Sampler {
    kind: Kind,
    mean: Duration,
}

#[derive(Clone, Debug)]
enum Kind {
    Constant(Duration),
    Uniform(Uniform<f64>),
    Exponential(Exp<f64>),
    LogNormal(LogNormal<f64>),
    Pareto(Pareto<f64>),
    Bimodal { fast: Box<Sampler>, slow: Box<Sampler>, slow_fraction: f64 },
    Empirical(Arc<[Duration]>),
}

impl Distribution {
    /// Checks the parameters and builds the sampler; an empirical file is read now, relative to
    /// `base_dir` (the experiment file's directory). Errors name the parameter at fault, relative
    /// to this distribution (`median`, `fast.mean`); the caller puts them under its own path.
    pub fn sampler(&self, base_dir: &Path) -> Result<Sampler, ModelError> {
        let (kind, mean_ns) = match self {
            Distribution::Constant { value } => return Ok(Sampler::constant(value.get())),
            Distribution::Uniform { low, high } => {
                if high < low {
                    return Err(ModelError::at("high", format!("expected at least low ({low}), got {high}")));
                }
                if low == high {
                    return Ok(Sampler::constant(low.get()));
                }
                (Kind::Uniform(Uniform::new_inclusive(nanos(*low), nanos(*high))), (nanos(*low) + nanos(*high)) / 2.0)
            }
            Distribution::Exponential { mean } => {
                positive("mean", *mean)?;
                (Kind::Exponential(Exp::new(1.0 / nanos(*mean)).expect("a positive finite rate")), nanos(*mean))
            }
            Distribution::Lognormal { median, sigma } => {
                positive("median", *median)?;
                if !(sigma.is_finite() && *sigma >= 0.0) {
                    return Err(ModelError::at("sigma", format!("expected a number >= 0, got {sigma}")));
                }
                let kind = Kind::LogNormal(LogNormal::new(nanos(*median).ln(), *sigma).expect("checked parameters"));
                (kind, nanos(*median) * (sigma * sigma / 2.0).exp())
            }
            Distribution::Pareto { scale, shape } => {
                positive("scale", *scale)?;
                if !(shape.is_finite() && *shape > 0.0) {
                    return Err(ModelError::at("shape", format!("expected a number > 0, got {shape}")));
                }
                let mean = if *shape > 1.0 { nanos(*scale) * shape / (shape - 1.0) } else { f64::INFINITY };
                (Kind::Pareto(Pareto::new(nanos(*scale), *shape).expect("checked parameters")), mean)
            }
            Distribution::Bimodal { fast, slow, slow_fraction } => {
                if !(0.0..=1.0).contains(slow_fraction) {
                    return Err(ModelError::at(
                        "slow_fraction",
                        format!("expected a fraction between 0 and 1, got {slow_fraction}"),
                    ));
                }
                let fast = fast.sampler(base_dir).map_err(|e| e.under("fast"))?;
                let slow = slow.sampler(base_dir).map_err(|e| e.under("slow"))?;
                let mean =
                    (1.0 - slow_fraction) * fast.mean.as_nanos() as f64 + slow_fraction * slow.mean.as_nanos() as f64;
                (Kind::Bimodal { fast: Box::new(fast), slow: Box::new(slow), slow_fraction: *slow_fraction }, mean)
            }
            Distribution::Empirical { file } => {
                let values = read_empirical(&base_dir.join(file))?;
                let total: u128 = values.iter().map(Duration::as_nanos).sum();
                let mean = total as f64 / values.len() as f64;
                (Kind::Empirical(values.into()), mean)
            }
        };
        Ok(Sampler { kind, mean: from_nanos(mean_ns) })
    }
}

impl Sampler {
    /// A sampler that always returns `value`.
    pub fn constant(value: Duration) -> Sampler {
        Sampler { kind: Kind::Constant(value), mean: value }
    }

    /// One duration, drawn from `rng`.
    pub fn sample(&self, rng: &mut dyn RngCore) -> Duration {
        match &self.kind {
            Kind::Constant(d) => *d,
            Kind::Uniform(u) => from_nanos(u.sample(rng)),
            Kind::Exponential(e) => from_nanos(e.sample(rng)),
            Kind::LogNormal(l) => from_nanos(l.sample(rng)),
            Kind::Pareto(p) => from_nanos(p.sample(rng)),
            Kind::Bimodal { fast, slow, slow_fraction } => {
                if rng.gen::<f64>() < *slow_fraction {
                    slow.sample(rng)
                } else {
                    fast.sample(rng)
                }
            }
            Kind::Empirical(values) => values[rng.gen_range(0..values.len())],
        }
    }

    /// The distribution's mean; `Duration::MAX` when it is infinite (Pareto with shape ≤ 1).
    pub fn mean(&self) -> Duration {
        self.mean
    }
}

fn nanos(d: Dur) -> f64 {
    d.get().as_nanos() as f64
}

/// Nanoseconds to a duration, rounded; anything past u64 nanoseconds (584 years) is `Duration::MAX`.
fn from_nanos(ns: f64) -> Duration {
    if ns >= u64::MAX as f64 {
        Duration::MAX
    } else {
        Duration::from_nanos(ns.round() as u64)
    }
}

fn positive(field: &str, d: Dur) -> Result<(), ModelError> {
    if d.get().is_zero() {
        return Err(ModelError::at(field, "expected a positive duration, got 0s"));
    }
    Ok(())
}

/// Reads one duration per line (bare numbers are milliseconds; `#` starts a comment). Errors are
/// at the `file` field and name the data file and its line.
fn read_empirical(path: &Path) -> Result<Vec<Duration>, ModelError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ModelError::at("file", format!("cannot read the data file {}: {e}", path.display())))?;
    let mut values = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let value = Dur::parse_or_ms(line)
            .map_err(|e| ModelError::at("file", format!("{}: line {}: {e}", path.display(), i + 1)))?;
        values.push(value.get());
    }
    if values.is_empty() {
        return Err(ModelError::at(
            "file",
            format!("{}: no values; expected one duration per line (bare numbers are ms)", path.display()),
        ));
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_pcg::Pcg64Mcg;

    fn yaml(text: &str) -> Distribution {
        serde_yaml_ng::from_str(text).unwrap()
    }

    fn sampler(text: &str) -> Sampler {
        yaml(text).sampler(Path::new(".")).unwrap()
    }

    fn sample_mean(s: &Sampler, n: u32) -> f64 {
        let mut rng = Pcg64Mcg::new(7);
        (0..n).map(|_| s.sample(&mut rng).as_secs_f64()).sum::<f64>() / f64::from(n)
    }

    #[test]
    fn constant_is_constant() {
        let s = sampler("{dist: constant, value: 5ms}");
        let mut rng = Pcg64Mcg::new(1);
        assert_eq!(s.sample(&mut rng), Duration::from_millis(5));
        assert_eq!(s.mean(), Duration::from_millis(5));
    }

    #[test]
    fn uniform_stays_within_its_bounds() {
        let s = sampler("{dist: uniform, low: 1ms, high: 3ms}");
        let mut rng = Pcg64Mcg::new(1);
        for _ in 0..1000 {
            let d = s.sample(&mut rng);
            assert!(d >= Duration::from_millis(1) && d <= Duration::from_millis(3), "{d:?}");
        }
        assert_eq!(s.mean(), Duration::from_millis(2));
    }

    #[test]
    fn sample_means_match_the_parameters() {
        // 100k draws: the sample mean is within 2% of the true mean for these shapes.
        for (text, mean_ms) in [
            ("{dist: exponential, mean: 10ms}", 10.0),
            ("{dist: lognormal, median: 10ms, sigma: 0.5}", 10.0 * (0.125f64).exp()),
            ("{dist: pareto, scale: 10ms, shape: 3}", 15.0),
            ("{dist: bimodal, slow_fraction: 0.1, fast: {dist: constant, value: 1ms}, slow: {dist: constant, value: 100ms}}", 10.9),
        ] {
            let s = sampler(text);
            let expected = mean_ms / 1000.0;
            assert!((s.mean().as_secs_f64() - expected).abs() < 1e-9, "{text}: {:?}", s.mean());
            let got = sample_mean(&s, 100_000);
            assert!((got - expected).abs() / expected < 0.02, "{text}: sample mean {got}, expected {expected}");
        }
    }

    #[test]
    fn a_seeded_rng_gives_the_same_draws() {
        let s = sampler("{dist: lognormal, median: 10ms, sigma: 1}");
        let draw = |seed| {
            let mut rng = Pcg64Mcg::new(seed);
            (0..5).map(|_| s.sample(&mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3));
        assert_ne!(draw(3), draw(4));
    }

    #[test]
    fn pareto_with_a_heavy_tail_has_an_infinite_mean_and_never_goes_below_its_scale() {
        let s = sampler("{dist: pareto, scale: 2ms, shape: 0.9}");
        assert_eq!(s.mean(), Duration::MAX);
        let mut rng = Pcg64Mcg::new(5);
        assert!((0..1000).all(|_| s.sample(&mut rng) >= Duration::from_millis(2)));
    }

    #[test]
    fn empirical_reads_values_with_units_comments_and_bare_milliseconds() {
        let dir = std::env::temp_dir().join(format!("tailguard-dist-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("lat.txt"), "# measured latencies\n1.5\n\n2ms # slow one\n500us\n").unwrap();
        let s = yaml("{dist: empirical, file: lat.txt}").sampler(&dir).unwrap();
        assert_eq!(s.mean(), Duration::from_nanos(1_333_333));
        let mut rng = Pcg64Mcg::new(9);
        let mut seen: Vec<Duration> = (0..200).map(|_| s.sample(&mut rng)).collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen, [Duration::from_micros(500), Duration::from_micros(1500), Duration::from_millis(2)]);

        std::fs::write(dir.join("bad.txt"), "1ms\nfast\n").unwrap();
        let e = yaml("{dist: empirical, file: bad.txt}").sampler(&dir).unwrap_err().to_string();
        assert!(e.starts_with("file: ") && e.contains("bad.txt: line 2: expected a duration"), "{e}");
        assert!(e.ends_with("got \"fast\""), "{e}");
        let e = yaml("{dist: empirical, file: none.txt}").sampler(&dir).unwrap_err().to_string();
        assert!(e.starts_with("file: cannot read the data file") && e.contains("none.txt"), "{e}");
        std::fs::write(dir.join("empty.txt"), "# nothing\n\n").unwrap();
        let e = yaml("{dist: empirical, file: empty.txt}").sampler(&dir).unwrap_err().to_string();
        assert!(e.ends_with("empty.txt: no values; expected one duration per line (bare numbers are ms)"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_parameters_are_named() {
        let err = |text: &str| yaml(text).sampler(Path::new(".")).unwrap_err().to_string();
        assert_eq!(err("{dist: uniform, low: 3ms, high: 1ms}"), "high: expected at least low (3ms), got 1ms");
        assert_eq!(err("{dist: exponential, mean: 0s}"), "mean: expected a positive duration, got 0s");
        assert_eq!(err("{dist: lognormal, median: 1ms, sigma: -1}"), "sigma: expected a number >= 0, got -1");
        assert_eq!(err("{dist: pareto, scale: 1ms, shape: 0}"), "shape: expected a number > 0, got 0");
        assert_eq!(
            err("{dist: bimodal, slow_fraction: 0.5, fast: {dist: exponential, mean: 0s}, slow: {dist: constant, value: 1s}}"),
            "fast.mean: expected a positive duration, got 0s"
        );
        assert_eq!(
            err("{dist: bimodal, slow_fraction: 1.5, fast: {dist: constant, value: 1s}, slow: {dist: constant, value: 1s}}"),
            "slow_fraction: expected a fraction between 0 and 1, got 1.5"
        );
    }
}
