"""flowclip score: every benchmark manifest, every scorer, from one store.

    manifests -> their benchmark's Scoring (from the registry) -> scores per record
    and candidate, per scorer and image control -> official aggregation -> tables,
    paired decision changes, paired image-cluster bootstrap, figures.

The engine knows task kinds, not benchmarks: everything particular to a benchmark
comes from its Scoring declaration.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

from .. import outputs
from ..datasets.base import Scoring
from ..errors import FlowclipError
from ..store import FeatureStore
from ..store.manifest_keys import drop_failed_rows
from ..training.run_folder import git_revision
from ..training.train_config import recorded_settings
from . import metrics

# the names callers import from here (the engine's parts live in scorers, engines, aggregation)
from .aggregation import aggregate, bootstrap_task, cross_task_means, expected_members  # noqa: F401
from .blind_audit import CAPTION_CHOICE, audit_manifest, blind_section, public, record_table
from .engines import score_candidates, score_classification, score_retrieval  # noqa: F401
from .manifest_specs import check_tasks
from .matrix_tasks import MATRIX_TASKS, score_matrix_task
from .metrics import headline  # noqa: F401  (callers import it here)
from .paraphrase_task import score_paraphrase_task
from .report import partial_tasks, results_markdown
from .report_field import group_section, paraphrase_section, suite_section, threshold_section
from .scorers import CONTROLS, Scorer, control_images, evaluation_manifests, find_manifests, load_scorers, scoring_of  # noqa: F401
from .stats import bootstrapped_means, family, paired_bootstrap


def run_score(
    store: FeatureStore,
    manifest_paths: list[str],
    scorer_specs: list[str],
    out: str,
    *,
    controls=("real",),
    device: str = "cpu",
    seed: int = 0,
    bootstrap_draws: int = 10_000,
    max_memory_mb: int = 2048,
    shortlist: int | None = None,
    overwrite: bool = False,
    image_root: str | None = None,
    compare: list[tuple[str, str]] | None = None,
    progress: bool = True,
    figures: bool = True,
    suite: str | None = None,
    labels: str = "name",
    resample_seeds: bool = False,
    blind_folds: int = 0,
    log=print,
) -> dict:
    """compare: (baseline, other) method pairs for the bootstrap; default every pair;
    resample_seeds: its draws draw each method's seeds too (stats.paired_bootstrap).
    figures: the PNGs (margins, CREPE curves) beside the results. suite: score only that
    suite's members among the manifests (scoring/suites.py), naming the absent ones.
    labels: how results name a NAME=folder scorer (scorers.load_scorers). blind_folds: also
    the blind audit of every caption-choice task, k-fold (scoring/blind_audit.py; 0: none)."""
    outputs.check_replaceable(out, "score-results", overwrite)
    scorers = load_scorers(scorer_specs, store, device, labels)
    found = evaluation_manifests(manifest_paths, log)
    absent: dict[str, str] = {}
    if suite:
        from ..datasets import all_benchmarks
        from .suites import select

        found, absent = select(suite, found, set(all_benchmarks()), store, image_root)
        for b, why in absent.items():
            log(f"suite {suite}: {b} absent: {why}")
        if not found:
            raise FlowclipError(f"--suite {suite}: none of its benchmarks among {', '.join(manifest_paths)}")
    checked = [(m, *scoring_of(m, log)) for m in found]  # fail before any work
    check_tasks(checked)
    with outputs.staged(out, "score-results", overwrite) as tmp:  # a failure (or a full disk) leaves nothing
        summary = _score_all(
            store,
            checked,
            scorers,
            tmp,
            controls,
            device,
            seed,
            (bootstrap_draws, resample_seeds),
            max_memory_mb,
            shortlist,
            image_root,
            compare,
            progress,
            figures,
            log,
            (suite, absent),
            blind_folds,
        )
    log(f"wrote {out}")
    return summary


def _score_all(
    store,
    checked,
    scorers,
    tmp,
    controls,
    device,
    seed,
    bootstrap,  # (draws, whether they draw seeds too)
    max_memory_mb,
    shortlist,
    image_root,
    compare,
    progress,
    figures,
    log,
    suite_absent=(None, {}),
    blind_folds: int = 0,
) -> dict:
    from ..progress import bar

    bootstrap_draws, resample_seeds = bootstrap
    t0 = time.perf_counter()
    records_bar = bar(sum(len(m) for m, _, _ in checked), "score", "record", progress)
    results: dict = {}  # (control, run) -> benchmark -> result
    record_rows: list[dict] = []
    boot_tasks: list[dict] = []
    changes: dict = {}
    all_images: dict[str, int] = {}
    benches: dict[str, Scoring] = {}
    excluded: dict[str, list[dict]] = {}
    lost: dict[str, dict[str, list[str]]] = {}  # task -> breakdown column -> the groups that lost records
    audits: dict[str, dict] = {}  # task -> its blind audit
    for m, name, sc in checked:
        benches[name] = sc
        records_bar.update(len(m))
        m = _without_failed(store, m, name, sc, image_root, excluded, lost, log)
        if not len(m):
            raise FlowclipError(f"{m.path}: every record's image or caption failed at extract; nothing to score")
        log(f"scoring {name} ({len(m)} records, {sc.task})")
        if sc.task in ("pairwise", "candidates", "paraphrases"):  # scored under every image control
            engine = score_paraphrase_task if sc.task == "paraphrases" else _score_candidate_task
            rows, changes[name], boot = engine(
                store, m, name, sc, scorers, controls, seed, device, image_root, max_memory_mb, results, all_images
            )
            record_rows += rows
            boot_tasks += boot
            if blind_folds and sc.task in CAPTION_CHOICE and "real" in controls and not sc.pooled_bags:
                audits[name] = audit_manifest(store, m, rows, blind_folds, seed, image_root)
                for run, f in audits[name].get("scorers", {}).items():  # beside the official figures
                    results[("real", run)][name]["blind_unsolved"] = f["blind_unsolved"]
        elif sc.task in MATRIX_TASKS:
            rows, changes[name], boot = _matrix_task(
                store, m, name, sc, scorers, controls, device, image_root, max_memory_mb, results, all_images, log
            )
            record_rows += rows
            boot_tasks += boot
        else:  # retrieval, classification: one scorer at a time
            read: dict = {}  # the manifest's keys and features, read once for every scorer
            for s in scorers:
                results.setdefault(("real", s.run), {})[name] = (
                    score_retrieval(store, m, s, device, max_memory_mb, shortlist, image_root, tmp, sc.tie_rule, read)
                    if sc.task == "retrieval"
                    else score_classification(store, m, s, device, image_root, read)
                )

    mark_partial(results, excluded, lost)
    methods, pairs = _comparisons(scorers, compare)
    bootstrap = (
        paired_bootstrap(boot_tasks, methods, pairs, len(all_images), bootstrap_draws, seed, resample_seeds,
                         bootstrapped_means(benches, [t["name"] for t in boot_tasks]))
        if pairs and boot_tasks and bootstrap_draws
        else {}
    )  # fmt: skip
    summary = _summary(store, scorers, controls, seed, results, benches, changes, bootstrap, t0)
    if bootstrap:
        summary["bootstrap_family"] = family(bootstrap, pairs, preset=compare is not None, draws=bootstrap_draws)
    if audits:  # an audit of a task that left records out says so, as the task's figures do
        part = partial_tasks(summary)
        summary["blind_audit"] = {
            t: {**public(a), **({"partial": part[t]} if t in part else {})} for t, a in audits.items()
        }
    if suite_absent[0]:
        summary["suite"] = _suite_summary(suite_absent[0], suite_absent[1], summary["results"])
    mark_partial_comparisons(summary)
    write_outputs(tmp, summary, record_rows, scorers, controls, benches, figures)
    if audits:
        _write_parquet(os.path.join(tmp, "blind_audit.parquet"), record_table(audits))
    return summary


def _summary(store, scorers, controls, seed, results, benches, changes, bootstrap, t0) -> dict:
    """results.json's body (its later sections are added by _score_all)."""
    return {
        "store": store.root,
        "store_fingerprint": store.fingerprint,
        "scorers": [scorer_entry(s) for s in scorers],
        "git_revision": git_revision(),
        "controls": list(controls),
        "seed": seed,
        "units": "fractions in [0, 1] (accuracies, recalls); the bootstrap in percentage points; "
        "results.md and results.csv in percent",
        "results": {f"{c}|{r}": v for (c, r), v in results.items()},
        "cross_task_means": cross_task_means(results, benches, [s.run for s in scorers], expected_members()),
        "decision_changes": changes,
        "bootstrap": bootstrap,
        "seconds": time.perf_counter() - t0,
    }


