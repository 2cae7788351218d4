//! Endpoint discovery: an upstream's endpoint set found by a [`Source`] (DNS, a file) asked every
//! interval, or pushed by a Kubernetes watch (`super::kubernetes`, the `kube` feature), and
//! applied with [`Upstream::set_endpoints`]: endpoints that join are added, those that leave are
//! drained (no new attempt; attempts in flight finish), the others keep their balancer and
//! outlier state. Envoy's `STRICT_DNS` and EDS clusters and Linkerd's destination watch do the
//! same.
//!
//! A failed answer, or one naming no endpoint, keeps the last set (as Envoy does: a DNS hiccup or
//! a service scaled to zero for a moment must not leave the caller with nothing), is logged and
//! counted in `tailguard_egress_discovery_errors_total`.
//!
//! The task holds its upstream weakly: once a reload replaced the upstream and its last request
//! finished, the task ends at its next interval (a Kubernetes watch: within 5 s).

use super::routes::Upstream;
use crate::config;
use std::collections::BTreeSet;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// An endpoint set, or why none could be had.
pub(super) type Answer = Result<BTreeSet<SocketAddr>, String>;

/// Where an upstream's endpoints come from: asked once per interval.
pub(super) trait Source: Send + Sync + 'static {
    /// The endpoint set now.
    fn resolve(&self) -> Pin<Box<dyn Future<Output = Answer> + Send + '_>>;

    /// What is asked, for logs (`dns backend:8080`).
    fn describe(&self) -> String;
}

/// Every A and AAAA record of a name, with the port given (the system resolver, as
/// `getaddrinfo` answers: `/etc/hosts`, then the DNS servers of `/etc/resolv.conf`). Record TTLs
/// are not seen; the interval sets how fresh the set is, as Envoy's `dns_refresh_rate` does.
pub(super) struct Dns(pub(super) String);

impl Source for Dns {
    fn resolve(&self) -> Pin<Box<dyn Future<Output = Answer> + Send + '_>> {
        Box::pin(async move {
            let addrs = tokio::net::lookup_host(self.0.as_str()).await.map_err(|e| e.to_string())?;
            Ok(addrs.collect())
        })
    }

    fn describe(&self) -> String {
        format!("dns {}", self.0)
    }
}

/// A file of `ip:port` lines (blank lines and `#` comments ignored), read again each time.
pub(super) struct File(pub(super) PathBuf);

impl Source for File {
    fn resolve(&self) -> Pin<Box<dyn Future<Output = Answer> + Send + '_>> {
        Box::pin(async move {
            // A small local file, read in place as the config reload reads its file.
            let text = std::fs::read_to_string(&self.0).map_err(|e| e.to_string())?;
            parse_list(&text)
        })
    }

    fn describe(&self) -> String {
        format!("file {}", self.0.display())
    }
}

/// The addresses of an endpoint file; an error names the first bad line.
pub(super) fn parse_list(text: &str) -> Answer {
    let lines = text.lines().enumerate().map(|(i, line)| (i + 1, line.split('#').next().unwrap_or("").trim()));
    lines
        .filter(|(_, line)| !line.is_empty())
        .map(|(n, line)| {
            line.parse().map_err(|_| format!("line {n}: expected an address like 10.0.0.7:8080, got {line:?}"))
        })
        .collect()
}

/// Starts the task that finds `upstream`'s endpoints as its file's `discovery` says.
pub(super) fn spawn(upstream: &Arc<Upstream>, config: &config::Discovery) {
    let upstream = Arc::downgrade(upstream);
    match (&config.dns, &config.file, &config.kubernetes) {
        (Some(name), _, _) => tokio::spawn(run(upstream, Box::new(Dns(name.clone())), config.interval())),
        (None, Some(path), _) => tokio::spawn(run(upstream, Box::new(File(path.clone())), config.interval())),
        #[cfg(feature = "kube")]
        (None, None, Some(service)) => tokio::spawn(super::kubernetes::run(upstream, service.clone())),
        // Validation asks for exactly one, and refuses `kubernetes` without the feature.
        _ => unreachable!("a validated discovery has a source this build supports"),
    };
}

/// Asks `source` at once and then every `interval`, applying each answer to `upstream`, until
/// the upstream is gone.
async fn run(upstream: Weak<Upstream>, source: Box<dyn Source>, interval: Duration) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let answer = source.resolve().await;
        let Some(upstream) = upstream.upgrade() else { return };
        apply(&upstream, &source.describe(), answer);
    }
}

/// Applies one answer of `source` (described for logs): a set replaces the endpoints; an error or
/// an empty set keeps them and is logged and counted. Either way the upstream counts as
/// discovered from then on.
pub(super) fn apply(upstream: &Upstream, source: &str, answer: Answer) {
    apply_answer(upstream, source, answer);
    upstream.discovered.send_replace(true);
}

