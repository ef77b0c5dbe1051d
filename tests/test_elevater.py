"""ELEVATER's zero-shot sets (datasets/elevater.py) from a vision-datasets copy and a
toolkit checkout, both made here in ELEVATER's own layouts: an Iris index with images in a
zip (mean-per-class), a COCO index (roc_auc) and a multi-label Iris index (11point_mAP).
Images are read in place from the zip and give the bits of the same files in a folder; the
toolkit's prompts.py is read, never run; each figure `score` prints equals ELEVATER's rule
computed here from the stored features and judged by vision-evaluation's own evaluator."""

from __future__ import annotations

import contextlib
import io
import json
import os
import zipfile

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from flowclip_cache.cli import main
from flowclip_cache.manifest import Manifest

v_eval = pytest.importorskip("vision_evaluation.evaluators", reason="pip install vision-evaluation")

CANARY = "prompts-py-was-executed"
PROMPTS = f"""
import os
open({CANARY!r}, "w").close()  # never run: the reader parses literals only
caltech101_classes = ['red thing', ['blue thing', 'azure thing'], 'green thing']
caltech101_templates = ['a photo of a {{}}.', 'a {{}}.']
hatefulmemes_classes = ['meme', 'hatespeech meme']
hatefulmemes_templates = ['a {{}}.']
pascalvoc2007_classes = ['red thing', 'blue thing', 'green thing']
pascalvoc2007_templates = ['a photo of a {{}}.']
class_map = {{'caltech-101': caltech101_classes, 'hateful-memes': hatefulmemes_classes,
             'voc-2007-classification': pascalvoc2007_classes}}
template_map = {{'caltech-101': caltech101_templates, 'hateful-memes': hatefulmemes_templates,
                'voc-2007-classification': pascalvoc2007_templates}}
"""
SETS = {  # ELEVATER's task -> (hub name, metric, type, index, labelmap, test images)
    "caltech101": ("caltech-101", "mean-per-class", "classification_multiclass", "test.txt", "labels.txt", 12),
    "hateful-memes": ("hateful-memes", "roc_auc", "classification_multiclass", "test_meta.json", None, 12),
    "voc2007classification": ("voc-2007-classification", "11point_mAP", "classification_multilabel", "test_ic.txt",
                              "labels.txt", 12),
}  # fmt: skip


def make_toolkit(root) -> str:
    tk = root / "Elevater_Toolkit_IC"
    res = tk / "vision_benchmark" / "resources" / "datasets"
    res.mkdir(parents=True)
    (tk / "vision_benchmark" / "datasets").mkdir()
    (tk / "vision_benchmark" / "datasets" / "prompts.py").write_text(PROMPTS)
    entries = []
    for task, (hub, metric, kind, index, labelmap, n) in SETS.items():
        (res / f"{task}.yaml").write_text(f"DATASET:\n  DATASET: '{hub}'\n  ROOT: '../DATASET/x'\nTEST:\n"
                                          f"  METRIC: '{metric}'\n")  # fmt: skip
        entries.append({"name": hub, "type": kind, "format": "coco" if index.endswith(".json") else "iris",
                        "labelmap": labelmap, "test": {"index_path": index, "files_for_local_usage": ["test.zip"],
                                                       "num_images": n}})  # fmt: skip
    (res / "vision_datasets.json").write_text(json.dumps(entries))
    return str(tk)


def _png(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    b = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (24, 24, 3), dtype=np.uint8)).save(b, "PNG")
    return b.getvalue()


