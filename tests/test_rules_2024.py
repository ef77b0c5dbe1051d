"""The 2024-26 group benchmarks' official rules, transcribed independently in float64 from
their released code (as tests/test_official_rules_groups.py does for the older ones), on
planted exact ties; the leaderboard exports (scoring/exports.py) in each evaluator's layout.

Transcribed from: VisMin's compute_contrastive_accuracy (rabiulcste/vismin 29ce2c0,
vismin-bench/metric.py; its submission columns from vismin-bench/README.md);
NaturalBench's get_retrieval_scores / get_retrieval_acc (Baiqi-Li/NaturalBench 9967605,
naturalbench_retrieval.py); hard positives' run_eval.py `main` (amitakamath/hard_positives
33addaa); NegBench's MCQ evaluate_model (m1k2zoo/negbench 2ac009b,
benchmarks/src/evaluation/mcq.py).

Mutations tried: `>=` for `>` in metrics.group_decisions' image comparison turns both rule
tests red; a pooled VisMin headline for the mean of its categories turns it red; swapping
T0_I1 and T1_I0 in exports.table turns the export test red; REPLACE weighted by records (not
the mean of its two subsets) and `>=` in paraphrase_decisions' P2 turn the hard-positive test
red; tie rule "wrong" for NegBench's MCQ (not argmax's first) turns it red; the hard positives'
"original" and "hard positive" names swapped turns the end-to-end test red."""

import csv
import json
import os

import numpy as np
import pytest
from test_official_rules_groups import planted_groups

from flowclip_cache.datasets import get
from flowclip_cache.scoring.aggregation import aggregate_groups
from flowclip_cache.scoring.exports import by_position, table


def vismin_metric(preds: list[dict]) -> dict:
    """compute_contrastive_accuracy, unrounded: per category text, image, group, count."""
    out: dict = {}
    for p in preds:
        c = out.setdefault(p["category"], {"text": 0, "image": 0, "group": 0, "count": 0})
        text = p["T0_I0"] > p["T1_I0"] and p["T1_I1"] > p["T0_I1"]
        image = p["T0_I0"] > p["T0_I1"] and p["T1_I1"] > p["T1_I0"]
        c["text"] += text
        c["image"] += image
        c["group"] += text and image
        c["count"] += 1
    return {k: {m: v[m] / v["count"] for m in ("text", "image", "group")} for k, v in out.items()}


def vismin_predictions(s: np.ndarray, cats) -> list[dict]:
    """eval.py's rows: T<text>_I<image> = similarity(text, image); s [n, image, caption]."""
    s = s.astype(np.float64)
    return [{"T0_I0": m[0, 0], "T0_I1": m[1, 0], "T1_I0": m[0, 1], "T1_I1": m[1, 1], "category": c}
            for m, c in zip(s, cats)]  # fmt: skip


def naturalbench_acc(scores_i2t: np.ndarray) -> dict:
    """get_retrieval_scores then get_retrieval_acc."""
    rs = [
        {"c0_i0": s[0][0], "c0_i1": s[1][0], "c1_i0": s[0][1], "c1_i1": s[1][1]} for s in scores_i2t.astype(np.float64)
    ]
    text = [r["c0_i0"] > r["c1_i0"] and r["c1_i1"] > r["c0_i1"] for r in rs]
    image = [r["c0_i0"] > r["c0_i1"] and r["c1_i1"] > r["c1_i0"] for r in rs]
    group = [a and b for a, b in zip(text, image)]
    return {"text": sum(text) / len(rs), "image": sum(image) / len(rs), "group": sum(group) / len(rs)}


def test_vismin_equals_compute_contrastive_accuracy_on_planted_ties():
    s = planted_groups(400, 5)
    cats = np.array(["object", "attribute", "counting", "relation"])[np.arange(400) % 4]
    cats[::9] = "relation"  # unequal categories: the macro mean differs from the pooled one
    res = aggregate_groups(get("vismin").scoring, s, {"category": cats.tolist()})
    ref = vismin_metric(vismin_predictions(s, cats))
    assert res["ties"] > 50
    for c, figures in ref.items():
        for m, v in figures.items():
            assert res["by_category"][f"{c} {m}"] == v
    assert res["score"] == pytest.approx(np.mean([ref[c]["group"] for c in ref]), abs=1e-15)
    assert res["score"] != pytest.approx(vismin_metric([dict(p, category="all") for p in
                                                        vismin_predictions(s, cats)])["all"]["group"])  # fmt: skip


def test_naturalbench_equals_get_retrieval_acc_on_planted_ties():
    s = planted_groups(300, 6)
    res = aggregate_groups(get("naturalbench").scoring, s, {"record_id": list(range(300))})
    ref = naturalbench_acc(s)
    assert res["ties"] > 50
    for m in ("text", "image", "group"):
        assert res["metrics"][m]["score"] == ref[m]
    assert res["score"] == ref["group"]


