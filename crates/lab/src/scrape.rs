//! Reading the sidecars' Prometheus `/metrics` (docs/proxy.md, "Admin"): the counters the
//! results need, summed per call edge or per replica.

use crate::http;
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// One sample line: metric name, labels, value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

/// Parses the Prometheus text format (comments and malformed lines are skipped).
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let (series, value) = line.rsplit_once(' ')?;
    let value = value.parse().ok()?;
    let (name, labels) = match series.split_once('{') {
        Some((name, rest)) => (name, labels(rest.strip_suffix('}')?)),
        None => (series, Vec::new()),
    };
    Some(Sample { name: name.to_string(), labels, value })
}

/// `a="x",b="y"` (values hold no quotes here: names and addresses).
fn labels(text: &str) -> Vec<(String, String)> {
    text.split("\",")
        .filter_map(|pair| {
            let (k, v) = pair.split_once("=\"")?;
            Some((k.trim().to_string(), v.trim_end_matches('"').to_string()))
        })
        .collect()
}

/// What one sidecar's egress has counted, per upstream (the called service).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EgressCounts {
    pub requests: f64,
    pub attempts: f64,
    pub timeouts: f64,
    /// Retries and hedges sent: the attempts beyond each call's first.
    pub extra: f64,
    /// Σ and count of attempt latencies (seconds).
    pub attempt_seconds: f64,
    pub attempt_count: f64,
    /// The timeout policy's latest value (seconds; 0 when untimed).
    pub timeout_seconds: f64,
    /// Σ latency of requests answered with success, and of the attempts that answered them
    /// (seconds): time fraction's numerator and denominator.
    pub answered_seconds: f64,
    pub answer_seconds: f64,
    /// Σ and count of (timeout − latency) / latency over successful attempts sent with a timeout.
    pub headroom_sum: f64,
    pub headroom_count: f64,
    /// Endpoints its outlier detector ejected.
    pub ejections: f64,
}

/// What one sidecar has counted.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counts {
    /// Requests that reached its ingress (admitted or not).
    pub ingress_requests: f64,
    /// Those its ingress refused with 429 (admission control).
    pub ingress_rejected: f64,
    /// Requests its application holds now (a gauge).
    pub ingress_in_flight: f64,
    pub egress: BTreeMap<String, EgressCounts>,
}

impl Counts {
    /// Sums the samples of one sidecar.
    pub fn from_samples(samples: &[Sample]) -> Counts {
        let mut counts = Counts::default();
        for s in samples {
            if s.name == "tailguard_ingress_requests_total" {
                counts.ingress_requests = s.value;
                continue;
            }
            if s.name == "tailguard_ingress_rejected_total" {
                counts.ingress_rejected = s.value;
                continue;
            }
            if s.name == "tailguard_ingress_in_flight" {
                counts.ingress_in_flight = s.value;
                continue;
            }
            let Some(upstream) = s.label("upstream") else { continue };
            let e = counts.egress.entry(upstream.to_string()).or_default();
            match s.name.as_str() {
                "tailguard_egress_requests_total" => e.requests += s.value,
                "tailguard_egress_attempts_total" => e.attempts += s.value,
                "tailguard_egress_timeouts_total" => e.timeouts += s.value,
                "tailguard_egress_retries_total" | "tailguard_egress_hedges_total" => e.extra += s.value,
                "tailguard_egress_attempt_seconds_sum" => e.attempt_seconds += s.value,
                "tailguard_egress_attempt_seconds_count" => e.attempt_count += s.value,
                "tailguard_egress_timeout_seconds" => e.timeout_seconds = s.value,
                "tailguard_egress_answered_seconds_total" => e.answered_seconds += s.value,
                "tailguard_egress_answer_seconds_total" => e.answer_seconds += s.value,
                "tailguard_egress_timeout_headroom_sum" => e.headroom_sum += s.value,
                "tailguard_egress_timeout_headroom_count" => e.headroom_count += s.value,
                "tailguard_egress_ejections_total" => e.ejections += s.value,
                _ => {}
            }
        }
        counts
    }
}

/// Scrapes the sidecar whose admin listens at `admin`.
pub fn scrape(admin: SocketAddr) -> std::io::Result<Counts> {
    let (status, body) = http::get(admin, "/metrics")?;
    if status != 200 {
        return Err(std::io::Error::other(format!("GET http://{admin}/metrics answered {status}")));
    }
    Ok(Counts::from_samples(&parse(&body)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_sum_per_upstream() {
        let text = "# HELP x\n\
            tailguard_egress_requests_total{upstream=\"back\"} 10\n\
            tailguard_egress_attempts_total{upstream=\"back\",endpoint=\"127.0.0.1:1\"} 7\n\
            tailguard_egress_attempts_total{upstream=\"back\",endpoint=\"127.0.0.1:2\"} 5\n\
            tailguard_egress_timeouts_total{upstream=\"back\",endpoint=\"127.0.0.1:2\"} 1\n\
            tailguard_egress_attempt_seconds_sum{upstream=\"back\",endpoint=\"127.0.0.1:2\"} 0.5\n\
            tailguard_egress_attempt_seconds_count{upstream=\"back\",endpoint=\"127.0.0.1:2\"} 5\n\
            tailguard_egress_timeout_seconds{upstream=\"back\"} 0.025\n\
            tailguard_egress_retries_total{upstream=\"back\"} 2\n\
            tailguard_egress_hedges_total{upstream=\"back\"} 1\n\
            tailguard_egress_answered_seconds_total{upstream=\"back\"} 1.5\n\
            tailguard_egress_answer_seconds_total{upstream=\"back\"} 1.25\n\
            tailguard_egress_timeout_headroom_sum{upstream=\"back\"} 2.5\n\
            tailguard_egress_timeout_headroom_count{upstream=\"back\"} 9\n\
            tailguard_egress_ejections_total{upstream=\"back\"} 3\n\
            tailguard_ingress_requests_total 42\n\
            tailguard_ingress_rejected_total 4\n\
            tailguard_ingress_in_flight 7\n\
            garbage\n";
        let counts = Counts::from_samples(&parse(text));
        assert_eq!((counts.ingress_requests, counts.ingress_rejected, counts.ingress_in_flight), (42.0, 4.0, 7.0));
        let back = &counts.egress["back"];
        assert_eq!((back.requests, back.attempts, back.timeouts, back.extra), (10.0, 12.0, 1.0, 3.0));
        assert_eq!((back.attempt_seconds, back.attempt_count, back.timeout_seconds), (0.5, 5.0, 0.025));
        assert_eq!((back.answered_seconds, back.answer_seconds), (1.5, 1.25));
        assert_eq!(back.ejections, 3.0);
        assert_eq!((back.headroom_sum, back.headroom_count), (2.5, 9.0));
    }
}
