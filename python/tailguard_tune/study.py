"""A tuning study: evaluate the defaults, then `budget` configurations chosen by one algorithm,
every trial stored in an Optuna study; re-measure the best few on fresh seeds to choose the best;
then the outputs (best experiment file, history, convergence plot, fANOVA importance, summary).

Every trial records its objective over all requests (failures counted as slower than any
success), its success rate and goodput, and whether it is feasible (success ≥ --min-success). The
value Optuna sees is the objective for a feasible trial and a penalty above every feasible value
for an infeasible one; samplers that take constraints (tpe, ga) also get the success rate as one.
An infeasible trial is never reported best.

Resuming: a study interrupted (Ctrl-C) keeps what it finished and writes its outputs; run again, it
fails the trials a dead process left RUNNING (without charging them to the budget) and continues
with a sampler seeded for the trials already done, so it does not propose them again.
"""

from __future__ import annotations

import json
import math
import os
import socket
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from . import experiment, reduce
from .algorithms import make_sampler
from .evaluate import EvaluationError, Measurement, Objective, Runner, Seeds
from .space import Space


@dataclass
class Settings:
    """What `tailguard-tune` was asked to do."""

    file: str
    space: Space
    algo: str
    budget: int
    runner: Runner
    objective: Objective = field(default_factory=Objective)
    seed: int = 0
    storage: Any = None  # an Optuna storage URL (or storage object); None: SQLite in `out`
    study_name: str | None = None
    reduce: str = "none"
    traces: str | None = None  # traces to reduce with; None: run the defaults once with --traces
    reduce_top: int = 5  # critical-path+variability keeps at most this many services
    reduce_coverage: float = 0.95  # tail keeps services until they cover this share of the slow requests' excess
    out: str = "tune-out"
    repeats: int = 1  # runs per trial, each with its own seed; the objective is their mean
    vary_seeds: bool = True  # False: every trial runs with the same seeds (--same-seed)
    remeasure: int = 3  # the best candidates re-measured on fresh seeds before one is declared best
    remeasure_seeds: int = 5


@dataclass(frozen=True)
class Confirmation:
    """The best candidates and the defaults re-measured on the same fresh seeds."""

    seeds: list[int]
    defaults: list[float]  # the defaults' objective on each seed
    candidates: dict[int, dict[str, list[float]]]  # trial number -> {"values", "successes", "goodputs"}
    best: int | None  # the trial with the lowest mean objective among those feasible on every seed
    cdf: dict[str, list[list[float]]] = field(default_factory=dict)  # "defaults" or trial number: first seed's cdf

    def improvements(self) -> list[float]:
        """1 − best/defaults on each seed (paired), where both are finite."""
        if self.best is None:
            return []
        pairs = zip(self.candidates[self.best]["values"], self.defaults, strict=True)
        return [1.0 - b / d for b, d in pairs if math.isfinite(b) and math.isfinite(d) and d > 0]

    def improvement_ci(self) -> tuple[float, float, float] | None:
        """The mean improvement and its 95 % confidence interval (Student's t over the seeds)."""
        gains = self.improvements()
        if len(gains) < 2:
            return None
        from scipy import stats

        mean = statistics.fmean(gains)
        half = float(stats.t.ppf(0.975, len(gains) - 1)) * statistics.stdev(gains) / math.sqrt(len(gains))
        return mean, mean - half, mean + half


@dataclass
class Outcome:
    study: optuna.Study
    trials: list[FrozenTrial]  # the study's trials when the outputs were written
    space: Space  # the space tuned (after reduction)
    defaults: dict[str, Any]  # the defaults' objective_ms, success and goodput
    best: FrozenTrial | None  # None when no trial was feasible
    confirmation: Confirmation | None
    selection: reduce.Selection | None
    importance: dict[str, float]
    interrupted: bool = False

    @property
    def baseline(self) -> float:
        return float(self.defaults["objective_ms"] if self.defaults["objective_ms"] is not None else math.inf)

    @property
    def best_value(self) -> float:
        return _objective(self.best) if self.best is not None else math.inf

    @property
    def best_params(self) -> dict[str, Any]:
        return dict(self.best.params) if self.best is not None else {}

    @property
    def improvement(self) -> float | None:
        """How much lower the best objective is than the defaults', as a fraction: the mean over
        the fresh seeds when re-measured, else from the trials; None when either is infinite."""
        ci = self.confirmation.improvement_ci() if self.confirmation else None
        if ci is not None:
            return ci[0]
        if self.confirmation is not None and self.confirmation.improvements():
            return self.confirmation.improvements()[0]
        if self.best is None or not math.isfinite(self.baseline) or self.baseline <= 0:
            return None
        return 1.0 - self.best_value / self.baseline


