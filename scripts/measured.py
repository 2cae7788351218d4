#!/usr/bin/env python3
"""Writes the simulator's tables in docs/measured.md and README.md from the commands that produce them.

Every table between `<!-- generated: NAME -->` and `<!-- end: NAME -->` is rebuilt from the
results JSON of the `tailguard sim` (or `tailguard demo --sim`) command printed above it, so a
number in the documents is always what the command prints (the simulator is deterministic by
seed). `make test` runs this with `--check`, which fails when a table differs from what the
commands give now. Each block lives in exactly one of the documents.

    scripts/measured.py [--check] [--bin target/release/tailguard]
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

Run = dict  # one entry of the results JSON's "runs"


def ms(x: float) -> str:
    """Latencies: one decimal, as the simulator's table prints them."""
    return f"{x:.1f}"


def pct(x: float) -> str:
    """A rate in [0, 1] as a percentage with two decimals."""
    return f"{100 * x:.2f} %"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


Column = tuple[str, Callable[[Run], str]]


def latency(stat: str) -> Column:
    return (f"{'p99.9' if stat == 'p999' else stat} ms", lambda r: ms(r["latency_ms"][stat]))


SUCCESS: Column = ("success", lambda r: pct(r["success_rate"]))
EXTRA_LOAD: Column = ("extra load", lambda r: f"{r['extra_load']:.3f}")
GOODPUT: Column = ("goodput req/s", lambda r: f"{r['throughput_rps']:.1f}")


def run_table(runs: list[Run], columns: list[Column]) -> str:
    """One row per run: its variant, then each column's value."""
    header = ["variant"] + [name for name, _ in columns]
    return table(header, [[r["variant"]] + [value(r) for _, value in columns] for r in runs])


def runs_of(results: dict, scenario: str) -> dict[str, Run]:
    return {r["variant"]: r for r in results["runs"] if r["scenario"] == scenario}


def bloc(results: dict) -> str:
    spread: Column = ("p90−p10 ms", lambda r: ms(r["latency_ms"]["p90"] - r["latency_ms"]["p10"]))
    columns = [*map(latency, ("p10", "p50", "p90", "p99")), spread, latency("max"), SUCCESS, EXTRA_LOAD]
    out = [
        f"**{scenario}**\n\n" + run_table(list(runs_of(results, scenario).values()), columns)
        for scenario in ("1x10", "40x10")
    ]
    big, small = runs_of(results, "40x10"), runs_of(results, "1x10")
    spread = {s: r["least-request"]["latency_ms"] for s, r in (("40x10", big), ("1x10", small))}
    widening = (spread["40x10"]["p90"] - spread["40x10"]["p10"]) / (spread["1x10"]["p90"] - spread["1x10"]["p10"])
    p99 = {v: r["latency_ms"]["p99"] for v, r in big.items()}
    out.append(
        f"At 40x10 bloc's p99 is {p99['bloc'] / p99['least-request']:.3f} × least-request's and "
        f"{p99['bloc'] / p99['oracle']:.3f} × the oracle's; least-request's p90−p10 widens "
        f"{widening:.1f} × from 1x10 to 40x10."
    )
    return "\n\n".join(out)


def timeouts(results: dict) -> str:
    variants = list(dict.fromkeys(r["variant"] for r in results["runs"]))
    scenarios = list(dict.fromkeys(r["scenario"] for r in results["runs"]))
    rows = []
    for scenario in scenarios:
        runs = runs_of(results, scenario)
        rows.append(
            [scenario]
            + [
                f"{runs[v]['timeouts_pct']:.2f} / {runs[v]['closeness_pct']:.1f} / {runs[v]['time_fraction']:.4f}"
                for v in variants
            ]
        )
    tail = []
    for scenario in scenarios:
        runs = runs_of(results, scenario)
        tail.append(
            [scenario]
            + [
                f"{ms(runs[v]['latency_ms']['p99'])} / {ms(runs[v]['latency_ms']['max'])} / "
                f"{pct(runs[v]['success_rate'])}"
                for v in variants
            ]
        )
    return (
        "Timeouts % / closeness % / time fraction (adaptive-timeouts.txt §5.2):\n\n"
        + table(["scenario", *variants], rows)
        + "\n\np99 ms / max ms / success, as the user sees the request:\n\n"
        + table(["scenario", *variants], tail)
    )


