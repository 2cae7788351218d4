"""The algorithms Optuna implements, as its samplers are, behind the tuner's constructor
`(space, *, seed, budget)`."""

from __future__ import annotations

import warnings

import optuna

from ..space import Space
from ._base import tpe_startup


class RandomSampler(optuna.samplers.RandomSampler):
    """Uniform random configurations."""

    def __init__(self, space: Space, *, seed: int | None, budget: int) -> None:
        super().__init__(seed=seed)


class TPESampler(optuna.samplers.TPESampler):
    """Multivariate TPE after `tpe_startup` random trials."""

    def __init__(self, space: Space, *, seed: int | None, budget: int) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # `multivariate`
            super().__init__(seed=seed, n_startup_trials=tpe_startup(budget, len(space)), multivariate=True)


class GASampler(optuna.samplers.NSGAIISampler):
    """Optuna's NSGA-II, with one objective an elitist genetic algorithm (crossover + mutation),
    in generations of a third of the budget (4 to 10 configurations)."""

    def __init__(self, space: Space, *, seed: int | None, budget: int) -> None:
        super().__init__(seed=seed, population_size=max(4, min(10, budget // 3)))
