"""Converters against the real files where we have them, hand-written fixtures in the
official formats elsewhere; the catalogue against the registry."""

import hashlib
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner
from conftest import SHARED_BENCHMARKS, needs_shared
from PIL import Image

from flowclip_cache.catalogue import check_counts, load_catalogue
from flowclip_cache.cli import main
from flowclip_cache.datasets import all_benchmarks, get
from flowclip_cache.datasets.base import RowErrors
from flowclip_cache.errors import FlowclipError, ManifestError
from flowclip_cache.manifest import Manifest, check_manifest, write_manifest
from flowclip_cache.negatives import build_training


def build(name, source, out, on_error="fail", **opt):
    report = get(name).build(str(source), str(out), RowErrors(on_error), **opt)
    return report, Manifest.read(out)


@needs_shared("sugarcrepe")
def test_sugarcrepe_real_files(tmp_path):
    report, m = build("sugarcrepe", os.path.join(SHARED_BENCHMARKS, "sugarcrepe"), tmp_path / "sc.parquet")
    assert report.counts == {
        "add_att": 692,
        "add_obj": 2062,
        "replace_att": 788,
        "replace_obj": 1652,
        "replace_rel": 1406,
        "swap_att": 666,
        "swap_obj": 245,
    }
    assert report.records == 7511 == len(m) and report.images == 1560
    ids = set(m.table.column("record_id").to_pylist())
    assert "swap_obj/107" in ids and "swap_obj/108" not in ids and "swap_obj/109" in ids
    assert all("!=" not in line for line in check_counts("sugarcrepe", report))


@needs_shared("abc6k")
def test_abc6k_real_file(tmp_path):
    lines = open(os.path.join(SHARED_BENCHMARKS, "abc6k", "ABC-6K.txt"), encoding="utf-8").read().split("\n")
    # a COCO caption file, written by hand in COCO's format, that knows the first 10 originals
    coco = {
        "images": [{"id": 100 + i, "file_name": f"COCO_val2014_{100 + i:012d}.jpg"} for i in range(10)],
        "annotations": [{"image_id": 100 + i, "id": i, "caption": lines[2 * i].lower() + "  "} for i in range(10)],
    }
    (tmp_path / "captions_val2014.json").write_text(json.dumps(coco))
    report, m = build(
        "abc6k",
        os.path.join(SHARED_BENCHMARKS, "abc6k"),
        tmp_path / "abc.parquet",
        coco_captions=str(tmp_path / "captions_val2014.json"),
    )
    assert report.counts["pairs_in_file"] == 3217 and report.counts["identical_in_file"] == 100
    assert report.records == 10 and report.counts["image_not_found"] == 3207
    assert len(report.skipped) == 3207 and "no COCO image has the caption" in report.skipped[0][2]
    row = m.table.to_pylist()[0]
    assert row["image"] == "val2014/COCO_val2014_000000000100.jpg" and row["captions"][0] == lines[0].strip()
    with pytest.raises(ManifestError, match="coco_captions"):
        build("abc6k", os.path.join(SHARED_BENCHMARKS, "abc6k"), tmp_path / "x.parquet")


def vg_item(i, **kw):
    item = {
        "image_path": f"{i}.jpg",
        "bbox_x": 1,
        "bbox_y": 2,
        "bbox_w": 30,
        "bbox_h": 40,
        "true_caption": f"the cat is on the mat {i}",
        "false_caption": f"the mat is on the cat {i}",
    }
    item.update(kw)
    return item