def latency_table(results: dict, scenario: str = "default") -> str:
    columns = [*map(latency, ("p50", "p90", "p99", "p999", "max")), SUCCESS, GOODPUT, EXTRA_LOAD]
    return run_table(list(runs_of(results, scenario).values()), columns)


def p95_table(results: dict) -> str:
    return run_table(results["runs"], [*map(latency, ("p50", "p95", "p99")), SUCCESS])


def speculative(results: dict) -> str:
    runs = runs_of(results, "default")
    none, spec = runs["none"]["latency_ms"], runs["speculative"]["latency_ms"]
    return latency_table(results) + (
        f"\n\nspeculative's p99.9 is {spec['p999'] / none['p999']:.2f} × no hedging's and its p99 "
        f"{spec['p99'] / none['p99']:.2f} ×, at {runs['speculative']['extra_load']:.3f} extra load."
    )


def cancellation(results: dict) -> str:
    """The store's busy time against the unhedged run's plus the work of the hedges that finished."""
    runs = runs_of(results, "default")
    work = {v: next(w for w in r["work"] if w["service"] == "store") for v, r in runs.items()}
    base = work["unhedged"]["busy_s"]

    def ratio(r: Run) -> str:
        w = work[r["variant"]]
        return f"{w['busy_s'] / (base + w['extra_s']):.3f}"

    columns = [
        latency("p99"),
        EXTRA_LOAD,
        ("store busy s", lambda r: f"{work[r['variant']]['busy_s']:.1f}"),
        ("finished hedges s", lambda r: f"{work[r['variant']]['extra_s']:.1f}"),
        ("busy / (unhedged + finished hedges)", ratio),
    ]
    on, off = work["hedged"]["busy_s"], work["hedged-no-cancel"]["busy_s"]
    utilisation = base / (runs["unhedged"]["duration_s"] * 8)
    return run_table(list(runs.values()), columns) + (
        f"\n\nThe store's 8 workers are {100 * utilisation:.1f} % busy unhedged. Without cancellation the "
        f"hedged store works {off - on:.1f} s ({100 * (off / on - 1):.1f} %) more than with it."
    )


def peers(results: dict) -> str:
    """The demo's comparison: p50 to p99.9 and success per scenario and sidecar, then tailguard's
    p99 against the better peer's in each scenario."""
    columns = [*map(latency, ("p50", "p99", "p999")), SUCCESS]
    scenarios = list(dict.fromkeys(r["scenario"] for r in results["runs"]))
    header = ["scenario", "sidecar"] + [name for name, _ in columns]
    rows = [[r["scenario"], r["variant"]] + [value(r) for _, value in columns] for r in results["runs"]]
    ratios = []
    for scenario in scenarios:
        runs = runs_of(results, scenario)
        peer = min(r["latency_ms"]["p99"] for v, r in runs.items() if v != "tailguard")
        ratios.append(f"{runs['tailguard']['latency_ms']['p99'] / peer:.2f} × in {scenario}")
    return table(header, rows) + "\n\ntailguard's p99 against the better peer's: " + ", ".join(ratios) + "."


@dataclass(frozen=True)
class Block:
    """One generated table: the command that gives its numbers and how to lay them out."""

    name: str
    args: tuple[str, ...]
    render: Callable[[dict], str]
    # (index of the report's plot, file under docs/img): a picture of the run for the README,
    # written with the tables but not compared by --check (a plot's bytes are no number of record).
    figure: tuple[int, str] | None = None


