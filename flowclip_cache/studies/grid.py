"""Study axes. A list in `encoder.model` or `encoder.patch_readout`, or in one of the
world's lab knobs (`scene_objects`, `binding_negatives`, `train_scenes`), makes one study
per combination:
its own world when a world setting differs, its own store, its own runs. Then one summary
of them all: the real-image tables side by side and, where the studies compare pairs,
each combination's paired-bootstrap intervals as a table and a figure (the binding lab:
docs/results-synthetic.md)."""

from __future__ import annotations

import dataclasses
import itertools
import os

import numpy as np

from ..errors import FlowclipError

WORLD_AXES = ("scene_objects", "binding_negatives", "train_scenes")
ENCODER_AXES = {"model": "model", "readout": "patch_readout"}  # axis: its key in `encoder:`


def _axes(cfg) -> dict[str, list]:
    """{world knob, "model" or "readout": its values} of every list in the study's settings, checked."""
    world = cfg.world or {}
    axes = {k: world[k] for k in WORLD_AXES if isinstance(world.get(k), list)}
    listed = [k for k, v in world.items() if isinstance(v, list) and k not in WORLD_AXES]
    if listed:
        raise FlowclipError(f"world.{listed[0]}: a list is a study axis only for {', '.join(WORLD_AXES)}")
    axes |= {name: cfg.encoder[key] for name, key in ENCODER_AXES.items() if isinstance(cfg.encoder.get(key), list)}
    for name, values in axes.items():
        if not values or len(set(map(str, values))) != len(values):
            where = f"encoder.{ENCODER_AXES[name]}" if name in ENCODER_AXES else f"world.{name}"
            raise FlowclipError(f"{where}: a list of distinct values, got {values}")
    if axes and cfg.store:
        raise FlowclipError(
            "a study axis (a list in encoder.model, encoder.patch_readout or world) needs world={...}: each "
            "combination extracts its own store; for real data extract one store per setting and use `kind: encoders`"
        )
    return axes


def study_grid(cfg) -> list[tuple[str, object]]:
    """[(the combination's label, its study in OUT/<knob-value__...__model-name__readout-name>)];
    a study with no list is [(its readout, cfg)]. Combinations of the same world settings
    share one world folder (OUT/world, or OUT/world__<knob-value...>)."""
    axes = _axes(cfg)
    if not axes:
        return [(cfg.encoder.get("patch_readout", "standard"), cfg)]
    out = []
    for values in itertools.product(*axes.values()):
        combo = dict(zip(axes, values))
        knobs = {k: v for k, v in combo.items() if k in WORLD_AXES}
        encoder = {**cfg.encoder, **{key: combo[name] for name, key in ENCODER_AXES.items() if name in combo}}
        encoder.setdefault("patch_readout", "standard")
        parts = [f"{k}-{v}" for k, v in knobs.items()]
        encoder_parts = [f"{name}-{combo[name]}" for name in ENCODER_AXES if name in combo]
        label = ", ".join(f"{k} {v}" for k, v in knobs.items())
        if encoder_parts:
            label = " / ".join(x for x in (label, f"{encoder.get('model')} / {encoder['patch_readout']}") if x)
        own_world = os.path.join(cfg.out, "__".join(["world", *parts]))
        sub = dataclasses.replace(
            cfg,
            out=os.path.join(cfg.out, "__".join(parts + encoder_parts)),
            world_folder=own_world if parts or not cfg.world_folder else cfg.world_folder,
            world={**(cfg.world or {}), **knobs},
            encoder=encoder,
        )
        out.append((label, sub))
    return out