def make_copy(root, task: str, rng) -> tuple[str, list]:
    """A vision-datasets copy of one set: 12 images in test.zip, the folder `plain/` the same
    files; returns (the copy's folder, each image's labels)."""
    hub, metric, kind, index, labelmap, n = SETS[task]
    src = root / task
    (src / "plain" / "img").mkdir(parents=True)
    labels = [[int(rng.integers(0, 2 if task == "hateful-memes" else 3))] for _ in range(n)]
    if kind.endswith("multilabel"):
        labels = [sorted({int(x) for x in rng.integers(0, 3, 2)}) for _ in range(n)]
    with zipfile.ZipFile(src / "test.zip", "w") as z:
        for i in range(n):
            z.writestr(f"img/{i:03d}.png", _png(i))
            (src / "plain" / "img" / f"{i:03d}.png").write_bytes(_png(i))
    if index.endswith(".json"):
        coco = {"images": [{"id": i + 1, "zip_file": "test.zip", "file_name": f"img/{i:03d}.png"} for i in range(n)],
                "categories": [{"id": 7, "name": "meme"}, {"id": 9, "name": "hatespeech meme"}],
                "annotations": [{"id": i, "image_id": i + 1, "category_id": (7, 9)[ls[0]]}
                                for i, ls in enumerate(labels)]}  # fmt: skip
        (src / index).write_text(json.dumps(coco))
    else:
        lines = [f"test.zip@img/{i:03d}.png {','.join(map(str, ls))}" for i, ls in enumerate(labels)]
        (src / index).write_text("\n".join(lines) + "\n")
        (src / labelmap).write_text("r\nb\ng\n")
    return str(src), labels


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def elevater(tmp_path_factory):
    root = tmp_path_factory.mktemp("elevater")
    tk = make_toolkit(root)
    rng = np.random.default_rng(0)
    copies = {t: make_copy(root, t, rng) for t in SETS}
    for task, (src, _) in copies.items():
        r = cli("manifest", "build", "elevater", "--source", src, "--out", root / f"{task}.parquet",
                "--option", f"task={task}", "--option", f"toolkit={tk}")  # fmt: skip
        assert r.exit_code == 0, r.output
        r = cli("extract", "--store", root / "st", "--model", "flowclip-tiny-clip", "--pretrained", "synthetic",
                "--manifest", root / f"{task}.parquet", "--image-root", src, "--quiet")  # fmt: skip
        assert r.exit_code == 0, r.output
    return root, tk, copies


def test_manifests_follow_the_toolkit_and_the_copy(elevater):
    root, tk, copies = elevater
    m = Manifest.read(root / "caltech101.parquet")
    assert m.meta["classes"] == ["red thing", "blue thing", "green thing"]  # a list entry: its first name
    assert m.meta["prompts"][1] == ["a photo of a blue thing.", "a blue thing."]
    assert m.meta["metric"] == "mean-per-class"
    assert m.table.column("image").to_pylist()[:2] == ["test.zip/img/000.png", "test.zip/img/001.png"]
    assert m.table.column("label").to_pylist() == [ls[0] for ls in copies["caltech101"][1]]
    coco = Manifest.read(root / "hateful-memes.parquet")  # categories 7, 9 -> positions 0, 1
    assert coco.table.column("label").to_pylist() == [ls[0] for ls in copies["hateful-memes"][1]]
    voc = Manifest.read(root / "voc2007classification.parquet")
    assert voc.meta["multilabel"] and voc.table.column("labels").to_pylist() == copies["voc2007classification"][1]
    assert not os.path.exists(CANARY) and not os.path.exists(os.path.join(tk, CANARY))


def test_images_in_the_zip_are_the_folders_bits(elevater, tmp_path):
    root, _, copies = elevater
    from flowclip_cache.store import FeatureStore

    src = copies["caltech101"][0]
    m = Manifest.read(root / "caltech101.parquet")
    import pyarrow as pa

    from flowclip_cache.manifest import write_manifest

    rows = [{"image": p.removeprefix("test.zip/"), "label": lab} for p, lab in
            zip(m.table.column("image").to_pylist(), m.table.column("label").to_pylist())]  # fmt: skip
    meta = {k: m.meta[k] for k in ("benchmark", "dataset", "classes", "templates", "prompts", "metric")}
    write_manifest(tmp_path / "plain.parquet", pa.Table.from_pylist(rows), "classification", meta)
    r = cli("extract", "--store", tmp_path / "st", "--model", "flowclip-tiny-clip", "--pretrained", "synthetic",
            "--manifest", tmp_path / "plain.parquet", "--image-root", os.path.join(src, "plain"),
            "--quiet")  # fmt: skip
    assert r.exit_code == 0, r.output
    a, b = FeatureStore(str(root / "st")), FeatureStore(str(tmp_path / "st"))
    keys = sorted({k for roots in b.path_index().values() for k in roots.values()})
    assert len(keys) == 12
    fa, fb = a.load_images(keys), b.load_images(keys)  # the zip's members keyed and encoded as the files are
    assert np.array_equal(fa.global_, fb.global_) and np.array_equal(fa.patches, fb.patches)


