"""The algorithms Optuna implements, as its samplers are, behind the tuner's constructor
`(space, *, seed, budget)`."""

from __future__ import annotations

import warnings

import optuna

from ..space import Space
from ._base import ConstraintsFunc, tpe_startup


class RandomSampler(optuna.samplers.RandomSampler):
    """Uniform random configurations (constraints do not change what it draws)."""

    def __init__(
        self, space: Space, *, seed: int | None, budget: int, constraints_func: ConstraintsFunc | None = None
    ) -> None:
        super().__init__(seed=seed)


class TPESampler(optuna.samplers.TPESampler):
    """Multivariate TPE after `tpe_startup` random trials; with `constraints_func`, Optuna's
    constrained TPE (infeasible trials always fall among the bad ones)."""

    def __init__(
        self, space: Space, *, seed: int | None, budget: int, constraints_func: ConstraintsFunc | None = None
    ) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # `multivariate`, constraints
            super().__init__(
                seed=seed,
                n_startup_trials=tpe_startup(budget, len(space)),
                multivariate=True,
                constraints_func=constraints_func,
            )


class GASampler(optuna.samplers.NSGAIISampler):
    """Optuna's NSGA-II, with one objective an elitist genetic algorithm (crossover + mutation),
    in generations of a third of the budget (4 to 10 configurations); with `constraints_func`,
    feasible configurations dominate infeasible ones (Deb's constrained selection)."""

    def __init__(
        self, space: Space, *, seed: int | None, budget: int, constraints_func: ConstraintsFunc | None = None
    ) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # constraints
            super().__init__(seed=seed, population_size=max(4, min(10, budget // 3)), constraints_func=constraints_func)
