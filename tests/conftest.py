import os
import socket
import uuid

os.environ["HF_HUB_OFFLINE"] = "1"  # the suite never downloads
os.environ.setdefault("TQDM_DISABLE", "1")
# Under pytest-xdist, each worker gets its share of the cores as intra-op threads (before
# torch is imported): two workers of two threads on two cores oversubscribe them (OpenMP
# waits spin), which more than doubled the slowest tests in CI. Subprocesses inherit it.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _share = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ.setdefault("OMP_NUM_THREADS", str(_share))

import pytest  # noqa: E402

from flowclip_cache.extraction.encoders import EncoderSpec, load_model, register_package_configs, resolve  # noqa: E402

register_package_configs()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the official benchmark files (never copied into the repository); FLOWCLIP_BENCHMARK_FILES points elsewhere
SHARED_BENCHMARKS = os.environ.get("FLOWCLIP_BENCHMARK_FILES") or os.path.join(ROOT, "..", "shared", "benchmarks")
TINY = "flowclip-tiny-vit"


@pytest.fixture(autouse=True)
def registry():
    """Each test starts with the built-in heads only (plug-ins register process-wide)."""
    from flowclip_cache.heads import REGISTRY, plugins

    before, files = dict(REGISTRY), dict(plugins._files)
    yield
    REGISTRY.clear()
    REGISTRY.update(before)
    plugins._files.clear()
    plugins._files.update(files)
    plugins.allow_changed(False)


@pytest.fixture(scope="session")
def tiny_encoder():
    return resolve(EncoderSpec(TINY))


@pytest.fixture(scope="session")
def tiny_model(tiny_encoder):
    return load_model(tiny_encoder)


@pytest.fixture
def sample(tmp_path):
    from flowclip_cache.synthetic.sample import make_sample

    return make_sample(str(tmp_path / "sample"), n_images=12)


def doc_examples(doc: str) -> dict[str, list[tuple[str, str]]]:
    """name -> [(language, code)] of each <!-- example: name --> ... <!-- end example --> block
    in docs/DOC (a block whose first line is `# file: NAME` is a file to save, not to run)."""
    import re

    text = open(os.path.join(ROOT, "docs", doc)).read()
    out = {}
    for name, body in re.findall(r"<!-- example: ([\w-]+) -->(.*?)<!-- end example -->", text, re.S):
        out[name] = re.findall(r"```(\w+)\n(.*?)```", body, re.S)
    return out


def doc_file(doc: str, example: str, name: str) -> str:
    """The `# file: NAME` block of an example in docs/DOC (a file the example saves)."""
    return next(code for _, code in doc_examples(doc)[example] if code.startswith(f"# file: {name}"))


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    """The sample (16 generated images, a candidate set, a training manifest) extracted with
    the tiny CLIP (random weights) once for the session: tests read it, never write to it."""
    from click.testing import CliRunner

    from flowclip_cache.cli import main
    from flowclip_cache.synthetic.sample import make_sample

    root = tmp_path_factory.mktemp("sample-store")
    s = make_sample(str(root / "sample"), n_images=16)
    r = CliRunner().invoke(
        main,
        ["extract", "--store", str(root / "store"), "--model", "flowclip-tiny-clip", "--pretrained", "none",
                                   "--manifest", s["candidates"],
         "--manifest", s["training"], "--image-root", s["image_root"], "--quiet"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    return {"root": root, "store": str(root / "store"), **s}


def assert_refused(result, *words):
    """A CliRunner result refused as every command refuses: exit 2, one line holding each word."""
    assert result.exit_code == 2, result.output
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    for w in words:
        assert w in lines[0], lines[0]


def needs_shared(*parts):
    path = os.path.join(SHARED_BENCHMARKS, *parts)
    return pytest.mark.skipif(
        not os.path.exists(path),
        reason=f"official benchmark files not present at {path}; set FLOWCLIP_BENCHMARK_FILES "
        f"to the folder holding sugarcrepe/, abc6k/, aro/ (default ../shared/benchmarks)",
    )


# -- Hugging Face families, built offline (extraction/families/offline.py) ------------------
@pytest.fixture(scope="session")
def siglip_tokenizer(tmp_path_factory):
    pytest.importorskip("transformers", reason="the SigLIP family needs transformers (pip install 'flowclip[hf]')")
    from flowclip_cache.extraction.families.offline import siglip_like_tokenizer

    return siglip_like_tokenizer(str(tmp_path_factory.mktemp("siglip-tokenizer")))


@pytest.fixture(scope="session")
def blip_folder(tmp_path_factory):
    pytest.importorskip("transformers", reason="the BLIP family needs transformers (pip install 'flowclip[hf]')")
    from flowclip_cache.extraction.families.offline import blip_folder as make

    return make(str(tmp_path_factory.mktemp("blip")))


# -- a real S3-compatible server on the loopback address (moto's; no mocked client) ----------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def s3_server():
    pytest.importorskip("s3fs", reason="s3fs is not installed (pip install 'flowclip[cloud]')")
    server_mod = pytest.importorskip("moto.server", reason="moto's server is not installed (the test extra has it)")
    port = free_port()
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    """Credentials and endpoint the way a user gives them: the environment, read by the
    storage library (never a flowclip flag)."""
    import boto3

    for k, v in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": s3_server,
        "FSSPEC_S3_ENDPOINT_URL": s3_server,
    }.items():
        monkeypatch.setenv(k, v)
    bucket = f"flowclip-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1").create_bucket(Bucket=bucket)
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    return bucket
