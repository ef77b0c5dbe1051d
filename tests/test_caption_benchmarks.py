"""The caption-side benchmarks of the field's suite: VALSE and SugarCrepe++
from their real files (counts), their official rules against float64 transcriptions of
the released scripts on planted ties, and from small files in each official layout
through extract and score under every head; the figures that need a calibrated match
decision or a caption-caption similarity are defined where the scorer declares one and
read "not defined", with the reason, where it does not."""

import json
import os

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from conftest import needs_shared
from PIL import Image

from flowclip_cache.cli import main as cli
from flowclip_cache.datasets import get
from flowclip_cache.datasets.base import RowErrors
from flowclip_cache.heads import build_head
from flowclip_cache.heads.clip import ClipHead
from flowclip_cache.manifest import Manifest
from flowclip_cache.scoring.aggregation import aggregate
from flowclip_cache.scoring.paraphrase_task import aggregate_paraphrases, score_paraphrase_task, text_similarities
from flowclip_cache.scoring.scorers import scoring_of
from flowclip_cache.store import FeatureStore

SHARED = os.environ.get(
    "FLOWCLIP_BENCHMARK_FILES", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "benchmarks")
)
VALSE_KEPT = {
    "existence": 505, "plurals": 851, "counting-hard": 868, "counting-small-quant": 900,
    "counting-adversarial": 691, "relations": 535, "action-replacement": 648, "actant-swap": 949,
    "coreference-standard": 708, "coreference-hard": 104, "foil-it": 943,
}  # fmt: skip


# -- the real files ----------------------------------------------------------------------------
@needs_shared("valse", "existence.json")
def test_valse_keeps_the_records_its_readme_calls_valid(tmp_path):
    r = get("valse").build(os.path.join(SHARED, "valse"), str(tmp_path / "v.parquet"), RowErrors())
    m = Manifest.read(tmp_path / "v.parquet")
    assert r.counts == VALSE_KEPT and r.records == len(m) == 7702  # of 8,782: mturk.caption >= 2
    assert "1080 in all" in r.notes[0] and r.images == 6129
    folders = {p.split("/")[0] for p in m.table.column("image").to_pylist()}
    assert folders == {"visual7w", "coco2017", "swig", "visdial", "coco-val2014"}
    rec = m.table.slice(0, 1).to_pylist()[0]
    raw = json.load(open(os.path.join(SHARED, "valse", "existence.json")))[rec["record_id"].split("/", 1)[1]]
    assert rec["captions"] == [raw["caption"], raw["foil"]] and rec["gold"] == 0


@needs_shared("sugarcrepe_pp", "swap_obj.json")
def test_sugarcrepe_pp_files_convert_with_their_4757_records(tmp_path):
    r = get("sugarcrepe-pp").build(os.path.join(SHARED, "sugarcrepe_pp"), str(tmp_path / "s.parquet"), RowErrors())
    m = Manifest.read(tmp_path / "s.parquet")
    assert r.records == len(m) == 4757 and m.kind == "paraphrases"
    assert r.counts == {"replace_att": 788, "replace_obj": 1652, "replace_rel": 1406, "swap_att": 666, "swap_obj": 245}
    first = json.load(open(os.path.join(SHARED, "sugarcrepe_pp", "replace_att.json")))[0]
    row = m.table.slice(0, 1).to_pylist()[0]
    assert row["positives"] == [first["caption"], first["caption2"]] and row["negative"] == first["negative_caption"]


# -- the official rules, transcribed, on planted ties ---------------------------------------------
def valse_official(c: np.ndarray, f: np.ndarray, t: float) -> dict:
    """lxmert_valse_eval.py's loop, statement by statement, in float64: cross_score rows
    are [no-match logit, match logit] of caption and foil; a scorer with threshold t has
    match logit s and no-match logit t."""
    count = foil_accuracy = capt_fits = foil_detected = pairwise_acc = 0
    for cc, ff in zip(c.astype(np.float64), f.astype(np.float64)):
        cross_score = np.array([[t, cc], [t, ff]], np.float64)
        if cross_score[1, 0] == cross_score[1, 1]:
            continue
        if cross_score[0, 0] < cross_score[0, 1]:
            foil_accuracy += 1
            capt_fits += 1
        if cross_score[1, 0] >= cross_score[1, 1]:
            foil_detected += 1
            foil_accuracy += 1
        if cross_score[0, 1] > cross_score[1, 1]:
            pairwise_acc += 1
        count += 1
    return {"count": count, "acc": foil_accuracy / count / 2, "p_c": capt_fits / count,
            "p_f": foil_detected / count, "acc_r": pairwise_acc / count}  # fmt: skip


