"""The blind audit: how much of a benchmark a model solves without looking at the image.

For a task whose candidates are captions (one image, its gold caption and the foils; or a
paraphrase task's two positives and a negative, each positive a decision against it), a
linear probe on the cached *text* features alone (each candidate caption's global feature;
never the image's) is trained k-fold: the records are split into folds by image, and each
fold's records are scored by a probe trained on the other folds only, so no record, and no
record of the same image, is ever scored by a probe that saw it. A record the probe ranks
first is *blind-solvable*: its foils can be told from its gold caption by the text alone.
The audit gives each task's blind accuracy beside chance, and every scorer's accuracy on
the records the probe cannot solve beside its accuracy on all of them.

This is ours (flowclip's "blind text probe"), not any benchmark's official figure.
Hsieh et al. 2023 (SugarCrepe, arXiv 2306.14610, section 3) found text-only models
(Vera, a grammar model) solving much of ARO and CREPE without the image; the probe asks
the same question of every caption-choice task at once, with the scorer's own encoder.

The probe: s(c) = w . t(c), t(c) the caption's L2-normalised global feature, w fitted in
float64 by L-BFGS on the softmax cross-entropy over each record's candidates plus
L2 * |w|^2 (a bias would cancel in the softmax). A tie with the gold counts as unsolved.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from . import metrics

FOLDS = 5
L2 = 1e-4
ITERATIONS = 200
PROBE = (
    "blind text probe (ours): a linear score of each candidate caption's global text feature, "
    "softmax cross-entropy over the record's candidates + 1e-4 |w|^2, L-BFGS in float64; "
    "folds by image, each record scored by a probe that never saw it"
)


def image_folds(image_keys: np.ndarray, k: int, seed: int) -> np.ndarray:
    """Fold of every record [n]: each distinct image's records share one fold, images
    dealt to the k folds in a seeded order."""
    distinct, record_image = np.unique(np.asarray(image_keys), return_inverse=True)
    order = np.random.default_rng(seed).permutation(len(distinct))
    fold_of = np.empty(len(distinct), np.int64)
    fold_of[order] = np.arange(len(distinct)) % k
    return fold_of[record_image.ravel()]


def fit_probe(T: np.ndarray, C: np.ndarray, gold: np.ndarray, l2: float = L2) -> np.ndarray:
    """w [d] of the probe on records C [n, kmax] (indices into the caption features T
    [m, d]; -1 where a record has fewer candidates) with gold [n] their gold slots."""
    Tt = torch.from_numpy(np.asarray(T, np.float64))
    idx = torch.from_numpy(np.where(C < 0, 0, C))
    pad = torch.from_numpy(C < 0)
    g = torch.from_numpy(np.asarray(gold, np.int64))
    w = torch.zeros(Tt.shape[1], dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS(
        [w], max_iter=ITERATIONS, tolerance_grad=1e-10, tolerance_change=1e-15, line_search_fn="strong_wolfe"
    )

    def loss():
        opt.zero_grad()
        logits = (Tt @ w)[idx].masked_fill(pad, -torch.inf)
        value = torch.nn.functional.cross_entropy(logits, g) + l2 * (w @ w)
        value.backward()
        return value

    opt.step(loss)
    return w.detach().numpy()


def probe_scores(T: np.ndarray, C: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The probe's score of every candidate [n, kmax] (NaN where there is none)."""
    s = (np.asarray(T, np.float64) @ w)[np.where(C < 0, 0, C)]
    return np.where(C < 0, np.nan, s)


def blind_scores(
    T: np.ndarray, C: np.ndarray, gold: np.ndarray, folds: np.ndarray, fit: Callable = fit_probe
) -> np.ndarray:
    """Every record's candidates scored by the probe trained on the other folds [n, kmax]."""
    out = np.full(C.shape, np.nan)
    for f in np.unique(folds):
        held, train = folds == f, folds != f
        out[held] = probe_scores(T, C[held], fit(T, C[train], gold[train]))
    return out


def caption_matrix(captions: list[list[str]]) -> tuple[list[str], np.ndarray]:
    """The distinct caption texts (sorted) and each record's candidates as indices into
    them [n, kmax] (-1 past a record's last candidate)."""
    texts = sorted({c for cs in captions for c in cs})
    index = {c: i for i, c in enumerate(texts)}
    C = np.full((len(captions), max(map(len, captions))), -1, np.int64)
    for r, cs in enumerate(captions):
        C[r, : len(cs)] = [index[c] for c in cs]
    return texts, C


