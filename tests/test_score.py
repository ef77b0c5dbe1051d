"""Official aggregations on hand-built score tables; ties; controls; bootstrap; the engine."""

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from flowclip_cache.datasets import get
from flowclip_cache.errors import FlowclipError
from flowclip_cache.manifest import write_manifest
from flowclip_cache.scoring import metrics
from flowclip_cache.scoring.score import aggregate, control_images, run_score
from flowclip_cache.scoring.stats import paired_bootstrap, weighted_stat

NAN = np.nan


def test_decisions_and_tie_rules():
    s = np.array([[1.0, 1.0], [2.0, 1.0], [1.0, 2.0], [3.0, 3.0]])
    gold = np.array([0, 0, 0, 1])
    c, t = metrics.decisions(s, gold, "wrong")
    assert c.tolist() == [False, True, False, False] and t.tolist() == [True, False, False, True]
    assert metrics.decisions(s, gold, "correct")[0].tolist() == [True, True, False, True]


def test_candidates_with_padding_and_ranks():
    s = np.array([[0.9, 0.5, 0.9, NAN], [0.1, 0.2, 0.3, 0.4], [0.5, 0.1, NAN, NAN]])
    gold = np.array([0, 3, 0])
    assert metrics.decisions(s, gold, "wrong")[0].tolist() == [False, True, True]
    assert metrics.gold_rank(s, gold, "wrong").tolist() == [1, 0, 0]
    assert metrics.gold_rank(s, gold, "correct").tolist() == [0, 0, 0]
    assert metrics.recall_at(np.array([0, 2, 5, 1]), 3) == 0.75


def test_macro_with_min_count_by_hand():
    correct = np.array([1, 1, 0, 1, 0, 0, 1], bool)
    groups = np.array(["a", "a", "a", "b", "b", "c", "c"])
    # a = 2/3, b = 1/2, c = 1/2; min_count 3 keeps only a
    assert metrics.macro_accuracy(correct, groups) == pytest.approx((2 / 3 + 0.5 + 0.5) / 3)
    assert metrics.macro_accuracy(correct, groups, min_count=3) == pytest.approx(2 / 3)


def test_sugarcrepe_groups_and_cross_check():
    sc = get("sugarcrepe").scoring
    rng = np.random.default_rng(0)
    subsets = np.array(["add_att"] * 4 + ["add_obj"] * 2 + ["swap_att"] * 3 + ["swap_obj"] * 1)
    scores = rng.random((10, 2))
    gold = np.zeros(10, int)
    res = aggregate(sc, scores, gold, {"subset": subsets})
    # independent computation, one record at a time
    right = {}
    for s, (g, f) in zip(subsets, scores):
        right.setdefault(s, []).append(g > f)
    per = {k: sum(v) / len(v) for k, v in right.items()}
    assert res["by_subset"] == pytest.approx(per)
    assert res["pooled"] == pytest.approx(np.mean([g > f for g, f in scores]))
    # group means pooled over their records (vl_compo's weighting); the headline is their mean
    add = np.mean([g > f for s, (g, f) in zip(subsets, scores) if s.startswith("add")])
    swap = np.mean([g > f for s, (g, f) in zip(subsets, scores) if s.startswith("swap")])
    assert res["named_groups"]["Add"] == pytest.approx(add) and res["named_groups"]["Swap"] == pytest.approx(swap)
    assert res["score"] == pytest.approx((add + swap) / 2) and "no record of Replace" in res["partial"]
    assert res["named_groups"]["Swap-O"] == pytest.approx(per["swap_obj"])


def test_whatsup_subset_mean_and_vgr_exclusion():
    sc = get("whatsup-coco-spatial").scoring
    scores = np.array([[1, 0], [1, 0], [1, 0], [0, 1], [1, 0], [1, 1]], float)
    subset = np.array(["one"] * 4 + ["two"] * 2)
    res = aggregate(sc, scores, np.zeros(6, int), {"subset": subset})
    # one: 3/4; two: 2/2 (a tie counts as correct for What's Up) -> (0.75 + 1) / 2, not pooled 5/6
    assert res["score"] == pytest.approx(0.875) and res["ties"] == 1
    vgr = get("aro-vg-relation").scoring
    scores = np.array([[1, 0], [0, 1], [1, 0], [1, 1]], float)
    res = aggregate(
        vgr,
        scores,
        np.zeros(4, int),
        {"relation": np.array(["on", "on", "eats", "eats"]), "excluded": np.array([False, False, True, False])},
    )
    # eats keeps only its tie (wrong for VG-R): on = 1/2, eats = 0 -> 0.25
    assert res["score"] == pytest.approx(0.25) and res["excluded"] == 1 and res["ties"] == 1