def test_valse_figures_equal_the_released_script_on_planted_ties():
    sc = get("valse").scoring
    rng = np.random.default_rng(0)
    pieces = [p for i, p in enumerate(VALSE_KEPT) for _ in range(4 + i)]  # unequal: weighting shows
    n = len(pieces)
    s = np.round(rng.normal(0, 1, (n, 2)), 1).astype(np.float32)  # coarse values: natural ties too
    s[::5, 1] = s[::5, 0]  # caption ties its foil: wrong (strict)
    s[1::7, 1] = 0.25  # the foil exactly at the threshold: not counted by the script
    s[2::9, 0] = 0.25  # the caption exactly at the threshold: it does not fit (strict)
    cols = {"piece": pieces, "record_id": [str(i) for i in range(n)]}
    gold = np.zeros(n, np.int64)
    res = aggregate(sc, s, gold, cols, (0.25, "planted"))
    c, f = s[:, 0].astype(np.float64), s[:, 1].astype(np.float64)
    # acc_r over every record, per piece; the headline: vl_compo's mean of the 7 instruments
    acc_r = {p: float(np.mean([cc > ff for cc, ff, q in zip(c, f, pieces) if q == p])) for p in VALSE_KEPT}
    assert res["by_piece"] == pytest.approx(acc_r, abs=0) and res["ties"] == int((c == f).sum()) > 0
    inst = [acc_r["existence"], acc_r["plurals"],
            np.mean([acc_r["counting-hard"], acc_r["counting-small-quant"], acc_r["counting-adversarial"]]),
            acc_r["relations"], np.mean([acc_r["action-replacement"], acc_r["actant-swap"]]),
            np.mean([acc_r["coreference-standard"], acc_r["coreference-hard"]]), acc_r["foil-it"]]  # fmt: skip
    assert res["score"] == pytest.approx(np.mean(inst), abs=1e-15)
    th = res["threshold_figures"]
    assert th["defined"] and th["threshold"] == 0.25 and th["source"] == "planted"
    want = valse_official(c, f, 0.25)
    got = th["pooled"]
    assert got["skipped_foil_at_threshold"] == n - want["count"] > 0
    assert {k: got[k] for k in want} == pytest.approx(want, abs=1e-15)
    for p in VALSE_KEPT:
        sel = np.array(pieces) == p
        w = valse_official(c[sel], f[sel], 0.25)
        assert {k: th["by_piece"][p][k] for k in w} == pytest.approx(w, abs=1e-15), p
    undefined = aggregate(sc, s, gold, cols)["threshold_figures"]
    assert undefined["defined"] is False and "not defined for this scorer" in undefined["reason"]


def scpp_official(s: np.ndarray, text: np.ndarray) -> dict:
    """VLMs/test_Variants_CLIP.py's counters, statement by statement, in float64."""
    total = correct_full = correct_img_p1 = correct_img_p2 = correct_text = 0
    for (cos_p1, cos_p2, cos_neg), (cos_p1p2, cos_p1_neg, cos_p2_neg) in zip(s.astype(np.float64), text):
        total += 1
        if cos_p1 > cos_neg and cos_p2 > cos_neg:
            correct_full += 1
        if cos_p1 > cos_neg:
            correct_img_p1 += 1
        if cos_p2 > cos_neg:
            correct_img_p2 += 1
        if cos_p1p2 > cos_p1_neg and cos_p1p2 > cos_p2_neg:
            correct_text += 1
    return {"ITT": correct_full / total, "Image-P1-Neg": correct_img_p1 / total,
            "Image-P2-Neg": correct_img_p2 / total, "TOT": correct_text / total}  # fmt: skip


def test_sugarcrepe_pp_figures_equal_the_released_script_on_planted_ties():
    sc = get("sugarcrepe-pp").scoring
    rng = np.random.default_rng(1)
    files = [f for f in ("replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj") for _ in range(9)]
    n = len(files)
    s = np.round(rng.normal(0, 1, (n, 3)), 1).astype(np.float32)
    text = np.round(rng.normal(0, 1, (n, 3)), 1).astype(np.float32)
    s[::4, 2] = s[::4, 0]  # P1 ties N: ITT and Image-P1-Neg wrong
    s[1::6, 2] = s[1::6, 1]  # P2 ties N
    text[::5, 1] = text[::5, 0]  # sim(P1, P2) ties sim(P1, N): TOT wrong
    res = aggregate_paraphrases(sc, s, text, {"subset": files, "record_id": list(map(str, range(n)))})
    per_file = {f: scpp_official(s[np.array(files) == f], text[np.array(files) == f]) for f in sorted(set(files))}
    for m in ("ITT", "Image-P1-Neg", "Image-P2-Neg", "TOT"):
        got = res["metrics"][m]
        assert got["by_subset"] == pytest.approx({f: v[m] for f, v in per_file.items()}, abs=1e-15), m
        assert got["score"] == pytest.approx(np.mean([v[m] for v in per_file.values()]), abs=1e-15), m
    assert res["score"] == res["metrics"]["ITT"]["score"] and res["headline_metric"] == "ITT"
    assert res["ties"] > 0 and res["ties_text"] > 0
    assert res["by_subset"]["swap_obj TOT"] == per_file["swap_obj"]["TOT"]
    without = aggregate_paraphrases(sc, s, None, {"subset": files, "record_id": list(map(str, range(n)))})
    assert without["metrics"]["TOT"]["defined"] is False and not any(k.endswith(" TOT") for k in without["by_subset"])
    assert without["metrics"]["ITT"] == res["metrics"]["ITT"]