def audit_task(
    T: np.ndarray,
    C: np.ndarray,
    gold: np.ndarray,
    image_keys: np.ndarray,
    correct: dict[str, np.ndarray],
    folds: int = FOLDS,
    seed: int = 0,
    record_of: np.ndarray | None = None,
) -> dict:
    """One task's audit: T [m, d] the distinct captions' global features (normalised
    here), C [n, kmax] each decision's candidates (gold [n] its gold slot, image_keys [n]
    its image), correct {scorer: bool [records]} each scorer's decisions on the real
    images. record_of [n]: the record of each decision where a record takes several, all
    of which it must get right (a paraphrase record: each positive above the negative);
    None: one decision per record. -> blind accuracy, chance, the unsolved records'
    count, and per scorer its pooled accuracy on all records and on the unsolved ones."""
    n_images = len(np.unique(image_keys))
    if n_images < folds:
        return {"defined": False, "reason": f"{n_images} distinct images, fewer than the {folds} folds"}
    T = np.asarray(T, np.float64)
    T = T / np.maximum(np.linalg.norm(T, axis=1, keepdims=True), 1e-12)
    fold = image_folds(image_keys, folds, seed)
    solved = metrics.decisions(blind_scores(T, C, gold, fold), gold, "wrong")[0]
    chance = float(np.mean(1.0 / (C >= 0).sum(1)))
    if record_of is not None:  # every decision of a record right; chance: the negative below all k positives
        per = np.bincount(record_of)
        solved = np.bincount(record_of, weights=solved) == per
        chance = float(np.mean(1.0 / (per + 1)))
    unsolved = ~solved
    pooled = lambda c: float(np.mean(c)) if len(c) else float("nan")  # noqa: E731
    return {
        "defined": True,
        "n": int(len(solved)),
        "folds": folds,
        "blind_accuracy": pooled(solved),
        "chance": chance,
        "unsolved": int(unsolved.sum()),
        "scorers": {run: {"all": pooled(c), "blind_unsolved": pooled(c[unsolved])} for run, c in correct.items()},
        "probe": PROBE,
        "_solved": solved,  # per record, for blind_audit.parquet (dropped from results.json)
    }


CAPTION_CHOICE = ("pairwise", "candidates", "paraphrases")  # the task kinds whose candidates are captions


def audit_manifest(store, m, rows: list[dict], folds: int, seed: int, image_root=None) -> dict:
    """audit_task on a caption-choice or paraphrase manifest: its captions' global features
    from the store, each scorer's decisions from its real-image record rows (manifest
    order; a paraphrase record's: ITT, both positives above the negative)."""
    from ..hashing import caption_key
    from ..store.core import CAPTION
    from ..store.manifest_keys import manifest_keys

    t = m.table.to_pydict()
    if "positives" in t:  # paraphrases: each positive against the negative, a record right when all are
        record_of = np.repeat(np.arange(len(t["positives"])), [len(p) for p in t["positives"]])
        texts, C = caption_matrix([[p, n] for ps, n in zip(t["positives"], t["negative"]) for p in ps])
        gold = np.zeros(len(C), np.int64)
    else:
        record_of, (texts, C), gold = None, caption_matrix(t["captions"]), np.asarray(t["gold"])
    ikeys = np.array(manifest_keys(store, m, texts, image_root))
    T = store.load_global(CAPTION, [caption_key(c) for c in texts])
    correct: dict[str, list[bool]] = {}
    for r in rows:
        if r["control"] == "real":
            correct.setdefault(r["scorer"], []).append(r["correct"])
    decided = {k: np.array(v) for k, v in correct.items()}
    keys = ikeys if record_of is None else ikeys[record_of]
    res = audit_task(T, C, gold, keys, decided, folds, seed, record_of)
    if res["defined"]:
        first = next(iter(correct))
        res["_records"] = [r["record_id"] for r in rows if r["control"] == "real" and r["scorer"] == first]
    return res


def record_table(audits: dict) -> list[dict]:
    """blind_audit.parquet's rows: each audited record and whether the probe solved it."""
    return [
        {"benchmark": task, "record_id": rid, "blind_solved": bool(s)}
        for task, a in audits.items()
        if a["defined"]
        for rid, s in zip(a["_records"], a["_solved"].tolist())
    ]


def public(audit: dict) -> dict:
    """The audit as results.json keeps it (no per-record arrays)."""
    return {k: v for k, v in audit.items() if not k.startswith("_")}


def blind_section(summary, scorers, benches, name):
    """results.md's blind audit: each task's blind accuracy against chance, and each
    scorer's accuracy on every record and on the records the probe cannot solve."""
    audits = summary.get("blind_audit") or {}
    if not audits:
        return [], []
    from .report import _csv, fmt, table

    pct = lambda v: fmt(100 * v)  # noqa: E731  (NaN, no unsolved record: '–')
    rows, refused, csv = [], [], []
    for task, a in audits.items():
        if not a["defined"]:
            refused.append(f"- {task}: not audited ({a['reason']})")
            continue
        if a.get("partial"):
            refused.append(f"- {task}: rests on part of its records ({a['partial']})")
        for s in scorers:
            f = a["scorers"].get(s.run)
            if f:
                rows.append([task, pct(a["blind_accuracy"]), pct(a["chance"]), f"{a['unsolved']} of {a['n']}",
                             name[s.run], pct(f["all"]), pct(f["blind_unsolved"])])  # fmt: skip
                csv.append(_csv("real", name[s.run], f"{task} blind-unsolved", 100 * f["blind_unsolved"], False))
    md = [
        "## Blind audit (not any benchmark's official score)",
        "",
        "How much of each caption-choice and paraphrase task the text alone solves: a probe on the candidate captions' "
        f"cached text features, never the image ({PROBE}). **blind**: the share of records it ranks the "
        "gold caption first (a paraphrase record: both positives above the negative; a tie unsolved), beside "
        "chance (1 / candidates; 1/3 for a paraphrase record); each scorer's pooled accuracy "
        "on every record and on the records the probe cannot solve. Per record: blind_audit.parquet.",
        "",
        *table(
            ["task", "blind (%)", "chance (%)", "blind-unsolved", "scorer", "all (%)", "blind-unsolved (%)"], rows
        ),  # fmt: skip
        *refused,
        "",
    ]
    return md, csv