def test_retrieval_recall_against_a_loop():
    rng = np.random.default_rng(1)
    sim = rng.random((4, 9))
    cap_img = np.array([0, 0, 1, 1, 2, 2, 3, 3, 3])
    got = metrics.retrieval_recall(sim, cap_img, (1, 2))
    for k in (1, 2):
        i2t = np.mean([bool(set(np.argsort(-sim[i])[:k]) & set(np.flatnonzero(cap_img == i))) for i in range(4)])
        t2i = np.mean([cap_img[t] in np.argsort(-sim[:, t])[:k] for t in range(9)])
        assert got[f"i2t_R@{k}"] == pytest.approx(i2t) and got[f"t2i_R@{k}"] == pytest.approx(t2i)


def test_retrieval_ties_count_against_the_query_in_both_directions():
    """One rule both ways: a wrong candidate scoring as high as the right one ranks above it."""
    const = np.zeros((4, 4))
    got = metrics.retrieval_recall(const, np.arange(4), (1, 4))
    assert got["i2t_R@1"] == got["t2i_R@1"] == 0.0 and got["i2t_R@4"] == got["t2i_R@4"] == 1.0  # rank 3
    assert got["i2t_ties"] == got["t2i_ties"] == 4
    # by hand: image 0's captions 0,1; image 1's caption 2. sim rows = images.
    sim = np.array(
        [
            [0.5, 0.9, 0.9],  # image 0: best positive 0.9 ties caption 2 (wrong) -> rank 1
            [0.2, 0.1, 0.7],
        ]
    )  # image 1: 0.7 beats all -> rank 0
    got = metrics.retrieval_recall(sim, np.array([0, 0, 1]), (1, 2))
    assert got["i2t_R@1"] == 0.5 and got["i2t_R@2"] == 1.0 and got["i2t_ties"] == 1
    # captions: c0 true 0.5 vs 0.2 -> 0; c1 0.9 vs 0.1 -> 0; c2 true 0.7 vs 0.9 -> 1
    assert got["t2i_R@1"] == pytest.approx(2 / 3) and got["t2i_ties"] == 0


def test_topk_by_hand():
    logits = np.array([[0.1, 0.9, 0.5], [0.8, 0.1, 0.3]])
    want = {"top1": 0.5, "top2": 1.0, "mean_per_class_recall": 0.5, "ties": 0}
    assert metrics.topk_accuracy(logits, np.array([2, 0]), (1, 2)) == want
    # per-class recall by hand: class 0 has three images (two right), class 1 one (wrong): (2/3 + 0) / 2
    logits = np.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    got = metrics.topk_accuracy(logits, np.array([0, 0, 0, 1]), (1, 5))
    assert got["top1"] == 0.5 and got["mean_per_class_recall"] == pytest.approx(1 / 3) and got["top5"] is None


def test_controls_keep_candidates_together():
    rec = np.arange(50)
    shuffled = control_images(rec, "shuffle", 0, "t")
    assert sorted(shuffled) == list(rec) and (shuffled != rec).any()
    assert (control_images(rec, "shuffle", 0, "t") == shuffled).all()
    fixed = control_images(rec, "fixed", 0, "t")
    assert len(set(fixed)) == 1


def test_bootstrap_by_hand_and_groups():
    W = np.array([[2, 0, 1], [0, 3, 0]], np.float32)  # two draws over three records
    c = np.array([1, 0, 1], bool)
    v, lost = weighted_stat(c, W, None)
    assert v.tolist() == pytest.approx([1.0, 0.0]) and not lost.any()
    v, lost = weighted_stat(c, W, np.array(["a", "b", "b"]))
    # draw 0: a = 1, b = 1/1 -> 1; draw 1: a has no weight -> only b = 0, reported as lost
    assert v.tolist() == pytest.approx([1.0, 0.0]) and lost.tolist() == [False, True]
    tasks = [
        {
            "name": "t",
            "image_index": np.array([0, 0, 1, 2]),
            "groups": None,
            "correct": {
                "a": np.array([1, 1, 0, 0], bool),
                "b": np.array([1, 1, 0, 0], bool),
                "c": np.array([1, 1, 1, 1], bool),
            },
        }
    ]
    out = paired_bootstrap(tasks, {"A": ["a"], "B": ["b"], "C": ["c"]}, [("A", "B"), ("A", "C")], 3, 400, 0)
    assert out["t"]["B - A"]["ci95_pts"] == [0.0, 0.0]  # identical decisions: no difference
    lo, hi = out["t"]["C - A"]["ci95_pts"]
    assert 0 <= lo <= 50 <= hi <= 100
    # the difference printed is the observed one (C 100%, A 50%: exactly 50 points), not the
    # draws' mean beside it
    c_a = out["t"]["C - A"]
    assert c_a["mean_pts"] == 50.0 and c_a["bootstrap_mean_pts"] != 50.0