def run_grid(cfg, grid, run_one, dry_run: bool, jobs: int, log, progress: bool):
    """Each combination's study (run_one: the ablation's run), then the combined summary."""
    from .encoders import write_combined
    from .study import claim_folder

    if not dry_run:
        claim_folder(cfg.out)
    summaries = {}
    for label, sub in grid:
        log(f"{label}:")
        summaries[label] = run_one(sub, dry_run, jobs, log=lambda m: log(f"  {m}"), progress=progress)
    if dry_run:
        return None
    combined = {
        "encoders": {
            label: {
                "model": sub.encoder.get("model"),
                "patch_readout": sub.encoder.get("patch_readout"),
                "world": sub.world,
                "store_fingerprint": summaries[label]["store_fingerprint"],
                "table": summaries[label]["table"],
                "columns": summaries[label]["columns"],
                "encoder_profile": summaries[label].get("encoder_profile"),
                "bootstrap": summaries[label].get("bootstrap", {}),
            }
            for label, sub in grid
        }
    }
    axis_names = "setting" if any(s.world != (cfg.world or {}) for _, s in grid) else "encoder / readout"
    if cfg.compare:  # which tokens carry the compared Flow-CLIP head's binding decision
        for label, sub in grid:
            combined["encoders"][label]["diagnosis"] = study_diagnosis(sub, cfg.compare[0][-1])
    extra = interval_section(cfg.out, combined["encoders"]) + diagnosis_section(combined["encoders"])
    write_combined(cfg.out, combined, label=axis_names, extra=extra)
    return combined


def interval_rows(entries: dict) -> list[tuple[str, str, str, float, float, float]]:
    """(setting, task, difference, observed difference, lo, hi) of every paired bootstrap the studies made."""
    rows = []
    for label, e in entries.items():
        for task, pairs in sorted(e.get("bootstrap", {}).items()):
            for diff, b in pairs.items():
                lo, hi = b["ci95_pts"]
                rows.append((label, task, diff, b["mean_pts"], lo, hi))
    return rows


def exclusion_count(rows) -> str:
    """How many of the intervals exclude 0, beside how many would by chance alone (a 95%
    interval misses a true zero difference 1 time in 20), and which direction they lean."""
    excl = [r for r in rows if r[4] > 0 or r[5] < 0]
    up = sum(1 for r in excl if r[4] > 0)
    return (
        f"**{len(excl)} of {len(rows)} intervals exclude 0** ({up} above, {len(excl) - up} below); "
        f"about {len(rows) / 20:.1f} would by chance alone if no setting made a difference."
    )


def interval_section(out: str, entries: dict) -> list[str]:
    """summary.md's lines of each setting's intervals (under the side-by-side tables), and
    the same drawn in OUT/intervals.png (no intervals: no lines, no figure)."""
    from ..scoring.report import interval_cell, table

    rows = interval_rows(entries)
    if not rows:
        return []
    _interval_figure(os.path.join(out, "intervals.png"), rows)
    return [
        "",
        "## Paired bootstrap intervals, each setting (points)",
        "",
        "Each setting's own study resamples its images (summary.md in its folder); an interval "
        "that excludes 0 is marked *. Figure: intervals.png.",
        "",
        exclusion_count(rows),
        "",
        *table(["setting", "task", "difference", "observed", "95% CI"], [
            [s, t, d, f"{m:.2f}", interval_cell(lo, hi)] for s, t, d, m, lo, hi in rows
        ]),
        "",
    ]  # fmt: skip


def _interval_figure(path: str, rows) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..outputs import atomic_write

    keys = sorted({(t, d) for _, t, d, *_ in rows})
    settings = list(dict.fromkeys(s for s, *_ in rows))
    fig, axes = plt.subplots(1, len(keys), figsize=(3.2 * len(keys), 0.5 * len(settings) + 1.6), squeeze=False)
    for ax, (task, diff) in zip(axes[0], keys):
        for y, s in enumerate(settings):
            hit = [r for r in rows if r[:3] == (s, task, diff)]
            if hit:
                _, _, _, m, lo, hi = hit[0]
                colour = "tab:blue" if lo > 0 else "tab:red" if hi < 0 else "0.4"
                ax.errorbar([m], [y], xerr=[[m - lo], [hi - m]], fmt="o", color=colour, capsize=3)
        ax.axvline(0, color="k", lw=0.8)
        ax.set_yticks(range(len(settings)), settings if ax is axes[0][0] else [""] * len(settings), fontsize=8)
        ax.set_title(f"{task}\n{diff}", fontsize=8)
        ax.set_xlabel("points", fontsize=8)
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110))
    plt.close(fig)


