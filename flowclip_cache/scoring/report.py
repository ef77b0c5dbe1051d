"""Reports that read themselves: results.md / results.csv of `flowclip score`, and the
Markdown helpers every report shares (the study summary and the encoder profile use
them too). Figures in tables are percent; results.json holds fractions."""

from __future__ import annotations

import math

CONTROLS_NOTE = (
    "Image controls. **Real**: each record is scored with its own image. **Shuffle**: each record "
    "gets another record's image (one seeded permutation per task; all candidates of a record share "
    "it). **Fixed**: every record gets one seeded anchor image. Under Shuffle and Fixed the gold "
    "caption is no longer about the image, so accuracy above chance (50% for a pair) is preference "
    "the text carries on its own: there, lower is better."
)


def interval_cell(lo: float, hi: float) -> str:
    """A 95% interval in points, marked * when it excludes 0 (every report's one rule)."""
    return f"[{fmt(lo)}, {fmt(hi)}]" + (" *" if lo > 0 or hi < 0 else "")


BOOTSTRAP_NOTE = (
    "The bootstrap resamples images (all records of an image together, the same draws for every "
    "scorer and task; a method's seeds averaged inside each draw). *observed* is the difference of the "
    "two methods' official scores over every record once (the tables' figures); the interval is the "
    "draws' 2.5th-97.5th percentiles, marked * where it excludes 0. *p* is the bootstrap's two-sided p of "
    "no difference from B draws, 2 (k + 1) / (B + 1) with k the draws on the smaller side of 0 (never 0: "
    "B draws cannot show less than 2 / (B + 1)); *Holm p* adjusts it for every comparison of its family, the "
    "table (Holm's step-down correction): read a difference as shown where Holm p < 0.05."
)


def fmt(v, digits: int = 2) -> str:
    """A number for a table; '–' for a missing one."""
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def table(header: list[str], rows: list[list]) -> list[str]:
    """A Markdown table (header, separator, one line per row)."""
    return ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * len(header)] + [
        "| " + " | ".join(map(str, r)) + " |" for r in rows
    ]


def partial_tasks(summary: dict) -> dict[str, str]:
    """task or cross-task mean -> why a figure of it rests on part of its input."""
    out = {t: r["partial"] for per in summary["results"].values() for t, r in per.items() if r.get("partial")}
    for per in summary.get("cross_task_means", {}).values():
        for k, e in per.items():
            if e.get("partial"):
                out.setdefault(k, "a member is missing or left out records")
    return out


def scorer_labels(scorers) -> dict[str, str]:
    """run -> the name tables use: the method's name, or method [run] when a method has
    several runs (seeds). The bootstrap's method names are the same names."""
    counts: dict[str, int] = {}
    for s in scorers:
        counts[s.method] = counts.get(s.method, 0) + 1
    return {s.run: s.method if counts[s.method] == 1 else f"{s.method} [{s.run}]" for s in scorers}


COMPOSITIONAL = ("pairwise", "candidates", "image_candidates", "groups", "paraphrases")  # tasks in the main table


def results_markdown(summary: dict, scorers, controls, benches, sections=()) -> tuple[list[str], list[str]]:
    """(results.md lines, results.csv lines) of a score summary; sections: further
    section writers placed after the compositional tables (report_field's)."""
    name = scorer_labels(scorers)
    comp = [t for t, sc in benches.items() if sc.task in COMPOSITIONAL]
    md = [
        "# flowclip score",
        "",
        f"store fingerprint `{summary['store_fingerprint'][:16]}`, "
        f"git {summary['git_revision'][:10]}; scorers: " + ", ".join(f"{name[s.run]} ({s.head.kind})" for s in scorers),
        "",
        "Figures are percent (results.json: fractions).",
        "",
    ]
    csv = ["control,scorer,column,percent,partial"]
    if comp:
        m, c = _compositional(summary, scorers, controls, benches, comp, name)
        md, csv = md + m, csv + c
    for section in (*sections, _retrieval, _zero_shot, _bootstrap, _changes):
        m, c = section(summary, scorers, benches, name)
        md, csv = md + m, csv + c
    return md, csv


PARTIAL_NOTE = (
    "\\* rests on part of its records (in the comparisons' tables: '(partial)'): extract recorded some "
    "of their images or captions as failed (results.json: `excluded_failed` per task, `partial_groups` per "
    "breakdown)."
)


def _csv(control: str, scorer: str, column: str, value, partial: bool) -> str:
    """One results.csv line; its last field says 'partial' where the figure rests on part of its records."""
    return f"{control},{scorer},{column},{fmt(value, 4)},{'partial' if partial else ''}"


def _star(cell: str, partial: bool) -> str:
    return cell + " *" if partial else cell


