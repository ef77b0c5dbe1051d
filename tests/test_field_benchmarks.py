"""The image-choice and group benchmarks from their official layouts to
scores: each converter on a small file written in the layout its official loader reads
(the real file where ../shared/benchmarks holds it, with its counts), then every
manifest extracted with the tiny CLIP and scored under every built-in head and a
plug-in head; identical (image, caption) pairs score identical bits in every record."""

import csv
import json
import os
import shutil

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from conftest import doc_file, needs_shared
from PIL import Image

import flowclip_cache as fc
from flowclip_cache.cli import main as cli
from flowclip_cache.datasets import get
from flowclip_cache.datasets.base import RowErrors
from flowclip_cache.errors import ManifestError
from flowclip_cache.heads import available_kinds, build_head
from flowclip_cache.manifest import Manifest
from flowclip_cache.scoring.matrix_tasks import score_matrices
from flowclip_cache.scoring.scorers import Scorer, scoring_of
from flowclip_cache.store import FeatureStore

SHARED = os.environ.get(
    "FLOWCLIP_BENCHMARK_FILES", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "benchmarks")
)


# -- the real files we hold ---------------------------------------------------------------------
@needs_shared("cola", "COLA_multiobjects_matching_benchmark.json")
def test_cola_real_file_converts_with_its_210_records(tmp_path):
    r = get("cola-multiobj").build(os.path.join(SHARED, "cola"), str(tmp_path / "c.parquet"), RowErrors())
    m = Manifest.read(tmp_path / "c.parquet")
    assert r.records == len(m) == 210 and m.kind == "groups"
    assert all(p.startswith("vg_gqa_images/") for ps in m.row_images() for p in ps)


@needs_shared("imagecode", "valid_data.json")
def test_imagecode_validation_file_counts_and_the_unlabelled_test_file(tmp_path):
    r = get("imagecode").build(os.path.join(SHARED, "imagecode"), str(tmp_path / "i.parquet"), RowErrors())
    m = Manifest.read(tmp_path / "i.parquet")
    assert (r.records, r.counts) == (2302, {"video": 1872, "static": 430})  # the counts
    assert len({s for s in m.table.column("set").to_pylist()}) == 1039 and r.images == 10390
    with pytest.raises(ManifestError, match="test labels are not public"):
        get("imagecode").build(
            os.path.join(SHARED, "imagecode"), str(tmp_path / "t.parquet"), RowErrors(), file="test_data_unlabeled.json"
        )


