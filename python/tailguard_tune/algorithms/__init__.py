"""The tuning algorithms of config-tuning.txt, each an Optuna sampler (see `_base.py`), in one
registry: `SAMPLERS` maps each `--algo` name to its class, and every class is built the same way,
`cls(space, seed=seed, budget=budget)`. To add an algorithm, write its class (an `AskTellSampler`
subclass for an ask/tell optimizer) in a module `_name.py` here and add it to `SAMPLERS`: the CLI
offers it and the contract tests (python/tests/test_samplers.py) run over it."""

from __future__ import annotations

from typing import Protocol

import optuna

from ..space import Space
from ._base import AskTellSampler, ConstraintsFunc, initial_random, tpe_startup
from ._dds import DDS, DDSSampler
from ._hybrid import HybridSampler
from ._optuna import GASampler, RandomSampler, TPESampler
from ._pso import PSOSampler
from ._sa import SASampler
from ._skopt import GBRTSampler, GPSampler, RFSampler, SkoptSampler


class SamplerClass(Protocol):
    """How the tuner builds a sampler: for a study of `budget` trials over `space`, seeded, with
    Optuna's `constraints_func` (which a sampler without constrained sampling ignores)."""

    def __call__(
        self, space: Space, *, seed: int | None, budget: int, constraints_func: ConstraintsFunc | None = None
    ) -> optuna.samplers.BaseSampler: ...


SAMPLERS: dict[str, SamplerClass] = {
    "random": RandomSampler,
    "sa": SASampler,
    "dds": DDSSampler,
    "pso": PSOSampler,
    "ga": GASampler,
    "bo-gp": GPSampler,
    "bo-gbrt": GBRTSampler,
    "bo-rf": RFSampler,
    "tpe": TPESampler,
    "hybrid": HybridSampler,
}


def make_sampler(
    name: str, space: Space, *, seed: int | None, budget: int, constraints_func: ConstraintsFunc | None = None
) -> optuna.samplers.BaseSampler:
    """The sampler of algorithm `name` for a study of `budget` trials over `space`."""
    try:
        cls = SAMPLERS[name]
    except KeyError:
        raise ValueError(f"--algo {name!r}: expected one of {', '.join(SAMPLERS)}") from None
    return cls(space, seed=seed, budget=budget, constraints_func=constraints_func)


__all__ = [
    "DDS",
    "SAMPLERS",
    "AskTellSampler",
    "ConstraintsFunc",
    "DDSSampler",
    "GASampler",
    "GBRTSampler",
    "GPSampler",
    "HybridSampler",
    "PSOSampler",
    "RFSampler",
    "RandomSampler",
    "SASampler",
    "SamplerClass",
    "SkoptSampler",
    "TPESampler",
    "initial_random",
    "make_sampler",
    "tpe_startup",
]
