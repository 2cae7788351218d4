"""The tuning algorithms of config-tuning.txt, each an Optuna sampler (see base.py)."""

from __future__ import annotations

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


def make_sampler(name: str, space: Space, seed: int | None, budget: int) -> optuna.samplers.BaseSampler:
    """The sampler of algorithm `name` for a study of `budget` trials over `space`."""
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "tpe":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(seed=seed, n_startup_trials=initial_random(budget), multivariate=True)
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