# -- small files in each official layout ----------------------------------------------------------
@pytest.fixture(scope="module")
def field(tmp_path_factory):
    from flowclip_cache.synthetic.sample import make_sample

    base = tmp_path_factory.mktemp("field")
    s = make_sample(str(base / "sample"), n_images=24)
    pngs = sorted(os.path.join(s["image_root"], p) for p in os.listdir(s["image_root"]) if p.endswith(".png"))
    caps = [c for r in Manifest.read(s["candidates"]).table.to_pylist() for c in r["captions"][:1]]
    root, src, out = base / "images", base / "src", base / "manifests"
    for d in (root, src, out):
        d.mkdir()

    def put(rel, k, fmt="PNG"):  # image k of the sample world saved under the image root
        os.makedirs(os.path.dirname(root / rel) or ".", exist_ok=True)
        Image.open(pngs[k % len(pngs)]).convert("RGB").save(root / rel, fmt)
        return rel

    # Winoground's examples.jsonl (images unzipped: ex_<id>_img_<k>.png)
    (src / "wino" / "data").mkdir(parents=True)
    with open(src / "wino" / "data" / "examples.jsonl", "w") as f:
        for i in range(4):
            put(f"ex_{i}_img_0.png", 2 * i), put(f"ex_{i}_img_1.png", 2 * i + 1)
            tag = ["Object", "Relation", "Both", "Relation"][i]
            rec = {"id": i, "caption_0": caps[2 * i], "caption_1": caps[2 * i + 1], "image_0": f"ex_{i}_img_0",
                   "image_1": f"ex_{i}_img_1", "tag": "t", "secondary_tag": "Symbolic" if i == 1 else "",
                   "num_main_preds": 1, "collapsed_tag": tag}  # fmt: skip
            f.write(json.dumps(rec) + "\n")
    # EqBen: one file per subset, in its loader class's layout (YouCook2: BGR .npy frames)
    (src / "eqben").mkdir()
    frame = lambda a, b, c0, c1: {"image0": a, "image1": b, "caption0": c0, "caption1": c1}  # noqa: E731
    json.dump({"v1": {"subj": [frame(put("ag/0.png", 0), put("ag/1.png", 1), [caps[0], "x"], [caps[1], "y"])]}},
              open(src / "eqben" / "eqbenag.json", "w"))  # fmt: skip
    os.makedirs(root / "yc", exist_ok=True)
    for k in range(2):
        np.save(root / "yc" / f"{k}.npy", np.asarray(Image.open(pngs[k + 4]).convert("RGB"))[:, :, ::-1].copy())
    json.dump(
        {"v2": [frame("yc/0.npy", "yc/1.npy", caps[4], caps[5])]}, open(src / "eqben" / "eqbenyoucook2.json", "w")
    )
    json.dump(
        [frame(put("kb/0.png", 6), put("kb/1.png", 7), caps[6], caps[7])],
        open(src / "eqben" / "eqbenkubric_loc.json", "w"),
    )
    # MMVP-VLM: Questions.csv, images under "MLLM_VLM Images/<type>/<qid>.jpg"
    (src / "mmvp").mkdir()
    with open(src / "mmvp" / "Questions.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Question ID", "Type", "Statement"])
        for q in range(1, 7):
            put(f"MLLM_VLM Images/Orientation/{q}.jpg", q, "JPEG")
            w.writerow([q, "Orientation", caps[q]])
    # SPEC: <subset>/image2text.json and text2image.json
    for sub in ("count", "existence"):
        (src / "spec" / sub).mkdir(parents=True)
        ims = [put(f"{sub}/{k}.png", k) for k in range(3)]
        json.dump([{"query": ims[0].split("/", 1)[1], "keys": caps[:3], "label": 0}],
                  open(src / "spec" / sub / "image2text.json", "w"))  # fmt: skip
        json.dump([{"query": caps[1], "keys": [p.split("/", 1)[1] for p in ims], "label": 1}],
                  open(src / "spec" / sub / "text2image.json", "w"))  # fmt: skip
    # ImageCoDe: {set: {index: description}}, images <set>/img<k>.jpg
    (src / "imagecode").mkdir()
    for k in range(10):
        put(f"open-images-1_a/img{k}.jpg", k, "JPEG"), put(f"video-2/img{k}.jpg", k + 10, "JPEG")
    json.dump({"open-images-1_a": {"3": caps[3] + "  "}, "video-2": {"0": caps[10], "9": caps[19]}},
              open(src / "imagecode" / "valid_data.json", "w"))  # fmt: skip
    # Cola: [image_1 URL, caption_1, image_2 URL, caption_2]
    (src / "cola").mkdir()
    json.dump([[f"https://x/vg_gqa_images/{put('vg_gqa_images/%d.jpg' % k, k, 'JPEG').split('/')[1]}", caps[k],
                f"https://x/vg_gqa_images/{put('vg_gqa_images/%d.jpg' % (k + 1), k + 1, 'JPEG').split('/')[1]}",
                caps[k + 1]] for k in (0, 2, 4)], open(src / "cola" / "c.json", "w"))  # fmt: skip
    built = {}
    for name, source in [("winoground", src / "wino"), ("eqben", src / "eqben"), ("mmvp-vlm", src / "mmvp"),
                         ("spec-i2t", src / "spec"), ("spec-t2i", src / "spec"), ("imagecode", src / "imagecode"),
                         ("cola-multiobj", src / "cola" / "c.json")]:  # fmt: skip
        built[name] = get(name).build(str(source), str(out / f"{name}.parquet"), RowErrors())
    # Hugging Face copies: save_to_disk (ColorSwap, Winoground) and the hub's Parquet (BiVLC)
    datasets = pytest.importorskip("datasets")
    img = datasets.Image()
    b = lambda ps: [{"bytes": open(p, "rb").read(), "path": os.path.basename(p)} for p in ps]  # noqa: E731
    # (the hub's files embed each image's bytes, as push_to_hub writes them)
    cs = datasets.Dataset.from_dict(
        {"id": [0, 1], "image_1": b([pngs[0], pngs[2]]), "image_2": b([pngs[1], pngs[3]]), "caption_1": caps[0:2],
         "caption_2": caps[2:4]}
    ).cast_column("image_1", img).cast_column("image_2", img)  # fmt: skip
    datasets.DatasetDict({"test": cs}).save_to_disk(str(src / "colorswap"))
    bv = datasets.Dataset.from_dict(
        {"image": b(pngs[4:7]), "caption": caps[4:7], "negative_caption": caps[7:10], "negative_image": b(pngs[7:10]),
         "type": ["replace", "swap", "add"], "subtype": ["obj", "att", "rel"]}
    ).cast_column("image", img).cast_column("negative_image", img)  # fmt: skip
    (src / "bivlc" / "data").mkdir(parents=True)
    bv.to_parquet(str(src / "bivlc" / "data" / "test-00000-of-00001.parquet"))
    exported = {}
    for name, source in [("colorswap", src / "colorswap"), ("bivlc", src / "bivlc")]:
        exported[name] = str(base / f"{name}_images")
        built[name] = get(name).build(str(source), str(out / f"{name}.parquet"), RowErrors(), images_out=exported[name])
    store = base / "store"
    for image_root, names in [(root, [n for n in built if n not in exported])] + [
        (p, [n]) for n, p in exported.items()
    ]:
        args = [
            "extract",
            "--store",
            str(store),
            "--model",
            "flowclip-tiny-clip",
            "--pretrained",
            "none",
            "--image-root",
            str(image_root),
        ]
        args += ["--workers", "0", "--quiet", "--on-error", "fail"]
        args += sum([["--manifest", str(out / f"{n}.parquet")] for n in names], [])
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 0, r.output
    return {"base": base, "out": out, "built": built, "store": str(store), "exported": exported}


