"""Dotted paths into experiment files, with the model's semantics (crates/model/src/overrides.rs)."""

import os
from typing import Any

import pytest
import yaml

from tailguard_tune import experiment
from tailguard_tune.experiment import PathError

DOC = yaml.safe_load(
    "services:\n  api:\n    replicas: 2\n    calls:\n      - service: db\n        count: 1\n"
    "  db: {}\nworkload:\n  target: api\n"
)


def test_replaces_values_in_mappings_and_lists_without_touching_the_original():
    out = experiment.with_values(DOC, {"services.api.replicas": 40, "services.api.calls.0.count": 3})
    assert out["services"]["api"]["replicas"] == 40 and out["services"]["api"]["calls"][0]["count"] == 3
    assert DOC["services"]["api"]["replicas"] == 2


def test_the_last_key_may_be_new():
    out = experiment.with_values(
        DOC, {"services.db.workers": 8, "services.api.calls.0.policy": {"hedge": {"kind": "none"}}}
    )
    assert out["services"]["db"]["workers"] == 8
    assert experiment.get_path(out, "services.api.calls.0.policy.hedge.kind") == "none"
    assert experiment.get_path(DOC, "services.db.workers", "absent") == "absent"


def test_errors_say_what_is_there_in_the_models_words():
    with pytest.raises(PathError) as e:
        experiment.set_path(DOC, "services.fronted.replicas", 4)
    assert str(e.value) == "no such path 'services.fronted.replicas': services has no key 'fronted'; it has: api, db"
    with pytest.raises(PathError) as e:
        experiment.set_path(DOC, "services.api.calls.1.count", 2)
    assert str(e.value) == (
        "no such path 'services.api.calls.1.count': services.api.calls is a list of 1; "
        "expected an index from 0 to 0, got '1'"
    )
    with pytest.raises(PathError, match="got 'first'"):
        experiment.set_path(DOC, "services.api.calls.first", 2)


def test_a_written_copy_runs_from_anywhere(tmp_path):
    src = tmp_path / "exp" / "e.yaml"
    src.parent.mkdir()
    (src.parent / "data.txt").write_text("1.0\n")
    doc: dict[str, Any] = {"name": "x", "services": {"a": {"service_time": {"dist": "empirical", "file": "data.txt"}}}}
    out = tmp_path / "elsewhere.yaml"
    experiment.write(doc, out, source=src, header="line one\n\nline two")
    text = out.read_text()
    assert text.startswith("# line one\n#\n# line two\n")
    written = yaml.safe_load(text)
    assert written["services"]["a"]["service_time"]["file"] == str((src.parent / "data.txt").resolve())
    assert doc["services"]["a"]["service_time"]["file"] == "data.txt"


def test_unreadable_files_are_errors(tmp_path):
    with pytest.raises(ValueError, match="cannot read the experiment file"):
        experiment.load(tmp_path / "nope.yaml")
    bad = tmp_path / "list.yaml"
    bad.write_text("- 1\n")
    with pytest.raises(ValueError, match="expected an experiment file"):
        experiment.load(bad)
    assert os.path.exists(bad)