def _elevater_by_hand(store, m, root):
    """ELEVATER's clip_zeroshot_evaluator on the stored features: F.normalize(image), class
    weights the renormalised mean of normalised template embeddings, softmax(100 * logits)."""
    from flowclip_cache.hashing import caption_key
    from flowclip_cache.store.manifest_keys import image_keys

    img = torch.from_numpy(store.load_images(image_keys(store, m, root)).global_.astype(np.float32))
    img = torch.nn.functional.normalize(img)
    weights = []
    for prompts in m.meta["prompts"]:
        t = torch.from_numpy(store.load_captions([caption_key(p) for p in prompts]).global_.astype(np.float32))
        t = t / t.norm(dim=-1, keepdim=True)
        c = t.mean(0)
        weights.append(c / c.norm())
    return (100.0 * img @ torch.stack(weights, 1)).softmax(dim=-1).numpy()


def test_each_figure_is_elevaters_rule_judged_by_vision_evaluation(elevater, tmp_path):
    root, _, copies = elevater
    from flowclip_cache.api import read_results
    from flowclip_cache.store import FeatureStore

    store = FeatureStore(str(root / "st"))
    evaluators = {"mean-per-class": v_eval.BalancedAccuracyScoreEvaluator, "roc_auc": v_eval.RocAucEvaluator,
                  "11point_mAP": lambda: v_eval.MeanAveragePrecisionNPointsEvaluator(11)}  # fmt: skip
    for task in SETS:  # each copy its own image root: one score each
        r = cli("score", "--store", root / "st", "--manifests", root / f"{task}.parquet", "--image-root",
                copies[task][0], "--scorer", "clip", "--bootstrap", "0", "--quiet",
                "--out", tmp_path / task)  # fmt: skip
        assert r.exit_code == 0, r.output
        res = read_results(str(tmp_path / task))
        m = Manifest.read(root / f"{task}.parquet")
        probs = _elevater_by_hand(store, m, copies[task][0])
        labels = copies[task][1]
        if m.meta["multilabel"]:
            targets = np.zeros(probs.shape, int)
            for i, ls in enumerate(labels):
                targets[i, ls] = 1
        else:
            targets = np.array([ls[0] for ls in labels])
        ev = evaluators[m.meta["metric"]]()
        ev.add_predictions(probs, targets)
        report = ev.get_report()
        want = report["roc_auc"] if m.meta["metric"] == "roc_auc" else report[ev._get_id()]
        got = res.result(f"elevater-{task}", "clip")
        assert got["metric"] == m.meta["metric"] and got["score"] == pytest.approx(want, abs=1e-6), task
        assert ("top1" in got) != m.meta["multilabel"]  # no top-k for several labels an image


def test_bad_copies_and_toolkits_are_refused(elevater, tmp_path):
    root, tk, copies = elevater
    src = copies["caltech101"][0]
    base = ["manifest", "build", "elevater", "--source", src, "--out", tmp_path / "x.parquet"]
    r = cli(*base, "--option", "task=caltech101")
    assert r.exit_code == 2 and "toolkit" in r.output
    r = cli(*base, "--option", "task=sun397", "--option", f"toolkit={tk}")
    assert r.exit_code == 2 and "not one of ELEVATER's 21" in r.output
    caltech = [*base, "--option", "task=caltech101", "--option", f"toolkit={tk}"]

    def refused(*words):
        r = cli(*caltech)
        assert r.exit_code == 2 and all(w in r.output for w in words), r.output

    index = os.path.join(src, "test.txt")
    whole = open(index).read()
    with edited(index, "\n".join(whole.splitlines()[:5]) + "\n"):  # a partial copy
        refused("partial copy", "12")
        r = cli(*caltech, "--option", "allow_partial=yes")
        assert r.exit_code == 0 and Manifest.read(tmp_path / "x.parquet").meta["partial"] == "5 of 12 test images"
        os.remove(tmp_path / "x.parquet")
    first = whole.splitlines()[0]
    with edited(index, whole.replace(first, first.rsplit(" ", 1)[0] + " 7", 1)):  # a class out of range
        refused("test.txt line", "below 3")
    with edited(index, whole.replace("img/003.png", "img/999.png")):
        refused("img/999.png")
    with edited(index, whole.replace("test.zip@img/003.png", "../caltech101/test.zip@img/003.png")):
        refused("not a path inside the set's folder")
    assert not os.path.exists(tmp_path / "x.parquet")
    listing = os.path.join(tk, "vision_benchmark", "resources", "datasets", "vision_datasets.json")
    entries = open(listing).read()
    with edited(listing, entries.replace('"index_path": "test.txt"', '"index_path": "../../secret.txt"')):
        refused("not a file name inside the set's folder")
    prompts = os.path.join(tk, "vision_benchmark", "datasets", "prompts.py")
    text = open(prompts).read()
    with edited(prompts, text.replace("'caltech-101': caltech101_classes", "'caltech-101': list(range(3))")):
        refused("not a literal list")