def default_study_name(settings: Settings, doc: dict[str, Any]) -> str:
    return f"{doc.get('name', 'experiment')}-{settings.algo}-{settings.reduce}-seed{settings.seed}"


def reduced_space(
    settings: Settings, doc: dict[str, Any], say: Callable[[str], None]
) -> tuple[Space, reduce.Selection | None]:
    """The space after `settings.reduce`, from the given traces or from one run of the defaults."""
    if settings.reduce == "none":
        return settings.space, None
    os.makedirs(settings.out, exist_ok=True)
    if settings.traces:
        traces = reduce.load_traces(settings.traces, settings.objective.runs)
    else:
        os.makedirs(settings.out, exist_ok=True)
        path = os.path.join(settings.out, "traces.json")
        with tempfile.TemporaryDirectory(prefix="tailguard-tune-") as tmp:
            try:
                settings.runner.run(doc, settings.file, tmp, traces=os.path.abspath(path))
            except EvaluationError as e:
                raise EvaluationError(
                    f"{e} (--reduce runs the defaults once with --traces; or pass --traces FILE)"
                ) from None
        if not os.path.exists(path):
            raise EvaluationError(f"{settings.runner.backend} wrote no traces to {path}; pass --traces FILE")
        traces = reduce.load_traces(path, settings.objective.runs)
    selection = reduce.select_services(
        settings.reduce, traces, top=settings.reduce_top, coverage=settings.reduce_coverage
    )
    space = reduce.reduce_space(settings.space, doc, selection.services)
    scores = selection.scores()
    kept = ", ".join(
        f"{s} {scores.get(s, 0.0):.3f}" for s in sorted(selection.services, key=lambda s: -scores.get(s, 0.0))
    )
    dropped = [(s, v) for s, v in scores.items() if s not in selection.services][:5]
    slow = f", {selection.tail.slow} slow (from {selection.tail.threshold_ms:.2f} ms)" if selection.tail else ""
    say(
        f"reduce {settings.reduce}: {len(traces)} traces{slow}; kept: {kept or 'none'}; next: "
        + (", ".join(f"{s} {v:.3f}" for s, v in dropped) or "none")
        + f"; {len(space)} of {len(settings.space)} parameters"
    )
    with open(os.path.join(settings.out, "reduction.json"), "w", encoding="utf-8") as f:
        json.dump(selection.report(), f, indent=2)
    if not len(space):
        raise ValueError(f"--reduce {settings.reduce}: no parameter of the space belongs to the services kept")
    return space, selection


def _tuned_trials(study: optuna.Study) -> list[FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False) if not t.user_attrs.get("baseline")]


def _charged(study: optuna.Study) -> int:
    """Tuned trials that count against the budget: all but those interrupted or left stale."""
    return sum(1 for t in _tuned_trials(study) if not (t.user_attrs.get("interrupted") or t.user_attrs.get("stale")))


def _objective(trial: FrozenTrial) -> float:
    value = trial.user_attrs.get("objective_ms")
    if value is None and "feasible" not in trial.user_attrs:  # a study from before success was recorded
        value = trial.value
    return float(value) if value is not None else math.inf


def _feasible(trial: FrozenTrial) -> bool:
    return trial.state == TrialState.COMPLETE and bool(trial.user_attrs.get("feasible", trial.value is not None))


def _attrs(m: Measurement, objective: Objective) -> dict[str, Any]:
    """What a trial records of its measurement."""
    return {
        "objective_ms": m.value if math.isfinite(m.value) else None,
        "success": round(m.success, 6),
        "goodput": round(m.goodput, 3),
        "feasible": objective.feasible(m.value, m.success),
        "seeds": list(m.seeds),
    }


def _score(m: Measurement, objective: Objective, penalty_ms: float) -> float:
    """The value the sampler minimises: the objective when feasible, else a penalty above any
    feasible value (10 times the defaults' slowest success) that grows as the success rate falls,
    so that an algorithm without constraints still climbs back towards feasibility."""
    if objective.feasible(m.value, m.success):
        return m.value
    return penalty_ms * (1.0 + 10.0 * (1.0 - m.success))


