"""The tuning algorithms of config-tuning.txt, each an Optuna sampler (see base.py)."""

from __future__ import annotations

import math
import warnings

import optuna

from ..space import Space
from .base import AskTellSampler
from .dds import DDS, DDSSampler
from .hybrid import HybridSampler
from .nevergrad_pso import NevergradSampler
from .sa import SASampler
from .skopt_bo import SkoptSampler

ALGORITHMS = ("random", "sa", "dds", "pso", "ga", "bo-gp", "bo-gbrt", "bo-rf", "tpe", "hybrid")


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


def make_sampler(name: str, space: Space, seed: int | None, budget: int) -> optuna.samplers.BaseSampler:
    """The sampler of algorithm `name` for a study of `budget` trials over `space`."""
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "tpe":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            startup = tpe_startup(budget, len(space))
            return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, multivariate=True)
    if name == "ga":
        # Optuna's NSGA-II with one objective is an elitist genetic algorithm (crossover + mutation).
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=max(4, min(10, budget // 3)))
    if name == "dds":
        return DDSSampler(space, seed, budget)
    if name == "sa":
        return SASampler(space, seed, budget)
    if name == "pso":
        return NevergradSampler(space, seed, budget, "PSO")
    if name in ("bo-gp", "bo-gbrt", "bo-rf"):
        return SkoptSampler(space, seed, name[3:].upper(), initial_random(budget))
    if name == "hybrid":
        return HybridSampler(space, seed, budget)
    raise ValueError(f"--algo {name!r}: expected one of {', '.join(ALGORITHMS)}")


__all__ = ["ALGORITHMS", "AskTellSampler", "DDS", "make_sampler"]
