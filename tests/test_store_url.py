"""Stores at a URL: extract, train-head, score, verify and compact straight on a
URL (fsspec's memory:// in one process; S3 on moto's server on the loopback address for
separate processes), read through the local chunk cache, written by concurrent writers
without locks, some killed at random points; every feature bit-identical to the same
store built on a disk."""

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import ROOT
from test_learning import planted  # noqa: F401  (fixture: a store written directly)
from test_store import config, keys, write_images

from flowclip_cache.cli import main
from flowclip_cache.errors import StoreError
from flowclip_cache.store import CAPTION, IMAGE, FeatureStore
from flowclip_cache.store.cache import ChunkCache, parse_size
from flowclip_cache.store.integrity import compact, verify_store


def memory_url() -> str:
    return f"memory://flowclip-url-{uuid.uuid4().hex[:8]}/store"


def invoke(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code == 0, r.output[-3000:]
    return r.output


def extract_args(sample, store, *extra):
    return [
        "extract", "--store", store, "--model", "flowclip-tiny-clip", "--pretrained", "none",
            "--manifest", sample["training"],
        "--manifest", sample["candidates"], "--image-root", sample["image_root"], "--workers", "0", "--quiet", *extra,
    ]  # fmt: skip


def assert_same_bits(a: FeatureStore, b: FeatureStore) -> None:
    """Every key of both stores, every stored array, bit for bit."""
    a.refresh(), b.refresh()
    for kind in (IMAGE, CAPTION):
        assert sorted(a.keys(kind)) == sorted(b.keys(kind)) and a.keys(kind)
    ik, ck = sorted(a.keys(IMAGE)), sorted(a.keys(CAPTION))
    x, y = a.load_images(ik), b.load_images(ik)
    assert x.global_.tobytes() == y.global_.tobytes() and x.patches.tobytes() == y.patches.tobytes()
    u, v = a.load_captions(ck), b.load_captions(ck)
    for f in ("global_", "tokens", "offsets", "truncated"):
        assert getattr(u, f).tobytes() == getattr(v, f).tobytes(), f


@pytest.fixture
def sample(tmp_path):
    from flowclip_cache.synthetic.sample import make_sample

    return make_sample(str(tmp_path / "sample"), n_images=10)


@pytest.fixture
def chunk_cache(tmp_path, monkeypatch):
    folder = tmp_path / "chunk-cache"
    monkeypatch.setenv("FLOWCLIP_CHUNK_CACHE", str(folder))
    return folder


def test_extract_train_and_score_at_a_url_equal_the_same_on_a_disk(tmp_path, sample, chunk_cache):
    url, disk = memory_url(), str(tmp_path / "disk")
    invoke(*extract_args(sample, url, "--image-unit", "4"))
    invoke(*extract_args(sample, disk, "--image-unit", "4"))
    assert_same_bits(FeatureStore(url), FeatureStore(disk))
    out = {}
    for name, store in (("url", url), ("disk", disk)):
        run, res = tmp_path / f"run-{name}", tmp_path / f"res-{name}"
        invoke("train-head", "--store", store, "--train", sample["training"], "--out", run, "--epochs", "2", "--quiet")
        invoke("score", "--store", store, "--manifests", sample["candidates"], "--scorer", "clip",
               "--scorer", f"flow={run}", "--out", res, "--bootstrap", "0", "--quiet")  # fmt: skip
        from safetensors.numpy import load_file

        weights = load_file(str(run / "head.safetensors"))
        results = json.load(open(res / "results.json"))["results"]
        out[name] = ({k: v.tobytes() for k, v in weights.items()}, json.dumps(results, sort_keys=True))
    assert out["url"][0] == out["disk"][0]  # the trained head, bit for bit
    assert out["url"][1].replace("run-url", "run-disk") == out["disk"][1]  # every score
    assert "ok: " in invoke("store", "verify", url)
    # a job's node pulls only the segments its manifest is read from: one row, one image
    import pyarrow as pa

    from flowclip_cache.manifest import Manifest, write_manifest

    part = tmp_path / "part.parquet"
    write_manifest(part, pa.Table.from_pylist(Manifest.read(sample["candidates"]).table.to_pylist()[:1]), "candidates")
    node = tmp_path / "node"
    out = invoke("store", "sync", url, node, "--manifest", part)
    assert "2 of 2 segments to copy" in out  # its image's segment (of 3) and the caption segment
    assert len(FeatureStore(url).segments) == 4 and len(FeatureStore(str(node)).segments) == 2
    invoke("score", "--store", node, "--manifests", part, "--scorer", "clip", "--out", tmp_path / "res-node",
           "--bootstrap", "0", "--quiet")  # fmt: skip


def test_a_warm_cache_reads_nothing_remote_and_the_bound_evicts(tmp_path):
    url = memory_url()
    cache = ChunkCache(str(tmp_path / "c"), 1 << 30)
    s = FeatureStore.open_or_create(url, config(), cache=cache)
    rng = np.random.default_rng(0)
    for i in range(4):
        write_images(s, keys(f"i{i}-", 6), rng)
    s.release_writer()
    ik = [k for i in range(4) for k in keys(f"i{i}-", 6)]
    first = FeatureStore(url, cache=ChunkCache(str(tmp_path / "read"), 1 << 30))
    a = first.load_images(ik)
    assert first.cache is not None and first.cache.fetched > 0
    fetched = first.cache.fetched
    assert first.load_images(ik).patches.tobytes() == a.patches.tobytes()
    assert first.cache.fetched == fetched  # a second epoch: every byte from the cache
    second = FeatureStore(url, cache=ChunkCache(str(tmp_path / "read"), 1 << 30))  # another job on the node
    assert second.load_images(ik).patches.tobytes() == a.patches.tobytes()
    assert second.cache is not None and second.cache.fetched == 0 and second.cache.hits > 0
    small = FeatureStore(url, cache=ChunkCache(str(tmp_path / "small"), fetched // 3))
    c = small.load_images(ik)
    assert c.patches.tobytes() == a.patches.tobytes() and small.cache is not None
    assert small.cache.size() <= fetched // 3  # bounded: the least recently read went


def test_a_damaged_cached_chunk_is_fetched_again_and_damage_at_the_url_is_refused(tmp_path, monkeypatch):
    url = memory_url()
    cache = ChunkCache(str(tmp_path / "c"), 1 << 30)
    s = FeatureStore.open_or_create(url, config(), cache=cache)
    write_images(s, keys("i-", 5), np.random.default_rng(0))
    s.release_writer()
    ik = keys("i-", 5)
    good = FeatureStore(url, cache=cache).load_images(ik)
    seg = FeatureStore(url, cache=cache).segments[0]
    chunk = cache.where(f"{seg.path}/patches/c/0/0/0")
    raw = bytearray(open(chunk, "rb").read())
    raw[7] ^= 1
    open(chunk, "wb").write(bytes(raw))  # the cached copy damaged: dropped, fetched again
    again = FeatureStore(url, cache=cache).load_images(ik)
    assert again.patches.tobytes() == good.patches.tobytes()
    fs = s.loc.fs
    remote = f"{seg.path}/patches/c/0/0/0"
    data = bytearray(fs.cat_file(remote))
    data[7] ^= 1
    fs.pipe_file(remote, bytes(data))  # the object itself damaged: refused, never read
    dropped = []
    real_forget = ChunkCache.forget
    monkeypatch.setattr(ChunkCache, "forget", lambda self, prefix: dropped.append(prefix) or real_forget(self, prefix))
    with pytest.raises(StoreError, match="patches fails its checksum"):
        FeatureStore(url, cache=ChunkCache(str(tmp_path / "fresh"), 1 << 30)).load_images(ik)
    # only the damaged array's cached files are dropped: the segment's other arrays, read by
    # other threads at the same time, stay (dropping them made such a read report a chunk
    # missing, once, on a loaded machine)
    assert dropped == [f"{seg.path}/patches"], dropped
    problems = [m for _, m in verify_store(url).problems]
    assert len(problems) == 1 and "patches" in problems[0], problems
    r = CliRunner().invoke(main, ["store", "verify", "--quarantine", url])
    assert r.exit_code == 0 and "moved commits/" in r.output, r.output
    assert FeatureStore(url, cache=cache).count(IMAGE) == 0  # its record moved: uncommitted, re-extracted next


def test_refusals_are_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv("FLOWCLIP_CHUNK_CACHE", raising=False)
    url = memory_url()
    FeatureStore.open_or_create(url, config(), cache=ChunkCache(str(tmp_path / "c"), 1 << 20)).release_writer()
    with pytest.raises(StoreError, match="FLOWCLIP_CHUNK_CACHE"):
        FeatureStore(url)
    with pytest.raises(StoreError, match="HDF5 stores stay on a local disk"):
        FeatureStore.open_or_create(memory_url(), config(), "hdf5")
    cache = ChunkCache(str(tmp_path / "c"), 1 << 20)
    loc = FeatureStore(url, cache=cache).loc
    seg = "img-" + "0" * 24 + ".zarr"
    for bad in (b"not json", json.dumps({"segment": seg, "at": "../elsewhere/" + seg}).encode()):
        loc.write(f"commits/{seg}.json", bad)  # a record that is not one, or that points outside the store
        with pytest.raises(StoreError, match="not a commit record of this segment"):
            FeatureStore(url, cache=cache)
    other = memory_url()
    loc.fs.pipe_file(other.removeprefix("memory://") + "/notes.txt", b"x")
    with pytest.raises(StoreError, match="holds other objects"):  # a new store only where nothing else is
        FeatureStore.open_or_create(other, config(), cache=cache)
    assert parse_size("20G") == 20 << 30 and parse_size("1.5M") == int(1.5 * (1 << 20)) and parse_size("100") == 100
    with pytest.raises(StoreError, match="not a size"):
        parse_size("lots")
    r = CliRunner().invoke(main, ["store", "compact", url])
    assert r.exit_code == 2 and "FLOWCLIP_CHUNK_CACHE" in r.output and len(r.output.strip().splitlines()) == 1


def test_compact_at_a_url_removes_duplicates_and_old_uncommitted_uploads(tmp_path, chunk_cache, monkeypatch):
    """A bound under an hour is refused; the test then lowers the floor to see old uploads go
    without waiting an hour."""
    from flowclip_cache.store import remote

    url = memory_url()
    cache = ChunkCache(str(tmp_path / "c"), 1 << 30)
    s = FeatureStore.open_or_create(url, config(), cache=cache)
    rng = np.random.default_rng(0)
    write_images(s, keys("a-", 6), rng)
    write_images(s, keys("a-", 6)[2:] + keys("b-", 3), rng)  # 4 keys held twice
    s.loc.fs.pipe_file(s.loc.path("segments/.w-dead-1-x/img-" + "0" * 24 + ".zarr/zarr.json"), b"{}")  # a killed upload
    s.loc.fs.pipe_file(s.loc.path("segments/img-" + "1" * 24 + ".zarr/zarr.json"), b"{}")  # an interrupted sync's
    s.release_writer()
    s = FeatureStore(url, cache=cache)
    before = s.load_images(keys("a-", 6) + keys("b-", 3))
    assert s.duplicates(IMAGE) == 4
    assert any("2 segment uploads without a commit record" in n for n in verify_store(url).notes)
    assert compact(url, log=lambda *_: None, uncommitted_after_s=3600) == 4
    assert any("without a commit record" in n for n in verify_store(url).notes)  # younger than the bound: kept
    with pytest.raises(StoreError, match="at least 1 h old"):
        compact(url, log=lambda *_: None, uncommitted_after_s=0)
    r = CliRunner().invoke(main, ["store", "compact", url, "--uncommitted-after", "0.5"])
    assert r.exit_code == 2 and "at least 1 h" in r.output, r.output
    monkeypatch.setattr(remote, "MIN_UNCOMMITTED_AFTER_S", 0)
    compact(url, log=lambda *_: None, uncommitted_after_s=0)
    rep = verify_store(url)
    assert not rep.problems and not rep.notes and rep.images == 9
    after = FeatureStore(url, cache=cache)
    assert after.duplicates(IMAGE) == 0
    got = after.load_images(keys("a-", 6) + keys("b-", 3))
    assert got.patches.tobytes() == before.patches.tobytes()  # the vectors readers read before


# -- many writers on S3 (moto's server), separate processes, some killed ---------------------
def _writer(cmd, env):
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.parametrize("writers,killed", [(2, (1,)), (4, (1, 3))])
def test_writers_on_s3_some_killed_and_rerun_equal_one_local_store(tmp_path, s3_env, monkeypatch, writers, killed):
    """Two, then four extract processes (ranks of 2 or 4) into one s3:// store at once,
    sharing one chunk cache; some are killed (SIGKILL) at a random moment after their first
    upload is seen, and rerun at once, beside the others still writing. The store verifies,
    compacts, and holds every feature of the same extract on a disk, bit for bit; train-head
    and score read it, with the disk store's numbers."""
    from flowclip_cache.synthetic.sample import make_sample

    sample = make_sample(str(tmp_path / "sample"), n_images=6 * writers)
    url = f"s3://{s3_env}/stores/many"
    monkeypatch.setenv("FLOWCLIP_CHUNK_CACHE", str(tmp_path / "chunk-cache"))
    env = {**os.environ, "PYTHONPATH": ROOT, "HF_HUB_OFFLINE": "1"}
    units = ["--image-unit", "2", "--caption-unit", "4"]
    base = [sys.executable, "-m", "flowclip_cache", *extract_args(sample, url, *units)]
    rank = lambda r: [*base, "--rank", str(r), "--world-size", str(writers)]  # noqa: E731
    procs = {r: _writer(rank(r), env) for r in range(writers)}
    import s3fs

    fs = s3fs.S3FileSystem()
    rng = random.Random(writers)
    codes, reruns = [], []
    for r in killed:
        pid = procs[r].pid
        deadline = time.time() + 120
        while time.time() < deadline and procs[r].poll() is None:
            fs.invalidate_cache()
            if any(f"-{pid}-" in p for p in fs.glob(f"{s3_env}/stores/many/segments/.w-*")):
                break
            time.sleep(0.2)  # (the server runs in this process: polling takes its time)
        time.sleep(rng.uniform(0, 0.5))
        procs[r].send_signal(signal.SIGKILL)
        codes.append(procs[r].wait())
        reruns.append(_writer(rank(r), env))  # commits what the killed writer had not
    for p in [procs[r] for r in procs if r not in killed] + reruns:
        assert p.wait(timeout=300) == 0, p.stdout.read()[-2000:]
    assert -signal.SIGKILL in codes, codes  # at least one died mid-way
    disk = str(tmp_path / "disk")
    invoke(*extract_args(sample, disk, *units))
    rep = verify_store(url)
    assert not rep.problems, rep.problems
    from flowclip_cache.store import remote

    monkeypatch.setattr(remote, "MIN_UNCOMMITTED_AFTER_S", 0)  # (every writer has ended: no wait of an hour)
    compact(url, log=lambda *_: None, uncommitted_after_s=0)
    rep = verify_store(url)
    assert not rep.problems and not rep.notes, (rep.problems, rep.notes)
    assert_same_bits(FeatureStore(url), FeatureStore(disk))
    scores = {}
    for name, store in (("url", url), ("disk", disk)):
        run, res = tmp_path / f"run-{name}", tmp_path / f"res-{name}"
        invoke("train-head", "--store", store, "--train", sample["training"], "--out", run, "--epochs", "1", "--quiet")
        invoke("score", "--store", store, "--manifests", sample["candidates"], "--scorer", f"flow={run}",
               "--out", res, "--bootstrap", "0", "--quiet")  # fmt: skip
        scores[name] = json.load(open(res / "results.json"))["results"]
    assert json.dumps(scores["url"]).replace("run-url", "run-disk") == json.dumps(scores["disk"])


def test_a_missing_bucket_is_one_line_from_every_command(tmp_path, s3_env, chunk_cache):
    from flowclip_cache.synthetic.sample import make_sample

    s = make_sample(str(tmp_path / "sample"), n_images=2)
    r = CliRunner().invoke(main, extract_args(s, "s3://no-such-bucket-here/x"))
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), r.output
    assert r.output.strip().splitlines()[-1].startswith("error: object storage: FileNotFoundError: The specified")
    r = CliRunner().invoke(main, ["store", "verify", "s3://no-such-bucket-here/x"])
    assert r.exit_code == 2 and "not a flowclip store" in r.output


def test_every_placement_trains_the_same_weights_from_a_url(planted, tmp_path):  # noqa: F811
    """device, host and store placements from the planted store's copy at a URL give the
    disk store's weights bit for bit (the store placement reads rows from the cached files)."""
    import torch
    from safetensors.torch import load_file

    from flowclip_cache.store.sync import sync
    from flowclip_cache.training.loop import TrainConfig, train_head

    fs, man = planted
    url = memory_url()
    sync(fs.root, url, log=lambda *_: None)
    cfg = TrainConfig(head="flow", epochs=1, batch_size=16, lr=1e-3, train_eval_records=64, cimr=0.1)
    train_head(fs, man, str(tmp_path / "disk"), cfg, placement="device", progress=False, log=lambda *_: None)
    ref = load_file(str(tmp_path / "disk" / "head.safetensors"))
    for placement in ("device", "store"):
        at = FeatureStore(url, cache=ChunkCache(str(tmp_path / f"cache-{placement}"), 1 << 30))
        out = str(tmp_path / placement)
        train_head(at, man, out, cfg, placement=placement, progress=False, log=lambda *_: None)
        got = load_file(os.path.join(out, "head.safetensors"))
        assert all(torch.equal(ref[k], got[k]) for k in ref), placement


def test_a_service_without_conditional_writes_gets_a_look_then_a_write():
    """Location.create where the filesystem has no mode="create" (TypeError): the name is
    taken only when free, by a look then a write (docs: two racing writers there both
    succeed, the last record standing; each names a whole upload)."""
    import fsspec

    from flowclip_cache.store.location import locate

    loc = locate(memory_url())
    plain = fsspec.filesystem("memory")

    class NoConditional:
        def __getattr__(self, name):
            return getattr(plain, name)

        def pipe_file(self, path, data, **kw):
            if "mode" in kw:
                raise TypeError("pipe_file() got an unexpected keyword argument 'mode'")
            return plain.pipe_file(path, data)

    loc.fs = NoConditional()
    assert loc.create("commits/a.json", b"first") and not loc.create("commits/a.json", b"second")
    assert loc.read("commits/a.json") == b"first"
    loc.fs = plain  # the real conditional write: the same answers
    assert loc.create("commits/b.json", b"first") and not loc.create("commits/b.json", b"second")
    assert loc.read("commits/b.json") == b"first"


def test_two_services_never_share_cached_objects(tmp_path, monkeypatch):
    """The same bucket and key at AWS and at an S3-compatible service are other objects."""
    from types import SimpleNamespace

    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    cache = ChunkCache(str(tmp_path), 1 << 20)
    where = lambda fs: cache.bind(fs).where("bucket/store/commits/a.json")  # noqa: E731
    aws = where(SimpleNamespace(protocol=("s3", "s3a"), endpoint_url=None))
    minio = where(SimpleNamespace(protocol=("s3", "s3a"), endpoint_url="http://minio:9000"))
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://minio:9000")
    from_env = where(SimpleNamespace(protocol=("s3", "s3a"), endpoint_url=None))
    assert aws != minio == from_env and aws.startswith(str(tmp_path / "objects" / "s3" / "default"))


def test_the_readmes_cluster_commands_on_cpu(tmp_path, s3_env):
    """The README's two cluster commands as written but for the machine: torchrun (two CPU
    processes, standalone) extracting into s3:// on moto's server, then train-head from the
    URL through FLOWCLIP_CHUNK_CACHE; the store equals a one-process extract on a disk."""
    from flowclip_cache.synthetic.sample import make_sample

    s = make_sample(str(tmp_path / "sample"), n_images=8)
    url = f"s3://{s3_env}/stores/vitb32"
    env = {**os.environ, "PYTHONPATH": ROOT, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env["FLOWCLIP_CHUNK_CACHE"] = str(tmp_path / "chunks")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    extract = [*torchrun, "-m", "flowclip_cache", *extract_args(s, url, "--image-unit", "2", "--device", "cpu")]
    p = subprocess.run(extract, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    env["FLOWCLIP_CHUNK_CACHE_SIZE"] = "200M"
    train = [sys.executable, "-m", "flowclip_cache", "train-head", "--store", url, "--train", s["training"],
             "--out", str(tmp_path / "runs" / "flow_s0"), "--epochs", "1", "--quiet"]  # fmt: skip
    p = subprocess.run(train, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert os.path.exists(tmp_path / "runs" / "flow_s0" / "head.safetensors")
    disk = str(tmp_path / "disk")
    invoke(*extract_args(s, disk, "--image-unit", "2", "--device", "cpu"))
    cache = ChunkCache(str(tmp_path / "chunks"), 200 << 20)
    assert_same_bits(FeatureStore(url, cache=cache), FeatureStore(disk))
    writers = {p.split("/.w-")[1].split("/")[0] for p in s3fs_listing(s3_env, "stores/vitb32/segments/")}
    assert len(writers) == 2  # both ranks wrote segments


def s3fs_listing(bucket: str, prefix: str) -> list[str]:
    import boto3

    pages = boto3.client("s3").get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def test_a_killed_fetchs_temporary_is_swept_a_live_ones_kept(tmp_path):
    url = memory_url()
    s = FeatureStore.open_or_create(url, config(), cache=ChunkCache(str(tmp_path / "w"), 1 << 30))
    write_images(s, keys("i-", 3), np.random.default_rng(0))
    s.release_writer()
    tmp = tmp_path / "c" / "tmp"
    tmp.mkdir(parents=True)
    (tmp / "dead").write_bytes(b"x" * 10)
    (tmp / "live").write_bytes(b"x" * 10)
    os.utime(tmp / "dead", (time.time() - 7200, time.time() - 7200))  # two hours old
    FeatureStore(url, cache=ChunkCache(str(tmp_path / "c"), 1 << 30)).load_images(keys("i-", 3))
    assert sorted(os.listdir(tmp)) == ["live"]


def test_a_study_runs_from_a_store_at_a_url(tmp_path, sample, chunk_cache):
    """`flowclip run ablation store=URL`: its dry run checks the store at the URL, and the
    study trains and scores from it."""
    import shutil

    url = memory_url()
    invoke("extract", "--store", url, "--model", "flowclip-tiny-vit", "--pretrained", "none",
           "--manifest", sample["training"], "--manifest",
           sample["candidates"], "--image-root", sample["image_root"], "--workers", "0", "--quiet")  # fmt: skip
    evals = tmp_path / "evals"
    evals.mkdir()
    shutil.copy(sample["candidates"], evals / "sample.parquet")
    args = ["run", "ablation", f"store={url}", f"train={sample['training']}", f"eval=[{evals}]",
            f"out={tmp_path}/study", "seeds=[0]", "train_config.epochs=1", "train_config.batch_size=4",
            "bootstrap=0"]  # fmt: skip
    assert "dry run: every check passed" in invoke(*args, "--dry-run")
    invoke(*args, "--quiet")
    summary = json.load(open(tmp_path / "study" / "summary.json"))
    assert summary and os.path.exists(tmp_path / "study" / "score" / "results.json")