def test_exports_in_each_evaluators_layout():
    """Each format read back as its evaluator reads it gives the evaluator's figures."""
    s = planted_groups(40, 7) + np.float32(1e-3) * np.arange(40, dtype=np.float32)[:, None, None]
    ids = [str(i) for i in range(40)]
    cats = ["object"] * 20 + ["counting"] * 20
    rows = table("vismin-csv", [f"{c}/{i % 20}" for c, i in zip(cats, range(40))], s)  # ids restart per category
    assert rows[0] == ["id", "T0_I0", "T0_I1", "T1_I0", "T1_I1", "category"]
    back = [{k: (v if k in ("id", "category") else float(v)) for k, v in zip(rows[0], r)} for r in rows[1:]]
    assert [p["id"] for p in back] == [str(i % 20) for i in range(40)] and back[25]["category"] == "counting"
    assert vismin_metric(back) == vismin_metric(vismin_predictions(s, cats))  # as metric.py reads the rows
    assert all(np.float32(p["T0_I1"]) == s[i, 1, 0] for i, p in enumerate(back))  # exact, not rounded
    c = table("c0_i0", ids, s)
    assert c[0] == ["id", "c0_i0", "c0_i1", "c1_i0", "c1_i1"]
    assert all(float(r[2]) == s[i, 1, 0] and float(r[3]) == s[i, 0, 1] for i, r in enumerate(c[1:]))
    as_tensor = np.array([[[float(r[1]), float(r[3])], [float(r[2]), float(r[4])]] for r in c[1:]])
    assert naturalbench_acc(as_tensor) == naturalbench_acc(s)
    assert by_position(ids, s) is s
    with pytest.raises(Exception, match="record 3 is '4'"):
        by_position(ids[:3] + ids[4:], s[1:])


def test_converters_read_their_release_layouts(tmp_path):
    """NaturalBench: NaturalBench-Retrieval/metadata.json whose index is its position, images
    under images/; VisMin: a save_to_disk copy with the fields eval.py reads. A path-like
    image name in a stranger's metadata is refused, naming the entry."""
    from PIL import Image

    from flowclip_cache.datasets.base import RowErrors
    from flowclip_cache.errors import ManifestError
    from flowclip_cache.manifest import Manifest

    nb = tmp_path / "NaturalBench-Retrieval"
    (nb / "images").mkdir(parents=True)
    meta = [{"index": i, "image_0": f"{i}_0.jpg", "image_1": f"{i}_1.jpg", "caption_0": f"a {i}",
             "caption_1": f"b {i}"} for i in range(3)]  # fmt: skip
    json.dump(meta, open(nb / "metadata.json", "w"))
    rep = get("naturalbench").build(str(tmp_path), str(tmp_path / "nb.parquet"), RowErrors())
    rows = Manifest.read(tmp_path / "nb.parquet").table.to_pylist()
    assert rep.records == 3 and rows[1]["images"] == ["images/1_0.jpg", "images/1_1.jpg"]
    assert rows[2]["captions"] == ["a 2", "b 2"] and rows[0]["record_id"] == "0"
    json.dump(meta[:1] + [dict(meta[1], index=5)], open(nb / "metadata.json", "w"))
    with pytest.raises(ManifestError, match="entry 1: index 5 is not its position"):
        get("naturalbench").build(str(nb), str(tmp_path / "nb2.parquet"), RowErrors())
    json.dump([dict(meta[0], image_1="../../etc/passwd")], open(nb / "metadata.json", "w"))
    with pytest.raises(ManifestError, match="entry 0"):
        get("naturalbench").build(str(nb), str(tmp_path / "nb3.parquet"), RowErrors())
    assert not (tmp_path / "nb3.parquet").exists()

    datasets = pytest.importorskip("datasets")
    png = tmp_path / "x.png"
    Image.new("RGB", (8, 8), (200, 10, 10)).save(png)
    b = [{"bytes": png.read_bytes(), "path": "x.png"}] * 2
    ds = datasets.Dataset.from_dict({"id": [0, 0, 1], "text_0": ["a", "b", "e"], "text_1": ["c", "d", "f"],
                                     "image_0": b + b[:1], "image_1": b + b[:1],
                                     "category": ["object", "counting", "object"]})  # fmt: skip
    ds = ds.cast_column("image_0", datasets.Image()).cast_column("image_1", datasets.Image())
    datasets.DatasetDict({"test": ds}).save_to_disk(str(tmp_path / "vismin"))
    rep = get("vismin").build(str(tmp_path / "vismin"), str(tmp_path / "v.parquet"), RowErrors(),
                              images_out=str(tmp_path / "vimg"))  # fmt: skip
    rows = Manifest.read(tmp_path / "v.parquet").table.to_pylist()
    assert rep.records == 3 and rep.counts == {"object": 2, "counting": 1}  # ids restart per category, as released
    assert [r["record_id"] for r in rows] == ["object/0", "counting/0", "object/1"]
    assert rows[1]["captions"] == ["b", "d"] and rows[1]["category"] == "counting"
    assert sorted(os.listdir(tmp_path / "vimg")) == [f"vismin-00000{i}-{k}.png" for i in range(3) for k in range(2)]