@needs_shared("aro")
def test_aro_vg_relation_excludes_the_official_list(tmp_path):
    excluded = json.load(open(os.path.join(SHARED_BENCHMARKS, "aro", "vgr_excluded_relations.json")))
    assert len(excluded) == 157
    items = [vg_item(0, relation_name="on"), vg_item(1, relation_name=excluded[0]), vg_item(2, relation_name="on")]
    (tmp_path / "visual_genome_relation.json").write_text(json.dumps(items))
    report, m = build(
        "aro-vg-relation",
        tmp_path,
        tmp_path / "vgr.parquet",
        excluded_relations=os.path.join(SHARED_BENCHMARKS, "aro", "vgr_excluded_relations.json"),
    )
    rows = m.table.to_pylist()
    assert [r["excluded"] for r in rows] == [False, True, False]
    assert rows[0]["crop"] == [1, 2, 30, 40] and rows[0]["captions"][0].startswith("the cat")


def test_aro_vg_attribution_and_bad_items(tmp_path):
    items = [
        vg_item(0, attributes=["red", "blue"]),
        vg_item(1, attributes=["red", "blue"]),
        {"image_path": "2.jpg", "true_caption": "a", "false_caption": "b", "attributes": ["x", "y"]},
    ]
    (tmp_path / "visual_genome_attribution.json").write_text(json.dumps(items))
    with pytest.raises(ManifestError, match=r"visual_genome_attribution.json: item 2: missing or non-numeric bbox"):
        build("aro-vg-attribution", tmp_path, tmp_path / "vga.parquet")
    report, m = build("aro-vg-attribution", tmp_path, tmp_path / "vga.parquet", on_error="skip")
    assert report.records == 2 and len(report.skipped) == 1
    assert set(m.table.column("attribute_pair").to_pylist()) == {"red_blue"}


def fake_tagger(text):
    nouns = {"dog", "frisbee", "park", "man", "horse", "beach"}
    adjs = {"brown", "red", "white", "sandy"}
    return [(w, "NN" if w.strip(".").lower() in nouns else "JJ" if w.lower() in adjs else "DT") for w in text.split()]


def test_aro_coco_order_with_injected_tags(tmp_path):
    data = [
        {
            "image": "val2014/COCO_val2014_000000000001.jpg",
            "caption": [
                "A brown dog catches a red frisbee in the park.",
                "A man rides a white horse on a sandy beach.",
            ],
        }
    ]
    (tmp_path / "coco_karpathy_test.json").write_text(json.dumps(data))
    report, m = build("aro-coco-order", tmp_path, tmp_path / "o.parquet", tagger=fake_tagger)
    rows = m.table.to_pylist()
    assert report.records == 2 and all(len(r["captions"]) == 5 for r in rows)
    gold = rows[0]["captions"][0]
    assert gold == "a brown dog catches a red frisbee in the park"  # ARO's clean-up
    for foil in rows[0]["captions"][1:]:
        assert sorted(foil.split()) == sorted(gold.split())  # shuffles keep the words
    report2, m2 = build("aro-coco-order", tmp_path, tmp_path / "o2.parquet", tagger=fake_tagger)
    assert m2.table.to_pylist() == rows  # deterministic
    from flowclip_cache.datasets import _aro

    try:
        import spacy  # noqa: F401
    except ImportError:
        with pytest.raises(FlowclipError, match="python -m spacy download en_core_web_sm"):
            _aro.spacy_tagger()


def test_whatsup(tmp_path):
    (tmp_path / "coco_qa_one_obj.json").write_text(json.dumps([[42, "A dog on the left", "A dog on the right"]]))
    (tmp_path / "coco_qa_two_obj.json").write_text(
        json.dumps([[7, "a cup left of a plate", "a cup right of a plate"], [8, "x"]])
    )
    report, m = build("whatsup-coco-spatial", tmp_path, tmp_path / "w.parquet", on_error="skip")
    assert report.counts == {"one": 1, "two": 1} and len(report.skipped) == 1
    assert m.table.column("image").to_pylist() == ["val2017/000000000042.jpg", "val2017/000000000007.jpg"]
    (tmp_path / "controlled_images_dataset.json").write_text(
        json.dumps(
            [
                {
                    "image_path": "data/controlled_images/mug_left_of_plate.jpeg",
                    "caption_options": [
                        "A mug to the left of a plate",
                        "A mug to the right of a plate",
                        "A mug on a plate",
                        "A mug under a plate",
                    ],
                }
            ]
        )
    )
    report, m = build("whatsup-controlled-a", tmp_path, tmp_path / "a.parquet")
    assert m.table.to_pylist()[0]["preposition"] == "left" and len(m.table.to_pylist()[0]["captions"]) == 4


