"""The interface every algorithm implements: an Optuna sampler, so trials of any algorithm are
asked, told and stored through an Optuna study (and its storage: SQLite, or PostgreSQL shared by
several machines).

Algorithms that Optuna implements are its samplers (`_optuna.py`). Algorithms from other libraries
(scikit-optimize, nevergrad) and our own (DDS, SA) are ask/tell optimizers over the whole
configuration; `AskTellSampler` adapts them: each new trial asks the optimizer for a complete
configuration (Optuna's "relative" sampling), and before asking, every finished trial the
optimizer has not yet seen is told to it, its own or another worker's.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable, Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

from ..space import Space

ConstraintsFunc = Callable[[FrozenTrial], Sequence[float]]
"""Optuna's `constraints_func`: a finished trial's constraint values, feasible when all are ≤ 0."""


class AskTellSampler(optuna.samplers.BaseSampler):
    """Adapts an ask/tell optimizer over `space` to Optuna's sampler interface (an `abc.ABC`: a
    subclass implements `ask` and `tell`). These optimizers take no constraints: an infeasible
    trial (user attribute `feasible` false) is told as the worst feasible value told so far (its
    penalised score while there is none), the usual substitute in Bayesian optimisation with
    unknown constraints. Telling the penalty itself, hundreds of times any feasible value, made a
    Gaussian process's fit all cliff: on examples/tune/shop-app.yaml the hybrid's GP then sent 7 of
    its 8 trials into failing configurations and ended at the defaults (seed 4).

    `finished` counts the tuned trials of the study that had finished when the last configuration
    was asked (the defaults' trial and interrupted ones aside): an algorithm whose schedule depends
    on its progress reads it, so a resumed or shared study continues where the study is rather than
    where this process started."""

    def __init__(self, space: Space, *, seed: int | None) -> None:
        self.space = space
        self.seed = seed
        self.finished = 0
        self._told: set[int] = set()
        self._worst_feasible: float | None = None
        self._fallback = optuna.samplers.RandomSampler(seed=seed)

    # -- what a subclass provides -------------------------------------------------------------
    @abc.abstractmethod
    def ask(self, number: int) -> dict[str, Any]:
        """The next configuration to evaluate, as stored values by path; `number` is the trial's."""

    @abc.abstractmethod
    def tell(self, number: int, params: dict[str, Any], value: float) -> None:
        """The objective of a finished trial (one this optimizer asked for, or any other)."""

    # -- Optuna's sampler interface -----------------------------------------------------------
    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self.space.distributions()

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if not search_space:
            return {}
        self._catch_up(study)
        return self.ask(trial.number)

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        # Only reached for a parameter outside the space; never in the tuner's own loop.
        return self._fallback.sample_independent(study, trial, param_name, param_distribution)

    def reseed_rng(self) -> None:  # the tuner runs one sampler per process; keep the seeded stream
        pass

    def _catch_up(self, study: optuna.Study) -> None:
        names = set(self.space.names())
        finished = (TrialState.COMPLETE, TrialState.FAIL)
        self.finished = sum(
            1
            for t in study.get_trials(deepcopy=False, states=finished)
            if not (t.user_attrs.get("baseline") or t.user_attrs.get("interrupted") or t.user_attrs.get("stale"))
        )
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if t.number in self._told:
                continue
            self._told.add(t.number)
            if set(t.params) != names or t.value is None:
                continue
            value = float(t.value)
            if t.user_attrs.get("feasible", True):
                self._worst_feasible = max(value, self._worst_feasible or value)
            elif self._worst_feasible is not None:
                value = self._worst_feasible
            self.tell(t.number, dict(t.params), value)


# -- shares of the budget ----------------------------------------------------------------------
def initial_random(budget: int) -> int:
    """Random configurations the model-based algorithms try before their model (a third of the budget)."""
    return max(3, budget // 3)


def tpe_startup(budget: int, dim: int) -> int:
    """TPE's startup trials (Optuna counts the defaults' trial among them): a third of the budget,
    but no more than one per two dimensions of the space. The random start is there to spread
    points along every dimension before the Parzen estimators split good from bad; a small space
    needs fewer, and the trials it does not need are better spent on the model. On examples/tune
    at budget 15 (mean p95 improvement, seeds 0-19): in the 6-parameter reduced space 3 startup
    trials give 57.25 % against 57.12 % for 5; in the 32-parameter space (seeds 0-9) 5 give 57.28 %
    against 57.15 % for 3 (docs/tune.md, "Dimensionality reduction")."""
    return max(2, min(initial_random(budget), math.ceil(dim / 2)))
