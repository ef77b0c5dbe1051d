"""Identical inputs score identical bits in every engine: a class name given
twice, a caption text that recurs in a gallery, an image shared by two gallery records, a
candidate listed twice. A GEMM may round two equal columns apart (on this CPU a duplicated
class column of `v @ C.T`, and of the contiguous `[d, C]` classifier too, differs in most
rows at small class counts), and topk or a >= rank would then decide the tie image by image.

Mutation tried: scoring the classifier columns without `_first_equal_row` (and the
pairwise head on every prompt instead of each distinct text) turns the classification
tests red (each of the three, tried one at a time); scoring the retrieval matrix by
gallery position (every record's image and caption row) instead of by distinct image and
text turns the retrieval test red, the duplicates sitting in a GEMM's edge tile."""

import numpy as np
import pyarrow as pa
import pytest
import torch
import torch.nn.functional as F

from flowclip_cache.extraction.encoders import EncoderSpec, resolve
from flowclip_cache.extraction.extract import run_extract
from flowclip_cache.hashing import caption_key
from flowclip_cache.heads import available_kinds, build_head
from flowclip_cache.manifest import Manifest, write_manifest
from flowclip_cache.scoring import metrics
from flowclip_cache.scoring.engines import classification_scores, retrieval_scores, score_candidates
from flowclip_cache.scoring.scorers import Scorer
from flowclip_cache.store import FeatureStore
from flowclip_cache.store.manifest_keys import image_keys

# eleven classes, the last a second "red" (as ImageNet's class names hold "crane" twice)
CLASSES = ["red", "green", "blue", "yellow", "purple", "orange", "pink", "grey", "brown", "black", "red"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from flowclip_cache.synthetic.sample import make_sample

    root = tmp_path_factory.mktemp("ties")
    s = make_sample(str(root / "sample"), n_images=24)
    cand = Manifest.read(s["candidates"]).table.to_pylist()
    zs, gallery, dup = root / "zs.parquet", root / "gallery.parquet", root / "dup.parquet"
    write_manifest(
        zs,
        pa.Table.from_pylist([{"image": r["image"], "label": i % 10} for i, r in enumerate(cand)]),
        "classification",
        {"benchmark": "cifar10", "classes": CLASSES, "prompts": [[f"a {c} thing", f"{c} stuff"] for c in CLASSES]},
    )
    rows = [{"image": r["image"], "captions": [r["captions"][0]]} for r in cand[:12]]
    rows[11]["captions"] = rows[0]["captions"]  # a caption text that recurs (last: a GEMM's edge tile)
    rows[10]["image"] = rows[2]["image"]  # an image two records share
    write_manifest(gallery, pa.Table.from_pylist(rows), "retrieval", {"benchmark": "coco-retrieval"})
    dup_rows = [dict(r, captions=[r["captions"][0], r["captions"][1], r["captions"][0]]) for r in cand[:12]]
    write_manifest(dup, pa.Table.from_pylist(dup_rows), "candidates", {"benchmark": "sugarcrepe"})
    enc = resolve(EncoderSpec("flowclip-tiny-clip"))
    fs = FeatureStore.open_or_create(str(root / "store"), enc.config)
    run_extract(fs, enc, [str(zs), str(gallery), str(dup)], s["image_root"], workers=0, progress=False)
    fs.refresh()
    return fs, {"zs": str(zs), "gallery": str(gallery), "dup": str(dup)}


def scorers(dim: int) -> list[Scorer]:
    torch.manual_seed(0)
    out = []
    for kind in available_kinds():
        head = build_head(kind, dim)
        for p in head.parameters():  # away from any zero initialisation, so every term counts
            p.data.add_(0.05 * torch.randn_like(p))
        out.append(Scorer(kind, kind, head.eval(), "test"))
    return out


def test_a_class_named_twice_scores_the_same_bits_as_clip_benchmark_lays_it_out(world):
    fs, m = world
    clip = next(s for s in scorers(fs.meta["dim"]) if s.method == "clip")
    per_class, how = classification_scores(fs, Manifest.read(m["zs"]), clip, "cpu")
    assert how == "embedding"
    assert np.array_equal(per_class[:, 10], per_class[:, 0])  # the tie is exact in every row
    # CLIP_benchmark's zero_shot_classifier and run_classification, written out: the
    # classifier stacked as [d, C], logits = 100 * image_features @ classifier
    v = F.normalize(torch.from_numpy(fs.load_images(image_keys(fs, Manifest.read(m["zs"]))).global_).float(), dim=-1)
    weights = []
    for c in CLASSES:
        keys = [caption_key(f"a {c} thing"), caption_key(f"{c} stuff")]
        e = F.normalize(torch.from_numpy(fs.load_captions(keys).global_).float(), dim=-1).mean(0)
        weights.append(e / e.norm())
    ref = (100.0 * v @ torch.stack(weights, dim=1)).numpy()
    ref[:, 10] = ref[:, 0]  # the duplicate's tie exact, as CLIP_benchmark keeps it (the measurement)
    np.testing.assert_allclose(per_class, ref, rtol=1e-5, atol=1e-5)  # (the store's renormalisation: rounding)
    labels = np.arange(len(ref)) % 10
    assert metrics.topk_accuracy(per_class, labels) == metrics.topk_accuracy(ref, labels)
    pred = torch.from_numpy(per_class).topk(5, 1, True, True)[1]
    assert torch.equal(pred, torch.from_numpy(ref).topk(5, 1, True, True)[1])  # every image's ranked classes


def test_a_pairwise_heads_duplicate_class_ties_exactly(world):
    fs, m = world
    for s in scorers(fs.meta["dim"]):
        if s.head.caption_embedding(torch.zeros(1, fs.meta["dim"])) is not None:
            continue  # embedding scorers: the test above
        per_class, how = classification_scores(fs, Manifest.read(m["zs"]), s, "cpu")
        assert how == "score"
        assert np.array_equal(per_class[:, 10], per_class[:, 0]), s.method


def test_a_recurring_caption_or_image_scores_the_same_in_retrieval(world):
    fs, m = world
    gallery = Manifest.read(m["gallery"])
    caps = [c for cs in gallery.table.column("captions").to_pylist() for c in cs]
    for s in scorers(fs.meta["dim"]):
        for budget in (2**30, 3000):  # the whole matrix in one block, and many small blocks
            blocks = retrieval_scores(fs, image_keys(fs, gallery), caps, s, "cpu", budget)
            sim = np.concatenate([b for _, b in blocks()])
            assert sim.shape == (12, 12)
            assert np.array_equal(sim[:, 11], sim[:, 0]), s.method  # the same caption text
            assert np.array_equal(sim[10], sim[2]), s.method  # the same image


def test_a_candidate_listed_twice_scores_the_same(world):
    fs, m = world
    out, *_ = score_candidates(fs, Manifest.read(m["dup"]), scorers(fs.meta["dim"]), ["real"], 0, "cpu")
    for (control, run), scores in out.items():
        assert np.array_equal(scores[:, 0], scores[:, 2]), run