def test_crepe_literal_lists_only(tmp_path):
    d = tmp_path / "swap"
    d.mkdir()
    (d / "prod_vg_hard_negs_swap_complexity_4.csv").write_text(
        "image_id,caption,x,y,width,height,hard_negs\n"
        "2317,a red car near a tree,1,2,30,40,\"['a tree near a red car', 'a red tree near a car']\"\n"
        "2318,a dog,1,2,30,40,\"__import__('os').system('echo pwned')\"\n"
    )
    with pytest.raises(ManifestError, match="complexity_4.csv: line 3: unreadable row"):
        build("crepe-productivity", tmp_path, tmp_path / "c.parquet")
    report, m = build("crepe-productivity", tmp_path, tmp_path / "c.parquet", on_error="skip")
    row = m.table.to_pylist()[0]
    assert report.counts == {"swap/4": 1} and row["captions"][1] == "a tree near a red car"
    assert row["image"] == "2317.jpg" and row["complexity"] == 4 and row["foil_type"] == "swap"
    assert row["foil_complexity"] == "swap/04"


def test_pug_and_clevr(tmp_path):
    (tmp_path / "labels.csv").write_text(
        "filename,world_name,character_name,character2_name,character_texture,character2_texture,"
        "character1_pos,character2_pos\n"
        "a.png,Desert,Goldfish,Elephant,Grass,Asphalt,left,right\n"
        "b.png,Desert,Goldfish,Goldfish,Grass,Asphalt,left,right\n"
        "c.png,Desert,Goldfish,Elephant,Default,Asphalt,left,right\n"
    )
    report, m = build("pug-spar", tmp_path, tmp_path / "p.parquet")
    assert report.records == 1 and report.counts["not_assignment_pairs"] == 2
    assert m.table.to_pylist()[0]["captions"] == [
        "This is a photo of a Goldfish textured with Grass and a Elephant textured with Asphalt",
        "This is a photo of a Elephant textured with Grass and a Goldfish textured with Asphalt",
    ]
    (tmp_path / "clevr.csv").write_text("img1.png,cube,red,sphere,blue\nimg2.png,cube,red,sphere,red\n")
    report, m = build("clevr-binding", tmp_path / "clevr.csv", tmp_path / "cl.parquet")
    rows = m.table.to_pylist()
    assert rows[0]["captions"] == ["red cube and blue sphere", "blue cube and red sphere"]
    assert [r["equivalent"] for r in rows] == [False, True] and report.counts["scored"] == 1
    # the 4,449-pair pool: LABCLIP's whole two-object file, the same rows under its own name, in no mean
    (tmp_path / "pool").mkdir()
    (tmp_path / "pool" / "output_2obj.csv").write_text((tmp_path / "clevr.csv").read_text())
    report, pool = build("clevr-binding-pool", tmp_path / "pool", tmp_path / "pool.parquet")
    assert pool.table.to_pylist() == rows and report.counts["scored"] == 1
    assert pool.meta["benchmark"] == "clevr-binding-pool" and m.meta["benchmark"] == "clevr-binding"
    from flowclip_cache.datasets import get

    assert get("clevr-binding").scoring.joins and not get("clevr-binding-pool").scoring.joins


