"""Webdataset shards as an image source (flowclip_cache/shards.py, datasets/_wds.py): a set
in CLIP_benchmark's wds layout builds a manifest whose images are read in place from the
shards, and its store equals, bit for bit, the store of the same images in a folder; a
bad shard, member, label, class-name or template file is one line naming it, exit 2,
nothing written."""

from __future__ import annotations

import gzip
import io
import os
import shutil
import tarfile

import numpy as np
import pyarrow as pa
import pytest
from click.testing import CliRunner
from conftest import assert_refused

from flowclip_cache.cli import main
from flowclip_cache.errors import FlowclipError
from flowclip_cache.manifest import Manifest, write_manifest
from flowclip_cache.shards import expand_braces, samples
from flowclip_cache.store import FeatureStore

CLASSES = ["red thing", "blue thing", "green thing"]


def _add(tf: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tf.addfile(info, io.BytesIO(data))


def write_wds(root, images: list[str], labels=None, captions=None, per_shard: int = 4, split: str = "test") -> None:
    """CLIP_benchmark's layout: <split>/{0..n-1}.tar + nshards.txt, classnames and templates."""
    os.makedirs(root / split)
    chunks = [images[i : i + per_shard] for i in range(0, len(images), per_shard)]
    for s, chunk in enumerate(chunks):
        with tarfile.open(root / split / f"{s}.tar", "w") as tf:
            for path in chunk:
                i = images.index(path)
                _add(tf, f"s{i:07d}.png", open(path, "rb").read())
                if labels is not None:
                    _add(tf, f"s{i:07d}.cls", f"{labels[i]}".encode())
                if captions is not None:
                    _add(tf, f"s{i:07d}.txt", "\n".join(captions[i]).encode())
    (root / split / "nshards.txt").write_text(f"{len(chunks)}\n")
    (root / "classnames.txt").write_text("\n".join(CLASSES) + "\n")
    (root / "zeroshot_classification_templates.txt").write_text("a photo of a {c}.\na {c}.\n")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from flowclip_cache.synthetic.sample import make_sample

    root = tmp_path_factory.mktemp("shards")
    s = make_sample(str(root / "sample"), n_images=10)
    images = sorted(os.path.join(s["image_root"], f) for f in os.listdir(s["image_root"]))
    labels = [i % 3 for i in range(len(images))]
    write_wds(root / "wds_things", images, labels=labels)
    return root, s, images, labels


def cli_run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _build(args) -> object:
    return CliRunner().invoke(main, ["manifest", "build", *map(str, args)])


def test_a_shard_set_and_a_folder_give_the_same_store(world, tmp_path):
    root, s, images, labels = world
    r = _build(["wds-classification", "--source", root / "wds_things", "--out", tmp_path / "wds.parquet"])
    assert r.exit_code == 0, r.output
    m = Manifest.read(tmp_path / "wds.parquet")
    assert m.table.column("image").to_pylist()[:5] == [f"test/0.tar/s{i:07d}.png" for i in range(4)] + [
        "test/1.tar/s0000004.png"
    ]
    assert m.table.column("label").to_pylist() == labels and m.meta["classes"] == CLASSES
    assert m.meta["prompts"][1] == ["a photo of a blue thing.", "a blue thing."] and m.meta["dataset"] == "things"
    folder_rows = [{"image": os.path.basename(p), "label": lab} for p, lab in zip(images, labels)]
    write_manifest(tmp_path / "folder.parquet", pa.Table.from_pylist(folder_rows), "classification",
                   {k: m.meta[k] for k in ("benchmark", "dataset", "classes", "templates", "prompts")})  # fmt: skip
    stores = {}
    for name, manifest, image_root in (("wds", "wds.parquet", root / "wds_things"),
                                       ("folder", "folder.parquet", s["image_root"])):  # fmt: skip
        r = CliRunner().invoke(main, ["extract", "--store", str(tmp_path / name), "--model", "flowclip-tiny-clip",
                                      "--pretrained", "synthetic", "--manifest", str(tmp_path / manifest),
                                      "--image-root", str(image_root), "--quiet"])  # fmt: skip
        assert r.exit_code == 0, r.output
        stores[name] = FeatureStore(str(tmp_path / name))
    assert not any(f.endswith(".png") for _, _, fs in os.walk(tmp_path / "wds") for f in fs)  # nothing unpacked
    a, b = stores["wds"], stores["folder"]
    assert sorted(os.listdir(a.segment_dir)) == sorted(os.listdir(b.segment_dir))  # the same units, the same keys
    keys = sorted({k for roots in a.path_index().values() for k in roots.values()})
    assert keys == sorted({k for roots in b.path_index().values() for k in roots.values()}) and len(keys) == len(images)
    fa, fb = a.load_images(keys), b.load_images(keys)
    assert np.array_equal(fa.global_, fb.global_) and np.array_equal(fa.patches, fb.patches)  # bit for bit
    # scored: the same figures from either manifest (the shard set's task named by its dataset)
    for manifest, store, task in (("wds.parquet", "wds", "wds-things"), ("folder.parquet", "folder", "wds-things")):
        r = CliRunner().invoke(main, ["score", "--store", str(tmp_path / store), "--manifests",
                                      str(tmp_path / manifest), "--scorer", "clip", "--bootstrap", "0", "--quiet",
                                      "--out", str(tmp_path / f"res-{store}")])  # fmt: skip
        assert r.exit_code == 0, r.output
    from flowclip_cache.api import read_results

    got = [read_results(str(tmp_path / f"res-{x}")).result("wds-things", "clip") for x in ("wds", "folder")]
    assert got[0] == got[1]


def test_shards_at_a_url_are_read_in_place_and_give_the_folders_store(world, tmp_path):
    """The same set at an fsspec URL (memory://, the code path s3:// and https:// take):
    built, extracted (members read by ranges) and scored as the folder copy is, the store's
    features bit for bit; a URL source for a converter of local copies is refused."""
    import fsspec

    root, _, images, _ = world
    fs = fsspec.filesystem("memory")
    fs.put(str(root / "wds_things"), "/url-test/wds_things", recursive=True)
    url = "memory://url-test/wds_things"
    try:
        for source, name in ((root / "wds_things", "folder"), (url, "url")):
            r = _build(["wds-classification", "--source", source, "--out", tmp_path / f"{name}.parquet"])
            assert r.exit_code == 0, r.output
            r = cli_run("extract", "--store", tmp_path / f"st-{name}", "--model", "flowclip-tiny-clip", "--pretrained",
                        "synthetic", "--manifest", tmp_path / f"{name}.parquet", "--image-root", source,
                        "--workers", "2", "--quiet")  # fmt: skip
            assert r.exit_code == 0, r.output
            r = cli_run("score", "--store", tmp_path / f"st-{name}", "--manifests", tmp_path / f"{name}.parquet",
                        "--scorer", "clip", "--bootstrap", "0", "--quiet",
                        "--out", tmp_path / f"res-{name}")  # fmt: skip
            assert r.exit_code == 0, r.output
        a, b = FeatureStore(str(tmp_path / "st-folder")), FeatureStore(str(tmp_path / "st-url"))
        assert sorted(os.listdir(a.segment_dir)) == sorted(os.listdir(b.segment_dir))
        keys = sorted({k for roots in a.path_index().values() for k in roots.values()})
        assert len(keys) == len(images) and keys == sorted({k for r in b.path_index().values() for k in r.values()})
        assert {r for by_root in b.path_index().values() for r in by_root} == {url}  # recorded under the URL
        fa, fb = a.load_images(keys), b.load_images(keys)
        assert np.array_equal(fa.global_, fb.global_) and np.array_equal(fa.patches, fb.patches)
        from flowclip_cache.api import read_results

        got = [read_results(str(tmp_path / f"res-{x}")).result("wds-things", "clip") for x in ("folder", "url")]
        assert got[0] == got[1]
        r = _build(["sugarcrepe", "--source", url, "--out", tmp_path / "x.parquet"])
        assert_refused(r, "reads a local copy")
    finally:
        fs.rm("/url-test", recursive=True)


def test_retrieval_shards_and_webdatasets_grouping(tmp_path, world):
    root, s, images, _ = world
    captions = [[f"caption {i} a", f"caption {i} b"] for i in range(len(images))]
    write_wds(tmp_path / "wds_pairs", images, captions=captions, per_shard=3)
    r = _build(["wds-retrieval", "--source", tmp_path / "wds_pairs", "--out", tmp_path / "r.parquet"])
    assert r.exit_code == 0, r.output
    m = Manifest.read(tmp_path / "r.parquet")
    assert m.table.column("captions").to_pylist() == captions and m.meta["dataset"] == "pairs"
    assert [k for k, _ in samples(str(tmp_path / "wds_pairs" / "test" / "0.tar"))] == [
        "s0000000",
        "s0000001",
        "s0000002",
    ]
    from flowclip_cache.datasets import get

    assert get("wds-retrieval").scoring.tie_rule == "topk"  # as CLIP_benchmark decides recall@k
    r = cli_run("manifest", "check", tmp_path / "r.parquet", "--image-root", tmp_path / "wds_pairs")
    assert r.exit_code == 0, r.output
    r = cli_run("extract", "--store", tmp_path / "st", "--model", "flowclip-tiny-clip", "--pretrained", "synthetic",
                "--manifest", tmp_path / "r.parquet", "--image-root", tmp_path / "wds_pairs", "--quiet")  # fmt: skip
    assert r.exit_code == 0, r.output
    r = cli_run("score", "--store", tmp_path / "st", "--manifests", tmp_path / "r.parquet", "--scorer", "clip",
                "--bootstrap", "0", "--quiet", "--out", tmp_path / "res")  # fmt: skip
    assert r.exit_code == 0, r.output
    from flowclip_cache.api import read_results

    got = read_results(str(tmp_path / "res")).result("wds-pairs", "clip")
    assert got["tie_rule"] == "topk" and 0 <= got["t2i_R@1"] <= 1
    assert (
        "wds-pairs: a query counts when one of its right answers is among the k torch.topk keeps"
        in (tmp_path / "res" / "results.md").read_text()
    )  # the report states the rule each gallery was decided by


def test_brace_ranges_expand_as_webdataset_writes_them():
    assert expand_braces("train/{000..002}.tar") == ["train/000.tar", "train/001.tar", "train/002.tar"]
    assert expand_braces("{a,b}/{0..1}.tar") == ["a/0.tar", "a/1.tar", "b/0.tar", "b/1.tar"]
    assert expand_braces("x.tar") == ["x.tar"]
    with pytest.raises(FlowclipError, match="two integers"):
        expand_braces("{3..1}.tar")


def _broken(world, tmp_path, how):
    root, _, images, labels = world
    src = tmp_path / "wds_bad"
    shutil.copytree(root / "wds_things", src)
    how(src)
    return _build(["wds-classification", "--source", src, "--out", tmp_path / "bad.parquet"])


def _member_replaced(name: str, data: bytes):
    def how(src):
        shard = src / "test" / "0.tar"
        with tarfile.open(shard) as tf:
            members = [(m.name, tf.extractfile(m).read()) for m in tf.getmembers()]
        with tarfile.open(shard, "w") as tf:
            for n, d in members:
                _add(tf, n, data if n == name else d)

    return how


BAD = {
    "a member that is not an image": (
        _member_replaced("s0000001.png", b"hello, not a png"),
        ["0.tar", "s0000001.png", "not a PNG"],
    ),
    "a label that is not an integer": (_member_replaced("s0000002.cls", b"two"), ["0.tar", "s0000002", "'two'"]),
    "a label out of range": (_member_replaced("s0000003.cls", b"7"), ["0.tar", "s0000003", "below 3"]),
    "an empty class name": (lambda src: (src / "classnames.txt").write_text("a\n\nc\n"), ["classnames.txt", "line 2"]),
    "a template without {c}": (
        lambda src: (src / "zeroshot_classification_templates.txt").write_text("a photo of a {c}.\na photo.\n"),
        ["zeroshot_classification_templates.txt", "template 2", "{c}"],
    ),
    "a truncated shard": (lambda src: _truncate(src / "test" / "1.tar"), ["1.tar"]),
    "a gzip-compressed shard": (lambda src: _gzip(src / "test" / "1.tar"), ["1.tar", "plain tar"]),
    "a range that matches nothing": (lambda src: (src / "test" / "nshards.txt").write_text("0"), ["nshards.txt"]),
}


def _truncate(path):
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 3])


