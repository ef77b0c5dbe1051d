"""The store's logical layout, identical for both backends."""

import json
import os

import numpy as np
import pytest

from flowclip_cache.errors import FingerprintMismatch, StoreError
from flowclip_cache.hashing import caption_key
from flowclip_cache.store import CAPTION, IMAGE, FeatureStore, MissingFeatures
from flowclip_cache.store.core import _ranges
from flowclip_cache.store.integrity import store_problems

D, P = 8, 4


def config(**over):
    c = {
        "model": "m",
        "model_cfg": {"embed_dim": D, "quick_gelu": False},
        "num_patches": P,
        "token_mask": "nonpad",
        "weights": {"source": "random-init", "init_seed": 0},
    }
    c.update(over)
    return c


def keys(prefix, n):
    return [caption_key(f"{prefix}{i}") for i in range(n)]


def rand(rng, *shape):
    x = rng.standard_normal(shape).astype(np.float32)
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float16)


def write_images(fs, ks, rng):
    g, p = rand(rng, len(ks), D), rand(rng, len(ks), P, D)
    fs.write_segment(IMAGE, ks, {"global": g, "patches": p})
    return g, p


def write_captions(fs, ks, lengths, rng):
    off = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    g, t = rand(rng, len(ks), D), rand(rng, int(off[-1]), D)
    fs.write_segment(CAPTION, ks, {"global": g, "tokens": t, "offsets": off, "truncated": np.zeros(len(ks), np.uint8)})
    return g, t, off


@pytest.fixture(params=["zarr", "hdf5"])
def store(request, tmp_path):
    return FeatureStore.open_or_create(str(tmp_path / "s"), config(), request.param)


def test_roundtrip_in_any_order(store):
    rng = np.random.default_rng(0)
    ik1, ik2 = keys("a", 5), keys("b", 3)
    g1, p1 = write_images(store, ik1, rng)
    g2, p2 = write_images(store, ik2, rng)
    store.refresh()
    want = [ik2[1], ik1[4], ik1[0], ik2[1]]
    got = store.load_images(want)
    np.testing.assert_array_equal(got.global_, np.stack([g2[1], g1[4], g1[0], g2[1]]))
    np.testing.assert_array_equal(got.patches, np.stack([p2[1], p1[4], p1[0], p2[1]]))
    assert store.has(IMAGE, [ik1[0], keys("zz", 1)[0]]).tolist() == [True, False]
    with pytest.raises(MissingFeatures, match="1 images are not in the store"):
        store.load_images([ik1[0], keys("zz", 1)[0]])


def test_captions_are_ragged_without_padding(store):
    rng = np.random.default_rng(1)
    ks1, ks2 = keys("c", 4), keys("d", 2)
    g1, t1, o1 = write_captions(store, ks1, [3, 1, 5, 2], rng)
    g2, t2, o2 = write_captions(store, ks2, [4, 2], rng)
    store.refresh()
    got = store.load_captions([ks2[0], ks1[2], ks1[1]])
    np.testing.assert_array_equal(got.offsets, [0, 4, 9, 10])
    np.testing.assert_array_equal(got.tokens[0:4], t2[0:4])
    np.testing.assert_array_equal(got.tokens[4:9], t1[o1[2] : o1[3]])
    np.testing.assert_array_equal(got.tokens[9:10], t1[o1[1] : o1[2]])
    np.testing.assert_array_equal(got.global_, np.stack([g2[0], g1[2], g1[1]]))
    assert store.info()["caption_tokens"] == 17
    assert store_problems(store.root) == []


def test_reopen_and_fingerprint_mismatch_names_fields(store):
    root = store.root
    FeatureStore.open_or_create(root, config())  # same config: fine
    with pytest.raises(FingerprintMismatch) as e:
        FeatureStore.open_or_create(root, config(token_mask="content"))
    assert "token_mask: 'nonpad' != 'content'" in str(e.value)


def test_same_segment_twice_and_temporaries_are_ignored(store):
    rng = np.random.default_rng(2)
    ks = keys("e", 2)
    arrays = {"global": rand(rng, 2, D), "patches": rand(rng, 2, P, D)}
    store.write_segment(IMAGE, ks, arrays)
    store.write_segment(IMAGE, ks, arrays)  # a second writer of the same unit
    open(os.path.join(store.segment_dir, f".tmp-1-x{store.backend.suffix}"), "w").close()
    store.refresh()
    assert store.count(IMAGE) == 2 and len(store.segments) == 1
    assert store_problems(store.root) == []


def test_verify_finds_nan_and_wrong_shapes(store):
    rng = np.random.default_rng(3)
    g = rand(rng, 2, D)
    g[1, 0] = np.nan
    store.write_segment(IMAGE, keys("f", 2), {"global": g, "patches": rand(rng, 2, P, D)})
    store.write_segment(IMAGE, keys("g", 2), {"global": rand(rng, 2, D + 1), "patches": rand(rng, 2, P, D)})
    store.refresh()
    problems = "\n".join(store_problems(store.root))
    assert "global holds NaN" in problems
    assert f"global is float16[2, {D + 1}], expected float16[2, {D}]" in problems


