"""The paper-layout tables from what the paper plan's steps wrote (studies/paper.py): each
table's rows or columns read from the scores' results.json files that exist, the ones not
there yet named, and the tables written to OUT/paper/ (tables.py lays them out)."""

from __future__ import annotations

import os
from typing import Any

from .checkpoints import RELEASED
from .results import CC3M, TAB2, adapted_folders, read_results, runs_of

LEADING = {"tab1": 3, "tab2": 4, "tab3": 3, "tab4": 2, "tab5": 2, "tab6": 2, "tab7": 1, "fig3": 3, "fig7": 2}
STANDINS = (
    "**Stand-ins (the reduced run).** Every benchmark and training source here is the synthetic world under "
    "the paper's name (flowclip_cache/datasets/paper_standin.py), every encoder a tiny CLIP, each released "
    "checkpoint the tiny CLIP fine-tuned under hard negatives: these numbers show that every step and table "
    "of the paper runs, not a measurement of the paper's claims. The published values beside them are the "
    "paper's."
)
TAB4_SOURCES = {  # Tab. 4's rows: (the plan's scores, the method in them)
    "CLIP": (TAB2, "clip"),
    "NegCLIP (released)": ("negclip-scores", "clip"),
    "LABCLIP": ("tab1-labclip-coco/score", "labclip"),
    "FSC-CLIP": ("fsc_clip-scores", "clip"),
    "Global-M (HNB)": (TAB2, "global"),
    "Global-M+CIMR": (TAB2, "global_cimr"),
    "Flow-CLIP (HNB)": (TAB2, "flow_hnb"),
    "Flow-CLIP+CIMR": (TAB2, "flow_hnb_cimr"),
}


def tab4_inputs(cfg, absent: list[str]) -> dict[str, dict[str, list[dict]]]:
    """Tab. 4's rows under each image control (the released NegCLIP where the plan scores it)."""
    return {
        row: {cond: runs_of(cfg, [folder], method, absent, cond.lower()) for cond in ("Real", "Shuffle", "Fixed")}
        for row, (folder, method) in TAB4_SOURCES.items()
        if folder != "negclip-scores" or "negclip" in cfg.checkpoints
    }


def tab7_inputs(cfg, absent: list[str]) -> dict[str, list[dict]]:
    """Tab. 7's columns: one {manifest: metrics} per seed."""
    sources = {
        "CLIP": ([TAB2], "clip"),
        "NegCLIP": (adapted_folders(cfg, "negclip", "coco"), "clip"),  # the COCO-adapted encoders scored as CLIP
        "Global-M (COCO)": ([TAB2], "global"),
        "Global-M (CC3M)": ([CC3M], "global"),
        "Flow-CLIP (COCO)": ([TAB2], "flow_hnb_cimr"),
        "Flow-CLIP (CC3M)": ([CC3M], "flow_hnb_cimr"),
    }
    if "negclip" in cfg.checkpoints:  # NegCLIP's released checkpoint, scored as CLIP
        sources["NegCLIP (released)"] = (["negclip-scores"], "clip")
    return {col: [r["results"] for r in runs_of(cfg, f, m, absent)] for col, (f, m) in sources.items()}


def tab1_inputs(cfg, absent: list[str]) -> dict[str, dict[str, list[dict]]]:
    """Tab. 1's blocks: per training source, each row's runs on real images. DCSM is not in
    the plan; each released checkpoint the plan scores (paper/checkpoints.py) fills its row
    in its block (a paper's row it does not score reads 'missing')."""
    out = {}
    for block, short, frozen in (("COCO", "coco", TAB2), ("CC3M", "cc3m", CC3M)):
        sources = {
            "CLIP": ([frozen], "clip"),
            "NegCLIP": (adapted_folders(cfg, "negclip", short), "clip"),
            "LABCLIP": ([f"tab1-labclip-{short}/score"], "labclip"),
            "Flow-CLIP, frozen": ([frozen], "flow_hnb_cimr"),
            "Flow-CLIP, adapted": (adapted_folders(cfg, "flow", short), "flow"),
        }
        for name, rel in RELEASED.items():
            if rel.block == block and name in cfg.checkpoints:
                sources[rel.row] = ([f"{name}-scores"], "clip")
        out[block] = {row: runs_of(cfg, f, m, absent) for row, (f, m) in sources.items()}
    return out


