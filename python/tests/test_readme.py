"""README.md's tuner commands run as written (crates/cli/tests/readme.rs runs the others): each
`tailguard-tune` line of its `sh` blocks, in a scratch folder holding the repository's examples/,
with this environment's `tailguard-tune` and the `tailguard` on PATH (`make test` puts its own
build first)."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def tune_commands(readme: str) -> list[list[str]]:
    """The `tailguard-tune` lines of the README's `sh` blocks, split as the shell would."""
    commands = []
    for block in re.findall(r"^```sh\n(.*?)^```", readme, re.DOTALL | re.MULTILINE):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words and words[0].endswith("tailguard-tune"):
                commands.append(words)
    return commands


def test_the_readme_s_tuner_commands_run(tmp_path):
    commands = tune_commands((ROOT / "README.md").read_text())
    assert commands, "README.md shows no tailguard-tune command"
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    tune = Path(sys.executable).with_name("tailguard-tune")
    for words in commands:
        run = subprocess.run(
            [str(tune), *words[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=600, env=os.environ
        )
        assert run.returncode == 0, f"{shlex.join(words)}:\n{run.stderr}"
        assert list(tmp_path.glob("tune-out/*/summary.json")), f"{shlex.join(words)} wrote no summary"


def test_commands_are_read_from_sh_blocks_only():
    text = (
        "```sh\n.venv/bin/tailguard-tune a.yaml --budget 1   # c\ntailguard sim x\n```\n"
        "```text\ntailguard-tune no\n```\n"
    )
    assert tune_commands(text) == [[".venv/bin/tailguard-tune", "a.yaml", "--budget", "1"]]
