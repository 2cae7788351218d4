//! A machine's calibration: what a call through real sidecars costs on it, as `tailguard lab
//! calibrate` measured (crates/lab/src/calibrate.rs) and the simulator charges
//! (`network: {calibrated: FILE}`, docs/lab.md "Calibration").
//!
//! The lab's calls cross processes the simulator does not model: a user request passes the entry
//! replica's ingress sidecar and its `tailguard serve`; a call between services passes the
//! caller's serve, its egress sidecar, the callee's ingress and the callee's serve; a replica's
//! work is a timer that wakes a little late. The calibration measures the calls on services that
//! do no work and the work's lateness on one that does, per sidecar (tailguard's, HAProxy,
//! nginx) and at a few request rates, and keeps each as quantiles of the round trip they add.
//! The simulator adds a draw of the matching one to every attempt ([`Hop::sample`]), at the rate
//! of requests its callee's replicas receive ([`SidecarHops::at_rate`]: linear between the
//! measured rates, the nearest measured rate outside them). The same type is written by the lab
//! and read by the simulator (a round-trip test holds them together).

use crate::duration::Dur;
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Duration;

/// The fractions at which a [`Hop`] keeps its quantiles: every 5 % from 0 to 95 %, then 99 %,
/// 99.9 % and the maximum.
pub const FRACTIONS: [f64; 23] = [
    0.0, 0.05, 0.10, 0.15, 0.20, 0.25, 0.30, 0.35, 0.40, 0.45, 0.50, 0.55, 0.60, 0.65, 0.70, 0.75, 0.80, 0.85, 0.90,
    0.95, 0.99, 0.999, 1.0,
];

/// A calibration file: what was measured, where and when, and the hops per sidecar.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    /// When the measurement ended (UTC, RFC 3339).
    pub measured: String,
    /// The machine's name (`/proc/sys/kernel/hostname`).
    pub host: String,
    /// `/proc/loadavg`'s 1-minute load average before and after the measurement: a calibration
    /// taken on a busy machine describes the busy machine.
    pub load_average: [f64; 2],
    /// Seconds measured per rate and path.
    pub seconds: f64,
    /// The machine's cores: the threads a peer sidecar runs there by default (HAProxy's
    /// `nbthread`), which the simulator's HAProxy model takes (absent in older files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores: Option<u32>,
    /// By sidecar: `tailguard`, `haproxy`, `nginx`.
    pub sidecars: IndexMap<String, SidecarHops>,
}

/// One sidecar's hops, measured at each rate.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SidecarHops {
    /// In increasing `rate`.
    pub points: Vec<RatePoint>,
}

/// The hops at one rate of requests per second through each sidecar.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RatePoint {
    pub rate: f64,
    /// A user request to a replica: the round trip through its ingress and its serve.
    pub client: Hop,
    /// A call between services: the round trip through the caller's serve and egress and the
    /// callee's ingress and serve.
    pub service: Hop,
    /// A replica's work: how much longer than the work time it asks for a request takes at a
    /// replica that works (serve's timer and the scheduler's wake-up).
    pub work: Hop,
}

/// A round trip's added time, as its quantiles at [`FRACTIONS`], in increasing order.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(transparent)]
pub struct Hop {
    pub quantiles: Vec<Dur>,
}

impl Hop {
    /// The hop of `samples` (any order; at least one).
    pub fn from_samples(samples: &mut [Duration]) -> Hop {
        samples.sort_unstable();
        let last = samples.len().saturating_sub(1);
        let at = |f: f64| samples.get((f * last as f64).round() as usize).copied().unwrap_or_default();
        Hop { quantiles: FRACTIONS.iter().map(|&f| Dur::from(at(f))).collect() }
    }

    /// A draw: the quantile at `u` (uniform in [0, 1)), linear between the kept fractions.
    pub fn sample(&self, u: f64) -> Duration {
        let q = &self.quantiles;
        let i = FRACTIONS.partition_point(|&f| f <= u).clamp(1, q.len() - 1);
        let (f0, f1) = (FRACTIONS[i - 1], FRACTIONS[i]);
        let (a, b) = (q[i - 1].get().as_secs_f64(), q[i].get().as_secs_f64());
        Duration::from_secs_f64(a + (b - a) * ((u - f0) / (f1 - f0)).clamp(0.0, 1.0))
    }

    /// The quantile at `fraction`, one of [`FRACTIONS`].
    pub fn at(&self, fraction: f64) -> Duration {
        self.sample(fraction)
    }

    /// Each quantile `w` of the way from `self` to `other`.
    fn blend(&self, other: &Hop, w: f64) -> Hop {
        let mix = |a: &Dur, b: &Dur| {
            let (a, b) = (a.get().as_secs_f64(), b.get().as_secs_f64());
            Dur::from(Duration::from_secs_f64(a + (b - a) * w))
        };
        Hop { quantiles: self.quantiles.iter().zip(&other.quantiles).map(|(a, b)| mix(a, b)).collect() }
    }
}