def tab2_inputs(cfg, absent: list[str]) -> tuple[dict[str, list[dict]], dict]:
    """Tab. 2's rows (each method of Tab. 2's study, its seeds' runs on real images) and the
    study's paired bootstrap intervals."""
    from .tables_heads import TAB2_ROWS, tab2_intervals

    res = read_results(os.path.join(cfg.out, TAB2, "results.json")) or {}
    runs = {method: runs_of(cfg, [TAB2], method, absent) for _, method, *_ in TAB2_ROWS}
    return runs, tab2_intervals(res.get("bootstrap", {}))


def tab3_inputs(cfg, absent: list[str]) -> dict[tuple[float, float, float], list[dict]]:
    """Tab. 3's rows: each (cimr, tau_p, alpha) of the sensitivity study's grid."""
    from ..studies.sensitivity import SensitivityConfig, plan

    grid = {(s.train["cimr"], s.train["tau_p"], s.train["alpha"]): s.method for s in plan(SensitivityConfig("", ""))}
    return {key: runs_of(cfg, ["tab3/score"], method, absent) for key, method in grid.items()}


def families_inputs(cfg, table: int, absent: list[str]) -> dict[str, dict[str, list[dict]]]:
    """Tab. 5's or Tab. 6's blocks: per encoder, Base (its own scoring), Global-M, Flow-CLIP.
    Tab. 6's first block is the main encoder's, from Tab. 2's runs (same settings)."""
    from .paths import table_of

    rows = {"Base": "clip", "Global-M": "global", "Flow-CLIP": "flow"}
    out = {}
    encoders = list(cfg.encoders.items())
    if table == 6 and encoders:
        tab2 = {**rows, "Flow-CLIP": "flow_hnb_cimr"}
        out[encoders[0][0]] = {row: runs_of(cfg, [TAB2], m, absent) for row, m in tab2.items()}
    for name, enc in encoders[1:]:
        if table_of(enc) == table:
            folder = os.path.join(f"tab{table}", name, "score")
            out[name] = {row: runs_of(cfg, [folder], m, absent) for row, m in rows.items()}
    return out


def fig3_inputs(cfg, absent: list[str]) -> dict[str, dict[str, list[dict]]]:
    """Fig. 3's curves: per training source, LABCLIP's and Flow-CLIP's runs (results dicts)."""
    out = {}
    for block, short, frozen in (("COCO", "coco", TAB2), ("CC3M-100K", "cc3m", CC3M)):
        rows = {"LABCLIP": (f"tab1-labclip-{short}/score", "labclip"), "Flow-CLIP": (frozen, "flow_hnb_cimr")}
        out[block] = {row: [r["results"] for r in runs_of(cfg, [f], m, absent)] for row, (f, m) in rows.items()}
    return out


def atlas_margins(cfg, absent: list[str]) -> dict[str, dict[tuple[str, str], float]]:
    """Fig. 7's models' margins on the ARO tasks (real images; each model's first seed):
    model -> (task, record id) -> gold minus the hardest foil, from the scores' records."""
    import pyarrow.parquet as pq

    from ..scoring.metrics import margin
    from .figures import ARO_TASKS

    seed = cfg.seeds[0] if cfg.seeds else 0
    sources = {
        "CLIP": (TAB2, "clip"),
        "NegCLIP": (os.path.join("adapted", f"negclip-coco-s{seed}-scores"), "clip"),
        "LABCLIP": ("tab1-labclip-coco/score", "labclip"),
        "Flow-CLIP": (TAB2, "flow_hnb_cimr"),
    }
    out: dict[str, dict[tuple[str, str], float]] = {}
    for model, (folder, method) in sources.items():
        res = read_results(os.path.join(cfg.out, folder, "results.json"))
        records = os.path.join(cfg.out, folder, "records.parquet")
        if res is None or not os.path.exists(records):
            absent += [records] * (records not in absent)
            continue
        runs = sorted(s["run"] for s in res["scorers"] if s["method"] == method)
        if not runs:
            continue
        t = pq.read_table(records, filters=[("scorer", "=", runs[0]), ("control", "=", "real")]).to_pylist()
        out[model] = {(r["benchmark"], r["record_id"]): margin(r["scores"], r["gold"])
                      for r in t if r["benchmark"] in ARO_TASKS}  # fmt: skip
    return out


