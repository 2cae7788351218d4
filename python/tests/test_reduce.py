"""Critical path (Algorithm 1), coefficient of variation and the reductions, on traces whose
answers are known exactly."""

import os

import pytest

from tailguard_tune import experiment, reduce, space

HERE = os.path.dirname(__file__)
FIXTURES = os.path.join(HERE, "fixtures")


def trace(*spans):
    """A one-trace Jaeger document from (id, parent, service, start_ms, end_ms) tuples."""
    services = sorted({s[2] for s in spans})
    pid = {name: f"p{i}" for i, name in enumerate(services)}
    return {
        "data": [
            {
                "traceID": "1",
                "spans": [
                    {
                        "traceID": "1",
                        "spanID": sid,
                        "operationName": svc,
                        "references": [{"refType": "CHILD_OF", "traceID": "1", "spanID": parent}] if parent else [],
                        "startTime": int(start * 1000),
                        "duration": int((end - start) * 1000),
                        "tags": [],
                        "processID": pid[svc],
                    }
                    for sid, parent, svc, start, end in spans
                ],
                "processes": {p: {"serviceName": name} for name, p in pid.items()},
            }
        ]
    }


def path_of(doc):
    [t] = reduce.parse_traces(doc)
    return [(s.span_id, own / 1000) for s, own in reduce.critical_path(t)]


def test_sequential_children_are_all_on_the_path():
    doc = trace(("a", None, "api", 0, 10), ("b", "a", "cache", 1, 4), ("c", "a", "db", 5, 9))
    assert path_of(doc) == [("a", 3.0), ("c", 4.0), ("b", 3.0)]


def test_parallel_fanout_keeps_the_latest_finishing_child():
    doc = trace(("a", None, "api", 0, 10), ("b", "a", "db", 1, 9), ("c", "a", "cache", 1, 5))
    assert path_of(doc) == [("a", 2.0), ("b", 8.0)]


def test_nested_calls_follow_the_last_child_down():
    doc = trace(
        ("a", None, "api", 0, 20),
        ("b", "a", "timeline", 1, 15),
        ("d", "b", "redis", 2, 6),
        ("e", "b", "redis", 7, 14),
        ("c", "a", "posts", 1, 18),
        ("f", "c", "mongo", 2, 17),
    )
    assert path_of(doc) == [("a", 3.0), ("c", 2.0), ("f", 15.0)]


def test_a_child_ending_after_its_parent_counts_up_to_the_parents_end():
    # A cancelled hedge reported as ending late: only the part inside the parent is on the path.
    doc = trace(("a", None, "api", 0, 10), ("b", "a", "db", 1, 12))
    assert path_of(doc) == [("a", 1.0), ("b", 9.0)]


def test_a_parent_loop_in_a_broken_trace_ends():
    doc = trace(("a", "b", "api", 0, 10), ("b", "a", "db", 1, 9))
    assert path_of(doc) == []  # no root: nothing to walk, and no endless loop


def test_time_in_a_services_own_call_spans_is_the_networks():
    # api's call span (same process) covers 1.6 ms more than db's visit: the network, not api's work.
    doc = trace(("a", None, "api", 0, 10), ("call", "a", "api", 0.2, 9.8), ("d", "call", "db", 1, 9))
    assert path_of(doc) == [("a", 0.4), ("call", 1.6), ("d", 8.0)]
    assert reduce.critical_services(reduce.parse_traces(doc)) == {"db": 1.0}


def test_fixture_file_critical_services_and_cv():
    traces = reduce.load_traces(os.path.join(FIXTURES, "traces.json"))
    assert [s.span_id for s, _ in reduce.critical_path(traces[1])] == ["a2", "c2", "x2", "b2"]
    own = {s.span_id: t for s, t in reduce.critical_path(traces[1])}
    assert own == {"a2": 2700, "c2": 16000, "x2": 500, "b2": 800}
    assert reduce.critical_services(traces) == {"db": 1.0, "frontend": 1.0, "cache": 0.5}
    # x2 is frontend's own call span: its 0.5 ms on the path (the network) counts for no service,
    # and its duration is not frontend's service time.
    assert reduce.entry_spans(traces[1]) == {"a2", "b2", "c2"}
    cv = reduce.service_cv(traces)
    assert cv["frontend"] == pytest.approx(1 / 3, abs=1e-12)
    assert cv["cache"] == pytest.approx(1100 / 1900, abs=1e-12)
    assert cv["db"] == pytest.approx(0.6, abs=1e-12)


def test_the_three_reductions_on_the_fixture():
    traces = reduce.load_traces(os.path.join(FIXTURES, "traces.json"))
    assert reduce.select_services("critical-path", traces).services == ["cache", "db", "frontend"]
    assert reduce.select_services("critical-path", traces, min_share=0.6).services == ["db", "frontend"]
    assert reduce.select_services("variability", traces).services == ["cache", "db"]
    assert reduce.select_services("critical-path+variability", traces, top=2).services == ["cache", "db"]
    assert reduce.select_services("critical-path+variability", traces, top=1).services == ["db"]


