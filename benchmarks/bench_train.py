"""Training speed: factorised vs direct scorer, and cached features vs encoding in the loop.

    python benchmarks/bench_train.py [--steps 7] [--encode-steps 3] [--device cpu]

d = 512, N = 49 patches, ~16-token captions, batch 32 records x 64 candidates (ViT-B/32 shapes).
Each comparison alternates its two sides step by step (ABAB: --steps pairs, --encode-steps
for encoding in the loop); each ratio is the median of the per-pair ratios with their
min-max.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import torch.nn.functional as F

from flowclip_cache.heads import build_head
from flowclip_cache.training.losses import cimr_loss, donor_map, hnb_loss

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import abab  # noqa: E402

B, N, D, L = 32, 49, 512, 16


def batch(g, device):
    v = F.normalize(torch.randn(B, D, generator=g), dim=-1).to(device)
    P = F.normalize(torch.randn(B, N, D, generator=g), dim=-1).to(device)
    t = F.normalize(torch.randn(2 * B, D, generator=g), dim=-1).to(device)
    H = F.normalize(torch.randn(2 * B, L, D, generator=g), dim=-1).to(device)
    lengths = torch.randint(10, L + 1, (2 * B,), generator=g)
    mask = (torch.arange(L)[None] < lengths[:, None]).to(device)
    return v, P, t, H, mask


def step(head, opt, feats, direct):
    ids = torch.arange(B, device=feats[0].device)
    S = head.forward_terms(*feats, direct=direct)[0]
    loss = hnb_loss(S, 0.01, ids, ids, ids + B) + 0.1 * cimr_loss(S, 0.01, donor_map(ids))
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
    opt.step()


def saved_bytes(head, feats, direct):
    """Bytes autograd keeps for backward in one step: the step's activation memory."""
    total = [0]

    def pack(t):
        total[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        S = head.forward_terms(*feats, direct=direct)[0]
    del S
    return total[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=7)
    ap.add_argument("--encode-steps", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    dev = args.device
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    feats = batch(g, dev)
    head = build_head("flow", D).to(dev)
    with torch.no_grad():  # a trained-looking head, so W is not zero
        head.W.normal_(0, 0.02)
        head.M_tok.add_(torch.randn(D, D, generator=g).to(dev) * 0.01)
    opt = torch.optim.AdamW(head.parameters(), lr=8e-5)
    print(
        f"# d={D}, N={N}, L<={L}, batch {B} records x {2 * B} candidates, device {dev}, "
        f"torch threads {torch.get_num_threads()}"
    )
    fast, direct = lambda: step(head, opt, feats, False), lambda: step(head, opt, feats, True)
    t_fast, t_direct, med, lo, hi = abab(fast, direct, args.steps)
    print(
        f"train step : factorised {t_fast * 1e3:8.1f} ms | direct {t_direct * 1e3:8.1f} ms | "
        f"speed-up {med:.1f}x [{lo:.1f}, {hi:.1f}] (target >= 4x; {args.steps} alternated pairs)"
    )
    mb_fast, mb_direct = saved_bytes(head, feats, False) / 2**20, saved_bytes(head, feats, True) / 2**20
    print(
        f"step memory: factorised {mb_fast:8.1f} MiB | direct {mb_direct:8.1f} MiB of tensors saved for "
        f"backward; process peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
    )
    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()
        step(head, opt, feats, False)
        print(f"cuda peak  : factorised step {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB allocated")

    # cached features vs encoding inside the loop (random-weight ViT-B-32, same scorer)
    from flowclip_cache.extraction.encoders import EncoderSpec, load_model, resolve
    from flowclip_cache.extraction.features import encode_images, encode_texts

    model = load_model(resolve(EncoderSpec("ViT-B-32")), dev)
    images = torch.randn(B, 3, 224, 224, generator=g).to(dev)
    caps = model.tokenize(["a photo of a small red cube to the left of a large blue sphere on the table"] * (2 * B)).to(
        dev
    )

    def encoding_step():
        with torch.no_grad():
            v, P = encode_images(model, images)
            f = encode_texts(model, caps)
        step(head, opt, (v, P, f.sentence, f.tokens, f.mask), False)

    # the cached side as train-head runs it: FP16 tensors in memory, batches by indexing
    import numpy as np

    from flowclip_cache.store.banks import FeatureBank
    from flowclip_cache.training.training_data import TrainingData

    R = 1024
    lengths = torch.randint(10, L + 1, (2 * R,), generator=g)
    offsets = torch.zeros(2 * R + 1, dtype=torch.long)
    offsets[1:] = lengths.cumsum(0)
    half = lambda *shape: F.normalize(torch.randn(*shape, generator=g), dim=-1).half().to(dev)
    data = TrainingData(
        FeatureBank(half(R, D), half(R, N, D), half(2 * R, D), half(int(offsets[-1]), D), offsets.to(dev)),
        torch.arange(R, device=dev),
        torch.arange(R, device=dev),
        torch.arange(R, 2 * R, device=dev)[:, None],
        [[""]] * R,
        np.array(["train"] * R),
    )
    order = torch.randperm(R, generator=g).to(dev)
    it = iter(range(10**9))

    def cached_step():
        rec = order[(next(it) * B) % (R - B) :][:B]
        img = data.rec_image[rec]
        caps = torch.cat([data.rec_pos[rec], data.rec_neg[rec, 0]])
        step(head, opt, data.features(img, caps, True), False)

    t_cached, t_enc, med, lo, hi = abab(cached_step, encoding_step, args.encode_steps)
    print(
        f"epoch      : from cache {t_cached * 1e3:8.1f} ms/step | encoding in the loop {t_enc * 1e3:8.1f} ms/step | "
        f"ratio {med:.1f}x [{lo:.1f}, {hi:.1f}] (target >= 10x; both run the same steps, so an epoch's ratio "
        f"is this; {args.encode_steps} alternated pairs)"
    )


if __name__ == "__main__":
    main()
