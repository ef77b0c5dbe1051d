import os

os.environ["HF_HUB_OFFLINE"] = "1"          # the suite never downloads
os.environ.setdefault("TQDM_DISABLE", "1")

import pytest  # noqa: E402

from flowclip_cache.encoders import EncoderSpec, load_model, register_package_configs, resolve  # noqa: E402

register_package_configs()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the official benchmark files (never copied into the repository); FLOWCLIP_BENCHMARK_FILES points elsewhere
SHARED_BENCHMARKS = os.environ.get("FLOWCLIP_BENCHMARK_FILES") or os.path.join(ROOT, "..", "shared", "benchmarks")
TINY = "flowclip-tiny-vit"


@pytest.fixture(scope="session")
def tiny_encoder():
    return resolve(EncoderSpec(TINY))


@pytest.fixture(scope="session")
def tiny_model(tiny_encoder):
    return load_model(tiny_encoder)


@pytest.fixture
def sample(tmp_path):
    from flowclip_cache.sample import make_sample
    return make_sample(str(tmp_path / "sample"), n_images=12)


def needs_shared(*parts):
    path = os.path.join(SHARED_BENCHMARKS, *parts)
    return pytest.mark.skipif(not os.path.exists(path),
                              reason=f"official benchmark files not present at {path}; set FLOWCLIP_BENCHMARK_FILES "
                                     f"to the folder holding sugarcrepe/, abc6k/, aro/ (default ../shared/benchmarks)")
