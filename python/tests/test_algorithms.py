"""Every algorithm through the tuner's study loop, on a synthetic objective (no simulator), and the
objective's selection of runs and statistics."""

import csv
import json
import os

import optuna
import pytest

from tailguard_tune import experiment, space
from tailguard_tune.algorithms import SAMPLERS, HybridSampler, TPESampler, make_sampler, tpe_startup
from tailguard_tune.evaluate import EvaluationError, Objective, Runner
from tailguard_tune.study import Settings, run

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
TINY = os.path.join(FIXTURES, "tiny.yaml")


class FakeRunner(Runner):
    """Stands in for `tailguard sim`: a p95 that falls with the db's workers and replicas and is
    lowest for a hedge at the 70th percentile; the cache does not matter. The seed adds nothing
    unless `noise` is set (then ±noise ms, by the seed's parity); `fail_when_workers` makes the
    simulator refuse a configuration; one whose db workers satisfy `lossy_when_workers` loses 2 %
    of its requests."""

    def __init__(self, fail_when_workers=None, lossy_when_workers=None, noise=0.0):
        super().__init__(tailguard="no binary: run is replaced")
        self.calls = 0
        self.seeds = []
        self.fail_when_workers = fail_when_workers
        self.lossy_when_workers = lossy_when_workers
        self.noise = noise

    def p95(self, doc, seed):
        db = doc["services"]["db"]
        pct = doc["services"]["frontend"]["calls"][1]["policy"]["hedge"]["percentile"]
        jitter = self.noise * (1 if (seed or 0) % 2 else -1)
        return 2.0 + 16.0 / (db["workers"] * db["replicas"]) + abs(pct - 70.0) / 10.0 + jitter

    def run(self, doc, source, workdir, traces=None, seed=None):
        self.calls += 1
        self.seeds.append(seed)
        db = doc["services"]["db"]
        if db["workers"] == self.fail_when_workers:
            raise EvaluationError("tailguard sim failed (exit 1): simulated failure")
        value = self.p95(doc, seed)
        lossy = self.lossy_when_workers is not None and self.lossy_when_workers(db["workers"])
        succeeded = 9800 if lossy else 10000
        return {
            "runs": [
                {
                    "requests": 10000,
                    "succeeded": succeeded,
                    "duration_s": 10.0,
                    "latency_ms": {"p95": value, "max": 2 * value},
                    "cdf": [[value / 2, 0.5], [value, 0.95], [2 * value, 1.0]],
                }
            ]
        }


def settings(tmp_path, algo, budget=8, seed=1, runner=None, **kw):
    doc = experiment.load(TINY)
    sp = space.load(os.path.join(FIXTURES, "tiny-space.yaml"), doc)
    kw.setdefault("remeasure", 0)
    return Settings(TINY, sp, algo, budget, runner or FakeRunner(), seed=seed, out=str(tmp_path / algo), **kw)


@pytest.mark.parametrize("algo", SAMPLERS)
def test_every_algorithm_improves_on_the_defaults_and_is_reproducible(tmp_path, algo):
    s = settings(tmp_path, algo, storage=optuna.storages.InMemoryStorage())
    first = run(s, say=lambda _: None)
    assert first.baseline == pytest.approx(2.0 + 16.0 + 2.9)
    tuned = [t for t in first.study.trials if not t.user_attrs.get("baseline")]
    assert len(tuned) == 8 and s.runner.calls == 9  # the defaults, then the budget
    assert first.best_value < first.baseline
    again = run(settings(tmp_path / "again", algo, storage=optuna.storages.InMemoryStorage()), say=lambda _: None)
    assert (again.best_value, again.best_params) == (first.best_value, first.best_params)


def test_tpe_starts_with_a_third_of_the_budget_at_random_but_no_more_than_one_per_two_dimensions():
    assert [tpe_startup(15, d) for d in (1, 2, 6, 7, 10, 32)] == [2, 2, 3, 4, 5, 5]
    assert [tpe_startup(b, 32) for b in (4, 8, 15, 30, 60)] == [3, 3, 5, 10, 16]
    doc = experiment.load(TINY)
    sp = space.load(os.path.join(FIXTURES, "tiny-space.yaml"), doc)  # 6 parameters
    sampler = make_sampler("tpe", sp, seed=0, budget=15)
    assert isinstance(sampler, TPESampler)
    assert sampler._n_startup_trials == 3  # Optuna's own attribute: what the sampler will do


