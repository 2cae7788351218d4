"""The search space: which values of the experiment file the tuner may change, and over what range.

A space file is YAML:

    parameters:
      - path: services.post-storage-mongo.workers      # a path into the experiment file
        type: discrete                                 # continuous | discrete | categorical
        range: [1, 16]
      - path: services.api.calls.0.policy.timeout.value
        type: continuous
        range: [5, 200]
        unit: ms                                       # written as "12.5ms" (durations need a unit)
        log: true                                      # sample on a log scale
      - path: services.api.calls.0.policy.balancer.kind
        type: categorical
        choices: [round-robin, least-request, peak-ewma]

Every path is checked against the experiment file before anything runs, and an error names it.
Each parameter also maps to and from the unit interval [0, 1], the common coordinates of the
algorithms that search a box (DDS, SA, PSO, GA).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import optuna
import yaml

from . import experiment

TYPES = ("continuous", "discrete", "categorical")
_FIELDS = {"path", "type", "range", "choices", "log", "unit", "step", "default"}


class SpaceError(ValueError):
    """A space file that is malformed or names a path the experiment file does not have."""


@dataclass(frozen=True)
class Param:
    """One tunable value of the experiment file."""

    path: str
    type: str
    low: float | None = None
    high: float | None = None
    choices: tuple[Any, ...] = ()
    log: bool = False
    unit: str = ""
    step: int = 1
    default: Any = None

    def bounds(self) -> tuple[float, float]:
        """The range of a continuous or discrete parameter."""
        if self.low is None or self.high is None:
            raise TypeError(f"{self.path}: a {self.type} parameter has no range")
        return self.low, self.high

    def distribution(self) -> optuna.distributions.BaseDistribution:
        """The Optuna distribution the trial stores (categorical values are stored by label)."""
        if self.type == "categorical":
            return optuna.distributions.CategoricalDistribution(self.labels())
        low, high = self.bounds()
        if self.type == "discrete":
            return optuna.distributions.IntDistribution(int(low), int(high), log=self.log, step=self.step)
        return optuna.distributions.FloatDistribution(low, high, log=self.log)

    def labels(self) -> tuple[str, ...]:
        """Categorical choices as strings (Optuna stores only scalars); a scalar choice is its own label."""
        return tuple(
            c if isinstance(c, str) else yaml.safe_dump(c, default_flow_style=True).strip() for c in self.choices
        )

    def to_yaml(self, stored: Any) -> Any:
        """The value written into the experiment file for a value as Optuna stores it."""
        if self.type == "categorical":
            return self.choices[self.labels().index(stored)]
        if self.type == "discrete":
            value: Any = int(stored)
        else:
            low, high = self.bounds()
            value = min(max(float(f"{float(stored):.6g}"), low), high)  # no 0.49999999999999994
        return f"{value:g}{self.unit}" if self.unit else value

    def from_yaml(self, value: Any) -> Any:
        """The stored (Optuna) value of a value found in the experiment file, or None if outside the space."""
        if self.type == "categorical":
            for choice, label in zip(self.choices, self.labels(), strict=True):
                if choice == value:
                    return label
            return None
        if self.unit:
            if not isinstance(value, str) or not value.endswith(self.unit):
                return None
            value = value[: -len(self.unit)]
        try:
            number = float(value)
        except (TypeError, ValueError):
            return None
        low, high = self.bounds()
        if not low <= number <= high:
            return None
        if self.type == "discrete":
            if number != int(number) or (int(number) - int(low)) % self.step:
                return None
            return int(number)
        return number

    def from_unit(self, u: float) -> Any:
        """The stored value at coordinate u in [0, 1]."""
        u = min(max(float(u), 0.0), 1.0)
        if self.type == "categorical":
            return self.labels()[min(int(u * len(self.choices)), len(self.choices) - 1)]
        lo, hi = map(float, self.bounds())
        x = math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo))) if self.log else lo + u * (hi - lo)
        if self.type == "discrete":
            n = round((x - lo) / self.step)
            return int(min(max(int(lo) + n * self.step, int(lo)), int(hi)))
        return min(max(x, lo), hi)

    def to_unit(self, stored: Any) -> float:
        """The coordinate in [0, 1] of a stored value (the middle of a categorical choice's cell)."""
        if self.type == "categorical":
            return (self.labels().index(stored) + 0.5) / len(self.choices)
        lo, hi = map(float, self.bounds())
        x = float(stored)
        if hi == lo:
            return 0.5
        if self.log:
            return (math.log(x) - math.log(lo)) / (math.log(hi) - math.log(lo))
        return (x - lo) / (hi - lo)


@dataclass
class Space:
    """The parameters being tuned, in the space file's order."""

    params: list[Param] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.params)

    def names(self) -> list[str]:
        return [p.path for p in self.params]

    def distributions(self) -> dict[str, optuna.distributions.BaseDistribution]:
        return {p.path: p.distribution() for p in self.params}

    def subset(self, paths: list[str]) -> Space:
        keep = set(paths)
        return Space([p for p in self.params if p.path in keep])

    def to_yaml(self, stored: dict[str, Any]) -> dict[str, Any]:
        """The experiment-file values of a trial's stored parameters."""
        by_path = {p.path: p for p in self.params}
        return {path: by_path[path].to_yaml(v) for path, v in stored.items()}

    def from_unit(self, u: Iterable[float]) -> dict[str, Any]:
        return {p.path: p.from_unit(x) for p, x in zip(self.params, u, strict=True)}

    def to_unit(self, stored: dict[str, Any]) -> list[float]:
        return [p.to_unit(stored[p.path]) for p in self.params]

    def defaults(self, doc: dict[str, Any]) -> dict[str, Any] | None:
        """The stored values of the experiment file as written, or None if one of them lies outside
        the space (or is absent and the space gives no `default`)."""
        out = {}
        for p in self.params:
            value = experiment.get_path(doc, p.path, p.default)
            stored = p.from_yaml(value)
            if stored is None:
                return None
            out[p.path] = stored
        return out