fn apply_answer(upstream: &Upstream, source: &str, answer: Answer) {
    let name = &upstream.name;
    let why = match answer {
        Ok(addrs) if !addrs.is_empty() => {
            let change = upstream.set_endpoints(&addrs);
            if !change.added.is_empty() || !change.removed.is_empty() {
                let list = |a: &[SocketAddr]| a.iter().map(SocketAddr::to_string).collect::<Vec<_>>().join(" ");
                eprintln!(
                    "tailguard proxy: upstream {name}: {} endpoints from {}: added [{}], draining [{}]",
                    addrs.len(),
                    source,
                    list(&change.added),
                    list(&change.removed)
                );
            }
            return;
        }
        Ok(_) => "no address".to_string(),
        Err(e) => e,
    };
    upstream.metrics.discovery_errors.inc();
    let kept = upstream.live().len();
    eprintln!("tailguard proxy: upstream {name}: {source} answered {why}; keeping the last {kept} endpoints");
}

#[cfg(test)]
mod tests {
    use super::super::routes::Routes;
    use super::*;
    use crate::metrics::Metrics;
    use std::sync::Arc;

    fn set(addrs: &[&str]) -> BTreeSet<SocketAddr> {
        addrs.iter().map(|a| a.parse().unwrap()).collect()
    }

    #[test]
    fn answers_add_drain_and_bring_back_endpoints_and_failures_keep_the_last_set() {
        let config = crate::Config::parse(
            "egress: {listen: 127.0.0.1:1, upstreams: {a: {endpoints: [127.0.0.1:1001, 127.0.0.1:1002]}}}",
            std::path::Path::new("proxy.yaml"),
        )
        .unwrap();
        let routes = Routes::new(config.egress.as_ref().unwrap(), None, &Arc::new(Metrics::new()), 1).expect("no TLS");
        let upstream = &routes.upstreams[0];
        let ids = |u: &Upstream| {
            let core = u.core();
            let mut ids: Vec<(SocketAddr, usize)> = core.ids.iter().map(|(a, id)| (*a, *id)).collect();
            ids.sort_unstable();
            (ids, core.policy.retired.clone())
        };
        // 1001 leaves, 1003 joins: 1001 keeps its id, retired; 1003 gets the next id.
        apply(upstream, "fed", Ok(set(&["127.0.0.1:1002", "127.0.0.1:1003"])));
        assert_eq!(upstream.live(), set(&["127.0.0.1:1002", "127.0.0.1:1003"]).into_iter().collect::<Vec<_>>());
        let all = vec![
            ("127.0.0.1:1001".parse().unwrap(), 0),
            ("127.0.0.1:1002".parse().unwrap(), 1),
            ("127.0.0.1:1003".parse().unwrap(), 2),
        ];
        assert_eq!(ids(upstream), (all.clone(), vec![0]));
        assert_eq!(upstream.endpoint(2).map(|e| e.addr), Some("127.0.0.1:1003".parse().unwrap()));
        assert_eq!(upstream.metrics.endpoints.get(), 2);
        // A failure and an empty answer keep the set, and count.
        apply(upstream, "fed", Err("timed out".to_string()));
        apply(upstream, "fed", Ok(BTreeSet::new()));
        assert_eq!(ids(upstream), (all.clone(), vec![0]));
        assert_eq!(upstream.metrics.discovery_errors.get(), 2);
        // 1001 comes back with its id; nothing else changes.
        assert_eq!(
            upstream.set_endpoints(&set(&["127.0.0.1:1001", "127.0.0.1:1002", "127.0.0.1:1003"])),
            super::super::routes::Change { added: vec!["127.0.0.1:1001".parse().unwrap()], removed: vec![] }
        );
        assert_eq!(ids(upstream), (all, vec![]));
        assert_eq!(upstream.metrics.endpoints.get(), 3);
    }

    #[test]
    fn an_endpoint_file_lists_addresses_with_comments_and_names_a_bad_line() {
        let set = parse_list("# backend\n127.0.0.1:8081\n\n  [::1]:8082  # the v6 one\n127.0.0.1:8081\n").unwrap();
        let expected: BTreeSet<SocketAddr> = ["127.0.0.1:8081".parse().unwrap(), "[::1]:8082".parse().unwrap()].into();
        assert_eq!(set, expected);
        assert_eq!(parse_list("").unwrap(), BTreeSet::new());
        let e = parse_list("127.0.0.1:1\nbackend:80\n").unwrap_err();
        assert_eq!(e, "line 2: expected an address like 10.0.0.7:8080, got \"backend:80\"");
    }
}
