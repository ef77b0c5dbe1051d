"""The whole paper as one plan (`flowclip run paper`; docs/paper.md).

Steps in the order they run: manifests (one per official source, or the synthetic
stand-ins), feature stores (one per encoder, one extract command per image folder),
studies, the explorer, adapted encoders (each command one that flowclip already runs,
resumable), then the paper-layout tables and figures. Each step knows the paths it needs
and the path it makes, so the plan can say which inputs exist, which are missing (with
the download or the command that provides each), what is done, the disk each store takes
and, where measured, its time (budget.py). --dry-run prints the plan; without it
runner.py runs the steps and inputs.py writes OUT/paper/."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from shlex import quote as q
from typing import Any

from ..errors import FlowclipError
from .checkpoints import extract_model, how_to_get, loadable, release, standin_command
from .paths import TRAINING_SOURCES, manifest_path, store_path, table_of

COCO_RECIPE = {"epochs": 5, "batch_size": 32, "lr": 8.0e-5, "tau_p": 0.05}  # §4.1: COCO, five epochs
CC3M_RECIPE = {"epochs": 3, "batch_size": 32, "lr": 8.0e-5, "tau_p": 0.06}  # §4.1: CC3M-100K, three epochs
LABCLIP = {"head": "labclip", "batch_size": 1024, "lr": 1.0e-3, "epochs": 10}  # the zoo's LABCLIP row


@dataclass
class PaperConfig:
    kind: str
    out: str = "studies/paper"
    data: str = "/data"
    manifests: str = "manifests"
    cache: str = "cache"
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    device: str = "cuda"
    sources: dict[str, dict[str, Any]] = field(default_factory=dict)
    encoders: dict[str, dict[str, Any]] = field(default_factory=dict)
    checkpoints: dict[str, str] = field(default_factory=dict)
    measure: bool = True  # time each encoder's forward and each head's step on `device` (dry run)
    recipes: dict[str, dict[str, Any]] = field(default_factory=dict)  # a training source's recipe, over §4.1's
    bootstrap: int = 10000  # Tab. 2's paired bootstrap draws
    adapt_options: dict[str, Any] = field(default_factory=dict)  # further `flowclip adapt` flags (workers: 0)
    standins: dict[str, int] | None = None  # the reduced run: every source the synthetic world (paper-standin)
    explorer_records: int = 40  # the records each explorer shows (flowclip explain --max)
    figures: bool = True  # the studies' and scores' own PNGs (margins, CREPE curves); OUT/paper's are always drawn

    def __post_init__(self):
        unknown = set(self.recipes) - set(TRAINING_SOURCES)
        if unknown:
            raise FlowclipError(f"recipes: {sorted(unknown)} are not training sources ({', '.join(TRAINING_SOURCES)})")
        for name, enc in self.encoders.items():
            if not {"model", "pretrained"} <= set(enc) or table_of(enc) not in (5, 6):
                raise FlowclipError(f"encoders.{name}: give model, pretrained (and table: 5 or 6), got {enc}")
        if self.standins is not None and set(self.standins) - {"seed", "train_scenes", "eval_scenes"}:
            raise FlowclipError(f"standins: give seed, train_scenes, eval_scenes, got {sorted(self.standins)}")

    def recipe(self, source: str) -> dict[str, Any]:
        """A training source's recipe: §4.1's (COCO five epochs, tau_p 0.05; CC3M-100K three,
        tau_p 0.06) with `recipes:` over it."""
        return {**(COCO_RECIPE if source == "coco-train" else CC3M_RECIPE), **self.recipes.get(source, {})}


@dataclass
class Step:
    kind: str  # manifest | extract | study | adapt | score | tables
    name: str
    feeds: str  # the paper's tables and figures it serves
    makes: str  # the path it writes ("" for a step that writes nothing yet)
    commands: list[str]
    needs: list[str] = field(default_factory=list)  # paths that must exist (raw inputs or earlier steps' outputs)
    raw: dict[str, str] = field(default_factory=dict)  # a raw input's path: how to get it
    note: str = ""
    disk: int | None = None  # bytes it writes (stores), an estimate
    seconds: float | None = None  # an estimate, measured on random weights / features
    how: str = ""  # how `seconds` was obtained
    train: list[tuple[str, dict, int]] = field(default_factory=list)  # (encoder, head settings, runs) it trains
    source: str = ""  # the training source its runs read
    done_when: list[str] = field(default_factory=list)  # per command: a path that says it has run ("": rerun it)
    mkdir: str = ""  # a folder the runner makes first (the stand-in world)

    @property
    def finished(self) -> bool:
        """Its output is complete: the manifest, a study's summary.json, scores' results.json
        (a store is never called finished: extract adds what it lacks and skips the rest)."""
        marker = {"manifest": "", "study": "summary.json", "score": "results.json", "adapt": "results.json"}
        marker["explain"] = "explorer.html"
        marker["standin"] = ""  # its checkpoint file
        if self.kind not in marker or not self.makes:
            return False
        return os.path.exists(os.path.join(self.makes, marker[self.kind]) if marker[self.kind] else self.makes)


def _q(x) -> str:
    """A value as a shell-safe flowclip override (YAML flow style)."""
    import json

    return "'" + json.dumps(x, separators=(", ", ": ")).replace("'", "'\\''") + "'"


def manifest_steps(cfg: PaperConfig) -> list[Step]:
    from ..catalogue import load_catalogue

    catalogue = load_catalogue()
    steps = []
    for name, src in cfg.sources.items():
        if name not in catalogue:
            raise FlowclipError(
                f"sources.{name}: no such benchmark or training source ({', '.join(sorted(catalogue))})"
            )
        unknown = set(src) - {"source", "images", "options"}
        if unknown or "source" not in src or "images" not in src:
            raise FlowclipError(f"sources.{name}: give source and images (and options), got {sorted(src)}")
        entry, raw = catalogue[name], os.path.join(cfg.data, src["source"])
        if cfg.standins is not None:
            steps.append(_standin_step(cfg, name, raw))
            continue
        options = "".join(f" --option {q(_opt(cfg, o))}" for o in src.get("options", []))
        get = f"download {entry['source']} ({', '.join(entry.get('files') or [])}) to {raw}"
        steps.append(
            Step(
                "manifest", name, "manifest", manifest_path(cfg, name),
                [f"flowclip manifest build {name} --source {q(raw)} --out {q(manifest_path(cfg, name))}{options}"],
                needs=[raw], raw={raw: get},
            )
        )  # fmt: skip
    return steps


def _standin_step(cfg: PaperConfig, name: str, world: str) -> Step:
    """The reduced run's manifest: the synthetic world's records under the paper name
    (flowclip_cache/datasets/paper_standin.py), the world generated in `world` first."""
    if name.startswith("synthetic-"):  # the world's own image-choice and group sets, under their own names
        opts = "".join(f" --option {k}={v}" for k, v in sorted((cfg.standins or {}).items()))
        cmd = f"flowclip manifest build {name} --source {q(world)} --out {q(manifest_path(cfg, name))}{opts}"
        return Step("manifest", name, "manifest (synthetic, the field's kinds)", manifest_path(cfg, name), [cmd],
                    mkdir=world, note="the synthetic world's stand-in for image-choice and group tasks")  # fmt: skip
    opts = "".join(f" --option {k}={v}" for k, v in sorted({"as": name, **(cfg.standins or {})}.items()))
    cmd = f"flowclip manifest build paper-standin --source {q(world)} --out {q(manifest_path(cfg, name))}{opts}"
    return Step("manifest", name, "manifest (synthetic stand-in)", manifest_path(cfg, name), [cmd], mkdir=world,
                note="a stand-in: the synthetic world's records, scored as this benchmark")  # fmt: skip


def _opt(cfg: PaperConfig, option: str) -> str:
    """KEY=PATH[,PATH...] with each path under `data`."""
    key, _, value = option.partition("=")
    return f"{key}=" + ",".join(os.path.join(cfg.data, v) for v in value.split(","))


def extract_commands(cfg: PaperConfig, store: str, model: str, pretrained: str, names: list[str]) -> list[str]:
    """One extract command per image folder (a command takes one --image-root)."""
    by_root: dict[str, list[str]] = {}
    for n in names:
        by_root.setdefault(os.path.join(cfg.data, cfg.sources[n]["images"]), []).append(manifest_path(cfg, n))
    return [
        f"flowclip extract --store {q(store)} --model {q(model)} --pretrained {q(pretrained)} --device {cfg.device} "
        + " ".join(f"--manifest {q(m)}" for m in manifests)
        + f" --image-root {q(root)}"
        for root, manifests in by_root.items()
    ]


def eval_names(cfg: PaperConfig) -> list[str]:
    return [n for n in cfg.sources if n not in TRAINING_SOURCES]


def extract_steps(cfg: PaperConfig) -> list[Step]:
    evals, steps = eval_names(cfg), []
    for i, (name, enc) in enumerate(cfg.encoders.items()):
        # the first encoder (ViT-B/32) is the paper's main one: both training sources
        train = [s for s in TRAINING_SOURCES if s in cfg.sources and (i == 0 or s == "coco-train")]
        names = train + evals
        cmds = extract_commands(cfg, store_path(cfg, name), enc["model"], enc["pretrained"], names)
        feeds = "Tabs. 1-4, 7; Figs. 3, 7" if i == 0 else f"Tab. {table_of(enc)}"
        needs = [manifest_path(cfg, n) for n in names]
        steps.append(Step("extract", name, feeds, store_path(cfg, name), cmds, needs=needs, note=_encoder_note(enc)))
    for name, ckpt in cfg.checkpoints.items():
        path = os.path.join(cfg.data, ckpt)
        base = next(iter(cfg.encoders.values()), {"model": "ViT-B-32", "pretrained": "openai"})
        if cfg.standins is not None:
            steps.append(_standin_checkpoint(cfg, name, path))
        weights, make, made = loadable(cfg, name, path, base)
        model = extract_model(cfg, name, base["model"])
        cmds = make + extract_commands(cfg, store_path(cfg, name), model, weights, evals)
        done = made + [""] * (len(cmds) - 1)
        steps.append(
            Step("extract", name, release(name).tables, store_path(cfg, name), cmds, done_when=done,
                 needs=[path, *[manifest_path(cfg, n) for n in evals]],
                 raw={} if cfg.standins else {path: how_to_get(name, path)})
        )  # fmt: skip
    return steps


def _standin_checkpoint(cfg: PaperConfig, name: str, path: str) -> Step:
    """The reduced run's released checkpoint. At FOLDER/encoder.safetensors: the main encoder
    fine-tuned under hard negatives (NegCLIP-style, `adapt --head none`), as FSC-CLIP's is,
    one epoch; any other path: a random stand-in in the release's own file form."""
    enc = next(iter(cfg.encoders.values()))
    seed = 1000  # not one of the NegCLIP rows' seeds: the stand-in is a checkpoint of its own
    note = "a stand-in for the released checkpoint"
    if os.path.basename(path) != "encoder.safetensors":  # each release a stand-in of its own
        cmd = standin_command(name, path, enc, seed + list(cfg.checkpoints).index(name))
        return Step("standin", f"{name}-standin", f"{release(name).tables} (stand-in checkpoint)", path, [cmd],
                    done_when=[path], note=note)  # fmt: skip
    src = "cc3m-train" if "cc3m" in name and "cc3m-train" in cfg.sources else "coco-train"
    cmd = _adapt_command(cfg, enc, src, "--head none", {**cfg.recipe(src), "epochs": 1}, seed, os.path.dirname(path))
    done = os.path.join(os.path.dirname(path), "DONE")
    return Step("standin", f"{name}-standin", f"{release(name).tables} (stand-in checkpoint)", path, [cmd],
                needs=[manifest_path(cfg, src)], done_when=[done], note=note)  # fmt: skip


