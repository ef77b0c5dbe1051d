"""sDCI (datasets/_dci.py, sdci_matching.py, sdci_negatives.py) on a small data folder in
the release's layout (densely_captioned_images/: splits.json, complete/, photos/): the
entries its loader yields, the crops `get_subimage` cuts (pixel for pixel), the negatives
each strategy picks (a planted clip_scores tie), the images it leaves out, and both tests
scored end to end by `flowclip score` equal to a transcription of
run_dense_cap_test_on_model (facebookresearch/DCI 8326c97) on the store's own features,
in fixed batches of 8 with planted exact ties.

Mutations tried: torch.max's first index taken as the last (tie rule "correct") turns the
end-to-end test red; int(0.15 x side) rounded instead of truncated turns the crop test red;
the hardest negative taken as the first of a tie turns the strategy test red; batches of 4
turn the batch test red; the own bag pooled by max (not min) turns the end-to-end test red."""

import json
import os

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from flowclip_cache.cli import main
from flowclip_cache.datasets import _dci, get
from flowclip_cache.datasets.base import RowErrors
from flowclip_cache.manifest import Manifest

W, H = 640, 480


def mask(idx, x1, y1, x2, y2, quality=0, requirements=()):
    return {"idx": idx, "bounds": {"topLeft": {"x": x1, "y": y1}, "bottomRight": {"x": x2, "y": y2}},
            "label": f"thing {idx}", "caption": f"a thing {idx}", "mask_quality": quality,
            "requirements": list(requirements), "parent": -1, "area": 1}  # fmt: skip


def negs(tag):
    return {"swaps": [f"{tag} swapped", f"{tag} swapped again"], "layout": [f"{tag} moved"], "basic": [f"{tag} plain"]}


def annotation(photo, tag, masks, summaries=True, negatives=True):
    big = lambda b: min(b["bottomRight"]["x"] - b["topLeft"]["x"], b["bottomRight"]["y"] - b["topLeft"]["y"]) >= 224  # noqa: E731
    keys = ["base"] + [f"m-{m['idx']}-sc" for m in masks if big(m["bounds"])]
    d = {"image": photo, "short_caption": f"{tag} photo", "extra_caption": "more", "mask_data":
         {str(m["idx"]): m for m in masks}, "mask_keys": [str(m["idx"]) for m in masks]}  # fmt: skip
    if summaries:
        more = lambda k: [f"{tag} {k} summary, told {j} ways" for j in range(5)]  # noqa: E731  (six in all)
        d["summaries"] = {k: [f"{tag} {k} summary", *more(k)] if i % 2 == 0 else f"{tag} {k} summary"
                          for i, k in enumerate(keys)}  # fmt: skip
    if negatives:
        d["negatives"] = {k: negs(f"{tag} {k}") for k in keys}
    d["clip_scores"] = {k: {"swaps_0": 0.2, "swaps_1": 0.5, "layout_0": 0.5, "basic_0": 0.1} for k in keys}
    return d


@pytest.fixture(scope="module")
def dci(tmp_path_factory):
    from flowclip_cache.synthetic.sample import make_sample

    base = tmp_path_factory.mktemp("dci")
    s = make_sample(str(base / "sample"), n_images=6)
    pngs = sorted(os.path.join(s["image_root"], p) for p in os.listdir(s["image_root"]) if p.endswith(".png"))
    root = base / "data" / "densely_captioned_images"
    (root / "photos").mkdir(parents=True)
    (root / "complete").mkdir()
    three = [mask(0, 10, 20, 300, 260, requirements=[1]), mask(1, 50, 50, 150, 150), mask(2, 400, 250, 640, 480),
             mask(3, 100, 100, 400, 400, quality=2)]  # fmt: skip
    files = {
        "a.json": annotation("sa_a.jpg", "a", three),
        "b.json": annotation("sa_b.jpg", "b", three, summaries=False),  # left out quietly
        "c.json": annotation("sa_c.jpg", "c", three),  # a summary missing: left out of all_*
        "d.json": annotation("sa_d.jpg", "d", three),  # one negatives entry: left out where masks load
        "e.json": annotation("sa_e.jpg", "e", three),
        "f.json": annotation("sa_f.jpg", "f", three),
    }
    del files["c.json"]["summaries"]["m-2-sc"]
    files["d.json"]["negatives"] = {"base": negs("d base")}
    files["a.json"]["summaries"]["m-3-sc"] = files["a.json"]["summaries"]["m-2-sc"]  # an exact tie in batch 0
    files["e.json"]["summaries"]["base"] = files["e.json"]["summaries"]["base"][:4]  # too few for a bag of five
    for i, (f, d) in enumerate(files.items()):
        json.dump(d, open(root / "complete" / f, "w"))
        Image.open(pngs[i]).convert("RGB").resize((W, H)).save(root / "photos" / d["image"], "JPEG")
    json.dump({"train": [], "valid": [], "test": list(files)}, open(root / "splits.json", "w"))
    out = base / "manifests"
    out.mkdir()
    reports = {n: get(n).build(str(base / "data"), str(out / f"{n}.parquet"), RowErrors())
               for n in ("sdci-matching", "sdci-negatives")}  # fmt: skip
    return {"base": base, "root": root, "out": out, "reports": reports}


