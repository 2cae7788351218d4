"""One evaluation of the objective: write the candidate experiment file, run `tailguard sim` (or
`tailguard lab run`) on it, and read the statistic the user chose from the results JSON
(docs/results.md)."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import experiment

STATS = ("p10", "p50", "p90", "p95", "p99", "p999", "max", "mean")


class EvaluationError(RuntimeError):
    """A run that failed or whose results do not hold the objective."""


def find_tailguard(explicit: str | None = None) -> str:
    """The `tailguard` binary: the one given, else on PATH, else this repository's target/release."""
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise EvaluationError(f"--tailguard {explicit}: not an executable file")
        return explicit
    found = shutil.which("tailguard")
    if found:
        return found
    repo = Path(__file__).resolve().parents[2]
    local = repo / "target" / "release" / "tailguard"
    if os.access(local, os.X_OK):
        return str(local)
    raise EvaluationError(
        "tailguard not found on PATH nor at target/release/tailguard: run `make build` or pass --tailguard"
    )


@dataclass(frozen=True)
class Objective:
    """Which runs of the results and which statistic of their latency the tuner minimises, and the
    success rate a configuration must reach to count.

    `stat` is one of STATS or `pNN` / `pNN.N`; `runs` selects `scenario/variant` pairs (either side
    may be `*`); the objective is the mean over the selected runs (by default the first run).

    A percentile is taken over **all** requests, failures counted as slower than any success: with
    a success rate s, the p95 of all requests is the successes' percentile 95 / s (read from the
    run's `cdf`, interpolated linearly between its points), and infinite when s < 0.95. `mean` and
    `max` are the successes' (the results hold no latency for a failure). A configuration is
    **feasible** when its success rate (the lowest over the selected runs) is at least
    `min_success` and its statistic is finite."""

    stat: str = "p95"
    runs: tuple[str, ...] = ()
    min_success: float = 0.999

    def __post_init__(self) -> None:
        if self.stat not in STATS and not re.fullmatch(r"p\d{1,2}(\.\d+)?", self.stat):
            raise ValueError(f"--objective {self.stat!r}: expected one of {', '.join(STATS)} or pNN such as p97.5")
        for sel in self.runs:
            if sel.count("/") != 1:
                raise ValueError(f"--run {sel!r}: expected SCENARIO/VARIANT (either may be *)")
        if not 0.0 <= self.min_success <= 1.0:
            raise ValueError(f"--min-success {100 * self.min_success:g}: expected a percentage from 0 to 100")

    def select(self, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not runs:
            raise EvaluationError("the results hold no runs")
        if not self.runs:
            return runs[:1]
        chosen = []
        for sel in self.runs:
            scenario, variant = sel.split("/")
            match = [r for r in runs if scenario in ("*", r.get("scenario")) and variant in ("*", r.get("variant"))]
            if not match:
                have = ", ".join(f"{r.get('scenario')}/{r.get('variant')}" for r in runs)
                raise EvaluationError(f"--run {sel}: no such run; the results have: {have}")
            chosen += [r for r in match if r not in chosen]
        return chosen

    def of_run(self, run: dict[str, Any]) -> float:
        """The statistic of one run, over all its requests (see the class doc)."""
        lat = run.get("latency_ms") or {}
        success = success_rate(run)
        if self.stat in ("mean", "max"):
            if self.stat not in lat:
                raise EvaluationError(f"the results' latency_ms has no {self.stat!r}")
            return float(lat[self.stat]) if success > 0 else math.inf
        pct = 99.9 if self.stat == "p999" else float(self.stat[1:])
        if success >= 1.0:
            return float(lat[self.stat]) if self.stat in lat else percentile_from_cdf(run, pct)
        shifted = pct / 100.0 / success if success > 0 else math.inf
        if shifted > 1.0:
            return math.inf
        if run.get("cdf"):
            return interpolate_cdf(run["cdf"], shifted)
        # No cdf: the lowest reported percentile at or above the shifted one (never optimistic).
        levels = [(0.1, "p10"), (0.5, "p50"), (0.9, "p90"), (0.95, "p95"), (0.99, "p99"), (0.999, "p999")]
        for level, key in levels:
            if level >= shifted and key in lat:
                return float(lat[key])
        if "max" in lat:
            return float(lat["max"])
        raise EvaluationError(f"the objective {self.stat} with failures needs the run's `cdf` or `latency_ms`")

    def measure(self, results: dict[str, Any]) -> RunScore:
        """The objective, success rate and goodput of one results document (its selected runs)."""
        chosen = self.select(results.get("runs") or [])
        values = [self.of_run(r) for r in chosen]
        slowest = max((float((r.get("latency_ms") or {}).get("max") or 0.0) for r in chosen), default=0.0)
        return RunScore(
            value=sum(values) / len(values),
            success=min(success_rate(r) for r in chosen),
            goodput=sum(goodput(r) for r in chosen) / len(chosen),
            slowest_ms=slowest,
            cdf=tuple((float(x), float(f)) for x, f in chosen[0].get("cdf") or ()),
        )

    def value(self, results: dict[str, Any]) -> float:
        return self.measure(results).value

    def feasible(self, value: float, success: float) -> bool:
        return math.isfinite(value) and success >= self.min_success - 1e-12

    def constraint(self, value: float, success: float) -> float:
        """Optuna's constraint value, at most 0 when feasible: how far the success rate falls short."""
        shortfall = self.min_success - success
        return shortfall if self.feasible(value, success) else max(shortfall, 1e-3)


def success_rate(run: dict[str, Any]) -> float:
    """succeeded / requests (exact), else the rounded `success_rate`; a run without requests has none."""
    requests, succeeded = run.get("requests"), run.get("succeeded")
    if isinstance(requests, int) and isinstance(succeeded, int):
        return succeeded / requests if requests > 0 else 0.0
    if "success_rate" in run:
        return float(run["success_rate"])
    return 1.0  # results without counts (hand-made ones): nothing says a request failed


def goodput(run: dict[str, Any]) -> float:
    """Successful requests per second: the run's `goodput` when the results have it, else
    succeeded / duration_s, else `throughput_rps` (the same quantity in the simulator and the lab)."""
    if "goodput" in run:
        return float(run["goodput"])
    succeeded, duration = run.get("succeeded"), run.get("duration_s")
    if isinstance(succeeded, int) and isinstance(duration, (int, float)) and duration > 0:
        return succeeded / float(duration)
    return float(run.get("throughput_rps") or 0.0)


@dataclass(frozen=True)
class RunScore:
    """What one results document says about a configuration."""

    value: float  # the objective, ms; infinite when too few requests succeeded for the percentile
    success: float  # the success rate, 0 to 1 (the lowest over the selected runs)
    goodput: float  # successful requests per second (the mean over the selected runs)
    slowest_ms: float = 0.0  # the slowest successful request
    cdf: tuple[tuple[float, float], ...] = ()  # the first selected run's `cdf` of successes, for the report


@dataclass(frozen=True)
class Measurement:
    """One configuration measured on one or more seeds: each seed's score, and their summary (the
    mean objective, infinite if any seed's is; the mean success rate and goodput)."""

    seeds: tuple[int | None, ...]
    scores: tuple[RunScore, ...]

    @property
    def value(self) -> float:
        values = [s.value for s in self.scores]
        return sum(values) / len(values) if all(math.isfinite(v) for v in values) else math.inf

    @property
    def success(self) -> float:
        return sum(s.success for s in self.scores) / len(self.scores)

    @property
    def goodput(self) -> float:
        return sum(s.goodput for s in self.scores) / len(self.scores)

    @property
    def slowest_ms(self) -> float:
        return max(s.slowest_ms for s in self.scores)


def percentile_from_cdf(run: dict[str, Any], pct: float) -> float:
    """The latency at `pct` percent from a run's `cdf` ([latency ms, fraction] points): the first
    point whose fraction reaches it, as the histogram's percentiles are reported."""
    cdf = run.get("cdf")
    if not cdf:
        raise EvaluationError(f"the objective p{pct:g} needs the run's `cdf`, which the results do not have")
    target = pct / 100.0
    for latency, fraction in cdf:
        if fraction >= target - 1e-12:
            return float(latency)
    return float(cdf[-1][0])


def interpolate_cdf(cdf: list[list[float]], fraction: float) -> float:
    """The latency at `fraction` (0 to 1) of a `cdf`, linear between the two points around it."""
    prev_latency, prev_fraction = float(cdf[0][0]), 0.0
    for latency, f in cdf:
        if f >= fraction - 1e-12:
            if f <= prev_fraction:
                return float(latency)
            share = (fraction - prev_fraction) / (f - prev_fraction)
            return prev_latency + max(0.0, min(1.0, share)) * (float(latency) - prev_latency)
        prev_latency, prev_fraction = float(latency), float(f)
    return float(cdf[-1][0])


FRESH_SEEDS = 1_000_000  # fresh seeds start this far from the base: no trial ever used them


@dataclass(frozen=True)
class Seeds:
    """The simulator seeds of each measurement. Trial n runs with seeds base + n·repeats + i
    (i < repeats), so no two trials share one (`vary`); with `vary` off every trial uses the same
    `repeats` seeds from `base` (common random numbers: trials differ only by their configuration,
    but the search can overfit that one draw of randomness). Re-measurements use `fresh` seeds, the
    same ones for every candidate and the defaults, so their comparison is paired."""

    base: int
    repeats: int = 1
    vary: bool = True

    def trial(self, number: int) -> list[int]:
        first = self.base + (number * self.repeats if self.vary else 0)
        return [first + i for i in range(self.repeats)]

    def fresh(self, count: int) -> list[int]:
        return [self.base + FRESH_SEEDS + i for i in range(count)]


def _gist(output: str) -> str:
    """The part of a failed command's output that says why: from its last line starting with
    "error" (a few lines), else its last lines."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    starts = [i for i, line in enumerate(lines) if line.lower().startswith(("error", "tailguard:"))]
    chosen = lines[starts[-1] : starts[-1] + 4] if starts else lines[-5:]
    return " | ".join(chosen)


@dataclass
class Runner:
    """Runs one experiment file with a backend and returns its results document."""

    tailguard: str
    backend: str = "sim"
    seed: int | None = None
    quick: bool = False
    timeout_s: float = 600.0
    trace_sample: int | None = None  # traces kept by a run with --traces (None: the backend's default, 200)

    def command(
        self, file: str, workdir: str, traces: str | None = None, seed: int | None = None
    ) -> tuple[list[str], str]:
        """The command line for `file` and the results JSON it writes."""
        if self.backend == "sim":
            out = os.path.join(workdir, "results.json")
            cmd = [self.tailguard, "sim", file, "--json", out]
        elif self.backend == "lab":
            # The lab writes DIR/results.json (and its processes' logs) under --out (docs/lab.md).
            lab_dir = os.path.join(workdir, "lab")
            out = os.path.join(lab_dir, "results.json")
            cmd = [self.tailguard, "lab", "run", file, "--out", lab_dir]
        else:
            raise ValueError(f"--backend {self.backend!r}: expected sim or lab")
        seed = self.seed if seed is None else seed
        if seed is not None:
            cmd += ["--seed", str(seed)]
        if self.quick:
            cmd.append("--quick")
        if traces:
            cmd += ["--traces", traces]
            if self.trace_sample is not None:
                cmd += ["--trace-sample", str(self.trace_sample)]
        return cmd, out

    def run(
        self, doc: dict[str, Any], source: str, workdir: str, traces: str | None = None, seed: int | None = None
    ) -> dict[str, Any]:
        """Writes `doc` to `workdir`, runs it and returns the parsed results."""
        file = os.path.join(workdir, "experiment.yaml")
        experiment.write(doc, file, source=source)
        cmd, out = self.command(file, workdir, traces, seed)
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise EvaluationError(f"{' '.join(cmd)}: no answer within {self.timeout_s:g} s") from None
        if done.returncode != 0:
            raise EvaluationError(
                f"{' '.join(cmd[:3])} failed (exit {done.returncode}): {_gist(done.stderr or done.stdout)}"
            )
        try:
            with open(out, encoding="utf-8") as f:
                results = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise EvaluationError(f"{out}: cannot read the results JSON: {e}") from None
        if not isinstance(results, dict):
            raise EvaluationError(f"{out}: expected a JSON object of results, got {type(results).__name__}")
        return results

    def measure(
        self, doc: dict[str, Any], source: str, objective: Objective, seeds: Sequence[int | None]
    ) -> Measurement:
        """`doc` run once per seed (None: --sim-seed or the file's), scored by `objective`."""
        scores = []
        for seed in seeds:
            with tempfile.TemporaryDirectory(prefix="tailguard-tune-") as tmp:
                results = self.run(doc, source, tmp, seed=seed)
            scores.append(objective.measure(results))
        return Measurement(tuple(seeds), tuple(scores))
