"""results.md sections of the field's wider suite: the group tasks' text, image and group
scores, and a suite's table (headlines, means, absent members, each member's breakdown)."""

from __future__ import annotations

from .report import PARTIAL_NOTE, _csv, _star, fmt, table

GROUPS_NOTE = (
    "Each group: two images, two captions, each image's own caption known. **text**: each image scores "
    "its own caption above the other; **image**: each caption scores its own image above the other; "
    "**group**: both. Every comparison strict (a tie is wrong) unless the benchmark's rule says otherwise "
    "(MMVP: a caption whose two images tie chooses the second). Each figure aggregated as the benchmark "
    "aggregates its official score (pooled, per category, or a mean of named groups); the headline, "
    "marked †, is the benchmark's official score. Real images only: the image controls are not defined "
    "where the images are the candidates."
)


def suite_section(summary, scorers, benches, name):
    if "suite" not in summary:
        return [], []
    su = summary["suite"]
    cols = list(next(iter(su["table"].values()), {}))
    rows = []
    for key, row in su["table"].items():
        control, run = key.split("|")
        label = name.get(run, run) + ("" if control == "real" else f" ({control})")
        cells = [_star(fmt(row[c]["value"] * 100 if row[c]["value"] is not None else None), bool(row[c]["partial"]))
                 for c in cols]  # fmt: skip
        rows.append([label] + cells)
    first = next(iter(su["table"].values()), {})
    notes = [f"- {c}: {', '.join(first[c]['members'])}" for c in cols if c != "mean" and len(first[c]["members"]) > 1]
    md = [
        f"## Suite {su['name']}",
        "",
        "Each column a member's figure (%; a column several benchmarks make is their mean); 'mean' is the "
        "mean over the columns present, named below; '–' is a member absent or incomplete.",
        "",
        *table(["scorer"] + cols, rows),
        "",
        f"mean over: {', '.join(first.get('mean', {}).get('members', []))}",
        "",
    ]
    if su["absent"]:
        md += ["Absent members:", ""] + [f"- {b}: {why}" for b, why in su["absent"].items()] + [""]
    if any(r[c]["partial"] for r in su["table"].values() for c in cols):
        md += [PARTIAL_NOTE, ""]
    md += _suite_breakdown(summary, name)
    if notes:
        md += ["Columns made of several benchmarks:", ""] + notes + [""]
    return md, []


def _suite_breakdown(summary, name) -> list[str]:
    """Each member's figures besides its headline (text/image/group, every breakdown), Real."""
    from .suites import breakdown_rows

    keys, rows = breakdown_rows(summary["suite"]["name"], summary["results"], summary["suite"]["absent"])
    if not rows:
        return []
    heads = [name.get(k.split("|")[1], k.split("|")[1]) for k in keys]
    cells = [r[:2] + [fmt(v * 100 if v is not None else None) for v in r[2:]] for r in rows]
    return [f"### Suite {summary['suite']['name']}: each member's breakdown (%, Real)", "",
            *table(["benchmark", "figure"] + heads, cells), ""]  # fmt: skip


def _metric_rows(summary, scorers, benches, task_kind: str, name, ties) -> tuple[list, list, list]:
    """(table rows, csv lines, notes) of the tasks of one kind whose results hold several
    named figures ("metrics"): per task and scorer, every figure (the headline marked †,
    one not defined for the scorer "n/d" with its reason below) and ties(result) counts."""
    rows, csv, undefined = [], [], []
    for t in [t for t, sc in benches.items() if sc.task == task_kind]:
        for s in scorers:
            r = summary["results"].get(f"real|{s.run}", {}).get(t)
            if r is None:
                continue
            part = bool(r.get("partial"))
            shown = {m: v for m, v in r["metrics"].items() if "score" in v}
            missing = {m: v["reason"] for m, v in r["metrics"].items() if "score" not in v}
            cells = [
                f"{m} {fmt(v['score'] * 100)}" + (" †" if m == r["headline_metric"] else "") for m, v in shown.items()
            ]
            cells += [f"{m} n/d" for m in missing]
            undefined += [f"- {t}, {name[s.run]}: {m} {why}" for m, why in missing.items()]
            rows.append([_star(t, part), name[s.run], " · ".join(cells), *ties(r)])
            csv += [_csv("real", name[s.run], f"{t}/{m}", v["score"] * 100, part) for m, v in shown.items()]
    return rows, csv, undefined


