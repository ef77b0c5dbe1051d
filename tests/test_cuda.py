"""The CUDA paths: run where a GPU is present, skipped with a reason elsewhere."""

import os

import pytest
import torch

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device on this machine; these run on a GPU machine"
)


def test_factorised_scorer_on_cuda_matches_cpu():
    import torch.nn.functional as F

    from flowclip_cache.heads import token_scores

    g = torch.Generator().manual_seed(0)
    P = F.normalize(torch.randn(4, 49, 64, generator=g), dim=-1)
    H = F.normalize(torch.randn(6, 10, 64, generator=g), dim=-1)
    mask = torch.ones(6, 10, dtype=torch.bool)
    Mt, W = torch.eye(64) + 0.1 * torch.randn(64, 64, generator=g), 0.1 * torch.randn(64, 64, generator=g)
    torch.backends.cuda.matmul.allow_tf32 = False
    cpu = token_scores(P, H, mask, Mt, W, 0.05)
    gpu = token_scores(*(x.cuda() for x in (P, H, mask, Mt, W)), 0.05).cpu()
    torch.testing.assert_close(gpu, cpu, rtol=1e-4, atol=1e-5)


def test_train_head_on_cuda(tmp_path, tiny_encoder):
    from flowclip_cache.extraction.extract import run_extract
    from flowclip_cache.store import FeatureStore
    from flowclip_cache.synthetic.sample import make_sample
    from flowclip_cache.training.loop import TrainConfig, train_head

    s = make_sample(str(tmp_path / "s"), n_images=24)
    fs = FeatureStore.open_or_create(str(tmp_path / "st"), tiny_encoder.config)
    run_extract(fs, tiny_encoder, [s["training"]], s["image_root"], device="cuda", workers=0, progress=False)
    fs.refresh()
    state = train_head(
        fs,
        s["training"],
        str(tmp_path / "run"),
        TrainConfig(epochs=1, batch_size=8),
        device="cuda",
        progress=False,
        log=lambda *_: None,
    )
    assert state["global_step"] > 0


def test_placements_on_cuda_train_the_same_weights(tmp_path, tiny_encoder):
    """device (features on the GPU), host (pinned, copied ahead on a side stream) and
    store placements give the same weights on CUDA."""
    from safetensors.torch import load_file

    from flowclip_cache.extraction.extract import run_extract
    from flowclip_cache.store import FeatureStore
    from flowclip_cache.synthetic.sample import make_sample
    from flowclip_cache.training.loop import TrainConfig, train_head

    torch.backends.cuda.matmul.allow_tf32 = False
    s = make_sample(str(tmp_path / "s"), n_images=24)
    fs = FeatureStore.open_or_create(str(tmp_path / "st"), tiny_encoder.config)
    run_extract(fs, tiny_encoder, [s["training"]], s["image_root"], workers=0, progress=False)
    fs.refresh()
    out = {}
    for placement in ("device", "host", "store"):
        run = str(tmp_path / placement)
        train_head(
            fs,
            s["training"],
            run,
            TrainConfig(epochs=1, batch_size=8),
            device="cuda",
            placement=placement,
            progress=False,
            log=lambda *_: None,
        )
        out[placement] = load_file(f"{run}/head.safetensors")
    for k in out["device"]:
        assert torch.equal(out["device"][k], out["host"][k]) and torch.equal(out["device"][k], out["store"][k]), k


def test_adapt_on_cuda_fp32_and_bf16(tmp_path, sample):
    """adapt on the GPU: FP32 follows the CPU run's losses; bf16 autocast and gradient
    checkpointing run and stay finite."""
    from flowclip_cache.extraction.encoders import EncoderSpec
    from flowclip_cache.training import checkpoint
    from flowclip_cache.training.adapt import AdaptConfig, run_adapt

    torch.backends.cuda.matmul.allow_tf32 = False
    base = dict(head="flow", batch_size=8, epochs=1, seed=0, lr=1e-3, encoder_lr=1e-5, workers=0)
    losses = {}
    for name, device, extra in (
        ("cpu", "cpu", {}),
        ("cuda", "cuda", {}),
        ("bf16", "cuda", {"precision": "bf16", "grad_checkpointing": True}),
    ):
        out = str(tmp_path / name)
        run_adapt(
            EncoderSpec("flowclip-tiny-vit"),
            sample["training"],
            sample["image_root"],
            out,
            AdaptConfig(**base, **extra),
            device=device,
            progress=False,
            log=lambda *_: None,
        )
        losses[name] = checkpoint.read_state(out)["loss"]
    assert losses["cuda"][0] == pytest.approx(losses["cpu"][0], rel=1e-4)
    assert all(torch.isfinite(torch.tensor(losses["bf16"])))