def _encoder_note(enc: dict) -> str:
    model = enc["model"]
    if "SigLIP" in model or model.startswith("blip:"):
        return 'needs pip install "flowclip[hf]"'
    return ""


def _eval_folder(cfg: PaperConfig) -> str:
    return os.path.join(cfg.manifests, "eval") + os.sep


def _study(cfg: PaperConfig, pipeline: str, name: str, feeds: str, store: str, train: str, runs, **overrides) -> Step:
    out = os.path.join(cfg.out, name)
    args: dict[str, Any] = {"out": out, **({"store": store} if store else {})}
    args |= dict(train=manifest_path(cfg, train), eval=[_eval_folder(cfg)], seeds=cfg.seeds, device=cfg.device)
    args |= {} if cfg.figures else {"figures": False}
    args.update(overrides)
    cmd = f"flowclip run {pipeline} " + " ".join(
        q(f"{k}={v}") if isinstance(v, str) else f"{k}={_q(v)}" for k, v in args.items()
    )
    needs = ([store] if store else []) + [manifest_path(cfg, train)] + [manifest_path(cfg, n) for n in eval_names(cfg)]
    return Step("study", name, feeds, out, [cmd], needs=needs, train=runs, source=train)


def study_steps(cfg: PaperConfig) -> list[Step]:
    main = next(iter(cfg.encoders), None)
    if main is None:
        return []
    b32 = store_path(cfg, main)
    n = len(cfg.seeds)
    coco = cfg.recipe("coco-train")
    flow, glob = {"head": "flow", **coco}, {"head": "global", **coco}
    steps = [
        _study(cfg, "ablation", "tab2-coco", "Tab. 2; Tab. 1 (frozen, COCO); Tab. 4 (matched controls); Tab. 7 (COCO); "
               "Figs. 3, 7", b32, "coco-train", [(main, glob, 2 * n), (main, flow, 2 * n)],
               controls=["real", "shuffle", "fixed"], train_config=coco, bootstrap=cfg.bootstrap,
               training_free=["filip-score"]),  # our row beside Tab. 2, not the paper's
        _study(cfg, "sensitivity", "tab3", "Tab. 3", b32, "coco-train", [(main, flow, 8 * n)],
               train_config=coco),
    ]  # fmt: skip
    if "cc3m-train" in cfg.sources:
        heads = {"global": {"head": "global", "cimr": 0.0}, "flow_hnb_cimr": {"head": "flow", "cimr": 0.1}}
        steps.append(
            _study(cfg, "ablation", "tab1-cc3m", "Tab. 1 (frozen, CC3M); Tab. 7 (CC3M)", b32, "cc3m-train",
                   [(main, {"head": h["head"], **cfg.recipe("cc3m-train")}, n) for h in heads.values()],
                   heads=heads, train_config=cfg.recipe("cc3m-train"), bootstrap=cfg.bootstrap)
        )  # fmt: skip
    for src in (s for s in TRAINING_SOURCES if s in cfg.sources):
        short = src.split("-")[0]
        steps.append(
            _study(cfg, "ablation", f"tab1-labclip-{short}", f"Tab. 1 (LABCLIP, {short.upper()})"
                   + ("; Tab. 4 (controls)" if short == "coco" else ""), b32, src, [(main, LABCLIP, n)],
                   heads={"labclip": LABCLIP}, compare=[], bootstrap=0,
                   **({"controls": ["real", "shuffle", "fixed"]} if short == "coco" else {}))
        )  # fmt: skip
    rest = {n: e for n, e in list(cfg.encoders.items())[1:]}  # the main encoder's rows are Tab. 2's runs
    for pipeline, name, table in (("backbones", "tab6", 6), ("encoders", "tab5", 5)):
        chosen = {n: {k: v for k, v in e.items() if k != "table"} for n, e in rest.items() if table_of(e) == table}
        if not chosen:
            continue
        encs = {n: {**e, "store": store_path(cfg, n)} for n, e in chosen.items()}
        runs = [(e, h, n) for e in encs for h in (glob, flow)]
        feeds = "Tab. 6" if name == "tab6" else "Tab. 5"
        step = _study(cfg, pipeline, name, feeds, "", "coco-train", runs, encoders=encs, train_config=coco)
        step.needs = [e["store"] for e in encs.values()] + step.needs
        if name == "tab6":
            step.note = f"its {main} rows are tab2-coco's global and flow_hnb_cimr runs (same settings)"
        steps.append(step)
    return steps