def _constraints(trial: FrozenTrial) -> tuple[float]:
    """Optuna's constraints_func for the samplers that take one (tpe, ga): recorded at tell."""
    return (float(trial.user_attrs.get("constraint", 0.0)),)


def describe(m_value: float | None, success: float, goodput: float, stat: str, min_success: float) -> str:
    """How a measurement reads on the console."""
    text = f"{stat} {m_value:.3f} ms" if m_value is not None else f"{stat} infinite"
    text += f", success {100 * success:.2f} %, goodput {goodput:.1f}/s"
    if success < min_success or m_value is None:
        text += f" (infeasible: below {100 * min_success:g} %)" if success < min_success else " (infeasible)"
    return text


def _baseline(
    study: optuna.Study, settings: Settings, doc: dict[str, Any], space: Space, seeds: Seeds, say: Callable[[str], None]
) -> dict[str, Any]:
    """The defaults' measurement, evaluated once per study; also stored as a trial when the
    defaults lie inside the space, so every algorithm knows them (DDS starts from them)."""
    if "defaults" in study.user_attrs:
        return dict(study.user_attrs["defaults"])
    objective = settings.objective
    m = settings.runner.measure(doc, settings.file, objective, seeds.trial(0))
    attrs = _attrs(m, objective)
    penalty = 10.0 * max(m.slowest_ms, m.value if math.isfinite(m.value) else 0.0, 1.0)
    study.set_user_attr("penalty_ms", penalty)
    defaults = space.defaults(doc)
    if defaults is not None:
        study.add_trial(
            optuna.trial.create_trial(
                params=defaults,
                distributions=space.distributions(),
                value=_score(m, objective, penalty),
                user_attrs={"baseline": True, **attrs, "constraint": objective.constraint(m.value, m.success)},
                system_attrs={"constraints": (objective.constraint(m.value, m.success),)},
            )
        )
    study.set_user_attr("defaults", attrs)
    shown = describe(attrs["objective_ms"], m.success, m.goodput, objective.stat, objective.min_success)
    say(f"defaults: {shown}" + ("" if defaults else " (outside the space)"))
    return attrs


def _fail_stale(study: optuna.Study, say: Callable[[str], None]) -> None:
    """Marks FAIL the RUNNING trials whose process, on this host, is gone (killed, or the machine
    restarted): they will never finish. A peer's trial on another host is left alone."""
    host = socket.gethostname()
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        pid = t.user_attrs.get("pid")
        if t.user_attrs.get("host") != host or not isinstance(pid, int) or _alive(pid):
            continue
        study._storage.set_trial_user_attr(t._trial_id, "stale", True)
        study._storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
        say(f"trial {t.number}: left RUNNING by process {pid}, which is gone: failed, not charged to the budget")


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def resume_seed(seed: int, done: int) -> int:
    """The sampler's seed after `done` trials: `seed` for a new study (the same seed gives the same
    trials), another stream for each resumption, so a resumed sampler does not draw again the
    random configurations it drew before the interruption."""
    if done == 0:
        return seed
    return int(np.random.SeedSequence([seed, done]).generate_state(1)[0])


def _candidates(trials: list[FrozenTrial], count: int) -> list[FrozenTrial]:
    """The `count` feasible trials with the lowest objective, one per distinct configuration."""
    seen: set[str] = set()
    chosen = []
    for t in sorted((t for t in trials if _feasible(t)), key=lambda t: (_objective(t), t.number)):
        key = repr(sorted(t.params.items()))
        if key not in seen:
            seen.add(key)
            chosen.append(t)
    return chosen[:count]


