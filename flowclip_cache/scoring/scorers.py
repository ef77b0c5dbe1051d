"""What flowclip score scores with and on: scorers (the frozen encoder or a finished
run folder), the manifests to score and each one's Scoring (its benchmark's, one its
metadata declares, or the generic one), and the Real/Shuffle/Fixed image controls."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

import numpy as np

from ..datasets import all_benchmarks
from ..datasets import get as get_benchmark
from ..datasets.base import Scoring
from ..errors import FlowclipError
from ..head_specs import training_free_kinds
from ..heads import Head, build_head
from ..manifest import Manifest
from ..store import FeatureStore
from ..training.train_config import recorded_settings
from .scorer_specs import CONTROLS, scorer_folder  # noqa: F401  (CONTROLS: score.py's callers import it here)


@dataclass
class Scorer:
    method: str  # runs of one method (seeds) share this name
    run: str  # unique label
    head: Head
    head_sha256: str  # of the weights file; "frozen" for clip
    train: dict | None = None  # the run's training settings (config.json); None for clip


def load_scorers(specs: list[str], store: FeatureStore, device: str, labels: str = "name") -> list[Scorer]:
    """'clip', a run folder, or 'name=run folder' (runs sharing a name are seeds of one method).
    Results name a scorer by its label: the NAME the user gave when no other scorer shares it
    (`mine=runs/x` -> mine), else the run folder's name; labels="folder" keeps the folder's
    name for every run (a study, whose runs are its folders)."""
    from ..heads.base import check_token_mask
    from ..training.run_folder import load_head

    out, seen, given = [], set(), []
    for spec in specs:
        name, path, hub = scorer_folder(spec)
        if path in training_free_kinds():  # the encoder's own features, scored (a kind, never a folder)
            scorer = Scorer(name or path, path, build_head(path, store.meta["dim"]).to(device), "frozen")
        else:
            head, cfg = load_head(path, device, store_dim=store.meta["dim"])
            if cfg["store_fingerprint"] != store.fingerprint:
                raise FlowclipError(
                    f"--scorer {spec}: trained on encoder {cfg['store_fingerprint'][:12]}, this store "
                    f"holds {store.fingerprint[:12]}; refused"
                )
            sha = hashlib.sha256(open(os.path.join(path, "head.safetensors"), "rb").read()).hexdigest()
            label = name if hub else os.path.basename(os.path.normpath(path))
            scorer = Scorer(name or label, label, head, sha, cfg["train"])
        check_token_mask(type(scorer.head), store.encoder_config["token_mask"], f"--scorer {spec}")
        out.append(scorer)
        given.append(bool(name))
    if labels == "name":  # a NAME the user gave to one scorer alone labels it
        names = [s.method for s in out]
        for s, named in zip(out, given):
            if named and names.count(s.method) == 1:
                s.run = s.method
    for s in out:
        if s.run in seen:
            raise FlowclipError(f"--scorer: two scorers named {s.run!r}")
        seen.add(s.run)
    _same_method(out)
    return out


def _same_method(scorers: list[Scorer]) -> None:
    """Runs grouped under one name are seeds of one method: the same head and settings,
    differing in the seed only."""
    by_name: dict = {}
    for sc in scorers:
        if sc.train is None:
            continue
        settings = {k: v for k, v in recorded_settings(sc.train).items() if k != "seed"}
        by_name.setdefault(sc.method, []).append((sc.run, settings))
    for name, runs in by_name.items():
        first_run, first = runs[0]
        for run, settings in runs[1:]:
            differ = sorted(k for k in set(first) | set(settings) if first.get(k) != settings.get(k))
            if differ:
                raise FlowclipError(
                    f"--scorer {name}=...: {first_run} and {run} are grouped as seeds of one method "
                    f"but differ in {', '.join(f'{k} ({first.get(k)} vs {settings.get(k)})' for k in differ)}; "
                    f"give them different names"
                )


def find_manifests(paths: list[str]) -> list[str]:
    out = []
    for p in paths:
        if os.path.isdir(p):
            out += sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".parquet"))
        else:
            out.append(p)
    if not out:
        raise FlowclipError(f"no manifests (*.parquet) in {', '.join(paths)}")
    return out


def evaluation_manifests(paths: list[str], log=print) -> list[Manifest]:
    """The manifests to score: files named, and the manifests of folders named. A training
    manifest met in a folder is skipped with a note (folders often hold both); one named
    explicitly is an error."""
    named = {os.path.abspath(p) for p in paths if not os.path.isdir(p)}
    out = []
    for p in find_manifests(paths):
        m = Manifest.read(p)
        if m.kind == "training" and os.path.abspath(p) not in named:
            log(f"note: skipping {p}: a training manifest (score takes evaluation manifests)")
            continue
        out.append(m)
    if not out:
        raise FlowclipError(f"no evaluation manifests in {', '.join(paths)} (only training sets)")
    return out


GENERIC = {
    "pairwise": Scoring(task="pairwise", tie_rule="wrong"),
    "candidates": Scoring(task="candidates", tie_rule="wrong"),
    "image_candidates": Scoring(task="image_candidates", tie_rule="wrong"),
    "groups": Scoring(task="groups", tie_rule="wrong"),
    "paraphrases": Scoring(task="paraphrases", tie_rule="wrong"),
}
CHOICE_KINDS = ("candidates", "image_candidates", "groups", "paraphrases")  # kinds one's own manifest may declare


def scoring_of(m: Manifest, log=None) -> tuple[str, Scoring]:
    """A manifest's task name and Scoring: its registered benchmark's, or one declared in
    its metadata ("scoring": {...}), or, for a candidates manifest that declares neither,
    the generic scoring: accuracy, pooled, a tie counted wrong (docs/manifests.md)."""
    name = m.meta.get("benchmark")
    if name and name in all_benchmarks():
        bench = get_benchmark(name)
        if bench.scoring is None or m.kind == "training":
            raise FlowclipError(
                f"{m.path}: {name} is a training set; score takes evaluation manifests "
                f"(keep training manifests out of the folders you score, or name files one by one)"
            )
        sc = bench.scoring
    elif m.kind == "training":
        raise FlowclipError(f"{m.path}: a training manifest; score takes evaluation manifests")
    elif m.kind not in CHOICE_KINDS:
        raise FlowclipError(
            f"{m.path}: {'unknown benchmark ' + repr(name) if name else 'no benchmark'} in its "
            f"flowclip.meta; a {m.kind} manifest needs a registered one "
            f"({', '.join(sorted(all_benchmarks()))})"
        )
    else:
        name = m.meta.get("name") or name or os.path.splitext(os.path.basename(m.path))[0]
        if "scoring" in m.meta:
            sc = Scoring.declared(m.meta["scoring"], f"{m.path}: flowclip.meta")
            how = "the scoring its metadata declares"
        elif m.kind != "candidates":
            sc = GENERIC[m.kind]
            how = f"generic {m.kind.replace('_', '-')} scoring, a tie counted wrong"
        else:
            two = all(len(c) == 2 for c in m.table.column("captions").to_pylist())
            sc = GENERIC["pairwise" if two else "candidates"]
            how = f"generic {'pairwise' if two else 'candidate-set'} accuracy, a tie counted wrong"
        if log is not None:
            log(f"note: {m.path} names no registered benchmark: scored as {name!r} with {how}")
    needed = {
        "candidates": ("captions", "gold"),
        "pairwise": ("captions", "gold"),
        "image_candidates": ("images", "caption", "gold"),
        "groups": ("images", "captions"),
        "paraphrases": ("positives", "negative"),
        "retrieval": ("captions",),
        "classification": ("label",),
    }[sc.task]
    kind = "candidates" if sc.task == "pairwise" else sc.task
    if m.kind != kind:
        raise FlowclipError(f"{m.path}: the {name} benchmark scores {kind} manifests; this one is {m.kind}")
    for col in needed + tuple(c for c in (sc.group_by, sc.exclude_column, *sc.report_by) if c):
        if col not in m.table.column_names:
            raise FlowclipError(f"{m.path}: the {name} benchmark needs column {col!r}, which is missing")
    return name, sc


def control_images(rec_img: np.ndarray, control: str, seed: int, task: str) -> np.ndarray:
    """Real: the record's image; Shuffle: one seeded permutation of the records' images;
    Fixed: one seeded anchor image for every record."""
    rng = np.random.default_rng([seed, int(hashlib.sha256(task.encode()).hexdigest()[:8], 16)])
    if control == "real":
        return rec_img
    if control == "shuffle":
        return rec_img[rng.permutation(len(rec_img))]
    if control == "fixed":
        return np.full_like(rec_img, rec_img[rng.integers(len(rec_img))])
    raise FlowclipError(f"unknown control {control!r}; use {', '.join(CONTROLS)}")
