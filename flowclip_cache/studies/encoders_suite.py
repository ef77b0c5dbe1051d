"""Many encoders, frozen, on one suite (`flowclip run encoders-suite`; docs/encoders-suite.md).

Each encoder (an open_clip model and tag, a checkpoint file, an `hf-hub:` repository, any
family flowclip has) gets its store, CACHE/<name>, extracted from the suite's manifests
and the recognition benchmarks, global features alone by default (`features:`; resumable:
extract skips what is stored); every benchmark
is scored with the CLIP scorer into OUT/scores/<name>/. Then one model x benchmark table:
the suite's columns and mean (scoring/suites.py) and the mean zero-shot top-1 of the
recognition benchmarks, as Markdown and CSV, and the figure vl_compo draws
(ytaek-oh/vl_compo, README figure 1): compositionality (the suite's mean) against
recognition (zero-shot top-1). With `published:` (vl_compo's CSVs) each encoder's
figures are set beside the published ones (studies/vl_compo.py).

Encoders are spread over torchrun's ranks or a Slurm array's tasks like every study's
runs (studies/spread.py): rank r takes encoders i with i = r mod N, each claimed; the
rank that finishes last (or any rerun) writes the table. With `standins:` the benchmarks
are the synthetic world's stand-ins under their names (datasets/paper_standin.py), the
default, so the study runs offline."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from ..errors import FlowclipError
from ..outputs import write_csv, write_text
from .ablation import ENCODER_KEYS, encoder_spec
from .study import claim_folder

SUITE_KEYS = ENCODER_KEYS | {"published_as"}


@dataclass
class EncodersSuiteConfig:
    kind: str
    out: str
    encoders: dict[str, dict[str, Any]]  # name -> {model, pretrained, ...extract's keys, published_as}
    suite: str = "paper"  # paper | field | vl-compo (scoring/suites.py)
    eval: dict[str, list[str]] = field(default_factory=dict)  # image root -> manifests (files or folders)
    recognition: list[str] = field(default_factory=lambda: ["cifar10", "cifar100", "imagenetv2"])
    cache: str = "cache/encoders-suite"  # CACHE/<encoder>: never inside the study folder
    features: str = "global"  # what each store holds: the CLIP scorer reads global features alone ("all": every one)
    standins: dict[str, int] | None = None  # {seed, train_scenes, eval_scenes}: the synthetic stand-ins
    published: str | None = None  # vl_compo's results.csv (its headline columns)
    published_individual: str | None = None  # vl_compo's individual_results.csv (sub-metrics)
    device: str = "auto"
    batch_size: int = 64
    workers: int = 2
    figures: bool = True  # each encoder's scores' PNGs (margins, CREPE curves); summary.png is always drawn

    def __post_init__(self):
        from ..scoring.suites import members

        members(self.suite)  # an unknown suite fails before anything runs
        if not self.encoders:
            raise FlowclipError("encoders-suite: give encoders={name: {model: ..., pretrained: ...}}")
        for name, enc in self.encoders.items():
            unknown = sorted(set(enc) - SUITE_KEYS)
            if unknown or "model" not in enc:
                raise FlowclipError(f"encoders.{name}: give model (and {sorted(SUITE_KEYS - {'model'})}); "
                                    f"unknown keys {unknown}")  # fmt: skip
        if self.features not in ("global", "all"):
            raise FlowclipError(f"features: global or all, got {self.features!r}")
        if (self.standins is None) == (not self.eval):
            raise FlowclipError("encoders-suite: give eval={image root: [manifests]}, or standins={...}, not both")


def benchmarks(cfg: EncodersSuiteConfig) -> list[str]:
    """The benchmarks the study scores: the suite's members, then the recognition ones."""
    from ..scoring.suites import members

    return list(dict.fromkeys([b for _, b, _ in members(cfg.suite)] + list(cfg.recognition)))


def inputs(cfg: EncodersSuiteConfig, log) -> tuple[dict[str, list[str]], dict[str, str]]:
    """(image root -> the manifests of the study's benchmarks under it, each benchmark
    absent with its reason); the stand-ins built first when configured."""
    if cfg.standins is not None:
        return standins(cfg, log)
    where = planned(cfg)[0]
    found: dict[str, list[str]] = {}
    for root, paths in cfg.eval.items():
        for path in _parquets(paths):
            if path in where.values():
                found.setdefault(root, []).append(path)
    return found, {b: "no manifest among eval" for b in benchmarks(cfg) if b not in where}


