"""Failures count: the objective over all requests, the --min-success constraint, and infeasible
configurations never reported best; the best candidates re-measured on fresh seeds."""

import json
import math

import optuna
import pytest

from tailguard_tune import cli
from tailguard_tune.evaluate import Objective, Seeds, goodput, success_rate
from tailguard_tune.study import run

from .test_algorithms import TINY, FakeRunner, settings


def a_run(requests, succeeded, p95=10.0):
    return {
        "requests": requests,
        "succeeded": succeeded,
        "duration_s": 10.0,
        "success_rate": round(succeeded / requests, 4) if requests else 0.0,
        "latency_ms": {"p50": 4.0, "p95": p95, "p99": 20.0, "max": 40.0, "mean": 5.0},
        "cdf": [[2.0, 0.5], [4.0, 0.9], [10.0, 0.95], [20.0, 0.99], [40.0, 1.0]],
    }


def test_a_percentile_counts_failures_as_slower_than_any_success():
    p95 = Objective("p95", min_success=0.0)
    assert p95.of_run(a_run(1000, 1000)) == 10.0  # no failure: the results' own p95
    # 2 % failed: the p95 of all requests is the successes' 95 / 0.98 = 96.94th percentile,
    # interpolated between the cdf's 95th (10 ms) and 99th (20 ms) points.
    assert p95.of_run(a_run(1000, 980)) == pytest.approx(10.0 + (0.95 / 0.98 - 0.95) / 0.04 * 10.0)
    assert p95.of_run(a_run(1000, 940)) == math.inf  # over 5 % failed: the p95 is a failure
    assert p95.of_run(a_run(1000, 0)) == math.inf
    assert p95.of_run(a_run(0, 0)) == math.inf  # nothing measured
    # Every request failing used to score 0 ms (the p95 of no successes): now it is infinite.
    total_failure = {"requests": 500, "succeeded": 0, "latency_ms": {"p95": 0.0, "max": 0.0}, "cdf": []}
    assert p95.of_run(total_failure) == math.inf
    # Without a cdf, the lowest reported percentile at or above the shifted one (never optimistic).
    no_cdf = {k: v for k, v in a_run(1000, 980).items() if k != "cdf"}
    assert p95.of_run(no_cdf) == 20.0
    # mean and max are the successes' (the results hold no latency for a failure).
    assert Objective("mean").of_run(a_run(1000, 980)) == 5.0


def test_success_rate_goodput_and_feasibility():
    r = a_run(1000, 999)
    assert success_rate(r) == 0.999 and goodput(r) == 99.9
    assert goodput({**r, "goodput": 12.5}) == 12.5  # the results' own field when present
    assert success_rate({"success_rate": 0.5}) == 0.5
    objective = Objective("p95")  # --min-success 99.9 by default
    assert objective.feasible(10.0, 0.999) and not objective.feasible(10.0, 0.998)
    assert not objective.feasible(math.inf, 1.0)
    assert objective.constraint(10.0, 0.999) <= 0 < objective.constraint(10.0, 0.99)
    assert objective.constraint(math.inf, 1.0) > 0
    runs = [
        {**a_run(1000, 1000), "scenario": "s", "variant": "a"},
        {**a_run(1000, 990), "scenario": "s", "variant": "b"},
    ]
    scored = Objective("p95", ("s/*",)).measure({"runs": runs})
    assert scored.success == 0.99  # the lowest of the runs: each must meet the minimum
    with pytest.raises(ValueError, match="--min-success 150"):
        Objective("p95", min_success=1.5)


def test_seeds_vary_between_trials_and_fresh_ones_were_never_used():
    s = Seeds(7, repeats=2)
    assert s.trial(0) == [7, 8] and s.trial(3) == [13, 14]
    assert Seeds(7, repeats=2, vary=False).trial(3) == [7, 8]
    assert set(s.fresh(5)).isdisjoint(x for n in range(10_000) for x in s.trial(n))


@pytest.mark.parametrize("algo", ["tpe", "ga", "dds", "hybrid", "bo-gp", "random"])
def test_a_configuration_that_loses_requests_is_infeasible_and_never_best(tmp_path, algo):
    # The fastest configurations (6 or more db workers) lose 2 % of their requests.
    runner = FakeRunner(lossy_when_workers=lambda w: w >= 6)
    s = settings(tmp_path, algo, budget=12, runner=runner, storage=optuna.storages.InMemoryStorage())
    outcome = run(s, say=lambda _: None)
    tuned = [t for t in outcome.trials if not t.user_attrs.get("baseline") and t.state.name == "COMPLETE"]
    infeasible = [t for t in tuned if not t.user_attrs["feasible"]]
    assert all(t.user_attrs["success"] == 0.98 for t in infeasible)
    feasible_values = [t.user_attrs["objective_ms"] for t in outcome.trials if t.user_attrs.get("feasible")]
    assert all(t.value > max(feasible_values) for t in infeasible)  # the penalty: above every feasible value
    assert outcome.best is not None and outcome.best.user_attrs["feasible"]
    assert outcome.best.params["services.db.workers"] < 6
    assert outcome.best_value == min(feasible_values)