def group_section(summary, scorers, benches, name):
    rows, csv, _ = _metric_rows(summary, scorers, benches, "groups", name,
                                lambda r: (r["ties_text"], r["ties_image"]))  # fmt: skip
    if not rows:
        return [], []
    heads = ["task", "scorer", "scores (%)", "text ties", "image ties"]
    md = ["## Group tasks (text, image and group scores)", "", GROUPS_NOTE, "", *table(heads, rows), ""]
    return md + _test_time_matching(summary, scorers, benches, name), csv


def _test_time_matching(summary, scorers, benches, name) -> list[str]:
    """GroupMatch and individual match per group task and scorer, in a table of their own:
    not any benchmark's official score (results.json: each task's `test_time_matching`)."""
    rows = []
    for t in [t for t, sc in benches.items() if sc.task == "groups"]:
        for s in scorers:
            m = summary["results"].get(f"real|{s.run}", {}).get(t, {}).get("test_time_matching")
            if m is not None:
                rows.append([t, name[s.run], fmt(m["group_match"] * 100), fmt(m["individual_match"] * 100), m["n"]])
    if not rows:
        return []
    return [
        "### Test-time matching (not the official metric)",
        "",
        "Zhu et al. 2025's figures from the same scores (yinglunz/test-time-matching, evaluate.py): **GroupMatch**, "
        "the best joint assignment of a group's two captions to its two images is the right one (s00 + s11 > "
        "s01 + s10, strictly); **individual match**, each image prefers its own caption (pooled over images). "
        "Pooled over the groups the official score counts, whatever the benchmark's own aggregation.",
        "",
        *table(["task", "scorer", "GroupMatch (%)", "individual match (%)", "groups"], rows),
        "",
    ]


def threshold_section(summary, scorers, benches, name):
    """The figures that need a match decision (VALSE's p_c, p_f, acc; SVO-Probes' official
    accuracy): per scorer that declares a threshold, or the reason they are not defined."""
    md, csv = [], []
    for t in [t for t, sc in benches.items() if sc.threshold_figures is not None]:
        rows, undefined, heads = [], [], []
        for s in scorers:
            f = summary["results"].get(f"real|{s.run}", {}).get(t, {}).get("threshold_figures")
            if f is None:
                continue
            if not f["defined"]:
                undefined.append(f"- {name[s.run]}: {f['reason']}")
                continue
            p = f["pooled"]
            heads = list(p)
            rate = lambda k, v: fmt(v * 100) if isinstance(v, float) else v  # noqa: E731  (counts as they are)
            rows.append([name[s.run], f"{f['threshold']:g} ({f['source']})"] + [rate(k, v) for k, v in p.items()])
            csv += [_csv("real", name[s.run], f"{t}/threshold/{k}", v * 100, False)
                    for k, v in p.items() if isinstance(v, float)]  # fmt: skip
        md += [f"### {t}: {benches[t].threshold_title}", ""]
        if rows:
            md += [*table(["scorer", "threshold (source)"] + heads, rows), ""]
        md += undefined + ([""] if undefined else [])
    return md, csv


PARAPHRASE_NOTE = (
    "Each record: an image, two captions that describe it (P1, P2) and a negative N. **ITT**: the image "
    "scores P1 and P2 both above N; **Image-P1-Neg** / **Image-P2-Neg**: that positive above N; **TOT** "
    "(text only): sim(P1, P2) above sim(P1, N) and sim(P2, N), with the scorer's caption-caption "
    "similarity. Every comparison strict (a tie is wrong). Each figure aggregated as the benchmark's "
    "score (SugarCrepe++: the mean over its five files; per file below). Real images."
)
RENAMED_NOTE = (  # said only where a paraphrase task scores under its own names (hard positives)
    " {tasks}: P1 is the original caption, P2 the hard positive, N the hard negative; "
    "**original** = Image-P1-Neg, **hard positive** = Image-P2-Neg, **augmented** = ITT; no TOT."
)


def paraphrase_section(summary, scorers, benches, name):
    ties = lambda r: (r["ties"], "–" if r["ties_text"] is None else r["ties_text"])  # noqa: E731
    rows, csv, undefined = _metric_rows(summary, scorers, benches, "paraphrases", name, ties)
    if not rows:
        return [], []
    heads = ["task", "scorer", "scores (%)", "ITT ties", "TOT ties"]
    renamed = [t for t, sc in benches.items() if sc.task == "paraphrases" and sc.metric_names]
    note = PARAPHRASE_NOTE + (RENAMED_NOTE.format(tasks=", ".join(renamed)) if renamed else "")
    md = ["## Paraphrase and hard-positive tasks (ITT and TOT)", "", note, "", *table(heads, rows), ""]
    return md + undefined + ([""] if undefined else []), csv