def test_export_command_from_a_score_folder(tmp_path):
    """flowclip export reads records.parquet and writes a new, marked folder; a second
    export into it is refused without --overwrite; a benchmark that is not a group refused."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from click.testing import CliRunner

    from flowclip_cache.cli import main

    res = tmp_path / "res"
    res.mkdir()
    s = planted_groups(5, 8)
    rows = [{"benchmark": "vismin", "record_id": f"object/{i}", "control": "real", "scorer": "clip",
             "scores": m.ravel().tolist(), "gold": None, "correct": True} for i, m in enumerate(s)]  # fmt: skip
    rows += [dict(r, benchmark="naturalbench", record_id=str(i)) for i, r in enumerate(rows)]
    rows.append({"benchmark": "aro", "record_id": "0", "control": "real", "scorer": "clip", "scores": [0.1, 0.2],
                 "gold": 0, "correct": False})  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows), res / "records.parquet")
    r = CliRunner().invoke(main, ["export", str(res), "--benchmark", "vismin", "--scorer", "clip", "--format",
                                  "vismin-csv", "--out", str(tmp_path / "ex")])  # fmt: skip
    assert r.exit_code == 0, r.output
    got = list(csv.reader(open(tmp_path / "ex" / "vismin_submission.csv")))
    assert got[0] == ["id", "T0_I0", "T0_I1", "T1_I0", "T1_I1", "category"] and len(got) == 6
    assert float(got[2][2]) == s[1, 1, 0] and got[2][0] == "1" and got[2][5] == "object"
    again = CliRunner().invoke(main, ["export", str(res), "--benchmark", "naturalbench", "--scorer", "clip",
                                      "--format", "naturalbench-npy", "--out", str(tmp_path / "ex")])  # fmt: skip
    assert again.exit_code == 2 and "overwrite" in again.output
    r = CliRunner().invoke(main, ["export", str(res), "--benchmark", "naturalbench", "--scorer", "clip", "--format",
                                  "naturalbench-npy", "--out", str(tmp_path / "ex"), "--overwrite"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert np.array_equal(np.load(tmp_path / "ex" / "scores_i2t.npy"), s)
    bad = CliRunner().invoke(main, ["export", str(res), "--benchmark", "aro", "--scorer", "clip", "--format",
                                    "c0_i0", "--out", str(tmp_path / "ex2")])  # fmt: skip
    assert bad.exit_code == 2 and "not a 2x2 group" in bad.output and not (tmp_path / "ex2").exists()


def run_eval_figures(orig: np.ndarray, mod: np.ndarray) -> dict:
    """amitakamath/hard_positives 33addaa run_eval.py `main`, on its two score lists: orig
    [n, 1, 2] (c_n, c) and mod [n, 1, 2] (c_n, c_p), as get_retrieval_scores_batched gives them."""
    n = len(orig)
    return {
        "original": np.array([v[0][0] < v[0][1] for v in orig]),
        "hard positive": np.array([v[0][0] < v[0][1] for v in mod]),
        "augmented": np.array([mod[i][0][0] < mod[i][0][1] and mod[i][0][0] < orig[i][0][1] for i in range(n)]),
    }


def test_hard_positives_equal_run_eval_on_planted_ties():
    from flowclip_cache.scoring.paraphrase_task import aggregate_paraphrases

    rng = np.random.default_rng(9)
    s = (rng.integers(0, 3, size=(360, 3)) / 4).astype(np.float32)  # [c, c_p, c_n] on a coarse grid: ties
    subset = np.array(["swap", "replace_att", "replace_rel"])[np.arange(360) % 3]
    subset[::7] = "replace_rel"  # REPLACE's two subsets of unequal size: their mean is not the pooled figure
    res = aggregate_paraphrases(get("hard-positives").scoring, s, None, {"subset": subset.tolist()})
    s64 = s.astype(np.float64)
    ref = run_eval_figures(s64[:, None, [2, 0]], s64[:, None, [2, 1]])
    assert res["ties"] > 50 and set(res["metrics"]) == {"augmented", "original", "hard positive"}
    for m, dec in ref.items():
        for sub in ("swap", "replace_att", "replace_rel"):
            assert res["by_subset"][f"{sub} {m}"] == dec[subset == sub].mean()
    aug = ref["augmented"]
    replace = np.mean([aug[subset == "replace_att"].mean(), aug[subset == "replace_rel"].mean()])
    assert res["score"] == pytest.approx(np.mean([aug[subset == "swap"].mean(), replace]), abs=1e-15)
    assert res["headline_metric"] == "augmented"


def test_hard_positives_reads_a_checkout_and_refuses_misaligned_files(tmp_path):
    from flowclip_cache.datasets.base import RowErrors
    from flowclip_cache.datasets.hard_positives import FILES
    from flowclip_cache.errors import ManifestError
    from flowclip_cache.manifest import Manifest

    def write(folder, subset, recs):
        (tmp_path / folder).mkdir(exist_ok=True)
        json.dump(recs, open(tmp_path / folder / FILES[subset], "w"))

    box = {"bbox_x": 1, "bbox_y": 2, "bbox_w": 30, "bbox_h": 20}
    for sub in FILES:
        recs = [{"image_id": str(i), "true_caption": f"walking {sub} {i}", "false_caption": f"jumping {sub} {i}",
                 "image_path": f"{i}.jpg" if sub == "swap" else f"data/VG_100K/{i}.jpg",
                 **(box if sub == "swap" else {})} for i in range(2)]  # fmt: skip
        write("data", sub, recs)
        write(
            "swapped_data", sub, [dict(r, true_caption=r["true_caption"].replace("walking", "strolling")) for r in recs]
        )
    rep = get("hard-positives").build(str(tmp_path), str(tmp_path / "hp.parquet"), RowErrors())
    rows = Manifest.read(tmp_path / "hp.parquet").table.to_pylist()
    assert rep.records == 6 and rep.counts == {"swap": 2, "replace_att": 2, "replace_rel": 2}
    assert rows[1]["image"] == "data/images/1.jpg" and rows[1]["crop"] == [1, 2, 30, 20]  # VG_Attribution's
    r = rows[3]
    assert r["record_id"] == "replace_att/1" and r["image"] == "data/VG_100K/1.jpg" and r["crop"] is None
    assert (
        r["positives"] == ["walking replace_att 1", "strolling replace_att 1"]
        and r["negative"] == "jumping replace_att 1"
    )
    bad = json.load(open(tmp_path / "swapped_data" / FILES["swap"]))
    json.dump([bad[0], dict(bad[1], bbox_w=31)], open(tmp_path / "swapped_data" / FILES["swap"], "w"))
    with pytest.raises(ManifestError, match=r"record 1: its bbox differs"):
        get("hard-positives").build(str(tmp_path), str(tmp_path / "hp2.parquet"), RowErrors())
    bad[1]["false_caption"] = "another negative"
    json.dump(bad, open(tmp_path / "swapped_data" / FILES["swap"], "w"))
    with pytest.raises(ManifestError, match=r"record 1: its image or hard negative differs"):
        get("hard-positives").build(str(tmp_path), str(tmp_path / "hp2.parquet"), RowErrors())
    json.dump(bad[:1], open(tmp_path / "swapped_data" / FILES["swap"], "w"))
    with pytest.raises(ManifestError, match="pairs them by position"):
        get("hard-positives").build(str(tmp_path), str(tmp_path / "hp3.parquet"), RowErrors())


def negbench_mcq(logits: np.ndarray, correct: np.ndarray, types: list[str]) -> dict:
    """m1k2zoo/negbench benchmarks/src/evaluation/mcq.py `evaluate_model`'s accuracies:
    torch.argmax over each record's four logits (the first maximal index)."""
    import torch

    pred = torch.argmax(torch.from_numpy(logits), dim=1).numpy()
    out = {"total_accuracy": (pred == correct).sum() / len(correct)}
    for t in ("positive", "negative", "hybrid"):
        mask = np.array(types) == t
        out[f"{t}_accuracy"] = (pred[mask] == correct[mask]).sum() / mask.sum()
    return out