# -- small files in each official layout, extracted and scored ------------------------------------
@pytest.fixture(scope="module")
def caption_side(tmp_path_factory):
    from flowclip_cache.synthetic.sample import make_sample

    base = tmp_path_factory.mktemp("captions")
    s = make_sample(str(base / "sample"), n_images=12)
    pngs = sorted(os.path.join(s["image_root"], p) for p in os.listdir(s["image_root"]) if p.endswith(".png"))
    caps = [c for r in Manifest.read(s["candidates"]).table.to_pylist() for c in r["captions"]]
    root, src, out = base / "images", base / "src", base / "manifests"
    for d in (root, src / "valse", src / "scpp", out):
        d.mkdir(parents=True)
    folder = {"existence": ("visual7w", "visual7w"), "plurals": ("coco2017", "coco2017"), "foil-it":
              ("FOIL dataset", "coco-val2014"), "actant-swap": ("SWiG", "swig")}  # fmt: skip
    k = 0
    for piece in VALSE_KEPT:
        dataset, sub = folder.get(piece, ("VisDial_v1.0", "visdial"))
        recs = {}
        for j, votes in enumerate((3, 2, 1)):  # the third is not valid (mturk.caption < 2)
            fn = f"{piece}_{j}.jpg"
            os.makedirs(root / sub, exist_ok=True)
            Image.open(pngs[k % len(pngs)]).convert("RGB").save(root / sub / fn, "JPEG")
            pair = {"caption": caps[k % len(caps)], "foil": caps[(k + 1) % len(caps)]}
            recs[f"{piece}_{j}"] = {"dataset": dataset, "image_file": fn, "mturk": {"caption": votes}, **pair}
            k += 1
        json.dump(recs, open(src / "valse" / f"{piece}.json", "w"))
    for i, f in enumerate(("replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")):
        Image.open(pngs[i]).convert("RGB").save(root / f"{i:012d}.jpg", "JPEG")
        recs = [{"id": j, "filename": f"{i:012d}.jpg", "caption": caps[i + j], "caption2": caps[i + j + 1],
                 "negative_caption": caps[i + j + 2]} for j in range(3)]  # fmt: skip
        json.dump(recs, open(src / "scpp" / f"{f}.json", "w"))
    built = {n: get(n).build(str(src / d), str(out / f"{n}.parquet"), RowErrors())
             for n, d in (("valse", "valse"), ("sugarcrepe-pp", "scpp"))}  # fmt: skip
    store = base / "store"
    args = ["extract", "--store", str(store), "--model", "flowclip-tiny-clip", "--pretrained", "none",
                                      "--image-root", str(root),
            "--workers", "0", "--quiet", "--on-error", "fail", "--manifest", str(out / "valse.parquet"),
            "--manifest", str(out / "sugarcrepe-pp.parquet")]  # fmt: skip
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    return {"base": base, "out": out, "root": root, "store": str(store), "built": built}


def test_the_layouts_convert_keeping_valid_records(caption_side):
    b = caption_side["built"]
    assert b["valse"].counts == {p: 2 for p in VALSE_KEPT} and b["sugarcrepe-pp"].records == 15
    assert (
        Manifest.read(caption_side["out"] / "valse.parquet")
        .table.column("image")
        .to_pylist()[0]
        .startswith("visual7w/")
    )


def test_every_head_scores_the_paraphrases_and_tot_is_defined_where_declared(caption_side, tmp_path):
    from test_field_benchmarks import scorers

    fs = FeatureStore(caption_side["store"])
    heads = scorers(fs.meta["dim"], tmp_path)
    m = Manifest.read(caption_side["out"] / "sugarcrepe-pp.parquet")
    name, sc = scoring_of(m)
    results: dict = {}
    rows, changes, boot = score_paraphrase_task(fs, m, name, sc, heads, ("real", "shuffle"), 0, "cpu", None, 2048,
                                                results, {})  # fmt: skip
    text = text_similarities(fs, m, heads, "cpu")
    for s in heads:
        res = results[("real", s.run)][name]
        assert 0 <= res["score"] <= 1 and res["n"] == 15
        embeds = s.head.caption_embedding(torch.eye(fs.meta["dim"])[:2]) is not None
        assert (text[s.run] is not None) == embeds, s.run  # TOT where a head has a caption embedding
        assert ("score" in res["metrics"]["TOT"]) == embeds
        if not embeds:
            assert "not defined for this scorer" in res["metrics"]["TOT"]["reason"]
        assert results[("shuffle", s.run)][name]["metrics"]["TOT"] == res["metrics"]["TOT"]  # TOT reads no image
    assert {"flow", "clip", "global"} <= {s.run for s in heads}
    assert text["flow"] is None and text["clip"] is not None
    # CLIP's TOT is the cosine of the text globals (FP16 in the store, renormalised), as the script computes it
    t = m.table.to_pylist()
    from flowclip_cache.hashing import caption_key

    g = fs.load_captions([caption_key(c) for c in (t[0]["positives"] + [t[0]["negative"]])]).global_.astype(np.float64)
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    assert text["clip"][0] == pytest.approx([g[0] @ g[1], g[0] @ g[2], g[1] @ g[2]], abs=1e-6)
    assert len(rows) == 2 * len(heads) * 15 and boot[0]["name"] == name