impl SidecarHops {
    /// The (client, service, work) hops at `rate` requests per second: linear between the two
    /// measured rates around it, the nearest measured one outside them.
    pub fn at_rate(&self, rate: f64) -> [Hop; 3] {
        let p = &self.points;
        let above = p.partition_point(|x| x.rate < rate);
        if above == 0 || above == p.len() {
            let x = &p[above.min(p.len() - 1)];
            return [x.client.clone(), x.service.clone(), x.work.clone()];
        }
        let (lo, hi) = (&p[above - 1], &p[above]);
        let w = (rate - lo.rate) / (hi.rate - lo.rate);
        [lo.client.blend(&hi.client, w), lo.service.blend(&hi.service, w), lo.work.blend(&hi.work, w)]
    }
}

impl Calibration {
    /// Reads a calibration file; the error says what was wrong.
    pub fn load(path: &Path) -> Result<Calibration, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read the calibration: {e}"))?;
        let c: Calibration = serde_yaml_ng::from_str(&text).map_err(|e| format!("not a calibration file: {e}"))?;
        c.validate()?;
        Ok(c)
    }

    /// Checks what serde cannot: every sidecar has points in increasing rate, each hop a full
    /// set of increasing quantiles.
    pub fn validate(&self) -> Result<(), String> {
        for (name, hops) in &self.sidecars {
            if hops.points.is_empty() {
                return Err(format!("sidecars.{name}.points: expected at least one rate"));
            }
            if hops.points.windows(2).any(|w| w[0].rate >= w[1].rate) {
                return Err(format!("sidecars.{name}.points: expected increasing rates"));
            }
            for (i, point) in hops.points.iter().enumerate() {
                for (path, hop) in [("client", &point.client), ("service", &point.service), ("work", &point.work)] {
                    let q = &hop.quantiles;
                    if q.len() != FRACTIONS.len() || q.windows(2).any(|w| w[0].get() > w[1].get()) {
                        return Err(format!(
                            "sidecars.{name}.points.{i}.{path}: expected {} increasing quantiles",
                            FRACTIONS.len()
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// The hops of `sidecar`, if it was measured.
    pub fn sidecar(&self, sidecar: &str) -> Option<&SidecarHops> {
        self.sidecars.get(sidecar)
    }

    /// The file's text, with a comment saying what wrote it.
    pub fn to_yaml(&self) -> String {
        let body = serde_yaml_ng::to_string(self).expect("a calibration serialises");
        format!(
            "# Written by `tailguard lab calibrate` (docs/lab.md, \"Calibration\"): the round trips a call through\n\
             # real sidecars adds on this machine. Experiment files use it as `network: {{calibrated: FILE}}`.\n{body}"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: f64) -> Duration {
        Duration::from_secs_f64(n / 1000.0)
    }

    fn hop(scale: f64) -> Hop {
        let mut samples: Vec<Duration> = (0..=1000).map(|i| ms(scale * f64::from(i) / 1000.0)).collect();
        Hop::from_samples(&mut samples)
    }

    #[test]
    fn a_hop_keeps_its_quantiles_and_draws_between_them() {
        let h = hop(2.0);
        assert_eq!(h.quantiles.len(), FRACTIONS.len());
        assert_eq!(h.at(0.5), ms(1.0));
        assert_eq!(h.at(0.99), ms(1.98));
        assert_eq!(h.sample(0.525), ms(1.05));
        assert_eq!(h.sample(0.0), Duration::ZERO);
        assert!(h.sample(0.999_999) <= ms(2.0));
    }

    #[test]
    fn between_measured_rates_the_hops_are_blended_and_outside_them_the_nearest_is_taken() {
        let point = |rate, scale| RatePoint { rate, client: hop(scale), service: hop(2.0 * scale), work: hop(scale) };
        let hops = SidecarHops { points: vec![point(100.0, 1.0), point(300.0, 2.0)] };
        let [client, service, work] = hops.at_rate(200.0);
        assert_eq!((client.at(0.5), service.at(0.5), work.at(0.5)), (ms(0.75), ms(1.5), ms(0.75)));
        assert_eq!(hops.at_rate(10.0)[0].at(0.5), ms(0.5));
        assert_eq!(hops.at_rate(900.0)[0].at(0.5), ms(1.0));
    }

    #[test]
    fn a_calibration_reads_back_what_it_wrote_and_bad_files_are_refused() {
        let c = Calibration {
            measured: "2026-11-28T13:00:00Z".into(),
            host: "polyglot".into(),
            load_average: [1.5, 2.0],
            seconds: 10.0,
            cores: None,
            sidecars: [(
                "tailguard".to_string(),
                SidecarHops {
                    points: vec![RatePoint { rate: 100.0, client: hop(1.0), service: hop(2.0), work: hop(0.5) }],
                },
            )]
            .into_iter()
            .collect(),
        };
        let dir = std::env::temp_dir().join(format!("tg-calibration-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.yaml");
        std::fs::write(&path, c.to_yaml()).unwrap();
        assert_eq!(Calibration::load(&path).unwrap(), c);
        let mut bad = c.clone();
        bad.sidecars[0].points[0].client.quantiles.pop();
        assert_eq!(bad.validate().unwrap_err(), "sidecars.tailguard.points.0.client: expected 23 increasing quantiles");
        std::fs::write(&path, "measured: x\n").unwrap();
        assert!(Calibration::load(&path).unwrap_err().starts_with("not a calibration file"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
