"""bench/lab_vs_sim.py, the table of bench/lab-vs-sim.sh: the parity bounds, and the documents it
refuses to compare (different seeds, durations, or a lab run the simulator did not run)."""

import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
_spec = importlib.util.spec_from_file_location("lab_vs_sim", os.path.join(ROOT, "bench", "lab_vs_sim.py"))
assert _spec is not None and _spec.loader is not None
lab_vs_sim = importlib.util.module_from_spec(_spec)
sys.modules["lab_vs_sim"] = lab_vs_sim  # the dataclass looks its module up there
_spec.loader.exec_module(lab_vs_sim)


def run(scenario, variant, p50, p99, success, duration=60.0, sidecar=None):
    r = {
        "scenario": scenario,
        "variant": variant,
        "duration_s": duration,
        "success_rate": success,
        "latency_ms": {"p50": p50, "p99": p99},
    }
    if sidecar:
        r["sidecar"] = sidecar
    return r


def doc(*runs, seed=19):
    return {"seed": seed, "runs": list(runs)}


def test_each_bound_is_checked_at_its_edge():
    sim = doc(run("s", "a", 100.0, 200.0, 1.0), run("s", "b", 100.0, 200.0, 1.0), run("s", "c", 100.0, 200.0, 1.0))
    lab = doc(
        run("s", "a", 104.9, 219.9, 0.9951),  # every ratio just within its bound
        run("s", "b", 105.1, 220.2, 0.994),  # every one just past it
        run("s", "c", 94.0, 179.0, 1.0),  # too fast is no match either
    )
    a, b, c = lab_vs_sim.compare(sim, lab)
    assert a.missed() == []
    assert b.missed() == ["p50", "p99", "success"]
    assert c.missed() == ["p50", "p99"]
    assert b.p99_ratio == pytest.approx(1.101)
    assert b.success_diff_pp == pytest.approx(-0.6)


def test_a_simulator_latency_of_zero_misses_rather_than_divides():
    (row,) = lab_vs_sim.compare(doc(run("s", "a", 0.0, 0.0, 0.0)), doc(run("s", "a", 5.0, 9.0, 0.0)))
    assert math.isnan(row.p50_ratio)
    assert row.missed() == ["p50", "p99"]


def test_rows_follow_the_lab_and_label_peers():
    sim = doc(run("s", "nginx", 10.0, 20.0, 1.0), run("s", "a", 10.0, 20.0, 1.0), run("t", "a", 1.0, 2.0, 1.0))
    lab = doc(run("s", "a", 10.0, 20.0, 1.0), run("s", "nginx", 10.0, 20.0, 1.0, sidecar="nginx"))
    rows = lab_vs_sim.compare(sim, lab)
    assert [(r.scenario, r.variant) for r in rows] == [("s", "a"), ("s", "nginx [nginx]")]
    assert "nginx [nginx]" in lab_vs_sim.table(rows)


def test_either_side_may_count_a_little_past_the_window():
    sim = doc(run("s", "a", 1, 2, 1, duration=60.0127), run("s", "b", 1, 2, 1, duration=60.0))
    lab = doc(run("s", "a", 1, 2, 1), run("s", "b", 1, 2, 1, duration=67.8))  # b: a closed loop's last request
    assert [r.missed() for r in lab_vs_sim.compare(sim, lab)] == [[], []]


@pytest.mark.parametrize(
    ("sim", "lab", "message"),
    [
        (doc(run("s", "a", 1, 2, 1)), doc(run("s", "a", 1, 2, 1), seed=20), "seed 19, the lab seed 20"),
        (doc(run("s", "a", 1, 2, 1)), doc(run("s", "b", 1, 2, 1)), "s / b: the lab ran it, the simulator did not"),
        (doc(run("s", "a", 1, 2, 1)), doc(run("s", "a", 1, 2, 1, duration=20.0)), "measured 60.0 s, the lab 20.0 s"),
        (doc(run("s", "a", 1, 2, 1, duration=20.0)), doc(run("s", "a", 1, 2, 1)), "measured 20.0 s, the lab 60.0 s"),
    ],
)
def test_documents_that_cannot_be_compared_are_refused(sim, lab, message):
    with pytest.raises(lab_vs_sim.Incomparable, match=message):
        lab_vs_sim.compare(sim, lab)


