//! Validation of an experiment: everything deserialisation cannot check. Each check reports the
//! dotted path of the field at fault and what was expected; the caller names the file.
//!
//! Checked: every service reference exists, calls form no cycle, the workload's target exists,
//! exactly one of `workload.open`/`closed` and of `duration`/`requests`, counts ≥ 1, fractions in
//! [0, 1], rates and most durations > 0, variant and scenario names unique and non-empty, `edges`
//! keys name real call edges and `admission` keys real services, and the parameters of every
//! distribution, latency model and fault (by building them, where the model crate can); each
//! policy checks its own parameters (its config type's `validate()`, crates/policy).

use crate::duration::Dur;
use crate::error::{join, ModelError};
use crate::real::Kind;
use crate::schema::*;
use indexmap::IndexMap;
use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;
use tailguard_policy::config;

/// The caller name that addresses the load generator in `edges` keys (`workload->frontend`).
pub const WORKLOAD_CALLER: &str = "workload";

type Check = Result<(), ModelError>;

/// Whether the services checked are the file as written or a resolved run: replica indices (of
/// groups and faults) are checked in a resolved run only, as overrides may change `replicas`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    Written,
    Resolved,
}

/// The whole file as written: topology, workload, variants and scenarios.
pub(crate) fn experiment(file: &ExperimentFile, base_dir: &Path) -> Check {
    if file.name.trim().is_empty() {
        return Err(ModelError::at("name", "expected a non-empty name"));
    }
    topology(&file.services, &file.workload, base_dir, Stage::Written)?;
    if file.variants.is_empty() {
        return Err(ModelError::at("variants", "expected at least one variant"));
    }
    unique_names("variants", file.variants.iter().map(|v| v.name.as_str()))?;
    unique_names("scenarios", file.scenarios.iter().map(|s| s.name.as_str()))?;
    for (i, variant) in file.variants.iter().enumerate() {
        self::variant(variant, &file.services, &file.workload).map_err(|e| e.under(&format!("variants.{i}")))?;
    }
    Ok(())
}

/// The services and the workload (a resolved run, or the file as written).
pub(crate) fn topology(
    services: &IndexMap<String, Service>,
    workload: &Workload,
    base_dir: &Path,
    stage: Stage,
) -> Check {
    if services.is_empty() {
        return Err(ModelError::at("services", "expected at least one service"));
    }
    let horizon = workload.duration.map(|d| workload.warmup.get() + d.get());
    for (name, service) in services {
        let at = format!("services.{name}");
        service_name(name).map_err(|m| ModelError::at(&at, m))?;
        self::service(service, services, base_dir, horizon).map_err(|e| e.under(&at))?;
        if stage == Stage::Resolved {
            replica_indices(service).map_err(|e| e.under(&at))?;
        }
    }
    no_cycles(services)?;
    self::workload(workload, services).map_err(|e| e.under("workload"))
}

fn service_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("expected a non-empty service name".into());
    }
    if name.contains('.') || name.contains("->") || name.chars().any(char::is_whitespace) {
        return Err(format!("expected a service name without '.', '->' or spaces, got {name:?}"));
    }
    if name == WORKLOAD_CALLER {
        return Err(format!(
            "the name {WORKLOAD_CALLER:?} is reserved for the load generator in `edges` keys; expected another name"
        ));
    }
    Ok(())
}

fn service(s: &Service, services: &IndexMap<String, Service>, base_dir: &Path, horizon: Option<Duration>) -> Check {
    if s.replicas == 0 {
        return Err(ModelError::at("replicas", "expected a positive integer, got 0"));
    }
    s.service_time.sampler(base_dir).map_err(|e| e.under("service_time"))?;
    if let Some(w) = &s.work {
        if s.service_time != Distribution::default() {
            return Err(ModelError::at("work", "expected either `service_time` or `work`, not both"));
        }
        work(w, base_dir).map_err(|e| e.under("work"))?;
    }
    routes(s, services, base_dir).map_err(|e| e.under("routes"))?;
    s.latency_model.curve(horizon, 0).map_err(|e| e.under("latency_model"))?;
    admission(&s.admission).map_err(|e| e.under("admission"))?;
    faults(&s.faults, base_dir)?;
    for (name, g) in &s.groups {
        group(g, base_dir, horizon).map_err(|e| e.under(&format!("groups.{name}")))?;
    }
    calls(&s.calls, services)?;
    without_sidecar(s)?;
    real(s, services)
}