def test_the_constrained_samplers_get_the_success_rate_as_their_constraint(tmp_path):
    runner = FakeRunner(lossy_when_workers=lambda w: w >= 6)
    s = settings(tmp_path, "tpe", budget=6, runner=runner, storage=optuna.storages.InMemoryStorage())
    outcome = run(s, say=lambda _: None)
    for t in outcome.study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)):
        (c,) = t.system_attrs["constraints"]  # what Optuna's constrained TPE reads
        assert (c <= 0) == t.user_attrs["feasible"]


def test_when_nothing_is_feasible_no_best_is_reported_and_the_cli_says_so(tmp_path, monkeypatch, capsys):
    class Lossy(FakeRunner):
        def __init__(self, *args, **kwargs):
            super().__init__(lossy_when_workers=lambda w: True)

    monkeypatch.setattr(cli, "Runner", Lossy)
    monkeypatch.setattr(cli, "find_tailguard", lambda explicit: "fake")
    out = tmp_path / "o"
    space = TINY.replace("tiny.yaml", "tiny-space.yaml")
    code = cli.main([TINY, "--space", space, "--algo", "random", "--budget", "3", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 3
    assert "no configuration reached --min-success 99.9 %" in printed and "best.yaml not written" in printed
    assert not (out / "best.yaml").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["best"] is None and summary["trials_infeasible"] == 3 and summary["defaults_success"] == 0.98
    history = (out / "history.csv").read_text().splitlines()
    assert history[0].startswith("number,state,value,success_rate,goodput_rps,feasible,score")
    assert all(",0.98,980.0,False," in row for row in history[1:])


def test_the_best_is_chosen_on_fresh_seeds_with_a_confidence_interval(tmp_path):
    # ±1 ms of noise by the seed's parity: the trials' values are partly luck.
    runner = FakeRunner(noise=1.0)
    s = settings(tmp_path, "random", budget=8, runner=runner, storage=optuna.storages.InMemoryStorage(), remeasure=3)
    outcome = run(s, say=lambda _: None)
    c = outcome.confirmation
    assert c is not None and c.seeds == [3 + 1_000_000 + i for i in range(5)]
    assert runner.seeds[-20:].count(c.seeds[0]) == 4  # the defaults and 3 candidates, paired on each seed
    assert runner.seeds[:9] == list(range(3, 12))  # the defaults and 8 trials, each its own seed
    assert len(c.candidates) == 3 and c.best is not None and outcome.best is not None
    means = {n: sum(r["values"]) / 5 for n, r in c.candidates.items()}
    assert outcome.best.number == c.best == min(means, key=lambda n: (means[n], n))
    ci = c.improvement_ci()
    assert ci is not None
    mean, low, high = ci
    assert low < mean < high and outcome.improvement == mean
    gains = c.improvements()
    assert mean == pytest.approx(sum(gains) / 5) and all(0 < g < 1 for g in gains)
    # report.html: the result, the convergence plot, the importance (not trusted from 9 trials) and
    # both distributions on the first fresh seed.
    page = (tmp_path / "random" / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == 3 and "Not to be trusted" in page
    assert f"best (trial {c.best})" in page and f"seed {c.seeds[0]}" in page
    assert c.cdf["defaults"] and c.cdf[str(c.best)]
    # The re-measurement is kept in the study: writing the outputs again measures nothing.
    calls = runner.calls
    again = run(s, say=lambda _: None)
    assert runner.calls == calls and again.confirmation == c


def test_an_ask_tell_optimizer_is_told_an_infeasible_trial_as_the_worst_feasible_value(tmp_path, monkeypatch):
    from tailguard_tune import algorithms
    from tailguard_tune.algorithms import PSOSampler

    told: list[tuple[int, float]] = []

    class Recorder(PSOSampler):  # any ask/tell optimizer: record what it is told
        def tell(self, number, params, value):
            told.append((number, value))
            super().tell(number, params, value)

    monkeypatch.setitem(algorithms.SAMPLERS, "recorder", Recorder)
    runner = FakeRunner(lossy_when_workers=lambda w: w >= 3)
    s = settings(tmp_path, "recorder", budget=12, runner=runner, storage=optuna.storages.InMemoryStorage())
    outcome = run(s, say=lambda _: None)
    trials = {t.number: t for t in outcome.study.get_trials()}
    worst: float | None = None  # the defaults' trial, feasible, is told first
    infeasible = 0
    for number, value in told:
        t = trials[number]
        if t.user_attrs["feasible"]:
            assert value == t.value
            worst = max(value, worst or value)
        else:
            infeasible += 1
            assert worst is not None and t.value is not None
            assert value == worst < t.value
    assert infeasible >= 2