def test_negbench_mcq_equals_evaluate_model_on_planted_ties():
    from flowclip_cache.scoring.aggregation import aggregate

    rng = np.random.default_rng(10)
    n = 400
    s = (rng.integers(0, 3, size=(n, 4)) / 4).astype(np.float32)
    gold = rng.integers(0, 4, n)
    types = np.array(["positive", "negative", "hybrid"])[rng.integers(0, 3, n)]
    subset = np.where(np.arange(n) < 250, "coco", "voc2007")
    cols = {"subset": subset.tolist(), "template": types.tolist(), "file_template": [f"{a} {b}" for a, b in
                                                                                    zip(subset, types)]}  # fmt: skip
    res = aggregate(get("negbench-mcq").scoring, s, gold, cols, None)
    per = {}
    for sub in ("coco", "voc2007"):  # evaluate_model run on each CSV: its total and its per-template figures
        m = subset == sub
        ref = negbench_mcq(s[m].astype(np.float64), gold[m], types[m].tolist())
        assert res["by_subset"][sub] == ref["total_accuracy"]
        for t in ("positive", "negative", "hybrid"):
            assert res["by_file_template"][f"{sub} {t}"] == ref[f"{t}_accuracy"]
        per[sub] = ref["total_accuracy"]
    assert res["score"] == pytest.approx(np.mean(list(per.values())), abs=1e-15)
    whole = negbench_mcq(s.astype(np.float64), gold, types.tolist())  # pooled over the files: ours, named so
    for t in ("positive", "negative", "hybrid"):
        assert res["by_template"][t] == whole[f"{t}_accuracy"]
    titles = dict(get("negbench-mcq").scoring.breakdowns())
    assert titles["per file and template (as released: each CSV's accuracies)"] == "by_file_template"
    assert "ours" in next(t for t, k in titles.items() if k == "by_template")
    tied_first = (s == s.max(1, keepdims=True)).sum(1) > 1
    assert tied_first.sum() > 50  # the planted ties are there, and decided as argmax decides them


def test_negbench_mcq_reads_its_csvs_and_strips_the_users_prefix(tmp_path):
    from flowclip_cache.datasets.base import RowErrors
    from flowclip_cache.errors import ManifestError
    from flowclip_cache.manifest import Manifest

    head = "image_path,caption_0,caption_1,caption_2,caption_3,correct_answer,correct_answer_template\n"
    rows = ['/home/me/coco/val2017/1.jpg,a dog,no dog,a cat but not a dog,no cat,0,positive\n',
            '/home/me/coco/val2017/2.jpg,"a bus, red",no bus,x,y,2,hybrid\n']  # fmt: skip
    (tmp_path / "COCO_val_mcq_llama3.1_rephrased.csv").write_text(head + "".join(rows))
    rep = get("negbench-mcq").build(str(tmp_path), str(tmp_path / "m.parquet"), RowErrors(),
                                    image_prefix="/home/me/coco/")  # fmt: skip
    got = Manifest.read(tmp_path / "m.parquet").table.to_pylist()
    assert rep.counts == {"coco": 2} and got[1]["image"] == "val2017/2.jpg" and got[1]["gold"] == 2
    assert got[1]["captions"][0] == "a bus, red" and got[1]["template"] == "hybrid" and got[0]["record_id"] == "coco/2"
    with pytest.raises(ManifestError, match="image"):  # an absolute path left in is refused, naming the row
        get("negbench-mcq").build(str(tmp_path), str(tmp_path / "m2.parquet"), RowErrors())
    with pytest.raises(ManifestError, match="line 3: image path"):
        get("negbench-mcq").build(
            str(tmp_path), str(tmp_path / "m3.parquet"), RowErrors(), image_prefix="/home/me/coco/val2017/1"
        )