/// Call edges: known callees, routes of theirs, and sound policies.
fn calls(calls: &[CallEdge], services: &IndexMap<String, Service>) -> Check {
    for (i, call) in calls.iter().enumerate() {
        let at = format!("calls.{i}");
        known_service(&call.service, services).map_err(|m| ModelError::at(join(&at, "service"), m))?;
        let callee = &services[&call.service];
        if let Some(route) = &call.route {
            known_route(route, &call.service, callee).map_err(|m| ModelError::at(join(&at, "route"), m))?;
        }
        client_policy(&call.policy).map_err(|e| e.under(&join(&at, "policy")))?;
        for name in call.policy.routes.keys() {
            known_route(name, &call.service, callee)
                .map_err(|m| ModelError::at(join(&at, &format!("policy.routes.{name}")), m))?;
        }
    }
    Ok(())
}

fn known_route(name: &str, service: &str, callee: &Service) -> Result<(), String> {
    if callee.routes.iter().any(|r| r.name == name) {
        return Ok(());
    }
    if callee.routes.is_empty() {
        return Err(format!("service {service:?} has no routes; expected none named {name:?}"));
    }
    Err(format!(
        "service {service:?} has no route named {name:?}; expected one of: {}",
        callee.route_names().join(", ")
    ))
}

fn work(w: &Work, base_dir: &Path) -> Check {
    for (field, d) in [("per_request", &w.per_request), ("per_attempt", &w.per_attempt)] {
        if let Some(d) = d {
            d.sampler(base_dir).map_err(|e| e.under(field))?;
        }
    }
    Ok(())
}

/// A service's routes: unique names, positive weights, paths from the root, a method that is an
/// HTTP token, their own work and calls sound.
fn routes(s: &Service, services: &IndexMap<String, Service>, base_dir: &Path) -> Check {
    unique_names("", s.routes.iter().map(|r| r.name.as_str()))
        .map_err(|e| ModelError { path: e.path.trim_start_matches('.').to_string(), ..e })?;
    for (i, r) in s.routes.iter().enumerate() {
        let at = |field: &str| format!("{i}.{field}");
        if r.name.trim().is_empty() || r.name.contains('.') {
            return Err(ModelError::at(at("name"), format!("expected a non-empty name without '.', got {:?}", r.name)));
        }
        if !(r.weight.is_finite() && r.weight > 0.0) {
            return Err(ModelError::at(at("weight"), format!("expected a weight > 0, got {}", r.weight)));
        }
        let path = &r.matches.path;
        if !path.starts_with('/') || path.chars().any(|c| c.is_whitespace() || c == '?' || c == '#') {
            return Err(ModelError::at(
                at("match.path"),
                format!("expected a path from the root without spaces, '?' or '#' (/search), got {path:?}"),
            ));
        }
        if let Some(m) = &r.matches.method {
            if m.is_empty() || !m.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)) {
                return Err(ModelError::at(at("match.method"), format!("expected an HTTP method (GET), got {m:?}")));
            }
        }
        if let Some(d) = &r.service_time {
            if r.work.is_some() {
                return Err(ModelError::at(at("work"), "expected either `service_time` or `work`, not both"));
            }
            d.sampler(base_dir).map_err(|e| e.under(&at("service_time")))?;
        }
        if let Some(w) = &r.work {
            work(w, base_dir).map_err(|e| e.under(&at("work")))?;
        }
        if let Some(own) = &r.calls {
            calls(own, services).map_err(|e| e.under(&i.to_string()))?;
        }
    }
    Ok(())
}