def test_every_converter_reads_its_official_layout(field):
    b = field["built"]
    counts = {n: r.records for n, r in b.items()}
    assert counts == {"winoground": 4, "eqben": 3, "mmvp-vlm": 3, "spec-i2t": 2, "spec-t2i": 2, "imagecode": 3,
                      "cola-multiobj": 3, "colorswap": 2, "bivlc": 3}  # fmt: skip
    assert b["eqben"].counts == {"eqbenag": 1, "eqbenyoucook2": 1, "eqbenkubric_loc": 1}
    assert "left out" in b["eqben"].notes[0]
    m = Manifest.read(field["out"] / "mmvp-vlm.parquet").table.to_pylist()
    assert m[0]["captions"][0].startswith("a photo of ") and m[0]["images"] == [
        "MLLM_VLM Images/Orientation/1.jpg", "MLLM_VLM Images/Orientation/2.jpg"]  # fmt: skip
    ic = Manifest.read(field["out"] / "imagecode.parquet").table.to_pylist()
    assert ic[0]["caption"] == ic[0]["caption"].strip() and [r["split"] for r in ic] == ["static", "video", "video"]
    wino = Manifest.read(field["out"] / "winoground.parquet").table.to_pylist()
    assert wino[1]["secondary_tag"] == ["Symbolic"] and wino[0]["secondary_tag"] == []
    for name in ("colorswap", "bivlc"):  # the embedded images written whole, bytes unchanged
        files = sorted(os.listdir(field["exported"][name]))
        assert len(files) == 2 * counts[name] and not any(".tmp-" in f for f in os.listdir(field["base"]))


def test_images_out_must_be_new_and_is_required_for_embedded_images(field, tmp_path):
    src = str(field["base"] / "src" / "colorswap")
    with pytest.raises(ManifestError, match="images_out"):
        get("colorswap").build(src, str(tmp_path / "c.parquet"), RowErrors())
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "keep.txt").write_text("x")
    with pytest.raises(ManifestError, match="new folder"):
        get("colorswap").build(src, str(tmp_path / "c.parquet"), RowErrors(), images_out=str(tmp_path / "mine"))
    assert os.listdir(tmp_path / "mine") == ["keep.txt"] and not (tmp_path / "c.parquet").exists()