def test_retrieval_both_formats(tmp_path):
    k = {
        "images": [
            {
                "filepath": "val2014",
                "filename": "a.jpg",
                "split": "test",
                "sentences": [{"raw": "one"}, {"raw": "two"}],
            },
            {"filepath": "train2014", "filename": "b.jpg", "split": "train", "sentences": [{"raw": "x"}]},
        ]
    }
    (tmp_path / "dataset_coco.json").write_text(json.dumps(k))
    report, m = build("coco-retrieval", tmp_path, tmp_path / "r.parquet")
    assert m.kind == "retrieval" and m.table.to_pylist() == [{"image": "val2014/a.jpg", "captions": ["one", "two"]}]
    (tmp_path / "f.json").write_text(json.dumps([{"image": "x.jpg", "caption": ["c1", "c2", "c3"]}]))
    report, m = build("flickr-retrieval", tmp_path / "f.json", tmp_path / "f.parquet")
    assert report.counts["captions"] == 3


def test_cifar_binary_without_pickle(tmp_path):
    rng = np.random.default_rng(0)
    recs = [np.concatenate([[lab], rng.integers(0, 256, 3072)]).astype(np.uint8) for lab in (3, 0, 9)]
    np.concatenate(recs).tofile(tmp_path / "test_batch.bin")
    (tmp_path / "batches.meta.txt").write_text("\n".join(f"class{i}" for i in range(10)) + "\n\n")
    report, m = build("cifar10", tmp_path, tmp_path / "c10.parquet")
    assert m.kind == "classification" and m.table.column("label").to_pylist() == [3, 0, 9]
    assert m.meta["prompts"][3] == ["a photo of a class3."]
    img = np.asarray(Image.open(tmp_path / "c10.parquet.images" / "00000.png"))
    np.testing.assert_array_equal(img[..., 0], recs[0][1:1025].reshape(32, 32))  # red plane first
    recs100 = [np.concatenate([[1, 57], rng.integers(0, 256, 3072)]).astype(np.uint8)]
    np.concatenate(recs100).tofile(tmp_path / "test.bin")
    (tmp_path / "fine_label_names.txt").write_text("\n".join(f"f_{i}" for i in range(100)))
    report, m = build("cifar100", tmp_path, tmp_path / "c100.parquet", templates="a {}|art of a {}")
    assert m.table.column("label").to_pylist() == [57] and m.meta["prompts"][57] == ["a f 57", "art of a f 57"]


def test_imagenetv2_folders(tmp_path):
    for c in ("0", "1", "10"):
        (tmp_path / c).mkdir()
        Image.new("RGB", (4, 4)).save(tmp_path / c / "x.jpeg")
    report, m = build("imagenetv2", tmp_path, tmp_path / "in.parquet")
    assert m.table.to_pylist() == [
        {"image": "0/x.jpeg", "label": 0},
        {"image": "1/x.jpeg", "label": 1},
        {"image": "10/x.jpeg", "label": 10},
    ]
    assert len(m.meta["classes"]) == 1000


def test_coco_train_negclip_tsv(tmp_path):
    (tmp_path / "train_neg_clip.tsv").write_text(
        "\ttitle\tfilepath\tneg_caption\tneg_image\n"
        "0\tA cat on a mat.\tcoco/train2014/a.jpg\t['A mat on a cat .', 'A cat on a mat.']\t[1, 2]\n"
        "1\tA dog.\tcoco/train2014/b.jpg\t['A dog.']\t[3]\n"
    )
    (tmp_path / "valid_neg_clip.tsv").write_text(
        "\ttitle\tfilepath\tneg_caption\tneg_image\n0\tTwo birds.\tcoco/val2014/c.jpg\t['Two words .']\t[1]\n"
    )
    report, m = build("coco-train", tmp_path, tmp_path / "t.parquet", on_error="skip")
    rows = m.table.to_pylist()
    assert [r["split"] for r in rows] == ["train", "val"] and rows[0]["image"] == "train2014/a.jpg"
    assert rows[0]["negatives"] == ["A mat on a cat ."]  # the copy of the positive is dropped
    assert "no negative that differs" in report.skipped[0][2]