def countercurate_position(s_img: np.ndarray, s_neg_img: np.ndarray) -> float:
    """HanSolo9682/CounterCurate benchmark/CLIP_test_position.py `test`: s_img [n, 2] the
    image's scores of (caption, negative caption), s_neg_img the negative image's."""
    import torch

    correct = 0.0
    for a, b in zip(s_img, s_neg_img):
        p = (100.0 * torch.tensor(a, dtype=torch.float64)).softmax(dim=-1)
        correct += float(p[0] > p[1])
        p = (100.0 * torch.tensor(b, dtype=torch.float64)).softmax(dim=-1)
        correct += float(p[0] < p[1])
    return correct / len(s_img) / 2


def test_countercurate_equals_clip_test_position_on_planted_ties(tmp_path):
    """The converter's two records per row scored pooled equal the script's figure."""
    from flowclip_cache.datasets.base import RowErrors
    from flowclip_cache.errors import ManifestError
    from flowclip_cache.manifest import Manifest
    from flowclip_cache.scoring.aggregation import aggregate

    folder = tmp_path / "clip_sample_data"
    folder.mkdir()
    lines = ["captions\timages\tneg_captions\tneg_images"]
    lines += [f"a dog left of a cat {i}\t../../train_data/{i}.jpg\ta cat left of a dog {i}\t../../train_data/{i}_n.jpg"
              for i in range(60)]  # fmt: skip
    (folder / "test_left_right_.csv").write_text("\n".join(lines) + "\n")
    rep = get("countercurate").build(str(tmp_path), str(tmp_path / "cc.parquet"), RowErrors(), image_prefix="../../")
    t = Manifest.read(tmp_path / "cc.parquet").table.to_pydict()
    assert rep.counts == {"left_right": 60} and len(t["gold"]) == 120
    assert t["image"][:2] == ["train_data/0.jpg", "train_data/0_n.jpg"] and t["gold"][:2] == [0, 1]
    assert t["record_id"][:2] == ["left_right/2/pos", "left_right/2/neg"]
    rng = np.random.default_rng(11)
    s = (rng.integers(0, 3, size=(120, 2)) / 4).astype(np.float32)
    res = aggregate(get("countercurate").scoring, s, np.array(t["gold"]), t, None)
    ref = countercurate_position(s[0::2].astype(np.float64), s[1::2].astype(np.float64))
    assert (s[:, 0] == s[:, 1]).sum() > 20 and res["score"] == pytest.approx(ref, abs=1e-15)
    with pytest.raises(ManifestError, match="image"):  # the authors' ../../ paths are refused as they are
        get("countercurate").build(str(tmp_path), str(tmp_path / "cc2.parquet"), RowErrors())


def negbench_recall(scores: "np.ndarray", texts_image_index: list[int], k: int, batch_size: int) -> tuple:
    """m1k2zoo/negbench benchmarks/src/evaluation/retrieval.py `evaluate_model` and
    `recall_at_k` / `batchify` as released: scores [texts, images] float32 (torch)."""
    import torch

    def recall_at_k(scores, positive_pairs, k):
        nb_texts, nb_images = scores.shape
        topk_indices = torch.topk(scores, k, dim=1)[1]
        nb_positive = positive_pairs.sum(dim=1)
        topk_indices_onehot = torch.nn.functional.one_hot(topk_indices, num_classes=nb_images)
        positive_pairs_reshaped = positive_pairs.view(nb_texts, 1, nb_images)
        nb_true_positive = (topk_indices_onehot * positive_pairs_reshaped).sum(dim=(1, 2))
        return nb_true_positive / nb_positive

    def batchify(func, X, Y, batch_size, *args, **kwargs):
        return torch.cat([func(X[s : s + batch_size], Y[s : s + batch_size], *args, **kwargs) for s in
                          range(0, len(X), batch_size)])  # fmt: skip

    scores = torch.from_numpy(scores)
    positive_pairs = torch.zeros_like(scores, dtype=bool)
    positive_pairs[torch.arange(len(scores)), texts_image_index] = True
    image_r = (batchify(recall_at_k, scores, positive_pairs, batch_size, k=k) > 0).float().mean().item()
    text_r = (batchify(recall_at_k, scores.T, positive_pairs.T, batch_size, k=k) > 0).float().mean().item()
    return image_r, text_r


