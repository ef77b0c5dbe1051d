"""The synthetic world: deterministic, negatives differ, relations true of their scenes,
held-out combinations unseen in head training."""

import hashlib
import os
import random

import numpy as np
import pyarrow.parquet as pq
import pytest

from flowclip_cache.synthetic.world import (
    COLOURS,
    FAMILIES,
    OPPOSITE,
    SHAPES,
    Obj,
    build_world,
    held_out_combos,
    make_record,
    relation,
    render,
    sample_scene,
)


def digest(folder):
    h = hashlib.sha256()
    for dp, _, files in sorted(os.walk(folder)):
        for f in sorted(files):
            if f.endswith(".png") or f.endswith(".parquet"):
                h.update(f.encode())
                h.update(open(os.path.join(dp, f), "rb").read())
    return h.hexdigest()


def test_same_seed_same_bytes(tmp_path):
    a = build_world(str(tmp_path / "a"), seed=3, train_scenes=20, eval_scenes=10, heldout_scenes=5)
    b = build_world(str(tmp_path / "b"), seed=3, train_scenes=20, eval_scenes=10, heldout_scenes=5)
    assert digest(tmp_path / "a") == digest(tmp_path / "b")
    build_world(str(tmp_path / "c"), seed=4, train_scenes=20, eval_scenes=10, heldout_scenes=5)
    assert digest(tmp_path / "a") != digest(tmp_path / "c")
    assert set(a) == set(b) and os.path.exists(a["eval-swap-att"])


def test_negatives_differ_and_relations_hold():
    combos = [(c, s) for c in COLOURS for s in SHAPES]
    rng = random.Random(0)
    seen = {f: 0 for f in FAMILIES}
    for i in range(400):
        objs = sample_scene(rng, rng.choice((2, 3)), combos)
        for fam in FAMILIES:
            rec = make_record(objs, fam, random.Random(i), combos)
            if rec is None:
                continue
            seen[fam] += 1
            cands, gold = rec
            assert cands[0] == gold and all(c != gold for c in cands[1:]) and len(set(cands)) == len(cands)
            if fam == "relation":
                rel = next(r for r in OPPOSITE if f" {r} " in gold)
                first = next(o for o in objs if f"{o.colour} {o.shape} {rel}" in gold)
                second = next(o for o in objs if gold.endswith(f"{o.colour} {o.shape}"))
                assert relation(first, second) == rel  # true of the scene's positions
                assert OPPOSITE[rel] in cands[1]
            if fam == "order":
                assert len(cands) == 5 and all(sorted(c.split()) == sorted(gold.split()) for c in cands)
    assert all(n > 50 for n in seen.values()), seen


def test_relation_is_geometric():
    a = Obj("star", "red", "small", (0, 1))
    b = Obj("ring", "blue", "large", (2, 1))
    c = Obj("cone", "green", "small", (2, 0))
    assert relation(a, b) == "left of" and relation(b, a) == "right of"
    assert relation(c, b) == "above" and relation(b, c) == "below" and relation(a, c) is None


def test_heldout_combinations_never_in_head_training(tmp_path):
    paths = build_world(str(tmp_path / "w"), seed=0, train_scenes=120, eval_scenes=10, heldout_scenes=20)
    held = held_out_combos(0)
    words = {f"{c} {s}" for c, s in held}
    for r in pq.read_table(paths["training"]).to_pylist():
        assert not any(w in r["positive"] for w in words), r["positive"]
    rows = pq.read_table(paths["eval-heldout-swap-att"]).to_pylist()
    assert rows and sum(any(w in r["captions"][0] for w in words) for r in rows) > 0


def test_render_is_anti_aliased_and_sized():
    im = render([Obj("circle", "red", "large", (1, 1))], random.Random(0), 64)
    assert im.size == (64, 64)
    colours = {im.getpixel((x, 32)) for x in range(64)}
    assert len(colours) > 5  # edges blend: more than flat fills


def test_a_world_with_other_settings_is_refused(tmp_path):

    from flowclip_cache.errors import FlowclipError

    build_world(str(tmp_path / "w"), train_scenes=5, eval_scenes=5, heldout_scenes=2)
    build_world(str(tmp_path / "w"), train_scenes=5, eval_scenes=5, heldout_scenes=2)  # cached: fine
    with pytest.raises(FlowclipError, match="other settings"):
        build_world(str(tmp_path / "w"), train_scenes=6, eval_scenes=5, heldout_scenes=2)