def test_score_reports_valse_thresholds_only_for_a_scorer_that_declares_one(caption_side, tmp_path, monkeypatch):
    def run(out):
        args = ["score", "--store", caption_side["store"], "--scorer", "clip", "--out", str(out), "--bootstrap", "0"]
        args += ["--image-root", str(caption_side["root"]), "--manifests", str(caption_side["out"]), "--no-figures"]
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 0, r.output
        return json.loads((out / "results.json").read_text())["results"], (out / "results.md").read_text()

    res, md = run(tmp_path / "plain")
    v = res["real|clip"]["valse"]
    assert set(v["by_piece"]) == set(VALSE_KEPT) and v["n"] == 22
    assert v["threshold_figures"]["defined"] is False
    assert "### valse: p_c, p_f, acc" in md and "- clip: not defined for this scorer" in md
    assert (
        "## Paraphrase and hard-positive tasks" in md and "| sugarcrepe-pp | clip | ITT " in md and "TOT n/d" not in md
    )
    assert "| replace_att ITT | replace_att Image-P1-Neg |" in md  # the per-file breakdown, every figure
    assert "**augmented**" not in md  # the hard positives' names are said only where such a task is scored
    monkeypatch.setattr(ClipHead, "decision_threshold", lambda self: (0.2, "a test's planted threshold"))
    res, md = run(tmp_path / "declared")
    th = res["real|clip"]["valse"]["threshold_figures"]
    assert th["defined"] and th["source"] == "a test's planted threshold" and th["pooled"]["count"] <= 22
    assert "0.2 (a test's planted threshold)" in md


def test_the_blind_audit_reads_caption_and_paraphrase_tasks(caption_side, tmp_path):
    """score --blind-audit: every caption-choice and paraphrase manifest audited (or said
    why not); a paraphrase record counted once, its scorer figure ITT's."""
    out = tmp_path / "blind"
    args = ["score", "--store", caption_side["store"], "--scorer", "clip", "--out", str(out), "--bootstrap", "0",
            "--image-root", str(caption_side["root"]), "--manifests", str(caption_side["out"]), "--no-figures",
            "--blind-audit", "2"]  # fmt: skip
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    summary = json.loads((out / "results.json").read_text())
    audit = summary["blind_audit"]
    pp = audit["sugarcrepe-pp"]
    assert pp["defined"] and pp["n"] == 15 and pp["chance"] == pytest.approx(1 / 3)
    assert pp["scorers"]["clip"]["all"] == summary["results"]["real|clip"]["sugarcrepe-pp"]["metrics"]["ITT"]["pooled"]
    assert "valse" in audit and "## Blind audit" in (out / "results.md").read_text()


def test_the_head_contract_checks_the_new_methods():
    from flowclip_cache.errors import FlowclipError
    from flowclip_cache.heads.contract import check_head
    from flowclip_cache.heads.global_m import GlobalHead

    g = build_head("global", 8)
    with torch.no_grad():
        g.M.add_(0.3 * torch.randn(8, 8, generator=torch.Generator().manual_seed(0)))
    a, b = torch.nn.functional.normalize(torch.randn(2, 3, 8), dim=-1)
    e = lambda x: torch.nn.functional.normalize(x @ g.M.T, dim=-1)  # noqa: E731
    assert torch.allclose(g.caption_similarity(a, b), (e(a) * e(b)).sum(-1), atol=1e-6)
    assert build_head("flow", 8).caption_similarity(a, b) is None and build_head("clip", 8).decision_threshold() is None

    class Bad(GlobalHead):
        def decision_threshold(self):
            return (float("nan"), "somewhere")

    with pytest.raises(FlowclipError, match="decision_threshold must return None or"):
        check_head(lambda: Bad(8), "bad")


# -- VL-CheckList: a checkout in its layout (its data is not ours to copy) -------------------------
def radar_official(acc: dict[str, float], corpus: dict[str, dict[str, list[str]]]) -> dict[str, float]:
    """radar.py's generate_chart loop: per item, the mean over its data sources of the mean
    of their files' total_acc."""
    out = {}
    for item in corpus:
        data_score = []
        for data in corpus[item]:
            score = 0.0
            for file in corpus[item][data]:
                score += acc[file]
            data_score.append(score / len(corpus[item][data]))
        out[item] = sum(data_score) / len(corpus[item])
    return out