def explain_steps(cfg: PaperConfig) -> list[Step]:
    """The explorer of Figs. 4-8 (`flowclip explain`): CLIP and Tab. 2's complete Flow-CLIP
    (first seed) on every candidate-set benchmark, the records whose decision changed, one
    explorer per image folder (a command shows images from one root)."""
    from ..datasets import get
    from ..studies.study import RunSpec

    main = next(iter(cfg.encoders), None)
    if main is None or not cfg.seeds:
        return []
    tab2 = os.path.join(cfg.out, "tab2-coco")
    flow = os.path.join(tab2, "runs", RunSpec("", cfg.seeds[0], {"head": "flow", "cimr": 0.1}).folder)
    by_root: dict[str, list[str]] = {}
    for n in eval_names(cfg):
        if get(n).kind == "candidates":
            by_root.setdefault(os.path.join(cfg.data, cfg.sources[n]["images"]), []).append(n)
    steps = []
    for root, names in by_root.items():
        out = os.path.join(cfg.out, "explorer", names[0])
        cmd = (
            f"flowclip explain --store {q(store_path(cfg, main))} "
            + " ".join(f"--manifest {q(manifest_path(cfg, n))}" for n in names)
            + f" --scorer clip --scorer {q('flow_hnb_cimr=' + flow)} --records changed --max {cfg.explorer_records}"
            f" --image-root {q(root)} --device {cfg.device} --out {q(out)}"
        )
        needs = [tab2, *[manifest_path(cfg, n) for n in names]]
        steps.append(Step("explain", names[0], "Figs. 4-8 (explorer)", out, [cmd], needs=needs,
                          done_when=[os.path.join(out, "explorer.html")], note=", ".join(names)))  # fmt: skip
    return steps