def test_negbench_retrieval_equals_recall_at_k_on_planted_ties():
    """metrics.retrieval_recall_topk, in any row and column blocks, equals NegBench's figures
    on a score matrix full of exact ties; the default rule (ties against the query) differs."""
    from flowclip_cache.scoring import metrics

    rng = np.random.default_rng(12)
    n_img, per = 40, 3
    cap_image = np.repeat(np.arange(n_img), per)
    sim = (rng.integers(0, 4, size=(n_img, n_img * per)) / 8).astype(np.float32)  # [images, captions]
    for rows, cols in ((n_img, 10_000), (7, 11), (1, 1)):
        blocks = lambda: [(a, sim[a : a + rows]) for a in range(0, n_img, rows)]  # noqa: E731
        got = metrics.retrieval_recall_topk(blocks, cap_image, n_img, ks=(1, 5), columns=cols)
        for k in (1, 5):
            image_r, text_r = negbench_recall(np.ascontiguousarray(sim.T), cap_image.tolist(), k, batch_size=16)
            assert got[f"t2i_R@{k}"] == pytest.approx(image_r, abs=1e-7) and got[f"i2t_R@{k}"] == pytest.approx(
                text_r, abs=1e-7
            )
    assert got["t2i_ties"] > 20 and got["i2t_ties"] > 5
    strict = metrics.retrieval_recall(sim, cap_image, ks=(1, 5))
    assert strict["t2i_R@1"] < got["t2i_R@1"]  # ties against the query: another figure, not NegBench's


def test_negbench_retrieval_reads_captions_as_literals_never_as_code(tmp_path):
    from flowclip_cache.datasets.base import RowErrors
    from flowclip_cache.errors import ManifestError
    from flowclip_cache.manifest import Manifest

    f = tmp_path / "COCO_val_negated_retrieval_llama3.1_rephrased_affneg_true.csv"
    f.write_text('filepath,captions\n/data/coco/val2017/1.jpg,"[\'a dog, no cat\', \'a sofa\']"\n'
                 '/data/coco/val2017/2.jpg,"[\'a bus\']"\n')  # fmt: skip
    rep = get("negbench-retrieval").build(str(tmp_path), str(tmp_path / "r.parquet"), RowErrors(),
                                          image_prefix="/data/coco/")  # fmt: skip
    rows = Manifest.read(tmp_path / "r.parquet").table.to_pylist()
    assert rep.records == 2 and rows[0] == {"image": "val2017/1.jpg", "captions": ["a dog, no cat", "a sofa"]}
    f.write_text("filepath,captions\n/data/coco/val2017/1.jpg,\"__import__('os').system('touch pwned')\"\n")
    with pytest.raises(ManifestError, match="line 2: captions is not a list literal"):
        get("negbench-retrieval").build(
            str(tmp_path), str(tmp_path / "r2.parquet"), RowErrors(), image_prefix="/data/coco/"
        )
    assert not os.path.exists("pwned") and not (tmp_path / "pwned").exists()


def test_negbench_retrieval_through_score_and_no_shortlist(lab, tmp_path):
    """A NegBench gallery scored by flowclip score decides by torch.topk (its figures say
    so), with --shortlist too for a global scorer (only a token head's pairs are shortlisted; its
    figures then say approximate, ties counted wrong: tests/test_score.py)."""
    import pyarrow as pa

    from flowclip_cache.manifest import Manifest, write_manifest
    from flowclip_cache.scoring.score import run_score
    from flowclip_cache.store import FeatureStore

    recs = Manifest.read(lab["candidates"]).table.to_pylist()
    seen, rows = set(), []
    for r in recs:
        if r["image"] not in seen:
            seen.add(r["image"])
            rows.append({"image": r["image"], "captions": [r["captions"][r["gold"]]]})
    gallery = tmp_path / "gallery.parquet"
    write_manifest(gallery, pa.Table.from_pylist(rows), "retrieval", {"benchmark": "negbench-retrieval"})
    fs = FeatureStore(lab["store"])
    res = run_score(fs, [str(gallery)], ["clip"], str(tmp_path / "res"), bootstrap_draws=0, log=lambda *_: None)
    got = res["results"]["real|clip"]["negbench-retrieval"]
    assert got["tie_rule"] == "topk" and 0 <= got["t2i_R@1"] <= 1 and got["approximate"] is False
    short = run_score(fs, [str(gallery)], ["clip"], str(tmp_path / "res2"), bootstrap_draws=0, shortlist=3,
                      log=lambda *_: None)["results"]["real|clip"]["negbench-retrieval"]  # fmt: skip
    assert short == got  # a global scorer's matrix is whole: --shortlist changes nothing, the rule stands


def fs_of_file(tmp_path, name: str, root) -> np.ndarray:
    """The tiny CLIP's global feature of one image file, extracted alone into a store of its own."""
    import pyarrow as pa
    from click.testing import CliRunner

    from flowclip_cache.cli import main
    from flowclip_cache.manifest import Manifest, write_manifest
    from flowclip_cache.store import FeatureStore
    from flowclip_cache.store.manifest_keys import image_keys

    man = str(tmp_path / "one.parquet")
    write_manifest(man, pa.table({"record_id": ["0"], "image": [name], "captions": [["a", "b"]], "gold": [0]}),
                   "candidates")  # fmt: skip
    store = str(tmp_path / "one-store")
    r = CliRunner().invoke(main, ["extract", "--store", store, "--model", "flowclip-tiny-clip", "--pretrained", "none",
                                  "--manifest", man,
                                  "--image-root", str(root), "--quiet", "--workers", "0"])  # fmt: skip
    assert r.exit_code == 0, r.output
    fs = FeatureStore(store)
    return fs.load_global("img", image_keys(fs, Manifest.read(man), str(root)))[0]


