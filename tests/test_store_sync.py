"""`flowclip store sync`: a store copied to a URL and back is bit-identical, every copied
segment checked at its destination, a killed sync resumed, damage and mismatches refused.
URLs: fsspec's memory:// here, and S3 itself on a local S3-compatible server (moto's,
speaking S3's HTTP protocol on the loopback address; no mocked client)."""

import json
import os
import uuid

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import free_port
from test_store import config, keys, write_captions, write_images

from flowclip_cache.cli import main
from flowclip_cache.errors import SegmentDamaged, StoreError
from flowclip_cache.store import IMAGE, FeatureStore
from flowclip_cache.store.integrity import verify_store
from flowclip_cache.store.sync import sync


def source(tmp_path, backend="zarr"):
    s = FeatureStore.open_or_create(str(tmp_path / "src"), config(), backend)
    rng = np.random.default_rng(0)
    for i in range(3):
        write_images(s, keys(f"i{i}-", 4 + i), rng)
        write_captions(s, keys(f"c{i}-", 3), [2, 5, 1], rng)
    s.refresh()
    return s


def same_features(a: FeatureStore, b: FeatureStore) -> None:
    a.refresh(), b.refresh()
    ik = [k for i in range(3) for k in keys(f"i{i}-", 4 + i)]
    ck = [k for i in range(3) for k in keys(f"c{i}-", 3)]
    x, y = a.load_images(ik), b.load_images(ik)
    assert np.array_equal(x.global_, y.global_) and np.array_equal(x.patches, y.patches)
    u, v = a.load_captions(ck), b.load_captions(ck)
    assert np.array_equal(u.tokens, v.tokens) and np.array_equal(u.offsets, v.offsets)
    assert sorted(s.name for s in a.segments) == sorted(s.name for s in b.segments)


def memory_url() -> str:
    return f"memory://flowclip-test-{uuid.uuid4().hex[:8]}/store"


def test_a_store_synced_to_a_url_and_back_is_bit_identical_and_verifies(tmp_path):
    src, url = source(tmp_path), memory_url()
    first = sync(src.root, url, log=lambda *_: None)
    assert first["segments"] == len(src.segments) == 6 and first["bytes"] > 0
    back = tmp_path / "back"
    sync(url, str(back), log=lambda *_: None)
    copy = FeatureStore(str(back))
    same_features(src, copy)
    rep = verify_store(str(back))
    assert not rep.problems and rep.segments == 6
    again = sync(src.root, url, log=lambda *_: None)  # nothing left to copy
    assert again["segments"] == 0 and again["skipped"] == 6


def test_a_killed_sync_resumes_and_copies_only_what_is_missing(tmp_path, monkeypatch):
    import flowclip_cache.store.sync as sync_module

    src, url = source(tmp_path), memory_url()
    real, calls = sync_module._copy_segment, []

    def die_on_the_third(*args):
        calls.append(args[3])
        if len(calls) == 3:
            raise KeyboardInterrupt  # killed mid-run: two segments committed
        return real(*args)

    monkeypatch.setattr(sync_module, "_copy_segment", die_on_the_third)
    with pytest.raises(KeyboardInterrupt):
        sync(src.root, url, log=lambda *_: None)
    monkeypatch.setattr(sync_module, "_copy_segment", real)
    rest = sync(src.root, url, log=lambda *_: None)
    assert rest["segments"] == 4 and rest["skipped"] == 2
    local = tmp_path / "l"
    killed = []

    def die_into_local(*args):
        killed.append(1)
        if len(killed) == 2:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(sync_module, "_copy_segment", die_into_local)
    with pytest.raises(KeyboardInterrupt):
        sync(url, str(local), log=lambda *_: None)
    monkeypatch.setattr(sync_module, "_copy_segment", real)
    assert len(FeatureStore(str(local)).segments) == 1  # only the committed one is read
    sync(url, str(local), log=lambda *_: None)
    same_features(src, FeatureStore(str(local)))
    assert not [n for n in os.listdir(local / "segments") if n.startswith(".")]  # no temporaries left


