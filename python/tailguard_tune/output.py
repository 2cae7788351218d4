"""What a study leaves behind in its output directory:

- `best.yaml`: the experiment file with the best configuration applied, ready for `tailguard sim`;
- `history.csv`: every trial (number, state, objective, seconds, parameters);
- `convergence.png`: each trial's objective and the best so far, against the defaults';
- `importance.json`: each parameter's importance by fANOVA (Hutter et al. 2014, as Optuna
  implements it) over the ranks of the study's completed trials, and whether they are enough;
- `summary.json`: the numbers above in one document;
- `report.html`: one page with the result, the convergence plot, the importance and the latency
  distributions of the best and the defaults.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import itertools
import json
import math
import os
import statistics
import threading
import warnings
from typing import TYPE_CHECKING, Any, NamedTuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import optuna
from matplotlib import ticker
from optuna.trial import FrozenTrial, TrialState

from . import experiment

if TYPE_CHECKING:
    from .study import Outcome, Settings


def trusted_trials(parameters: int) -> int:
    """Completed trials before the importance is printed: two per parameter, and at least 30.
    Below that, fANOVA's forest attributes the variance of a handful of points to whichever
    parameters happen to separate them (an irrelevant parameter reached 0.27 over 15 trials)."""
    return max(30, 2 * parameters)


def importance(study: optuna.Study, *, seed: int | None) -> dict[str, float]:
    """fANOVA importance of each parameter, computed on the **rank** of each trial's score rather
    than the score itself, so that one catastrophic trial (a penalised infeasible one, a p95 of
    seconds) does not decide the ranking (empty when the study has too few distinct trials)."""
    complete = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.value is not None]
    if len(complete) < 3:
        return {}
    from scipy.stats import rankdata

    ranks = dict(zip((t.number for t in complete), rankdata([t.value for t in complete]), strict=True))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            evaluator = optuna.importance.FanovaImportanceEvaluator(seed=seed)
            found = optuna.importance.get_param_importances(
                study, evaluator=evaluator, target=lambda t: float(ranks.get(t.number, 0.0))
            )
            return {k: float(v) for k, v in found.items()}
    except (RuntimeError, ValueError):
        return {}


def importance_doc(outcome: Outcome) -> dict[str, Any]:
    """importance.json: the importances and whether there were enough trials to trust them."""
    trials = sum(1 for t in outcome.trials if t.state == TrialState.COMPLETE)
    needed = trusted_trials(len(outcome.space))
    return {
        "method": "fANOVA (Optuna's FanovaImportanceEvaluator) on the rank of each completed trial's score",
        "trials": trials,
        "trusted": trials >= needed,
        "trusted_from": needed,  # completed trials: 2 per parameter, at least 30
        "importance": outcome.importance,
    }


def best_file(outcome: Outcome, settings: Settings, doc: dict[str, Any], path: str) -> None:
    assert outcome.best is not None
    values = outcome.space.to_yaml(outcome.best_params)
    stat = settings.objective.stat
    best = outcome.best.user_attrs
    lines = [
        f"Tuned by tailguard-tune from {settings.file}: {settings.algo}, budget {settings.budget}, "
        f"reduce {settings.reduce}, seed {settings.seed}, trial {outcome.best.number}.",
        f"{stat} of all requests: {outcome.best_value:.3f} ms, success {100 * best.get('success', 1.0):.2f} %, "
        f"goodput {best.get('goodput', 0.0):.1f}/s (defaults {_ms(outcome.defaults['objective_ms'])}, "
        f"success {100 * outcome.defaults['success']:.2f} %).",
    ]
    if outcome.improvement is not None:
        lines.append(f"Improvement: {improvement_text(outcome)}.")
    lines.append("Values changed by the tuner:")
    header = "\n".join(lines + [f"  {k}: {v}" for k, v in values.items()])
    experiment.write(experiment.with_values(doc, values), path, source=settings.file, header=header)


def _ms(value: float | None) -> str:
    return f"{value:.3f} ms" if value is not None else "infinite"


def improvement_text(outcome: Outcome) -> str:
    """The improvement as the console and best.yaml say it: with its confidence interval and the
    seeds it was measured on when the best candidates were re-measured."""
    if outcome.improvement is None:
        return "none measurable (the defaults' objective is infinite)"
    text = f"{100 * outcome.improvement:.1f}% lower"
    c = outcome.confirmation
    ci = c.improvement_ci() if c else None
    if c is not None and ci is not None:
        text += f" (95 % CI {100 * ci[1]:.1f} to {100 * ci[2]:.1f} %, re-measured on {len(c.seeds)} fresh seeds)"
    elif c is not None:
        text += f" (re-measured on {len(c.seeds)} fresh seed{'s' if len(c.seeds) > 1 else ''})"
    else:
        text += " (from the trials, not re-measured)"
    return text


HISTORY_FIELDS = ["number", "state", "value", "success_rate", "goodput_rps", "feasible", "score", "baseline"]


def history(trials: list[optuna.trial.FrozenTrial], path: str) -> list[dict[str, Any]]:
    """Every trial: `value` is the objective over all requests (ms; empty when infinite or not
    measured), `score` what the sampler was told (the value, or the penalty of an infeasible
    trial); `note` says why a trial failed (its error, interrupted, stale)."""
    names = sorted({k for t in trials for k in t.params})
    rows = []
    for t in trials:
        # PostgreSQL reads a trial's state and its values in separate statements, so a peer's
        # trial can arrive as RUNNING with the value it was told meanwhile: only COMPLETE counts.
        complete = t.state == TrialState.COMPLETE
        a = t.user_attrs
        objective = a.get("objective_ms", t.value if "feasible" not in a else None)
        note = a.get("error") or ("interrupted" if a.get("interrupted") else "stale" if a.get("stale") else "")
        rows.append(
            {
                "number": t.number,
                "state": t.state.name,
                "value": objective if complete else None,
                "success_rate": a.get("success") if complete else None,
                "goodput_rps": a.get("goodput") if complete else None,
                "feasible": bool(a.get("feasible", True)) if complete else None,
                "score": t.value if complete else None,
                "baseline": bool(a.get("baseline")),
                "seeds": " ".join(str(x) for x in a.get("seeds") or []),
                "seconds": a.get("seconds"),
                "note": note,
                **{n: t.params.get(n) for n in names},
            }
        )
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=[*HISTORY_FIELDS, "seeds", "seconds", "note", *names])
        writer.writeheader()
        writer.writerows(rows)
    return rows


class ConvergenceInfo(NamedTuple):
    """What `convergence.png` shows: the tuned trials that completed, in order (the defaults'
    trial and failed trials left out); an infeasible trial is a cross at the top, not a value."""

    trials: list[int]  # x: 1, 2, ... (the position among the completed tuned trials)
    values: list[float | None]  # each trial's objective; None when infeasible
    best: list[float]  # the best feasible so far after each trial, the defaults' included
    baseline: float  # the defaults' objective (infinite when they are infeasible)
    ylabel: str
    title: str


def convergence_info(trials: list[FrozenTrial], baseline: float, stat: str, title: str) -> ConvergenceInfo:
    """The data of the convergence plot of `trials`, whose defaults scored `baseline` on `stat`."""
    tuned = [t for t in trials if t.state == TrialState.COMPLETE and not t.user_attrs.get("baseline")]
    values: list[float | None] = []
    for t in tuned:
        feasible = t.user_attrs.get("feasible", True)
        v = t.user_attrs.get("objective_ms", t.value) if feasible else None
        values.append(float(v) if v is not None else None)
    finite = [v if v is not None else math.inf for v in values]
    best = list(itertools.accumulate(finite, min, initial=baseline))[1:]
    return ConvergenceInfo(list(range(1, len(values) + 1)), values, best, baseline, f"{stat} latency (ms)", title)


_PLOTTING = threading.Lock()  # pyplot is not thread-safe (workers sharing a study may run in threads)


def plot_convergence(info: ConvergenceInfo, path: str) -> None:
    """The trials on a log axis (a tail latency spans orders of magnitude between configurations)."""
    with _PLOTTING:
        _plot_convergence(info, path)


def _plot_convergence(info: ConvergenceInfo, path: str) -> None:
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    if math.isfinite(info.baseline):
        ax.axhline(info.baseline, color="grey", linestyle="--", label=f"defaults ({info.baseline:.2f} ms)")
    ok = [(x, v) for x, v in zip(info.trials, info.values, strict=True) if v is not None]
    bad = [x for x, v in zip(info.trials, info.values, strict=True) if v is None]
    if ok:
        ax.plot([x for x, _ in ok], [v for _, v in ok], "o", color="tab:blue", alpha=0.6, label="trial")
    steps = [(x, b) for x, b in zip(info.trials, info.best, strict=True) if math.isfinite(b)]
    if steps:
        ax.step([x for x, _ in steps], [b for _, b in steps], where="post", color="tab:red", label="best so far")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(ticker.FormatStrFormatter("%g"))
    if bad:
        top = ax.get_ylim()[1] if ok or steps or math.isfinite(info.baseline) else 1.0
        ax.plot(bad, [top] * len(bad), "x", color="tab:red", clip_on=False, label="infeasible")
    ax.set_xlabel("trial")
    ax.set_ylabel(info.ylabel + ", log scale")
    ax.set_title(info.title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _png(fig: Any) -> str:
    """A figure as a base64 PNG, for the self-contained report."""
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _importance_png(importance: dict[str, float]) -> str:
    top = list(importance.items())[:10][::-1]
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(top) + 1), dpi=100)
    ax.barh([k for k, _ in top], [v for _, v in top], color="tab:blue")
    ax.set_xlabel("fANOVA importance (on ranks)")
    ax.tick_params(axis="y", labelsize=7)
    return _png(fig)


def _distributions_png(curves: list[tuple[str, list[list[float]]]]) -> str:
    """Each curve's share of successful requests slower than x (both axes logarithmic: the tail is what differs)."""
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    for label, cdf in curves:
        xs = [p[0] for p in cdf if p[1] < 1.0]
        ys = [1.0 - p[1] for p in cdf if p[1] < 1.0]
        ax.step(xs, ys, where="post", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
    ax.xaxis.set_minor_formatter(ticker.FormatStrFormatter("%g"))
    ax.set_xlabel("latency (ms), log scale")
    ax.set_ylabel("share of successful requests slower")
    ax.legend()
    return _png(fig)


def report_html(outcome: Outcome, settings: Settings, convergence_png: str, path: str) -> None:
    """report.html: one self-contained page (images embedded) with the result, the convergence
    plot, the importance (with its caveat) and the latency distributions of the best and the
    defaults on the first fresh seed of the re-measurement."""
    stat = settings.objective.stat
    esc = html.escape
    d, best = outcome.defaults, outcome.best
    rows = [("defaults", d["objective_ms"], d["success"], d["goodput"])]
    if best is not None:
        a = best.user_attrs
        rows.append((f"best (trial {best.number})", _finite(outcome.best_value), a.get("success"), a.get("goodput")))
    table = "".join(
        f"<tr><td>{esc(name)}</td><td>{'infinite' if v is None else f'{v:.3f} ms'}</td>"
        f"<td>{100 * (s or 0):.2f} %</td><td>{(g or 0):.1f}/s</td></tr>"
        for name, v, s, g in rows
    )
    parts = [
        f"<h1>{esc(settings.file)}: {esc(settings.algo)}, budget {settings.budget}, seed {settings.seed}</h1>",
        f"<p>{stat} of all requests (failures counted slower than any success); feasible from "
        f"{100 * settings.objective.min_success:g} % success. "
        + (f"Improvement: {esc(improvement_text(outcome))}." if best is not None else "No configuration was feasible.")
        + "</p>",
        f"<table><tr><th></th><th>{stat}</th><th>success</th><th>goodput</th></tr>{table}</table>",
        "<h2>Convergence</h2>",
        f'<img alt="convergence" src="data:image/png;base64,{convergence_png}">',
    ]
    imp = importance_doc(outcome)
    if outcome.importance:
        caveat = (
            ""
            if imp["trusted"]
            else f"<p><b>Not to be trusted:</b> {imp['trials']} completed trials for {len(outcome.space)} parameters "
            f"(it needs {imp['trusted_from']}: 2 per parameter, at least 30).</p>"
        )
        parts += ["<h2>Parameter importance</h2>", caveat]
        parts.append(f'<img alt="importance" src="data:image/png;base64,{_importance_png(outcome.importance)}">')
    c = outcome.confirmation
    if c is not None and best is not None and "defaults" in c.cdf and str(best.number) in c.cdf:
        curves = [("defaults", c.cdf["defaults"]), (f"best (trial {best.number})", c.cdf[str(best.number)])]
        parts += [
            "<h2>Latency distributions: best and defaults</h2>",
            f"<p>Successful requests on seed {c.seeds[0]} (the first fresh seed of the re-measurement).</p>",
            f'<img alt="distributions" src="data:image/png;base64,{_distributions_png(curves)}">',
        ]
    style = "body{font-family:sans-serif;max-width:60em;margin:1em auto}td,th{padding:0 1em;text-align:right}"
    page = f"<!doctype html><meta charset=utf-8><title>tailguard-tune</title><style>{style}</style>{''.join(parts)}"
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def summary(outcome: Outcome, settings: Settings) -> dict[str, Any]:
    """summary.json: what was tuned, the defaults, the best and how sure the improvement is."""
    objective = settings.objective
    trials = [t for t in outcome.trials if t.state == TrialState.COMPLETE and not t.user_attrs.get("baseline")]
    best = outcome.best
    doc: dict[str, Any] = {
        "experiment": settings.file,
        "algo": settings.algo,
        "budget": settings.budget,
        "seed": settings.seed,
        "reduce": settings.reduce,
        "objective": objective.stat,
        "objective_over": "all requests, failures counted slower than any success",
        "min_success": objective.min_success,
        "study": outcome.study.study_name,
        "interrupted": outcome.interrupted,
        "trials_complete": len(trials),
        "trials_infeasible": sum(1 for t in trials if not t.user_attrs.get("feasible", True)),
        "parameters_tuned": len(outcome.space),
        "parameters_in_space": len(settings.space),
        "services_kept": outcome.selection.services if outcome.selection else None,
        "reduction": outcome.selection.report() if outcome.selection else None,
        "defaults": _finite(outcome.baseline),
        "defaults_success": outcome.defaults["success"],
        "defaults_goodput": outcome.defaults["goodput"],
        "best": _finite(outcome.best_value) if best else None,
        "best_trial": best.number if best else None,
        "best_success": best.user_attrs.get("success") if best else None,
        "best_goodput": best.user_attrs.get("goodput") if best else None,
        "improvement_pct": round(100 * outcome.improvement, 2) if outcome.improvement is not None else None,
        "best_params": outcome.space.to_yaml(outcome.best_params) if best else None,
        "importance": importance_doc(outcome),
    }
    c = outcome.confirmation
    if c is not None:
        ci = c.improvement_ci()
        chosen = c.candidates.get(c.best) if c.best is not None else None
        doc["remeasured"] = {
            "seeds": c.seeds,
            "defaults": [_finite(v) for v in c.defaults],
            "candidates": {
                str(n): {k: [_finite(v) for v in vs] for k, vs in r.items()} for n, r in c.candidates.items()
            },
            "best": c.best,
            "best_mean": statistics.fmean(chosen["values"]) if chosen else None,
            "best_success": min(chosen["successes"]) if chosen else None,
            "improvement_pct": round(100 * ci[0], 2) if ci else None,
            "improvement_ci95_pct": [round(100 * ci[1], 2), round(100 * ci[2], 2)] if ci else None,
        }
    return doc


def write_all(outcome: Outcome, settings: Settings, doc: dict[str, Any]) -> None:
    out = settings.out
    os.makedirs(out, exist_ok=True)
    best_path = os.path.join(out, "best.yaml")
    if outcome.best is not None:
        best_file(outcome, settings, doc, best_path)
    elif os.path.exists(best_path):
        os.remove(best_path)  # an earlier run's best: not this study's answer
    history(outcome.trials, os.path.join(out, "history.csv"))
    title = f"{doc.get('name', '')}: {settings.algo}, reduce {settings.reduce}"
    info = convergence_info(outcome.trials, outcome.baseline, settings.objective.stat, title)
    plot_convergence(info, os.path.join(out, "convergence.png"))
    with open(os.path.join(out, "convergence.png"), "rb") as f:
        convergence = base64.b64encode(f.read()).decode("ascii")
    with _PLOTTING:
        report_html(outcome, settings, convergence, os.path.join(out, "report.html"))
    with open(os.path.join(out, "importance.json"), "w", encoding="utf-8") as f:
        json.dump(importance_doc(outcome), f, indent=2)
    with open(os.path.join(out, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary(outcome, settings), f, indent=2)