def test_vl_checklist_reads_a_checkout_counts_missing_images_and_averages_as_radar(tmp_path):
    import yaml

    src, images = tmp_path / "VL-CheckList", tmp_path / "images"
    entries = [("Object/Size/large", "vg_obj", "vg/"), ("Object/Size/large", "vg_subj", "vg/"),
               ("Object/Size/large", "swig_agent", "swig/"), ("Object/Location/mid", "hake", "hake/"),
               ("Attribute/color", "vaw", "vg/"), ("Attribute/color", "vg", "vg/"),
               ("Relation/spatial", "vg", "vg/")]  # fmt: skip
    for k, (kind, name, root) in enumerate(entries):
        (src / "corpus" / "v1" / kind).mkdir(parents=True, exist_ok=True)
        anno = f"data/{kind}/{name}.json"
        (src / anno).parent.mkdir(parents=True, exist_ok=True)
        yaml.safe_dump({"ANNO_PATH": anno, "IMG_ROOT": root, "TYPE": "TUPLE_JSON"},
                       open(src / "corpus" / "v1" / kind / f"{name}.yaml", "w"))  # fmt: skip
        recs = [[f"{k}_{j}.jpg", {"POS": [f"pos {k} {j}", "another"], "NEG": [f"neg {k} {j}"]}] for j in range(5)]
        json.dump(recs, open(src / anno, "w"))
        for j in range(5):
            if (k, j) != (0, 1):  # one image missing: skipped, counted
                (images / root).mkdir(parents=True, exist_ok=True)
                (images / root / f"{k}_{j}.jpg").write_bytes(b"x")
    b = get("vl-checklist")
    with pytest.raises(Exception, match="images=<folder>"):
        b.build(str(src), str(tmp_path / "v.parquet"), RowErrors())
    r = b.build(str(src), str(tmp_path / "v.parquet"), RowErrors(), images=str(images), max_num="6")
    m = Manifest.read(tmp_path / "v.parquet")
    assert r.counts["Object_Size_large_vg_obj"] == 3 and set(r.counts.values()) == {3}  # the first 6/2 present
    assert "Object_Size_large_vg_obj 1" in r.notes[0] and m.meta["missing_images"]["Object_Size_large_vg_obj"] == 1
    rows = m.table.to_pylist()
    first = [x for x in rows if x["file"] == "Object_Size_large_vg_obj"]
    assert [x["image"] for x in first] == ["vg/0_0.jpg", "vg/0_2.jpg", "vg/0_3.jpg"]  # 0_1 skipped, then the first 3
    assert first[0]["captions"] == ["pos 0 0", "neg 0 0"] and first[0]["category"] == "Object_Size_large"
    # planted scores with ties, against radar.py and vl_compo's mean of Object, Attribute, Relation
    rng = np.random.default_rng(2)
    s = np.round(rng.normal(size=(len(rows), 2)), 1).astype(np.float32)
    s[::4, 1] = s[::4, 0]  # ties: wrong (evaluate.py's `>`)
    cols = m.table.to_pydict()
    res = aggregate(b.scoring, s, np.zeros(len(rows), np.int64), cols)
    files = np.array(cols["file"])
    acc = {f: float(np.mean([a > c for (a, c), g in zip(s.astype(np.float64), files) if g == f])) for f in set(files)}
    corpus: dict = {}
    for x in rows:
        corpus.setdefault(x["category"], {}).setdefault(x["source"], [])
        if x["file"] not in corpus[x["category"]][x["source"]]:
            corpus[x["category"]][x["source"]].append(x["file"])
    total_acc = {f: round(a, 4) for f, a in acc.items()}  # evaluate.py writes round(accuracy, 4); radar.py reads it
    radar = radar_official(total_acc, corpus)
    assert any(total_acc[f] != acc[f] for f in acc)  # (the planted files' accuracies do round: 1/3, 2/3)
    assert res["nested_category"] == pytest.approx(radar, abs=1e-15) and res["by_file"] == pytest.approx(acc, abs=0)
    kinds = {k: np.mean([v for c, v in radar.items() if c.startswith(k)]) for k in ("Object", "Attribute", "Relation")}
    assert res["score"] == pytest.approx(np.mean(list(kinds.values())), abs=1e-15) and res["ties"] > 0


# -- SVO-Probes: svo_probes.csv in its layout, images named by id ---------------------------------
def notebook_official(frame) -> tuple[float, float, float]:
    """probing_image_text_models.ipynb's `accuracy(frame)`, as written (pandas)."""
    neg = frame[["sentence", "neg_image_id", "neg_scores"]].drop_duplicates()
    pos = frame[["sentence", "pos_image_id", "pos_scores"]].drop_duplicates()
    neg_acc = np.mean([item == 0 for item in neg["neg_scores"].values])
    pos_acc = np.mean([item == 1 for item in pos["pos_scores"].values])
    return (neg_acc + pos_acc) / 2, pos_acc, neg_acc