/// What a replica without tailguard's sidecar (`sidecar: false`) cannot have: admission (the
/// sidecar's ingress admits) and calls (they go out through its egress).
fn without_sidecar(s: &Service) -> Check {
    for r in 0..s.replicas {
        let replica = s.for_replica(r);
        if replica.sidecar {
            continue;
        }
        let at = s.groups.iter().find(|(_, g)| g.replicas.contains(r) && g.sidecar == Some(false));
        let at = at.map_or("sidecar".to_string(), |(name, _)| format!("groups.{name}.sidecar"));
        if !replica.calls.is_empty() {
            let why =
                format!("replica {r} runs no sidecar, whose egress its calls would go through; expected no `calls`");
            return Err(ModelError::at(at, why));
        }
        if replica.admission != AdmissionConfig::None {
            let why = format!("replica {r} runs no sidecar to admit requests; expected no `admission` for it");
            return Err(ModelError::at(at, why));
        }
    }
    Ok(())
}

/// A real program's parameters, and what such a node cannot do: redis and memcached make no
/// calls and have no sidecar (no admission, no workers); nginx proxies to at most one service that
/// speaks HTTP; no real program has injected faults; only a synthetic service calls redis or
/// memcached (it speaks their protocols).
fn real(s: &Service, services: &IndexMap<String, Service>) -> Check {
    s.program()?;
    let kind = s.kind;
    if kind == Kind::Synthetic {
        return Ok(());
    }
    let not = |at: &str, what: &str| Err(ModelError::at(at, format!("a {} service {what}", kind.name())));
    if !s.faults.is_empty() {
        return not("faults", "runs the real program; expected no injected faults");
    }
    if !s.routes.is_empty() || s.work.is_some() {
        return not("routes", "runs the real program; expected no `routes` or `work`");
    }
    if !s.groups.is_empty() {
        return not("groups", "runs the real program; expected no replica groups");
    }
    if kind == Kind::Nginx {
        if s.calls.len() > 1 || s.calls.iter().any(|c| c.count != 1) {
            return not("calls", "proxies each request to one service; expected at most one call with count 1");
        }
    } else {
        if !s.calls.is_empty() {
            return not("calls", "calls no other service; expected no `calls`");
        }
        if s.admission != AdmissionConfig::None {
            return not("admission", "has no sidecar to admit requests; expected no `admission`");
        }
        if s.workers != 0 {
            return not("workers", "sets its threads in `config`; expected no `workers`");
        }
    }
    for (i, call) in s.calls.iter().enumerate() {
        if services.get(&call.service).is_some_and(|callee| !callee.kind.speaks_http()) {
            return not(&format!("calls.{i}.service"), "speaks HTTP only; expected a synthetic or nginx callee");
        }
    }
    Ok(())
}

fn known_service(name: &str, services: &IndexMap<String, Service>) -> Result<(), String> {
    if services.contains_key(name) {
        return Ok(());
    }
    let known: Vec<&str> = services.keys().map(String::as_str).collect();
    Err(format!("no service named {name:?}; expected one of: {}", known.join(", ")))
}

/// Depth-first search over the call graph; a call back into the current path is a cycle.
fn no_cycles(services: &IndexMap<String, Service>) -> Check {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    fn visit(i: usize, services: &IndexMap<String, Service>, marks: &mut [Mark], path: &mut Vec<usize>) -> Check {
        marks[i] = Mark::OnPath;
        path.push(i);
        let (name, service) = services.get_index(i).expect("an index of the map");
        for (c, call) in service.all_calls().enumerate() {
            let Some(j) = services.get_index_of(&call.service) else { continue };
            match marks[j] {
                Mark::Done => {}
                Mark::New => visit(j, services, marks, path)?,
                Mark::OnPath => {
                    let from = path.iter().position(|&k| k == j).expect("on the path");
                    let mut cycle: Vec<&str> =
                        path[from..].iter().map(|&k| services.get_index(k).unwrap().0.as_str()).collect();
                    cycle.push(&call.service);
                    return Err(ModelError::at(
                        format!("services.{name}.calls.{c}.service"),
                        format!(
                            "calls form a cycle ({}); expected calls that never lead back to their caller",
                            cycle.join(" -> ")
                        ),
                    ));
                }
            }
        }
        path.pop();
        marks[i] = Mark::Done;
        Ok(())
    }
    let mut marks = vec![Mark::New; services.len()];
    for i in 0..services.len() {
        if marks[i] == Mark::New {
            visit(i, services, &mut marks, &mut Vec::new())?;
        }
    }
    Ok(())
}

