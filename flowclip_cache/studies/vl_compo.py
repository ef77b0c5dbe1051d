"""Our figures beside vl_compo's published ones (github.com/ytaek-oh/vl_compo: results.csv
and individual_results.csv, percent, one row per (arch, pretrained)). The CSVs are the
user's download, read as plain text (numbers only); the repository states no licence, so
flowclip carries none of its numbers, only this reading of its columns.

An encoder is matched to the row its `published_as: ARCH|PRETRAINED[|FAMILY]` names, else to
(model, pretrained) as open_clip names them (vl_compo's OpenCLIP rows use the same names).
Compared: the headline columns, when the study's suite is vl-compo (each read as
scoring/suites.py derives it), and the sub-metrics below wherever our results hold the
figure. EXPECTED says where a difference is expected and why."""

from __future__ import annotations

import csv
import os

from ..datasets._elevater import VL_COMPO_TASKS
from ..errors import FlowclipError

HEADLINE = ("aro", "colorswap", "crepe", "eqben", "imagecode", "mmvp_vlm", "sugarcrepe", "svo_probes", "valse",
            "vl_checklist", "whatsup", "winoground", "comp_avg", "coco_i2t", "coco_t2i", "flickr_i2t", "flickr_t2i",
            "i2t_avg", "t2i_avg", "imagenet", "21_tasks_avg")  # fmt: skip
SUITE_COLUMN = {"comp_avg": "mean"}  # a headline column the suite's table names otherwise
SUBMETRICS = {  # individual_results.csv column -> (our benchmark, the figure in its results)
    "aro::VG_Relation": ("aro-vg-relation", "score"), "aro::VG_Attribute": ("aro-vg-attribution", "score"),
    "aro::Flickr30k_Order": ("aro-flickr-order", "score"), "aro::COCO_Order": ("aro-coco-order", "score"),
    **{f"colorswap::{m}": ("colorswap", f"metrics/{m}/score") for m in ("text", "image", "group")},
    **{f"winoground::{m}": ("winoground", f"metrics/{m}/score") for m in ("text", "image", "group")},
    **{f"crepe::{f}": ("crepe-productivity", f"by_foil_type/{f}") for f in ("atom", "swap", "negate")},
    **{f"sugarcrepe::{s}": ("sugarcrepe", f"by_subset/{s}") for s in
       ("replace_obj", "replace_att", "replace_rel", "swap_obj", "swap_att", "add_obj", "add_att")},
    "whatsup::WhatsUp_A": ("whatsup-controlled-a", "score"), "whatsup::WhatsUp_B": ("whatsup-controlled-b", "score"),
    "whatsup::COCO_QA_ONE": ("whatsup-coco-spatial", "by_subset/one"),
    "whatsup::COCO_QA_TWO": ("whatsup-coco-spatial", "by_subset/two"),
    "whatsup::VG_QA_ONE": ("whatsup-gqa-spatial", "by_subset/one"),
    "whatsup::VG_QA_TWO": ("whatsup-gqa-spatial", "by_subset/two"),
    **{f"coco_karpathy::{d}/R@{k}": ("coco-retrieval", f"{d}_R@{k}") for d in ("i2t", "t2i") for k in (1, 5, 10)},
    **{f"flickr30k::{d}/R@{k}": ("flickr-retrieval", f"{d}_R@{k}") for d in ("i2t", "t2i") for k in (1, 5, 10)},
    **{f"elevator::{t}": (f"elevater-{t}", "score") for t in VL_COMPO_TASKS},
}  # fmt: skip
EXPECTED = {  # where a difference is expected: the column (or its prefix) -> why
    "svo_probes": "vl_compo's code is not public; flowclip's pairwise rule is its own (docs/method.md)",
    "elevator::": "vl_compo's ELEVATER code is not public: flowclip follows ELEVATER's toolkit (class names, "
    "templates, TEST.METRIC) with the encoder's own preprocessing",
    "coco_karpathy::": "vl_compo's retrieval code is not public (ties, caption handling)",
    "flickr30k::": "vl_compo's retrieval code is not public (ties, caption handling)",
}