def test_hard_positives_score_end_to_end_as_run_eval_reads_the_scores(tmp_path):
    """A checkout in the release's layout (images under data/VG_100K), built, extracted with the
    tiny CLIP and scored by `flowclip score`: each subset's three figures equal run_eval.py's
    on the store's own features (cosines in float64), and results.md names them."""
    from click.testing import CliRunner
    from PIL import Image

    from flowclip_cache.cli import main
    from flowclip_cache.datasets.base import RowErrors
    from flowclip_cache.datasets.hard_positives import FILES
    from flowclip_cache.hashing import caption_key
    from flowclip_cache.manifest import Manifest
    from flowclip_cache.store import FeatureStore
    from flowclip_cache.store.manifest_keys import image_keys
    from flowclip_cache.synthetic.sample import make_sample

    s = make_sample(str(tmp_path / "sample"), n_images=8)
    pngs = sorted(os.path.join(s["image_root"], p) for p in os.listdir(s["image_root"]) if p.endswith(".png"))
    caps = sorted({c for r in Manifest.read(s["candidates"]).table.to_pylist() for c in r["captions"]})
    src = tmp_path / "hp"
    (src / "data" / "VG_100K").mkdir(parents=True)
    (src / "data" / "images").mkdir()
    (src / "swapped_data").mkdir()
    for i, p in enumerate(pngs):
        Image.open(p).convert("RGB").save(src / "data" / "VG_100K" / f"{i}.jpg", "JPEG")
        Image.open(p).convert("RGB").save(src / "data" / "images" / f"{i}.jpg", "JPEG")
    box = {"bbox_x": 3, "bbox_y": 5, "bbox_w": 40, "bbox_h": 30}
    for k, sub in enumerate(FILES):
        recs = [{"image_id": str(i), "true_caption": caps[(3 * i + k) % len(caps)],
                 "false_caption": caps[(3 * i + k + 1) % len(caps)],
                 **({"image_path": f"{(i + k) % len(pngs)}.jpg", **box} if sub == "swap" else
                    {"image_path": f"data/VG_100K/{(i + k) % len(pngs)}.jpg"})}
                for i in range(6)]  # fmt: skip
        json.dump(recs, open(src / "data" / FILES[sub], "w"))
        hp = [dict(r, true_caption=caps[(3 * i + k + 2) % len(caps)]) for i, r in enumerate(recs)]
        json.dump(hp, open(src / "swapped_data" / FILES[sub], "w"))
    man = str(tmp_path / "hard-positives.parquet")
    get("hard-positives").build(str(src), man, RowErrors())
    store = str(tmp_path / "store")
    r = CliRunner().invoke(main, ["extract", "--store", store, "--model", "flowclip-tiny-clip", "--pretrained", "none",
                                  "--manifest", man,
                                  "--image-root", str(src), "--quiet", "--workers", "0"])  # fmt: skip
    assert r.exit_code == 0, r.output
    out = tmp_path / "score"
    r = CliRunner().invoke(main, ["score", "--store", store, "--manifests", man, "--scorer", "clip", "--out", str(out),
                                  "--image-root", str(src), "--bootstrap", "0", "--no-figures", "--quiet"])  # fmt: skip
    assert r.exit_code == 0, r.output
    res = json.load(open(out / "results.json"))["results"]["real|clip"]["hard-positives"]
    fs = FeatureStore(store)
    rows = Manifest.read(man).table.to_pylist()
    unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731
    v = unit(fs.load_global("img", image_keys(fs, Manifest.read(man), str(src))).astype(np.float64))
    texts = [[*r["positives"], r["negative"]] for r in rows]
    t = unit(fs.load_global("cap", [caption_key(c) for ts in texts for c in ts]).astype(np.float64))
    sc = np.einsum("nd,nkd->nk", v, t.reshape(len(rows), 3, -1))  # [c, c_p, c_n]
    ref = run_eval_figures(sc[:, None, [2, 0]], sc[:, None, [2, 1]])
    subset = np.array([r["subset"] for r in rows])
    for m, dec in ref.items():
        for sub in FILES:
            assert res["by_subset"][f"{sub} {m}"] == dec[subset == sub].mean()
    assert res["n"] == 18 and res["headline_metric"] == "augmented"
    # SWAP's images are VG_Attribution's: data/images/<image_path> cropped to the box, as a
    # file cropped by PIL and extracted on its own gives them
    (tmp_path / "crop").mkdir()
    Image.open(src / "data" / "images" / "0.jpg").crop((3, 5, 43, 35)).save(tmp_path / "crop" / "0.png")
    own = fs_of_file(tmp_path, "0.png", tmp_path / "crop")
    swap0 = next(i for i, r in enumerate(rows) if r["record_id"] == "swap/0")
    assert np.array_equal(fs.load_global("img", image_keys(fs, Manifest.read(man), str(src)))[swap0], own)
    md = (out / "results.md").read_text()
    assert "**augmented**" in md and "| hard-positives | clip |" in md


