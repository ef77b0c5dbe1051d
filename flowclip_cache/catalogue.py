"""The benchmark catalogue: the repository's manifests/<name>.yaml, one per benchmark
and training source (official source, files the converter expects, expected record
counts, licence; the build command in its header). How a benchmark is scored lives in
its benchmark file, not here."""

from __future__ import annotations

import os

from .errors import FlowclipError
from .shipped import shipped_folder

CATALOGUE_DIR = shipped_folder("manifests")
KEYS = {"name", "title", "source", "files", "records", "counts", "images", "licence", "notes"}


def load_catalogue(folder: str = CATALOGUE_DIR) -> dict[str, dict]:
    out = {}
    if not os.path.isdir(folder) or not any(f.endswith(".yaml") for f in os.listdir(folder)):
        raise FlowclipError(
            f"{folder}: the benchmark catalogue is missing from this installation; "
            f"reinstall flowclip (its YAML files ship as package data)"
        )
    for f in sorted(os.listdir(folder)):
        if not f.endswith(".yaml"):
            continue
        from .config import load_yaml

        entry = load_yaml(os.path.join(folder, f))
        unknown = set(entry) - KEYS
        if unknown:
            raise FlowclipError(f"{folder}/{f}: unknown keys {sorted(unknown)}")
        out[entry["name"]] = entry
    return out


def check_counts(name: str, report) -> list[str]:
    """Compare a converter's counts with the catalogue's; lines to print."""
    entry = load_catalogue().get(name)
    if not entry:
        return []
    lines = []
    if entry.get("records") is not None:
        ok = entry["records"] == report.records
        lines.append(f"records {report.records} {'==' if ok else '!='} expected {entry['records']}")
    for k, v in (entry.get("counts") or {}).items():
        got = report.counts.get(k)
        lines.append(f"{k} {got} {'==' if got == v else '!='} expected {v}")
    return lines
