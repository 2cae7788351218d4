"""Bayesian optimisation with scikit-optimize's `Optimizer` (config-tuning.txt's BO GP, BO GBRT and
BO RF): a surrogate model of the objective (Gaussian process, gradient-boosted trees or a random
forest) chooses each next configuration by an acquisition function, after `n_initial` random ones.
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

from skopt import Optimizer
from skopt.space import Categorical, Integer, Real

from ..space import Param, Space
from ._base import AskTellSampler, ConstraintsFunc, initial_random


def _dimension(p: Param) -> Any:  # a skopt.space.Dimension
    if p.type == "categorical":
        return Categorical(list(p.labels()), name=p.path)
    low, high = p.bounds()
    if p.type == "discrete":
        if p.step == 1:
            return Integer(int(low), int(high), prior="log-uniform" if p.log else "uniform", name=p.path)
        return Integer(0, (int(high) - int(low)) // p.step, name=p.path)  # step index
    return Real(float(low), float(high), prior="log-uniform" if p.log else "uniform", name=p.path)


def _to_skopt(p: Param, stored: Any) -> Any:
    if p.type == "discrete" and p.step != 1:
        return (int(stored) - int(p.bounds()[0])) // p.step
    return stored


def _from_skopt(p: Param, x: Any) -> Any:
    if p.type == "discrete":
        return int(p.bounds()[0]) + int(x) * p.step if p.step != 1 else int(x)
    if p.type == "continuous":
        return float(x)
    return x


class SkoptSampler(AskTellSampler):
    """A subclass names skopt's `base_estimator`: "GP", "GBRT" or "RF". `n_initial` random
    configurations (default: `initial_random(budget)`) come before the model; `acq_func` is the
    acquisition function ("gp_hedge", skopt's default, picks among EI, PI and LCB each step)."""

    base_estimator: ClassVar[str]

    def __init__(
        self,
        space: Space,
        *,
        seed: int | None,
        budget: int,
        n_initial: int | None = None,
        acq_func: str = "gp_hedge",
        constraints_func: ConstraintsFunc | None = None,
    ) -> None:
        super().__init__(space, seed=seed)
        if n_initial is None:
            n_initial = initial_random(budget)
        # The acquisition is maximised over 10,000 random points of the whole space, not by L-BFGS
        # from the best points so far (skopt's default for a GP): with 32 dimensions and a handful
        # of points, L-BFGS stayed next to the seeds and the hybrid stalled near the defaults on
        # some seeds (docs/tune.md, "Measured").
        self.optimizer = Optimizer(
            [_dimension(p) for p in space.params],
            base_estimator=self.base_estimator,
            n_initial_points=max(1, n_initial),
            random_state=seed,
            acq_func=acq_func,
            acq_optimizer="sampling",
        )

    def ask(self, number: int) -> dict[str, Any]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # skopt warns when it proposes a point twice
            x = self.optimizer.ask()
        return {p.path: _from_skopt(p, v) for p, v in zip(self.space.params, x, strict=True)}

    def tell(self, number: int, params: dict[str, Any], value: float) -> None:
        x = [_to_skopt(p, params[p.path]) for p in self.space.params]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.optimizer.tell(x, value)


class GPSampler(SkoptSampler):
    """BO GP: a Gaussian process."""

    base_estimator = "GP"


class GBRTSampler(SkoptSampler):
    """BO GBRT: gradient-boosted regression trees."""

    base_estimator = "GBRT"


class RFSampler(SkoptSampler):
    """BO RF: a random forest."""

    base_estimator = "RF"
