"""Finds examples/timeouts-tails.yaml's `fixed-best` timeout for each scenario with tailguard-tune.

For each scenario: a copy of the file with that scenario alone and the `fixed-best` variant, the
scenario's own timeout value removed, so the tuner's one parameter (front's timeout value, log
scale) decides it; `--objective p99` over all requests (failures count), trial seeds from 1000 and
re-measurement on fresh seeds (1000000 on), none of which the checks use (101-105) nor the file's.

    make python && cargo build --release --locked -p tailguard
    .venv/bin/python scripts/tune-timeouts-tails.py [OUT_DIR]
"""

import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
PATH = "services.front.calls.0.policy.timeout.value"


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "tune-out/timeouts-tails")
    out.mkdir(parents=True, exist_ok=True)
    doc = yaml.safe_load((ROOT / "examples/timeouts-tails.yaml").read_text())
    for scenario in doc["scenarios"]:
        name = scenario["name"]
        single = dict(doc)
        single["variants"] = [v for v in doc["variants"] if v["name"] == "fixed-best"]
        single["scenarios"] = [{"name": name, "set": {k: v for k, v in scenario["set"].items() if k != PATH}}]
        single.pop("quick", None)
        experiment = out / f"{name}.yaml"
        experiment.write_text(yaml.safe_dump(single, sort_keys=False))
        low, high = (0.5, 40) if name == "fast-lossy" else (5, 400)
        space = out / f"{name}-space.yaml"
        space.write_text(
            yaml.safe_dump(
                {"parameters": [{"path": PATH, "type": "continuous", "range": [low, high], "log": True, "unit": "ms"}]}
            )
        )
        subprocess.run(
            [
                str(ROOT / ".venv/bin/tailguard-tune"),
                str(experiment),
                "--space",
                str(space),
                "--algo",
                "tpe",
                "--budget",
                "14",
                "--objective",
                "p99",
                "--sim-seed",
                "1000",
                "--remeasure",
                "3",
                "--remeasure-seeds",
                "3",
                "--out",
                str(out / name),
                "--tailguard",
                str(ROOT / "target/release/tailguard"),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        summary = json.loads((out / name / "summary.json").read_text())
        print(name, json.dumps(summary.get("best", summary))[:300], flush=True)


if __name__ == "__main__":
    main()
