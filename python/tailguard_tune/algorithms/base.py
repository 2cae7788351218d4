"""The interface every algorithm implements: an Optuna sampler, so trials of any algorithm are
asked, told and stored through an Optuna study (and its storage: SQLite, or PostgreSQL shared by
several machines).

Algorithms that Optuna implements are its samplers as they are. Algorithms from other libraries
(scikit-optimize, nevergrad) and our own (DDS, SA) are ask/tell optimizers over the whole
configuration; `AskTellSampler` adapts them: each new trial asks the optimizer for a complete
configuration (Optuna's "relative" sampling), and before asking, every finished trial the
optimizer has not yet seen is told to it, its own or another worker's.
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from ..space import Space


class AskTellSampler(optuna.samplers.BaseSampler):
    """Adapts an ask/tell optimizer over `space` to Optuna's sampler interface."""

    def __init__(self, space: Space, seed: int | None) -> None:
        self.space = space
        self.seed = seed
        self._told: set[int] = set()
        self._fallback = optuna.samplers.RandomSampler(seed=seed)

    # -- what a subclass provides -------------------------------------------------------------
    def ask(self, number: int) -> dict[str, Any]:
        """The next configuration to evaluate, as stored values by path; `number` is the trial's."""
        raise NotImplementedError

    def tell(self, number: int, params: dict[str, Any], value: float) -> None:
        """The objective of a finished trial (one this optimizer asked for, or any other)."""
        raise NotImplementedError

    # -- Optuna's sampler interface -----------------------------------------------------------
    def infer_relative_search_space(self, study, trial) -> dict:
        return self.space.distributions()

    def sample_relative(self, study, trial: FrozenTrial, search_space: dict) -> dict[str, Any]:
        if not search_space:
            return {}
        self._catch_up(study)
        return self.ask(trial.number)

    def sample_independent(self, study, trial, param_name, param_distribution):
        # Only reached for a parameter outside the space; never in the tuner's own loop.
        return self._fallback.sample_independent(study, trial, param_name, param_distribution)

    def reseed_rng(self) -> None:  # the tuner runs one sampler per process; keep the seeded stream
        pass

    def _catch_up(self, study) -> None:
        names = set(self.space.names())
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if t.number in self._told:
                continue
            self._told.add(t.number)
            if set(t.params) == names and t.value is not None:
                self.tell(t.number, dict(t.params), float(t.value))