def partial_label(task: str, entry: dict) -> str:
    """A comparison's task named '(partial)' where it rests on part of its records (a * there
    already says that an interval excludes 0)."""
    return f"{task} (partial)" if entry.get("partial") else task


def _compositional(summary, scorers, controls, benches, comp, name):
    means = sorted({k for v in summary["cross_task_means"].values() for k in v})
    pooled = [t for t in comp if benches[t].aggregate == "group_means"]
    cols = comp + [f"{t} (pooled)" for t in pooled] + means
    rows, csv, partial = [], [], {}
    for control in controls:
        for s in scorers:
            per = summary["results"].get(f"{control}|{s.run}", {})
            cm = summary["cross_task_means"].get(f"{control}|{s.run}", {})
            vals = (
                [per[t]["score"] * 100 if t in per else None for t in comp]
                + [per[t]["pooled"] * 100 if t in per else None for t in pooled]
                + [cm[k]["mean"] * 100 if k in cm else None for k in means]
            )
            flags = [bool(per.get(t, {}).get("partial")) for t in comp + pooled]
            flags += [bool(cm.get(k, {}).get("partial")) for k in means]
            cells = [_star(fmt(v), f) for v, f in zip(vals, flags)]
            partial.update({k: cm[k] for k in means if cm.get(k, {}).get("partial")})
            rows.append([control, name[s.run]] + cells)
            csv += [_csv(control, name[s.run], col, v, f) for col, v, f in zip(cols, vals, flags)]
    md = [
        "## Compositional matching (Tab. 1/2; Tab. 4 for the Shuffle and Fixed rows)",
        "",
        "Accuracy (%), each benchmark's official aggregation; cross-task means at the right.",
        "",
        *table(["control", "scorer"] + cols, rows),
        "",
    ]
    for k, e in partial.items():
        if e.get("missing"):
            md.append(
                f"\\* {k} is partial: the mean of {len(e['members'])} of its {e['expected']} members "
                f"({', '.join(e['members'])}); missing {', '.join(e['missing'])}."
            )
        if e.get("members_with_excluded_records"):
            md.append(
                f"\\* {k} is partial: {', '.join(e['members_with_excluded_records'])} left out records "
                f"whose image or caption failed at extract."
            )
    first = summary["results"].get(f"real|{scorers[0].run}", {})
    notes = [f"{t}: {first[t]['partial']}" for t in first if "partial" in first[t]]
    md += ([""] if partial else []) + [f"Partial: {n}" for n in notes] + ([""] if notes else [])
    md += [PARTIAL_NOTE, ""] if notes or partial else []
    md += [
        CONTROLS_NOTE,
        "",
        "Ties (gold exactly as high as the best foil; counted under each benchmark's own rule), Real images:",
        "",
        *table(
            ["scorer"] + comp,
            [
                [name[s.run]] + [summary["results"].get(f"real|{s.run}", {}).get(t, {}).get("ties", "") for t in comp]
                for s in scorers
            ],
        ),
        "",
    ]
    for t in comp:
        m, c = _breakdown(summary, scorers, controls, benches[t], t, name)
        md, csv = md + m, csv + c
    return md, csv


def _breakdown(summary, scorers, controls, sc, task, name):
    """One table per breakdown a benchmark declares (Scoring.breakdowns)."""
    md, csv = [], []
    for title, key in sc.breakdowns():
        cols = sorted(
            {
                g
                for s in scorers
                for c in controls
                for g in summary["results"].get(f"{c}|{s.run}", {}).get(task, {}).get(key, {})
            },
            key=lambda g: (len(g), g) if g.isdigit() else (0, g),
        )
        if not cols:
            continue
        rows = []
        lost = _lost_cells(summary, task, key, sc, cols)
        for control in controls:
            for s in scorers:
                vals = summary["results"].get(f"{control}|{s.run}", {}).get(task, {}).get(key, {})
                if key.startswith("ties_by_"):  # counts, not fractions
                    rows.append([control, name[s.run]] + [_star(str(vals.get(g, "")), g in lost) for g in cols])
                    continue
                rows.append(
                    [control, name[s.run]] + [_star(fmt(vals.get(g, float("nan")) * 100), g in lost) for g in cols]
                )
                csv += [
                    _csv(control, name[s.run], f"{task}/{key}/{g}", vals.get(g, float("nan")) * 100, g in lost)
                    for g in cols
                ]
        out = (
            {
                g
                for s in scorers
                for g in summary["results"].get(f"real|{s.run}", {}).get(task, {}).get("left_out_groups", [])
            }
            if key == f"by_{sc.group_by}"
            else set()
        )
        heads = [f"{g} †" if g in out else g for g in cols]
        md += [f"### {task}: {title}", "", *table(["control", "scorer"] + heads, rows), ""]
        if out:
            md += [
                f"† fewer than {sc.min_group} records: shown, but left out of the macro mean "
                f"({len(out)} of {len(cols)} groups).",
                "",
            ]
        if lost:
            md += [PARTIAL_NOTE, ""]
    return md, csv