def planned(cfg: EncodersSuiteConfig) -> tuple[dict[str, str], dict[str, str]]:
    """(benchmark -> its manifest, benchmark -> why absent), building nothing: with
    stand-ins, where each will be written."""
    from ..datasets.paper_standin import CLASSIFICATION, EVAL, RETRIEVAL
    from ..manifest import Manifest

    where: dict[str, str] = {}
    if cfg.standins is not None:
        can = set(EVAL) | set(CLASSIFICATION) | set(RETRIEVAL) | {"sugarcrepe"}
        where = {b: os.path.join(cfg.out, "manifests", f"{b}.parquet") for b in benchmarks(cfg) if b in can}
        why = "no synthetic stand-in (datasets/paper_standin.py)"
        return where, {b: why for b in benchmarks(cfg) if b not in where}
    wanted = set(benchmarks(cfg))
    for paths in cfg.eval.values():
        for path in _parquets(paths):
            bench = Manifest.read(path).meta.get("benchmark")
            if bench in wanted:
                if bench in where:
                    raise FlowclipError(f"{bench}: two manifests ({where[bench]}, {path}); give one")
                where[bench] = path
    return where, {b: "no manifest among eval" for b in benchmarks(cfg) if b not in where}


def _parquets(paths: list[str]) -> list[str]:
    out = []
    for p in paths:
        if os.path.isdir(p):
            out += sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".parquet"))
        elif os.path.isfile(p):
            out.append(p)
        else:
            raise FlowclipError(f"eval: {p} is neither a manifest nor a folder of them")
    return out


def standins(cfg: EncodersSuiteConfig, log) -> tuple[dict[str, list[str]], dict[str, str]]:
    """The synthetic world in OUT/world and a stand-in manifest per benchmark it can
    stand in for (OUT/manifests/<benchmark>.parquet), each built once."""
    from ..datasets import get
    from ..datasets.base import RowErrors
    from .spread import one_at_a_time

    where, absent = planned(cfg)
    world = os.path.join(cfg.out, "world")
    os.makedirs(os.path.join(cfg.out, "manifests"), exist_ok=True)
    with one_at_a_time(cfg.out, "standins"):  # ranks build the world once
        for bench, path in where.items():
            if not os.path.exists(path):
                opts = {"as": bench, **{k: str(v) for k, v in (cfg.standins or {}).items()}}
                get("paper-standin").build(world, path, RowErrors("fail"), **opts)
                log(f"stand-in {bench}: {path}")
    return {os.path.join(world, "images"): list(where.values())}, absent


def score_encoder(cfg, name: str, found: dict[str, list[str]], log, progress: bool) -> None:
    """One encoder: its store extracted from every manifest, then scored with CLIP."""
    from ..devices import resolve_device
    from ..extraction.encoders import resolve
    from ..extraction.extract import run_extract
    from ..scoring.score import run_score
    from ..store import FeatureStore

    out = os.path.join(cfg.out, "scores", name)
    if os.path.exists(os.path.join(out, "results.json")):
        log(f"{name}: scored ({out})")
        return
    entry = {k: v for k, v in cfg.encoders[name].items() if k != "published_as"}
    enc = resolve(encoder_spec(entry))
    device = resolve_device(cfg.device)
    store = FeatureStore.open_or_create(os.path.join(cfg.cache, name), enc.config)
    for root, manifests in found.items():
        run_extract(store, enc, manifests, root, device=device, batch_size=cfg.batch_size, workers=cfg.workers,
                    features=cfg.features, progress=progress, log=lambda m: log(f"  {m}"))  # fmt: skip
    store.refresh()
    run_score(store, [m for ms in found.values() for m in ms], ["clip"], out, device=device, bootstrap_draws=0,
              figures=cfg.figures, progress=progress, log=lambda m: log(f"  {m}"))  # fmt: skip


def run(cfg: EncodersSuiteConfig, dry_run: bool, jobs: int, log=print, progress: bool = True):
    from .spread import claim, my_groups, one_at_a_time, study_rank

    names = list(cfg.encoders)
    if dry_run:
        from .suite_plan import print_plan

        print_plan(cfg, *planned(cfg), log)
        return None
    claim_folder(cfg.out)
    found, absent = inputs(cfg, log)
    if not found:
        raise FlowclipError(f"encoders-suite: none of {', '.join(benchmarks(cfg))} among the manifests given")
    rank, world = study_rank()
    for name in my_groups(names, rank, world):
        if claim(os.path.join(cfg.out, "scores", name), rank, world):
            score_encoder(cfg, name, found, log, progress)
    if not all(os.path.exists(os.path.join(cfg.out, "scores", n, "results.json")) for n in names):
        log(f"rank {rank}: other ranks are still scoring; the last to finish writes the table (or rerun)")
        return None
    with one_at_a_time(cfg.out, "summary"):
        return write_summary(cfg, absent, log)