def test_grounding_measure_by_hand():
    """Patches are one-hot, so token k's best patch is the one it names; row-major patch order,
    cell = (column, row), words naming two objects skipped."""
    from flowclip_cache.synthetic.grounding import grounding_hits

    patches = np.eye(9, dtype=np.float32)[None].repeat(2, 0)  # 3x3 patches, one per grid cell
    decoder = {2: "a</w>", 3: "red</w>", 4: "circle</w>", 5: "and</w>", 6: "blue</w>", 7: "square</w>"}
    ids = [[1, 2, 3, 4, 5, 2, 6, 7], [1, 2, 3, 4, 5, 2, 3, 7]]
    best = [
        [0, 0, 0, 1, 0, 0, 5, 3],  # red -> (0,0) hit, circle -> (1,0) miss, blue -> (2,1) hit, square miss
        [0, 0, 0, 4, 0, 0, 0, 7],
    ]  # red names two objects: skipped; circle (1,1) hit; square (1,2) hit
    tokens = [np.eye(9, dtype=np.float32)[b] for b in best]
    objects = [["red circle small 0 0", "blue square large 2 1"], ["red circle small 1 1", "red square small 1 2"]]
    g = grounding_hits(patches, tokens, ids, objects, decoder, shift=0)
    assert g["words"] == 6
    assert g["colour_hit_rate"] == 1.0 and g["shape_hit_rate"] == 0.5 and g["hit_rate"] == 4 / 6
    assert abs(g["chance"] - 1 / 9) < 1e-9 and g["colour_chance"] == pytest.approx(1 / 9) == g["shape_chance"]
    # object contrast: a word's best patch in no object's cell ties them all, which misses
    assert g["object_hit_rate"] == 4 / 6 and g["object_chance"] == 0.5
    # shift=1 (content mask: the start token is not stored) reads token k from row k-1
    g1 = grounding_hits(patches, [t[1:] for t in tokens], ids, objects, decoder, shift=1)
    assert g1 == g


def test_the_dry_runs_record_estimate_is_near_the_built_worlds_count(tmp_path):
    """estimate_training_records (what a dry run plans with) against the records a built
    world holds: within 10%."""
    import pyarrow.parquet as pq

    from flowclip_cache.synthetic.world import build_world, estimate_training_records

    paths = build_world(str(tmp_path / "w"), seed=3, train_scenes=300, eval_scenes=2, heldout_scenes=2, log=print)
    built = pq.read_table(paths["training"]).column("split").to_pylist().count("train")
    assert abs(estimate_training_records(300, seed=3) - built) <= 0.1 * built


def test_the_binding_labs_knobs(tmp_path):
    """scene_objects: every scene of every split holds exactly that many objects;
    binding_negatives: the share of training records with a binding negative follows the
    knob (every record whose scene hosts one at 1: 88% here; none at 0, about 2 in 7 by default); the marker
    records the knobs, and a default world's marker is as before (its bytes are unchanged:
    test_same_seed_same_bytes and a comparison with the code before the knobs). Mutation
    checked: the binding-first branch taken with probability 1 - share fails here."""
    import json

    from flowclip_cache.errors import FlowclipError
    from flowclip_cache.synthetic.world import BINDING, _scenes, check_world

    small = dict(train_scenes=120, eval_scenes=30, heldout_scenes=10)
    share = {}
    for name, knob in (("none", None), ("all", 1.0), ("no", 0.0)):
        paths = build_world(str(tmp_path / name), binding_negatives=knob, log=lambda *_: None, **small)
        kinds = [k[0] for k in pq.read_table(paths["training"]).column("negative_kinds").to_pylist()]
        share[name] = sum(k in BINDING for k in kinds) / len(kinds)
        marker = json.load(open(tmp_path / name / "WORLD_DONE"))
        assert ("binding_negatives" in marker) == (knob is not None)
    assert share["all"] >= 0.8 and share["no"] <= 0.1 and 0.15 <= share["none"] <= 0.45, share
    for k in (2, 3):
        paths = build_world(str(tmp_path / f"obj{k}"), scene_objects=k, log=lambda *_: None, **small)
        for key in ("eval-swap-att", "eval-heldout-swap-att"):
            assert {len(o) for o in pq.read_table(paths[key]).column("objects").to_pylist()} == {k}
        train = _scenes(str(tmp_path / "scenes"), 0, 16, set(), "train", 30, [("red", "circle"), ("blue", "star"),
                        ("green", "ring"), ("purple", "bar")], False, k)  # fmt: skip
        assert {len(objs) for _, objs, _ in train} == {k}
    for bad, why in (
        ({"bogus": 1}, "unknown key 'bogus'"),
        ({"scene_objects": 1}, "use 2 or 3"),
        ({"binding_negatives": 1.5}, "between 0 and 1"),
        ({"train_scenes": 2.5}, "is not an integer"),
    ):
        with pytest.raises(FlowclipError, match=why):
            check_world(bad, "world")