def study_diagnosis(study, method: str) -> dict | None:
    """binding_diagnosis.diagnose of a synthetic study's trained `method` runs (every
    seed) on its world's swap-att records, averaged over seeds; None when the study has
    no world or the method is not a Flow-CLIP head."""
    from ..scoring.binding_diagnosis import diagnose, mean_of, support_change, swap_att_records
    from ..store import FeatureStore
    from ..training.run_folder import load_head
    from .study import RunSpec

    if study.world is None or not study.world_folder or method not in study.heads:
        return None
    runs = [os.path.join(study.out, "runs", RunSpec(method, s, dict(study.heads[method])).folder) for s in study.seeds]
    heads = [load_head(d)[0] for d in runs if os.path.exists(os.path.join(d, "head.safetensors"))]
    if not heads or not all(getattr(h, "kind", None) == "flow" for h in heads):
        return None
    world = study.world_folder
    store = FeatureStore(study.store or os.path.join(study.out, "store"))
    records = swap_att_records(store, os.path.join(world, "eval_swap-att.parquet"), os.path.join(world, "images"))
    per_seed = [diagnose(h, records) for h in heads]
    # each record's change averaged over the seeds, then resampled by image (as every interval of a study)
    change = np.mean([d.pop("support_change_by_record") for d in per_seed], 0)
    images = np.unique([r["image"] for r in records], return_inverse=True)[1].ravel()
    moved = support_change(np.asarray(change, float), images, study.bootstrap) if study.bootstrap else None
    return mean_of(per_seed) | {"seeds": len(heads), "support_change": moved}


def _change(c: dict | None) -> str:
    if not c:
        return ""
    lo, hi = c["ci95_pts"]
    return f"{c['mean_pts']:+.2f} [{lo:.2f}, {hi:.2f}]" + (" *" if lo > 0 or hi < 0 else "")


def diagnosis_section(entries: dict) -> list[str]:
    """summary.md's lines of each setting's token-role diagnosis (scoring/binding_diagnosis.py)."""
    from ..scoring.binding_diagnosis import ROLES
    from ..scoring.report import table

    rows = []
    for label, e in entries.items():
        d = e.get("diagnosis")
        if not d:
            continue
        share, sup = d["share_of_abs_difference"], d["attribute_support_on_own_object"]
        rows.append(
            [label, f"{d['records']:.0f} x {d['seeds']}", f"{d['s_global_gold_minus_foil']['mean_abs']:.4f}",
             f"{d['s_token_mean_abs']:.4f}", *[f"{100 * share[r]:.0f}%" for r in ROLES],
             f"{d['s_token_gold_minus_foil']['object']:+.5f}", f"{d['s_token_gold_minus_foil']['attribute']:+.5f}",
             f"{100 * sup['before']:.1f} -> {100 * sup['after']:.1f} ({100 * sup['chance']:.1f})",
             _change(d.get("support_change"))]
        )  # fmt: skip
    if not rows:
        return []
    return [
        "",
        "## Which tokens carry the binding decision (swap-att, the compared Flow-CLIP head, mean over seeds)",
        "",
        "|s_global| and |s_token|: the mean size of the gold-minus-foil difference of each term. Shares: each "
        "token role's part of the mean |gold - foil| of s_token (attribute = colour words, object = shape "
        "words). Object / attribute part: the role's mean signed gold-minus-foil part (positive: it prefers the "
        "gold). Support: the colour words' patch-support mass on their own object's cell (%) before -> after "
        "the refinement (chance: each colour word's own cell's share of the patches, averaged); its change, "
        "after - before in points, with "
        "the 95% image-cluster bootstrap interval over records with a colour word (each record's change "
        "averaged over the seeds; * the interval excludes 0).",
        "",
        *table(["setting", "records x seeds", "|s_global|", "|s_token|", *[f"{r} share" for r in ROLES],
                "object part", "attribute part", "support before -> after (chance)", "support change"], rows),
        "",
    ]  # fmt: skip
