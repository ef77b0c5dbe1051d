"""The synthetic world's grounding measure: for each colour or shape word that names one
object of its scene, is the patch its token matches best inside that object's grid cell?
Arrays in, numbers out: `flowclip profile` applies it to stored features
(scoring/profile.py), the tiny CLIP's pretraining to the model's own (training/pretrain.py)."""

from __future__ import annotations

import numpy as np

from .scenes import GRID


def grounding_hits(
    patches: np.ndarray,
    tokens: list[np.ndarray],
    token_ids: list[list[int]],
    objects: list[list[str]],
    decoder: dict,
    shift: int,
) -> dict:
    """The grounding measures themselves, over arrays, for each colour or shape word of a
    caption that names exactly one object of its scene:
    - hit_rate: is the patch its token matches best inside that object's grid cell?
      (background counts: chance = the cell's share of the patches)
    - object_hit_rate: of the scene's objects, does the named one's cell have the highest
      mean token-patch similarity, strictly? (what binding needs: chance = 1 / objects)
    patches [B,N,d]; tokens[i] [L_i,d] (token k of token_ids[i] is row k - shift);
    objects[i] = object_label strings ('colour shape size column row')."""
    g = int(round(np.sqrt(patches.shape[1])))
    centres = (np.stack(np.meshgrid(np.arange(g), np.arange(g)), -1).reshape(-1, 2) + 0.5) / g  # (x, y)

    def cell(o):
        cx, cy = int(o[3]), int(o[4])
        return (
            (centres[:, 0] >= cx / GRID)
            & (centres[:, 0] < (cx + 1) / GRID)
            & (centres[:, 1] >= cy / GRID)
            & (centres[:, 1] < (cy + 1) / GRID)
        )

    hits: dict[str, list] = {"colour": [], "shape": []}
    chances: dict[str, list] = {"colour": [], "shape": []}
    obj_hits, obj_chance = [], []
    for i, ids in enumerate(token_ids):
        objs = [o.split() for o in objects[i]]
        cells = [cell(o) for o in objs]
        for k, t in enumerate(ids):
            word = decoder.get(int(t), "")
            if not word.endswith("</w>"):
                continue
            word = word[:-4]
            for kind, col in (("colour", 0), ("shape", 1)):
                owners = [j for j, o in enumerate(objs) if o[col] == word]
                if len(owners) != 1 or not 0 <= k - shift < len(tokens[i]):
                    continue
                sim = patches[i] @ tokens[i][k - shift]
                inside = cells[owners[0]]
                hits[kind].append(bool(inside[int(np.argmax(sim))]))
                chances[kind].append(float(inside.mean()))
                per_object = [sim[c].mean() for c in cells]
                others = [v for j, v in enumerate(per_object) if j != owners[0]]
                obj_hits.append(bool(per_object[owners[0]] > max(others, default=-np.inf)))  # a tie misses
                obj_chance.append(1 / len(objs))
    allh = hits["colour"] + hits["shape"]
    rate = lambda h: float(np.mean(h)) if h else float("nan")
    return {
        "hit_rate": rate(allh),
        "colour_hit_rate": rate(hits["colour"]),
        "shape_hit_rate": rate(hits["shape"]),
        "chance": rate(chances["colour"] + chances["shape"]),
        "colour_chance": rate(chances["colour"]),
        "shape_chance": rate(chances["shape"]),
        "object_hit_rate": rate(obj_hits),
        "object_chance": rate(obj_chance),
        "words": len(allh),
    }
