"""Ctrl-C and resuming: the outputs of the trials done, the interrupted trial not charged, a dead
process's RUNNING trial failed, and a resumed sampler that continues rather than replays."""

import csv
import json
import os
import socket
import subprocess

import optuna
import pytest

from tailguard_tune import cli
from tailguard_tune.algorithms import HybridSampler
from tailguard_tune.study import run

from .test_algorithms import TINY, FakeRunner, settings

SPACE = os.path.join(os.path.dirname(TINY), "tiny-space.yaml")


class InterruptedRunner(FakeRunner):
    """Ctrl-C arrives during its `at`-th run (the defaults' is the first)."""

    def __init__(self, at, *args, **kwargs):
        super().__init__()
        self.at = at

    def run(self, doc, source, workdir, traces=None, seed=None):
        if self.calls + 1 == self.at:
            self.calls += 1
            raise KeyboardInterrupt
        return super().run(doc, source, workdir, traces, seed)


def tuned(outcome):
    return [t for t in outcome.study.get_trials() if not t.user_attrs.get("baseline")]


@pytest.mark.parametrize("algo", ["tpe", "dds", "hybrid", "sa", "bo-gp"])
def test_an_interrupted_study_writes_its_outputs_and_resumes_without_replaying(tmp_path, algo):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    # The defaults and one trial, then Ctrl-C during the second.
    first = run(settings(tmp_path, algo, budget=7, runner=InterruptedRunner(3), storage=storage), say=lambda _: None)
    assert first.interrupted and first.best is not None
    out = tmp_path / algo
    with open(out / "history.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["state"] for r in rows] == ["COMPLETE"] * 2 + ["FAIL"] and rows[-1]["note"] == "interrupted"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] and summary["trials_complete"] == 1 and (out / "best.yaml").exists()

    runner = FakeRunner()
    second = run(settings(tmp_path, algo, budget=7, runner=runner, storage=storage), say=lambda _: None)
    trials = tuned(second)
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    # The interrupted trial is not charged: 7 complete trials, 6 of them run now.
    assert len(complete) == 7 and runner.calls == 6 and not second.interrupted
    configurations = [tuple(sorted(t.params.items())) for t in complete]
    assert configurations[1] != configurations[0], "the resumed sampler replayed its first trial"
    if algo != "dds":  # DDS's small steps revisit points of this small discrete space even uninterrupted
        assert len(set(configurations)) == 7, "a resumed sampler proposed a configuration again"
    if algo == "hybrid":
        # Budget 7 over 6 parameters: 3 DDS trials, one before the interruption, two after; then the GP.
        assert isinstance(second.study.sampler, HybridSampler) and second.study.sampler.dds_trials == 3
        assert second.study.sampler.bo is not None and second.study.sampler.finished == 6


def test_a_trial_left_running_by_a_dead_process_is_failed_and_not_charged(tmp_path):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    s = settings(tmp_path, "tpe", budget=4, storage=storage)
    run(s, say=lambda _: None)
    gone = subprocess.Popen(["true"])
    gone.wait()
    study = optuna.load_study(study_name="tiny-tpe-none-seed1", storage=storage)
    left = study.ask()  # as a process killed with SIGKILL leaves it
    left.set_user_attr("host", socket.gethostname())
    left.set_user_attr("pid", gone.pid)
    peer = study.ask()  # another host's: it may still finish
    peer.set_user_attr("host", "elsewhere")
    peer.set_user_attr("pid", 1)
    said: list[str] = []
    s = settings(tmp_path, "tpe", budget=5, storage=storage)
    outcome = run(s, say=said.append)
    states = {t.number: (t.state.name, t.user_attrs.get("stale")) for t in outcome.study.get_trials()}
    assert states[left.number] == ("FAIL", True) and states[peer.number] == ("RUNNING", None)
    assert any(f"trial {left.number}: left RUNNING by process {gone.pid}" in line for line in said)
    # Budget 5: the 4 done and the peer's running trial; the stale one is not charged, so none was added.
    assert s.runner.calls == 0


def test_ctrl_c_prints_one_line_and_leaves_the_outputs(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli, "Runner", lambda *args: InterruptedRunner(3))
    monkeypatch.setattr(cli, "find_tailguard", lambda explicit: "fake")
    out = tmp_path / "o"
    code = cli.main([TINY, "--space", SPACE, "--algo", "tpe", "--budget", "4", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 130 and "Traceback" not in err
    assert err.strip().splitlines() == [
        f"tailguard-tune: interrupted after 1 of 4 trials; outputs written to {out}; "
        "run the same command again to continue"
    ]
    assert {"best.yaml", "history.csv", "summary.json", "convergence.png", "study.db"} <= set(os.listdir(out))
    # Interrupted while measuring the defaults: nothing to write, still one line.
    monkeypatch.setattr(cli, "Runner", lambda *args: InterruptedRunner(1))
    code = cli.main([TINY, "--space", SPACE, "--algo", "tpe", "--budget", "4", "--out", str(tmp_path / "p")])
    assert code == 130 and capsys.readouterr().err.count("\n") == 1