def test_seeds_resampled_and_holm_by_hand():
    """Every image scores alike, so images carry no spread: method A's two seeds
    both 50%, B's seeds 100% and 0%. Averaging the seeds in each draw (the paper's Sec. 4.3)
    gives B - A = 0 in every draw; drawing the seeds too gives B in {0, 50, 100} with
    probabilities 1/4, 1/2, 1/4, so the 95% interval is [-50, 50] and p = 1. Holm's
    adjustment of (0.01, 0.04, 0.03, 0.005) by hand: (0.03, 0.06, 0.06, 0.02)."""
    from flowclip_cache.scoring.stats import holm

    n = 40
    half = np.arange(n) % 2 == 0
    correct = {"a0": half, "a1": half, "b0": np.ones(n, bool), "b1": np.zeros(n, bool)}
    tasks = [{"name": "t", "image_index": np.arange(n) // 2, "groups": None, "correct": correct}]
    methods = {"A": ["a0", "a1"], "B": ["b0", "b1"]}
    runs = lambda rs: paired_bootstrap(tasks, methods, [("A", "B")], n // 2, 2000, 0, rs)["t"]["B - A"]  # noqa: E731
    fixed, drawn = runs(False), runs(True)
    assert fixed["ci95_pts"] == [0.0, 0.0] and not fixed["seeds_resampled"]
    assert drawn["ci95_pts"] == [-50.0, 50.0] and drawn["seeds_resampled"] and drawn["mean_pts"] == 0.0
    assert drawn["p_two_sided"] == 1.0 and abs(drawn["bootstrap_mean_pts"]) < 3
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.2, float("nan")])[0] == 0.2


@pytest.fixture
def scored_world(tmp_path, tiny_encoder):
    from flowclip_cache.extraction.extract import run_extract
    from flowclip_cache.store import FeatureStore
    from flowclip_cache.synthetic.sample import make_sample
    from flowclip_cache.training.loop import TrainConfig, train_head

    s = make_sample(str(tmp_path / "s"), n_images=24)
    fs = FeatureStore.open_or_create(str(tmp_path / "store"), tiny_encoder.config)
    run_extract(fs, tiny_encoder, [s["candidates"], s["training"]], s["image_root"], workers=0, progress=False)
    fs.refresh()
    run = str(tmp_path / "flow")
    train_head(
        fs,
        s["training"],
        run,
        TrainConfig(head="flow", epochs=1, batch_size=8, lr=1e-3),
        progress=False,
        log=lambda *_: None,
    )
    return fs, s, run, tmp_path


def test_run_score_end_to_end(scored_world):
    fs, s, run, tmp = scored_world
    out = str(tmp / "res")
    run_score(
        fs,
        [s["candidates"]],
        ["clip", run],
        out,
        controls=("real", "shuffle", "fixed"),
        bootstrap_draws=200,
        log=lambda *_: None,
    )
    for f in ("results.json", "records.parquet", "results.md", "results.csv", "margins_sample.png"):
        assert os.path.exists(os.path.join(out, f))
    res = json.load(open(os.path.join(out, "results.json")))
    assert set(res["results"]) == {f"{c}|{r}" for c in ("real", "shuffle", "fixed") for r in ("clip", "flow")}
    assert res["store_fingerprint"] == fs.fingerprint and len(res["scorers"][1]["head_sha256"]) == 64
    assert "flow - clip" in res["bootstrap"]["sample"]
    import pyarrow.parquet as pq

    recs = pq.read_table(os.path.join(out, "records.parquet")).to_pylist()
    assert len(recs) == 24 * 3 * 2
    # the official number equals a re-aggregation of the per-record table
    real_clip = [r["correct"] for r in recs if r["control"] == "real" and r["scorer"] == "clip"]
    assert res["results"]["real|clip"]["sample"]["score"] == pytest.approx(np.mean(real_clip))
    with pytest.raises(FlowclipError, match="exists; pass --overwrite"):
        run_score(fs, [s["candidates"]], ["clip"], out, log=lambda *_: None)


def test_score_refusals(scored_world, tiny_encoder):
    fs, s, run, tmp = scored_world
    from flowclip_cache.extraction.encoders import EncoderSpec, resolve
    from flowclip_cache.store import FeatureStore

    other = FeatureStore.open_or_create(
        str(tmp / "other"), resolve(EncoderSpec("flowclip-tiny-vit", init_seed=5)).config
    )
    with pytest.raises(FlowclipError, match="trained on .* but this store holds .* refused"):
        run_score(other, [s["candidates"]], [run], str(tmp / "x"), log=lambda *_: None)
    with pytest.raises(FlowclipError, match="features missing from the store(.|\n)*--pretrained none --init-seed 5"):
        run_score(other, [s["candidates"]], ["clip"], str(tmp / "y"), log=lambda *_: None)
    from flowclip_cache.store.manifest_keys import _weights_args  # the hint gives each store's own weights back

    assert _weights_args({"weights": {"source": "flowclip:synthetic", "sha256": "x"}}) == ["--pretrained", "synthetic"]
    assert _weights_args({"weights": {"source": "open_clip:openai"}}) == ["--pretrained", "openai"]
    bad = tmp / "bad.parquet"
    write_manifest(
        bad,
        pa.table({"record_id": ["1"], "image": ["a.png"], "captions": [["a", "b"]], "gold": [0]}),
        "candidates",
        {"benchmark": "whatsup-coco-spatial"},
    )
    with pytest.raises(FlowclipError, match="needs column 'subset', which is missing"):
        run_score(fs, [str(bad)], ["clip"], str(tmp / "z"), log=lambda *_: None)


def test_topk_keeps_what_torch_topk_keeps_on_ties():
    """Hand-checked: image 0's true class (1) ties class 0 at the top; torch.topk (as
    open_clip's and CLIP_benchmark's accuracy) keeps one class, so top-1 is 1/2 or 2/2 as
    topk decides, never by a rule that counts every tie right; top-2 holds both."""
    logits = np.array([[0.5, 0.5, 0.1], [0.2, 0.9, 0.3]], np.float32)
    labels = np.array([1, 1])
    kept = torch.from_numpy(logits).topk(1, 1, True, True)[1][0, 0].item()
    got = metrics.topk_accuracy(logits, labels, (1, 2))
    assert got["top1"] == (1.0 if kept == 1 else 0.5) and got["top2"] == 1.0 and got["ties"] == 1
    untied = np.array([[0.4, 0.5, 0.1], [0.2, 0.9, 0.3]], np.float32)
    assert metrics.topk_accuracy(untied, labels, (1,)) == {"top1": 1.0, "mean_per_class_recall": 1.0, "ties": 0}


def test_embedding_scorers_score_v_dot_their_caption_embedding():
    """A head that names a caption embedding (so zero-shot ensembles prompts CLIP's way)
    must score v . e(t) up to a positive factor; the others are pairwise."""
    from flowclip_cache.heads import HEAD_KINDS, build_head

    g = torch.Generator().manual_seed(0)
    d, n = 8, 4
    v, t = (
        torch.nn.functional.normalize(torch.randn(3, d, generator=g), dim=-1),
        torch.nn.functional.normalize(torch.randn(5, d, generator=g), dim=-1),
    )
    P = torch.nn.functional.normalize(torch.randn(3, n, d, generator=g), dim=-1)
    H = torch.nn.functional.normalize(torch.randn(5, 6, d, generator=g), dim=-1)
    mask = torch.ones(5, 6, dtype=torch.bool)
    kinds = {}
    for kind in HEAD_KINDS:
        head = build_head(kind, d)
        with torch.no_grad():
            for p in head.parameters():
                p.add_(0.1 * torch.randn(p.shape, generator=g))
            e = head.caption_embedding(t)
            kinds[kind] = e is not None
            if e is not None:
                s = head(v, P, t, H, mask)
                ratio = s / (v @ e.T)
                assert torch.allclose(ratio, ratio.flatten()[0].expand_as(ratio), rtol=1e-5) and ratio.min() > 0
    assert kinds == {
        "clip": True,
        "global": True,
        "labclip": True,
        "flow": False,
        "flow-evidence": False,
        "flow-evidence-unrefined": False,
        "filip": False,
        "fsc-local": False,
        "dcsm": False,
        "filip-score": False,
        "filip-score-i2t": False,
    }


def test_retrieval_and_zero_shot_through_the_engine(scored_world):
    """Retrieval recall and zero-shot top-k from the engine equal an independent computation."""
    import torch.nn.functional as F

    from flowclip_cache.extraction.extract import run_extract
    from flowclip_cache.hashing import caption_key
    from flowclip_cache.manifest import Manifest
    from flowclip_cache.store.manifest_keys import image_keys

    fs, s, run, tmp = scored_world
    cand = Manifest.read(s["candidates"]).table.to_pylist()
    gallery = tmp / "gallery.parquet"
    write_manifest(
        gallery,
        pa.Table.from_pylist([{"image": r["image"], "captions": [r["captions"][0]]} for r in cand[:12]]),
        "retrieval",
        {"benchmark": "coco-retrieval"},
    )
    zs = tmp / "zs.parquet"
    classes = ["red", "green", "blue"]
    write_manifest(
        zs,
        pa.Table.from_pylist([{"image": r["image"], "label": i % 3} for i, r in enumerate(cand[:12])]),
        "classification",
        {"benchmark": "cifar10", "classes": classes, "prompts": [[f"a {c} thing", f"something {c}"] for c in classes]},
    )
    from flowclip_cache.extraction.encoders import EncoderSpec, resolve

    enc = resolve(EncoderSpec("flowclip-tiny-vit"))
    run_extract(fs, enc, [str(gallery), str(zs)], s["image_root"], workers=0, progress=False)
    fs.refresh()
    out = run_score(fs, [str(gallery), str(zs)], ["clip", run], str(tmp / "rz"), bootstrap_draws=0, log=lambda *_: None)
    # independent: CLIP cosine similarities straight from the store
    m = Manifest.read(gallery)
    ik = image_keys(fs, m)
    caps = [r["captions"][0] for r in cand[:12]]
    v = F.normalize(torch.from_numpy(fs.load_images(ik).global_).float(), dim=-1)
    t = F.normalize(torch.from_numpy(fs.load_captions([caption_key(c) for c in caps]).global_).float(), dim=-1)
    sim = (v @ t.T).numpy()
    want = metrics.retrieval_recall(sim, np.arange(12), (1, 5, 10))
    got = out["results"]["real|clip"]["coco-retrieval"]
    for k, val in want.items():
        assert got[k] == pytest.approx(val)
    # zero-shot as CLIP_benchmark does it (zeroshot_classification.py: zero_shot_classifier,
    # run_classification, accuracy), written out here: classifier = renormalised mean of the
    # normalised prompt embeddings; logits = 100 * v . classifier; torch.topk
    zv = F.normalize(torch.from_numpy(fs.load_images(image_keys(fs, Manifest.read(zs))).global_).float(), dim=-1)
    clf = []
    for c in classes:
        e = F.normalize(
            torch.from_numpy(
                fs.load_captions([caption_key(f"a {c} thing"), caption_key(f"something {c}")]).global_
            ).float(),
            dim=-1,
        ).mean(0)
        clf.append(e / e.norm())
    logits = 100.0 * zv @ torch.stack(clf).T
    pred = logits.topk(3, 1, True, True)[1].t()
    correct = pred.eq(torch.as_tensor(np.arange(12) % 3).view(1, -1).expand_as(pred))
    got = out["results"]["real|clip"]["cifar10"]
    assert got["top1"] == pytest.approx(float(correct[:1].reshape(-1).float().sum()) / 12)
    assert (
        got["prompt_ensemble"] == "embedding" and out["results"]["real|flow"]["cifar10"]["prompt_ensemble"] == "score"
    )
    # the flow head's exact gallery scores equal its shortlist scores when the shortlist is everything
    full = out["results"]["real|flow"]["coco-retrieval"]
    short = run_score(fs, [str(gallery)], [run], str(tmp / "rs"), bootstrap_draws=0, shortlist=12, log=lambda *_: None)[
        "results"
    ]["real|flow"]["coco-retrieval"]
    assert short["approximate"] and not full["approximate"] and short["tie_rule"] == "wrong"
    assert {k: v for k, v in short.items() if "@" in k} == {k: v for k, v in full.items() if "@" in k}


def test_own_candidate_sets_get_generic_or_declared_scoring(tmp_path):
    from flowclip_cache.manifest import Manifest
    from flowclip_cache.scoring.score import scoring_of

    rows = [{"record_id": "a", "image": "x.png", "captions": ["p", "q"], "gold": 0, "g": "u"}]
    notes = []
    write_manifest(tmp_path / "pairs.parquet", pa.Table.from_pylist(rows), "candidates")
    name, sc = scoring_of(Manifest.read(tmp_path / "pairs.parquet"), notes.append)
    assert name == "pairs" and sc.task == "pairwise" and sc.tie_rule == "wrong" and sc.aggregate == "mean"
    assert "generic pairwise accuracy, a tie counted wrong" in notes[0]
    write_manifest(
        tmp_path / "b.parquet",
        pa.Table.from_pylist([dict(rows[0], captions=["p", "q", "r"])]),
        "candidates",
        {"benchmark": "not-registered"},
    )
    name, sc = scoring_of(Manifest.read(tmp_path / "b.parquet"))
    assert name == "not-registered" and sc.task == "candidates"
    for bad, why in [
        ({"task": "retrieval"}, "must be one of"),
        ({"task": "pairwise", "tie": "x"}, "unknown scoring keys"),
        ({"task": "pairwise", "aggregate": "macro"}, "needs 'group_by'"),
        ({"task": "pairwise", "group_by": "nope"}, "needs column 'nope'"),
    ]:
        write_manifest(tmp_path / "c.parquet", pa.Table.from_pylist(rows), "candidates", {"scoring": bad})
        with pytest.raises(FlowclipError, match=why):
            scoring_of(Manifest.read(tmp_path / "c.parquet"))


def test_candidate_scoring_in_memory_bounded_chunks_changes_nothing(scored_world):
    """A tiny --max-memory forces one chunk per few records: every score is the same to FP32
    round-off (pair batches of another size), and every decision is the same."""
    fs, s, run, tmp = scored_world
    from flowclip_cache.manifest import Manifest
    from flowclip_cache.scoring.score import load_scorers, score_candidates

    m = Manifest.read(s["candidates"])
    scorers = load_scorers(["clip", run], fs, "cpu")
    whole = score_candidates(fs, m, scorers, ("real", "shuffle", "fixed"), 0, "cpu", task="sample")[0]
    small = score_candidates(fs, m, scorers, ("real", "shuffle", "fixed"), 0, "cpu", task="sample", max_memory_mb=0.02)[
        0
    ]
    gold = np.zeros(len(m), int)
    for k in whole:
        np.testing.assert_allclose(whole[k], small[k], rtol=1e-5, atol=1e-6)
        assert (metrics.decisions(whole[k], gold)[0] == metrics.decisions(small[k], gold)[0]).all()


def test_retrieval_in_blocks_and_from_pairs_equals_the_whole_matrix():
    """The streamed and the shortlist forms of the metric against the whole-matrix one."""
    rng = np.random.default_rng(7)
    sim = rng.integers(0, 6, (9, 20)).astype(np.float32)  # many exact ties
    cap_img = rng.integers(0, 9, 20)
    whole = metrics.retrieval_recall(sim, cap_img)
    blocks = lambda: [(a, sim[a : a + 2]) for a in range(0, 9, 2)]
    assert metrics.retrieval_recall_blocks(blocks, cap_img, 9) == whole
    keep = rng.random(sim.shape) < 0.5  # a shortlist: the rest is -inf
    keep[cap_img, np.arange(20)] = True  # (every right answer scored)
    i, t = np.nonzero(keep)
    sparse = np.where(keep, sim, -np.inf)
    assert metrics.retrieval_recall_pairs(i, t, sim[i, t], cap_img, 9) == metrics.retrieval_recall(sparse, cap_img)
    # a caption whose image was left out of the shortlist is a miss, at every k below the gallery size
    keep[:, 0] = False
    keep[(cap_img[0] + 1) % 9, 0] = True
    i, t = np.nonzero(keep)
    r = metrics.retrieval_recall_pairs(i, t, sim[i, t], cap_img, 9, ks=(8,))  # caption 0 ranks 8th: a miss
    assert r["t2i_R@8"] < 1.0


def test_retrieval_spilled_to_disk_equals_in_memory(scored_world):
    fs, s, run, tmp = scored_world
    from flowclip_cache.manifest import Manifest
    from flowclip_cache.scoring.score import load_scorers, score_retrieval

    cand = Manifest.read(s["candidates"]).table.to_pylist()
    gallery = tmp / "g.parquet"
    write_manifest(
        gallery,
        pa.Table.from_pylist([{"image": r["image"], "captions": r["captions"]} for r in cand]),
        "retrieval",
        {"benchmark": "coco-retrieval"},
    )
    from flowclip_cache.extraction.encoders import EncoderSpec, resolve
    from flowclip_cache.extraction.extract import run_extract

    run_extract(
        fs, resolve(EncoderSpec("flowclip-tiny-vit")), [str(gallery)], s["image_root"], workers=0, progress=False
    )
    fs.refresh()
    m = Manifest.read(gallery)
    flow = load_scorers([run], fs, "cpu")[0]
    big = score_retrieval(fs, m, flow, "cpu", 2048, None)
    spill = tmp / "spill"
    spill.mkdir()
    small = score_retrieval(fs, m, flow, "cpu", 0.001, None, spill_dir=str(spill))
    assert {k: v for k, v in small.items()} == big


def test_scorers_of_one_retrieval_or_zero_shot_manifest_read_its_features_once(scored_world, monkeypatch):
    """one score's scorers share a retrieval (or zero-shot) manifest's keys and
    feature bank: a bank with tokens, read for the first head that needs them, serves every
    head after it (a read per scorer fails the count); each scorer's figures are the ones
    it has scored alone."""
    from flowclip_cache.extraction.encoders import EncoderSpec, resolve
    from flowclip_cache.extraction.extract import run_extract
    from flowclip_cache.manifest import Manifest
    from flowclip_cache.store.banks import FeatureBank

    fs, s, run, tmp = scored_world
    cand = Manifest.read(s["candidates"]).table.to_pylist()
    gallery, zs = tmp / "g.parquet", tmp / "zs.parquet"
    rows = [{"image": r["image"], "captions": r["captions"][:2]} for r in cand]
    write_manifest(gallery, pa.Table.from_pylist(rows), "retrieval", {"benchmark": "coco-retrieval"})
    classes = ["red", "green", "blue"]
    write_manifest(
        zs,
        pa.Table.from_pylist([{"image": r["image"], "label": i % 3} for i, r in enumerate(cand)]),
        "classification",
        {"benchmark": "cifar10", "classes": classes, "prompts": [[f"a {c} thing", f"some {c}"] for c in classes]},
    )
    enc = resolve(EncoderSpec("flowclip-tiny-vit"))
    run_extract(fs, enc, [str(gallery), str(zs)], s["image_root"], workers=0, progress=False)
    fs.refresh()
    loads = []
    real = FeatureBank.load.__func__
    monkeypatch.setattr(FeatureBank, "load", classmethod(lambda cls, *a, **k: loads.append(a[3]) or real(cls, *a, **k)))
    from flowclip_cache.scoring import engines

    lookups = []
    real_keys = engines.manifest_keys
    monkeypatch.setattr(engines, "manifest_keys", lambda *a: lookups.append(1) or real_keys(*a))
    sets = [str(gallery), str(zs)]
    both = run_score(fs, sets, [run, "clip"], str(tmp / "both"), bootstrap_draws=0, log=lambda *_: None)
    assert loads == [True, True]  # each manifest: the flow head's bank, then CLIP reads the same one
    assert len(lookups) == 2  # and its keys, looked up once
    for name, scorer in (("flow", run), ("clip", "clip")):
        alone = run_score(fs, sets, [scorer], str(tmp / f"{name}-alone"), bootstrap_draws=0, log=lambda *_: None)
        got = alone["results"][f"real|{name}"]
        assert got == both["results"][f"real|{name}"] and set(got) == {"coco-retrieval", "cifar10"}


def test_rows_that_failed_at_extract_are_left_out_and_marked(tmp_path, tiny_encoder, sample):
    """A row whose image extract could not read, and one whose caption was empty, are
    recorded in failures/; score scores the rest, names the two records, and marks the
    task's figure and the cross-task means it feeds as partial. A row never extracted
    (not a recorded failure) is still refused. Mutation checked: without drop_failed_rows
    score refuses the whole manifest (the old behaviour)."""
    from flowclip_cache.extraction.extract import run_extract
    from flowclip_cache.manifest import Manifest
    from flowclip_cache.store import FeatureStore

    rows = Manifest.read(sample["candidates"]).table.to_pylist()[:8]
    rows[2]["image"] = "gone.png"
    rows[5]["captions"] = [rows[5]["captions"][0], "   "]
    man = tmp_path / "eval.parquet"
    write_manifest(man, pa.Table.from_pylist(rows), "candidates", {"benchmark": "sugarcrepe"})
    fs = FeatureStore.open_or_create(str(tmp_path / "store"), tiny_encoder.config)
    s = run_extract(fs, tiny_encoder, [str(man), sample["training"]], sample["image_root"], workers=0, progress=False,
                    on_error="skip", log=lambda *_: None)  # fmt: skip
    assert len(s.failures) == 2 and fs.failed_items() == {"images": 1, "captions": 1}  # (store info counts them)
    fs.refresh()
    from flowclip_cache.training.loop import TrainConfig, train_head

    run = str(tmp_path / "g")
    train_head(fs, sample["training"], run, TrainConfig(head="global", epochs=1, batch_size=4), progress=False,
               log=lambda *_: None)  # fmt: skip
    out = run_score(fs, [str(man)], ["clip", run], str(tmp_path / "res"), bootstrap_draws=20, blind_folds=2,
                    log=lambda *_: None)  # fmt: skip
    res = out["results"]["real|clip"]["sugarcrepe"]
    assert "2 records left out" in out["blind_audit"]["sugarcrepe"]["partial"]  # the audit says so too
    assert [d["record"] for d in res["excluded_failed"]] == [rows[2]["record_id"], rows[5]["record_id"]]
    assert "gone.png" in res["excluded_failed"][0]["reason"] and "2 records left out" in res["partial"]
    short = out["cross_task_means"]["real|clip"]["all11"]["members_with_excluded_records"]
    assert short and all(n.startswith("sugarcrepe") for n in short)
    recs = [r for r in pq.read_table(tmp_path / "res" / "records.parquet").to_pylist() if r["scorer"] == "clip"]
    assert len(recs) == 6 and rows[2]["record_id"] not in {r["record_id"] for r in recs}
    md = (tmp_path / "res" / "results.md").read_text()
    assert (
        "Partial: sugarcrepe: " in md and "2 records left out (extract recorded their image or caption as failed" in md
    )
    assert "left out records whose image or caption failed" in md
    assert "- sugarcrepe: rests on part of its records (" in md
    # every figure resting on those records is marked, in every file a reader may open alone
    #: the task's cells, the groups that lost records, the CSV's last field, the
    # bootstrap interval and the decision changes
    assert "| real | clip | " in md and all(
        cell.endswith(" *")
        for cell in next(line for line in md.splitlines() if line.startswith("| real | clip |")).split(" | ")[2:3]
    )
    lost = res["partial_groups"]["subset"]
    assert lost == ["swap_att"] and any(line.startswith("### sugarcrepe") for line in md.splitlines())
    breakdown = md.split("### sugarcrepe: per subset")[1].split("###")[0]
    assert "| real | clip | " in breakdown and " *" in breakdown
    csv = (tmp_path / "res" / "results.csv").read_text().splitlines()
    assert csv[0] == "control,scorer,column,percent,partial"
    flags = {line.rsplit(",", 2)[0]: line.rsplit(",", 1)[1] for line in csv[1:]}
    for col in ("sugarcrepe", "all11", "sugarcrepe/by_subset/swap_att", "sugarcrepe/named_groups/Swap-A"):
        assert flags[f"real,clip,{col}"] == "partial", col
    assert flags["real,clip,sugarcrepe/named_groups/Add"] == ""  # no record of it was left out
    boot = out["bootstrap"]["sugarcrepe"]
    assert boot and all("records left out" in v["partial"] for v in boot.values())
    assert all(v["partial"] for v in out["decision_changes"]["sugarcrepe"].values())
    for section in ("## Paired image-cluster bootstrap", "## Paired decision changes"):
        assert "| sugarcrepe (partial) |" in md.split(section)[1].split("##")[0], section
    rows[0]["image"] = "never-extracted.png"  # not a recorded failure: refused as before
    write_manifest(man, pa.Table.from_pylist(rows), "candidates", {"benchmark": "sugarcrepe"})
    with pytest.raises(FlowclipError, match="features missing from the store"):
        run_score(fs, [str(man)], ["clip"], str(tmp_path / "res2"), bootstrap_draws=0, log=lambda *_: None)


def test_top_k_breaks_ties_by_score_then_position():
    """Against a sort by (-value, position); values from a small range so ties are common."""
    from flowclip_cache.scoring.metrics import top_k

    rng = np.random.default_rng(0)
    x = rng.integers(0, 4, (40, 17)).astype(np.float32)
    for k in (1, 3, 16, 17, 20):
        want = [sorted(sorted(range(17), key=lambda j: (-row[j], j))[:k]) for row in x]
        assert top_k(x, k, axis=1).tolist() == want
        assert top_k(x.T, k, axis=0).T.tolist() == want


def test_shortlists_do_not_depend_on_the_memory_budget():
    """Planted exact ties (images 2j and 2j+1 share their global vector, as 464 of a 2,000-image
    gallery did): the shortlist is the same at every --max-memory and equals the direct rule
    (each image's k best captions and each caption's k best images, by score then index).
    Mutation checked: the argpartition merge it replaced kept other tied images per block size."""
    from flowclip_cache.scoring.engines import _shortlist_pairs

    rng = np.random.default_rng(1)
    n_i, n_t, k = 40, 30, 5
    V = torch.from_numpy(np.repeat(rng.integers(-2, 3, (n_i // 2, 8)), 2, 0).astype(np.float32))
    T = torch.from_numpy(rng.integers(-2, 3, (n_t, 8)).astype(np.float32))

    class Bank:
        def features(self, ii, cid, need_tokens):
            return V[ii], None, T[cid], None, None

    class Head:
        def coarse(self, v, t):
            return v @ t.T

    S = (V @ T.T).numpy()
    want = {(i, j) for i in range(n_i) for j in sorted(range(n_t), key=lambda j: (-S[i, j], j))[:k]}
    want |= {(i, j) for j in range(n_t) for i in sorted(range(n_i), key=lambda i: (-S[i, j], i))[:k]}
    for rows in (1, 3, 7, 16, n_i):
        img, cap = _shortlist_pairs(Head(), Bank(), torch.arange(n_t), n_i, k, 40 * n_t * rows, "cpu")
        assert set(zip(img.tolist(), cap.tolist())) == want, rows