def scorers(dim: int, tmp_path) -> list[Scorer]:
    (tmp_path / "bilinear.py").write_text(doc_file("plugins.md", "bilinear", "bilinear.py"))
    fc.load_plugin(str(tmp_path / "bilinear.py"))
    torch.manual_seed(0)
    out = []
    for kind in available_kinds():
        head = build_head(kind, dim)
        for p in head.parameters():  # away from zero initialisations, so every term counts
            p.data.add_(0.05 * torch.randn_like(p))
        out.append(Scorer(kind, kind, head.eval(), "test"))
    assert "bilinear" in [s.method for s in out]
    return out


def test_every_benchmark_scores_under_every_head_and_a_plugin(field, tmp_path):
    fs = FeatureStore(field["store"])
    heads = scorers(fs.meta["dim"], tmp_path)
    for name in field["built"]:
        m = Manifest.read(field["out"] / f"{name}.parquet")
        task, sc = scoring_of(m)
        if sc.task == "candidates":
            continue  # SPEC image-to-text: the candidates engine, tested with the paper's benchmarks
        mats, _, ikeys = score_matrices(fs, m, heads, "cpu")
        for s in heads:
            assert np.isfinite(mats[s.run][~np.isnan(mats[s.run])]).all(), (name, s.run)
    # ImageCoDe's sets share their ten images: the same pair gives the same bits in two records
    ic = Manifest.read(field["out"] / "imagecode.parquet")
    mats, _, ikeys = score_matrices(fs, ic, heads, "cpu")
    assert ikeys[1] == ikeys[2]
    cap = ic.table.column("caption").to_pylist()
    assert cap[1] != cap[2]  # (different captions; the image column below is the same image's own scores)


def test_a_group_listing_one_image_twice_ties_exactly(field, tmp_path):
    import pyarrow as pa

    from flowclip_cache.manifest import write_manifest

    fs = FeatureStore(field["store"])
    rows = Manifest.read(field["out"] / "winoground.parquet").table.to_pylist()
    for r in rows:  # the same image twice, the same caption twice: every comparison an exact tie
        r["images"], r["captions"] = [r["images"][0]] * 2, [r["captions"][0]] * 2
    write_manifest(tmp_path / "dup.parquet", pa.Table.from_pylist(rows), "groups", {"benchmark": "winoground"})
    mats, _, _ = score_matrices(fs, Manifest.read(tmp_path / "dup.parquet"), scorers(fs.meta["dim"], tmp_path), "cpu",
                                str(field["base"] / "images"))  # fmt: skip
    for run, mat in mats.items():
        assert (mat == mat[:, :1, :1]).all(), run  # all four cells one value, bit for bit


def test_score_writes_group_and_image_choice_tables(field, tmp_path):
    out = tmp_path / "scored"
    names = [n for n in field["built"] if n not in ("colorswap", "bivlc")]
    args = ["score", "--store", field["store"], "--scorer", "clip", "--out", str(out), "--bootstrap", "0"]
    args += ["--image-root", str(field["base"] / "images")]
    args += sum([["--manifests", str(field["out"] / f"{n}.parquet")] for n in names], [])
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    md = (out / "results.md").read_text()
    assert "## Group tasks" in md and "mmvp-vlm" in md and "image " in md
    assert "### Test-time matching (not the official metric)" in md  #: beside, never among them
    res = json.loads((out / "results.json").read_text())["results"]["real|clip"]
    assert res["mmvp-vlm"]["headline_metric"] == "image" and set(res["winoground"]["metrics"]) == {
        "text",
        "image",
        "group",
    }
    assert 0 <= res["winoground"]["test_time_matching"]["group_match"] <= 1
    assert "recall" in res["imagecode"] and set(res["imagecode"]["by_split"]) == {"static", "video"}
    for png in ("groups_winoground.png", "groups_mmvp-vlm.png", "margins_imagecode.png", "margins_spec-t2i.png"):
        assert (out / png).stat().st_size > 0, png
    shutil.rmtree(out)


