"""`extract --features global` (docs/store-format.md, "Global-only segments"): a store of
global features alone scores the CLIP scorer and trains global heads exactly as a full
store does, refuses a scorer that needs patches with the command that adds them, and a
later full extract adds them to the same store (verify checks both rows agree; compact
removes the superseded ones)."""

import os

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import TINY

from flowclip_cache.cli import main
from flowclip_cache.hashing import caption_key
from flowclip_cache.store import CAPTION, IMAGE, FeatureStore


def _cli(*args):
    return CliRunner().invoke(main, list(args))


def _extract(store, sample, *extra):
    r = _cli("extract", "--store", store, "--model", TINY, "--pretrained", "none",
             "--manifest", sample["candidates"], "--manifest",
             sample["training"], "--image-root", sample["image_root"], "--workers", "0", "--quiet", *extra)  # fmt: skip
    assert r.exit_code == 0, r.output
    return FeatureStore(store)


@pytest.fixture
def two(tmp_path, sample):
    """The sample extracted twice: global features alone, and every feature."""
    return _extract(str(tmp_path / "g"), sample, "--features", "global"), _extract(str(tmp_path / "f"), sample), sample


def _size(root):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)


def test_a_global_store_holds_the_same_global_bits_and_less(two):
    g, f, _ = two
    assert all(s.features == "global" and "-g-" in s.name for s in g.segments)
    assert g.info()["global_only"] == {"images": g.count(IMAGE), "captions": g.count(CAPTION)} != {"images": 0}
    for kind in (IMAGE, CAPTION):
        keys = f.keys(kind)
        assert g.has(kind, keys, full=False).all() and not g.has(kind, keys).any()
        assert g.load_global(kind, keys).tobytes() == f.load_global(kind, keys).tobytes()
    assert _size(g.root) < 0.7 * _size(f.root)  # no patch, token or offset arrays


def test_clip_scores_and_global_heads_are_the_full_stores(two, tmp_path):
    g, f, s = two
    for name, st in (("g", g), ("f", f)):
        r = _cli("score", "--store", st.root, "--manifests", s["candidates"], "--scorer", "clip", "--bootstrap", "0",
                 "--no-figures", "--quiet", "--out", str(tmp_path / f"score-{name}"))  # fmt: skip
        assert r.exit_code == 0, r.output
        r = _cli("train-head", "--store", st.root, "--train", s["training"], "--head", "global", "--epochs", "1",
                 "--quiet", "--out", str(tmp_path / f"run-{name}"))  # fmt: skip
        assert r.exit_code == 0, r.output
    import json

    read = lambda n: json.load(open(tmp_path / f"score-{n}" / "results.json"))["results"]  # noqa: E731
    assert read("g") == read("f")
    head = lambda n: open(tmp_path / f"run-{n}" / "head.safetensors", "rb").read()  # noqa: E731
    assert head("g") == head("f")


def test_a_patch_scorer_is_refused_with_the_command_then_extract_adds_them(two, tmp_path):
    g, f, s = two
    r = _cli("train-head", "--store", f.root, "--train", s["training"], "--head", "flow", "--epochs", "1", "--quiet",
             "--out", str(tmp_path / "flow"))  # fmt: skip
    assert r.exit_code == 0, r.output
    score = ["score", "--store", g.root, "--manifests", s["candidates"], "--scorer", str(tmp_path / "flow"),
             "--bootstrap", "0", "--no-figures", "--quiet", "--out", str(tmp_path / "s")]  # fmt: skip
    r = _cli(*score)
    assert r.exit_code == 2 and "have only global features" in r.output
    assert f"flowclip extract --store {g.root} --features all" in r.output and not (tmp_path / "s").exists()
    g = _extract(g.root, s)  # the same store, every feature now
    assert g.info()["global_only"] == {"images": 0, "captions": 0}
    for kind in (IMAGE, CAPTION):
        assert g.has(kind, f.keys(kind)).all()
    keys = f.keys(IMAGE)
    assert g.load_images(keys).patches.tobytes() == f.load_images(keys).patches.tobytes()
    r = _cli("store", "verify", g.root)
    assert r.exit_code == 0 and "problem" not in r.output and "global-only rows a full extract" in r.output
    assert _cli(*score).exit_code == 0
    r = _cli("store", "compact", g.root)
    assert r.exit_code == 0, r.output
    assert not any(s.features == "global" for s in FeatureStore(g.root).segments)
    assert _cli("store", "verify", g.root).output.count("problem") == 0


def test_verify_finds_global_rows_that_disagree_with_their_full_rows(two):
    """Two rows of one key must hold one vector: a global-only row written with other
    bits (as a changed encoder would) is a problem verify names."""
    g, f, _ = two
    keys = f.keys(IMAGE)[:3]
    bad = f.load_global(IMAGE, keys).copy()
    bad[1] += np.float16(0.01)
    f.write_segment(IMAGE, keys, {"global": bad})
    r = _cli("store", "verify", f.root)
    assert "1 rows' global features differ from the same keys' full rows" in r.output
    f.refresh()
    assert f.load_global(IMAGE, keys).tobytes() != bad.tobytes()  # a key's full row is the one read


def test_compact_keeps_the_global_rows_nothing_covers(two, tmp_path):
    g, f, s = two
    caps = [caption_key(c) for c in ("a test caption that is only global",)]
    extra = np.ones((1, g.meta["dim"]), np.float16)
    g.write_segment(CAPTION, caps, {"global": extra})
    g.release_writer()  # (a live writer holds compact off)
    g = _extract(g.root, s)  # full rows for the sample's keys; the extra caption stays global-only
    assert _cli("store", "compact", g.root).exit_code == 0
    g = FeatureStore(g.root)
    assert g.info()["global_only"] == {"images": 0, "captions": 1} and g.duplicates(CAPTION) == 0
    assert g.load_global(CAPTION, caps).tobytes() == extra.tobytes()
