"""Dynamically Dimensioned Search (Tolson & Shoemaker 2007, Water Resources Research 43), the one
algorithm of config-tuning.txt no maintained Python library implements.

DDS searches greedily around its best point. At iteration i of m, each dimension is perturbed
with probability p(i) = 1 − ln(i)/ln(m) (at least one dimension always), by r·N(0, 1) of the
dimension's range (r = 0.2), reflected at the bounds; the new point replaces the best if it is no
worse. Early on it moves in all dimensions (global search), late in few (local search). Here it
works on the unit cube of the space (Space.to_unit/from_unit), so a discrete or categorical
parameter moves between neighbouring values.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from ..space import Space
from ._base import AskTellSampler, ConstraintsFunc

Point = npt.NDArray[np.float64]  # a point of the unit cube


def reflect(x: float) -> float:
    """Tolson's reflection into [0, 1]: a step past a bound comes back by its excess; a step that
    would still be outside lands on the bound it passed."""
    if x < 0.0:
        x = -x
        return 0.0 if x > 1.0 else x
    if x > 1.0:
        x = 2.0 - x
        return 1.0 if x < 0.0 else x
    return x


def perturb_probability(i: int, m: int) -> float:
    """p(i) = 1 − ln(i)/ln(m) for iteration i in 1..m (1 when m ≤ 1)."""
    if m <= 1:
        return 1.0
    return max(0.0, 1.0 - math.log(max(i, 1)) / math.log(m))


class DDS:
    """The search itself, over the unit cube of `dim` dimensions, with ask/tell."""

    def __init__(self, dim: int, budget: int, rng: np.random.Generator, r: float = 0.2) -> None:
        self.dim, self.budget, self.rng, self.r = dim, max(int(budget), 1), rng, r
        self.best: Point | None = None
        self.best_value = math.inf
        self.iteration = 0  # perturbations asked so far

    def ask(self, iteration: int | None = None) -> Point:
        """The next point; `iteration` (1, 2, ...) sets the schedule's position, for a search that
        resumes (by default, the one after the last asked)."""
        if self.best is None:
            # No point evaluated yet (no defaults given): start from a uniform random one.
            return self.rng.random(self.dim)
        self.iteration = iteration if iteration is not None else self.iteration + 1
        p = perturb_probability(self.iteration, self.budget)
        chosen = self.rng.random(self.dim) < p
        if not chosen.any():
            chosen[self.rng.integers(self.dim)] = True
        x = self.best.copy()
        steps = self.rng.standard_normal(self.dim)
        for j in np.flatnonzero(chosen):
            x[j] = reflect(x[j] + self.r * steps[j])
        return x

    def tell(self, x: Point, value: float) -> None:
        if value <= self.best_value:
            self.best, self.best_value = np.asarray(x, dtype=float).copy(), value


class DDSSampler(AskTellSampler):
    """DDS as an Optuna sampler. It starts from the first point told (the experiment file's
    defaults, which the tuner evaluates first), as DDS starts from the user's initial solution.
    Its iteration is the study's count of finished trials plus one, so a resumed study goes on
    with the schedule where it stopped."""

    def __init__(
        self,
        space: Space,
        *,
        seed: int | None,
        budget: int,
        constraints_func: ConstraintsFunc | None = None,
        r: float = 0.2,
    ) -> None:
        super().__init__(space, seed=seed)
        self.dds = DDS(len(space), budget, np.random.default_rng(seed), r)

    def ask(self, number: int) -> dict[str, Any]:
        return self.space.from_unit(self.dds.ask(self.finished + 1))

    def tell(self, number: int, params: dict[str, Any], value: float) -> None:
        self.dds.tell(np.array(self.space.to_unit(params)), value)