def test_malformed_files_name_file_and_line(tmp_path):
    (tmp_path / "add_att.json").write_text('{\n "0": {"filename": "a.jpg",\n "caption": "x" "y"}\n}')
    with pytest.raises(ManifestError, match=r"add_att.json: line 3, column .*malformed JSON"):
        build("sugarcrepe", tmp_path, tmp_path / "o.parquet")
    (tmp_path / "add_att.json").write_bytes(b'{"0": {"filename": "a.jpg",\n"caption": "\xff"}}')
    with pytest.raises(ManifestError, match="add_att.json: line 2: not valid UTF-8"):
        build("sugarcrepe", tmp_path, tmp_path / "o.parquet")
    (tmp_path / "add_att.json").write_text(
        json.dumps({"0": {"filename": "a.jpg", "caption": "", "negative_caption": "b"}})
    )
    with pytest.raises(ManifestError, match="add_att.json: record '0': empty or non-text 'caption'"):
        build("sugarcrepe", tmp_path, tmp_path / "o.parquet")


def test_negatives_differ_and_are_deterministic():
    rows = [
        {"image": "a.jpg", "caption": "a red car next to a blue bus on the street"},
        {"image": "b.jpg", "caption": "sky"},
    ]
    out, missing = build_training(rows, ["swap-att", "swap-obj", "shuffle-bigram"], seed=3)
    assert out == build_training(rows, ["swap-att", "swap-obj", "shuffle-bigram"], seed=3)[0]
    r = out[0]
    assert r["negative_kinds"] == ["swap-att", "swap-obj", "shuffle-bigram"]
    assert all(n != r["positive"] for n in r["negatives"])
    assert r["negatives"][0] == "a blue car next to a red bus on the street"
    from flowclip_cache.negatives import OBJECTS

    pos, neg = r["positive"].split(), r["negatives"][1].split()
    changed = [i for i, (a, b) in enumerate(zip(pos, neg)) if a != b]
    assert sorted(pos) == sorted(neg) and len(changed) == 2 and all(pos[i] in OBJECTS for i in changed)
    assert [(i, k) for i, k, _ in missing] == [(1, "swap-att"), (1, "swap-obj"), (1, "shuffle-bigram")]
    assert "attribute list" in missing[0][2] and "fewer than two bigrams" in missing[2][2]


def test_manifest_check(tmp_path):
    (tmp_path / "a.jpg").write_bytes(b"x")
    write_manifest(
        tmp_path / "m.parquet",
        pa.Table.from_pylist(
            [
                {"record_id": "1", "image": "a.jpg", "captions": ["x", "x"], "gold": 0},
                {"record_id": "2", "image": "b.jpg", "captions": ["x", "y"], "gold": 0},
            ]
        ),
        "candidates",
    )
    problems = check_manifest(Manifest.read(tmp_path / "m.parquet"), str(tmp_path))
    assert any("'b.jpg' not found" in p for p in problems)
    assert any("row 0: duplicate captions" in p for p in problems)
    r = CliRunner().invoke(main, ["manifest", "check", str(tmp_path / "m.parquet"), "--image-root", str(tmp_path)])
    assert r.exit_code == 2
    # duplicate record ids are refused on every read (extract, train, score), naming them
    write_manifest(
        tmp_path / "d.parquet",
        pa.Table.from_pylist(
            [
                {"record_id": "1", "image": "a.jpg", "captions": ["x", "y"], "gold": 0},
                {"record_id": "1", "image": "a.jpg", "captions": ["x", "z"], "gold": 1},
            ]
        ),
        "candidates",
    )
    r = CliRunner().invoke(main, ["manifest", "check", str(tmp_path / "d.parquet")])
    assert r.exit_code == 2 and "record_id values appear more than once (first: '1')" in r.output


