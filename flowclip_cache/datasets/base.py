"""What a benchmark file declares, and helpers for reading official files.

A benchmark file (one per benchmark, listed in ``__init__.REGISTRY``) holds everything
particular to it: ``build`` turns the official files into a manifest; ``scoring``
tells ``flowclip score`` its task kind, aggregation and tie rule. Nothing else in
flowclip knows a benchmark by name.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from dataclasses import dataclass, field
from typing import Callable

import pyarrow as pa

from ..errors import ManifestError
from ..manifest import KINDS, image_path_problem, write_manifest


@dataclass(frozen=True)
class Scoring:
    task: str  # pairwise | candidates | image_candidates | groups | paraphrases | retrieval | classification
    tie_rule: str = "wrong"  # what the official script does when gold ties a foil:
    # wrong | first (argmax: the earliest tied wins) | correct; groups: wrong (every comparison
    # strict) | second_image (a caption whose two images tie chooses the second: MMVP);
    # retrieval: wrong | topk (as torch.topk keeps the candidates: NegBench)
    aggregate: str = "mean"  # mean (pooled) | macro (over group_by) | subset_mean (over group_by)
    # | group_means (mean of the named groups in headline_groups) | nested (means of means down `nest`)
    group_by: str | None = None  # the manifest column the aggregation groups by
    min_group: int = 0  # groups with fewer records are dropped (ARO VG-Attribution: 25)
    exclude_column: str | None = None  # boolean column: records outside the official score
    report_by: tuple[str, ...] = ()  # further columns to break results down by
    report_titles: tuple[tuple[str, str], ...] = ()  # (report_by column, its title) where "per <col>" says too little
    groups: tuple[tuple[str, tuple[str, ...]], ...] = ()  # named means of group_by values (SugarCrepe Add/...)
    group_weighting: str = "groups"  # a named group's mean: "groups" (unweighted over its members) or
    # "records" (pooled over its records, i.e. weighted by subset size)
    headline_groups: tuple[str, ...] = ()  # aggregate "group_means": the named groups whose mean is the score
    # aggregate "nested": columns from the top grouping down (VL-CheckList: kind, category, source,
    # file); the score is the mean over the top groups of the means of their subgroups, and so down
    nest: tuple[str, ...] = ()
    # the official code rounds each finest group's accuracy to this many decimals before it
    # averages them (VL-CheckList: evaluate.py writes total_acc = round(acc, 4), radar.py
    # averages those); None: unrounded
    finest_digits: int | None = None
    recall_at: tuple[int, ...] = (1,)
    # cross-task means this benchmark feeds: (mean name, group name or "" for the official score);
    # binding7 = the paper's 7-task binding mean, all11 = its 11-task mean, aro = the ARO mean,
    # controls6 = Tab. 4's 6-task average, binding5 = Tabs. 5-6's binding average, sugar3 = their Sugar Avg.
    joins: tuple[tuple[str, str], ...] = ()
    # further figures the official code reports (What's Up's pair and set accuracy):
    # extra(correct [n] bool over the scored records, their manifest columns) -> {name: fraction}
    extra: Callable[[object, dict], dict] | None = None
    extra_title: str = ""
    # figures that need a calibrated match/no-match decision (VALSE's p_c, p_f, acc), computed
    # only for a scorer whose head declares a threshold (Head.decision_threshold):
    # threshold_figures(gold scores [n], foil scores [n], threshold, kept columns) -> dict
    threshold_figures: Callable[..., dict] | None = None
    threshold_title: str = ""
    # groups: which of text | image | group is the official score, and the benchmark's own
    # names for the figures (BiVLC: text -> I2T, image -> T2I, text_0 -> Ipos_2T, ...); sub_scores
    # reports the four halves (text_0, text_1, image_0, image_1) too
    headline_metric: str = "group"
    metric_names: tuple[tuple[str, str], ...] = ()
    sub_scores: bool = False
    # paraphrases: whether the benchmark has SugarCrepe++'s text-only test (TOT)
    text_only_test: bool = True
    # candidates whose captions come in bags (the manifest's `bags` column: each caption's bag;
    # gold: the gold bag): scored as sDCI pools them (metrics.pool_bags)
    pooled_bags: bool = False

    @classmethod
    def declared(cls, d: dict, source: str) -> "Scoring":
        """A Scoring declared in a manifest's flowclip.meta ("scoring": {...}), for one's own
        candidate sets (docs/manifests.md): task pairwise|candidates, tie_rule, aggregate,
        group_by, min_group, exclude_column, report_by, groups, group_weighting,
        headline_groups, recall_at. Cross-task means (joins) belong to registered benchmarks."""
        from ..errors import FlowclipError

        allowed = {
            "task": ("pairwise", "candidates", "image_candidates", "groups", "paraphrases"),
            "tie_rule": ("wrong", "first", "correct", "second_image"),
            "headline_metric": ("text", "image", "group"),
            "aggregate": ("mean", "macro", "subset_mean", "group_means"),
            "group_weighting": ("groups", "records"),
        }
        if not isinstance(d, dict):
            raise FlowclipError(f"{source}: 'scoring' must be a JSON object")
        known = {
            "task",
            "tie_rule",
            "aggregate",
            "group_by",
            "min_group",
            "exclude_column",
            "report_by",
            "groups",
            "group_weighting",
            "headline_groups",
            "recall_at",
            "headline_metric",
        }
        unknown = sorted(set(d) - known)
        if unknown:
            raise FlowclipError(f"{source}: unknown scoring keys {unknown}; known: {sorted(known)}")
        for k, choices in allowed.items():
            if k in d and d[k] not in choices:
                raise FlowclipError(f"{source}: scoring {k!r} must be one of {list(choices)}, got {d[k]!r}")
        if "task" not in d:
            raise FlowclipError(f"{source}: scoring needs 'task' (pairwise, candidates, image_candidates or groups)")
        groups, rule = d["task"] == "groups", d.get("tie_rule", "wrong")
        if (rule in ("first", "correct")) if groups else rule == "second_image":
            raise FlowclipError(
                f"{source}: tie_rule 'second_image' is for groups only; groups take wrong or second_image"
            )
        if d["task"] == "paraphrases" and rule != "wrong":
            raise FlowclipError(f"{source}: a paraphrases task compares strictly (tie_rule 'wrong'), got {rule!r}")
        if d.get("aggregate", "mean") != "mean" and not d.get("group_by"):
            raise FlowclipError(f"{source}: aggregate {d['aggregate']!r} needs 'group_by' (a column)")
        try:
            out = dict(d)
            out["report_by"] = tuple(str(c) for c in d.get("report_by", ()))
            out["groups"] = tuple((str(n), tuple(str(m) for m in ms)) for n, ms in d.get("groups", ()))
            out["headline_groups"] = tuple(str(g) for g in d.get("headline_groups", ()))
            out["recall_at"] = tuple(int(k) for k in d.get("recall_at", (1,)))
            out["min_group"] = int(d.get("min_group", 0))
        except (TypeError, ValueError) as e:
            raise FlowclipError(f"{source}: malformed scoring declaration ({e})") from None
        return cls(**out)

    def breakdowns(self) -> list[tuple[str, str]]:
        """(title, result key) of each breakdown the results tables show for this
        benchmark, in order: per group, named group means, each report_by column."""
        out = []
        if self.group_by:
            out.append((f"per {self.group_by}", f"by_{self.group_by}"))
        if self.groups:
            out.append(
                (
                    "group means" + (" (weighted by records)" if self.group_weighting == "records" else ""),
                    "named_groups",
                )
            )
        out += [
            (f"per {level}: the mean over its {below}s (means of means)", f"nested_{level}")
            for level, below in zip(self.nest[:-1], self.nest[1:])
        ]
        titles = dict(self.report_titles)
        out += [(titles.get(c, f"per {c}"), f"by_{c}") for c in self.report_by]
        if self.task in ("candidates", "image_candidates"):
            out += [(f"Recall@1 per {c}", f"recall_by_{c}") for c in self.report_by]
            out += [(f"Recall@{k} per {c}", f"recall_at{k}_by_{c}") for c in self.report_by for k in self.recall_at[1:]]
            out += [(f"ties per {c} (records whose gold ties a foil; counts)", f"ties_by_{c}") for c in self.report_by]
        if self.extra is not None:
            out.append((self.extra_title, "extra"))
        return out


@dataclass
class BuildReport:
    records: int
    images: int
    counts: dict = field(default_factory=dict)  # per subset
    skipped: list = field(default_factory=list)  # (file, line/row, reason)
    notes: list = field(default_factory=list)


@dataclass(frozen=True)
class Benchmark:
    name: str
    title: str
    kind: str  # manifest kind
    build: Callable[..., BuildReport]  # build(source, out, errors, **options)
    scoring: Scoring | None
    options: dict = field(default_factory=dict)  # option name -> help
    # a benchmark of many sets (a layout, not one dataset): each manifest's task is named by
    # this format of its metadata's "dataset" (a plain lower-case name, checked when scored)
    task_name: str = ""
    reads_urls: bool = False  # --source may be an fsspec URL (its archives read in place by ranges)


class RowErrors:
    """Bad rows: raise at once (on_error='fail') or collect for the report ('skip')."""

    def __init__(self, on_error: str = "fail"):
        if on_error not in ("fail", "skip"):
            raise ValueError(on_error)
        self.on_error = on_error
        self.skipped: list[tuple[str, str, str]] = []

    def __call__(self, path: str, where, reason: str) -> None:
        msg = f"{path}: {where}: {reason}"
        if self.on_error == "fail":
            raise ManifestError(msg + " (use --on-error skip to skip such rows)")
        self.skipped.append((path, str(where), reason))


def read_text(path: str) -> str:
    if not os.path.isfile(path):
        raise ManifestError(f"{path}: file not found (check --source)")
    raw = open(path, "rb").read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ManifestError(f"{path}: line {line}: not valid UTF-8 ({e.reason})") from e


def load_json(path: str):
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ManifestError(f"{path}: line {e.lineno}, column {e.colno}: malformed JSON ({e.msg})") from e


def read_csv(path: str, header: bool = True, delimiter: str = ",") -> list[tuple[int, dict | list]]:
    """Rows with their 1-based line numbers."""
    reader = csv.reader(io.StringIO(read_text(path)), delimiter=delimiter)
    rows = list(reader)
    if header:
        if not rows:
            raise ManifestError(f"{path}: empty CSV")
        head = rows[0]
        return [(i + 2, dict(zip(head, r)) if len(r) == len(head) else r) for i, r in enumerate(rows[1:]) if r]
    return [(i + 1, r) for i, r in enumerate(rows) if r]


def text_field(row: dict, key: str, path: str, where, errors: RowErrors) -> str | None:
    if not isinstance(row, dict) or key not in row:
        errors(path, where, f"missing key {key!r}")
        return None
    v = row[key]
    if not isinstance(v, str) or not v.strip():
        errors(path, where, f"empty or non-text {key!r}")
        return None
    return v


def strip_prefix(paths: list[str], prefix: str, path: str, where, errors: RowErrors) -> list[str] | None:
    """Image paths a copy gives with the user's `image_prefix` option removed (the rest is
    checked as a path under the image root when the manifest is written), or None, the
    row reported, when one does not start with it. Copies whose users rewrite their image
    paths to their own folders (NegBench, CounterCurate) need it."""
    bad = next((p for p in paths if not p.startswith(prefix)), None) if prefix else None
    if bad is not None:
        errors(path, where, f"image path {bad!r:.120} does not start with image_prefix {prefix!r}")
        return None
    return [p[len(prefix) :] for p in paths]


def write_records(
    out: str, rows: list[dict], kind: str, benchmark: str, report: BuildReport, extra_meta: dict | None = None
) -> BuildReport:
    """Check every row (check_rows), then write the manifest whole. A row's "_at" (the
    source file and row it came from) names it in a refusal and is not written."""
    if not rows:
        raise ManifestError(f"{benchmark}: no records could be built (see the skipped rows)")
    at = [str(r.pop("_at", "")) or f"{benchmark}: record {i}" for i, r in enumerate(rows)]
    check_rows(rows, kind, at)
    meta = {"benchmark": benchmark, "counts": report.counts, "records": report.records, **(extra_meta or {})}
    write_manifest(out, pa.Table.from_pylist(rows), kind, meta)
    return report


# an id or key a stranger's copy gives, where flowclip takes it as it is: letters, digits, . _ -
# (never a path: no separator, no '..', nothing absolute)
PLAIN_ID = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}\Z")


def plain_id(value, where: str) -> str:
    """A copy's id as text, refused unless plain (PLAIN_ID), naming where it was read."""
    text = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else None
    if text is None or not PLAIN_ID.match(text):
        raise ManifestError(f"{where}: id {str(value)[:80]!r} is not a plain id (letters, digits, . _ -)")
    return text