def _lost_cells(summary: dict, task: str, key: str, sc, cols: list[str]) -> set[str]:
    """The groups of a breakdown (by_X, recall_by_X, recall_at<k>_by_X, ties_by_X, or the
    named groups) whose figures rest on part of their records."""
    per: dict = next((r[task] for r in summary["results"].values() if task in r), {})
    lost = per.get("partial_groups", {})
    if key == "named_groups":  # a named group lost records when one of its members did
        gone = set(lost.get(sc.group_by, []))
        return {n for n, members in sc.groups if gone & set(members)}
    col = key.split("by_", 1)[1] if "by_" in key else None
    if not col:
        return set()
    if sc.task in ("groups", "paraphrases"):  # their cells are "<value> <metric>"
        return {c for c in cols if c.rsplit(" ", 1)[0] in set(lost.get(col, []))}
    return set(lost.get(col, [])) & set(cols)


def _retrieval(summary, scorers, benches, name):
    retr = [t for t, sc in benches.items() if sc.task == "retrieval"]
    if not retr:
        return [], []
    ks = ["i2t_R@1", "i2t_R@5", "i2t_R@10", "t2i_R@1", "t2i_R@5", "t2i_R@10"]
    rows, csv = [], []
    for s in scorers:
        for t in retr:
            r = summary["results"].get(f"real|{s.run}", {}).get(t, {})
            rows.append(
                [name[s.run], _star(t, bool(r.get("partial"))) + (" (approximate)" if r.get("approximate") else "")]
                + [fmt(r.get(k, float("nan")) * 100) for k in ks]
                + [r.get("i2t_ties", ""), r.get("t2i_ties", "")]
            )
            csv += [
                _csv("real", name[s.run], f"{t}/{k}", r.get(k, float("nan")) * 100, bool(r.get("partial"))) for k in ks
            ]
    topk = [t for t in retr if benches[t].tie_rule == "topk"]
    rest = [t for t in retr if t not in topk]
    kept = (
        f"{', '.join(topk)}: a query counts when one of its right answers is among the k torch.topk keeps "
        "(CLIP_benchmark's and NegBench's recall_at_k; a shortlist's approximate figures count ties wrong)"
    )
    ranked = f"{', '.join(rest)}: a wrong candidate scoring exactly as high as the right one ranks above it"
    rules = [kept] * bool(topk) + [ranked + " (both directions)"] * bool(rest)
    md = [
        "## Retrieval (Tab. 7)",
        "",
        "Ties: " + "; ".join(rules) + ". The ties columns count the queries whose right answer tied a wrong one.",
        "",
        *table(["scorer", "benchmark"] + ks + ["i2t ties", "t2i ties"], rows),
        "",
    ]
    approx = [f"{k}: {t}" for k, per in summary["results"].items() for t, r in per.items() if r.get("approximate")]
    if approx:
        md += ["Approximate (shortlist re-ranking): " + ", ".join(approx), ""]
    return md, csv


ZERO_SHOT_FIGURES = {"top1": "top-1", "top5": "top-5", "mean_per_class_recall": "per-class"}


def _percent(v) -> float:
    """A fraction as points; NaN for a figure not given (top-5 below 5 classes)."""
    return float("nan") if v is None else v * 100


def _zero_shot(summary, scorers, benches, name):
    zero = [t for t, sc in benches.items() if sc.task == "classification"]
    if not zero:
        return [], []
    own = {t: r["metric"] for per in summary["results"].values() for t, r in per.items() if r.get("metric")}
    figures = ZERO_SHOT_FIGURES | ({"score": "own metric"} if own else {})
    rows, csv = [], []
    for s in scorers:
        per = summary["results"].get(f"real|{s.run}", {})
        rows.append(
            [name[s.run]]
            + [
                _star(fmt(_percent(per.get(t, {}).get(m))), bool(per.get(t, {}).get("partial")))
                for t in zero
                for m in figures
            ]
            + [per.get(zero[0], {}).get("prompt_ensemble", ""), sum(per.get(t, {}).get("ties", 0) for t in zero)]
        )
        csv += [
            _csv("real", name[s.run], f"{t}/{m}", _percent(per.get(t, {}).get(m)),
                 bool(per.get(t, {}).get("partial")))
            for t in zero
            for m in figures
        ]  # fmt: skip
    return [
        "## Zero-shot classification (Tab. 7)",
        "",
        "Top-k as open_clip and CLIP_benchmark count it (torch.topk keeps k classes; a true class tied with "
        "another is right only if topk keeps it; top-5 – below 5 classes); per-class: the mean over classes of "
        "the share of their images the argmax gets right (CLIP_benchmark's mean_per_class_recall). "
        "Prompts: `embedding` averages the normalised prompt "
        "embeddings and renormalises (CLIP's rule, for embedding scorers); `score` averages a pairwise "
        "head's per-prompt scores. Ties: images whose true class ties the best other class."
        + (
            " Own metric: ELEVATER's TEST.METRIC over softmax(100 x logits) (scoring/elevater.py): "
            + ", ".join(f"{t} {m}" for t, m in own.items())
            + "."
            if own
            else ""
        ),
        "",
        *table(["scorer"] + [f"{t} {figures[m]}" for t in zero for m in figures] + ["prompts", "ties"], rows),
        "",
    ], csv


