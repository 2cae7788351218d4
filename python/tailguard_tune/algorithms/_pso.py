"""Particle swarm optimisation (config-tuning.txt §IV-B1) with nevergrad's `PSO`, over the unit
cube of the space."""

from __future__ import annotations

import contextlib
from typing import Any

import nevergrad as ng
import numpy as np

from ..space import Space
from ._base import AskTellSampler, ConstraintsFunc


class PSOSampler(AskTellSampler):
    """nevergrad's PSO, its particles in the unit cube of the space."""

    def __init__(
        self, space: Space, *, seed: int | None, budget: int, constraints_func: ConstraintsFunc | None = None
    ) -> None:
        super().__init__(space, seed=seed)
        param = ng.p.Array(shape=(len(space),), lower=0.0, upper=1.0)
        param.random_state = np.random.RandomState(seed)
        self.optimizer = ng.optimizers.registry["PSO"](parametrization=param, budget=max(budget, 1), num_workers=1)
        self._asked: dict[int, Any] = {}

    def ask(self, number: int) -> dict[str, Any]:
        candidate = self.optimizer.ask()
        self._asked[number] = candidate
        return self.space.from_unit(candidate.value)

    def tell(self, number: int, params: dict[str, Any], value: float) -> None:
        candidate = self._asked.pop(number, None)
        if candidate is None:
            candidate = self.optimizer.parametrization.spawn_child(new_value=np.array(self.space.to_unit(params)))
        with contextlib.suppress(ng.errors.TellNotAskedNotSupportedError):  # it learns from its own particles only
            self.optimizer.tell(candidate, value)