BLOCKS = [
    Block("bloc", ("sim", "examples/bloc.yaml"), bloc),
    Block("timeouts", ("sim", "examples/timeouts.yaml"), timeouts),
    Block("speculative", ("sim", "examples/speculative.yaml"), speculative, figure=(1, "speculative-tail.svg")),
    Block("cancellation", ("sim", "bench/cancellation.yaml"), cancellation),
    Block("failures", ("sim", "examples/failures.yaml"), latency_table),
    Block("case-for-timeouts", ("sim", "examples/case-for-timeouts.yaml"), latency_table),
    Block("triangle", ("sim", "examples/triangle.yaml"), latency_table),
    Block("sim-app", ("sim", "examples/tune/sim-app.yaml"), p95_table),
    Block("demo", ("demo", "--sim", "--full"), peers),
]


def render(block: Block, binary: Path, figures: bool) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        out, report = Path(tmp) / "results.json", Path(tmp) / "report.html"
        extra = ["--report", str(report)] if figures and block.figure else []
        if block.args[0] == "demo":  # the demo writes its folder, which goes with the others
            extra += ["--out", str(Path(tmp) / "demo")]
        subprocess.run(
            [str(binary), *block.args, "--json", str(out), *extra],
            cwd=ROOT,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        results = json.loads(out.read_text())
        if extra and block.figure:
            index, name = block.figure
            svg = re.findall(r"<svg.*?</svg>", report.read_text(), re.DOTALL)[index]
            (ROOT / "docs/img").mkdir(exist_ok=True)
            (ROOT / "docs/img" / name).write_text(svg + "\n")
    command = "tailguard " + " ".join(block.args)
    return f"`{command}` (seed {results['seed']}):\n\n{block.render(results)}"


def pattern(block: Block) -> re.Pattern[str]:
    name = re.escape(block.name)
    return re.compile(rf"(<!-- generated: {name} -->\n).*?(<!-- end: {name} -->)", re.DOTALL)


def rebuild(texts: dict[Path, str], binary: Path, figures: bool) -> dict[Path, str]:
    """Every document's generated blocks, rebuilt; each block must be in exactly one document."""
    texts = dict(texts)
    for block in BLOCKS:
        holders = [doc for doc, text in texts.items() if pattern(block).search(text)]
        if len(holders) != 1:
            where = ", ".join(str(d) for d in holders) or "none of " + ", ".join(str(d) for d in texts)
            marker = f"<!-- generated: {block.name} -->"
            sys.exit(f"measured.py: '{marker}' must be in exactly one document; it is in {where}")
        body = render(block, binary, figures)
        doc = holders[0]
        texts[doc] = pattern(block).sub(lambda m, body=body: m.group(1) + body + "\n" + m.group(2), texts[doc])
    return texts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a table differs from what the commands give")
    parser.add_argument("--bin", type=Path, default=ROOT / "target/release/tailguard")
    args = parser.parse_args()
    if not args.bin.exists():
        sys.exit(f"measured.py: {args.bin} not found: run `make build` first")
    docs = [ROOT / "docs/measured.md", ROOT / "README.md"]
    old = {doc: doc.read_text() for doc in docs}
    new = rebuild(old, args.bin, figures=not args.check)
    stale = [doc for doc in docs if old[doc] != new[doc]]
    if args.check:
        for doc in stale:
            diff = difflib.unified_diff(
                old[doc].splitlines(), new[doc].splitlines(), str(doc), "what the commands print now", lineterm=""
            )
            print("\n".join(diff))
            print(f"{doc} is out of date: run scripts/measured.py", file=sys.stderr)
        if stale:
            return 1
        print(f"{', '.join(str(d) for d in docs)}: every generated table matches its command")
        return 0
    for doc in stale:
        doc.write_text(new[doc])
    return 0


if __name__ == "__main__":
    sys.exit(main())
