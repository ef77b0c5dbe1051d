"""The frozen CLIP's profile on the synthetic world (the world must make the
frozen CLIP behave like real CLIP before any head experiment means anything):
object recognition, binding, relations, and whether patches ground the words."""

from __future__ import annotations

import numpy as np

from ..hashing import caption_key
from ..heads import Head, build_head
from ..manifest import Manifest
from ..store import FeatureStore
from ..synthetic.grounding import grounding_hits
from . import metrics

PROFILE_FAMILIES = ("object", "swap-att", "swap-obj", "relation", "order", "add", "replace", "heldout-swap-att")


def accuracies(store: FeatureStore, paths: dict, head: Head | None = None) -> tuple[dict, dict]:
    """(accuracy per family, chance per family: the mean of 1 / candidates per record)."""
    from .engines import score_candidates
    from .scorers import Scorer

    head = head or build_head("clip", store.meta["dim"])
    scorer = Scorer("clip", "clip", head, "frozen")
    out, chance = {}, {}
    for fam in PROFILE_FAMILIES:
        m = Manifest.read(paths[f"eval-{fam}"])
        mats, gold, _, _ = score_candidates(store, m, [scorer], ("real",), 0, "cpu")
        out[fam] = float(np.mean(metrics.decisions(mats[("real", "clip")], gold, "wrong")[0]))
        chance[fam] = float(np.mean([1 / len(c) for c in m.table.column("captions").to_pylist()]))
    return out, chance


def patch_grounding(store: FeatureStore, manifest_path: str) -> dict:
    """grounding_hits over a manifest's gold captions, from the stored features."""
    from ..extraction.encoders import EncoderSpec, ResolvedEncoder
    from ..extraction.families import family_of
    from ..store.manifest_keys import manifest_keys

    m = Manifest.read(manifest_path)
    rows = m.table.to_pylist()
    cfg = store.encoder_config
    fam = family_of(cfg).text_only(ResolvedEncoder(EncoderSpec(cfg["model"]), None, cfg))
    tok = fam.tokenizer
    if getattr(tok, "decoder", None) is None:
        raise ValueError("patch grounding needs open_clip's SimpleTokenizer (the OpenAI-style family)")
    golds = [r["captions"][r["gold"]] for r in rows]
    im = store.load_images(manifest_keys(store, m, golds))
    cp = store.load_captions([caption_key(c) for c in golds])
    shift = 1 if store.encoder_config["token_mask"] == "content" else 0
    t = fam.tokenize(golds)
    ids = [row[m].tolist() for row, m in zip(t.ids, t.mask)]
    toks = [cp.tokens[cp.offsets[i] : cp.offsets[i + 1]].astype(np.float32) for i in range(len(rows))]
    return grounding_hits(im.patches.astype(np.float32), toks, ids, [r["objects"] for r in rows], tok.decoder, shift)


def clip_profile(store: FeatureStore, paths: dict) -> dict:
    acc, chance = accuracies(store, paths)
    return {"accuracy": acc, "chance": chance, "grounding": patch_grounding(store, paths["eval-swap-att"])}


def profile_rows(profiles: dict[str, dict]) -> tuple[list[str], list[list[str]]]:
    """(header, rows): one row per named profile (accuracy per family, both grounding
    measures, in %), then the chance row each is read against (order: 1 in 5; pairs: 50%):
    one per distinct world, named by its first profile, when the worlds' chances differ."""
    from .report import fmt

    pct = lambda v: fmt(None if v is None else 100 * v, 1)
    head = ["", *PROFILE_FAMILIES, "patch in cell", "colour word in cell", "shape word in cell", "object contrast"]
    rows = [
        [
            name,
            *(pct(p["accuracy"][f]) for f in PROFILE_FAMILIES),
            *(pct(p["grounding"].get(k)) for k in ("hit_rate", "colour_hit_rate", "shape_hit_rate", "object_hit_rate")),
        ]
        for name, p in profiles.items()
    ]
    chance_rows: dict[tuple, str] = {}  # one chance row per distinct world (2 or 3 objects differ), its first profile
    for name, p in profiles.items():
        chance, g = p.get("chance", {}), p["grounding"]
        cells = [
            *(pct(chance.get(f)) for f in PROFILE_FAMILIES),
            *(pct(g.get(k)) for k in ("chance", "colour_chance", "shape_chance", "object_chance")),
        ]
        chance_rows.setdefault(tuple(cells), name)
    several = len(chance_rows) > 1
    rows += [[f"chance (as for {first})" if several else "chance", *cells] for cells, first in chance_rows.items()]
    return head, rows


PROFILE_NOTE = (
    "Columns: each task family's accuracy (%) of the frozen encoder's global score; then its patch grounding, "
    "over the colour and shape words of captions naming one object: *patch in cell*, how often a word's "
    "best-matching patch lies in its object's grid cell (colour words and shape words apart in the next two "
    "columns); *object contrast*, how often, of the scene's objects, the named one's cell has the highest mean "
    "word-patch similarity (what binding needs). The chance row: each accuracy's chance, and each grounding "
    "measure's (a cell's share of the patches; one over the objects)."
)


def profile_table(prof: dict, name: str) -> str:
    """The encoder's row above the chance row (profile_rows for one profile), and what the
    columns measure."""
    from .report import table

    return "\n".join(table(*profile_rows({name: prof}))) + "\n\n" + PROFILE_NOTE