def test_the_entries_are_the_loaders(dci):
    rep = dci["reports"]["sdci-matching"]
    # a, e, f: 4 each; bases of a, c-f; bags of five: a's base, m-2-sc and m-3-sc, e's m-2-sc, f's base and m-2-sc
    assert rep.counts == {"all_swaps": 12, "all_swaps_pick5_first": 6, "base_swaps": 5, "all_hardest": 12}
    assert rep.skipped == [] and "1 test image(s) without summaries" in rep.notes[0]
    left = Manifest.read(dci["out"] / "sdci-matching.parquet").meta["left_out"]
    subs = ("all_swaps", "all_swaps_pick5_first", "all_hardest")
    assert [x.split("/")[-1] for x in left] == [f"c.json: left out of {s} (KeyError: 'm-2-sc')" for s in subs]
    rows = Manifest.read(dci["out"] / "sdci-matching.parquet").table.to_pylist()
    a = [r for r in rows if r["subtest"] == "all_swaps"][:4]
    assert [r["key"] for r in a] == ["base", "m-0-sc", "m-2-sc", "m-3-sc"]  # mask 1 too small; quality 2 kept
    assert a[0]["crop"] is None and a[0]["captions"][0] == "a base summary"  # a list's first summary
    assert a[0]["bags"] == list(range(8))  # one summary an entry
    bag = [r for r in rows if r["subtest"] == "all_swaps_pick5_first"][0]
    assert bag["captions"][:5] == ["a base summary", *(f"a base summary, told {j} ways" for j in range(4))]
    assert bag["bags"] == [j for j in range(6) for _ in range(5)] and bag["gold"] == 0


def test_a_batch_is_eight_entries_in_file_order_across_photos(dci):
    rows = [r for r in Manifest.read(dci["out"] / "sdci-matching.parquet").table.to_pylist()
            if r["subtest"] == "all_swaps"]  # fmt: skip
    assert [r["batch"] for r in rows] == [0] * 8 + [1] * 4
    assert all(r["captions"] == rows[0]["captions"] for r in rows[:8]) and len(rows[8]["captions"]) == 4
    assert [r["gold"] for r in rows] == list(range(8)) + list(range(4))
    assert rows[4]["dci_file"] == "e.json" and rows[0]["dci_file"] == "a.json"  # one batch, two photos


def test_the_crops_are_get_subimages_pixels(dci):
    from flowclip_cache.extraction.images import load_image

    rows = Manifest.read(dci["out"] / "sdci-matching.parquet").table.to_pylist()
    photo = str(dci["root"] / "photos" / "sa_a.jpg")
    for r in rows[1:4]:
        m = json.load(open(dci["root"] / "complete" / "a.json"))["mask_data"][r["key"].split("-")[1]]
        b = m["bounds"]  # dense_image.py get_subimage, transcribed
        width, height = b["bottomRight"]["x"] - b["topLeft"]["x"], b["bottomRight"]["y"] - b["topLeft"]["y"]
        w_pad, h_pad = int(width * 0.15), int(height * 0.15)
        cx1, cy1 = max(b["topLeft"]["x"] - w_pad, 0), max(b["topLeft"]["y"] - h_pad, 0)
        cx2, cy2 = min(b["bottomRight"]["x"] + w_pad, W), min(b["bottomRight"]["y"] + h_pad, H)
        want = np.array(Image.open(photo))[cy1:cy2, cx1:cx2]
        assert np.array_equal(np.array(load_image(photo, r["crop"])), want)
    assert rows[2]["crop"] == [364, 216, 276, 264]  # mask 2 (240 x 230) padded by 36 x 34, clipped at the edge