@pytest.fixture(scope="module")
def svo(tmp_path_factory):
    from flowclip_cache.synthetic.sample import make_sample

    base = tmp_path_factory.mktemp("svo")
    s = make_sample(str(base / "sample"), n_images=10)
    pngs = sorted(os.path.join(s["image_root"], p) for p in os.listdir(s["image_root"]) if p.endswith(".png"))
    caps = [c for r in Manifest.read(s["candidates"]).table.to_pylist() for c in r["captions"]]
    images = base / "images"
    images.mkdir()
    for i in range(9):  # image id 9 is never fetched
        Image.open(pngs[i]).convert("RGB").save(images / f"{100 + i}.{'jpg' if i % 2 else 'png'}")
    types = [(1, 0, 0), (0, 1, 0), (0, 0, 1), (1, 0, 0), (0, 1, 0), (0, 0, 1), (1, 1, 0), (0, 0, 1)]
    lines = ["sentence,pos_triplet,neg_triplet,subj_neg,verb_neg,obj_neg,pos_url,neg_url,pos_image_id,neg_image_id"]
    for k, (a, b, c) in enumerate(types):
        pos, neg = 100 + k, 100 + (k + 1) % 10 if k != 7 else 109  # the last record's negative is absent
        lines.append(f'"{caps[k % 3]}",x,y,{a == 1},{b == 1},{c == 1},http://a/{pos},http://a/{neg},{pos},{neg}')
    (base / "svo_probes.csv").write_text("\n".join(lines) + "\n")
    r = get("svo-probes").build(str(base), str(base / "svo-probes.parquet"), RowErrors(), images=str(images))
    args = [
        "extract",
        "--store",
        str(base / "store"),
        "--model",
        "flowclip-tiny-clip",
        "--pretrained",
        "none",
        "--image-root",
        str(images),
    ]
    args += ["--workers", "0", "--quiet", "--on-error", "fail", "--manifest", str(base / "svo-probes.parquet")]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    return {"base": base, "images": images, "report": r}


def test_svo_probes_skips_and_counts_absent_images_and_keeps_single_type_rows(svo):
    r = svo["report"]
    m = Manifest.read(svo["base"] / "svo-probes.parquet")
    assert r.records == len(m) == 7 and m.meta["absent_images"] == 1 and "1 records skipped" in r.notes[0]
    assert r.counts == {"subj_neg": 2, "verb_neg": 2, "obj_neg": 2, "more than one type": 1}
    rows = m.table.to_pylist()
    assert rows[1]["images"] == ["101.jpg", "102.png"] and rows[6]["excluded"] and not rows[0]["excluded"]
    with pytest.raises(Exception, match="images=<folder>"):
        get("svo-probes").build(str(svo["base"]), str(svo["base"] / "x.parquet"), RowErrors())


def test_svo_probes_both_rules_equal_their_transcriptions_on_planted_ties():
    pd = pytest.importorskip("pandas")
    sc = get("svo-probes").scoring
    kinds = [t for t in ("subj_neg", "verb_neg", "obj_neg") for _ in range(12)] + ["more than one type"] * 4
    n = len(kinds)
    draw = np.random.default_rng(5).integers(0, 4, (3, n))  # pairs recur unevenly: counted once each
    sentence, pos_id, neg_id = [f"s{k}" for k in draw[0]], [str(k) for k in draw[1]], [str(10 + k) for k in draw[2]]
    # a pair's score depends on the pair alone (as the engine guarantees), on a coarse grid: ties
    pairs = sorted({(a, b) for a, b in zip(sentence, pos_id)} | {(a, c) for a, c in zip(sentence, neg_id)})
    value = dict(zip(pairs, np.round(np.random.default_rng(4).normal(size=len(pairs)), 1)))
    for a, b, c in list(zip(sentence, pos_id, neg_id))[::5]:  # ties, planted per pair: a tie is wrong
        value[a, c] = value[a, b]
    s = np.array([[value[a, b], value[a, c]] for a, b, c in zip(sentence, pos_id, neg_id)], np.float32)
    cols = {"neg_type": kinds, "excluded": [k.startswith("more") for k in kinds], "caption": sentence,
            "pos_image_id": pos_id, "neg_image_id": neg_id, "record_id": list(map(str, range(n)))}  # fmt: skip
    res = aggregate(sc, s, np.zeros(n, np.int64), cols, (0.3, "planted"))
    keep = ~np.array(cols["excluded"])
    right = (s[:, 0].astype(np.float64) > s[:, 1].astype(np.float64))[keep]
    per = {t: float(right[np.array(kinds)[keep] == t].mean()) for t in ("subj_neg", "verb_neg", "obj_neg")}
    assert res["by_neg_type"] == pytest.approx(per, abs=0) and res["score"] == pytest.approx(
        np.mean(list(per.values()))
    )
    assert res["n"] == 36 and res["excluded"] == 4 and res["ties"] > 0
    more = [k.startswith("more") for k in kinds]  # subject and verb negatives at once: outside every frame
    df = pd.DataFrame({"sentence": sentence, "pos_image_id": pos_id, "neg_image_id": neg_id,
                       "subj_neg": [k == "subj_neg" or x for k, x in zip(kinds, more)],
                       "verb_neg": [k == "verb_neg" or x for k, x in zip(kinds, more)],
                       "obj_neg": [k == "obj_neg" for k in kinds],
                       "pos_scores": (s[:, 0] > 0.3).astype(int),
                       "neg_scores": (s[:, 1] > 0.3).astype(int)})  # fmt: skip
    frames = {"subj_neg": df[df["subj_neg"] & ~df["obj_neg"] & ~df["verb_neg"]],
              "verb_neg": df[df["verb_neg"] & ~df["obj_neg"] & ~df["subj_neg"]],
              "obj_neg": df[df["obj_neg"] & ~df["verb_neg"] & ~df["subj_neg"]]}  # fmt: skip
    th = res["threshold_figures"]
    for t, frame in frames.items():
        acc, pos_acc, neg_acc = notebook_official(frame)
        got = th["by_neg_type"][t]
        assert (got["acc"], got["pos_acc"], got["neg_acc"]) == pytest.approx((acc, pos_acc, neg_acc), abs=1e-15), t
    acc, pos_acc, neg_acc = notebook_official(pd.concat(list(frames.values())))
    assert (th["pooled"]["acc"], th["pooled"]["pos_acc"]) == pytest.approx((acc, pos_acc), abs=1e-15)
    assert 0 < pos_acc < 1 and 0 < neg_acc < 1