def adapted_steps(cfg: PaperConfig) -> list[Step]:
    """Tab. 1's adapted rows, per training source and seed: `flowclip adapt` (Flow-CLIP:
    --head flow; NegCLIP: --head none, the encoders alone under hard negatives), the
    adapted encoder's store, then its scores (as CLIP for NegCLIP, with its head for Flow-CLIP)."""
    main = next(iter(cfg.encoders.items()), None)
    if main is None:
        return []
    model = main[1]["model"]
    steps = []
    for src in (s for s in TRAINING_SOURCES if s in cfg.sources):
        short = src.split("-")[0]
        for row, head in (("flow", "--head flow --cimr 0.1"), ("negclip", "--head none")):
            for seed in cfg.seeds:
                run = os.path.join(cfg.out, "adapted", f"{row}-{short}-s{seed}")
                store = store_path(cfg, os.path.join("adapted", f"{row}-{short}-s{seed}"))  # never inside a study
                adapt = _adapt_command(cfg, main[1], src, head, cfg.recipe(src), seed, run)
                cmds = [
                    adapt,
                    *extract_commands(cfg, store, model, os.path.join(run, "encoder.safetensors"), eval_names(cfg)),
                ]
                scorer = "--scorer clip" if row == "negclip" else f"--scorer clip --scorer {q(f'flow={run}')}"
                cmds.append(
                    f"flowclip score --store {q(store)} --manifests {q(_eval_folder(cfg))} {scorer} "
                    f"--device {cfg.device} --bootstrap {cfg.bootstrap}{_no_figures(cfg)} --out {q(run + '-scores')}"
                )
                label = "NegCLIP" if row == "negclip" else "Flow-CLIP, encoders adapted"
                needs = [manifest_path(cfg, src)] + [manifest_path(cfg, n) for n in eval_names(cfg)]
                scored = os.path.join(f"{run}-scores", "results.json")
                done = [os.path.join(run, "DONE"), *[""] * (len(cmds) - 2), scored]  # extract: rerun (it resumes)
                steps.append(Step("adapt", f"{row}-{short}-s{seed}", f"Tab. 1 ({label}, {short.upper()})",
                                  f"{run}-scores", cmds, needs=needs, done_when=done))  # fmt: skip
    for name in cfg.checkpoints:
        out = os.path.join(cfg.out, f"{name}-scores")
        cmd = (
            f"flowclip score --store {q(store_path(cfg, name))} --manifests {q(_eval_folder(cfg))} --scorer clip "
            f"--controls real,shuffle,fixed --device {cfg.device} --bootstrap 0{_no_figures(cfg)} --out {q(out)}"
        )
        steps.append(Step("score", name, release(name).tables, out, [cmd], needs=[store_path(cfg, name)]))
    return steps


