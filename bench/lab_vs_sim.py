"""The table of bench/lab-vs-sim.sh: each lab run's p50 and p99 as ratios to the simulator's run of
the same scenario and variant, both success rates, and whether the run is within the parity
bounds (docs/lab.md, "How close it comes").

    python3 bench/lab_vs_sim.py SIM_JSON LAB_JSON [SEED_JSON...]
    python3 bench/lab_vs_sim.py --calibration LAB_JSON   # the calibration it ran under, as JSON

SEED_JSON: the simulator's runs of the same file at other seeds. Each row then also says whether
the lab's p50 and p99 are within their bounds of the simulator's spread over those seeds (from
the lowest less the bound to the highest plus it): one minute of a heavy tail (examples/
hedging.yaml's unhedged stores) or of 250 ms steps (peers.yaml's 40x10) moves from seed to seed
by more than the bounds, so a miss within the spread is the run's draw, not the model. The
bounds against the lab's own seed, and the exit status, are unchanged.


Exits 1 when any lab run is out of bounds (the last column says which), and 2 when the two
documents cannot be compared: a lab run the simulator did not run, or runs of different lengths
or seeds (a ratio between a 20 s and a 60 s run, or two seeds, says nothing about parity).
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from typing import Any

P50_BOUND = 0.05  # the lab's p50 within ±5 % of the simulator's
P99_BOUND = 0.10  # its p99 within ±10 %
SUCCESS_BOUND_PP = 0.5  # its success rate within ±0.5 percentage point
# The same sending window on both sides. `duration_s` may count a little past it: the simulator's
# by milliseconds (60.0127 s for examples/peers.yaml's 60 s), the lab's in a closed loop until its
# last request ended, which the load generator allows 30 s (63.1-67.8 s in peers.yaml's 40x10).
# A 20 s run against a 60 s one is refused either way round.
DURATION_TOLERANCE = 0.10
REQUEST_LIMIT_S = 30.0


def same_window(sim_s: float, lab_s: float) -> bool:
    return (1 - DURATION_TOLERANCE) * sim_s <= lab_s <= (1 + DURATION_TOLERANCE) * sim_s + REQUEST_LIMIT_S


Run = dict[str, Any]


class Incomparable(Exception):
    """The two documents do not hold the same runs: no ratio between them means anything."""


@dataclass
class Spread:
    """The simulator's p50 and p99 of one scenario and variant over several seeds."""

    seeds: int
    p50: tuple[float, float]  # lowest, highest
    p99: tuple[float, float]

    def outside(self, p50: float, p99: float) -> list[str]:
        """Which of a lab run's `p50` and `p99` lie outside the spread widened by their bounds (from
        the lowest less the bound to the highest plus it)."""
        checks = (
            ("p50", (1 - P50_BOUND) * self.p50[0] <= p50 <= (1 + P50_BOUND) * self.p50[1]),
            ("p99", (1 - P99_BOUND) * self.p99[0] <= p99 <= (1 + P99_BOUND) * self.p99[1]),
        )
        return [name for name, ok in checks if not ok]

    def __str__(self) -> str:
        return (
            f"{self.seeds} seeds: p50 {self.p50[0]:.1f}-{self.p50[1]:.1f}, p99 {self.p99[0]:.1f}-{self.p99[1]:.1f}"
        )


def spreads(sims: list[dict[str, Any]]) -> dict[tuple[str, str], Spread]:
    """Each scenario and variant's spread over the documents `sims` (one seed each)."""
    latencies: dict[tuple[str, str], list[dict[str, float]]] = {}
    for sim in sims:
        for r in sim["runs"]:
            latencies.setdefault((r["scenario"], r["variant"]), []).append(r["latency_ms"])
    return {
        key: Spread(
            len(ls),
            (min(l["p50"] for l in ls), max(l["p50"] for l in ls)),
            (min(l["p99"] for l in ls), max(l["p99"] for l in ls)),
        )
        for key, ls in latencies.items()
    }


@dataclass
class Row:
    """One lab run against the simulator's."""

    scenario: str
    variant: str  # with the peer's name for a peer sidecar, e.g. "haproxy [haproxy]"
    sim_p50: float
    lab_p50: float
    sim_p99: float
    lab_p99: float
    sim_success: float  # fractions, as in the results JSON
    lab_success: float
    spread: Spread | None = None  # the simulator's over other seeds, when given

    @property
    def p50_ratio(self) -> float:
        return ratio(self.lab_p50, self.sim_p50)

    @property
    def p99_ratio(self) -> float:
        return ratio(self.lab_p99, self.sim_p99)

    @property
    def success_diff_pp(self) -> float:
        return 100 * (self.lab_success - self.sim_success)

    def missed(self) -> list[str]:
        """The bounds this run misses, in the table's order (a NaN ratio misses its bound)."""
        checks = (
            ("p50", abs(self.p50_ratio - 1) <= P50_BOUND),
            ("p99", abs(self.p99_ratio - 1) <= P99_BOUND),
            ("success", abs(self.success_diff_pp) <= SUCCESS_BOUND_PP),
        )
        return [name for name, ok in checks if not ok]