def test_svo_probes_scores_and_declares_the_notebook_rule_only_with_a_threshold(svo, tmp_path, monkeypatch):
    def run(out):
        args = ["score", "--store", str(svo["base"] / "store"), "--scorer", "clip", "--out", str(out)]
        args += ["--bootstrap", "0", "--image-root", str(svo["images"])]
        args += ["--manifests", str(svo["base"] / "svo-probes.parquet")]
        r = CliRunner().invoke(cli, args + ["--no-figures"])
        assert r.exit_code == 0, r.output
        return json.loads((out / "results.json").read_text())["results"]["real|clip"]["svo-probes"], (
            out / "results.md"
        ).read_text()

    res, md = run(tmp_path / "plain")
    assert set(res["by_neg_type"]) == {"subj_neg", "verb_neg", "obj_neg"} and res["n"] == 6
    assert res["threshold_figures"]["defined"] is False and "- clip: not defined for this scorer" in md
    monkeypatch.setattr(ClipHead, "decision_threshold", lambda self: (0.1, "planted"))
    res, md = run(tmp_path / "declared")
    assert set(res["threshold_figures"]["pooled"]) == {"acc", "pos_acc", "neg_acc", "pairs"}
    assert "| scorer | threshold (source) | acc | pos_acc | neg_acc | pairs |" in md


def test_valse_and_svo_probes_score_under_every_head_and_a_plugin(caption_side, svo, tmp_path):
    from test_field_benchmarks import scorers

    from flowclip_cache.scoring.engines import score_candidates
    from flowclip_cache.scoring.matrix_tasks import score_matrices

    cases = [(caption_side["store"], caption_side["out"] / "valse.parquet", caption_side["root"]),
             (str(svo["base"] / "store"), svo["base"] / "svo-probes.parquet", svo["images"])]  # fmt: skip
    for store, path, root in cases:
        fs = FeatureStore(store)
        heads = scorers(fs.meta["dim"], tmp_path)
        m = Manifest.read(path)
        if m.kind == "candidates":
            mats = score_candidates(fs, m, heads, ("real",), 0, "cpu", str(root))[0]
            mats = {run: mat for (_, run), mat in mats.items()}
        else:
            mats = {run: mat[:, :, 0] for run, mat in score_matrices(fs, m, heads, "cpu", str(root))[0].items()}
        for s in heads:
            assert mats[s.run].shape == (len(m), 2) and np.isfinite(mats[s.run]).all(), (path.name, s.run)


def test_explain_draws_each_paraphrase_against_the_negative(caption_side, tmp_path):
    """A SugarCrepe++ record in flowclip explain: two pairwise views (P1 vs N, P2 vs N), each
    with the scores the paraphrase engine gives them, its status from ITT."""
    from flowclip_cache.scoring.explain import run_explain

    fs = FeatureStore(caption_side["store"])
    path = str(caption_side["out"] / "sugarcrepe-pp.parquet")
    data = run_explain(fs, [path], ["clip"], str(tmp_path / "ex"), records="all", limit=0,
                       image_root=str(caption_side["root"]), log=lambda *a: None)  # fmt: skip
    views = {r["record_id"]: r for r in data["records"]}
    m = Manifest.read(path).table.to_pylist()
    assert set(views) == {f"{r['record_id']}#p{i}" for r in m for i in (1, 2)}
    results: dict = {}
    name, sc = scoring_of(Manifest.read(path))
    rows, _, _ = score_paraphrase_task(fs, Manifest.read(path), name, sc, [_clip(fs)], ("real",), 0, "cpu",
                                       str(caption_side["root"]), 2048, results, {})  # fmt: skip
    for row, rec in zip(rows, m):
        p1, p2 = views[f"{rec['record_id']}#p1"], views[f"{rec['record_id']}#p2"]
        assert p1["captions"] == [rec["positives"][0], rec["negative"]] and p2["captions"][0] == rec["positives"][1]
        assert p1["scores"]["clip"] == pytest.approx([row["scores"][0], row["scores"][2]], abs=0)
        assert p1["status"] == "unchanged" and p1["correct"]["clip"] == row["correct"]  # (one scorer)


def _clip(fs):
    from flowclip_cache.scoring.scorers import Scorer

    return Scorer("clip", "clip", build_head("clip", fs.meta["dim"]), "frozen")


