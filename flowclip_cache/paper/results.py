"""What the paper plan's steps wrote, read for the tables: a score's results.json (a
damaged one refused, naming it) and each method's per-seed runs in it (shared by
inputs.py and section43.py)."""

from __future__ import annotations

import json
import os

from ..errors import FlowclipError


def read_results(path: str) -> dict | None:
    """A score's results.json, or None when the step has not run; a damaged one is refused."""
    if not os.path.exists(path):
        return None
    try:
        data = json.load(open(path))
        data["scorers"], data["results"]  # noqa: B018 - the keys the tables read
    except (ValueError, KeyError, TypeError) as e:
        raise FlowclipError(f"{path}: not a flowclip score's results.json ({e}); run that step again") from None
    return data


def runs_of(cfg, folders: list[str], method: str, absent: list[str], control: str = "real") -> list[dict]:
    """One {"results": {manifest: metrics}, "means": {cross-task mean: ...}} per run (seed)
    of `method` under `control`, from the scores in OUT/<folder>/results.json; a folder
    without its results is added to `absent`."""
    runs = []
    for folder in folders:
        path = os.path.join(cfg.out, folder, "results.json")
        res = read_results(path)
        if res is None:
            absent += [path] * (path not in absent)
            continue
        for s in res["scorers"]:
            key = f"{control}|{s['run']}"
            if s["method"] == method and key in res["results"]:
                runs.append({"results": res["results"][key], "means": res.get("cross_task_means", {}).get(key, {})})
    return runs


def adapted_folders(cfg, row: str, source: str) -> list[str]:
    return [os.path.join("adapted", f"{row}-{source}-s{seed}-scores") for seed in cfg.seeds]


TAB2, CC3M = "tab2-coco/score", "tab1-cc3m/score"
