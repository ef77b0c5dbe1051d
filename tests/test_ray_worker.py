"""The worker under Ray (docs/scale.md): a Ray task per share of the units, one task killed
after its first commit and retried by Ray, and the same call in Ray Data's `map_batches`;
each store equals a one-process extract's bit for bit. Ray is a test extra; where it cannot
be imported the test says so."""

from __future__ import annotations

import os

import pytest
from test_worker import same_store

from flowclip_cache.extraction.worker import extract_units, list_units
from flowclip_cache.store import FeatureStore

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'flowclip[test]' brings it)")

KW = {"model": "flowclip-tiny-clip", "pretrained": "synthetic", "image_unit": 4, "caption_unit": 8}


@pytest.fixture(scope="module")
def ray_local():
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=80 * 2**20,
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1", "PYTHONPATH": os.path.dirname(__file__)}})  # fmt: skip
    # PYTHONPATH: Ray's workers import this module to find the task's function
    yield ray
    ray.shutdown()


def _encode_or_die(store, manifests, share, image_root, first_try_marker):
    """A Ray task's body: on its first try (no marker yet) the process dies right after its
    first commit, as a preempted node's task does; Ray runs it again."""
    if first_try_marker and not os.path.exists(first_try_marker):
        open(first_try_marker, "w").close()
        real = FeatureStore.write_segment

        def die_after(self, *a, **k):
            real(self, *a, **k)
            os._exit(137)

        FeatureStore.write_segment = die_after  # this worker process only, and it dies
    return extract_units(store, manifests, share, image_root=image_root, **KW)


def test_ray_tasks_with_a_killed_and_retried_one_and_ray_data_give_one_process_store(ray_local, tmp_path):
    from flowclip_cache.manifest import Manifest
    from flowclip_cache.synthetic.sample import make_sample

    s = make_sample(str(tmp_path / "sample"), n_images=10)
    manifests, root = [s["candidates"]], s["image_root"]
    one = str(tmp_path / "one")
    extract_units(one, manifests, list_units(one, manifests, image_root=root, **KW), image_root=root, **KW)
    texts = sorted({t for cs in Manifest.read(s["candidates"]).table.column("captions").to_pylist() for t in cs})

    tasks = str(tmp_path / "tasks")
    units = list_units(tasks, manifests, image_root=root, **KW)
    images = [u for u in units if u.startswith("image-")]
    assert len(images) == 3  # 10 images in units of 4: the killed task has work after its first commit
    encode = ray.remote(max_retries=2)(_encode_or_die)
    marker = str(tmp_path / "image-task-tried")
    done = ray.get([encode.remote(tasks, manifests, images, root, marker),
                    encode.remote(tasks, manifests, [u for u in units if u not in images], root, None)])  # fmt: skip
    assert os.path.exists(marker)  # the image task did die once
    assert done[0]["images_new"] == 10 - 4  # its retry found the first unit committed
    assert list_units(tasks, manifests, image_root=root, **KW) == []
    same_store(FeatureStore(one), FeatureStore(tasks), s["candidates"])

    data = str(tmp_path / "data")
    units = list_units(data, manifests, image_root=root, **KW)

    def encode_batch(batch):
        out = extract_units(data, manifests, list(batch["unit"]), image_root=root, **KW)
        return {"images_new": [out["images_new"]], "captions_new": [out["captions_new"]]}

    counts = ray.data.from_items([{"unit": u} for u in units]).map_batches(encode_batch, batch_size=2).take_all()
    assert sum(c["images_new"] for c in counts) == 10 and sum(c["captions_new"] for c in counts) == len(texts)
    same_store(FeatureStore(one), FeatureStore(data), s["candidates"])
