"""Dimensionality reduction from request traces (config-tuning.txt §IV-B2): tune only the
parameters of the services that matter.

- **critical-path** (Algorithm 1): the services whose own time on a request's critical path is at
  least 1 ms, in at least `min_share` (10 %) of the traces;
- **variability**: the services whose service time (span duration) has a coefficient of variation
  above 0.5;
- **critical-path+variability**: of the critical-path services, the `top` (5) with the highest
  coefficient of variation;
- **tail** (ours, the default for `--reduce` in docs/tune.md's advice): the services that make the
  slow requests slow. Each service scores its share of the slow requests' *excess* critical time:
  in each request above the p90, its own time on the critical path beyond its median over all
  requests (a service every request waits on equally does not make the tail), each slow request
  counting once whatever its latency (`tail_scores`). Services are kept,
  highest score first, until the kept ones cover `coverage` (95 %) of that excess: the threshold
  adapts to how concentrated the tail's causes are, rather than a fixed share of all traces (which
  misses a service that is on the critical path of exactly the slow 4 %).

Traces are Jaeger's JSON (`{"data": [{"traceID", "spans": [...], "processes": {...}}]}`), as the
lab's collector and `tailguard sim --traces` write them. A parameter belongs to a service by its
path: `services.NAME....` is NAME's, except a call edge's policy
(`services.CALLER.calls.I.policy...`), which belongs to the callee, as do `variants.N.edges.A->B...`
(B), `variants.N.admission.NAME...` (NAME) and `workload.client...` (the workload's target).
Parameters that belong to no single service (the network, `variants.N.client`) are always kept.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from .space import Space

METHODS = ("none", "critical-path", "variability", "critical-path+variability", "tail")


class TraceError(ValueError):
    """A trace file that is not Jaeger JSON."""


@dataclass(frozen=True)
class Span:
    span_id: str
    parent_id: str | None
    service: str
    operation: str
    start: int  # µs since the epoch (any origin works: only differences are used)
    duration: int  # µs

    @property
    def end(self) -> int:
        return self.start + self.duration


def trace_run(trace: dict[str, Any]) -> tuple[str, str] | None:
    """The (scenario, variant) a trace belongs to, from its processes' tags (`tailguard sim
    --traces` tags every process with both), or None when untagged."""
    for proc in (trace.get("processes") or {}).values():
        tags = {t.get("key"): t.get("value") for t in (proc or {}).get("tags") or [] if isinstance(t, dict)}
        if "scenario" in tags and "variant" in tags:
            return str(tags["scenario"]), str(tags["variant"])
    return None


def parse_traces(doc: object, source: str = "traces", runs: tuple[str, ...] | None = None) -> list[list[Span]]:
    """The traces of a Jaeger JSON document (the API's `{"data": [...]}`, a list of traces, or one).

    `runs` keeps only the traces of those `SCENARIO/VARIANT` runs (`*` matches any; an empty tuple
    means the first run in the file); untagged traces are always kept."""
    if isinstance(doc, dict) and "data" in doc:
        doc = doc["data"]
    if isinstance(doc, dict):
        doc = [doc]
    if not isinstance(doc, list):
        raise TraceError(f'{source}: expected Jaeger JSON: {{"data": [traces]}}')
    traces = []
    first_run: tuple[str, str] | None = None
    for i, t in enumerate(doc):
        where = f"{source}: data.{i}"
        if not isinstance(t, dict) or not isinstance(t.get("spans"), list):
            raise TraceError(f"{where}: expected a trace with `spans`")
        run = trace_run(t)
        first_run = first_run or run
        if runs is not None and run is not None:
            wanted = [tuple(r.split("/", 1)) for r in runs] if runs else [first_run or run]
            if not any(s in ("*", run[0]) and v in ("*", run[1]) for s, v in wanted):
                continue
        processes = t.get("processes") or {}
        spans = []
        for j, s in enumerate(t["spans"]):
            try:
                refs = [r for r in s.get("references") or [] if r.get("refType") in ("CHILD_OF", "FOLLOWS_FROM")]
                proc = processes.get(s.get("processID"), {}) if s.get("processID") else s.get("process", {})
                spans.append(
                    Span(
                        span_id=str(s["spanID"]),
                        parent_id=str(refs[0]["spanID"]) if refs else None,
                        service=str(proc.get("serviceName") or "?"),
                        operation=str(s.get("operationName", "")),
                        start=int(s["startTime"]),
                        duration=max(int(s["duration"]), 0),
                    )
                )
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                raise TraceError(f"{where}.spans.{j}: expected spanID, startTime and duration (µs): {e}") from None
        traces.append(spans)
    return traces


def load_traces(path: str, runs: tuple[str, ...] | None = None) -> list[list[Span]]:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise TraceError(f"{path}: cannot read the traces: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise TraceError(f"{path}: not JSON: {e}") from None
    return parse_traces(doc, path, runs)


def critical_path(trace: list[Span]) -> list[tuple[Span, int]]:
    """The spans on the trace's critical path with their own time on it (µs), root first.

    Walking back from a span's end, the child that finished last (before the point reached) is
    on the path; the walk continues from that child's start. Time not covered by such a child is
    the span's own. A child that ends after its parent (a cancelled hedge) counts up to the
    parent's end. Each root (a span whose parent is not in the trace) is walked."""
    ids = {s.span_id for s in trace}
    children: dict[str, list[Span]] = defaultdict(list)
    roots = []
    for s in trace:
        if s.parent_id is None or s.parent_id not in ids or s.parent_id == s.span_id:
            roots.append(s)
        else:
            children[s.parent_id].append(s)
    path: list[tuple[Span, int]] = []
    visited: set[str] = set()

    def walk(span: Span, end: int) -> None:
        # Bounded: each span is walked at most once (`visited`), so even a looping trace ends.
        if span.span_id in visited:
            return
        visited.add(span.span_id)
        entry = len(path)
        path.append((span, 0))
        cursor, own = min(span.end, end), 0
        kids = [c for c in children.get(span.span_id, []) if c.span_id not in visited]
        while True:
            open_kids = [c for c in kids if c.start < cursor and c.span_id not in visited]
            if not open_kids:
                break
            last = max(open_kids, key=lambda c: (min(c.end, cursor), c.start))
            last_end = min(last.end, cursor)
            own += cursor - last_end
            walk(last, last_end)
            cursor = max(last.start, span.start)
        own += max(cursor - span.start, 0)
        path[entry] = (span, own)

    for root in sorted(roots, key=lambda s: s.start):
        walk(root, root.end)
    return path


def entry_spans(trace: list[Span]) -> set[str]:
    """The spans in which a service serves a request: those whose parent ran in another service
    (or that have none). The lab's ingress spans and the simulator's visit spans are these; a
    service's own call and attempt spans (children in the same process) are not."""
    service = {s.span_id: s.service for s in trace}
    return {s.span_id for s in trace if s.parent_id not in service or service[s.parent_id] != s.service}


def own_times(trace: list[Span]) -> dict[str, int]:
    """Each service's own time on the trace's critical path (µs): that of its entry spans not
    covered by their children. What its call and attempt spans add beyond the callee's span (the
    network, the sidecars) belongs to no service."""
    entries = entry_spans(trace)
    own: dict[str, int] = defaultdict(int)
    for span, t in critical_path(trace):
        if span.span_id in entries:
            own[span.service] += t
    return own


def latency(trace: list[Span]) -> int:
    """The request's latency (µs): from its first root span's start to its last root span's end."""
    ids = {s.span_id for s in trace}
    roots = [s for s in trace if s.parent_id is None or s.parent_id not in ids] or trace
    return max(s.end for s in roots) - min(s.start for s in roots) if roots else 0


def critical_services(traces: list[list[Span]], threshold_ms: float = 1.0) -> dict[str, float]:
    """For each service, the share of traces in which its own time on the critical path is at least
    `threshold_ms` (Algorithm 1's "non-negligible latency")."""
    counts: dict[str, int] = defaultdict(int)
    for trace in traces:
        for service, t in own_times(trace).items():
            if t >= threshold_ms * 1000:
                counts[service] += 1
    n = max(len(traces), 1)
    return {s: c / n for s, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))}


@dataclass(frozen=True)
class TailScores:
    """What `tail_scores` found: each service's share of the slow requests' excess critical time
    (summing to 1 over the services with an excess), and the slow requests it was computed on."""

    scores: dict[str, float]
    slow: int  # traces above the quantile
    threshold_ms: float  # their latency from this up


def tail_scores(traces: list[list[Span]], slow_quantile: float = 0.9) -> TailScores:
    """Each service's share of the excess critical time of the requests slower than the
    `slow_quantile` of the traced latencies. A service's excess in a request is its own time on
    the critical path beyond its median over all requests; each slow request splits one unit among
    the services by their excess, so a few extreme requests (a Pareto service's outliers) weigh no
    more than any other slow request, and the scores are the mean over the slow requests."""
    own = [own_times(t) for t in traces]
    latencies = [latency(t) for t in traces]
    ordered = sorted(latencies)
    cut = ordered[min(int(slow_quantile * len(ordered)), len(ordered) - 1)] if ordered else 0
    services = sorted({s for o in own for s in o})
    typical = {s: statistics.median(o.get(s, 0) for o in own) for s in services}
    shares: dict[str, float] = dict.fromkeys(services, 0.0)
    slow = 0
    for o, lat in zip(own, latencies, strict=True):
        if lat < cut:
            continue
        slow += 1
        excess = {s: max(o.get(s, 0) - typical[s], 0) for s in services}
        total = sum(excess.values())
        for s, e in excess.items():
            if total > 0:
                shares[s] += e / total
    total = sum(shares.values())
    scores = {s: v / total if total > 0 else 0.0 for s, v in shares.items()}
    return TailScores(dict(sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))), slow, cut / 1000)


def covering(scores: dict[str, float], coverage: float) -> list[str]:
    """The highest-scoring services until their scores sum to `coverage` (scores sum to 1)."""
    kept: list[str] = []
    total = 0.0
    for service, score in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0])):
        if total >= coverage - 1e-12 or score <= 0:
            break
        kept.append(service)
        total += score
    return kept


def service_cv(traces: list[list[Span]]) -> dict[str, float]:
    """Each service's coefficient of variation of its service time: the durations of its entry
    spans (the time from a request's arrival at the service to its answer)."""
    durations: dict[str, list[int]] = defaultdict(list)
    for trace in traces:
        entries = entry_spans(trace)
        for s in trace:
            if s.span_id in entries:
                durations[s.service].append(s.duration)
    out = {}
    for service, ds in durations.items():
        mean = sum(ds) / len(ds)
        var = sum((d - mean) ** 2 for d in ds) / len(ds)
        out[service] = math.sqrt(var) / mean if mean > 0 else 0.0
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


@dataclass
class Selection:
    """The services a reduction keeps, and the evidence for the report."""

    method: str
    services: list[str]
    critical: dict[str, float]  # share of traces with ≥ 1 ms of own critical time
    cv: dict[str, float]  # coefficient of variation of the service time
    tail: TailScores | None = None  # the `tail` method's scores

    def report(self) -> dict[str, object]:
        """The evidence as reduction.json and summary.json hold it."""
        doc: dict[str, object] = {
            "method": self.method,
            "kept": self.services,
            "critical_path_share": {k: round(v, 4) for k, v in self.critical.items()},
            "cv": {k: round(v, 4) for k, v in self.cv.items()},
        }
        if self.tail is not None:
            doc["tail_score"] = {k: round(v, 4) for k, v in self.tail.scores.items()}
            doc["slow_traces"] = self.tail.slow
            doc["slow_from_ms"] = self.tail.threshold_ms
        return doc

    def scores(self) -> dict[str, float]:
        """The score that decided, by service: the tail score, the critical-path share, or the CV."""
        if self.tail is not None:
            return self.tail.scores
        return self.cv if self.method == "variability" else self.critical


def select_services(
    method: str,
    traces: list[list[Span]],
    *,
    threshold_ms: float = 1.0,
    min_share: float = 0.1,
    cv_threshold: float = 0.5,
    top: int = 5,
    coverage: float = 0.95,
    slow_quantile: float = 0.9,
) -> Selection:
    if method not in METHODS or method == "none":
        raise ValueError(f"--reduce {method!r}: expected one of {', '.join(METHODS)}")
    if not traces:
        raise TraceError("no traces to reduce with")
    critical = critical_services(traces, threshold_ms)
    cv = service_cv(traces)
    on_path = [s for s, share in critical.items() if share >= min_share]
    if method == "tail":
        tail = tail_scores(traces, slow_quantile)
        return Selection(method, sorted(covering(tail.scores, coverage)), critical, cv, tail)
    if method == "critical-path":
        chosen = on_path
    elif method == "variability":
        chosen = [s for s, v in cv.items() if v > cv_threshold]
    else:
        chosen = sorted(on_path, key=lambda s: (-cv.get(s, 0.0), s))[:top]
    return Selection(method, sorted(chosen), critical, cv)


def param_service(path: str, doc: dict[str, Any]) -> str | None:
    """The service a parameter belongs to (see the module's doc), or None for a global one."""
    parts = path.split(".")
    if parts[0] == "services" and len(parts) >= 2:
        if len(parts) >= 5 and parts[2] == "calls" and parts[3].isdigit() and parts[4] == "policy":
            try:
                return str(doc["services"][parts[1]]["calls"][int(parts[3])]["service"])
            except (KeyError, IndexError, TypeError):
                return parts[1]
        return parts[1]
    if parts[0] == "variants" and len(parts) >= 4:
        if parts[2] == "edges" and "->" in parts[3]:
            return parts[3].split("->")[1].strip()
        if parts[2] == "admission":
            return parts[3]
    if parts[0] == "workload" and len(parts) >= 2 and parts[1] == "client":
        return str((doc.get("workload") or {}).get("target"))
    return None


def reduce_space(space: Space, doc: dict[str, Any], services: list[str]) -> Space:
    """The parameters of `services`, and those that belong to no single service."""
    keep = set(services)
    return Space([p for p in space.params if param_service(p.path, doc) in keep or param_service(p.path, doc) is None])
