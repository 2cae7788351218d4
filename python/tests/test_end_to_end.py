"""A small study over a tiny file with the real `tailguard sim` (run `make build` first)."""

import os
import subprocess
import sys

import yaml

from tailguard_tune import cli, experiment, space
from tailguard_tune.evaluate import Objective, Runner, find_tailguard

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
TINY = os.path.join(FIXTURES, "tiny.yaml")
SPACE = os.path.join(FIXTURES, "tiny-space.yaml")


def tune(tmp_path, name, *extra):
    out = tmp_path / name
    code = cli.main(
        [TINY, "--space", SPACE, "--algo", "tpe", "--budget", "4", "--seed", "5", "--out", str(out), *extra]
    )
    assert code == 0
    return out


def test_a_budget_4_study_with_the_simulator_is_reproducible_and_its_best_file_runs(tmp_path, capsys):
    first = tune(tmp_path, "a")
    second = tune(tmp_path, "b")
    a = yaml.safe_load((first / "summary.json").read_text())
    b = yaml.safe_load((second / "summary.json").read_text())
    assert (a["defaults"], a["best"], a["best_params"], a["remeasured"]) == (
        b["defaults"],
        b["best"],
        b["best_params"],
        b["remeasured"],
    )
    assert a["best_success"] == 1.0 and a["defaults_success"] == 1.0 and a["best_goodput"] > 250
    printed = capsys.readouterr().out
    assert "re-measured on 5 fresh seeds" in printed and "tuning 6 of 6 parameters" in printed

    # The trials ran with seeds 3 (the file's, for the defaults), 4, 5, ...; the re-measurement
    # with fresh ones, the same for the defaults and each candidate.
    history = (first / "history.csv").read_text()
    assert ",3," in history and ",4," in history
    fresh = a["remeasured"]["seeds"]
    assert fresh == [3 + 1_000_000 + i for i in range(5)]

    # The best file is a valid experiment that reproduces its re-measurement.
    runner = Runner(find_tailguard())
    measured = runner.measure(experiment.load(first / "best.yaml"), str(first / "best.yaml"), Objective("p95"), fresh)
    assert [s.value for s in measured.scores] == a["remeasured"]["candidates"][str(a["best_trial"])]["values"]


def test_the_cli_reports_bad_input_by_name(tmp_path, capsys):
    bad = tmp_path / "space.yaml"
    bad.write_text("parameters:\n  - { path: services.dbb.workers, type: discrete, range: [1, 4] }\n")
    assert cli.main([TINY, "--space", str(bad), "--algo", "dds", "--budget", "2", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "services.dbb.workers" in err and "services has no key 'dbb'" in err
    assert cli.main([TINY, "--space", SPACE, "--algo", "dds", "--budget", "0"]) == 2
    assert "--budget 0" in capsys.readouterr().err
    assert cli.main([TINY, "--space", SPACE, "--algo", "dds", "--budget", "2", "--tailguard", "/nonexistent"]) == 2
    assert "not an executable" in capsys.readouterr().err
    for flag, value in (("--timeout", "0"), ("--reduce-top", "0"), ("--repeats", "0")):
        assert cli.main([TINY, "--space", SPACE, "--algo", "dds", "--budget", "2", flag, value]) == 2
        assert f"{flag} 0" in capsys.readouterr().err
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    assert cli.main([TINY, "--space", SPACE, "--algo", "dds", "--budget", "2", "--out", str(blocked / "out")]) == 1
    assert f"{blocked / 'out'}: Not a directory" in capsys.readouterr().err


def test_a_storage_that_cannot_be_opened_is_named_without_its_password(tmp_path, capsys):
    base = [TINY, "--space", SPACE, "--algo", "dds", "--budget", "2", "--out", str(tmp_path / "o")]
    assert cli.main([*base, "--storage", "nosuchdb://somewhere/x"]) == 2
    err = capsys.readouterr().err
    assert "--storage nosuchdb://somewhere/x: not a storage URL Optuna can open" in err
    assert "Traceback" not in err
    # Nothing listens on port 1 of the loopback: refused at once, given up after the retries.
    assert cli.main([*base, "--storage", "postgresql://tuner:secret@127.0.0.1:1/study"]) == 2
    err = capsys.readouterr().err
    assert "--storage postgresql://tuner:***@127.0.0.1:1/study: cannot open the study:" in err
    assert "secret" not in err and "Traceback" not in err


def test_a_run_the_simulator_refuses_is_a_failed_trial_with_its_message(tmp_path):
    doc = experiment.load(TINY)
    sp = space.parse("parameters: [{path: services.db.replicas, type: discrete, range: [0, 1]}]", doc)
    runner = Runner(find_tailguard())
    try:
        runner.measure(experiment.with_values(doc, sp.to_yaml({"services.db.replicas": 0})), TINY, Objective(), [None])
    except Exception as e:  # the message is what is checked
        assert "services.db.replicas" in str(e) and "failed (exit" in str(e)
    else:
        raise AssertionError("replicas: 0 should be refused")


def test_the_console_script_is_installed():
    script = os.path.join(os.path.dirname(sys.executable), "tailguard-tune")
    done = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and "--reduce" in done.stdout


def test_a_measurement_on_several_seeds_averages_them(tmp_path):
    doc = experiment.load(TINY)
    tg = find_tailguard()
    single = [Runner(tg, seed=s).measure(doc, TINY, Objective("p95"), [None]).value for s in (3, 4)]
    both = Runner(tg).measure(doc, TINY, Objective("p95"), [3, 4])
    assert single[0] != single[1] and both.value == sum(single) / 2
    assert both.success == 1.0 and 250 < both.goodput < 350  # the file's 300 requests/s
