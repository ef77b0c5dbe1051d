"""Which tokens carry Flow-CLIP's binding decision on the synthetic world, and where the
refinement moves the attribute words' patch support (the binding lab's diagnosis:
docs/results-synthetic.md, "When does local evidence bind?").

For each swap-att record (gold "a red circle and a blue star", foil "a blue circle and a
red star": the same words, the colours traded), from the trained head's own equations
(FlowHead.token_evidence):
- by role (attribute = a colour word, object = a shape word, relation, function,
  special): the mean over records of the role's part of s_token(gold) - s_token(foil),
  and its share of the mean |difference| summed over roles;
- for each colour word of the gold caption: its patch support's mass on the cell of the
  object it belongs to, before the refinement (softmax of q . p) and after (of qres . p).
An untrained head (W = 0) has s_token = 0 and moves nothing: the figures are the
training's."""

from __future__ import annotations

import numpy as np
import torch

from ..synthetic.scenes import COLOURS, GRID, SHAPES
from ..synthetic.world import OPPOSITE

ROLES = ("attribute", "object", "relation", "function", "special")
RELATION_WORDS = {w for rel in OPPOSITE for w in rel.split() if w != "of"}


def role_of(token: str) -> str:
    word = token.strip().removesuffix("</w>").lower()
    if word.startswith("<") and word.endswith(">"):
        return "special"
    if word in COLOURS:
        return "attribute"
    if word in SHAPES:
        return "object"
    return "relation" if word in RELATION_WORDS else "function"


def cell_mask(n_patches: int, column: int, row: int) -> np.ndarray:
    """Which of the square patch grid's patches have their centre in world cell (column, row)."""
    g = int(round(np.sqrt(n_patches)))
    centres = (np.stack(np.meshgrid(np.arange(g), np.arange(g)), -1).reshape(-1, 2) + 0.5) / g  # (x, y)
    inside = lambda c, k: (c >= k / GRID) & (c < (k + 1) / GRID)
    return inside(centres[:, 0], column) & inside(centres[:, 1], row)


def record_figures(head, v, P, t, H, mask, tokens: list[list[str]], objects: list[str]) -> dict:
    """One record: v [d], P [N, d], t [2, d] and H [2, L, d] for (gold, foil); tokens: the
    two captions' valid tokens as text; objects: the scene's object labels."""
    with torch.no_grad():
        ev = head.token_evidence(v, P, t, H, mask)
    contrib = ev["contrib"].float().cpu().numpy()
    diff = {r: 0.0 for r in ROLES}
    s_global = ev["s_global"].float().cpu().numpy()
    for c, sign in ((0, 1.0), (1, -1.0)):
        for k, tok in enumerate(tokens[c]):
            diff[role_of(tok)] += sign * float(contrib[c, k])
    owners = {o.split()[0]: o.split() for o in objects}
    moved = []
    for k, tok in enumerate(tokens[0]):
        word = tok.strip().removesuffix("</w>").lower()
        parts = owners.get(word) if role_of(tok) == "attribute" else None
        if parts is None or sum(o.split()[0] == word for o in objects) != 1:
            continue
        cell = cell_mask(P.shape[0], int(parts[3]), int(parts[4]))
        before = ev["maps"]["before"][0, k].float().cpu().numpy()
        after = ev["maps"]["after"][0, k].float().cpu().numpy()
        moved.append((float(before[cell].sum()), float(after[cell].sum()), float(cell.mean())))
    return {"diff": diff, "moved": moved, "global": float(s_global[0] - s_global[1])}