def _no_figures(cfg: PaperConfig) -> str:
    return "" if cfg.figures else " --no-figures"


def _adapt_command(cfg: PaperConfig, enc: dict, src: str, head: str, recipe: dict, seed: int, out: str) -> str:
    """`flowclip adapt` of the main encoder on a training source; --resume starts a run not
    begun and continues one a crash cut short (the runner skips a finished one)."""
    flags = {**recipe, **cfg.adapt_options, "seed": seed}
    settings = " ".join(f"--{k.replace('_', '-')} {q(str(v))}" for k, v in flags.items())
    images = os.path.join(cfg.data, cfg.sources[src]["images"])
    return (
        f"flowclip adapt --model {q(enc['model'])} --pretrained {q(enc['pretrained'])} --train "
        f"{q(manifest_path(cfg, src))} --image-root {q(images)} {head} {settings} --device {cfg.device} "
        f"--resume --quiet --out {q(out)}"
    )


def table_step(cfg: PaperConfig, steps: list[Step]) -> Step:
    """The paper-layout tables and figures, from every step's output."""
    return Step(
        "tables", "paper", "Tabs. 1-7, §4.3, Figs. 3 and 7 in the paper's layout (and CSV), the published numbers "
        "beside ours", os.path.join(cfg.out, "paper"), [],
        needs=[s.makes for s in steps if s.kind in ("study", "adapt", "score", "explain")],
        note="written by `flowclip run paper` (this config) once every step is done: by the last rank to finish",
    )  # fmt: skip


def plan(cfg: PaperConfig) -> list[Step]:
    steps = [*manifest_steps(cfg), *extract_steps(cfg), *study_steps(cfg), *explain_steps(cfg), *adapted_steps(cfg)]
    return [*steps, table_step(cfg, steps)]


def run(cfg: PaperConfig, dry_run: bool, jobs: int, log=print, progress: bool = True):
    """--dry-run: the plan. Otherwise every step that is not done and has its inputs, in
    order (runner.py; spread over torchrun's or a Slurm array's ranks), then the
    paper-layout tables from what the steps wrote."""
    from ..studies.spread import one_at_a_time
    from ..studies.study import claim_folder
    from .budget import print_plan
    from .inputs import write_tables
    from .runner import execute
    from .sizes import print_sizes

    if dry_run:
        steps = plan(cfg)
        print_plan(cfg, steps, log)
        print_sizes(cfg, steps, log)
        return None
    claim_folder(cfg.out)
    if execute(cfg, plan, log):
        with one_at_a_time(cfg.out, "paper-tables"):
            write_tables(cfg, log)
    return None


CONFIG = PaperConfig
