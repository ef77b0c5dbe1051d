"""A stranger's copy of a benchmark: a Hugging Face copy, written with pyarrow
alone in the hub's Parquet layout or save_to_disk's Arrow layout, whose fields try to name
files, repeat ids, hide non-images, omit columns or hold the wrong types. Each is refused
in one line with exit 2, and nothing is written outside the folders the user named (nor,
on refusal, inside them)."""

import io
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from conftest import assert_refused
from PIL import Image

from flowclip_cache.cli import main as cli
from flowclip_cache.datasets import get
from flowclip_cache.datasets.base import RowErrors
from flowclip_cache.errors import ManifestError
from flowclip_cache.manifest import Manifest


def _png(colour=(200, 10, 10)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), colour).save(buf, "PNG")
    return buf.getvalue()


def _image(raw: bytes, path: str = "x.png") -> dict:
    return {"bytes": raw, "path": path}


def _colorswap_rows(n=2, **over):
    rows = [
        {"id": str(i), "image_1": _image(_png()), "image_2": _image(_png((0, 0, 200))),
         "caption_1": f"a red cube and a blue ball {i}", "caption_2": f"a blue cube and a red ball {i}"}
        for i in range(n)
    ]  # fmt: skip
    for k, v in over.items():
        rows[0][k] = v
    return rows


def _hub_copy(folder, rows, split="test"):
    """The hub's layout: data/<split>-00000-of-00001.parquet."""
    os.makedirs(folder / "data", exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), folder / "data" / f"{split}-00000-of-00001.parquet")
    return folder


def _build(tmp_path, name, source):
    """flowclip manifest build NAME into tmp_path/work, images into tmp_path/work/images."""
    work = tmp_path / "work" / "a" / "b"
    work.mkdir(parents=True, exist_ok=True)
    args = ["manifest", "build", name, "--source", str(source), "--out", str(work / "m.parquet")]
    return CliRunner().invoke(cli, args + ["--option", f"images_out={work / 'images'}"]), work


def _files(root) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs}


def test_ids_and_paths_in_a_copy_never_name_a_written_file(tmp_path):
    """The reported copies: an id that climbs out (id="../../escaped"), an absolute id, and
    a non-image blob whose own path says .sh. Before the fix the first wrote escaped_1.png
    two folders above images_out, exit 0. Now each is refused in one line, exit 2, nothing
    written anywhere; a plain copy's images are named by flowclip, never by its ids."""
    script = b"#!/bin/sh\necho planted\n"
    for label, over, says in (
        ("climb", {"id": "../../escaped"}, "not a plain id"),
        ("abs", {"id": str(tmp_path / "abs_escaped")}, "not a plain id"),
        ("sh", {"image_1": _image(script, "planted.sh")}, "not an image"),
    ):
        src = _hub_copy(tmp_path / f"copy-{label}", _colorswap_rows(**over))
        before = _files(tmp_path)
        r, work = _build(tmp_path / label, "colorswap", src)
        assert_refused(r, says, "row 0")
        assert _files(tmp_path) == before, _files(tmp_path) - before
        assert not list(tmp_path.rglob("*escaped*")) and not list(tmp_path.rglob("planted*"))
    src = _hub_copy(tmp_path / "copy", _colorswap_rows(id="my-id.1"))
    r, work = _build(tmp_path / "plain", "colorswap", src)
    assert r.exit_code == 0, r.output
    assert sorted(os.listdir(work / "images")) == [f"colorswap-00000{i}-{k}.png" for i in range(2) for k in range(2)]
    m = Manifest.read(work / "m.parquet").table.to_pylist()
    assert m[0]["record_id"] == "my-id.1" and m[0]["images"] == ["colorswap-000000-0.png", "colorswap-000000-1.png"]


def test_repeated_ids_are_refused_naming_both_rows(tmp_path):
    rows = _colorswap_rows(3)
    rows[2]["id"] = "0"
    r, work = _build(tmp_path, "colorswap", _hub_copy(tmp_path / "copy", rows))
    assert_refused(r, "test row 0", "test row 2", "'0'")
    assert not (work / "m.parquet").exists() and not (work / "images").exists()
    assert not [f for f in os.listdir(work) if ".tmp" in f]