def _confirm(
    study: optuna.Study,
    settings: Settings,
    doc: dict[str, Any],
    space: Space,
    candidates: list[FrozenTrial],
    seeds: list[int],
    say: Callable[[str], None],
) -> Confirmation:
    """Re-measures the defaults and each candidate on the same fresh seeds (kept in the study, so
    rewriting the outputs does not measure again) and picks the best of them."""
    objective = settings.objective
    stored = dict(study.user_attrs.get("confirmation") or {})
    if stored.get("seeds") != seeds:
        stored = {"seeds": seeds, "candidates": {}}

    def measured(m: Measurement) -> dict[str, list[float]]:
        return {
            "values": [s.value for s in m.scores],
            "successes": [s.success for s in m.scores],
            "goodputs": [s.goodput for s in m.scores],
        }

    cdf = stored.setdefault("cdf", {})
    if "defaults" not in stored:
        m = settings.runner.measure(doc, settings.file, objective, seeds)
        stored["defaults"], cdf["defaults"] = measured(m)["values"], [list(p) for p in m.scores[0].cdf]
        study.set_user_attr("confirmation", _json_safe(stored))
    for t in candidates:
        if str(t.number) in stored["candidates"]:
            continue
        candidate = experiment.with_values(doc, space.to_yaml(t.params))
        m = settings.runner.measure(candidate, settings.file, objective, seeds)
        stored["candidates"][str(t.number)], cdf[str(t.number)] = measured(m), [list(p) for p in m.scores[0].cdf]
        study.set_user_attr("confirmation", _json_safe(stored))
    results = {t.number: _from_json(stored["candidates"][str(t.number)]) for t in candidates}
    defaults = [_inf(v) for v in stored["defaults"]]

    def ok(r: dict[str, list[float]]) -> bool:
        return all(objective.feasible(v, s) for v, s in zip(r["values"], r["successes"], strict=True))

    feasible = [n for n, r in results.items() if ok(r)]
    best = min(feasible, key=lambda n: (statistics.fmean(results[n]["values"]), n)) if feasible else None
    for n, r in results.items():
        mean = statistics.fmean(r["values"])  # infinite if any seed's is
        say(
            f"re-measured trial {n} on {len(seeds)} fresh seeds: "
            + describe(
                mean if math.isfinite(mean) else None,
                min(r["successes"]),
                statistics.fmean(r["goodputs"]),
                objective.stat,
                objective.min_success,
            )
            + (" <- best" if n == best else "")
        )
    return Confirmation(seeds, defaults, results, best, dict(cdf))


def _json_safe(stored: dict[str, Any]) -> dict[str, Any]:
    """Infinite objectives stored as null (JSON has no infinity)."""

    def clean(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, list):
            return [clean(v) for v in x]
        return None if isinstance(x, float) and not math.isfinite(x) else x

    return dict(clean(stored))


def _inf(v: float | None) -> float:
    return math.inf if v is None else float(v)


def _from_json(r: dict[str, list[Any]]) -> dict[str, list[float]]:
    return {k: [_inf(v) for v in vs] for k, vs in r.items()}


def _open_study(storage: Any, name: str, sampler: optuna.samplers.BaseSampler) -> optuna.Study:
    """Creates or loads the study. Workers starting together on a new database may race to create
    its tables (SQLite: "database is locked"; PostgreSQL: a duplicate table or type); the loser
    retries (a bounded number of times). A URL that names no database Optuna can open, or a server
    that still cannot be reached after the retries, is a `ValueError` naming the URL (without its
    password)."""
    import sqlalchemy.exc

    for attempt in range(5):
        try:
            return optuna.create_study(
                storage=storage, study_name=name, direction="minimize", sampler=sampler, load_if_exists=True
            )
        except sqlalchemy.exc.ArgumentError as e:  # not a URL, or an unknown database kind
            raise ValueError(f"--storage {_shown(storage)}: not a storage URL Optuna can open: {_first_line(e)}") from e
        except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError) as e:
            if attempt == 4:
                raise ValueError(f"--storage {_shown(storage)}: cannot open the study: {_first_line(e)}") from e
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("the loop returns or raises")


def _shown(storage: Any) -> str:
    """The storage URL with its password hidden."""
    import sqlalchemy.engine
    import sqlalchemy.exc

    try:
        return sqlalchemy.engine.make_url(str(storage)).render_as_string(hide_password=True)
    except sqlalchemy.exc.ArgumentError:  # not even a URL: nothing to hide
        return str(storage)


