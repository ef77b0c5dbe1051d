"""Released checkpoints in their authors' forms (extraction/released.py): TSVLC's and
DAC's low-rank checkpoints merged as their code applies them, open_clip training
checkpoints read as open_clip reads them, random stand-ins in each form, refusals."""

import json
import os
import pickle

import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner
from conftest import TINY

from flowclip_cache.cli import main
from flowclip_cache.errors import FlowclipError
from flowclip_cache.extraction.released import MERGED_KEY, merge_lora, read_state_dict, tag_settings_of, write_merged


def _lora_layers(gen, r=4):
    """One layer of each kind loralib gives a rank, with their key names: a
    MultiheadAttention's in_proj, a Linear, a Conv2d (kernel 3)."""
    t = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    return {
        "blk.attn.in_proj_weight": t(12, 4), "blk.attn.in_proj_weight_lora_A": t(r, 4),
        "blk.attn.in_proj_weight_lora_B": t(12, r),
        "blk.mlp.c_fc.weight": t(8, 4), "blk.mlp.c_fc.lora_A": t(r, 4), "blk.mlp.c_fc.lora_B": t(8, r),
        "conv1.weight": t(5, 3, 3, 3), "conv1.lora_A": t(r * 3, 3 * 3), "conv1.lora_B": t(5 * 3, r * 3),
        "ln.weight": t(4),
    }  # fmt: skip


def test_merged_weights_compute_what_their_lora_forward_computes():
    """Each merged layer's output equals their forward pass: x W^T + (x A^T B^T) * alpha/r
    for MultiheadAttention's in_proj (loralib multi_head_attention_forward) and Linear, and
    their Conv2d's weight + (B A).view * alpha/r. A scaling of alpha*r, a transposed product
    or a rank read from A's rows for the convolution (r*k) would each fail."""
    gen = torch.Generator().manual_seed(0)
    sd = {k: v.double() for k, v in _lora_layers(gen).items()}
    merged, n = merge_lora(sd)
    assert n == 3 and set(merged) == {"blk.attn.in_proj_weight", "blk.mlp.c_fc.weight", "conv1.weight", "ln.weight"}
    x = torch.randn(6, 4, generator=gen, dtype=torch.float64)
    for w in ("blk.attn.in_proj_weight", "blk.mlp.c_fc.weight"):
        stem = w + "_" if "in_proj" in w else w[: -len("weight")]
        a, b = sd[stem + "lora_A"], sd[stem + "lora_B"]
        theirs = F.linear(x, sd[w]) + F.linear(F.linear(x, a), b) * (1 / 4)
        torch.testing.assert_close(F.linear(x, merged[w]), theirs, rtol=0, atol=1e-12)
    img = torch.randn(2, 3, 7, 7, generator=gen, dtype=torch.float64)
    theirs = F.conv2d(img, sd["conv1.weight"] + (sd["conv1.lora_B"] @ sd["conv1.lora_A"]).view(5, 3, 3, 3) * (1 / 4))
    torch.testing.assert_close(F.conv2d(img, merged["conv1.weight"]), theirs, rtol=0, atol=1e-12)
    assert torch.equal(merged["ln.weight"], sd["ln.weight"])


def test_malformed_low_rank_checkpoints_are_refused():
    gen = torch.Generator().manual_seed(0)
    sd = _lora_layers(gen)
    with pytest.raises(FlowclipError, match="without a lora_A partner"):
        merge_lora({k: v for k, v in sd.items() if k != "conv1.lora_A"})
    with pytest.raises(FlowclipError, match="no blk.mlp.c_fc.lora_B"):
        merge_lora({k: v for k, v in sd.items() if k != "blk.mlp.c_fc.lora_B"})
    with pytest.raises(FlowclipError, match="does not fit the weight"):
        merge_lora(sd | {"blk.mlp.c_fc.lora_B": torch.zeros(9, 4)})
    with pytest.raises(FlowclipError, match="no low-rank deltas"):
        merge_lora({"ln.weight": torch.zeros(4)})