def test_vl_checklist_and_crepe_systematicity_score_under_every_head(tmp_path):
    """Both from files in their layouts with real (sample) images, through extract, under
    every head and a plug-in: finite scores, and a CREPE row with no valid negative (its
    caption alone) is right for every scorer."""
    import yaml
    from test_field_benchmarks import scorers

    from flowclip_cache.scoring.engines import score_candidates
    from flowclip_cache.synthetic.sample import make_sample

    s = make_sample(str(tmp_path / "sample"), n_images=6)
    pngs = sorted(p for p in os.listdir(s["image_root"]) if p.endswith(".png"))
    caps = [c for r in Manifest.read(s["candidates"]).table.to_pylist() for c in r["captions"]]
    root, src = tmp_path / "images", tmp_path / "VL-CheckList"
    (root / "vg").mkdir(parents=True)
    for i, p in enumerate(pngs):
        Image.open(os.path.join(s["image_root"], p)).convert("RGB").save(root / "vg" / f"{i}.jpg")
    (src / "corpus" / "v1" / "Relation" / "spatial").mkdir(parents=True)
    (src / "data").mkdir()
    yaml.safe_dump({"ANNO_PATH": "data/spatial.json", "IMG_ROOT": "vg/"},
                   open(src / "corpus" / "v1" / "Relation" / "spatial" / "vg.yaml", "w"))  # fmt: skip
    json.dump(
        [[f"{i}.jpg", {"POS": [caps[i]], "NEG": [caps[i + 1]]}] for i in range(4)],
        open(src / "data" / "spatial.json", "w"),
    )
    head = "image_id,caption,x,y,width,height,valid_hard_negs_atom,valid_hard_negs_comp,valid_hard_negs_combined\n"
    rows = [
        f'vg/{i},{caps[i]},2,3,40,30,"[{caps[i + 1]!r}]","[]","[{caps[i + 2]!r}, {caps[i + 3]!r}]"' for i in range(3)
    ]
    (tmp_path / "syst_vg_hard_negs_seen_compounds_in_yfcc.csv").write_text(head + "\n".join(rows) + "\n")
    (tmp_path / "syst_vg_hard_negs_unseen_compounds_in_yfcc.csv").write_text(head + rows[0] + "\n")
    get("vl-checklist").build(str(src), str(tmp_path / "vl.parquet"), RowErrors(), images=str(root))
    get("crepe-systematicity").build(str(tmp_path), str(tmp_path / "cr.parquet"), RowErrors(), train_dataset="yfcc")
    args = [
        "extract",
        "--store",
        str(tmp_path / "store"),
        "--model",
        "flowclip-tiny-clip",
        "--pretrained",
        "none",
        "--image-root",
        str(root),
    ]
    args += ["--workers", "0", "--quiet", "--on-error", "fail"]
    r = CliRunner().invoke(
        cli, args + ["--manifest", str(tmp_path / "vl.parquet"), "--manifest", str(tmp_path / "cr.parquet")]
    )
    assert r.exit_code == 0, r.output
    fs = FeatureStore(str(tmp_path / "store"))
    heads = scorers(fs.meta["dim"], tmp_path)
    for path in ("vl.parquet", "cr.parquet"):
        m = Manifest.read(tmp_path / path)
        name, sc = scoring_of(m)
        mats, gold, cols, _ = score_candidates(fs, m, heads, ("real",), 0, "cpu", str(root), name)
        for hd in heads:
            mat = mats[("real", hd.run)]
            sizes = [len(c) for c in cols["captions"]]
            assert all(np.isfinite(row[:k]).all() and np.isnan(row[k:]).all() for row, k in zip(mat, sizes)), hd.run
            res = aggregate(sc, mat, gold, cols)
            assert 0 <= res["score"] <= 1
            if path == "cr.parquet":
                assert res["recall_by_file"]["seen_compounds/comp"] == 1.0  # captions alone: right


def test_svo_probes_refuses_an_ambiguous_image_and_vl_checklist_a_path_out_of_its_checkout(svo, tmp_path):
    import shutil

    import yaml

    from flowclip_cache.errors import ManifestError

    images = tmp_path / "images"
    shutil.copytree(svo["images"], images)
    shutil.copy(images / "101.jpg", images / "101.webp")  # image 101 twice: which is it?
    with pytest.raises(ManifestError, match="two files for image id 101"):
        get("svo-probes").build(str(svo["base"]), str(tmp_path / "s.parquet"), RowErrors(), images=str(images))
    (images / "readme.txt").write_text("x")
    (images / "readme.md").write_text("x")  # an unrelated name twice: no matter
    shutil.move(images / "101.webp", tmp_path / "gone.webp")
    r = get("svo-probes").build(str(svo["base"]), str(tmp_path / "s.parquet"), RowErrors(), images=str(images))
    assert r.records == 7
    src = tmp_path / "VL-CheckList"
    (src / "corpus" / "v1" / "Relation" / "spatial").mkdir(parents=True)
    (tmp_path / "outside.json").write_text("[]")
    yaml.safe_dump({"ANNO_PATH": "../outside.json", "IMG_ROOT": "vg/"},
                   open(src / "corpus" / "v1" / "Relation" / "spatial" / "vg.yaml", "w"))  # fmt: skip
    with pytest.raises(ManifestError, match="leads outside the checkout"):
        get("vl-checklist").build(str(src), str(tmp_path / "v.parquet"), RowErrors(), images=str(images))
