"""The table of bench/tune-heldout.sh: every study's best.yaml, the defaults and the hand-found
floor measured on 5 seeds no study used (the p95 of all requests, failures counted slowest, as
the tuner scores it), against what each study reported.

    python bench/tune_heldout.py OUT EXPERIMENT FLOOR_VALUES
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml
from tailguard_tune import experiment
from tailguard_tune.evaluate import Measurement, Objective, Runner, find_tailguard

UNSEEN = [
    2_000_000 + i for i in range(5)
]  # the tuner's trials use S + n, its re-measurement S + 10^6 + i


def measure(runner: Runner, doc: dict, source: str) -> Measurement:
    return runner.measure(doc, source, Objective("p95"), UNSEEN)


def main(out: str, source: str, floor_file: str) -> None:
    runner = Runner(find_tailguard(os.environ.get("TAILGUARD")))
    doc = experiment.load(source)
    defaults = measure(runner, doc, source)
    floor = measure(
        runner,
        experiment.with_values(doc, yaml.safe_load(Path(floor_file).read_text())),
        source,
    )
    print(
        f"unseen seeds {UNSEEN[0]}-{UNSEEN[-1]}: defaults p95 {defaults.value:.3f} ms, hand-found floor "
        f"{floor.value:.3f} ms (success {100 * floor.success:.3f} %)"
    )
    print(
        "algo    seed  reported  remeasured-CI      unseen   best-p95  vs-floor  success(trial/unseen)  infeasible-trials"
    )
    by_algo: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for summary_path in sorted(
        Path(out).glob("*/summary.json"),
        key=lambda p: (
            p.parent.name.rsplit("-", 1)[0],
            int(p.parent.name.rsplit("-", 1)[1]),
        ),
    ):
        s = json.loads(summary_path.read_text())
        algo, seed = s["algo"], s["seed"]
        best_path = summary_path.parent / "best.yaml"
        if s["best"] is None or not best_path.exists():
            print(
                f"{algo:7} {seed:4}  no configuration reached --min-success; none reported"
            )
            by_algo[algo].append({"none": 1.0})
            continue
        best = measure(runner, experiment.load(best_path), str(best_path))
        unseen = 1 - best.value / defaults.value
        reported = s["improvement_pct"] / 100
        ci = (s.get("remeasured") or {}).get("improvement_ci95_pct")
        row = {
            "reported": reported,
            "unseen": unseen,
            "gap": best.value / floor.value - 1,
            # The share of the reported improvement that did not carry over (none when it was 0: the
            # defaults were the best feasible configuration found).
            "change": abs(unseen - reported) / reported if reported > 0 else None,
            "success_trial": s["best_success"],
            "success_unseen": min(sc.success for sc in best.scores),
            "infeasible": s["trials_infeasible"],
        }
        by_algo[algo].append(row)
        ci_text = f"{ci[0]:5.1f}-{ci[1]:5.1f} %" if ci else "    -      "
        print(
            f"{algo:7} {seed:4}  {100 * reported:6.1f} %  {ci_text}  {100 * unseen:6.1f} %  {best.value:7.3f}  "
            f"{100 * row['gap']:+6.1f} %  {100 * row['success_trial']:7.3f} / {100 * row['success_unseen']:7.3f} %  "
            f"{row['infeasible']:3.0f}"
        )
    print()
    print(
        "algo    studies  none  mean-reported  mean-unseen  mean-vs-floor  worst-vs-floor  max-|change|  min-success"
    )
    for algo, rows in by_algo.items():
        ok = [r for r in rows if "none" not in r]
        if not ok:
            print(f"{algo:7} {len(rows):7}  {len(rows):4}")
            continue
        print(
            f"{algo:7} {len(rows):7}  {len(rows) - len(ok):4}  "
            f"{100 * statistics.fmean(r['reported'] for r in ok):11.1f} %  "
            f"{100 * statistics.fmean(r['unseen'] for r in ok):9.1f} %  "
            f"{100 * statistics.fmean(r['gap'] for r in ok):+11.1f} %  "
            f"{100 * max(r['gap'] for r in ok):+12.1f} %  "
            f"{100 * max(r['change'] for r in ok if r['change'] is not None):10.1f} %  "
            f"{100 * min(min(r['success_trial'], r['success_unseen']) for r in ok):8.3f} %"
        )


if __name__ == "__main__":
    main(*sys.argv[1:4])