def test_a_suite_scores_its_members_and_names_the_absent_ones(field, tmp_path):
    out = tmp_path / "suite"
    r = CliRunner().invoke(cli, ["score", "--store", field["store"], "--scorer", "clip", "--out", str(out),
                                 "--image-root", str(field["base"] / "images"), "--bootstrap", "0", "--no-figures",
                                 "--suite", "vl-compo", "--manifests", str(field["out"])])  # fmt: skip
    assert r.exit_code == 0, r.output
    summary = json.loads((out / "results.json").read_text())
    su = summary["suite"]
    assert su["absent"]["svo-probes"] == "no manifest among those given"  # (every vl-compo member has a converter)
    assert su["absent"]["aro-vg-relation"] == "no manifest among those given"
    # colorswap and bivlc were extracted from their own image folders: under this image root, no features
    assert su["absent"]["colorswap"].startswith("no features in the store")
    assert "spec-i2t" not in summary["results"]["real|clip"]  # not a vl-compo member: not scored
    row = su["table"]["real|clip"]
    res = summary["results"]["real|clip"]
    assert row["winoground"]["value"] == res["winoground"]["metrics"]["group"]["score"]
    assert row["mmvp_vlm"]["value"] == res["mmvp-vlm"]["metrics"]["group"]["score"]  # vl_compo's, not the official
    assert row["aro"]["value"] is None and row["aro"]["missing"] == ["aro-vg-relation", "aro-vg-attribution",
                                                                     "aro-coco-order", "aro-flickr-order"]  # fmt: skip
    present = ["eqben", "imagecode", "mmvp_vlm", "winoground"]
    assert row["mean"]["members"] == present
    assert row["mean"]["value"] == pytest.approx(np.mean([row[c]["value"] for c in present]), abs=1e-15)
    md = (out / "results.md").read_text()
    assert "## Suite vl-compo" in md and "- svo-probes: no manifest among those given" in md
    # each member's breakdown beside the headline: EqBen per subset and metric, MMVP per category
    eq = res["eqben"]["by_subset"]["eqbenag group"] * 100
    assert f"| eqben | subset=eqbenag group | {eq:.2f} |" in md
    assert "| mmvp-vlm | category=Orientation and Direction image |" in md and "| winoground | text |" in md


def test_explain_shows_group_images_and_image_choice_views(field, tmp_path):
    """Token maps for the new kinds: each image of a group with both captions, and an
    image-choice caption on its gold image and on the image chosen (a one-caption view: no
    sensitivity). The tiny CLIP's frozen scorer has no token maps: the views and their
    scores are what is checked here, and the figures and page are written."""
    from flowclip_cache.scoring.explain import run_explain

    fs = FeatureStore(field["store"])
    manifests = [str(field["out"] / "winoground.parquet"), str(field["out"] / "imagecode.parquet")]
    data = run_explain(fs, manifests, ["clip"], str(tmp_path / "ex"), records="all", limit=0,
                       image_root=str(field["base"] / "images"), log=lambda *a: None)  # fmt: skip
    ids = [r["record_id"] for r in data["records"]]
    assert sum(i.endswith("#image0") for i in ids) == 4 and sum(i.endswith("#image1") for i in ids) == 4
    views = [r for r in data["records"] if r["benchmark"] == "imagecode"]
    assert {r["record_id"].split("#")[1] for r in views} <= {"gold", "chosen"} and len(views) >= 3
    mats, cols, _ = score_matrices(fs, Manifest.read(manifests[1]), [heads_by_kind(fs, tmp_path)["clip"]], "cpu")
    for r in views:
        assert len(r["captions"]) == 1 and r["gold"] == 0
        row = list(cols["record_id"]).index(r["record_id"].split("#")[0])
        col, g = mats["clip"][row, :, 0], cols["gold"][row]
        assert r["margins"]["clip"] == pytest.approx(col[g] - max(np.delete(col, g)), abs=1e-6)
    assert (tmp_path / "ex" / "explorer.html").exists() and (tmp_path / "ex" / "grid.png").exists()


def heads_by_kind(fs, tmp_path) -> dict:
    return {s.method: s for s in scorers(fs.meta["dim"], tmp_path)}