fn workload(w: &Workload, services: &IndexMap<String, Service>) -> Check {
    known_service(&w.target, services).map_err(|m| ModelError::at("target", m))?;
    if !services[&w.target].kind.speaks_http() {
        return Err(ModelError::at(
            "target",
            format!("the load generator speaks HTTP; expected a synthetic or nginx service, got {:?}", w.target),
        ));
    }
    match (&w.open, &w.closed) {
        (Some(open), None) => {
            if !(open.rate.is_finite() && open.rate > 0.0) {
                return Err(ModelError::at(
                    "open.rate",
                    format!("expected requests per second > 0, got {}", open.rate),
                ));
            }
        }
        (None, Some(closed)) => {
            if closed.clients == 0 {
                return Err(ModelError::at("closed.clients", "expected a positive integer, got 0"));
            }
        }
        _ => return Err(ModelError::at("", "expected exactly one of `open` (a rate) and `closed` (clients)")),
    }
    match (w.duration, w.requests) {
        (Some(d), None) => positive("duration", d)?,
        (None, Some(0)) => return Err(ModelError::at("requests", "expected a positive integer, got 0")),
        (None, Some(_)) => {}
        _ => return Err(ModelError::at("", "expected exactly one of `duration` and `requests`")),
    }
    client_policy(&w.client).map_err(|e| e.under("client"))?;
    for name in w.client.routes.keys() {
        known_route(name, &w.target, &services[&w.target])
            .map_err(|m| ModelError::at(format!("client.routes.{name}"), m))?;
    }
    Ok(())
}

fn variant(v: &Variant, services: &IndexMap<String, Service>, workload: &Workload) -> Check {
    if let Some(client) = &v.client {
        client_policy(client).map_err(|e| e.under("client"))?;
    }
    for (key, policy) in &v.edges {
        let at = format!("edges.{key}");
        edge_key(key, services, workload).map_err(|m| ModelError::at(&at, m))?;
        client_policy(policy).map_err(|e| e.under(&at))?;
    }
    for (name, a) in &v.admission {
        let at = format!("admission.{name}");
        known_service(name, services).map_err(|m| ModelError::at(&at, m))?;
        admission(a).map_err(|e| e.under(&at))?;
    }
    Ok(())
}

/// Splits an `edges` key `caller->callee` and checks it names a real call edge (or the load
/// generator's calls to the target, `workload->target`).
pub(crate) fn edge_key<'k>(
    key: &'k str,
    services: &IndexMap<String, Service>,
    workload: &Workload,
) -> Result<(&'k str, &'k str), String> {
    let Some((caller, callee)) = key.split_once("->") else {
        return Err(format!("expected a key of the form caller->callee, got {key:?}"));
    };
    let (caller, callee) = (caller.trim(), callee.trim());
    if caller == WORKLOAD_CALLER {
        if callee != workload.target {
            return Err(format!(
                "the workload calls only {:?}; expected workload->{}",
                workload.target, workload.target
            ));
        }
        return Ok((caller, callee));
    }
    known_service(caller, services)?;
    let calls: Vec<&CallEdge> = services[caller].all_calls().collect();
    if !calls.iter().any(|c| c.service == callee) {
        let mut callees: Vec<&str> = calls.iter().map(|c| c.service.as_str()).collect();
        callees.dedup();
        let expected = if callees.is_empty() {
            "it calls no service".to_string()
        } else {
            format!("it calls: {}", callees.join(", "))
        };
        return Err(format!("{caller} does not call {callee:?}; {expected}"));
    }
    Ok((caller, callee))
}

/// Overrides may change anything but the lists of variants and scenarios and the quick overrides.
pub(crate) fn override_root(path: &str) -> Result<(), String> {
    let root = path.split('.').next().unwrap_or("");
    if matches!(root, "variants" | "scenarios" | "quick") {
        return Err(format!("overrides cannot change `{root}`; expected a path into services, network or workload"));
    }
    Ok(())
}