def test_contrast_sets_are_colour_swapped_twins_beside_an_untouched_world(tmp_path):
    """The image-choice and group stand-ins (synthetic/contrasts.py): the twins differ in
    the two colours alone (same shapes, cells, background: pixels differ only where the
    objects are), the captions hold the same words bound differently, the gold image's
    place varies, and the world's own files are left as they were."""
    from PIL import Image

    from flowclip_cache.errors import FlowclipError
    from flowclip_cache.manifest import Manifest
    from flowclip_cache.synthetic.contrasts import build_contrasts

    root = str(tmp_path / "w")
    build_world(root, seed=3, train_scenes=20, eval_scenes=10, heldout_scenes=5)
    before = {p: hashlib.sha256(open(os.path.join(root, p), "rb").read()).hexdigest()
              for p in os.listdir(root) if p.endswith(".parquet") or p == "WORLD_DONE"}  # fmt: skip
    paths = build_contrasts(root, seed=3, n=12)
    after = {p: hashlib.sha256(open(os.path.join(root, p), "rb").read()).hexdigest() for p in before}
    assert before == after
    groups = Manifest.read(paths["eval-groups"]).table.to_pylist()
    choice = Manifest.read(paths["eval-image-choice"]).table.to_pylist()
    assert len(groups) == len(choice) == 12
    for g in groups:
        a, b = g["captions"]
        assert a != b and sorted(a.split()) == sorted(b.split())
        ia, ib = (np.asarray(Image.open(os.path.join(paths["image_root"], p)).convert("RGB")) for p in g["images"])
        changed = (ia != ib).any(-1).mean()
        assert 0 < changed < 0.5  # the objects only
    assert len({c["gold"] for c in choice}) > 1
    assert all(c["images"][c["gold"]] == g["images"][0] for c, g in zip(choice, groups))
    # the paraphrase stand-in: the group's first scene, its caption, the objects named the other
    # way round (same words, same binding) and the twin's caption (same words, other binding)
    para = Manifest.read(paths["eval-paraphrases"]).table.to_pylist()
    for p, g in zip(para, groups):
        first, second = g["captions"][0].split(" and ")
        assert p["image"] == g["images"][0] and p["negative"] == g["captions"][1]
        assert p["positives"] == [g["captions"][0], f"{second} and {first}"]
    os.remove(paths["eval-paraphrases"])  # contrast sets built before the stand-in existed get it
    assert build_contrasts(root, seed=3, n=12) == paths  # idempotent
    assert Manifest.read(paths["eval-paraphrases"]).table.to_pylist() == para
    # the benchmark's converter uses an existing world as it is (its settings are not the defaults)
    from flowclip_cache.datasets import get
    from flowclip_cache.datasets.base import RowErrors

    report = get("synthetic-groups").build(root, str(tmp_path / "g.parquet"), RowErrors(), seed="3")
    assert report.records == 12  # (the contrast sets already there, n=12)
    with pytest.raises(FlowclipError, match="other settings"):
        build_contrasts(root, seed=3, n=13)


def test_the_profile_table_reads_each_row_against_its_own_worlds_chance():
    """Profiles of 2- and 3-object worlds side by side (the binding lab's): object contrast's
    chance is 1/2 for one and 1/3 for the other, so each world gets its chance row."""
    from flowclip_cache.scoring.profile import PROFILE_FAMILIES, profile_rows

    def prof(objects):
        g = {"hit_rate": 0.5, "colour_hit_rate": 0.4, "shape_hit_rate": 0.6, "object_hit_rate": 0.7}
        g |= {"chance": 1 / 9, "colour_chance": 1 / 9, "shape_chance": 1 / 9, "object_chance": 1 / objects}
        acc = {f: 0.5 for f in PROFILE_FAMILIES}
        return {"accuracy": acc, "chance": acc, "grounding": g}

    head, rows = profile_rows({"a, 2 objects": prof(2), "b, 2 objects": prof(2), "c, 3 objects": prof(3)})
    assert head[-4:] == ["patch in cell", "colour word in cell", "shape word in cell", "object contrast"]
    assert [(r[0], r[-1]) for r in rows[3:]] == [
        ("chance (as for a, 2 objects)", "50.0"),
        ("chance (as for c, 3 objects)", "33.3"),
    ]
    assert rows[0][-4:] == ["50.0", "40.0", "60.0", "70.0"]
    assert profile_rows({"a": prof(2)})[1][-1][0] == "chance"
