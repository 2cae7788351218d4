"""Experiment files as the tuner sees them: a YAML document, dotted paths into it, and a
modified copy written for each candidate configuration.

Paths follow the model's overrides (crates/model/src/overrides.rs): mapping keys by name, list
items by index from 0; every step must exist except the last, which may add a key to an existing
mapping. Errors name the path and what was there instead, in the same words.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import yaml


class PathError(ValueError):
    """A dotted path that does not lead anywhere in the experiment file."""


_MISSING = object()


def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Reads an experiment file (YAML merge keys applied, as the model does)."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except OSError as e:
        raise ValueError(f"{path}: cannot read the experiment file: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ValueError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected an experiment file (a YAML mapping), got {type(doc).__name__}")
    return doc


def _keys(node: dict[str, Any]) -> str:
    names = [str(k) for k in node]
    return ", ".join(names) if names else "no keys"


def _kind(node: Any) -> str:
    if node is None:
        return "empty (null)"
    if isinstance(node, bool):
        return "a boolean"
    if isinstance(node, (int, float)):
        return "a number"
    if isinstance(node, str):
        return "a string"
    return type(node).__name__


def _walk(doc: Any, path: str, *, create_last: bool) -> tuple[Any, Any]:
    """The container holding the path's last step and that step's key (an index for lists)."""
    parts = path.split(".")
    if any(p == "" for p in parts):
        raise PathError(f"path {path!r} has an empty part; expected names separated by single dots")
    node = doc
    for i, part in enumerate(parts):
        last = i + 1 == len(parts)
        here = ".".join(parts[:i]) or "the file"

        def missing(what: str) -> PathError:
            return PathError(f"no such path {path!r}: {what}")

        if isinstance(node, dict):
            key = next(
                (k for k in node if str(k) == part or (isinstance(k, bool) and str(k).lower() == part)), _MISSING
            )
            if last:
                if key is _MISSING and not create_last:
                    raise missing(f"{here} has no key {part!r}; it has: {_keys(node)}")
                return node, part if key is _MISSING else key
            if key is _MISSING:
                raise missing(f"{here} has no key {part!r}; it has: {_keys(node)}")
            node = node[key]
        elif isinstance(node, list):
            n = len(node)
            if not part.isdigit() or int(part) >= n:
                raise missing(f"{here} is a list of {n}; expected an index from 0 to {n - 1}, got {part!r}")
            if last:
                return node, int(part)
            node = node[int(part)]
        else:
            raise missing(f"{here} is {_kind(node)}, not a mapping or a list")
    raise AssertionError("the loop returns at the last part")


def check_path(doc: dict[str, Any], path: str) -> None:
    """Raises PathError unless `set_path` could set `path` (the last key may be new)."""
    if path.split(".")[0] in ("variants", "scenarios", "quick") and path.count(".") < 2:
        raise PathError(f"path {path!r}: the tuner changes values inside the file, not whole lists of runs")
    _walk(doc, path, create_last=True)


def get_path(doc: dict[str, Any], path: str, default: Any = None) -> Any:
    """The value at `path`, or `default` when the last key is absent (the model's default applies)."""
    container, key = _walk(doc, path, create_last=True)
    if isinstance(container, dict):
        return container.get(key, default)
    return container[key]


def set_path(doc: dict[str, Any], path: str, value: Any) -> None:
    """Sets `path` in `doc` to `value`, as an override would."""
    container, key = _walk(doc, path, create_last=True)
    container[key] = value


def with_values(doc: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of `doc` with each path set to its value (in the order given)."""
    out = copy.deepcopy(doc)
    for path, value in values.items():
        set_path(out, path, value)
    return out


def absolutize_data_files(doc: Any, base: Path) -> None:
    """Makes `dist: empirical` file paths absolute, so a copy written elsewhere still finds them
    (the model reads them relative to the experiment file's directory)."""
    if isinstance(doc, dict):
        file = doc.get("file")
        if doc.get("dist") == "empirical" and isinstance(file, str) and not os.path.isabs(file):
            doc["file"] = str((base / file).resolve())
        for v in doc.values():
            absolutize_data_files(v, base)
    elif isinstance(doc, list):
        for v in doc:
            absolutize_data_files(v, base)


def write(
    doc: dict[str, Any], out: str | os.PathLike[str], *, source: str | os.PathLike[str], header: str = ""
) -> None:
    """Writes `doc` as an experiment file that runs from anywhere (data files made absolute)."""
    doc = copy.deepcopy(doc)
    absolutize_data_files(doc, Path(source).resolve().parent)
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=110)
    with open(out, "w", encoding="utf-8") as f:
        if header:
            f.write("".join(f"# {line}\n" if line else "#\n" for line in header.splitlines()))
        f.write(text)