def test_main_exits_1_out_of_bounds_and_2_when_incomparable(tmp_path, capsys):
    sim, ok, slow, other_seed = (tmp_path / n for n in ("sim.json", "ok.json", "slow.json", "seed.json"))
    sim.write_text(json.dumps(doc(run("s", "a", 10.0, 20.0, 1.0))))
    ok.write_text(json.dumps(doc(run("s", "a", 10.4, 21.0, 1.0))))
    slow.write_text(json.dumps(doc(run("s", "a", 10.4, 30.0, 1.0))))
    other_seed.write_text(json.dumps(doc(run("s", "a", 10.0, 20.0, 1.0), seed=3)))
    assert lab_vs_sim.main(["lab_vs_sim.py", str(sim), str(ok)]) == 0
    assert lab_vs_sim.main(["lab_vs_sim.py", str(sim), str(slow)]) == 1
    assert "NO: p99" in capsys.readouterr().out
    assert lab_vs_sim.main(["lab_vs_sim.py", str(sim), str(other_seed)]) == 2
    assert "cannot compare" in capsys.readouterr().err


def test_the_calibration_a_lab_ran_under_is_handed_on_and_named_in_the_table(tmp_path, capsys):
    calibration = {
        "host": "h",
        "measured": "2026-11-28T13:00:00Z",
        "load_average": [1.5, 2.25],
        "seconds": 10.0,
        "sidecars": {},
    }
    recorded, bare = tmp_path / "recorded.json", tmp_path / "bare.json"
    recorded.write_text(json.dumps({**doc(run("s", "a", 10.0, 20.0, 1.0)), "calibration": calibration}))
    bare.write_text(json.dumps(doc(run("s", "a", 10.0, 20.0, 1.0))))
    assert lab_vs_sim.main(["lab_vs_sim.py", "--calibration", str(recorded)]) == 0
    assert json.loads(capsys.readouterr().out) == calibration
    assert lab_vs_sim.main(["lab_vs_sim.py", "--calibration", str(bare)]) == 1
    assert lab_vs_sim.main(["lab_vs_sim.py", str(recorded), str(bare)]) == 0
    assert "calibration: h at 2026-11-28T13:00:00Z, load average 1.50-2.25" in capsys.readouterr().out


@pytest.mark.parametrize("option", ["--duration", "--warmup=5s", "--quick"])
def test_the_script_refuses_what_the_simulator_cannot_follow(option):
    # Refused while parsing the arguments: nothing is built or started.
    done = subprocess.run(
        ["bash", os.path.join(ROOT, "bench", "lab-vs-sim.sh"), "examples/balancing.yaml", option, "30s"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert f"error: {option}: the simulator cannot follow it" in done.stderr


def test_the_spread_over_seeds_is_read_within_the_bounds_and_leaves_the_verdict_alone():
    sim = doc(run("s", "a", 100.0, 200.0, 1.0), run("s", "b", 100.0, 200.0, 1.0))
    seeds = [
        doc(run("s", "a", 98.0, 150.0, 1.0), run("s", "b", 100.0, 200.0, 1.0), seed=1),
        doc(run("s", "a", 102.0, 400.0, 1.0), run("s", "b", 100.0, 200.0, 1.0), seed=2),
    ]
    lab = doc(
        run("s", "a", 107.0, 440.0, 1.0),  # past the bounds of seed 19's run, within those of the spread
        run("s", "b", 106.0, 179.0, 1.0),  # past both
    )
    a, b = lab_vs_sim.compare(sim, lab, seeds)
    assert a.spread == lab_vs_sim.Spread(2, (98.0, 102.0), (150.0, 400.0))
    assert a.missed() == ["p50", "p99"] and a.spread.outside(a.lab_p50, a.lab_p99) == []
    assert b.spread is not None and b.spread.outside(b.lab_p50, b.lab_p99) == ["p50", "p99"]
    text = lab_vs_sim.table([a, b])
    assert "2 seeds: p50 98.0-102.0, p99 150.0-400.0; within the bounds of it: yes" in text
    assert "within the bounds of it: NO: p50, p99" in text
    # Without seeds, no spread and the table as before.
    (row, _) = lab_vs_sim.compare(sim, lab)
    assert row.spread is None and "seeds" not in lab_vs_sim.table([row])
