"""The paper-layout tables from what the paper plan's steps wrote (studies/paper.py): each
table's rows or columns read from the scores' results.json files that exist, the ones not
there yet named, and the tables written to OUT/paper/ (paper_tables.py lays them out)."""

from __future__ import annotations

import json
import os
from typing import Any

from ..errors import FlowclipError


def _results(path: str) -> dict | None:
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
        res = _results(path)
        if res is None:
            absent += [path] * (path not in absent)
            continue
        for s in res["scorers"]:
            key = f"{control}|{s['run']}"
            if s["method"] == method and key in res["results"]:
                runs.append({"results": res["results"][key], "means": res.get("cross_task_means", {}).get(key, {})})
    return runs


def _adapted(cfg, row: str, source: str) -> list[str]:
    return [os.path.join("adapted", f"{row}-{source}-s{seed}-scores") for seed in cfg.seeds]


TAB2, CC3M = "tab2-coco/score", "tab1-cc3m/score"
STANDINS = (
    "**Stand-ins (the reduced run).** Every benchmark and training source here is the synthetic world under "
    "the paper's name (flowclip_cache/datasets/paper_standin.py), every encoder a tiny CLIP, each released "
    "checkpoint the tiny CLIP fine-tuned under hard negatives: these numbers show that every step and table "
    "of the paper runs, not a measurement of the paper's claims. The published values beside them are the "
    "paper's."
)
TAB4_SOURCES = {  # Tab. 4's rows: (the plan's scores, the method in them)
    "FSC-CLIP": ("fsc_clip-scores", "clip"),
    "Global-M (HNB)": (TAB2, "global"),
    "Global-M+CIMR": (TAB2, "global_cimr"),
    "Flow-CLIP (HNB)": (TAB2, "flow_hnb"),
    "Flow-CLIP+CIMR": (TAB2, "flow_hnb_cimr"),
}


def tab4_inputs(cfg, absent: list[str]) -> dict[str, dict[str, list[dict]]]:
    """Tab. 4's rows under each image control."""
    return {
        row: {cond: runs_of(cfg, [folder], method, absent, cond.lower()) for cond in ("Real", "Shuffle", "Fixed")}
        for row, (folder, method) in TAB4_SOURCES.items()
    }


def tab7_inputs(cfg, absent: list[str]) -> dict[str, list[dict]]:
    """Tab. 7's columns: one {manifest: metrics} per seed."""
    sources = {
        "CLIP": ([TAB2], "clip"),
        "NegCLIP": (_adapted(cfg, "negclip", "coco"), "clip"),  # the COCO-adapted encoders scored as CLIP
        "Global-M (COCO)": ([TAB2], "global"),
        "Global-M (CC3M)": ([CC3M], "global"),
        "Flow-CLIP (COCO)": ([TAB2], "flow_hnb_cimr"),
        "Flow-CLIP (CC3M)": ([CC3M], "flow_hnb_cimr"),
    }
    return {col: [r["results"] for r in runs_of(cfg, f, m, absent)] for col, (f, m) in sources.items()}


def tab1_inputs(cfg, absent: list[str]) -> dict[str, dict[str, list[dict]]]:
    """Tab. 1's blocks: per training source, each row's runs on real images. DCSM is not in
    the plan; FSC-CLIP's CC3M row needs the checkpoint `fsc_clip_cc3m`."""
    out = {}
    for block, short, frozen in (("COCO", "coco", TAB2), ("CC3M", "cc3m", CC3M)):
        fsc = "fsc_clip-scores" if block == "COCO" else "fsc_clip_cc3m-scores"
        sources = {
            "CLIP": ([frozen], "clip"),
            "NegCLIP": (_adapted(cfg, "negclip", short), "clip"),
            "LABCLIP": ([f"tab1-labclip-{short}/score"], "labclip"),
            "Flow-CLIP, frozen": ([frozen], "flow_hnb_cimr"),
            "Flow-CLIP, adapted": (_adapted(cfg, "flow", short), "flow"),
        }
        if block == "COCO" or "fsc_clip_cc3m" in cfg.checkpoints:
            sources["FSC-CLIP"] = ([fsc], "clip")
        out[block] = {row: runs_of(cfg, f, m, absent) for row, (f, m) in sources.items()}
    return out


def write_tables(cfg, log) -> None:
    """OUT/paper/tab1.md, tab4.md, tab7.md from the steps' outputs that exist."""
    from .. import outputs
    from ..paper_tables import tab1, tab4, tab7
    from .study import claim_folder

    claim_folder(os.path.join(cfg.out, "paper"))  # its own folder: the studies beside it mark theirs
    tables: list[tuple[str, Any, Any]] = [("tab1", tab1_inputs, tab1), ("tab4", tab4_inputs, tab4)]
    for name, inputs, layout in tables + [("tab7", tab7_inputs, tab7)]:
        absent: list[str] = []
        lines = layout(inputs(cfg, absent))
        head = ["# The paper's tables, ours beside the published numbers", ""]
        if cfg.standins is not None:
            head += [STANDINS, ""]
        if absent:
            head += ["Not run yet (what they give reads 'missing'): " + ", ".join(absent), ""]
        path = os.path.join(cfg.out, "paper", f"{name}.md")
        outputs.write_text(path, "\n".join(head + lines) + "\n")
        log(f"wrote {path}" + (f" ({len(absent)} inputs not run yet)" * bool(absent)))