def test_checkpoints_are_read_weights_only(tmp_path):
    """A training checkpoint's state dict, DDP prefix removed; a pickled object is never run."""
    sd = {"a.weight": torch.ones(2)}
    torch.save({"epoch": 5, "name": "x", "state_dict": {"module.a.weight": sd["a.weight"]}}, tmp_path / "t.pt")
    assert torch.equal(read_state_dict(str(tmp_path / "t.pt"))["a.weight"], sd["a.weight"])

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'ran'}",))

    with open(tmp_path / "evil.pt", "wb") as f:
        pickle.dump({"state_dict": Payload()}, f)
    with pytest.raises(FlowclipError, match="weights_only=True"):
        read_state_dict(str(tmp_path / "evil.pt"))
    assert not (tmp_path / "ran").exists()
    torch.save({"state_dict": {"a": 1}}, tmp_path / "n.pt")
    with pytest.raises(FlowclipError, match="no state dict of tensors"):
        read_state_dict(str(tmp_path / "n.pt"))


def test_the_base_tag_sets_activation_and_preprocessing():
    """TSVLC and DAC build their base with load_openai_model: QuickGELU, OpenAI's mean."""
    got = tag_settings_of("ViT-B-32", "openai")
    assert got["quick_gelu"] is True and got["mean"][0] == pytest.approx(0.48145466)
    assert tag_settings_of("ViT-B-32", "none") == {}
    with pytest.raises(FlowclipError, match="no such pretrained tag"):
        tag_settings_of("ViT-B-32", "nonsense")


def _extract(store, weights, sample):
    r = CliRunner().invoke(main, ["extract", "--store", store, "--model", TINY, "--pretrained", weights,
                                  "--manifest", sample["candidates"], "--image-root", sample["image_root"],
                                  "--workers", "0", "--quiet"])  # fmt: skip
    assert r.exit_code == 0, r.output
    from flowclip_cache.store import FeatureStore

    st = FeatureStore(store)
    return st, json.load(open(os.path.join(store, "store.json")))


def test_standins_of_both_forms_extract(tmp_path, sample):
    """The command path: a random stand-in in each released form; the low-rank one merged
    (its provenance recorded), each extracted; their features differ from the base's."""
    run = lambda *a: CliRunner().invoke(main, ["checkpoint", *a])  # noqa: E731
    lora, full, merged = str(tmp_path / "dac.pt"), str(tmp_path / "ce.pt"), str(tmp_path / "dac.safetensors")
    for form, out in (("tsvlc-lora", lora), ("open_clip", full)):
        r = run("standin", "--form", form, "--model", TINY, "--seed", "3", "--out", out)
        assert r.exit_code == 0, r.output
    r = run("merge-lora", lora, "--model", TINY, "--built-as", "none", "--out", merged)
    assert r.exit_code == 0 and "low-rank deltas folded" in r.output, r.output
    from safetensors import safe_open

    with safe_open(merged, "pt") as f:
        meta = json.loads(f.metadata()[MERGED_KEY])
    assert meta["form"] == "tsvlc-lora" and meta["deltas"] > 0 and len(meta["sha256"]) == 64
    r = run("merge-lora", lora, "--model", TINY, "--built-as", "none", "--out", merged)
    assert r.exit_code == 2 and "exists" in r.output  # never replaced
    r = run("merge-lora", full, "--model", TINY, "--built-as", "none", "--out", str(tmp_path / "x.safetensors"))
    assert r.exit_code == 2 and "no low-rank deltas" in r.output and not (tmp_path / "x.safetensors").exists()

    import numpy as np

    glob = {}
    for name, weights in (("base", "none"), ("lora", merged), ("full", full)):
        st, made = _extract(str(tmp_path / f"s-{name}"), weights, sample)
        assert made["encoder"]["weights"]["source"] == ("random-init" if name == "base" else "file")
        keys = sorted(st.keys("img"))
        glob[name] = st.load_images(keys).global_.astype(np.float32)
    for name in ("lora", "full"):  # the stand-ins are the base moved, not the base
        assert np.abs(glob[name] - glob["base"]).max() > 1e-3


def test_merge_refuses_another_architecture(tmp_path):
    from flowclip_cache.extraction.released import write_standin

    src = str(tmp_path / "dac.pt")
    write_standin("tsvlc-lora", TINY, "none", 0, src)
    with pytest.raises(FlowclipError, match="do not fit open_clip's ViT-B-32"):
        write_merged(src, str(tmp_path / "m.safetensors"), "ViT-B-32", "none")
    assert not os.path.exists(tmp_path / "m.safetensors")