def test_parameters_belong_to_services_by_path():
    doc = experiment.load(os.path.join(FIXTURES, "tiny.yaml"))
    assert reduce.param_service("services.db.workers", doc) == "db"
    assert reduce.param_service("services.frontend.calls.1.policy.hedge.percentile", doc) == "db"
    assert reduce.param_service("services.frontend.calls", doc) == "frontend"
    assert reduce.param_service("variants.0.edges.frontend->db.timeout.value", doc) == "db"
    assert reduce.param_service("variants.0.admission.db.capacity", doc) == "db"
    assert reduce.param_service("workload.client.balancer.kind", doc) == "frontend"
    assert reduce.param_service("network.delay", doc) is None
    sp = space.load(os.path.join(FIXTURES, "tiny-space.yaml"), doc)
    kept = reduce.reduce_space(sp, doc, ["db"])
    assert kept.names() == [
        "services.db.workers",
        "services.db.replicas",
        "services.frontend.calls.1.policy.hedge.percentile",
    ]


def test_bad_trace_files_are_errors_naming_the_place(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"data": [{"spans": [{"spanID": "a"}]}]}')
    with pytest.raises(reduce.TraceError, match=r"data.0.spans.0: expected spanID, startTime and duration"):
        reduce.load_traces(str(bad))
    bad.write_text("not json")
    with pytest.raises(reduce.TraceError, match="not JSON"):
        reduce.load_traces(str(bad))
    with pytest.raises(reduce.TraceError, match="cannot read"):
        reduce.load_traces(str(tmp_path / "missing.json"))


def test_traces_of_other_runs_are_left_out():
    def tagged(tid, scenario, variant):
        doc = trace(("a", None, "api", 0, 10))["data"][0]
        doc["traceID"] = tid
        for proc in doc["processes"].values():
            proc["tags"] = [{"key": "scenario", "value": scenario}, {"key": "variant", "value": variant}]
        return doc

    doc = {"data": [tagged("1", "normal", "rr"), tagged("2", "normal", "hedge"), tagged("3", "slow", "rr")]}
    assert len(reduce.parse_traces(doc)) == 3
    assert len(reduce.parse_traces(doc, runs=())) == 1  # the first run's only
    assert len(reduce.parse_traces(doc, runs=("*/rr",))) == 2
    assert len(reduce.parse_traces(doc, runs=("slow/rr", "normal/hedge"))) == 2
    assert reduce.parse_traces(doc, runs=("none/x",)) == []


def test_the_simulators_traces_of_the_example_point_at_the_post_store():
    # 12 traces written by `tailguard sim examples/tune/sim-app.yaml --quick --traces OUT --trace-sample 12`.
    traces = reduce.load_traces(os.path.join(FIXTURES, "sim-app-traces.json"))
    selection = reduce.select_services("critical-path+variability", traces)
    assert selection.services == ["post-storage-memcached", "post-storage-mongo"]
    assert reduce.select_services("critical-path", traces).services == selection.services
    examples = os.path.join(HERE, "..", "..", "examples", "tune")
    doc = experiment.load(os.path.join(examples, "sim-app.yaml"))
    sp = space.load(os.path.join(examples, "sim-space.yaml"), doc)
    kept = reduce.reduce_space(sp, doc, selection.services)
    assert kept.names() == sp.names()[:6] and 5 * len(kept) <= len(sp)


def fanout_traces(n=100):
    """n requests to a frontend that asks `steady` (2 ms, always) and `rare` in parallel; `rare`
    takes 20 ms in 4 of every 100 requests (the p95's cause), 1 ms otherwise; `jitter` runs after
    both and takes 0.5 to 1.5 ms."""
    traces = []
    for i in range(n):
        rare = 20.0 if i % 25 == 0 else 1.0
        jitter = 0.5 + (i % 11) / 10
        end = 1 + max(2.0, rare)
        doc = trace(
            ("a", None, "frontend", 0, end + jitter + 0.2),
            ("b", "a", "steady", 1, 3),
            ("c", "a", "rare", 1, 1 + rare),
            ("d", "a", "jitter", end, end + jitter),
        )
        traces += reduce.parse_traces(doc)
    return traces


def test_the_tail_method_keeps_the_service_that_makes_the_slow_requests_slow():
    traces = fanout_traces()
    tail = reduce.tail_scores(traces)
    # The slow requests, from the p90 (4.7 ms, ties included): 13 of 100, the 4 with rare's 20 ms
    # and 9 with the most jitter. In each of the 4, rare's own time beyond its median (1 ms, off the
    # path) is 19 ms against jitter's 0.4 at most: each counts about 1 for rare; the 9 count for jitter.
    assert tail.slow == 13 and tail.threshold_ms == 4.7
    assert tail.scores["rare"] == pytest.approx(4 / 13, abs=0.01)
    assert tail.scores["jitter"] == pytest.approx(9 / 13, abs=0.01)
    assert tail.scores["steady"] == tail.scores["frontend"] == 0.0  # every request waits on them alike
    assert sum(tail.scores.values()) == pytest.approx(1.0)
    chosen = reduce.select_services("tail", traces)
    assert "rare" in chosen.services and "steady" not in chosen.services
    # Algorithm 1 with its fixed 10 % of the traces never sees rare (on the path of 4 %).
    assert "rare" not in reduce.select_services("critical-path", traces).services
    report = chosen.report()
    assert report["kept"] == chosen.services and report["slow_traces"] == 13
    assert report["tail_score"] == {k: round(v, 4) for k, v in tail.scores.items()}


def test_coverage_keeps_services_until_their_scores_add_up():
    scores = {"a": 0.6, "b": 0.25, "c": 0.1, "d": 0.05}
    assert reduce.covering(scores, 0.8) == ["a", "b"]
    assert reduce.covering(scores, 0.85) == ["a", "b"]
    assert reduce.covering(scores, 0.9) == ["a", "b", "c"]
    assert reduce.covering(scores, 1.0) == ["a", "b", "c", "d"]
    assert reduce.covering({"a": 0.0}, 0.95) == []