def read_published(path: str, columns) -> dict[tuple[str, str, str], dict[str, float]]:
    """(arch, pretrained, family) -> {column: percent} for the columns given that the file
    has (arch and pretrained alone do not name a row: two cc12m ViT-B-16 rows differ by
    family); a cell that is not a number is refused with its row."""
    try:
        rows = list(csv.DictReader(open(path, newline="")))
    except OSError as e:
        raise FlowclipError(f"published: cannot read {path} ({e.strerror})") from None
    if not rows or not {"arch", "pretrained", "family"} <= set(rows[0]):
        raise FlowclipError(f"{path}: not a vl_compo results file (no arch, pretrained and family columns)")
    out = {}
    for i, row in enumerate(rows, start=2):
        got = {}
        for c in columns:
            if row.get(c) not in (None, ""):
                try:
                    got[c] = float(row[c])
                except ValueError:
                    bad = f"{path}, row {i} ({row['arch']}), column {c}: {row[c]!r} is not a number"
                    raise FlowclipError(bad) from None
        out[(row["arch"], row["pretrained"], row["family"])] = got
    return out


def published_key(enc: dict) -> tuple[str, ...]:
    """The vl_compo row an encoder is: `published_as: ARCH|PRETRAINED[|FAMILY]`, else its
    open_clip (model, pretrained)."""
    if "published_as" in enc:
        parts = tuple(str(enc["published_as"]).split("|"))
        if len(parts) not in (2, 3):
            raise FlowclipError(
                f"published_as {enc['published_as']!r}: give ARCH|PRETRAINED (|FAMILY) as vl_compo names them"
            )
        return parts
    return enc["model"], enc.get("pretrained", "none")


def match(published: dict, key: tuple[str, ...], name: str) -> dict[str, float]:
    """The published figures of the one row `key` names ({} for none); two rows refused."""
    rows = [(k, v) for k, v in published.items() if k[: len(key)] == key]
    if len(rows) > 1:
        families = ", ".join(k[2] for k, _ in rows)
        raise FlowclipError(f"encoders.{name}: vl_compo has {len(rows)} rows {key[0]} ({key[1]}), families "
                            f"{families}: name one with published_as: {key[0]}|{key[1]}|FAMILY")  # fmt: skip
    return rows[0][1] if rows else {}


def expected(column: str) -> str:
    """Why a difference is expected in `column` ('' where none is): a key ending in '::'
    covers every sub-metric of its benchmark, any other key its headline column alone."""
    return next(
        (why for key, why in EXPECTED.items() if column == key or (key.endswith("::") and column.startswith(key))), ""
    )


def comparison_rows(cfg, rows: dict) -> list[list]:
    """[encoder, vl_compo row, column, ours, published, ours - published, note], percent."""
    from ..scoring.suites import figure

    sources = []
    if cfg.published and cfg.suite == "vl-compo":
        sources.append((read_published(cfg.published, HEADLINE),
                        lambda r, c: r["suite"].get(SUITE_COLUMN.get(c, c), {}).get("value")))  # fmt: skip
    if cfg.published_individual:
        sources.append((read_published(cfg.published_individual, SUBMETRICS),
                        lambda r, c: figure(r["results"].get(SUBMETRICS[c][0], {}), SUBMETRICS[c][1])))  # fmt: skip
    out = []
    for name, r in rows.items():
        key = published_key(cfg.encoders[name])
        for published, ours_of in sources:
            for column, theirs in match(published, key, name).items():
                ours = ours_of(r, column)
                if ours is not None:
                    ours = 100 * ours
                    out.append(
                        [
                            name,
                            f"{key[0]} ({', '.join(key[1:])})",
                            column,
                            ours,
                            theirs,
                            ours - theirs,
                            expected(column),
                        ]
                    )
    return out


def write_comparison(cfg, rows: dict) -> None:
    from ..outputs import write_csv, write_text
    from ..scoring.report import table

    got = comparison_rows(cfg, rows)
    unmatched = [n for n in cfg.encoders if n not in {g[0] for g in got}]
    header = ["encoder", "vl_compo row", "column", "ours", "vl_compo", "ours - vl_compo", "a difference expected"]
    cells = [[*g[:3], f"{g[3]:.2f}", f"{g[4]:.2f}", f"{g[5]:+.2f}", g[6]] for g in got]
    md = ["# Beside vl_compo's published figures (%)", "",
          f"Source: {', '.join(p for p in (cfg.published, cfg.published_individual) if p)} "
          "(github.com/ytaek-oh/vl_compo); headline columns compared when the suite is vl-compo.", ""]  # fmt: skip
    md += table(header, cells) if cells else ["No figure of ours has a published counterpart."]
    md += [""] + [f"- {n}: no vl_compo row {' | '.join(published_key(cfg.encoders[n]))}" for n in unmatched]
    write_text(os.path.join(cfg.out, "published.md"), "\n".join(md) + "\n")
    write_csv(os.path.join(cfg.out, "published.csv"), [header] + got)
