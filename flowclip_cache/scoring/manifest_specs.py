"""The manifests `flowclip score` scores and each one's Scoring, read and checked without
importing torch (a training manifest, a file that is no manifest, an empty one, a task
two manifests share: refused before a head or a feature is loaded)."""

from __future__ import annotations

import os

from ..datasets import all_benchmarks
from ..datasets import get as get_benchmark
from ..datasets.base import Scoring
from ..errors import FlowclipError
from ..manifest import Manifest


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
        if bench.task_name:
            name = _task_of_dataset(m, bench.task_name)
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


def task_of(m: Manifest) -> str | None:
    """The task a registered benchmark's manifest scores as (a many-set benchmark's: from its
    dataset name), else its metadata's benchmark name."""
    name = m.meta.get("benchmark")
    if name and name in all_benchmarks() and get_benchmark(name).task_name:
        return _task_of_dataset(m, get_benchmark(name).task_name)
    return name


def _task_of_dataset(m: Manifest, fmt: str) -> str:
    """A many-set benchmark's task: its format of the manifest's "dataset" name."""
    from ..datasets._wds import DATASET_NAME

    dataset = m.meta.get("dataset")
    if not isinstance(dataset, str) or not DATASET_NAME.match(dataset):
        raise FlowclipError(f"{m.path}: flowclip.meta 'dataset' {str(dataset)[:80]!r} must be a lower-case name "
                            f"(letters, digits, . _ -): rebuild it with flowclip manifest build")  # fmt: skip
    return fmt.format(dataset=dataset)


def check_tasks(checked: list) -> None:
    """Two manifests scoring as one task are refused, saying how to tell them apart: a
    registered benchmark's name is its own (two copies are scored in two commands), a
    manifest of one's own takes its flowclip.meta 'name'."""
    names = [n for _, n, _ in checked]
    twice = sorted({n for n in names if names.count(n) > 1})
    if not twice:
        return
    registered = [n for n in twice if n in all_benchmarks()]
    paths = {n: [m.path for m, k, _ in checked if k == n] for n in twice}
    how = "give one a different flowclip.meta 'name'"
    if registered:  # (a registered benchmark's task is named by the benchmark, not by flowclip.meta)
        how = f"{', '.join(registered)}: a registered benchmark's copies are scored in a command each"
    where = "; ".join(f"{n}: {', '.join(ps)}" for n, ps in paths.items())
    raise FlowclipError(f"two manifests score as the same task ({where}); {how}")


def checked_manifests(paths: list[str], log=None) -> list:
    """(manifest, task name, Scoring) of every manifest to score, every check passed."""
    checked = [(m, *scoring_of(m, log)) for m in evaluation_manifests(paths, log or (lambda *_: None))]
    check_tasks(checked)
    return checked