def test_outputs_and_resuming_a_finished_study(tmp_path):
    s = settings(tmp_path, "dds", budget=6)
    outcome = run(s, say=lambda _: None)
    out = tmp_path / "dds"
    best = experiment.load(out / "best.yaml")
    assert best["services"]["db"]["workers"] == outcome.space.to_yaml(outcome.best_params)["services.db.workers"]
    with open(out / "history.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 7 and rows[0]["baseline"] == "True"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["best"] == outcome.best_value and summary["parameters_tuned"] == 6
    assert (out / "convergence.png").stat().st_size > 1000
    imp = json.loads((out / "importance.json").read_text())
    assert set(imp["importance"]) == set(outcome.space.names()) and imp["trials"] == 7 and not imp["trusted"]
    # The same command again finds the study full: no new evaluation.
    again = settings(tmp_path, "dds", budget=6)
    run(again, say=lambda _: None)
    assert again.runner.calls == 0


def test_a_failed_run_is_a_failed_trial_and_the_study_goes_on(tmp_path):
    s = settings(
        tmp_path, "random", budget=12, runner=FakeRunner(fail_when_workers=3), storage=optuna.storages.InMemoryStorage()
    )
    outcome = run(s, say=lambda _: None)
    states = [t.state.name for t in outcome.study.trials]
    assert "FAIL" in states and states.count("COMPLETE") >= 2
    failed = next(t for t in outcome.study.trials if t.state.name == "FAIL")
    assert "simulated failure" in failed.user_attrs["error"]


def test_reduction_from_a_trace_file_keeps_the_parameters_of_the_services_kept(tmp_path):
    # The fixture's traces name frontend, cache and db; top-2 by CV on the critical path: cache, db.
    s = settings(
        tmp_path,
        "tpe",
        reduce="critical-path+variability",
        reduce_top=2,
        traces=os.path.join(FIXTURES, "traces.json"),
        storage=optuna.storages.InMemoryStorage(),
    )
    outcome = run(s, say=lambda _: None)
    assert outcome.selection is not None and outcome.selection.services == ["cache", "db"]
    assert outcome.space.names() == [
        "services.db.workers",
        "services.db.replicas",
        "services.frontend.calls.1.policy.hedge.percentile",
        "services.cache.workers",
        "services.cache.replicas",
    ]


def test_objective_statistics_and_runs():
    results = {
        "runs": [
            {
                "scenario": "a",
                "variant": "x",
                "latency_ms": {"p95": 10.0, "mean": 4.0},
                "cdf": [[1.0, 0.5], [2.0, 0.9], [3.0, 0.975], [9.0, 1.0]],
            },
            {"scenario": "b", "variant": "x", "latency_ms": {"p95": 20.0, "mean": 6.0}},
        ]
    }
    assert Objective().value(results) == 10.0
    assert Objective("mean", ("*/x",)).value(results) == 5.0
    assert Objective("p95", ("b/x",)).value(results) == 20.0
    assert Objective("p97.5").value(results) == 3.0
    assert Objective("p90").value(results) == 2.0
    with pytest.raises(EvaluationError, match="no such run; the results have: a/x, b/x"):
        Objective("p95", ("c/*",)).value(results)
    with pytest.raises(EvaluationError, match="needs the run's `cdf`"):
        Objective("p97", ("b/x",)).value(results)
    with pytest.raises(ValueError, match="expected one of"):
        Objective("p95x")
    with pytest.raises(ValueError, match="SCENARIO/VARIANT"):
        Objective("p95", ("a",))


def test_command_lines_of_both_backends():
    cmd, out = Runner("tg", "sim", seed=4, quick=True).command("e.yaml", "/w", traces="/w/t.json")
    assert cmd == [
        "tg",
        "sim",
        "e.yaml",
        "--json",
        "/w/results.json",
        "--seed",
        "4",
        "--quick",
        "--traces",
        "/w/t.json",
    ]
    assert out == "/w/results.json"
    cmd, out = Runner("tg", "lab").command("e.yaml", "/w")
    assert cmd == ["tg", "lab", "run", "e.yaml", "--out", "/w/lab"] and out == "/w/lab/results.json"
    with pytest.raises(ValueError, match="expected sim or lab"):
        Runner("tg", "cloud").command("e.yaml", "/w")


def test_a_results_file_that_is_not_a_json_object_is_an_error_naming_it(tmp_path, monkeypatch):
    fake = tmp_path / "tailguard"
    fake.write_text('#!/bin/sh\nprintf "$CONTENT" > "$4"\n')  # argv: sim FILE --json OUT
    fake.chmod(0o755)
    runner = Runner(str(fake))
    out = tmp_path / "results.json"
    for content, message in (("[1, 2]", "expected a JSON object of results, got list"), ("{", "cannot read")):
        monkeypatch.setenv("CONTENT", content)
        with pytest.raises(EvaluationError, match=f"{out}: {message}"):
            runner.run(experiment.load(TINY), TINY, str(tmp_path))


def test_two_workers_share_one_study_through_its_storage(tmp_path):
    import threading

    storage = f"sqlite:///{tmp_path / 'shared.db'}"
    workers = [
        settings(tmp_path / f"w{i}", "tpe", budget=6, seed=i, storage=storage, study_name="shared") for i in (0, 1)
    ]
    errors = []

    def work(w):
        try:
            run(w, say=lambda _: None)
        except Exception as e:  # reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    study = optuna.load_study(study_name="shared", storage=storage)
    tuned = [t for t in study.trials if not t.user_attrs.get("baseline")]
    # Each worker checks the count before asking: the two may both ask for the last trial.
    assert 6 <= len(tuned) <= 7
    assert all(t.state.name == "COMPLETE" for t in study.trials)
    # Every evaluation is a trial of the shared study (the defaults' once or, if both started at once, twice).
    assert sum(w.runner.calls for w in workers) == len(study.trials)


def test_without_a_trace_file_the_defaults_run_once_with_traces(tmp_path):
    import shutil

    class TracingRunner(FakeRunner):
        def run(self, doc, source, workdir, traces=None, seed=None):
            if traces is None:  # the trials
                return super().run(doc, source, workdir, seed=seed)
            self.traced_doc = doc
            shutil.copy(os.path.join(FIXTURES, "traces.json"), traces)
            return {"runs": []}

    s = settings(
        tmp_path,
        "random",
        budget=3,
        runner=TracingRunner(),
        reduce="critical-path",
        storage=optuna.storages.InMemoryStorage(),
    )
    outcome = run(s, say=lambda _: None)
    assert s.runner.traced_doc == experiment.load(TINY)
    assert (tmp_path / "random" / "traces.json").exists()
    assert outcome.selection is not None and outcome.selection.services == ["cache", "db", "frontend"]


def test_the_hybrids_dds_phase_takes_half_the_budget_but_no_more_than_one_trial_per_two_dimensions():
    def of(dim, budget):
        params = [space.Param(path=f"p{i}", type="continuous", low=0.0, high=1.0, default=0.5) for i in range(dim)]
        return HybridSampler(space.Space(params), seed=0, budget=budget).dds_trials

    assert [of(d, 15) for d in (1, 4, 6, 7, 24, 32)] == [2, 2, 3, 4, 7, 7]
    assert [of(6, b) for b in (4, 8, 15, 30)] == [2, 3, 3, 3]


def test_the_hybrids_gp_asks_by_its_lower_confidence_bound(tmp_path):
    result = run(settings(tmp_path, "hybrid", storage=optuna.storages.InMemoryStorage()), say=lambda _: None)
    hybrid = result.study.sampler
    assert isinstance(hybrid, HybridSampler)
    # Budget 8 over 6 parameters: 3 DDS trials, then the GP's 5.
    assert hybrid.dds_trials == 3 and hybrid.finished == 7  # the 8th trial was asked after 7 had finished
    assert hybrid.bo is not None and hybrid.bo.optimizer.acq_func == "LCB"