def test_negatives_report_per_kind_and_take_word_lists(tmp_path):
    """40 captions about shapes: no swap-obj negative from the built-in nouns, and the
    report says why; the user's own word list makes them."""
    captions = [{"image": f"{i}.png", "caption": f"a red star left of a blue moon number {i}"} for i in range(40)]
    pq.write_table(pa.Table.from_pylist(captions), tmp_path / "c.parquet")
    args = [
        "negatives",
        "--in",
        str(tmp_path / "c.parquet"),
        "--out",
        str(tmp_path / "t.parquet"),
        "--kinds",
        "swap-obj,swap-att",
    ]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert "swap-obj: 0 of 40 captions got one" in r.output and "swap-att: 40 of 40" in r.output
    assert "swap-obj: 40 got none: fewer than two different words from the object list" in r.output
    (tmp_path / "nouns.txt").write_text("star moon  # my shapes\n")
    r = CliRunner().invoke(main, args + ["--objects", str(tmp_path / "nouns.txt")])
    assert r.exit_code == 0 and "swap-obj: 40 of 40 captions got one" in r.output
    neg = Manifest.read(tmp_path / "t.parquet").table.to_pylist()[0]["negatives"]
    assert "a red moon left of a blue star number 0" in neg


def test_catalogue_matches_registry():
    cat, benches = load_catalogue(), all_benchmarks()
    assert set(cat) == set(benches)
    for name, b in benches.items():
        assert callable(b.build)
        # every evaluated set is scored (stand-ins: as the benchmark each manifest stands in for)
        assert (b.scoring is None) == (b.kind in ("training", "stand-ins")), name
        entry = cat[name]
        assert (
            entry["source"]
            and entry["licence"]
            and (entry["files"] or name in ("sample", "paper-standin") or name.startswith("synthetic-"))  # generated
        )


def test_coco_train_from_karpathy_json(tmp_path):
    k = {
        "images": [
            {
                "filepath": "train2014",
                "filename": "a.jpg",
                "split": "train",
                "sentences": [{"raw": "a red car next to a blue bus"}, {"raw": "sky"}],
            },
            {
                "filepath": "val2014",
                "filename": "b.jpg",
                "split": "restval",
                "sentences": [{"raw": "a dog on a bed near a cat"}],
            },
            {
                "filepath": "val2014",
                "filename": "c.jpg",
                "split": "val",
                "sentences": [{"raw": "a man and a horse on the beach"}],
            },
            {"filepath": "val2014", "filename": "d.jpg", "split": "test", "sentences": [{"raw": "x y"}]},
        ]
    }
    (tmp_path / "dataset_coco.json").write_text(json.dumps(k))
    report, m = build("coco-train", tmp_path, tmp_path / "t.parquet")
    rows = m.table.to_pylist()
    assert [r["image"] for r in rows] == ["train2014/a.jpg", "val2014/b.jpg", "val2014/c.jpg"]
    assert [r["split"] for r in rows] == ["train", "train", "val"]
    assert report.counts["records_without_any_negative"] == 1  # "sky" has no negative
    for r in rows:
        assert r["negatives"] and all(n != r["positive"] for n in r["negatives"])
        assert len(r["negative_kinds"]) == len(r["negatives"])


def _tar(path, members, mode="w"):
    import io
    import tarfile

    with tarfile.open(path, mode) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))