def test_token_maps_of_group_and_image_choice_views_under_every_token_head(field, tmp_path):
    from flowclip_cache.scoring.explain import explain_record, matrix_views, token_labels
    from flowclip_cache.scoring.explain_figures import record_figure

    fs = FeatureStore(field["store"])
    heads = list(heads_by_kind(fs, tmp_path).values())
    token_heads = [s for s in heads if hasattr(s.head, "token_evidence")]
    assert len(token_heads) >= 3
    for name in ("winoground", "imagecode"):
        m = Manifest.read(field["out"] / f"{name}.parquet")
        _, sc = scoring_of(m)
        views = matrix_views(fs, m, name, sc, heads, "all", None, str(field["base"] / "images"), "cpu")
        for rec in views[:2]:
            labels = token_labels(fs, rec["captions"])
            maps = explain_record(fs, rec, token_heads, labels, "cpu")
            for run, mp in maps.items():
                assert len(mp["captions"]) == len(rec["captions"])
                if name == "imagecode":  # one caption: no foil, no sensitivity
                    assert mp["foil"] is None and mp["sensitivity"] is None and mp["top_patches"] == []
                else:
                    assert mp["foil"] == 1 - rec["gold"] and len(mp["sensitivity"]) == fs.meta["num_patches"]
            rec["maps"], rec["margins"] = maps, {s.run: 0.0 for s in heads}
            record_figure(rec, None, int(round(fs.meta["num_patches"] ** 0.5)), str(tmp_path / f"{name}.png"))
            assert (tmp_path / f"{name}.png").stat().st_size > 0


def test_a_study_takes_a_suite_and_refuses_an_unknown_one_before_training(field, tmp_path):
    from flowclip_cache.config import build
    from flowclip_cache.errors import FlowclipError
    from flowclip_cache.studies.ablation import AblationConfig, run

    data = {"kind": "ablation", "out": str(tmp_path / "study"), "store": field["store"], "train": "none.parquet"}
    data.update(eval=[str(field["out"])], seeds=[0], heads={"g": {"head": "global"}}, suite="vl-compo")
    assert build(AblationConfig, data, "test").suite == "vl-compo"
    with pytest.raises(FlowclipError, match="no such suite"):
        run(build(AblationConfig, {**data, "suite": "vl_compo"}, "test"), False, 1, log=lambda *a: None)
    assert not (tmp_path / "study" / "runs").exists()


def test_paired_comparisons_of_the_new_kinds(field, tmp_path):
    """Decision changes and the bootstrap's input: records of one ImageCoDe set (and of one
    group) resample together, clustered by their first image; changes count the headline."""
    from flowclip_cache.scoring.matrix_tasks import score_matrix_task
    from flowclip_cache.scoring.stats import paired_bootstrap

    fs = FeatureStore(field["store"])
    heads = heads_by_kind(fs, tmp_path)
    two = [heads["clip"], heads["flow"]]
    images: dict = {}
    boot = []
    for name in ("imagecode", "winoground"):
        m = Manifest.read(field["out"] / f"{name}.parquet")
        _, sc = scoring_of(m)
        results: dict = {}
        rows, changes, tasks = score_matrix_task(fs, m, name, sc, two, "cpu", None, 2048, results, images)
        boot += tasks
        right = {s.run: np.array([r["correct"] for r in rows if r["scorer"] == s.run]) for s in two}
        ch = changes["flow vs clip"]
        assert ch["repairs"] == int((right["flow"] & ~right["clip"]).sum())
        assert ch["regressions"] == int((right["clip"] & ~right["flow"]).sum())
        if name == "imagecode":
            idx = tasks[0]["image_index"]
            assert idx[1] == idx[2] != idx[0]  # the two descriptions of one set: one cluster
        else:
            assert results[("real", "flow")][name]["score"] == right["flow"].mean()  # group, the headline
    out = paired_bootstrap(boot, {"clip": ["clip"], "flow": ["flow"]}, [("clip", "flow")], len(images), 200, 0)
    assert set(out) == {"imagecode", "winoground"}


def test_ones_own_group_and_image_choice_sets_declare_their_scoring():
    from flowclip_cache.datasets.base import Scoring
    from flowclip_cache.errors import FlowclipError

    sc = Scoring.declared({"task": "groups", "tie_rule": "second_image", "headline_metric": "image"}, "mine")
    assert (sc.task, sc.tie_rule, sc.headline_metric) == ("groups", "second_image", "image")
    assert Scoring.declared({"task": "image_candidates", "tie_rule": "first"}, "mine").tie_rule == "first"
    for bad in ({"task": "candidates", "tie_rule": "second_image"}, {"task": "groups", "tie_rule": "first"},
                {"task": "groups", "headline_metric": "both"}):  # fmt: skip
        with pytest.raises(FlowclipError):
            Scoring.declared(bad, "mine")