def check_rows(rows: list[dict], kind: str, at: list[str]) -> None:
    """What a converter's rows must hold before any is written, whatever file they came
    from: each caption non-empty text (a list column: a list of such), each image path
    relative and inside the image root, each record id once (both rows named)."""
    spec = KINDS[kind]
    first: dict[str, int] = {}
    for i, row in enumerate(rows):
        for col in spec.text_columns:
            if col in row and not _texts_ok(row[col], empty_list=kind == "training" and col == "negatives"):
                raise ManifestError(f"{at[i]}: {col!r} must be non-empty text (a list of it), got {row[col]!r:.80}")
        paths = row.get(spec.image_column)
        for p in paths if isinstance(paths, list) and paths else [paths]:
            problem = image_path_problem(p)
            if problem:
                raise ManifestError(f"{at[i]}: image {p!r:.120} {problem}")
        if "record_id" in row:
            rid = str(row["record_id"])
            if rid in first:
                raise ManifestError(
                    f"{at[first[rid]]} and {at[i]}: both are record {rid!r}; each record needs its own id "
                    f"(a copy with repeated ids would score one record on another's data)"
                )
            first[rid] = i


def _texts_ok(value, empty_list: bool = False) -> bool:
    if isinstance(value, list):
        return (empty_list or bool(value)) and all(_texts_ok(v) for v in value)
    return isinstance(value, str) and bool(value.strip())


def copy_manifest(src: str, out: str) -> None:
    """A generated manifest copied to --out (its folder made; written whole or not at all)."""
    import shutil

    if os.path.abspath(out) == os.path.abspath(src):
        return
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    tmp = f"{out}.tmp-{os.getpid()}"
    shutil.copyfile(src, tmp)
    os.replace(tmp, out)


def pairwise_rows(prefix: str, items: list[tuple], **common) -> list[dict]:
    """(id, image, gold caption, foil caption, extra columns) -> candidate rows with gold 0."""
    rows = []
    for rid, image, gold, foil, extra in items:
        rows.append(
            {"record_id": f"{prefix}{rid}", "image": image, "captions": [gold, foil], "gold": 0, **common, **extra}
        )
    return rows