def scorer_entry(s) -> dict:
    """What results.json records of a scorer: its labels, weights' sha256, head kind and
    training settings (None for the frozen encoder), for `flowclip results` and readers."""
    train = recorded_settings(s.train) if s.train else None
    return {"run": s.run, "method": s.method, "head_sha256": s.head_sha256, "kind": s.head.kind, "train": train,
            "identity": s.identity}  # fmt: skip


def _without_failed(store, m, name, sc, image_root, excluded: dict, lost: dict, log):
    """The manifest without the records extract recorded as failed, noted in excluded/lost."""
    whole = m
    m, dropped = drop_failed_rows(store, m, image_root)
    if dropped:
        excluded[name] = dropped
        lost[name] = lost_groups(whole, dropped, sc)
        log(
            f"{name}: {len(dropped)} records left out: extract recorded their image or caption as failed "
            f"(first: {dropped[0]['record']}, {dropped[0]['reason']})"
        )
    return m


def _suite_summary(suite: str, absent: dict, results: dict) -> dict:
    from .suites import suite_table

    return {"name": suite, "absent": absent, "table": suite_table(suite, results, absent)}


def _matrix_task(store, m, name, sc, scorers, controls, device, image_root, max_memory_mb, results, images, log):
    """An image-choice or group task: Real only (the controls would replace the candidates)."""
    if set(controls) - {"real"}:
        log(
            f"note: {name}: the image controls ({', '.join(c for c in controls if c != 'real')}) are not "
            f"defined for {sc.task} tasks, whose images are the candidates; Real only"
        )
    if "real" not in controls:
        return [], {}, []
    return score_matrix_task(store, m, name, sc, scorers, device, image_root, max_memory_mb, results, images)


