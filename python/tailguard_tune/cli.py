"""`tailguard-tune`: argument parsing only; the work is in study.run."""

from __future__ import annotations

import argparse
import sys

from . import experiment, output, space
from .algorithms import SAMPLERS
from .evaluate import EvaluationError, Objective, Runner, find_tailguard
from .reduce import METHODS, TraceError
from .study import Outcome, Settings, default_study_name, describe, run


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
    p.add_argument(
        "--sim-seed",
        type=int,
        help="the first simulator seed (default: the file's seed); trial n runs with seed S + n (see --same-seed)",
    )
    p.add_argument(
        "--same-seed", action="store_true", help="every trial runs with the same seed(s) (common random numbers)"
    )
    p.add_argument("--quick", action="store_true", help="run the file's quick overrides (shorter runs)")
    p.add_argument(
        "--objective",
        default="p95",
        help="p95 (default), p99, mean, p50, ... or pNN from the CDF; percentiles of all requests, failures slowest",
    )
    p.add_argument(
        "--min-success",
        type=float,
        default=99.9,
        metavar="PCT",
        help="success rate (%%) a configuration must reach to count (default 99.9); others are infeasible",
    )
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
    p.add_argument(
        "--reduce-coverage",
        type=float,
        default=95.0,
        metavar="PCT",
        help="tail keeps services until they cover PCT %% of the slow requests' excess critical time (default 95)",
    )
    p.add_argument(
        "--trace-sample",
        type=int,
        default=2000,
        metavar="N",
        help="requests traced by the defaults' run for --reduce (default 2000: 200 above the p90)",
    )
    p.add_argument("--traces", help="Jaeger JSON traces to reduce with (default: run the defaults once with --traces)")
    p.add_argument("--out", help="output directory (default: tune-out/STUDY)")
    p.add_argument("--tailguard", help="the tailguard binary (default: on PATH, else target/release/tailguard)")
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="runs per trial, each with its own seed (their mean is the objective; for the lab's noise)",
    )
    p.add_argument(
        "--remeasure",
        type=int,
        default=3,
        metavar="K",
        help="re-measure the K best configurations and the defaults on fresh seeds; the best of them is reported "
        "(default 3; 0: off)",
    )
    p.add_argument(
        "--remeasure-seeds", type=int, default=5, metavar="N", help="fresh seeds of the re-measurement (default 5)"
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
        if args.remeasure < 0:
            raise ValueError(f"--remeasure {args.remeasure}: expected 0 or more")
        if args.remeasure_seeds < 1:
            raise ValueError(f"--remeasure-seeds {args.remeasure_seeds}: expected at least 1")
        if not args.timeout > 0:
            raise ValueError(f"--timeout {args.timeout}: expected a number of seconds above 0")
        doc = experiment.load(args.file)
        sp = space.load(args.space, doc)
        objective = Objective(args.objective, tuple(args.run), round(args.min_success / 100.0, 9))
        if not 0 < args.reduce_coverage <= 100:
            raise ValueError(f"--reduce-coverage {args.reduce_coverage:g}: expected a percentage above 0, at most 100")
        if args.trace_sample < 1:
            raise ValueError(f"--trace-sample {args.trace_sample}: expected at least 1")
        runner = Runner(
            find_tailguard(args.tailguard), args.backend, args.sim_seed, args.quick, args.timeout, args.trace_sample
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
            reduce_coverage=round(args.reduce_coverage / 100.0, 9),
            repeats=args.repeats,
            vary_seeds=not args.same_seed,
            remeasure=args.remeasure,
            remeasure_seeds=args.remeasure_seeds,
        )
        settings.out = args.out or f"tune-out/{args.study_name or default_study_name(settings, doc)}"
        outcome = run(settings)
    except KeyboardInterrupt:
        print("tailguard-tune: interrupted before any trial finished; nothing written", file=sys.stderr)
        return 130
    except (ValueError, EvaluationError, TraceError) as e:
        print(f"tailguard-tune: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # an output directory that cannot be made or written, say
        print(f"tailguard-tune: {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return 1
    report(outcome, settings)
    if outcome.interrupted:
        done = sum(1 for t in outcome.trials if t.state.name == "COMPLETE" and not t.user_attrs.get("baseline"))
        print(
            f"tailguard-tune: interrupted after {done} of {settings.budget} trials; outputs written to "
            f"{settings.out}; run the same command again to continue",
            file=sys.stderr,
        )
        return 130
    return 0 if outcome.best is not None else 3


def report(outcome: Outcome, settings: Settings) -> None:
    """The study's result on the console."""
    objective = settings.objective
    stat = objective.stat
    d = outcome.defaults
    defaults = describe(d["objective_ms"], d["success"], d["goodput"], stat, objective.min_success)
    if outcome.best is None:
        most = max(
            (t for t in outcome.trials if t.state.name == "COMPLETE"),
            key=lambda t: t.user_attrs.get("success", 0.0),
        )
        reason = "none held it on the fresh seeds" if outcome.confirmation is not None else "none reached it"
        print(
            f"no configuration reached --min-success {100 * objective.min_success:g} % ({reason}; the most "
            f"successful, trial {most.number}: {100 * most.user_attrs.get('success', 0.0):.2f} %); "
            f"defaults: {defaults}. best.yaml not written"
        )
    else:
        a = outcome.best.user_attrs
        best = describe(outcome.best_value, a.get("success", 1.0), a.get("goodput", 0.0), stat, objective.min_success)
        print(f"best (trial {outcome.best.number}): {best}; defaults: {defaults}")
        print(
            f"improvement: {output.improvement_text(outcome)}; "
            f"tuning {len(outcome.space)} of {len(settings.space)} parameters"
        )
    imp = output.importance_doc(outcome)
    top = list(outcome.importance.items())[:5]
    if top and imp["trusted"]:
        print(f"most important (fANOVA on ranks, {imp['trials']} trials): " + ", ".join(f"{k} {v:.2f}" for k, v in top))
    elif top:
        print(
            f"importance not shown: {imp['trials']} trials are too few to trust fANOVA over {len(outcome.space)} "
            f"parameters (it needs {imp['trusted_from']}: 2 per parameter, at least 30); "
            "importance.json has it, marked untrusted"
        )
    written = "best.yaml, " if outcome.best is not None else ""
    print(f"wrote {settings.out}/{written}history.csv, convergence.png, importance.json, summary.json, report.html")


if __name__ == "__main__":
    sys.exit(main())