def _number(entry: dict[str, Any], where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpaceError(f"{where}: range: expected numbers, got {value!r}")
    return float(value)


def parse(text: str, doc: dict[str, Any], *, source: str = "space file") -> Space:
    """Parses a space file and checks every path against the experiment document `doc`."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SpaceError(f"{source}: not valid YAML: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("parameters"), list) or not data["parameters"]:
        raise SpaceError(f"{source}: expected a mapping with a non-empty list `parameters`")
    unknown = set(data) - {"parameters", "description"}
    if unknown:
        raise SpaceError(f"{source}: unknown field {sorted(unknown)[0]!r}; expected parameters, description")
    params, seen = [], set()
    for i, entry in enumerate(data["parameters"]):
        where = f"{source}: parameters.{i}"
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            raise SpaceError(f"{where}: expected a mapping with a `path` (a dotted path into the experiment file)")
        path = entry["path"]
        where = f"{where} ({path})"
        bad = set(entry) - _FIELDS
        if bad:
            raise SpaceError(
                f"{where}: unknown field {sorted(bad)[0]!r}; expected one of: {', '.join(sorted(_FIELDS))}"
            )
        if path in seen:
            raise SpaceError(f"{where}: the path appears twice")
        seen.add(path)
        try:
            experiment.check_path(doc, path)
        except experiment.PathError as e:
            raise SpaceError(f"{where}: {e}") from None
        kind = entry.get("type")
        if kind not in TYPES:
            raise SpaceError(f"{where}: type: expected one of {', '.join(TYPES)}, got {kind!r}")
        log, unit, default = bool(entry.get("log", False)), str(entry.get("unit", "")), entry.get("default")
        if kind == "categorical":
            choices = entry.get("choices")
            if not isinstance(choices, list) or len(choices) < 2:
                raise SpaceError(f"{where}: choices: expected a list of at least two values")
            if "range" in entry or log or unit:
                raise SpaceError(f"{where}: a categorical parameter takes `choices`, not range, log or unit")
            params.append(Param(path, kind, choices=tuple(choices), default=default))
            continue
        rng = entry.get("range")
        if not isinstance(rng, list) or len(rng) != 2:
            raise SpaceError(f"{where}: range: expected [low, high]")
        low, high = _number(entry, where, rng[0]), _number(entry, where, rng[1])
        if not low < high:
            raise SpaceError(f"{where}: range: expected low < high, got [{rng[0]}, {rng[1]}]")
        if log and low <= 0:
            raise SpaceError(f"{where}: log: a log scale needs a range above 0")
        step = 1
        if kind == "discrete":
            if low != int(low) or high != int(high):
                raise SpaceError(f"{where}: range: a discrete parameter needs integer bounds")
            step = entry.get("step", 1)
            if not isinstance(step, int) or step < 1 or (log and step != 1):
                raise SpaceError(f"{where}: step: expected an integer ≥ 1 (and 1 with log)")
        elif "step" in entry:
            raise SpaceError(f"{where}: step applies to discrete parameters only")
        params.append(Param(path, kind, low, high, log=log, unit=unit, step=step, default=default))
    return Space(params)


def load(path: str, doc: dict[str, Any]) -> Space:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise SpaceError(f"{path}: cannot read the space file: {e.strerror}") from None
    return parse(text, doc, source=path)