def test_each_strategy_picks_the_releases_negative(dci):
    rows = Manifest.read(dci["out"] / "sdci-negatives.parquet").table.to_pylist()
    by = {(r["subtest"], r["record_id"].split("/")[1]): r["captions"] for r in rows}
    assert by[("all_swaps", "0")] == ["a base summary", "a base swapped"]
    # hardest over every source: scores swaps 0.2, 0.5, layout 0.5, basic 0.1: a stable sort's last is layout
    assert by[("all_hardest", "0")] == ["a base summary", "a base moved"]
    assert _dci.negative_of(negs("x"), "any", "hardest", {"swaps_0": 0.9, "swaps_1": 0.5, "layout_0": 0.9,
                                                          "basic_0": 0.1}) == "x moved"  # fmt: skip


def _features(store, manifest, root):
    from flowclip_cache.hashing import caption_key
    from flowclip_cache.store import FeatureStore
    from flowclip_cache.store.manifest_keys import image_keys

    fs = FeatureStore(store)
    m = Manifest.read(manifest)
    unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731
    v = unit(fs.load_global("img", image_keys(fs, m, root)).astype(np.float64))
    cap = lambda texts: unit(fs.load_global("cap", [caption_key(c) for c in texts]).astype(np.float64))  # noqa: E731
    return m.table.to_pylist(), v, cap


def test_both_tests_score_as_run_dense_cap_test_on_model(dci, tmp_path):
    out, photos = dci["out"], str(dci["root"] / "photos")
    store = str(tmp_path / "store")
    r = CliRunner().invoke(main, ["extract", "--store", store, "--model", "flowclip-tiny-clip", "--pretrained", "none",
                                  "--manifest",
                                  str(out / "sdci-matching.parquet"), "--manifest", str(out / "sdci-negatives.parquet"),
                                  "--image-root", photos, "--quiet", "--workers", "0"])  # fmt: skip
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["score", "--store", store, "--manifests", str(out), "--scorer", "clip", "--out",
                                  str(tmp_path / "score"), "--image-root", photos, "--bootstrap", "0", "--quiet",
                                  "--no-figures"])  # fmt: skip
    assert r.exit_code == 0, r.output
    res = json.load(open(tmp_path / "score" / "results.json"))["results"]["real|clip"]
    rows, v, cap = _features(store, str(out / "sdci-negatives.parquet"), photos)
    for subtest in _dci.SUBTESTS:
        idx = [i for i, r in enumerate(rows) if r["subtest"] == subtest]
        n = len(rows[idx[0]]["captions"]) - 1  # the bag's size: the captions before the negative
        V, N = v[idx], cap([rows[i]["captions"][-1] for i in idx])
        T = cap([c for i in idx for c in rows[i]["captions"][:-1]])
        clip_correct = neg_correct = 0
        for a in range(0, len(idx), 8):  # the release's loop, one batch of the DataLoader at a time
            clip_logits = torch.from_numpy(V[a : a + 8] @ T[n * a : n * (a + 8)].T)
            bs = len(clip_logits)
            similarity = clip_logits.reshape((bs, bs, n)).max(dim=2).values  # get_pooled_groups 'max'
            min_sim_diag = clip_logits.reshape((bs, bs, n)).min(dim=2).values.diag()  # get_pooled_diag 'min'
            similarity[range(bs), range(bs)] = min_sim_diag
            maxes = torch.max(similarity, dim=1)
            clip_correct += sum(int(i == m) for i, m in enumerate(maxes.indices))
            neg_diag = torch.from_numpy(V[a : a + 8] @ N[a : a + 8].T).diag()
            neg_correct += sum(min_sim_diag > neg_diag).item()
        assert res["sdci-matching"]["by_subtest"][subtest] == clip_correct / len(idx), subtest
        assert res["sdci-negatives"]["by_subtest"][subtest] == neg_correct / len(idx), subtest
    ties = res["sdci-matching"]
    assert ties["ties"] >= 2  # the planted duplicate summary, in all_swaps and all_hardest
    assert ties["score"] == pytest.approx(np.mean(list(ties["by_subtest"].values())), abs=1e-15)


def test_masks_that_require_each_other_are_refused_not_walked_forever():
    """A stranger's mask tree with a cycle (the release recurses until Python stops it, or
    with branching, without end): refused at once, and the image left out."""
    cyclic = {"mask_data": {"0": {"idx": 0, "requirements": [1, 1], "mask_quality": 0},
                            "1": {"idx": 1, "requirements": [0, 0], "mask_quality": 0}}}  # fmt: skip
    with pytest.raises((RecursionError, ValueError)):
        _dci._submasks(cyclic, cyclic["mask_data"]["0"])
    wide = {"mask_data": {str(i): {"idx": i, "requirements": list(range(60)), "mask_quality": 0} for i in range(60)}}
    with pytest.raises((RecursionError, ValueError)):
        _dci._submasks(wide, wide["mask_data"]["0"], depth=5)  # 60^5 paths: the visit budget stops it
