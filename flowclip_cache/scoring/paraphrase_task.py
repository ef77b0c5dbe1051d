"""The engine of paraphrase manifests (SugarCrepe++ and its kin): an image, two captions
that describe it (P1, P2) and a negative N. Image-to-text (ITT): the image scores both
positives above the negative; text-only (TOT): sim(P1, P2) above sim(P1, N) and sim(P2,
N), with the scorer's own caption-caption similarity (Head.caption_similarity; a scorer
without one gets "not defined", never a number). Every comparison strict (a tie is
wrong), as Sri-Harsha/scpp's VLMs/test_Variants_CLIP.py writes them.

ITT is scored under every image control (the candidates engine, captions [P1, P2, N]);
TOT reads no image, so it is one figure per scorer, reported under each control."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import torch
import torch.nn.functional as F

from ..datasets.base import Scoring
from ..hashing import caption_key
from ..manifest import Manifest
from ..store.layout import CAPTION
from . import metrics
from .aggregation import _kept, aggregate_figures, bootstrap_task
from .engines import score_candidates
from .metrics import ITT, P1, P2, TOT, paraphrase_decisions  # noqa: F401  (callers import them from here)

NO_TEXT_SIMILARITY = (
    "not defined for this scorer: its head defines no caption-caption similarity (a pairwise score has "
    "no caption embedding; a head declares one with caption_similarity; docs/plugins.md)"
)


def aggregate_paraphrases(sc: Scoring, s: np.ndarray, text: np.ndarray | None, cols: dict) -> dict:
    """ITT (the headline), Image-P1-Neg, Image-P2-Neg and TOT, each aggregated as the
    benchmark aggregates (per file, and the score over them), breakdowns per column as
    '<value> <metric>'; TOT "not defined" with its reason for a scorer without a
    caption-caption similarity."""
    keep = _kept(sc, cols, len(s))
    d = {k: v[keep] for k, v in paraphrase_decisions(s, text).items()}
    ties = {"ties": int(d["itt_tie"].sum()), "ties_text": int(d["tot_tie"].sum()) if "tot_tie" in d else None}
    names = dict(sc.metric_names)  # a benchmark's own names for the figures (hard positives: augmented, ...)
    shown = {m: names.get(m, m) for m in (ITT, P1, P2, TOT) if m in d and (m != TOT or sc.text_only_test)}
    res = aggregate_figures(sc, d, shown, names.get(ITT, ITT), cols, keep, ties)
    if TOT not in d and sc.text_only_test:
        res["metrics"][TOT] = {"defined": False, "reason": NO_TEXT_SIMILARITY}
    return res


def as_candidates(m: Manifest) -> Manifest:
    """The manifest seen as candidate sets [P1, P2, N] (gold 0), for the candidates engine."""
    t = m.table
    caps = [list(p) + [n] for p, n in zip(t.column("positives").to_pylist(), t.column("negative").to_pylist())]
    t = t.append_column("captions", pa.array(caps)).append_column("gold", pa.array([0] * len(caps), pa.int64()))
    return Manifest(m.path, "candidates", t, m.meta)


def text_similarities(store, m: Manifest, scorers, device) -> dict[str, np.ndarray | None]:
    """{run: [n, 3] sim(P1, P2), sim(P1, N), sim(P2, N)} from the captions' globals (FP16
    in the store, re-normalised in FP32 as every bank delivers them), or None for a
    scorer whose head has no caption_similarity."""
    t = m.table
    pos, neg = t.column("positives").to_pylist(), t.column("negative").to_pylist()
    texts = sorted({c for p in pos for c in p} | set(neg))
    where = {c: i for i, c in enumerate(texts)}
    g = F.normalize(torch.from_numpy(store.load_global(CAPTION, [caption_key(c) for c in texts])).float(), dim=-1)
    g = g.to(device)
    idx = lambda cs: torch.tensor([where[c] for c in cs], device=device)  # noqa: E731
    p1, p2, n = idx([p[0] for p in pos]), idx([p[1] for p in pos]), idx(neg)
    out: dict[str, np.ndarray | None] = {}
    with torch.no_grad():
        for s in scorers:
            first = s.head.caption_similarity(g[:1], g[:1])
            if first is None:
                out[s.run] = None
                continue
            sims = [s.head.caption_similarity(g[a], g[b]) for a, b in ((p1, p2), (p1, n), (p2, n))]
            out[s.run] = torch.stack(sims, 1).cpu().numpy()
    return out


def score_paraphrase_task(
    store, m, name, sc, scorers, controls, seed, device, image_root, max_memory_mb, results: dict, all_images: dict
):
    """A paraphrase manifest under every control: its aggregation into results, its
    per-record rows (scores [P1, P2, N]; correct: ITT), the decision changes between
    scorers and its bootstrap input (on ITT, the headline)."""
    mats, _, cols, ikeys = score_candidates(
        store, as_candidates(m), scorers, controls, seed, device, image_root, name, max_memory_mb
    )
    cols = m.table.to_pydict()
    text = text_similarities(store, m, scorers, device) if sc.text_only_test else {s.run: None for s in scorers}
    ids = [str(x) for x in cols["record_id"]]
    correct_real, rows = {}, []
    for (control, run), mat in mats.items():
        res = aggregate_paraphrases(sc, mat, text[run], cols)
        results.setdefault((control, run), {})[name] = res
        correct = paraphrase_decisions(mat)[ITT]
        if control == "real":
            correct_real[run] = correct
        rows += [
            {"benchmark": name, "record_id": rid, "control": control, "scorer": run, "scores": v.tolist(),
             "gold": None, "correct": bool(c)}
            for rid, v, c in zip(ids, mat, correct)
        ]  # fmt: skip
    if "real" not in controls:
        return rows, {}, []
    changes = metrics.changes_between_runs({s.run: correct_real[s.run] for s in scorers})
    return rows, changes, [bootstrap_task(name, sc, cols, ikeys, correct_real, all_images)]