def diagnose(head, records: list[dict]) -> dict:
    """records: record_figures' inputs, one dict per record (keys of record_figures) ->
    per role the mean gold-minus-foil part of s_token (points of s) and its share of the
    summed mean |part|; the attribute words' mean support on their own object's cell
    before and after the refinement, with chance: the mean over those words of their own
    cell's share of the patches (cells differ in size: a corner cell's share is not it)."""
    per = [record_figures(head, **{k: v for k, v in r.items() if k != "image"}) for r in records]
    mean = {r: float(np.mean([p["diff"][r] for p in per])) for r in ROLES}
    absolute = {r: float(np.mean([abs(p["diff"][r]) for p in per])) for r in ROLES}
    total = sum(absolute.values()) or 1.0
    moved = [m for p in per for m in p["moved"]]
    chance = float(np.mean([share for _, _, share in moved])) if moved else float("nan")
    return {
        "records": len(per),
        "s_global_gold_minus_foil": {
            "mean": float(np.mean([p["global"] for p in per])),
            "mean_abs": float(np.mean([abs(p["global"]) for p in per])),
        },
        "s_token_gold_minus_foil": {r: mean[r] for r in ROLES},
        "s_token_mean_abs": float(np.mean([abs(sum(p["diff"].values())) for p in per])),
        "share_of_abs_difference": {r: absolute[r] / total for r in ROLES},
        "attribute_support_on_own_object": {
            "words": len(moved),
            "before": float(np.mean([b for b, _, _ in moved])) if moved else float("nan"),
            "after": float(np.mean([a for _, a, _ in moved])) if moved else float("nan"),
            "chance": chance,
        },
        # each record's mean after - before over its colour words (NaN: none): support_change's input
        "support_change_by_record": [
            float(np.mean([a - b for b, a, _ in p["moved"]])) if p["moved"] else float("nan") for p in per
        ],
    }


def support_change(change: np.ndarray, images: np.ndarray, draws: int = 1000, seed: int = 0) -> dict:
    """The colour words' mean support change (after - before, points) over records with a
    colour word, and its 95% interval by the image-cluster bootstrap the studies use
    (stats.image_weights): change [records] (NaN: no colour word), images [records] the
    index of each record's image."""
    from .stats import image_weights

    ok = ~np.isnan(change)
    c, img = change[ok], np.unique(images[ok], return_inverse=True)[1].ravel()
    if not len(c):
        return {"mean_pts": float("nan"), "ci95_pts": [float("nan")] * 2, "draws": 0}
    stats = []
    for W in image_weights(int(img.max()) + 1, draws, seed):
        w = W[:, img]
        stats.append((w @ c) / np.maximum(w.sum(1), 1e-12))
    d = 100 * np.concatenate(stats)
    return {"mean_pts": float(100 * c.mean()), "ci95_pts": [float(np.percentile(d, q)) for q in (2.5, 97.5)],
            "draws": draws}  # fmt: skip


def swap_att_records(store, manifest_path: str, image_root: str | None = None) -> list[dict]:
    """record_figures' inputs for every record of a synthetic swap-att manifest, from the
    store's features (the tokens as the store holds them)."""
    from ..manifest import Manifest
    from ..store.banks import FeatureBank
    from ..store.manifest_keys import manifest_keys
    from .explain import token_labels

    m = Manifest.read(manifest_path)
    rows = m.table.to_pylist()
    texts = sorted({c for r in rows for c in r["captions"]})
    keys = manifest_keys(store, m, texts, image_root)
    uimg = sorted(set(keys))
    bank = FeatureBank.load(store, uimg, texts, True, "cpu")
    labels = dict(zip(texts, token_labels(store, texts)))
    at = {c: i for i, c in enumerate(texts)}
    out = []
    for r, key in zip(rows, keys):
        caps = [r["captions"][r["gold"]]] + [c for i, c in enumerate(r["captions"]) if i != r["gold"]][:1]
        v, P, t, H, mask = bank.features(torch.tensor([uimg.index(key)] * 2), torch.tensor([at[c] for c in caps]), True)
        out.append(
            {"v": v[0], "P": P[0], "t": t, "H": H, "mask": mask, "tokens": [labels[c] for c in caps],
             "objects": r["objects"], "image": key}
        )  # fmt: skip
    return out


def mean_of(dicts: list):
    """The element-wise mean of nested dicts of numbers (the seeds' diagnoses)."""
    first = dicts[0]
    if isinstance(first, dict):
        return {k: mean_of([d[k] for d in dicts]) for k in first}
    return float(np.mean(dicts))
