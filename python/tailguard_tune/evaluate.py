"""One evaluation of the objective: write the candidate experiment file, run `tailguard sim` (or
`tailguard lab run`) on it, and read the statistic the user chose from the results JSON
(docs/results.md)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
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
    """Which runs of the results and which statistic of their latency the tuner minimises.

    `stat` is one of STATS or `pNN` / `pNN.N` (read from the run's `cdf`); `runs` selects
    `scenario/variant` pairs (either side may be `*`); the objective is the mean over the selected
    runs (by default the first run)."""

    stat: str = "p95"
    runs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.stat not in STATS and not re.fullmatch(r"p\d{1,2}(\.\d+)?", self.stat):
            raise ValueError(f"--objective {self.stat!r}: expected one of {', '.join(STATS)} or pNN such as p97.5")
        for sel in self.runs:
            if sel.count("/") != 1:
                raise ValueError(f"--run {sel!r}: expected SCENARIO/VARIANT (either may be *)")

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
        lat = run.get("latency_ms") or {}
        if self.stat in lat:
            return float(lat[self.stat])
        if not self.stat.startswith("p"):
            raise EvaluationError(f"the results' latency_ms has no {self.stat!r}")
        return percentile_from_cdf(run, float(self.stat[1:]))

    def value(self, results: dict[str, Any]) -> float:
        chosen = self.select(results.get("runs") or [])
        return sum(self.of_run(r) for r in chosen) / len(chosen)


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
    repeats: int = 1  # runs per evaluation, seeds S, S+1, ...; the objective is their mean

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

    def evaluate(self, doc: dict[str, Any], source: str, objective: Objective) -> tuple[float, dict[str, Any]]:
        """The objective's value for `doc` (the mean over `repeats` runs with consecutive seeds,
        from --sim-seed or the file's), and the results of the last run."""
        if self.repeats <= 1:
            seeds: list[int | None] = [None]
        else:
            first = self.seed if self.seed is not None else int(doc.get("seed") or 1)
            seeds = [first + i for i in range(self.repeats)]
        values = []
        for seed in seeds:
            with tempfile.TemporaryDirectory(prefix="tailguard-tune-") as tmp:
                results = self.run(doc, source, tmp, seed=seed)
            values.append(objective.value(results))
        return sum(values) / len(values), results