fn unique_names<'a>(list: &str, names: impl Iterator<Item = &'a str>) -> Check {
    let mut seen = HashSet::new();
    for (i, name) in names.enumerate() {
        if name.trim().is_empty() {
            return Err(ModelError::at(format!("{list}.{i}.name"), "expected a non-empty name"));
        }
        if !seen.insert(name) {
            return Err(ModelError::at(
                format!("{list}.{i}.name"),
                format!("expected a unique name, got {name:?} a second time"),
            ));
        }
    }
    Ok(())
}

/// An admission policy: the parameters it needs to make sense.
pub fn admission(a: &AdmissionConfig) -> Check {
    Ok(a.validate()?)
}

/// A group's own fields, checked as the service's are.
fn group(g: &Group, base_dir: &Path, horizon: Option<Duration>) -> Check {
    if g.replicas.0.is_empty() {
        return Err(ModelError::at("replicas", "expected at least one replica index"));
    }
    if let Some(d) = &g.service_time {
        d.sampler(base_dir).map_err(|e| e.under("service_time"))?;
    }
    if let Some(m) = &g.latency_model {
        m.curve(horizon, 0).map_err(|e| e.under("latency_model"))?;
    }
    if let Some(a) = &g.admission {
        admission(a).map_err(|e| e.under("admission"))?;
    }
    faults(&g.faults, base_dir)
}

/// The replica indices of a resolved service: every group's and fault's replicas exist, no
/// replica is in two groups, and a group's fault names one of the group's replicas.
fn replica_indices(s: &Service) -> Check {
    let exists = |at: &str, r: u32| {
        if r < s.replicas {
            return Ok(());
        }
        Err(ModelError::at(
            at,
            format!(
                "expected a replica index from 0 to {} (the service has {} replicas), got {r}",
                s.replicas - 1,
                s.replicas
            ),
        ))
    };
    for (i, f) in s.faults.iter().enumerate() {
        f.replica.map_or(Ok(()), |r| exists(&format!("faults.{i}.replica"), r))?;
    }
    let mut owner: IndexMap<u32, &str> = IndexMap::new();
    for (name, g) in &s.groups {
        let at = format!("groups.{name}.replicas");
        for &r in &g.replicas.0 {
            exists(&at, r)?;
            if let Some(other) = owner.insert(r, name) {
                if other != name {
                    return Err(ModelError::at(
                        &at,
                        format!("replica {r} is also in group {other:?}; expected each replica in at most one group"),
                    ));
                }
            }
        }
        for (i, f) in g.faults.iter().enumerate() {
            if let Some(r) = f.replica.filter(|r| !g.replicas.contains(*r)) {
                let list: Vec<String> = g.replicas.0.iter().map(u32::to_string).collect();
                return Err(ModelError::at(
                    format!("groups.{name}.faults.{i}.replica"),
                    format!("expected one of the group's replicas ({}), got {r}", list.join(", ")),
                ));
            }
        }
    }
    Ok(())
}

fn faults(faults: &[Fault], base_dir: &Path) -> Check {
    for (i, f) in faults.iter().enumerate() {
        fault(f, base_dir).map_err(|e| e.under(&format!("faults.{i}")))?;
    }
    Ok(())
}

fn fault(f: &Fault, base_dir: &Path) -> Check {
    if let (Some(from), Some(until)) = (f.from, f.until) {
        if until <= from {
            return Err(ModelError::at("until", format!("expected a time after from ({from}), got {until}")));
        }
    }
    match &f.kind {
        FaultKind::Slow { fraction, every, service_time, factor } => {
            match (fraction, every) {
                (Some(x), None) => self::fraction("fraction", *x)?,
                (None, Some(0)) => return Err(ModelError::at("every", "expected a positive integer, got 0")),
                (None, Some(_)) => {}
                _ => return Err(ModelError::at("", "expected exactly one of `fraction` and `every`")),
            }
            match (service_time, factor) {
                (Some(d), None) => d.sampler(base_dir).map(drop).map_err(|e| e.under("service_time")),
                (None, Some(x)) => non_negative("factor", *x),
                _ => Err(ModelError::at("", "expected exactly one of `service_time` and `factor`")),
            }
        }
        FaultKind::Error { rate, .. } => fraction("rate", *rate),
        FaultKind::Lost { fraction } => self::fraction("fraction", *fraction),
        FaultKind::Hang {} if f.until.is_none() => Err(ModelError::at(
            "until",
            "expected the time a hang ends (a replica that never answers is a `lost` fault)",
        )),
        FaultKind::Hang {} | FaultKind::Down {} => Ok(()),
    }
}