WINO = {m: {"score": v} for m, v in zip(("text", "image", "group"), (0.3, 0.2, 0.1))}


def test_vl_compo_columns_are_read_as_its_table_derives_them():
    """What's Up = the mean of six parts (not of four benchmark scores), CREPE = the mean
    over foil types (not the pooled R@1), Winoground = group; by hand."""
    from flowclip_cache.scoring.suites import suite_table

    per = {
        "whatsup-controlled-a": {"score": 0.5},
        "whatsup-controlled-b": {"score": 0.7},
        "whatsup-coco-spatial": {"score": 0.4, "by_subset": {"one": 0.6, "two": 0.2}},
        "whatsup-gqa-spatial": {"score": 0.6, "by_subset": {"one": 0.4, "two": 0.8}},
        "crepe-productivity": {"score": 0.9, "by_foil_type": {"atom": 0.3, "swap": 0.6, "negate": 0.9}},
        "winoground": {"score": 0.1, "metrics": WINO},
    }  # fmt: skip
    row = suite_table("vl-compo", {"real|clip": per}, {})["real|clip"]
    assert row["whatsup"]["value"] == pytest.approx((0.5 + 0.7 + 0.6 + 0.2 + 0.4 + 0.8) / 6, abs=1e-15)
    assert row["crepe"]["value"] == pytest.approx(0.6, abs=1e-15)
    assert row["winoground"]["value"] == 0.1 and row["aro"]["value"] is None
    assert row["mean"]["members"] == ["crepe", "whatsup", "winoground"]
    assert row["mean"]["value"] == pytest.approx((0.6 + 3.2 / 6 + 0.1) / 3, abs=1e-15)
    # a member resting on part of its records marks its column and the mean
    per["winoground"]["partial"] = "2 records left out"
    row = suite_table("vl-compo", {"real|clip": per}, {})["real|clip"]
    assert row["winoground"]["partial"] == ["winoground"] and row["mean"]["partial"] == ["winoground"]
    assert row["crepe"]["partial"] == []


def test_a_group_whose_image_failed_is_left_out_and_its_cells_are_marked(field, tmp_path):
    import pyarrow as pa

    from flowclip_cache.manifest import write_manifest

    rows = Manifest.read(field["out"] / "winoground.parquet").table.to_pylist()
    rows[1]["images"] = [rows[1]["images"][0], "missing.png"]  # a Relation record with a Symbolic tag
    write_manifest(tmp_path / "w.parquet", pa.Table.from_pylist(rows), "groups", {"benchmark": "winoground"})
    root = str(field["base"] / "images")
    args = [
        "extract",
        "--store",
        str(tmp_path / "st"),
        "--model",
        "flowclip-tiny-clip",
        "--pretrained",
        "none",
        "--image-root",
        root,
    ]
    r = CliRunner().invoke(cli, [*args, "--manifest", str(tmp_path / "w.parquet"), "--workers", "0", "--quiet",
                                 "--on-error", "skip"])  # fmt: skip
    assert r.exit_code == 0, r.output
    out = tmp_path / "res"
    score = ["score", "--store", str(tmp_path / "st"), "--manifests", str(tmp_path / "w.parquet"), "--scorer", "clip"]
    r = CliRunner().invoke(cli, [*score, "--out", str(out), "--bootstrap", "0", "--no-figures"])
    assert r.exit_code == 0, r.output
    res = json.loads((out / "results.json").read_text())["results"]["real|clip"]["winoground"]
    assert res["n"] == 3 and res["partial_groups"] == {"collapsed_tag": ["Relation"], "secondary_tag": ["Symbolic"]}
    lines = (out / "results.md").read_text().splitlines()
    at = lines.index("### winoground: per collapsed_tag")
    head = [c.strip() for c in lines[at + 2].strip("|").split("|")]
    cells = dict(zip(head, (c.strip() for c in lines[at + 4].strip("|").split("|"))))
    assert all(cells[f"Relation {m}"].endswith(" *") for m in ("text", "image", "group"))
    assert not any(cells[f"{t} {m}"].endswith("*") for t in ("Object", "Both") for m in ("text", "image", "group"))
