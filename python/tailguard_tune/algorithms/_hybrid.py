"""The hybrid algorithm of config-tuning.txt §IV-B1: DDS for a fixed number of iterations, then
Bayesian optimisation with a Gaussian process whose initial samples are DDS's best configurations
(instead of random ones)."""

from __future__ import annotations

import math
from typing import Any

from ..space import Space
from ._base import AskTellSampler, ConstraintsFunc
from ._dds import DDSSampler
from ._skopt import GPSampler


class HybridSampler(AskTellSampler):
    """`dds_trials` trials of DDS, then GP-BO seeded with the best `seeds` points DDS saw (the
    defaults included).

    By default DDS gets half the budget, but no more than one trial per two dimensions, the rule
    of TPE's random start (`tpe_startup`): a small space needs fewer steps before the model, and
    the GP makes better use of the rest. The GP chooses by its lower confidence bound (LCB) rather
    than skopt's "gp_hedge": DDS's points sit close together around the defaults, EI and PI (two
    of gp_hedge's three) keep refining that neighbourhood, and LCB's bonus for uncertainty sends
    the model's first steps away from it. Measured on examples/tune (docs/tune.md), budget 15,
    seeds 0-19: the 6-parameter reduced space went from 56.3 to 57.1 % (worst seed 52.2 to
    56.7 %), all 32 parameters from 56.8 to 57.05 %."""

    def __init__(
        self,
        space: Space,
        *,
        seed: int | None,
        budget: int,
        dds_trials: int | None = None,
        seeds: int = 5,
        constraints_func: ConstraintsFunc | None = None,
    ) -> None:
        super().__init__(space, seed=seed)
        default = max(2, min(budget // 2, math.ceil(len(space) / 2)))
        self.budget = budget
        self.dds_trials = dds_trials if dds_trials is not None else default
        self.dds = DDSSampler(space, seed=seed, budget=self.dds_trials)
        self.seeds = seeds
        self.bo: GPSampler | None = None
        self.history: list[tuple[float, int, dict[str, Any]]] = []

    def ask(self, number: int) -> dict[str, Any]:
        # The phase follows the study's finished trials, not this process's asks: a resumed study
        # whose DDS phase is over goes on with the GP.
        if self.finished < self.dds_trials:
            self.dds.finished = self.finished
            return self.dds.ask(number)
        if self.bo is None:
            bo_budget = self.budget - self.dds_trials
            self.bo = GPSampler(self.space, seed=self.seed, budget=bo_budget, n_initial=1, acq_func="LCB")
            # The DDS phase is the defaults and the first `dds_trials` trials; a resumed study may
            # already hold GP trials after them, which the GP is told as well.
            by_number = sorted(self.history, key=lambda h: h[1])
            dds_phase, later = by_number[: self.dds_trials + 1], by_number[self.dds_trials + 1 :]
            for value, n, params in sorted(dds_phase, key=lambda h: (h[0], h[1]))[: self.seeds] + later:
                self.bo.tell(n, params, value)
        return self.bo.ask(number)

    def tell(self, number: int, params: dict[str, Any], value: float) -> None:
        if self.bo is None:
            self.history.append((value, number, params))
            self.dds.tell(number, params, value)
        else:
            self.bo.tell(number, params, value)
