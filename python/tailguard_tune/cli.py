"""`tailguard-tune`: argument parsing only; the work is in study.run."""

from __future__ import annotations

import argparse
import sys

from . import experiment, space
from .algorithms import SAMPLERS
from .evaluate import EvaluationError, Objective, Runner, find_tailguard
from .reduce import METHODS, TraceError
from .study import Settings, default_study_name, run


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tailguard-tune",
        description="Tune an experiment file's parameters for the lowest tail latency (config-tuning.txt).",
    )
    p.add_argument("file", help="the experiment file (YAML)")
    p.add_argument("--space", required=True, help="the space file: parameters by path, with ranges")
    p.add_argument("--algo", required=True, choices=list(SAMPLERS), help="the optimisation algorithm")
    p.add_argument("--budget", required=True, type=int, help="configurations to evaluate (the defaults not counted)")
    p.add_argument(
        "--backend", default="sim", choices=("sim", "lab"), help="run with `tailguard sim` or `tailguard lab run`"
    )
    p.add_argument("--seed", type=int, default=0, help="the algorithm's seed (default 0)")
    p.add_argument("--sim-seed", type=int, help="seed of every run (default: the file's seed); the same for all trials")
    p.add_argument("--quick", action="store_true", help="run the file's quick overrides (shorter runs)")
    p.add_argument("--objective", default="p95", help="p95 (default), p99, mean, p50, ... or pNN from the CDF")
    p.add_argument(
        "--run",
        action="append",
        default=[],
        metavar="SCENARIO/VARIANT",
        help="the run(s) forming the objective (mean over them; * matches any); default: the first run",
    )
    p.add_argument(
        "--storage", help="Optuna storage URL (default: SQLite in --out); a PostgreSQL URL lets machines share a study"
    )
    p.add_argument("--study-name", help="the study's name in the storage (default: EXPERIMENT-ALGO-REDUCE-seedS)")
    p.add_argument("--reduce", default="none", choices=METHODS, help="dimensionality reduction from traces")
    p.add_argument("--reduce-top", type=int, default=5, help="services critical-path+variability keeps (default 5)")
    p.add_argument("--traces", help="Jaeger JSON traces to reduce with (default: run the defaults once with --traces)")
    p.add_argument("--out", help="output directory (default: tune-out/STUDY)")
    p.add_argument("--tailguard", help="the tailguard binary (default: on PATH, else target/release/tailguard)")
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="runs per evaluation with seeds S, S+1, ... (their mean is the objective; for the lab's noise)",
    )
    p.add_argument("--timeout", type=float, default=600.0, help="seconds one run may take (default 600)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.budget < 1:
            raise ValueError(f"--budget {args.budget}: expected at least 1")
        if args.repeats < 1:
            raise ValueError(f"--repeats {args.repeats}: expected at least 1")
        if args.reduce_top < 1:
            raise ValueError(f"--reduce-top {args.reduce_top}: expected at least 1")
        if not args.timeout > 0:
            raise ValueError(f"--timeout {args.timeout}: expected a number of seconds above 0")
        doc = experiment.load(args.file)
        sp = space.load(args.space, doc)
        objective = Objective(args.objective, tuple(args.run))
        runner = Runner(
            find_tailguard(args.tailguard), args.backend, args.sim_seed, args.quick, args.timeout, args.repeats
        )
        settings = Settings(
            file=args.file,
            space=sp,
            algo=args.algo,
            budget=args.budget,
            runner=runner,
            objective=objective,
            seed=args.seed,
            storage=args.storage,
            study_name=args.study_name,
            reduce=args.reduce,
            traces=args.traces,
            reduce_top=args.reduce_top,
        )
        settings.out = args.out or f"tune-out/{args.study_name or default_study_name(settings, doc)}"
        outcome = run(settings)
    except (ValueError, EvaluationError, TraceError) as e:
        print(f"tailguard-tune: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # an output directory that cannot be made or written, say
        print(f"tailguard-tune: {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return 1
    print(
        f"best {objective.stat}: {outcome.best_value:.3f} ms, defaults {outcome.baseline:.3f} ms: "
        f"{100 * outcome.improvement:.1f}% lower, tuning {len(outcome.space)} of {len(sp)} parameters"
    )
    top = list(outcome.importance.items())[:5]
    if top:
        print("most important (fANOVA): " + ", ".join(f"{k} {v:.2f}" for k, v in top))
    print(f"wrote {settings.out}/best.yaml, history.csv, convergence.png, importance.json, summary.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