/// A caller's policies: the parameters each policy needs to make sense (each policy's config
/// checks its own, crates/policy).
pub fn client_policy(p: &ClientPolicy) -> Check {
    p.balancer.validate().map_err(|e| ModelError::from(e).under("balancer"))?;
    p.outlier.validate().map_err(|e| ModelError::from(e).under("outlier"))?;
    p.timeout.validate().map_err(|e| ModelError::from(e).under("timeout"))?;
    p.hedge.validate().map_err(|e| ModelError::from(e).under("hedge"))?;
    p.retry.validate().map_err(|e| ModelError::from(e).under("retry"))?;
    p.deadline.map_or(Ok(()), |d| positive("deadline", d))?;
    for (name, route) in &p.routes {
        route_policy(route).map_err(|e| e.under(&format!("routes.{name}")))?;
    }
    Ok(())
}

/// A route's overrides of its caller's policy.
pub fn route_policy(r: &RoutePolicy) -> Check {
    if let Some(t) = &r.timeout {
        t.validate().map_err(|e| ModelError::from(e).under("timeout"))?;
    }
    if let Some(h) = &r.hedge {
        h.validate().map_err(|e| ModelError::from(e).under("hedge"))?;
    }
    r.deadline.map_or(Ok(()), |d| positive("deadline", d))
}

// The checks policies make, for the rest of the file (same words everywhere).
fn positive(field: &str, d: Dur) -> Check {
    Ok(config::positive(field, d.get())?)
}

fn fraction(field: &str, x: f64) -> Check {
    Ok(config::fraction(field, x)?)
}