def test_cc3m_100k_webdataset_shards(tmp_path):
    """FSC-CLIP's cc3m-subset-100k layout: img2dataset shards + coca_captions.tar.gz."""
    src = tmp_path / "cc3m" / "train_subset_100K"
    src.mkdir(parents=True)
    buf = __import__("io").BytesIO()
    Image.new("RGB", (8, 8), (200, 10, 10)).save(buf, "JPEG")
    jpg = buf.getvalue()
    sample = lambda k, alt: [
        (f"{k}.jpg", jpg),
        (f"{k}.txt", alt.encode()),
        (f"{k}.json", json.dumps({"key": k}).encode()),
    ]
    _tar(
        src / "00000.tar",
        sample("000000001", "alt one") + sample("000000002", "alt two") + [("000000003.txt", b"no image")],
    )
    _tar(src / "00001.tar", sample("000000004", "a man rides a horse"))
    _tar(
        src / "coca_captions.tar.gz",
        [
            ("coca_captions/000000001.txt", b"a red car next to a blue bus\n"),
            ("coca_captions/000000002.txt", b"a dog on a bed near a cat\n"),
        ],
        "w:gz",
    )
    (tmp_path / "val.txt").write_text("000000002\n000000099\n")
    out = tmp_path / "m" / "cc3m.parquet"
    out.parent.mkdir()
    report, m = build("cc3m-train", src.parent, out, on_error="skip", val_keys=str(tmp_path / "val.txt"))
    rows = m.table.to_pylist()
    name = f"cc3m-{hashlib.sha256(jpg).hexdigest()[:24]}.jpg"  # named by its content, not by the archive
    assert [(r["record_id"], r["image"], r["positive"], r["split"]) for r in rows] == [
        ("cc3m-train/000000001", name, "a red car next to a blue bus", "train"),
        ("cc3m-train/000000002", name, "a dog on a bed near a cat", "val"),
    ]
    assert all(r["negatives"] and r["positive"] not in r["negatives"] for r in rows)
    reasons = sorted(s[2] for s in report.skipped)
    assert reasons == ["no CoCa caption coca_captions/000000004.txt", "no image (jpg/jpeg/png/webp)"]
    images = tmp_path / "m" / "cc3m-100k-images"
    assert os.listdir(images) == [name] and (images / name).read_bytes() == jpg  # one image, written once
    assert report.counts["train"] == 1 and report.counts["val"] == 1
    assert any("1 val_keys are in no shard" in n for n in report.notes)
    # the alt-texts instead, into a new folder (an existing one is never written into)
    with pytest.raises(ManifestError, match="must name a new folder"):
        build("cc3m-train", src, tmp_path / "alt.parquet", caption="alt", images_out=str(images))
    report, m = build(
        "cc3m-train", src, tmp_path / "alt.parquet", on_error="skip", caption="alt", images_out=str(tmp_path / "alt")
    )
    assert [r["positive"] for r in m.table.to_pylist()] == ["a man rides a horse"]  # others have no negative
    assert report.counts["records_without_any_negative"] == 2
    with pytest.raises(ManifestError, match="no webdataset shards"):
        build("cc3m-train", tmp_path / "m", tmp_path / "x.parquet")


def test_crepe_systematicity_per_split_and_type(tmp_path):
    """Each row of a seen/unseen file gives one record per hard-negative type; a type with no
    valid negative leaves the caption alone (counted right, as the official ranking does);
    the pretraining set is required; code in a list column is refused."""
    head = "image_id,caption,x,y,width,height,valid_hard_negs_atom,valid_hard_negs_comp,valid_hard_negs_combined\n"
    (tmp_path / "syst_vg_hard_negs_seen_compounds_in_laion.csv").write_text(
        head + "11,a red car,1,2,30,40,\"['a blue car']\",\"[]\",\"['a blue car', 'a red bus']\"\n"
    )
    (tmp_path / "syst_vg_hard_negs_unseen_compounds_in_laion.csv").write_text(
        head + "12,a wet dog,0,0,5,5,\"['a dry dog']\",\"['a wet cat']\",\"__import__('os')\"\n"
    )
    with pytest.raises(ManifestError, match="train_dataset"):
        build("crepe-systematicity", tmp_path, tmp_path / "s.parquet")
    with pytest.raises(ManifestError, match="unseen_compounds_in_laion.csv: line 2: unreadable row"):
        build("crepe-systematicity", tmp_path, tmp_path / "s.parquet", train_dataset="laion")
    report, m = build("crepe-systematicity", tmp_path, tmp_path / "s.parquet", on_error="skip", train_dataset="laion")
    rows = {r["record_id"]: r for r in m.table.to_pylist()}
    assert report.counts == {"seen_compounds/atom": 1, "seen_compounds/comp": 1, "seen_compounds/combined": 1,
                             "unseen_compounds/atom": 1, "unseen_compounds/comp": 1,
                             "unseen_compounds/combined": 0}  # fmt: skip
    assert rows["seen_compounds/comp/2"]["captions"] == ["a red car"] and m.meta["without_negatives"][
        "seen_compounds/comp"] == 1  # fmt: skip
    assert rows["seen_compounds/combined/2"]["captions"] == ["a red car", "a blue car", "a red bus"]
    assert rows["unseen_compounds/atom/2"]["crop"] == [0.0, 0.0, 5.0, 5.0] and m.meta["train_dataset"] == "laion"