def ratio(lab: float, sim: float) -> float:
    return lab / sim if sim else math.nan


def compare(sim: dict[str, Any], lab: dict[str, Any], seeds: list[dict[str, Any]] | None = None) -> list[Row]:
    """A row per lab run, in the lab's order, with the simulator's spread over the documents
    `seeds` if given. Raises `Incomparable` when the documents' seeds differ, when a lab run has no
    simulator run, or when the two measured different durations."""
    spread = spreads(seeds) if seeds else {}
    if sim.get("seed") != lab.get("seed"):
        raise Incomparable(f"the simulator ran seed {sim.get('seed')}, the lab seed {lab.get('seed')}")
    by_key = {(r["scenario"], r["variant"]): r for r in sim["runs"]}
    rows = []
    for r in lab["runs"]:
        key = (r["scenario"], r["variant"])
        s = by_key.get(key)
        if s is None:
            raise Incomparable(f"{key[0]} / {key[1]}: the lab ran it, the simulator did not")
        if not same_window(s["duration_s"], r["duration_s"]):
            raise Incomparable(
                f"{key[0]} / {key[1]}: the simulator measured {s['duration_s']} s, the lab {r['duration_s']} s "
                "(give both sides the same duration: the file's own, or its `quick` one)"
            )
        variant = r["variant"] + (f" [{r['sidecar']}]" if r.get("sidecar") else "")
        rows.append(
            Row(
                r["scenario"],
                variant,
                s["latency_ms"]["p50"],
                r["latency_ms"]["p50"],
                s["latency_ms"]["p99"],
                r["latency_ms"]["p99"],
                s["success_rate"],
                r["success_rate"],
                spread.get(key),
            )
        )
    return rows


def table(rows: list[Row]) -> str:
    lines = [
        f"{'scenario':15} {'variant':19} {'sim p50':>9} {'lab p50':>9} {'ratio':>6} {'sim p99':>9} {'lab p99':>9} "
        f"{'ratio':>6} {'sim ok':>7} {'lab ok':>7} {'diff':>6}  within"
    ]
    for r in rows:
        missed = r.missed()
        lines.append(
            f"{r.scenario:15} {r.variant:19} {r.sim_p50:9.1f} {r.lab_p50:9.1f} {r.p50_ratio:6.3f} "
            f"{r.sim_p99:9.1f} {r.lab_p99:9.1f} {r.p99_ratio:6.3f} "
            f"{100 * r.sim_success:6.2f}% {100 * r.lab_success:6.2f}% {r.success_diff_pp:+6.2f}  "
            f"{'NO: ' + ', '.join(missed) if missed else 'yes'}"
        )
        if r.spread:
            outside = r.spread.outside(r.lab_p50, r.lab_p99)
            verdict = "NO: " + ", ".join(outside) if outside else "yes"
            lines.append(f"{'':35} the simulator over {r.spread}; within the bounds of it: {verdict}")
    lines.append(
        f"bounds: p50 ratio within ±{P50_BOUND:.0%}, p99 ratio within ±{P99_BOUND:.0%}, "
        f"success within ±{SUCCESS_BOUND_PP:g} percentage point"
    )
    return "\n".join(lines)


def calibration_line(sim: dict[str, Any]) -> str:
    """What the simulator charged for the lab's hops (docs/lab.md, "Calibration")."""
    c = sim.get("calibration")
    if not c:
        return "calibration: none (the simulator charged no sidecar hops)"
    return f"calibration: {c['host']} at {c['measured']}, load average {c['load_average'][0]:.2f}-{c['load_average'][1]:.2f}"


def load(path: str) -> Any:
    with open(path) as f:
        return json.load(f)


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[1] == "--calibration":
        with open(argv[2]) as f:
            recorded = json.load(f).get("calibration")
        if not recorded:
            return 1
        print(json.dumps(recorded))
        return 0
    if len(argv) < 3:
        print("usage: lab_vs_sim.py SIM_JSON LAB_JSON [SEED_JSON...]", file=sys.stderr)
        return 2
    sim, lab, *seeds = (load(path) for path in argv[1:])
    try:
        rows = compare(sim, lab, seeds)
    except Incomparable as e:
        print(f"error: cannot compare {argv[1]} with {argv[2]}: {e}", file=sys.stderr)
        return 2
    print(table(rows))
    print(calibration_line(sim))
    print(f"lab results: {argv[2]}")
    return 1 if any(r.missed() for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