fn non_negative(field: &str, x: f64) -> Check {
    Ok(config::non_negative(field, x)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn services(text: &str) -> IndexMap<String, Service> {
        serde_yaml_ng::from_str(text).unwrap()
    }

    fn workload(target: &str) -> Workload {
        serde_yaml_ng::from_str(&format!("{{target: {target}, open: {{rate: 10}}, duration: 1s}}")).unwrap()
    }

    fn check(text: &str) -> String {
        topology(&services(text), &workload("a"), Path::new("."), Stage::Resolved)
            .map(|_| "ok".to_string())
            .unwrap_or_else(|e| e.to_string())
    }

    #[test]
    fn a_valid_topology_passes() {
        assert_eq!(check("{a: {calls: [{service: b}, {service: c}]}, b: {calls: [{service: c}]}, c: {}}"), "ok");
    }

    #[test]
    fn a_self_call_is_a_cycle() {
        assert_eq!(
            check("{a: {calls: [{service: a}]}}"),
            "services.a.calls.0.service: calls form a cycle (a -> a); expected calls that never lead back to their caller"
        );
    }

    #[test]
    fn a_longer_cycle_is_shown_from_where_it_closes() {
        assert_eq!(
            check("{a: {calls: [{service: b}]}, b: {calls: [{service: c}]}, c: {calls: [{service: b}]}}"),
            "services.c.calls.0.service: calls form a cycle (b -> c -> b); expected calls that never lead back to their caller"
        );
    }

    #[test]
    fn service_names_must_fit_paths_and_edge_keys() {
        assert!(check("{a: {}, b.c: {}}").starts_with("services.b.c: expected a service name without '.'"));
        assert!(check("{a: {}, workload: {}}").contains("reserved for the load generator"));
    }

    #[test]
    fn real_programs_are_checked() {
        let ok = "{a: {calls: [{service: web}, {service: cache}]}, web: {kind: nginx, config: {worker_processes: 2}, calls: [{service: b}]}, b: {}, cache: {kind: redis, replicas: 2, config: {hz: 20}}}";
        assert_eq!(check(ok), "ok");
        assert_eq!(
            check("{a: {calls: [{service: c}]}, c: {kind: memcached, config: {threads: 0}}}"),
            "services.c.config.threads: expected an integer from 1 to 256, got 0"
        );
        assert_eq!(
            check("{a: {calls: [{service: c}]}, c: {kind: redis, calls: [{service: d}]}, d: {}}"),
            "services.c.calls: a redis service calls no other service; expected no `calls`"
        );
        assert_eq!(
            check("{a: {kind: nginx, calls: [{service: c}]}, c: {kind: redis}}"),
            "services.a.calls.0.service: a nginx service speaks HTTP only; expected a synthetic or nginx callee"
        );
        assert_eq!(
            check("{a: {calls: [{service: c}]}, c: {kind: memcached, workers: 2}}"),
            "services.c.workers: a memcached service sets its threads in `config`; expected no `workers`"
        );
        assert!(check("{a: {kind: redis}}").starts_with("workload.target: the load generator speaks HTTP"));
    }

    #[test]
    fn faults_are_checked() {
        let slow = |f: &str| check(&format!("{{a: {{replicas: 2, faults: [{f}]}}}}"));
        assert_eq!(slow("{kind: slow, fraction: 0.1, factor: 3}"), "ok");
        assert_eq!(
            slow("{kind: slow, fraction: 0.1, every: 3, factor: 3}"),
            "services.a.faults.0: expected exactly one of `fraction` and `every`"
        );
        assert_eq!(
            slow("{kind: slow, every: 3}"),
            "services.a.faults.0: expected exactly one of `service_time` and `factor`"
        );
        assert_eq!(
            slow("{kind: down, replica: 2, from: 1s, to: 2s}"),
            "services.a.faults.0.replica: expected a replica index from 0 to 1 (the service has 2 replicas), got 2"
        );
        assert_eq!(
            slow("{kind: down, from: 2s, to: 1s}"),
            "services.a.faults.0.until: expected a time after from (2s), got 1s"
        );
        assert_eq!(
            slow("{kind: hang, from: 2s}"),
            "services.a.faults.0.until: expected the time a hang ends (a replica that never answers is a `lost` fault)"
        );
        assert_eq!(slow("{kind: error, after: 0s, replica: 1, from: 1s, until: 2s}"), "ok");
        // Each kind refuses the fields of the others; the window's fields are every kind's.
        let parse = |f: &str| serde_yaml_ng::from_str::<Fault>(f).map(|_| ()).map_err(|e| e.to_string());
        assert_eq!(
            parse("{kind: hang, until: 2s, every: 3}"),
            Err("unknown field `every`, there are no fields".into())
        );
        assert!(parse("{kind: error, fraction: 0.5}").unwrap_err().starts_with("unknown field `fraction`, expected"));
        assert_eq!(parse("{kind: down, replica: 1, from: 1s, to: 2s}"), Ok(()));
        assert_eq!(
            slow("{kind: lost, fraction: -0.1}"),
            "services.a.faults.0.fraction: expected a fraction between 0 and 1, got -0.1"
        );
    }

    #[test]
    fn groups_are_checked_and_named_in_errors() {
        let group = |g: &str| check(&format!("{{a: {{replicas: 4, groups: {g}}}}}"));
        assert_eq!(group("{slow: {replicas: \"0-1\", workers: 2}, odd: {replicas: [3]}}"), "ok");
        assert_eq!(
            group("{slow: {replicas: \"2-4\"}}"),
            "services.a.groups.slow.replicas: expected a replica index from 0 to 3 (the service has 4 replicas), got 4"
        );
        assert_eq!(
            group("{slow: {replicas: \"0-2\"}, odd: {replicas: [1, 3]}}"),
            "services.a.groups.odd.replicas: replica 1 is also in group \"slow\"; expected each replica in at most one group"
        );
        assert_eq!(
            group("{slow: {replicas: 1, faults: [{kind: down, replica: 2}]}}"),
            "services.a.groups.slow.faults.0.replica: expected one of the group's replicas (1), got 2"
        );
        assert_eq!(
            group("{slow: {replicas: 1, service_time: {dist: exponential, mean: 0s}}}"),
            "services.a.groups.slow.service_time.mean: expected a positive duration, got 0s"
        );
        assert_eq!(
            group("{slow: {replicas: 0, faults: [{kind: lost, fraction: 2}]}}"),
            "services.a.groups.slow.faults.0.fraction: expected a fraction between 0 and 1, got 2"
        );
        assert_eq!(
            group("{slow: {replicas: []}}"),
            "services.a.groups.slow.replicas: expected at least one replica index"
        );
    }

    #[test]
    fn latency_models_without_a_horizon_need_their_times() {
        let s = services("{a: {latency_model: {kind: slow-increase, from: 1, to: 2}}}");
        let mut w = workload("a");
        assert!(topology(&s, &w, Path::new("."), Stage::Resolved).is_ok());
        w.duration = None;
        w.requests = Some(100);
        let e = topology(&s, &w, Path::new("."), Stage::Resolved).unwrap_err().to_string();
        assert!(e.starts_with("services.a.latency_model.end: expected a duration"), "{e}");
    }

    #[test]
    fn edge_keys_are_parsed_and_checked() {
        let s = services("{a: {calls: [{service: b}]}, b: {}}");
        let w = workload("a");
        assert_eq!(edge_key("a->b", &s, &w), Ok(("a", "b")));
        assert_eq!(edge_key(" a -> b ", &s, &w), Ok(("a", "b")));
        assert_eq!(edge_key("workload->a", &s, &w), Ok(("workload", "a")));
        assert_eq!(edge_key("workload->b", &s, &w), Err("the workload calls only \"a\"; expected workload->a".into()));
        assert_eq!(edge_key("b->a", &s, &w), Err("b does not call \"a\"; it calls no service".into()));
        assert_eq!(edge_key("x->a", &s, &w), Err("no service named \"x\"; expected one of: a, b".into()));
        assert_eq!(edge_key("a=>b", &s, &w), Err("expected a key of the form caller->callee, got \"a=>b\"".into()));
    }

    #[test]
    fn policies_are_checked() {
        let policy = |text: &str| {
            let p: ClientPolicy = serde_yaml_ng::from_str(text).unwrap();
            client_policy(&p).map(|_| "ok".to_string()).unwrap_or_else(|e| e.to_string())
        };
        assert_eq!(
            policy("{timeout: {kind: fixed, value: 0s}}"),
            "timeout.value: expected a positive duration, got 0s"
        );
        assert_eq!(
            policy("{timeout: {kind: exp-backoff, first: 1ms, factor: 0.5}}"),
            "timeout.factor: expected a number >= 1, got 0.5"
        );
        assert_eq!(
            policy("{timeout: {kind: adaptive, initial: 1ms, escalation: 0.5}}"),
            "timeout.escalation: expected a number >= 1, got 0.5"
        );
        assert_eq!(
            policy("{hedge: {kind: speculative, attempts: 0, patience: 1ms}}"),
            "hedge.attempts: expected a positive integer, got 0"
        );
        assert_eq!(
            policy("{hedge: {kind: percentile, percentile: 100}}"),
            "hedge.percentile: expected a percentile between 0 and 100, got 100"
        );
        assert_eq!(
            policy("{hedge: {kind: adaptive, max_inflation: 0.9}}"),
            "hedge.max_inflation: expected a number >= 1, got 0.9"
        );
        assert_eq!(
            policy("{hedge: {kind: speculative, attempts: 2, patience: 1ms, budget: 2}}"),
            "hedge.budget: expected a fraction between 0 and 1, got 2"
        );
        assert_eq!(
            policy("{retry: {backoff: 10ms, max_backoff: 1ms}}"),
            "retry.max_backoff: expected at least backoff (10ms), got 1ms"
        );
        assert_eq!(policy("{retry: {budget: 2}}"), "retry.budget: expected a fraction between 0 and 1, got 2");
        assert_eq!(
            policy("{balancer: {kind: bloc, reset: 0s}}"),
            "balancer.reset: expected a positive duration, got 0s"
        );
        assert_eq!(policy("{deadline: 0s}"), "deadline: expected a positive duration, got 0s");
    }

    #[test]
    fn overrides_may_not_touch_the_lists_of_runs() {
        assert!(override_root("services.a.replicas").is_ok());
        assert!(override_root("variants.0.name").unwrap_err().contains("cannot change `variants`"));
        assert!(override_root("quick").is_err());
    }
}
