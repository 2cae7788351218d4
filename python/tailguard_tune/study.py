"""A tuning study: evaluate the defaults, then `budget` configurations chosen by one algorithm,
every trial stored in an Optuna study; then the outputs (best experiment file, history,
convergence plot, fANOVA importance)."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import TrialState

from . import experiment, reduce
from .algorithms import make_sampler
from .evaluate import EvaluationError, Objective, Runner
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
    reduce_top: int = 5  # critical-path+variability keeps this many services
    out: str = "tune-out"


@dataclass
class Outcome:
    study: optuna.Study
    trials: list[optuna.trial.FrozenTrial]  # the study's trials when the outputs were written
    space: Space  # the space tuned (after reduction)
    baseline: float
    best_value: float
    best_params: dict[str, Any]
    selection: reduce.Selection | None
    importance: dict[str, float]

    @property
    def improvement(self) -> float:
        """How much lower the best objective is than the defaults', as a fraction."""
        return 1.0 - self.best_value / self.baseline if self.baseline > 0 else 0.0


def default_study_name(settings: Settings, doc: dict[str, Any]) -> str:
    return f"{doc.get('name', 'experiment')}-{settings.algo}-{settings.reduce}-seed{settings.seed}"


def reduced_space(
    settings: Settings, doc: dict[str, Any], say: Callable[[str], None]
) -> tuple[Space, reduce.Selection | None]:
    """The space after `settings.reduce`, from the given traces or from one run of the defaults."""
    if settings.reduce == "none":
        return settings.space, None
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
    selection = reduce.select_services(settings.reduce, traces, top=settings.reduce_top)
    space = reduce.reduce_space(settings.space, doc, selection.services)
    say(
        f"reduce {settings.reduce}: {len(traces)} traces; services kept: {', '.join(selection.services) or 'none'}; "
        f"{len(space)} of {len(settings.space)} parameters"
    )
    if not len(space):
        raise ValueError(f"--reduce {settings.reduce}: no parameter of the space belongs to the services kept")
    return space, selection


def _tuned_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False) if not t.user_attrs.get("baseline")]


def _baseline(
    study: optuna.Study, settings: Settings, doc: dict[str, Any], space: Space, say: Callable[[str], None]
) -> float:
    """The defaults' objective, evaluated once per study; also stored as a trial when the defaults
    lie inside the space, so every algorithm knows them (DDS starts from them)."""
    if "baseline" in study.user_attrs:
        return float(study.user_attrs["baseline"])
    value, _ = settings.runner.evaluate(doc, settings.file, settings.objective)
    study.set_user_attr("baseline", value)
    defaults = space.defaults(doc)
    if defaults is not None:
        study.add_trial(
            optuna.trial.create_trial(
                params=defaults, distributions=space.distributions(), value=value, user_attrs={"baseline": True}
            )
        )
    say(f"defaults: {settings.objective.stat} = {value:.3f} ms" + ("" if defaults else " (outside the space)"))
    return value


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
    """Runs (or resumes) the study until it holds `budget` tuned trials, then writes the outputs."""
    doc = experiment.load(settings.file)
    space, selection = reduced_space(settings, doc, say)
    os.makedirs(settings.out, exist_ok=True)
    storage = settings.storage or f"sqlite:///{os.path.abspath(os.path.join(settings.out, 'study.db'))}"
    name = settings.study_name or default_study_name(settings, doc)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = make_sampler(settings.algo, space, seed=settings.seed, budget=settings.budget)
    study = _open_study(storage, name, sampler)
    study.set_user_attr("experiment", os.path.abspath(settings.file))
    study.set_user_attr("objective", settings.objective.stat)
    baseline = _baseline(study, settings, doc, space, say)
    distributions = space.distributions()

    # Bounded: this worker asks at most `budget` trials, fewer when others share the study.
    for _ in range(settings.budget):
        if len(_tuned_trials(study)) >= settings.budget:
            break
        trial = study.ask(distributions)
        values = space.to_yaml(trial.params)
        started = time.monotonic()
        try:
            value, _ = settings.runner.evaluate(experiment.with_values(doc, values), settings.file, settings.objective)
        except EvaluationError as e:
            trial.set_user_attr("error", str(e))
            study.tell(trial, state=TrialState.FAIL)
            say(f"trial {trial.number}: failed: {e}")
            continue
        trial.set_user_attr("seconds", round(time.monotonic() - started, 3))
        study.tell(trial, value)
        complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        lowest = min(t.value for t in complete if t.value is not None)
        stat = settings.objective.stat
        say(f"trial {trial.number}: {stat} = {value:.3f} ms (best {lowest:.3f}, defaults {baseline:.3f})")

    # One snapshot for every output, through a freshly loaded study: workers sharing the study may
    # add trials meanwhile, and Optuna's trial cache never rereads a peer's trial that committed
    # after one of ours with a higher id (the lost update made this snapshot miss a finished trial).
    study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
    trials = study.get_trials(deepcopy=False)
    scored = [(t.value, t.number, t) for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
    if not scored:
        raise EvaluationError("no trial completed; see the errors above")
    best_value, _, best = min(scored, key=lambda s: (s[0], s[1]))
    from . import output  # matplotlib is imported only when writing the outputs

    importance = output.importance(study, seed=settings.seed)
    outcome = Outcome(study, trials, space, baseline, float(best_value), dict(best.params), selection, importance)
    output.write_all(outcome, settings, doc)
    return outcome
