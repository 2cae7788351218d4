"""Two tuner processes share one study in a real PostgreSQL server (docs/tune.md, "Storage and parallel
workers"): a throwaway server started with initdb + pg_ctl on 127.0.0.1, stopped by pg_ctl (or its
PID) at the end. Skipped only when PostgreSQL's server programs are not installed (`make test` installs
Debian's `postgresql`)."""

import csv
import glob
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from typing import Any

import optuna
import pytest

from tailguard_tune import experiment
from tailguard_tune.evaluate import Objective, Runner, find_tailguard

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
APP = os.path.join(REPO, "examples", "tune", "sim-app.yaml")
SPACE = os.path.join(REPO, "examples", "tune", "sim-space.yaml")
BUDGET = 12


def postgres_bin() -> str | None:
    """The directory of initdb, pg_ctl and postgres: on PATH, else Debian's /usr/lib/postgresql/N/bin
    (the newest N), which Debian does not put on PATH."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return os.path.dirname(os.path.realpath(found))
    dirs = [
        d
        for d in glob.glob("/usr/lib/postgresql/*/bin")
        if all(os.access(f"{d}/{p}", os.X_OK) for p in ("initdb", "pg_ctl"))
    ]
    dirs.sort(key=lambda d: int(re.sub(r"\D", "", d.split("/")[-2]) or 0))
    return dirs[-1] if dirs else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Server:
    """A PostgreSQL server of its own in a temporary directory. initdb refuses to run as root, so
    as root the server runs as the `postgres` user (Debian's package creates it), else `nobody`."""

    def __init__(self, bindir: str) -> None:
        self.bindir = bindir
        self.user = None
        if os.geteuid() == 0:
            for name in ("postgres", "nobody"):
                try:
                    self.user = pwd.getpwnam(name)
                    break
                except KeyError:
                    continue
            if self.user is None:
                pytest.fail("running as root, and neither a postgres nor a nobody user exists to run PostgreSQL as")
        self.dir = tempfile.mkdtemp(prefix="tailguard-pg-")
        if self.user:
            os.chown(self.dir, self.user.pw_uid, self.user.pw_gid)
        self.data = os.path.join(self.dir, "data")
        self.port = free_port()
        self.pid: int | None = None

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        ids: dict[str, Any] = (
            {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []} if self.user else {}
        )
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "HOME": self.dir}
        return subprocess.run(
            [os.path.join(self.bindir, args[0]), *args[1:]],
            cwd=self.dir,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            **ids,
        )

    def start(self) -> None:
        done = self._run("initdb", "-D", self.data, "-U", "tuner", "-A", "trust", "--no-sync", "-E", "UTF8")
        assert done.returncode == 0, f"initdb failed: {done.stderr}"
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir} -c fsync=off"
        done = self._run(
            "pg_ctl", "-D", self.data, "-l", os.path.join(self.dir, "log"), "-o", options, "-w", "-t", "60", "start"
        )
        pidfile = os.path.join(self.data, "postmaster.pid")
        if os.path.exists(pidfile):  # its first line is the postmaster's PID
            with open(pidfile) as f:
                first = f.readline().strip()
            self.pid = int(first) if first.isdigit() else None
        assert done.returncode == 0, f"pg_ctl start failed: {done.stderr}\n{self.log()}"

    def log(self) -> str:
        path = os.path.join(self.dir, "log")
        return open(path).read() if os.path.exists(path) else ""

    def stop(self) -> None:
        """pg_ctl stop; if that fails, the postmaster by its PID; then the directory goes."""
        try:
            if os.path.exists(os.path.join(self.data, "postmaster.pid")):
                done = self._run("pg_ctl", "-D", self.data, "-m", "fast", "-w", "-t", "30", "stop", timeout=60)
                if done.returncode != 0 and self.pid:
                    os.kill(self.pid, signal.SIGQUIT)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def trials_run(stdout: str) -> set[int]:
    """The trial numbers a worker says it ran ("trial N: p95 = ...")."""
    return {int(n) for n in re.findall(r"^trial (\d+): ", stdout, flags=re.M)}


