"""The frozen CLIP's profile on the synthetic world (issue: the world must make the
frozen CLIP behave like real CLIP before any head experiment means anything):
object recognition, binding, relations, and whether patches ground the words."""
from __future__ import annotations

import numpy as np

from . import metrics
from .hashing import caption_key
from .heads import FlowHead
from .manifest import Manifest
from .store import FeatureStore

PROFILE_FAMILIES = ("object", "swap-att", "swap-obj", "relation", "order", "add", "replace", "heldout-swap-att")


def accuracies(store: FeatureStore, paths: dict, head: FlowHead | None = None) -> dict:
    from .score import Scorer, score_candidates
    head = head or FlowHead(store.meta["dim"], "clip")
    scorer = Scorer("clip", "clip", head, "frozen")
    out = {}
    for fam in PROFILE_FAMILIES:
        m = Manifest.read(paths[f"eval-{fam}"])
        mats, gold, _, _ = score_candidates(store, m, [scorer], ("real",), 0, "cpu")
        out[fam] = float(np.mean(metrics.decisions(mats[("real", "clip")], gold, "wrong")[0]))
    return out


def patch_grounding(store: FeatureStore, manifest_path: str) -> dict:
    """For each colour or shape word of a gold caption that names exactly one object, is
    the patch its token matches best inside that object's grid cell?"""
    import open_clip

    from .data import image_keys
    m = Manifest.read(manifest_path)
    rows = m.table.to_pylist()
    tok = open_clip.get_tokenizer(store.encoder_config["model"])
    decoder = getattr(tok, "decoder", None)
    if decoder is None:
        raise ValueError("patch grounding needs open_clip's SimpleTokenizer")
    ikeys = image_keys(store, m)
    golds = [r["captions"][r["gold"]] for r in rows]
    im = store.load_images(ikeys)
    cp = store.load_captions([caption_key(c) for c in golds])
    shift = 1 if store.encoder_config["token_mask"] == "content" else 0
    P = im.patches.astype(np.float32)
    g = int(round(np.sqrt(P.shape[1])))
    centres = (np.stack(np.meshgrid(np.arange(g), np.arange(g)), -1).reshape(-1, 2) + 0.5) / g   # (x, y)
    hits = {"colour": [], "shape": []}
    chance = []
    ids_all = tok(golds)
    for i, r in enumerate(rows):
        objs = [o.split() for o in r["objects"]]
        ids = [int(x) for x in ids_all[i] if int(x) != 0]
        toks = cp.tokens[cp.offsets[i]:cp.offsets[i + 1]].astype(np.float32)
        for k, t in enumerate(ids):
            word = decoder.get(t, "")
            if not word.endswith("</w>"):
                continue
            word = word[:-4]
            for kind, col in (("colour", 0), ("shape", 1)):
                owners = [o for o in objs if o[col] == word]
                if len(owners) != 1 or not 0 <= k - shift < len(toks):
                    continue
                cx, cy = int(owners[0][3]), int(owners[0][4])
                inside = ((centres[:, 0] >= cx / 3) & (centres[:, 0] < (cx + 1) / 3) &
                          (centres[:, 1] >= cy / 3) & (centres[:, 1] < (cy + 1) / 3))
                best = int(np.argmax(P[i] @ toks[k - shift]))
                hits[kind].append(bool(inside[best]))
                chance.append(float(inside.mean()))
    allh = hits["colour"] + hits["shape"]
    return {"hit_rate": float(np.mean(allh)) if allh else float("nan"),
            "colour_hit_rate": float(np.mean(hits["colour"])) if hits["colour"] else float("nan"),
            "shape_hit_rate": float(np.mean(hits["shape"])) if hits["shape"] else float("nan"),
            "chance": float(np.mean(chance)) if chance else float("nan"), "words": len(allh)}


def clip_profile(store: FeatureStore, paths: dict) -> dict:
    return {"accuracy": accuracies(store, paths), "grounding": patch_grounding(store, paths["eval-swap-att"])}
