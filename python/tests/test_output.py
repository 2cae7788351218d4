"""The outputs' data: the history's rows and what the convergence plot shows."""

from __future__ import annotations

import csv

from optuna.distributions import IntDistribution
from optuna.trial import FrozenTrial, TrialState

from tailguard_tune import output


def trial(number: int, state: TrialState, value: float | None, baseline: bool = False) -> FrozenTrial:
    return FrozenTrial(
        number=number,
        state=state,
        value=value,
        datetime_start=None,
        datetime_complete=None,
        params={"workers": 2},
        distributions={"workers": IntDistribution(1, 4)},
        user_attrs={"baseline": True} if baseline else {},
        system_attrs={},
        intermediate_values={},
        trial_id=number,
    )


def test_history_lists_a_value_only_for_a_complete_trial(tmp_path):
    # A peer's trial read as still running although its value was already stored.
    rows = output.history([trial(0, TrialState.COMPLETE, 3.5), trial(1, TrialState.RUNNING, 2.5)], tmp_path / "h.csv")
    assert [(r["state"], r["value"]) for r in rows] == [("COMPLETE", 3.5), ("RUNNING", None)]
    with open(tmp_path / "h.csv", newline="") as f:
        assert [(r["state"], r["value"]) for r in csv.DictReader(f)] == [("COMPLETE", "3.5"), ("RUNNING", "")]


def test_the_convergence_plot_shows_the_completed_tuned_trials_and_the_best_so_far_from_the_defaults(tmp_path):
    trials = [
        trial(0, TrialState.COMPLETE, 10.0, baseline=True),
        trial(1, TrialState.COMPLETE, 12.0),  # worse than the defaults: the best stays theirs
        trial(2, TrialState.FAIL, None),
        trial(3, TrialState.COMPLETE, 8.0),
        trial(4, TrialState.RUNNING, 1.0),  # a peer's, its value told but its state not yet read
        trial(5, TrialState.COMPLETE, 9.0),
        trial(6, TrialState.COMPLETE, 7.0),
    ]
    info = output.convergence_info(trials, baseline=10.0, stat="p99", title="tiny: dds, reduce none")
    assert info == output.ConvergenceInfo(
        trials=[1, 2, 3, 4],
        values=[12.0, 8.0, 9.0, 7.0],
        best=[10.0, 8.0, 8.0, 7.0],
        baseline=10.0,
        ylabel="p99 latency (ms)",
        title="tiny: dds, reduce none",
    )
    assert output.convergence_info(trials[:1], 10.0, "p95", "") == output.ConvergenceInfo(
        [], [], [], 10.0, "p95 latency (ms)", ""
    )
    output.plot_convergence(info, str(tmp_path / "c.png"))
    assert (tmp_path / "c.png").read_bytes().startswith(b"\x89PNG")


def test_importance_ranks_the_trials_so_one_catastrophe_does_not_decide_it():
    import optuna
    from optuna.distributions import BaseDistribution, FloatDistribution

    # x decides the objective smoothly; y does not, except that the one trial at the top of y's
    # range was a catastrophe (an infeasible trial's penalty).
    study = optuna.create_study()
    dists: dict[str, BaseDistribution] = {"x": FloatDistribution(0, 1), "y": FloatDistribution(0, 1)}
    for i in range(40):
        x, y = (i * 7 % 40) / 40, (i * 13 % 40) / 40
        value = 10 + 5 * x + (1000 if y == max((j * 13 % 40) / 40 for j in range(40)) else 0)
        study.add_trial(optuna.trial.create_trial(params={"x": x, "y": y}, distributions=dists, value=value))
    raw = optuna.importance.get_param_importances(study, evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0))
    assert raw["y"] > raw["x"]  # fANOVA on the raw values: the catastrophe makes y look important
    ranked = output.importance(study, seed=0)
    assert ranked["x"] > 0.8 > 0.2 > ranked["y"]


def test_importance_is_trusted_from_two_trials_per_parameter_and_at_least_30():
    assert [output.trusted_trials(p) for p in (3, 15, 16, 36)] == [30, 30, 32, 72]
