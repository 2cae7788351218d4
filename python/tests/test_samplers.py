"""The contract every registered sampler honours (after Optuna's testing/pytest_samplers.py): built
from the registry with a space, a seed and a budget, it proposes complete configurations inside the
space through an Optuna study's ask/tell, the same seed gives the same trials, and failed trials or
a peer's trials do not stop it. An `AskTellSampler` is also told every completed trial once."""

from __future__ import annotations

from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from tailguard_tune import cli
from tailguard_tune.algorithms import SAMPLERS, AskTellSampler, make_sampler
from tailguard_tune.space import Param, Space

BUDGET = 6  # the hybrid: 3 trials of DDS, then 3 of the GP; skopt: 3 random, then 3 of the model

# One parameter of each kind a space has, and the defaults' configuration inside it.
SPACE = Space(
    [
        Param("a.workers", "discrete", 1, 8),
        Param("a.replicas", "discrete", 2, 10, step=2),
        Param("b.percentile", "continuous", 50.0, 99.5),
        Param("b.timeout", "continuous", 5.0, 500.0, log=True, unit="ms"),
        Param("c.balancer", "categorical", choices=("round-robin", "least-request", {"kind": "peak-ewma"})),
    ]
)
DEFAULTS = {"a.workers": 2, "a.replicas": 4, "b.percentile": 95.0, "b.timeout": 100.0, "c.balancer": "round-robin"}
ASK_TELL = [name for name, cls in SAMPLERS.items() if isinstance(cls, type) and issubclass(cls, AskTellSampler)]


def objective(params: dict[str, Any]) -> float:
    """A bowl in the unit cube, lowest at 0.3 in every coordinate."""
    return sum((u - 0.3) ** 2 for u in SPACE.to_unit(params))


def study_of(name: str, seed: int | None) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = make_sampler(name, SPACE, seed=seed, budget=BUDGET)
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage(), direction="minimize", sampler=sampler)
    study.add_trial(
        optuna.trial.create_trial(
            params=DEFAULTS,
            distributions=SPACE.distributions(),
            value=objective(DEFAULTS),
            user_attrs={"baseline": True},
        )
    )
    return study


def tune(name: str, seed: int | None, fail: frozenset[int] = frozenset()) -> tuple[optuna.Study, list[dict[str, Any]]]:
    """The tuner's loop: `BUDGET` trials asked and told; the asks numbered in `fail` fail."""
    study = study_of(name, seed)
    asked = []
    for i in range(BUDGET):
        trial = study.ask(SPACE.distributions())
        asked.append(dict(trial.params))
        if i in fail:
            study.tell(trial, state=TrialState.FAIL)
        else:
            study.tell(trial, objective(trial.params))
    return study, asked


def test_the_cli_offers_exactly_the_registered_samplers():
    assert ASK_TELL == ["sa", "dds", "pso", "bo-gp", "bo-gbrt", "bo-rf", "hybrid"]
    (algo,) = [a for a in cli.parser()._actions if a.dest == "algo"]
    assert algo.choices == list(SAMPLERS)
    with pytest.raises(ValueError, match=r"--algo 'simplex': expected one of random, sa, dds, .*, hybrid"):
        make_sampler("simplex", SPACE, seed=0, budget=BUDGET)


@pytest.mark.parametrize("name", SAMPLERS)
def test_every_trial_is_a_complete_configuration_inside_the_space(name):
    _, asked = tune(name, seed=0)
    distributions = SPACE.distributions()
    for params in asked:
        assert set(params) == set(distributions)
        for path, value in params.items():
            dist = distributions[path]
            assert dist._contains(dist.to_internal_repr(value)), f"{name}: {path} = {value!r} outside {dist}"


@pytest.mark.parametrize("name", SAMPLERS)
def test_the_same_seed_gives_the_same_trials_and_another_seed_others(name):
    _, first = tune(name, seed=1)
    _, again = tune(name, seed=1)
    _, other = tune(name, seed=2)
    assert first == again
    assert first != other


@pytest.mark.parametrize("name", SAMPLERS)
def test_failed_trials_and_a_peers_trials_do_not_stop_it(name):
    study, _ = tune(name, seed=3, fail=frozenset({0, 2, 3}))
    # A peer's finished trial arrives between two asks; the sampler goes on proposing.
    peer = {**DEFAULTS, "a.workers": 7}
    study.add_trial(optuna.trial.create_trial(params=peer, distributions=SPACE.distributions(), value=0.01))
    trial = study.ask(SPACE.distributions())
    study.tell(trial, objective(trial.params))
    states = [t.state for t in study.trials]
    assert states.count(TrialState.FAIL) == 3 and states.count(TrialState.COMPLETE) == 1 + 3 + 1 + 1
    assert set(trial.params) == set(SPACE.names())


@pytest.mark.parametrize("name", ASK_TELL)
def test_an_ask_tell_sampler_is_told_every_completed_trial_once_before_its_next_ask(name, monkeypatch):
    study = study_of(name, seed=0)
    sampler = study.sampler
    assert isinstance(sampler, AskTellSampler)
    told: list[int] = []
    tell = sampler.tell

    def recording_tell(number: int, params: dict[str, Any], value: float) -> None:
        told.append(number)
        tell(number, params, value)

    monkeypatch.setattr(sampler, "tell", recording_tell)
    for i in range(4):
        trial = study.ask(SPACE.distributions())
        if i == 1:
            study.tell(trial, state=TrialState.FAIL)
        else:
            study.tell(trial, objective(trial.params))
    # Asking trial 4 told the defaults (0) and trials 1, 3; trial 2 failed; trial 4 is not told yet.
    assert told == [0, 1, 3]


def test_an_ask_tell_sampler_without_ask_or_tell_cannot_be_built():
    class AskOnly(AskTellSampler):
        def ask(self, number: int) -> dict[str, Any]:
            return {}

    with pytest.raises(TypeError, match=r"abstract method '?tell"):
        AskOnly(SPACE, seed=0)  # type: ignore[abstract]