def suite_rows(cfg, absent: dict[str, str]) -> dict[str, dict]:
    """name -> {"suite": the suite table's row (real images, CLIP), "recognition": mean
    zero-shot top-1 or None, "results": the per-benchmark results}."""
    from ..scoring.suites import suite_table

    rows = {}
    for name in cfg.encoders:
        res = json.load(open(os.path.join(cfg.out, "scores", name, "results.json")))["results"]["real|clip"]
        top1 = [res[b]["top1"] for b in cfg.recognition if "top1" in res.get(b, {})]
        rows[name] = {
            "suite": suite_table(cfg.suite, {"real|clip": res}, absent)["real|clip"],
            "recognition": sum(top1) / len(top1) if top1 and len(top1) == len(cfg.recognition) else None,
            "results": res,
        }
    return rows


def write_summary(cfg, absent: dict[str, str], log) -> dict:
    from ..scoring.report import table
    from ..scoring.suites import members

    rows = suite_rows(cfg, absent)
    columns = list(dict.fromkeys(c for c, _, _ in members(cfg.suite)))
    header = ["encoder", "model", "pretrained", *columns, f"{cfg.suite} mean", "zero-shot top-1"]
    body, lacking, marked = [], [], []  # lacking: the encoders whose suite mean lacks a column
    for name, r in rows.items():
        enc, su = cfg.encoders[name], r["suite"]
        cells = [_pct(su[c]["value"]) for c in columns] + [_pct(su["mean"]["value"]), _pct(r["recognition"])]
        body.append([name, enc["model"], enc.get("pretrained", "none"), *cells])
        if su["mean"]["missing"] and su["mean"]["value"] is not None:
            lacking.append(name)
        # a figure resting on part of a benchmark's records is marked † (scoring/suites.py: "partial")
        marks = [("†" if su[c]["partial"] else "") for c in columns] + ["*" * (name in lacking), ""]
        marks[-2] += "†" if su["mean"]["partial"] else ""
        marked.append([*body[-1][:3], *[v + m if v else v for v, m in zip(cells, marks)]])
    md = [f"# Encoders on the {cfg.suite} suite (frozen, CLIP scorer, real images, %)", ""]
    if cfg.standins is not None:
        md += ["**Stand-ins**: every benchmark is the synthetic world under its name (datasets/paper_standin.py): "
               "the numbers show the pipeline, not the benchmarks.", ""]  # fmt: skip
    md += table(header, marked) + [""]
    md += [f"- {b}: absent ({why})" for b, why in absent.items()]
    md += ["- \\*: the mean of the columns present, not of the whole suite"] * bool(lacking)
    md += ["- †: resting on part of a benchmark's records (its results say which)"] * any(
        r["suite"]["mean"]["partial"] for r in rows.values()
    )
    md += [f"- zero-shot top-1: the mean over {', '.join(cfg.recognition)} (empty where one is absent)"]
    write_text(os.path.join(cfg.out, "summary.md"), "\n".join(md) + "\n")
    write_csv(os.path.join(cfg.out, "summary.csv"), [header + ["mean lacks columns", "partial members"]] + [
        [*b, ";".join(rows[b[0]]["suite"]["mean"]["missing"]), ";".join(rows[b[0]]["suite"]["mean"]["partial"])]
        for b in body])  # fmt: skip
    summary = {"suite": cfg.suite, "absent": absent, "rows": {n: {k: v for k, v in r.items() if k != "results"}
                                                             for n, r in rows.items()}}  # fmt: skip
    write_text(os.path.join(cfg.out, "summary.json"), json.dumps(summary, indent=1) + "\n")
    scatter(cfg, rows)  # the study's own figure, always (figures: the scores' PNGs)
    if cfg.published or cfg.published_individual:
        from .vl_compo import write_comparison

        write_comparison(cfg, rows)  # OUT/published.md, published.csv
    log(f"wrote {cfg.out}/summary.md, summary.csv, summary.png")
    return summary


def _pct(v) -> str:
    return "" if v is None else f"{100 * v:.2f}"


def scatter(cfg, rows: dict) -> None:
    """vl_compo's figure: each encoder's suite mean against its zero-shot top-1."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .. import outputs

    pts = [(n, r["recognition"], r["suite"]["mean"]["value"]) for n, r in rows.items()]
    pts = [(n, 100 * x, 100 * y) for n, x, y in pts if x is not None and y is not None]
    fig, ax = plt.subplots(figsize=(5, 4))
    for n, x, y in pts:
        ax.scatter(x, y)
        ax.annotate(n, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel(f"zero-shot top-1 (%): {', '.join(cfg.recognition)}")
    ax.set_ylabel(f"{cfg.suite} suite mean (%)")
    ax.set_title("compositionality vs recognition" + (" (stand-ins)" if cfg.standins is not None else ""))
    fig.tight_layout()
    outputs.atomic_write(os.path.join(cfg.out, "summary.png"), lambda p: fig.savefig(p, format="png", dpi=120))
    plt.close(fig)


CONFIG = EncodersSuiteConfig
