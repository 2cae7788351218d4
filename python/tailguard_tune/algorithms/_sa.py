"""Simulated annealing (config-tuning.txt §IV-B1) on the unit cube of the space.

scipy's `dual_annealing` has no ask/tell interface and spends its evaluations on local
minimisation, which a budget of 15 experiments cannot afford, so this is the textbook algorithm:
a Gaussian step (σ = 0.2 of each range, reflected at the bounds) from the current point, accepted
if better, else with probability exp(−Δ/T) where Δ is the relative worsening; the temperature
falls geometrically from T0 = 0.2 to 0.001 over the budget.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..space import Space
from ._base import AskTellSampler, ConstraintsFunc
from ._dds import Point, reflect


class SASampler(AskTellSampler):
    """Simulated annealing from T0 = `t0` down to `t_end` over `budget` steps."""

    def __init__(
        self,
        space: Space,
        *,
        seed: int | None,
        budget: int,
        constraints_func: ConstraintsFunc | None = None,
        t0: float = 0.2,
        t_end: float = 0.001,
    ) -> None:
        super().__init__(space, seed=seed)
        self.rng = np.random.default_rng(seed)
        self.budget = max(budget, 2)
        self.t0 = t0
        self.alpha: float = (t_end / t0) ** (1.0 / (self.budget - 1))
        self.current: Point | None = None
        self.current_value = math.inf
        self.step = 0

    def temperature(self) -> float:
        return self.t0 * self.alpha**self.step

    def ask(self, number: int) -> dict[str, Any]:
        if self.current is None:
            return self.space.from_unit(self.rng.random(len(self.space)))
        steps = self.rng.standard_normal(len(self.space))
        x = np.array([reflect(v + 0.2 * z) for v, z in zip(self.current, steps, strict=True)])
        return self.space.from_unit(x)

    def tell(self, number: int, params: dict[str, Any], value: float) -> None:
        x = np.array(self.space.to_unit(params))
        if self.current is None or value <= self.current_value:
            accept = True
        else:
            delta = (value - self.current_value) / max(abs(self.current_value), 1e-12)
            accept = self.rng.random() < math.exp(-delta / self.temperature())
        if accept:
            self.current, self.current_value = x, value
        self.step += 1