def test_two_worker_processes_share_one_study_in_postgresql(tmp_path):
    bindir = postgres_bin()
    if bindir is None:
        pytest.skip("PostgreSQL's server programs (initdb, pg_ctl) are not installed: apt-get install postgresql")
    import psycopg2  # the driver Optuna's storage uses for postgresql:// URLs (the `postgres` extra)

    server = Server(bindir)
    workers: list[subprocess.Popen[str]] = []
    try:
        server.start()
        done = subprocess.run(
            [os.path.join(bindir, "createdb"), "-h", "127.0.0.1", "-p", str(server.port), "-U", "tuner", "tuning"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        url = f"postgresql://tuner@127.0.0.1:{server.port}/tuning"
        tailguard = find_tailguard()
        for seed in (0, 1):
            out = tmp_path / f"worker{seed}"
            shared = ["--storage", url, "--study-name", "shared", "--out", str(out), "--tailguard", tailguard]
            argv = [APP, "--space", SPACE, "--quick", "--algo", "tpe", "--budget", str(BUDGET), "--seed", str(seed)]
            argv += ["--remeasure", "0"]  # the best trial is the best: checked against the history below
            command = [sys.executable, "-m", "tailguard_tune.cli", *argv, *shared]
            workers.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        results = [w.communicate(timeout=300) for w in workers]
        for w, (stdout, stderr) in zip(workers, results, strict=True):
            assert w.returncode == 0, f"worker failed:\n{stdout}\n{stderr}"

        study = optuna.load_study(study_name="shared", storage=url)
        tuned = [t for t in study.trials if not t.user_attrs.get("baseline")]
        # Each worker checks the count before asking: both may ask for the last trial.
        assert BUDGET <= len(tuned) <= BUDGET + 1
        assert all(t.state.name == "COMPLETE" for t in study.trials)
        ran = [trials_run(stdout) for stdout, _ in results]
        assert ran[0] and ran[1], f"both workers should have run trials: {ran}"
        assert not ran[0] & ran[1] and ran[0] | ran[1] == {t.number for t in tuned}

        # The trials are in PostgreSQL's tables, not in a local file.
        with (
            psycopg2.connect(host="127.0.0.1", port=server.port, user="tuner", dbname="tuning") as conn,
            conn.cursor() as cur,
        ):
            cur.execute("SELECT count(*) FROM trials JOIN studies USING (study_id) WHERE study_name = 'shared'")
            assert cur.fetchone()[0] == len(study.trials)
        assert not any(p.name == "study.db" for p in tmp_path.rglob("*"))

        # Each worker's outputs describe the shared study as it was when that worker finished: the
        # one whose last trial ended later saw every trial complete; the other may list one of its
        # peer's trials as still running. Each best file reproduces its best.
        values = {t.number: t.value for t in study.trials}
        seen = []
        for seed in (0, 1):
            out = tmp_path / f"worker{seed}"
            summary = json.loads((out / "summary.json").read_text())
            with open(out / "history.csv", newline="") as f:
                rows = list(csv.DictReader(f))
            complete = [r for r in rows if r["state"] == "COMPLETE"]
            assert all(r["state"] == "RUNNING" and r["value"] == "" for r in rows if r not in complete), rows
            assert all(float(r["value"]) == values[int(r["number"])] for r in complete)
            assert summary["study"] == "shared" and summary["best"] == min(float(r["value"]) for r in complete)
            assert summary["best"] < summary["defaults"]
            best_yaml = out / "best.yaml"
            best_row = next(r for r in complete if int(r["number"]) == summary["best_trial"])
            measured = Runner(tailguard, quick=True).measure(
                experiment.load(best_yaml), str(best_yaml), Objective("p95"), [int(best_row["seeds"])]
            )
            assert measured.value == summary["best"]
            seen.append(len(complete))
        assert max(seen) == len(study.trials)
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait(timeout=30)
        server.stop()