def _first_line(e: Exception) -> str:
    """The first line of what the database driver said (SQLAlchemy appends a link and the SQL)."""
    text = str(getattr(e, "orig", None) or e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def run(settings: Settings, say: Callable[[str], None] = print) -> Outcome:
    """Runs (or resumes) the study until it holds `budget` tuned trials, re-measures the best
    candidates, then writes the outputs. Ctrl-C stops the study: the trial running is failed (not
    charged) and the outputs are written for the trials done (`Outcome.interrupted`)."""
    doc = experiment.load(settings.file)
    space, selection = reduced_space(settings, doc, say)
    os.makedirs(settings.out, exist_ok=True)
    storage = settings.storage or f"sqlite:///{os.path.abspath(os.path.join(settings.out, 'study.db'))}"
    name = settings.study_name or default_study_name(settings, doc)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    objective = settings.objective
    study = _open_study(storage, name, optuna.samplers.RandomSampler(seed=settings.seed))
    study.set_user_attr("experiment", os.path.abspath(settings.file))
    study.set_user_attr("objective", objective.stat)
    study.set_user_attr("min_success", objective.min_success)
    _fail_stale(study, say)
    done = len(_tuned_trials(study))
    study.sampler = make_sampler(
        settings.algo,
        space,
        seed=resume_seed(settings.seed, done),
        budget=settings.budget,
        constraints_func=_constraints,
    )
    if done and _charged(study) < settings.budget:
        say(f"resuming: {_charged(study)} of {settings.budget} trials done")
    base = settings.runner.seed if settings.runner.seed is not None else int(doc.get("seed") or 1)
    seeds = Seeds(base, settings.repeats, settings.vary_seeds)
    defaults = _baseline(study, settings, doc, space, seeds, say)
    penalty = float(study.user_attrs.get("penalty_ms") or 1000.0)
    distributions = space.distributions()
    interrupted = False
    stat = objective.stat

    try:
        # Bounded: this worker asks at most `budget` trials, fewer when others share the study.
        # Counted through a freshly loaded study: this one's trial cache can miss a peer's trial
        # (below), and two workers then asked for one more each (8 trials of a budget of 6).
        for _ in range(settings.budget):
            if _charged(optuna.load_study(study_name=name, storage=storage)) >= settings.budget:
                break
            trial = study.ask(distributions)
            trial.set_user_attr("host", socket.gethostname())
            trial.set_user_attr("pid", os.getpid())
            values = space.to_yaml(trial.params)
            started = time.monotonic()
            try:
                m = settings.runner.measure(
                    experiment.with_values(doc, values), settings.file, objective, seeds.trial(trial.number)
                )
            except EvaluationError as e:
                trial.set_user_attr("error", str(e))
                study.tell(trial, state=TrialState.FAIL)
                say(f"trial {trial.number}: failed: {e}")
                continue
            except KeyboardInterrupt:
                trial.set_user_attr("interrupted", True)
                study.tell(trial, state=TrialState.FAIL)
                raise
            trial.set_user_attr("seconds", round(time.monotonic() - started, 3))
            for key, value in _attrs(m, objective).items():
                trial.set_user_attr(key, value)
            trial.set_user_attr("constraint", objective.constraint(m.value, m.success))
            study.tell(trial, _score(m, objective, penalty))
            feasible = [_objective(t) for t in study.get_trials(deepcopy=False) if _feasible(t)]
            lowest = f"{min(feasible):.3f}" if feasible else "none feasible"
            shown = describe(
                m.value if math.isfinite(m.value) else None, m.success, m.goodput, stat, objective.min_success
            )
            say(f"trial {trial.number}: {shown} (best {lowest}, defaults {_shown_ms(defaults['objective_ms'])})")
    except KeyboardInterrupt:
        interrupted = True

    # One snapshot for every output, through a freshly loaded study: workers sharing the study may
    # add trials meanwhile, and Optuna's trial cache never rereads a peer's trial that committed
    # after one of ours with a higher id (the lost update made this snapshot miss a finished trial).
    study = optuna.load_study(study_name=name, storage=storage, sampler=study.sampler)
    trials = study.get_trials(deepcopy=False)
    if not any(t.state == TrialState.COMPLETE for t in trials):
        raise EvaluationError("no trial completed; see the errors above")
    candidates = _candidates(trials, max(settings.remeasure, 1))
    confirmation = None
    best = candidates[0] if candidates else None
    if candidates and settings.remeasure > 0 and not interrupted:
        try:
            confirmation = _confirm(
                study,
                settings,
                doc,
                space,
                candidates[: settings.remeasure],
                seeds.fresh(settings.remeasure_seeds),
                say,
            )
            best = next((t for t in candidates if t.number == confirmation.best), None)
        except KeyboardInterrupt:
            interrupted = True
    from . import output  # matplotlib is imported only when writing the outputs

    importance = output.importance(study, seed=settings.seed)
    outcome = Outcome(study, trials, space, defaults, best, confirmation, selection, importance, interrupted)
    output.write_all(outcome, settings, doc)
    return outcome


def _shown_ms(value: float | None) -> str:
    return f"{value:.3f}" if value is not None else "infinite"