@contextlib.contextmanager
def edited(path: str, text: str):
    """The file holds `text` inside the block, its own content again after it."""
    before = open(path).read()
    open(path, "w").write(text)
    try:
        yield
    finally:
        open(path, "w").write(before)


def test_zip_members_are_bounded_and_checked(tmp_path):
    """A member over the limit, absent, or whose bytes fail their CRC: refused by name."""
    from flowclip_cache.shards import read_member

    path = tmp_path / "a.zip"
    with zipfile.ZipFile(path, "w") as z:  # stored, so a byte can be flipped in place
        z.writestr("ok.png", _png(1))
        z.writestr("big.bin", b"x" * 5000)
    assert read_member(str(path), "ok.png", 10_000) == _png(1)
    with pytest.raises(ValueError, match="big.bin.*over"):
        read_member(str(path), "big.bin", 1000)
    with pytest.raises(ValueError, match="no member 'nope.png'"):
        read_member(str(path), "nope.png", 1000)
    raw = bytearray(path.read_bytes())
    at = raw.index(_png(1)) + 40  # inside ok.png's stored bytes
    raw[at] ^= 0xFF
    damaged = tmp_path / "damaged.zip"
    damaged.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="ok.png.*damaged"):
        read_member(str(damaged), "ok.png", 10_000)


def test_a_pairwise_heads_figure_is_the_softmax_of_100_times_its_mean_prompt_score(elevater):
    """A Flow-CLIP head (random weights moved off zero) on the 11-point mAP set (a figure the
    softmax's temperature moves): its class score
    is the mean over the class's prompts of its pair scores; ELEVATER's probabilities are
    softmax(100 x that); vision-evaluation judges them."""
    from flowclip_cache.heads import build_head
    from flowclip_cache.heads.fixed_shapes import all_pair_scores
    from flowclip_cache.scoring.engines import score_classification
    from flowclip_cache.scoring.scorers import Scorer
    from flowclip_cache.store import FeatureStore
    from flowclip_cache.store.banks import FeatureBank
    from flowclip_cache.store.manifest_keys import image_keys

    root, _, copies = elevater
    store, src = FeatureStore(str(root / "st")), copies["voc2007classification"][0]
    m = Manifest.read(root / "voc2007classification.parquet")
    torch.manual_seed(0)
    head = build_head("flow", store.encoder_config["model_cfg"]["embed_dim"]).eval()
    with torch.no_grad():
        for p in head.parameters():
            p.add_(0.05 * torch.randn_like(p))
    got = score_classification(store, m, Scorer("flow", "flow", head, "x"), "cpu", src)
    keys = image_keys(store, m, src)
    prompts = m.meta["prompts"]
    texts = [p for ps in prompts for p in ps]
    bank = FeatureBank.load(store, sorted(set(keys)), sorted(set(texts)), True, "cpu")
    row = {k: i for i, k in enumerate(sorted(set(keys)))}
    col = {t: i for i, t in enumerate(sorted(set(texts)))}
    every = bank.features(torch.arange(len(row)), torch.arange(len(col)), True)
    with torch.no_grad():
        pair = all_pair_scores(head, *every).numpy()
    per_class = np.stack([pair[:, [col[t] for t in ps]].mean(1) for ps in prompts], 1)[[row[k] for k in keys]]
    probs = torch.from_numpy((100.0 * per_class).astype(np.float32)).softmax(-1).numpy()
    targets = np.zeros(probs.shape, int)
    for i, ls in enumerate(copies["voc2007classification"][1]):
        targets[i, ls] = 1
    ev = v_eval.MeanAveragePrecisionNPointsEvaluator(11)
    ev.add_predictions(probs, targets)
    assert got["prompt_ensemble"] == "score" and got["score"] == pytest.approx(ev.get_report()[ev._get_id()], abs=1e-9)