def test_not_a_store(tmp_path):
    with pytest.raises(StoreError, match="not a flowclip store"):
        FeatureStore(str(tmp_path))
    meta = tmp_path / "x"
    meta.mkdir()
    (meta / "store.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(StoreError, match="not a flowclip store file"):
        FeatureStore(str(meta))


def test_ranges_against_a_loop():
    rng = np.random.default_rng(4)
    starts = rng.integers(0, 50, 20)
    stops = starts + rng.integers(0, 5, 20)
    want = np.concatenate([np.arange(a, b) for a, b in zip(starts, stops)])
    np.testing.assert_array_equal(_ranges(starts, stops), want)


def test_load_in_storage_order_and_partial_segments(store):
    rng = np.random.default_rng(5)
    ka, kb = keys("p", 10), keys("q", 6)
    ga, pa = write_images(store, ka, rng)
    gb, pb = write_images(store, kb, rng)
    store.refresh()
    allk = store.keys(IMAGE)
    got = store.load_images(allk)
    want = {k: (g, p) for k, g, p in zip(ka + kb, np.concatenate([ga, gb]), np.concatenate([pa, pb]))}
    np.testing.assert_array_equal(got.patches, np.stack([want[k][1] for k in allk]))
    # 2 of 10 rows: read row by row; 5 of 6: the whole segment
    ask = [ka[7], kb[0], kb[1], kb[2], kb[3], ka[2], kb[4]]
    got = store.load_images(ask)
    np.testing.assert_array_equal(got.global_, np.stack([want[k][0] for k in ask]))
    np.testing.assert_array_equal(got.patches, np.stack([want[k][1] for k in ask]))


def test_every_segment_file_is_fsynced_before_its_rename(store, monkeypatch):
    """Durable before visible: each file of the temporary segment is fsynced before the
    rename, and the segments folder after it."""
    import flowclip_cache.store.core as core

    events = []
    real_fsync, real_rename = os.fsync, os.rename
    monkeypatch.setattr(
        os, "fsync", lambda fd: (events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))), real_fsync(fd))[1]
    )
    real_link = os.link  # a file segment is committed by link (never replaces), a folder by rename
    seg_dir = store.segment_dir  # (zarr renames its own files inside the temporary; not counted)
    note = lambda a, b: events.append(("rename", a)) if os.path.dirname(b) == seg_dir else None
    monkeypatch.setattr(core.os, "rename", lambda a, b: (note(a, b), real_rename(a, b))[1])
    monkeypatch.setattr(core.os, "link", lambda a, b: (note(a, b), real_link(a, b))[1])
    rng = np.random.default_rng(0)
    store.write_segment(IMAGE, keys("f", 3), {"global": rand(rng, 3, D), "patches": rand(rng, 3, P, D)})
    renames = [i for i, e in enumerate(events) if e[0] == "rename"]
    assert len(renames) == 1
    tmp = events[renames[0]][1]
    final = [os.path.join(store.segment_dir, n) for n in os.listdir(store.segment_dir) if not n.startswith(".")][0]
    files = [os.path.join(r, f) for r, _, fs in os.walk(final) for f in fs] if os.path.isdir(final) else [final]
    synced_before = {p for kind, p in events[: renames[0]] if kind == "fsync"}
    for f in files:  # the same files under their temporary name
        assert tmp + f[len(final) :] in synced_before, f
    assert ("fsync", os.path.realpath(store.segment_dir)) in events[renames[0] :]


def test_a_peer_creating_the_same_store_meanwhile_is_not_foreign_files(tmp_path, monkeypatch):
    """Two ranks create one store: the second looks (no store.json yet), the first links
    its store.json, then the second checks the folder. store.json is the peer's store, not
    a stranger's file: the second opens it (the race extract under torchrun met under load)."""
    import flowclip_cache.store.core as core

    root = str(tmp_path / "s")
    FeatureStore.open_or_create(root, config())  # the peer, first
    real = core.os.path.exists
    seen = []

    def not_yet(p):  # the second rank's first look at store.json came before the peer's link
        if p.endswith("store.json") and not seen:
            seen.append(p)
            return False
        return real(p)

    monkeypatch.setattr(core.os.path, "exists", not_yet)
    fs = FeatureStore.open_or_create(root, config())
    assert seen and fs.fingerprint
    monkeypatch.setattr(core.os.path, "exists", real)
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "notes.txt").write_text("mine")
    with pytest.raises(Exception, match="holds other files"):
        FeatureStore.open_or_create(str(tmp_path / "t"), config())