def test_a_huge_blob_a_missing_column_and_wrong_types_are_one_line(tmp_path, monkeypatch):
    from flowclip_cache.datasets import _hf

    monkeypatch.setattr(_hf, "MAX_IMAGE_BYTES", 1000)  # (the limit's test without a 32 MiB blob)
    big = _png() + b"\0" * 2000
    r, work = _build(
        tmp_path / "big", "colorswap", _hub_copy(tmp_path / "big-copy", _colorswap_rows(image_2=_image(big)))
    )
    assert_refused(r, "MiB", "row 0")
    assert not (work / "images").exists()

    rows = [{k: v for k, v in row.items() if k != "caption_2"} for row in _colorswap_rows()]
    r, _ = _build(tmp_path / "col", "colorswap", _hub_copy(tmp_path / "col-copy", rows))
    assert_refused(r, "no column 'caption_2'", "it has")
    rows = [{k: v for k, v in row.items() if k != "negative_image"} for row in _colorswap_rows()]
    bivlc = [{"image": x["image_1"], "caption": x["caption_1"], "negative_caption": x["caption_2"]} for x in rows]
    r, _ = _build(tmp_path / "bivlc", "bivlc", _hub_copy(tmp_path / "bivlc-copy", bivlc))
    assert_refused(r, "no column 'negative_image'")

    wino = lambda **o: {"id": 0, "image_0": _image(_png()), "image_1": _image(_png()), "caption_0": "a dog",  # noqa: E731
                        "caption_1": "a cat", "collapsed_tag": "Object", **o}  # fmt: skip
    for bad, word in ((["a", "list"], "caption"), (None, "caption"), ("  ", "caption")):
        r, work = _build(
            tmp_path / f"w{word}{bad}", "winoground", _hub_copy(tmp_path / f"wc{bad}", [wino(caption_0=bad)])
        )
        assert_refused(r, word, "row 0")
        assert not (work / "m.parquet").exists()


def test_winoground_jsonl_fields_are_checked_at_build(tmp_path):
    """examples.jsonl with a caption given as a list, or null: refused at build, naming
    the line (before: a pyarrow traceback, and a manifest that `manifest check` passed)."""
    for bad in (["a", "list"], None):
        src = tmp_path / f"w{bad is None}" / "data"
        src.mkdir(parents=True)
        rec = {"id": 0, "image_0": "ex_0_img_0", "image_1": "ex_0_img_1", "caption_0": bad, "caption_1": "a cat"}
        (src / "examples.jsonl").write_text(json.dumps(rec) + "\n")
        with pytest.raises(ManifestError, match="line 1"):
            get("winoground").build(str(src.parent), str(tmp_path / "w.parquet"), RowErrors())
        assert not (tmp_path / "w.parquet").exists()


def test_a_state_json_naming_a_file_outside_the_copy_isassert_refused(tmp_path):
    """save_to_disk's layout (state.json listing Arrow files): a data file named by a path
    (here an Arrow file beside the copy, which it would otherwise read) is refused."""
    table = pa.Table.from_pylist(_colorswap_rows())
    copy = tmp_path / "copy"
    (copy / "test").mkdir(parents=True)
    (copy / "dataset_dict.json").write_text(json.dumps({"splits": ["test"]}))
    with pa.OSFile(str(tmp_path / "outside.arrow"), "wb") as f, pa.ipc.new_stream(f, table.schema) as w:
        w.write_table(table)
    for name in ("../../outside.arrow", str(tmp_path / "outside.arrow")):
        (copy / "test" / "state.json").write_text(json.dumps({"_data_files": [{"filename": name}]}))
        r, work = _build(tmp_path / name.replace("/", "_"), "colorswap", copy)
        assert_refused(r, "state.json", "not a plain file name")
        assert not os.listdir(work)


def test_build_refuses_image_paths_outside_the_root_and_repeated_ids(tmp_path):
    """VALSE's image_file and VL-CheckList's image name leading out of the image root,
    and SugarCrepe++ with a repeated id: refused at build, naming the file and records
    (before: built, and refused only by extract or score)."""
    valse = tmp_path / "valse"
    valse.mkdir()
    from flowclip_cache.datasets.valse import PIECES

    rec = {"caption": "a dog", "foil": "a cat", "image_file": "../../../etc/x.jpg", "dataset": "coco2017",
           "mturk": {"caption": 3}}  # fmt: skip
    for p in PIECES:
        (valse / f"{p}.json").write_text(json.dumps({"k1": rec}))
    with pytest.raises(ManifestError, match=r"existence.json: record 'k1': image_file .*outside the image root"):
        get("valse").build(str(valse), str(tmp_path / "v.parquet"), RowErrors())

    scpp = tmp_path / "scpp"
    scpp.mkdir()
    from flowclip_cache.datasets.sugarcrepe_pp import FILES

    one = lambda i: {"id": 7, "filename": f"{i}.jpg", "caption": "a", "caption2": "b", "negative_caption": "c"}  # noqa: E731
    for f in FILES:
        (scpp / f"{f}.json").write_text(json.dumps([one(0), one(1)] if f == "swap_obj" else [one(0)]))
    with pytest.raises(ManifestError, match=r"swap_obj.json: record 0 and .*swap_obj.json: record 1: both are record"):
        get("sugarcrepe-pp").build(str(scpp), str(tmp_path / "s.parquet"), RowErrors())
    assert not (tmp_path / "s.parquet").exists()


def test_manifest_check_refuses_a_null_caption(tmp_path):
    """A manifest written by hand with a null caption: `manifest check` names the row
    (before: ok, and only extract refused it)."""
    from flowclip_cache.manifest import write_manifest

    table = pa.table(
        {"record_id": ["a", "b"], "images": [["x.png", "y.png"]] * 2, "captions": [["p", "q"], ["r", None]]}
    )
    write_manifest(tmp_path / "g.parquet", table, "groups")
    r = CliRunner().invoke(cli, ["manifest", "check", str(tmp_path / "g.parquet")])
    assert_refused(r, "row 1", "null caption")