def test_killed_between_a_files_temporary_and_its_name_the_local_copy_stays_readable(tmp_path, monkeypatch):
    """A kill while a commit record or record file is being placed leaves its temporary in
    the sync's locked writer folder, never beside the store's own files: the store opens,
    and the next sync sweeps it and finishes."""
    import flowclip_cache.store.sync as sync_module

    src, local = source(tmp_path), tmp_path / "l"
    real, calls = os.replace, []

    def die_placing_the_second_commit_record(a, b):
        if "commits" in str(b):
            calls.append(b)
            if len(calls) == 2:
                raise KeyboardInterrupt
        return real(a, b)

    monkeypatch.setattr(sync_module.os, "replace", die_placing_the_second_commit_record)
    with pytest.raises(KeyboardInterrupt):
        sync(src.root, str(local), log=lambda *_: None)
    monkeypatch.setattr(sync_module.os, "replace", real)
    assert len(FeatureStore(str(local)).segments) == 2  # the second's record was not placed: it is read anyway
    assert not verify_store(str(local)).problems
    sync(src.root, str(local), log=lambda *_: None)
    same_features(src, FeatureStore(str(local)))
    assert [n for n in os.listdir(local / "segments") if n.startswith(".")] == []


def test_a_damaged_source_segment_is_refused_and_never_committed(tmp_path):
    src, url = source(tmp_path), memory_url()
    seg = next(s for s in src.segments if s.kind == IMAGE)
    chunk = os.path.join(seg.path, "patches", "c", "0", "0", "0")
    raw = bytearray(open(chunk, "rb").read())
    raw[5] ^= 0xFF  # one flipped byte: same size, wrong bits
    open(chunk, "wb").write(bytes(raw))
    with pytest.raises(SegmentDamaged, match="patches fails its CRC-32 after the copy"):
        sync(src.root, url, log=lambda *_: None)
    import fsspec

    fs = fsspec.filesystem("memory")
    assert not fs.exists(url.split("://")[1] + f"/commits/{seg.name}.json")


def test_mismatches_and_hdf5_at_a_url_are_refused_in_one_line(tmp_path):
    src, url = source(tmp_path), memory_url()
    sync(src.root, url, log=lambda *_: None)
    other = FeatureStore.open_or_create(str(tmp_path / "other"), config(model="n"), "zarr")
    with pytest.raises(StoreError, match="another encoder configuration or backend"):
        sync(other.root, url, log=lambda *_: None)
    h5 = FeatureStore.open_or_create(str(tmp_path / "h5"), config(), "hdf5")
    with pytest.raises(StoreError, match="HDF5 stores stay on a local disk"):
        sync(h5.root, memory_url(), log=lambda *_: None)
    r = CliRunner().invoke(main, ["store", "sync", h5.root, memory_url()])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1 and "HDF5" in r.output
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    with pytest.raises(StoreError, match="holds other files"):
        sync(url, str(tmp_path / "mine"), log=lambda *_: None)
    assert os.listdir(tmp_path / "mine") == ["notes.txt"]


def test_local_hdf5_stores_sync_between_folders(tmp_path):
    src = source(tmp_path, "hdf5")
    sync(src.root, str(tmp_path / "copy"), log=lambda *_: None)
    same_features(src, FeatureStore(str(tmp_path / "copy")))


# -- S3 itself, on a local S3-compatible server --------------------------------------------


def test_a_store_goes_to_s3_and_back_bit_identical(tmp_path, s3_env):
    src = source(tmp_path)
    url = f"s3://{s3_env}/stores/tiny"
    r = CliRunner().invoke(main, ["store", "sync", src.root, url])
    assert r.exit_code == 0, r.output
    assert "copied 6 segments" in r.output and "testing" not in r.output  # credentials never logged
    import boto3

    listed = boto3.client("s3").list_objects_v2(Bucket=s3_env, Prefix="stores/tiny/commits/")
    assert sorted(o["Key"].rsplit("/", 1)[1] for o in listed["Contents"]) == sorted(
        f"{s.name}.json" for s in src.segments
    )
    assert (
        json.loads(boto3.client("s3").get_object(Bucket=s3_env, Key="stores/tiny/store.json")["Body"].read())
        == src.meta
    )
    r = CliRunner().invoke(main, ["store", "sync", url, str(tmp_path / "node-disk")])
    assert r.exit_code == 0, r.output
    same_features(src, FeatureStore(str(tmp_path / "node-disk")))
    assert not verify_store(str(tmp_path / "node-disk")).problems


def test_a_missing_bucket_or_an_unreachable_endpoint_is_one_line(tmp_path, s3_env, monkeypatch):
    src = source(tmp_path)
    r = CliRunner().invoke(main, ["store", "sync", src.root, "s3://no-such-bucket-here/x"])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1 and "bucket" in r.output, r.output
    for k in ("AWS_ENDPOINT_URL", "FSSPEC_S3_ENDPOINT_URL"):
        monkeypatch.setenv(k, f"http://127.0.0.1:{free_port()}")  # nothing listens there
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    r = CliRunner().invoke(main, ["store", "sync", src.root, f"s3://{s3_env}/x"])
    assert r.exit_code == 2 and "EndpointConnectionError" in r.output and len(r.output.strip().splitlines()) == 1