def _score_candidate_task(
    store, m, name, sc, scorers, controls, seed, device, image_root, max_memory_mb, results: dict, all_images: dict
) -> tuple[list[dict], dict, list]:
    """A pairs or candidate-set manifest under every control: its aggregation into results,
    its per-record rows, the decision changes between scorers, and its bootstrap input."""
    mats, gold, cols, ikeys = score_candidates(
        store, m, scorers, controls, seed, device, image_root, name, max_memory_mb
    )
    if sc.pooled_bags:  # each candidate a bag of captions: decided on the pooled scores
        mats = {k: metrics.pool_bags(v, cols["bags"], gold) for k, v in mats.items()}
    correct_real, record_rows = {}, []
    ids = [str(x) for x in cols.get("record_id", range(len(gold)))]
    thresholds = {s.run: s.head.decision_threshold() for s in scorers}
    for (control, run), mat in mats.items():
        results.setdefault((control, run), {})[name] = aggregate(sc, mat, gold, cols, thresholds[run])
        correct = metrics.decisions(mat, gold, sc.tie_rule)[0]
        if control == "real":
            correct_real[run] = correct
        record_rows += [
            {
                "benchmark": name,
                "record_id": rid,
                "control": control,
                "scorer": run,
                "scores": row[~np.isnan(row)].tolist(),
                "gold": g,
                "correct": c,
            }
            for rid, row, g, c in zip(ids, mat, gold.tolist(), correct.tolist())
        ]
    if "real" not in controls:
        return record_rows, {}, []
    changes = metrics.changes_between_runs({s.run: correct_real[s.run] for s in scorers})
    return record_rows, changes, [bootstrap_task(name, sc, cols, ikeys, correct_real, all_images)]


def lost_groups(whole, dropped: list[dict], sc: Scoring) -> dict[str, list[str]]:
    """The groups of each breakdown column (group_by, report_by) that lost records: the
    cells that rest on part of their records."""
    cols = [c for c in ([sc.group_by] if sc.group_by else []) + list(sc.report_by) if c in whole.table.column_names]
    rows = [d["row"] for d in dropped]
    values = lambda v: [str(x) for x in v] or ["(none)"] if isinstance(v, list) else [str(v)]  # noqa: E731
    # (a list value, Winoground's secondary tags: the record counts under each, as aggregation counts it)
    return {c: sorted({x for v in whole.table.column(c).take(rows).to_pylist() for x in values(v)}) for c in cols}


def mark_partial(results: dict, excluded: dict[str, list[dict]], lost: dict[str, dict]) -> None:
    """A figure resting on a part of its records says so (the task, and each group that
    lost records: partial_groups)."""
    note = (
        "records left out (extract recorded their image or caption as failed; listed in results.json "
        "under excluded_failed)"
    )
    for per_task in results.values():
        for name, dropped in excluded.items():
            if name in per_task:
                per_task[name]["excluded_failed"] = dropped
                per_task[name]["partial_groups"] = lost.get(name, {})
                said = per_task[name].get("partial")
                per_task[name]["partial"] = "; ".join(filter(None, [said, f"{len(dropped)} {note}"]))


def mark_partial_comparisons(summary: dict) -> None:
    """The bootstrap's and the decision changes' entries of a partial task say so too."""
    partial = partial_tasks(summary)
    for section in ("bootstrap", "decision_changes"):
        for task, per_pair in summary.get(section, {}).items():
            if task.split("/")[0] in partial or task in partial:
                for v in per_pair.values():
                    v["partial"] = partial.get(task, partial.get(task.split("/")[0], ""))