def _bootstrap(summary, scorers, benches, name):
    return bootstrap_table(summary["bootstrap"], "## Paired image-cluster bootstrap (95% interval, points)",
                           PARTIAL_NOTE, summary.get("bootstrap_family")), []  # fmt: skip


def family_line(fam: dict | None) -> list[str]:
    """What the correction runs over, and whether its draws can resolve it at its level."""
    if not fam:
        return []
    what = (
        f"the {len(fam['contrasts'])} contrasts named in advance (compare: {', '.join(fam['contrasts'])})"
        if fam["kind"] == "pre-set contrasts"
        else "every pair of scorers (none named in advance: an exploratory family)"
    )
    line = (
        f"**Family.** Holm's correction runs over these {fam['comparisons']} comparisons: {what}, on every task. "
        f"With {fam['draws']:,} draws a p is at least {fam['p_floor']:.2g}, so a Holm p at least "
        f"{fam['smallest_holm_p']:.2g}"
    )
    if fam["smallest_holm_p"] >= fam["alpha"]:
        line += (
            f": **no comparison here can be shown at {fam['alpha']:g}**, whatever its interval, for want of draws; "
            f"{fam['draws_to_resolve']:,} draws or more could (--bootstrap / bootstrap:)."
        )
    else:
        line += f", below {fam['alpha']:g}: the draws can resolve the family."
    return [line, ""]


def bootstrap_table(bootstrap: dict, title: str, partial_note: str, fam: dict | None = None) -> list[str]:
    """The paired bootstrap's comparisons as a table (a score's results.md, a study's
    summary.md): the observed difference, its 95% interval, the bootstrap's two-sided p and
    Holm's adjustment of it over every comparison in the table (its family: fam)."""
    from .stats import holm

    if not bootstrap:
        return []
    comps = [(t, k, v) for t, d in bootstrap.items() for k, v in d.items()]
    adjusted = holm([v.get("p_two_sided", float("nan")) for _, _, v in comps])
    rows = [
        [partial_label(t, v), k, fmt(v["mean_pts"]), interval_cell(*v["ci95_pts"]),
         fmt(v.get("p_two_sided", float("nan")), 4), fmt(q, 4), v["draws_missing_a_group"]]
        for (t, k, v), q in zip(comps, adjusted)
    ]  # fmt: skip
    resampled = any(v.get("seeds_resampled") for _, _, v in comps)
    note = BOOTSTRAP_NOTE + (" Here each draw also draws each method's seeds with replacement." if resampled else "")
    header = ["task", "difference", "observed", "95% CI", "p", f"Holm p (of {len(comps)})", "draws missing a group"]
    partial = any(v.get("partial") for _, _, v in comps)
    return [title, "", note, "", *family_line(fam), *table(header, rows), "", *([partial_note, ""] if partial else [])]


def _changes(summary, scorers, benches, name):
    if not any(summary["decision_changes"].values()):
        return [], []
    by_run = {s.run: name[s.run] for s in scorers}
    rows = []
    for task, d in summary["decision_changes"].items():
        for key, v in d.items():
            b, a = key.split(" vs ")
            rows.append(
                [partial_label(task, v), f"{by_run.get(b, b)} vs {by_run.get(a, a)}", v["repairs"], v["regressions"]]
            )
    notes = (
        [PARTIAL_NOTE, ""]
        if any(v.get("partial") for d in summary["decision_changes"].values() for v in d.values())
        else []
    )
    return [
        "## Paired decision changes (Real)",
        "",
        "A repair: the second scorer right where the first was wrong; a regression: the reverse.",
        "",
        *table(["task", "comparison", "repairs", "regressions"], rows),
        "",
        *notes,
    ], []
