"""What a study leaves behind in its output directory:

- `best.yaml`: the experiment file with the best configuration applied, ready for `tailguard sim`;
- `history.csv`: every trial (number, state, objective, seconds, parameters);
- `convergence.png`: each trial's objective and the best so far, against the defaults';
- `importance.json`: each parameter's importance by fANOVA (Hutter et al. 2014, as Optuna
  implements it) over the study's completed trials;
- `summary.json`: the numbers above in one document.
"""

from __future__ import annotations

import csv
import itertools
import json
import os
import warnings
from typing import TYPE_CHECKING, Any, NamedTuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import optuna
from optuna.trial import FrozenTrial, TrialState

from . import experiment

if TYPE_CHECKING:
    from .study import Outcome, Settings


def importance(study: optuna.Study, *, seed: int | None) -> dict[str, float]:
    """fANOVA importance of each parameter (empty when the study has too few distinct trials)."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(complete) < 3:
        return {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            evaluator = optuna.importance.FanovaImportanceEvaluator(seed=seed)
            return {k: float(v) for k, v in optuna.importance.get_param_importances(study, evaluator=evaluator).items()}
    except (RuntimeError, ValueError):
        return {}


def best_file(outcome: Outcome, settings: Settings, doc: dict[str, Any], path: str) -> None:
    values = outcome.space.to_yaml(outcome.best_params)
    header = (
        f"Tuned by tailguard-tune from {settings.file}: {settings.algo}, budget {settings.budget}, "
        f"reduce {settings.reduce}, seed {settings.seed}.\n"
        f"{settings.objective.stat}: {outcome.best_value:.3f} ms (defaults {outcome.baseline:.3f} ms, "
        f"{100 * outcome.improvement:.1f}% lower). Values changed by the tuner:\n"
        + "\n".join(f"  {k}: {v}" for k, v in values.items())
    )
    experiment.write(experiment.with_values(doc, values), path, source=settings.file, header=header)


def history(trials: list[optuna.trial.FrozenTrial], path: str) -> list[dict[str, Any]]:
    names = sorted({k for t in trials for k in t.params})
    rows = []
    for t in trials:
        rows.append(
            {
                "number": t.number,
                "state": t.state.name,
                # PostgreSQL reads a trial's state and its values in separate statements, so a
                # peer's trial can arrive as RUNNING with the value it was told meanwhile.
                "value": t.value if t.state == TrialState.COMPLETE else None,
                "baseline": bool(t.user_attrs.get("baseline")),
                "seconds": t.user_attrs.get("seconds"),
                **{n: t.params.get(n) for n in names},
            }
        )
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["number", "state", "value", "baseline", "seconds", *names])
        writer.writeheader()
        writer.writerows(rows)
    return rows


class ConvergenceInfo(NamedTuple):
    """What `convergence.png` shows: the tuned trials that completed, in order (the defaults'
    trial and failed trials left out)."""

    trials: list[int]  # x: 1, 2, ... (the position among the completed tuned trials)
    values: list[float]  # each trial's objective
    best: list[float]  # the best so far after each trial, the defaults' included
    baseline: float  # the defaults' objective
    ylabel: str
    title: str


def convergence_info(trials: list[FrozenTrial], baseline: float, stat: str, title: str) -> ConvergenceInfo:
    """The data of the convergence plot of `trials`, whose defaults scored `baseline` on `stat`."""
    tuned = [t for t in trials if t.state == TrialState.COMPLETE and not t.user_attrs.get("baseline")]
    values = [float(t.value) for t in tuned if t.value is not None]
    best = list(itertools.accumulate(values, min, initial=baseline))[1:]
    return ConvergenceInfo(list(range(1, len(values) + 1)), values, best, baseline, f"{stat} latency (ms)", title)


def plot_convergence(info: ConvergenceInfo, path: str) -> None:
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    ax.axhline(info.baseline, color="grey", linestyle="--", label=f"defaults ({info.baseline:.2f} ms)")
    ax.plot(info.trials, info.values, "o", color="tab:blue", alpha=0.6, label="trial")
    ax.step(info.trials, info.best, where="post", color="tab:red", label="best so far")
    ax.set_xlabel("trial")
    ax.set_ylabel(info.ylabel)
    ax.set_title(info.title)
    ax.set_ylim(bottom=0)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_all(outcome: Outcome, settings: Settings, doc: dict[str, Any]) -> None:
    out = settings.out
    os.makedirs(out, exist_ok=True)
    best_file(outcome, settings, doc, os.path.join(out, "best.yaml"))
    history(outcome.trials, os.path.join(out, "history.csv"))
    title = f"{doc.get('name', '')}: {settings.algo}, reduce {settings.reduce}"
    info = convergence_info(outcome.trials, outcome.baseline, settings.objective.stat, title)
    plot_convergence(info, os.path.join(out, "convergence.png"))
    with open(os.path.join(out, "importance.json"), "w", encoding="utf-8") as f:
        json.dump(outcome.importance, f, indent=2)
    summary = {
        "experiment": settings.file,
        "algo": settings.algo,
        "budget": settings.budget,
        "seed": settings.seed,
        "reduce": settings.reduce,
        "objective": settings.objective.stat,
        "study": outcome.study.study_name,
        "parameters_tuned": len(outcome.space),
        "parameters_in_space": len(settings.space),
        "services_kept": outcome.selection.services if outcome.selection else None,
        "defaults": outcome.baseline,
        "best": outcome.best_value,
        "improvement_pct": round(100 * outcome.improvement, 2),
        "best_params": outcome.space.to_yaml(outcome.best_params),
        "importance": outcome.importance,
    }
    with open(os.path.join(out, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2)
