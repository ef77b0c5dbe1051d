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
from .world import GRID

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


def grounding_hits(patches: np.ndarray, tokens: list[np.ndarray], token_ids: list[list[int]],
                   objects: list[list[str]], decoder: dict, shift: int) -> dict:
    """The grounding measure itself, over arrays: for each colour or shape word of a caption
    that names exactly one object of its scene, is the patch its token matches best inside
    that object's grid cell? patches [B,N,d]; tokens[i] [L_i,d] (token k of token_ids[i] is
    row k - shift); objects[i] = object_label strings ('colour shape size column row')."""
    g = int(round(np.sqrt(patches.shape[1])))
    centres = (np.stack(np.meshgrid(np.arange(g), np.arange(g)), -1).reshape(-1, 2) + 0.5) / g   # (x, y)
    hits = {"colour": [], "shape": []}
    chance = []
    for i, ids in enumerate(token_ids):
        objs = [o.split() for o in objects[i]]
        for k, t in enumerate(ids):
            word = decoder.get(int(t), "")
            if not word.endswith("</w>"):
                continue
            word = word[:-4]
            for kind, col in (("colour", 0), ("shape", 1)):
                owners = [o for o in objs if o[col] == word]
                if len(owners) != 1 or not 0 <= k - shift < len(tokens[i]):
                    continue
                cx, cy = int(owners[0][3]), int(owners[0][4])
                inside = ((centres[:, 0] >= cx / GRID) & (centres[:, 0] < (cx + 1) / GRID) &
                          (centres[:, 1] >= cy / GRID) & (centres[:, 1] < (cy + 1) / GRID))
                best = int(np.argmax(patches[i] @ tokens[i][k - shift]))
                hits[kind].append(bool(inside[best]))
                chance.append(float(inside.mean()))
    allh = hits["colour"] + hits["shape"]
    return {"hit_rate": float(np.mean(allh)) if allh else float("nan"),
            "colour_hit_rate": float(np.mean(hits["colour"])) if hits["colour"] else float("nan"),
            "shape_hit_rate": float(np.mean(hits["shape"])) if hits["shape"] else float("nan"),
            "chance": float(np.mean(chance)) if chance else float("nan"), "words": len(allh)}


def tokenizer_decoder(model_name: str):
    import open_clip
    tok = open_clip.get_tokenizer(model_name)
    decoder = getattr(tok, "decoder", None)
    if decoder is None:
        raise ValueError("patch grounding needs open_clip's SimpleTokenizer")
    return tok, decoder


def patch_grounding(store: FeatureStore, manifest_path: str) -> dict:
    """grounding_hits over a manifest's gold captions, from the stored features."""
    from .data import image_keys
    m = Manifest.read(manifest_path)
    rows = m.table.to_pylist()
    tok, decoder = tokenizer_decoder(store.encoder_config["model"])
    golds = [r["captions"][r["gold"]] for r in rows]
    im = store.load_images(image_keys(store, m))
    cp = store.load_captions([caption_key(c) for c in golds])
    shift = 1 if store.encoder_config["token_mask"] == "content" else 0
    ids_all = tok(golds)
    ids = [[int(x) for x in row if int(x) != 0] for row in ids_all]
    toks = [cp.tokens[cp.offsets[i]:cp.offsets[i + 1]].astype(np.float32) for i in range(len(rows))]
    return grounding_hits(im.patches.astype(np.float32), toks, ids, [r["objects"] for r in rows], decoder, shift)


def clip_profile(store: FeatureStore, paths: dict) -> dict:
    return {"accuracy": accuracies(store, paths), "grounding": patch_grounding(store, paths["eval-swap-att"])}
