"""The engine of the kinds whose record is a small image x caption matrix: image
candidates (one caption, K images: ImageCoDe, SPEC text-to-image) and 2x2 groups
(Winoground and its kin). Every (image, caption) pair a task names is scored once, then
indexed into each record's matrix, so a pair that recurs (an image two records share, a
candidate listed twice) scores the same bits wherever it appears and ties stay exact.

The Real/Shuffle/Fixed image controls are not defined here: in these tasks the images
are the candidates (or half the group), so replacing them replaces the answer set, not
the evidence; only Real is scored (docs/method.md, "Image controls")."""

from __future__ import annotations

import numpy as np
import torch

from ..hashing import caption_key
from ..manifest import Manifest
from ..store.banks import FeatureBank
from ..store.manifest_keys import manifest_keys
from . import metrics
from .aggregation import aggregate, aggregate_groups, bootstrap_task
from .engines import _chunked_matched

MATRIX_TASKS = ("image_candidates", "groups")


def record_captions(m: Manifest) -> list[list[str]]:
    """Each record's captions: the one caption of an image-candidates record, a group's two."""
    t = m.table
    return (
        [[c] for c in t.column("caption").to_pylist()]
        if m.kind == "image_candidates"
        else t.column("captions").to_pylist()
    )


def split_rows(flat: list, m: Manifest) -> list[list]:
    """Per-image values in image_refs() order, regrouped per record."""
    out, at = [], 0
    for paths in m.row_images():
        out.append(flat[at : at + len(paths)])
        at += len(paths)
    return out


def score_matrices(store, m: Manifest, scorers, device, image_root=None, max_memory_mb: int | None = None):
    """-> ({run: [records, images, captions] float32, NaN past a record's own sizes},
    the manifest's columns, each record's image keys)."""
    caps = record_captions(m)
    texts = sorted({c for cs in caps for c in cs})
    ikeys = split_rows(manifest_keys(store, m, texts, image_root), m)
    pairs = sorted({(k, c) for ks, cs in zip(ikeys, caps) for k in ks for c in cs})
    where = {p: j for j, p in enumerate(pairs)}
    values = pair_scores(store, pairs, scorers, device, max_memory_mb or 2048)
    n, imax, cmax = len(caps), max(map(len, ikeys)), max(map(len, caps))
    out = {}
    for s in scorers:
        mat = np.full((n, imax, cmax), np.nan, np.float32)
        for r, (ks, cs) in enumerate(zip(ikeys, caps)):
            for i, k in enumerate(ks):
                for c, text in enumerate(cs):
                    mat[r, i, c] = values[s.run][where[(k, text)]]
        out[s.run] = mat
    return out, m.table.to_pydict(), ikeys


def pair_scores(store, pairs: list[tuple[str, str]], scorers, device, max_memory_mb: int) -> dict:
    """{run: [len(pairs)]} the score of each (image key, caption text) pair, in chunks of
    pairs (sorted by image) whose features fit about max_memory_mb."""
    need_tokens = any(s.head.uses_tokens for s in scorers)
    d, P = store.meta["dim"], store.meta["num_patches"]
    texts = sorted({c for _, c in pairs})
    L = store.count_tokens([caption_key(c) for c in texts]) / max(1, len(texts)) if need_tokens else 0
    per_pair = 2 * d * (2 + (P + L if need_tokens else 0)) * 2  # FP16 rows of one image and one caption, twice
    size = max(1, int(max_memory_mb * 2**20 / per_pair))
    out = {s.run: np.empty(len(pairs), np.float32) for s in scorers}
    for a in range(0, len(pairs), size):
        chunk = pairs[a : a + size]
        imgs, texts = sorted({k for k, _ in chunk}), sorted({c for _, c in chunk})
        bank = FeatureBank.load(store, imgs, texts, need_tokens, device)
        ii = {k: i for i, k in enumerate(imgs)}
        ci = {c: i for i, c in enumerate(texts)}
        img_ids = torch.tensor([ii[k] for k, _ in chunk], device=device)
        cap_ids = torch.tensor([ci[c] for _, c in chunk], device=device)
        for s in scorers:
            out[s.run][a : a + len(chunk)] = _chunked_matched(s.head, bank, img_ids, cap_ids, max_memory_mb)
    return out


def score_matrix_task(store, m, name, sc, scorers, device, image_root, max_memory_mb, results: dict, all_images: dict):
    """An image-candidates or groups manifest (Real images only): its aggregation into
    results, its per-record rows, the decision changes between scorers (on the official
    score's decisions) and its bootstrap input (records clustered by their first image:
    the records of one ImageCoDe set, or of one group, resample together)."""
    mats, cols, ikeys = score_matrices(store, m, scorers, device, image_root, max_memory_mb)
    ids = [str(x) for x in cols["record_id"]]
    correct, rows = {}, []
    for s in scorers:
        mat = mats[s.run]
        golds: list = [None] * len(ids)
        if sc.task == "groups":
            results.setdefault(("real", s.run), {})[name] = aggregate_groups(sc, mat, cols)
            correct[s.run] = metrics.group_decisions(mat, sc.tie_rule)[sc.headline_metric]
            flat = [row.ravel() for row in mat]  # image 0 with captions 0, 1; image 1 with captions 0, 1
        else:
            scores, gold = mat[:, :, 0], np.asarray(cols["gold"])
            th = s.head.decision_threshold()
            results.setdefault(("real", s.run), {})[name] = aggregate(sc, scores, gold, cols, th)
            correct[s.run] = metrics.decisions(scores, gold, sc.tie_rule)[0]
            flat, golds = list(scores), gold.tolist()
        rows += [
            {
                "benchmark": name,
                "record_id": rid,
                "control": "real",
                "scorer": s.run,
                "scores": v[~np.isnan(v)].tolist(),
                "gold": g,
                "correct": bool(c),
            }
            for rid, v, g, c in zip(ids, flat, golds, correct[s.run])
        ]
    changes = metrics.changes_between_runs({s.run: correct[s.run] for s in scorers})
    cluster = np.array([ks[0] for ks in ikeys])
    return rows, changes, [bootstrap_task(name, sc, cols, cluster, correct, all_images)]