def test_crepe_recall_equals_the_official_argsort_on_planted_ties():
    """get_one2many_rank / get_one2many_metrics (torch.argsort, descending) on planted ties,
    up to 16 candidates and with a caption alone: R@1, 3, 5, 10 per file as flowclip counts
    them."""
    from flowclip_cache.scoring.aggregation import aggregate

    sc = get("crepe-systematicity").scoring
    rng = np.random.default_rng(7)
    n, k = 60, 16
    s = np.round(rng.normal(size=(n, k)), 0).astype(np.float32)  # integers: many ties with the gold
    sizes = rng.integers(1, k + 1, n)
    sizes[:3] = 1  # the caption alone
    for i, m in enumerate(sizes):
        s[i, m:] = np.nan
    files = [f"{sp}/{t}" for sp in ("seen_compounds", "unseen_compounds") for t in ("atom", "comp", "combined")]
    cols = {"file": [files[i % 6] for i in range(n)], "record_id": [str(i) for i in range(n)]}
    res = aggregate(sc, s, np.zeros(n, np.int64), cols)
    preds = []
    for i, m in enumerate(sizes):  # the official code, one image at a time
        logits = torch.from_numpy(s[i : i + 1, :m])
        ranking = torch.argsort(logits, descending=True)
        preds.append(int(torch.where(ranking == 0)[1][0]))
    preds = np.array(preds)
    for kk in (1, 3, 5, 10):
        for f in files:
            sel = np.array(cols["file"]) == f
            want = float(np.mean(preds[sel] < kk))
            got = res["recall_by_file"][f] if kk == 1 else res[f"recall_at{kk}_by_file"][f]
            assert got == want, (kk, f)
    assert res["score"] == pytest.approx(np.mean([np.mean(preds[np.array(cols["file"]) == f] < 1) for f in files]))


def test_crepe_crops_as_the_official_code_crops(tmp_path):
    """CsvDataset.__getitem__'s TF.crop(raw_image, y, x, height, width) on a PIL image and
    flowclip's crop give the same pixels: fractional boxes, and boxes running past the edge
    (filled black by both). A box wholly outside is refused by flowclip (BadImage), where
    the official code would score a black crop."""
    tf = pytest.importorskip("torchvision.transforms.functional")
    from flowclip_cache.extraction.images import BadImage, load_image

    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (37, 53, 3), np.uint8)).save(tmp_path / "im.png")
    raw = Image.open(tmp_path / "im.png").convert("RGB")
    for x, y, w, h in [(3, 4, 20, 10), (2.5, 3.5, 10.5, 7.25), (40, 30, 30, 20), (0, 0, 53, 37), (-5, -4, 12, 9)]:
        ours = np.asarray(load_image(str(tmp_path / "im.png"), (x, y, w, h)))
        theirs = np.asarray(tf.crop(raw, y, x, h, w))
        assert ours.shape == theirs.shape and (ours == theirs).all(), (x, y, w, h)
    with pytest.raises(BadImage):
        load_image(str(tmp_path / "im.png"), (60, 0, 5, 5))