def _gzip(path):
    data = open(path, "rb").read()
    open(path, "wb").write(gzip.compress(data))


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line_and_nothing_is_written(world, tmp_path, case):
    how, words = BAD[case]
    r = _broken(world, tmp_path, how)
    assert_refused(r, *words)
    assert not (tmp_path / "bad.parquet").exists()


def test_a_shard_pattern_that_matches_nothing_and_extract_from_a_damaged_shard(world, tmp_path):
    root, s, images, _ = world
    r = _build(["wds-classification", "--source", root / "wds_things", "--out", tmp_path / "x.parquet",
                "--option", "shards=test/{5..9}.tar"])  # fmt: skip
    assert_refused(r, "test/{5..9}.tar", "matches no shard")
    for pattern, words in (
        ("pipe:curl -s http://x/{0..3}.tar", "never runs"),
        ("s3://b/{0..3}.tar", "relative to the source"),
    ):
        r = _build(["wds-classification", "--source", root / "wds_things", "--out", tmp_path / "x.parquet",
                    "--option", f"shards={pattern}"])  # fmt: skip
        assert_refused(r, pattern[:12], words)
    r = _build(["wds-classification", "--source", root / "wds_things", "--out", tmp_path / "m.parquet"])
    assert r.exit_code == 0, r.output
    src = tmp_path / "copy"
    shutil.copytree(root / "wds_things", src)
    _truncate(src / "test" / "1.tar")  # damaged after the manifest was built: extract names it
    r = CliRunner().invoke(main, ["extract", "--store", str(tmp_path / "st"), "--model", "flowclip-tiny-clip",
                                  "--pretrained", "synthetic", "--manifest", str(tmp_path / "m.parquet"),
                                  "--image-root", str(src), "--quiet"])  # fmt: skip
    assert_refused(r, "1.tar")
    assert not (tmp_path / "st").exists()