def test_stacked_runs_and_shared_evaluations_on_cuda(tmp_path, tiny_encoder, monkeypatch):
    """on a GPU: stacked Flow-CLIP and Global-M runs end as their side-by-side runs
    to FP32 round-off with every logged evaluation equal, and runs from the same start (both
    head classes: Flow-CLIP at W = 0 scores as Global-M) share one start evaluation."""
    from safetensors.torch import load_file

    from flowclip_cache.extraction.extract import run_extract
    from flowclip_cache.store import FeatureStore
    from flowclip_cache.synthetic.sample import make_sample
    from flowclip_cache.training import training_data
    from flowclip_cache.training.loop import TrainConfig, train_heads

    torch.backends.cuda.matmul.allow_tf32 = False
    s = make_sample(str(tmp_path / "s"), n_images=32)
    fs = FeatureStore.open_or_create(str(tmp_path / "st"), tiny_encoder.config)
    run_extract(fs, tiny_encoder, [s["training"]], s["image_root"], device="cuda", workers=0, progress=False)
    fs.refresh()
    base = dict(epochs=1, batch_size=8, train_eval_records=16)
    cfgs = [TrainConfig(head="flow", lr=1e-3, cimr=0.1, **base), TrainConfig(head="flow", lr=3e-4, cimr=0.0, **base),
            TrainConfig(head="global", lr=1e-3, **base), TrainConfig(head="global", lr=2e-3, **base)]  # fmt: skip
    calls = []
    real = training_data._pairwise_accuracies  # (calls: one per head computed)
    monkeypatch.setattr(training_data, "_pairwise_accuracies", lambda h, *a: calls.extend([1] * len(h)) or real(h, *a))
    logs = {}
    for stack in (False, True):
        runs = [(str(tmp_path / f"{stack}-{i}"), c) for i, c in enumerate(cfgs)]
        calls.clear()
        train_heads(fs, s["training"], runs, device="cuda", stack=stack, progress=False, log=lambda *_: None)
        assert len(calls) == 2 + 2 * 4  # one start for all four (train sample, val); ends: each run's
        logs[stack] = [(load_file(f"{out}/head.safetensors"), open(f"{out}/log.jsonl").read()) for out, _ in runs]
    for (wa, la), (wb, lb) in zip(logs[False], logs[True]):
        for n in wa:
            torch.testing.assert_close(wa[n], wb[n], rtol=1e-5, atol=1e-6)
        evals = lambda text: [x for x in text.splitlines() if '"eval"' in x]  # noqa: E731
        assert evals(la) == evals(lb)


def test_exact_products_give_the_cpus_bits_and_pairs_their_own_on_cuda(monkeypatch):
    """Exact products are exact: cuBLAS's float64 sums give the CPU's very bits, and a pair
    at every position of its block scores its bits alone on the GPU too (pair_positions)."""
    import pair_positions

    from flowclip_cache.heads import available_kinds
    from flowclip_cache.heads.exact import exact_products

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(300, 512, generator=g), torch.randn(70, 512, generator=g)
    with torch.no_grad(), exact_products():
        assert torch.equal((a.cuda() @ b.cuda().T).cpu(), a @ b.T)
    monkeypatch.setattr(pair_positions, "DEVICE", "cuda")
    assert pair_positions.every_failure(available_kinds()) == []


def test_gpu_decode_is_a_function_of_each_image_and_close_to_the_cpus(tmp_path):
    """--decode gpu: nvJPEG's pixels within a few levels of libjpeg-turbo's, an image's input
    the same bits alone or in a batch, and a store extracted with it on the GPU."""
    from flowclip_cache.extraction.encoders import EncoderSpec, resolve
    from flowclip_cache.extraction.tensor_decode import decode_batch, read_raw, to_inputs
    from flowclip_cache.extraction.worker import extract_units, list_units
    from flowclip_cache.synthetic.sample import make_sample

    s = make_sample(str(tmp_path / "s"), n_images=6, fmt="JPEG", size=160)
    paths = sorted(os.path.join(s["image_root"], n) for n in os.listdir(s["image_root"]))
    raws = [read_raw(p) for p in paths]
    gpu, cpu = decode_batch(raws, "cuda"), decode_batch(raws, "cpu")
    for g, c in zip(gpu, cpu):
        assert g.shape == c.shape and (g.cpu().int() - c.int()).abs().float().mean() < 2
    pre = resolve(EncoderSpec("flowclip-tiny-clip", "synthetic", decode="gpu")).config["preprocess"]
    assert torch.equal(to_inputs(raws[3:4], pre, "cuda")[0], to_inputs(raws, pre, "cuda")[3])
    kw = {"model": "flowclip-tiny-clip", "pretrained": "synthetic", "image_root": s["image_root"], "decode": "gpu"}
    out = str(tmp_path / "g")
    done = extract_units(out, [s["candidates"]], list_units(out, [s["candidates"]], **kw), device="cuda", **kw)
    assert done["images_new"] == 6