def test_countercurate_counting_builds_as_prep_count_benchmark_and_scores_as_clip_test_counting(tmp_path):
    """benchmark/prep_count_benchmark.py's vg_dict from a LookTwiceQA file (an image asked
    about one object twice left out), read directly as vg_dict.json too, then extracted and
    scored: each record right when CLIP_test_counting.py's softmax of 100 x the cosines
    puts the stated count above one more (float64, from the store's own features)."""
    import torch
    from click.testing import CliRunner
    from PIL import Image

    from flowclip_cache.cli import main
    from flowclip_cache.datasets.base import RowErrors
    from flowclip_cache.hashing import caption_key
    from flowclip_cache.manifest import Manifest
    from flowclip_cache.store import FeatureStore
    from flowclip_cache.store.manifest_keys import image_keys
    from flowclip_cache.synthetic.sample import make_sample

    s = make_sample(str(tmp_path / "sample"), n_images=4)
    pngs = sorted(os.path.join(s["image_root"], p) for p in os.listdir(s["image_root"]) if p.endswith(".png"))
    ds = {"q1": [{"id": "11", "obj_type": "dogs", "obj_question": "?", "ans": "2"},
                 {"id": "12", "obj_type": "cats", "obj_question": "?", "ans": 3}],
          "q2": [{"id": "11", "obj_type": "trees", "obj_question": "?", "ans": "4"},
                 {"id": "13", "obj_type": "cars", "obj_question": "?", "ans": "1"},
                 {"id": "13", "obj_type": "cars", "obj_question": "?", "ans": "2"}],  # asked twice: 13 left out
          "q3": [{"id": "14", "obj_type": "birds", "obj_question": "?", "ans": "5"}]}  # fmt: skip
    src = tmp_path / "pointingqa"
    (src / "Datasets" / "LookTwiceQA").mkdir(parents=True)
    json.dump(ds, open(src / "Datasets" / "LookTwiceQA" / "looktwiceqa_dataset.json", "w"))
    (src / "visual_genome").mkdir()
    for i, p in zip(("11", "12", "13", "14"), pngs):
        Image.open(p).convert("RGB").save(src / "visual_genome" / f"{i}.jpg", "JPEG")
    man = str(tmp_path / "counting.parquet")
    rep = get("countercurate-counting").build(str(src), man, RowErrors())
    rows = Manifest.read(man).table.to_pylist()
    assert rep.records == 4 and [r["record_id"] for r in rows] == ["11/0", "11/1", "12/0", "14/0"]
    assert rows[1]["captions"] == ["there are 4 trees in the image.", "there are 5 trees in the image."]
    vg = tmp_path / "prepared"
    vg.mkdir()
    json.dump({"11": [{"name": "dogs", "ans": "2"}, {"name": "trees", "ans": "4"}], "12": [{"name": "cats", "ans": 3}],
               "14": [{"name": "birds", "ans": "5"}]}, open(vg / "vg_dict.json", "w"))  # fmt: skip
    get("countercurate-counting").build(str(vg), str(tmp_path / "again.parquet"), RowErrors())
    assert Manifest.read(str(tmp_path / "again.parquet")).table.to_pylist() == rows
    store, out = str(tmp_path / "store"), tmp_path / "score"
    r = CliRunner().invoke(main, ["extract", "--store", store, "--model", "flowclip-tiny-clip", "--pretrained", "none",
                                  "--manifest", man,
                                  "--image-root", str(src), "--quiet", "--workers", "0"])  # fmt: skip
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["score", "--store", store, "--manifests", man, "--scorer", "clip", "--out", str(out),
                                  "--image-root", str(src), "--bootstrap", "0", "--no-figures", "--quiet"])  # fmt: skip
    assert r.exit_code == 0, r.output
    fs = FeatureStore(store)
    unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731
    v = unit(fs.load_global("img", image_keys(fs, Manifest.read(man), str(src))).astype(np.float64))
    correct = 0
    for r, vi in zip(rows, v):
        t = unit(fs.load_global("cap", [caption_key(c) for c in r["captions"]]).astype(np.float64))
        text_probs = torch.from_numpy(100.0 * vi[None] @ t.T).softmax(dim=-1)[0]
        correct += bool(text_probs[0] > text_probs[1])
    res = json.load(open(out / "results.json"))["results"]["real|clip"]["countercurate-counting"]
    assert res["n"] == 4 and res["score"] == correct / 4


def test_countercurate_counting_decides_planted_ties_as_clip_test_counting():
    """CLIP_test_counting.py `test` on planted cosines with exact ties: the softmax of 100 x
    the two cosines, `text_probs[0] > text_probs[1]` (a tie is wrong)."""
    import torch

    from flowclip_cache.scoring.aggregation import aggregate

    rng = np.random.default_rng(5)
    s = (rng.integers(0, 3, size=(400, 2)) / 4).astype(np.float32)
    probs = torch.from_numpy(100.0 * s.astype(np.float64)).softmax(dim=-1)
    want = (probs[:, 0] > probs[:, 1]).numpy()
    res = aggregate(get("countercurate-counting").scoring, s, np.zeros(400, np.int64), {}, None)
    assert res["ties"] > 100 and res["score"] == want.mean()