def _comparisons(scorers, compare) -> tuple[dict[str, list[str]], list[tuple[str, str]]]:
    """Methods (their runs: seeds) and the method pairs the bootstrap compares (every
    pair unless `compare` names them)."""
    methods: dict[str, list[str]] = {}
    for s in scorers:
        methods.setdefault(s.method, []).append(s.run)
    names = list(methods)
    pairs = (
        [(names[i], names[j]) for i in range(len(names)) for j in range(i + 1, len(names))]
        if compare is None
        else list(compare)
    )
    for a, b in pairs:
        if a not in methods or b not in methods:
            raise FlowclipError(f"bootstrap comparison {a} vs {b}: no such scorer (have {', '.join(methods)})")
    return methods, pairs


def _write_parquet(path: str, rows: list[dict]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)


def write_outputs(folder: str, summary: dict, record_rows: list, scorers, controls, benches, figures=True) -> None:
    with open(os.path.join(folder, "results.json"), "w") as f:
        json.dump(summary, f, indent=1)
    if record_rows:
        _write_parquet(os.path.join(folder, "records.parquet"), record_rows)
    sections = (suite_section, group_section, paraphrase_section, threshold_section, blind_section)
    md, csv_rows = results_markdown(summary, scorers, controls, benches, sections)
    open(os.path.join(folder, "results.md"), "w").write("\n".join(md) + "\n")
    open(os.path.join(folder, "results.csv"), "w").write("\n".join(csv_rows) + "\n")
    if figures:
        write_figures(folder, summary, record_rows, benches)


def write_figures(folder: str, summary: dict, record_rows: list, benches: dict | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # a scorer is shown by the NAME= it was given, with its run folder's name when they differ
    method = {s["run"]: s["method"] for s in summary.get("scorers", [])}
    label = lambda run: run if method.get(run, run) == run else f"{method[run]} ({run})"
    partial = partial_tasks(summary)
    _group_figures(folder, summary, benches or {}, label, partial, plt)
    choice = {t for t, sc in (benches or {}).items() if sc.task == "image_candidates"}
    # gold-foil margins of pairwise tasks (image choice: gold image - best other), Real, one panel per benchmark
    by_task: dict = {}
    for r in record_rows:
        if r["control"] == "real" and (len(r["scores"]) == 2 and r["gold"] is not None or r["benchmark"] in choice):
            by_task.setdefault(r["benchmark"], {}).setdefault(r["scorer"], []).append(
                metrics.margin(r["scores"], r["gold"])
            )
    for task, per in by_task.items():
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for run, margins in per.items():
            ax.hist(margins, bins=40, alpha=0.5, label=label(run))
        ax.axvline(0, color="k", lw=0.8)
        ax.set_xlabel("gold image - best other image's score" if task in choice else "gold - foil score")
        ax.set_ylabel("records")
        ax.set_title(f"{task}: margins (Real)" + (" - partial: records left out" if task in partial else ""))
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(folder, f"margins_{task}.png"), dpi=100)
        plt.close(fig)
    # Recall@1 against complexity (CREPE), per scorer and foil type
    for key, per in summary["results"].items():
        control, run = key.split("|")
        for task, r in per.items():
            if "recall_by_complexity" in r and control == "real":
                fig, ax = plt.subplots(figsize=(5, 3.5))
                xs = sorted(r["recall_by_complexity"], key=int)
                ax.plot([int(x) for x in xs], [r["recall_by_complexity"][x] for x in xs], marker="o", label=label(run))
                ax.set_xlabel("complexity")
                ax.set_ylabel("Recall@1")
                ax.set_title(task + (" - partial: records left out" if task in partial else ""))
                ax.legend()
                fig.tight_layout()
                fig.savefig(os.path.join(folder, f"recall_vs_complexity_{task}_{run}.png"), dpi=100)
                plt.close(fig)


def _group_figures(folder: str, summary: dict, benches: dict, label, partial: dict, plt) -> None:
    """Per group task: text, image and group (the benchmark's names) per scorer, Real."""
    for task in [t for t, sc in benches.items() if sc.task == "groups"]:
        runs = [
            (k.split("|")[1], per[task])
            for k, per in summary["results"].items()
            if k.startswith("real|") and task in per
        ]
        if not runs:
            continue
        names = list(runs[0][1]["metrics"])
        width = 0.8 / len(runs)
        fig, ax = plt.subplots(figsize=(max(4.5, 1.1 * len(names) + 2), 3.5))
        for j, (run, r) in enumerate(runs):
            values = [100 * r["metrics"][m]["score"] for m in names]
            ax.bar(np.arange(len(names)) + j * width, values, width, label=label(run))
        ax.set_xticks(np.arange(len(names)) + width * (len(runs) - 1) / 2, names)
        ax.set_ylabel("% (the benchmark's aggregation)")
        ax.set_title(f"{task}: group scores (Real)" + (" - partial: records left out" if task in partial else ""))
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(folder, f"groups_{task}.png"), dpi=100)
        plt.close(fig)