def write_paper_file(cfg, name: str, head: list[str], lines: list[str]) -> str:
    """OUT/paper/NAME.md, and NAME.csv beside it when it holds a table: one row per cell
    (ours, our std, the change from CLIP, the paper's value and change, ours minus it)."""

    from .. import outputs
    from .tables import CSV_HEADER, table_csv

    path = os.path.join(cfg.out, "paper", f"{name}.md")
    outputs.write_text(path, "\n".join(head + lines) + "\n")
    if name in LEADING:
        data = "stand-ins (the reduced run)" if cfg.standins is not None else ""
        cells = [[*row, data] for row in table_csv(name, lines, LEADING[name])]
        outputs.write_csv(path.removesuffix(".md") + ".csv", [CSV_HEADER, *cells])
    return path


def write_figures(cfg, log) -> None:
    """OUT/paper/fig3.md|png and fig7.md|png from the scores that exist."""
    from .. import outputs
    from .figures import atlas, draw_fig3, draw_fig7, fig3, fig7

    folder = os.path.join(cfg.out, "paper")
    absent: list[str] = []
    md, curves = fig3(fig3_inputs(cfg, absent))
    examples = atlas(atlas_margins(cfg, absent))
    explorers = os.path.join(cfg.out, "explorer")
    where = f"{explorers}/*/explorer.html" if os.path.isdir(explorers) else ""
    figures = (("fig3", md, draw_fig3, curves), ("fig7", fig7(examples, where), draw_fig7, examples))
    for name, lines, draw, data in figures:
        head = ["# The paper's figures, ours beside the published numbers", ""]
        head += [STANDINS, ""] if cfg.standins is not None else []
        head += ["Not run yet (what they give is left out): " + ", ".join(absent), ""] if absent else []
        write_paper_file(cfg, name, head, lines)
        outputs.atomic_write(os.path.join(folder, f"{name}.png"), lambda p, draw=draw, data=data: draw(data, p))
        log(f"wrote {folder}/{name}.md and {name}.png")


def write_tables(cfg, log) -> None:
    """OUT/paper/tab1.md ... tab7.md from the steps' outputs that exist."""
    from ..studies.study import claim_folder
    from .section43 import section43
    from .tables import tab1, tab4, tab7
    from .tables_heads import families, tab2, tab3

    claim_folder(os.path.join(cfg.out, "paper"))  # its own folder: the studies beside it mark theirs
    tables: list[tuple[str, Any, Any]] = [
        ("tab1", tab1_inputs, tab1),
        ("tab2", tab2_inputs, lambda inputs: tab2(inputs[0], None, inputs[1])),
        ("tab3", tab3_inputs, tab3),
        ("tab4", tab4_inputs, tab4),
        ("tab5", lambda c, a: families_inputs(c, 5, a), lambda ours: families("Tab. 5", ours, None)),
        ("tab6", lambda c, a: families_inputs(c, 6, a), lambda ours: families("Tab. 6", ours, None)),
    ]
    tables += [("tab7", tab7_inputs, tab7), ("sec43", section43, lambda lines: lines)]
    for name, inputs, layout in tables:
        absent: list[str] = []
        lines = layout(inputs(cfg, absent))
        head = ["# The paper's tables, ours beside the published numbers", ""]
        if cfg.standins is not None:
            head += [STANDINS, ""]
        if absent:
            head += ["Not run yet (what they give reads 'missing'): " + ", ".join(absent), ""]
        path = write_paper_file(cfg, name, head, lines)
        log(f"wrote {path}" + (f" ({len(absent)} inputs not run yet)" * bool(absent)))
    write_figures(cfg, log)
