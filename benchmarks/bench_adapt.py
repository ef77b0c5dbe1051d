"""An adapt step vs a bare open_clip forward + backward of the same batch with the same
losses, side by side in one run (target: ratio >= 0.9).

    python benchmarks/bench_adapt.py [--model ViT-B-32] [--batch 16] [--repeats 3]

Both sides: the same preprocessed images and captions, random weights, the Flow-CLIP
head, HNB + CIMR, backward, gradient clipping and an AdamW step. flowclip's side is
adapt.step (gathering, the shared feature definitions, its text batch cut to the
longest caption); the bare side runs open_clip's own output_tokens path and the text
tower at the full context. Decoding is outside both (DataLoader workers overlap it).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch
import torch.nn.functional as F

from flowclip_cache.adapt import AdaptConfig, Adapted, _Images, read_records, step
from flowclip_cache.encoders import EncoderSpec, load_model, resolve
from flowclip_cache.losses import batch_loss
from flowclip_cache.ranks import Ranks
from flowclip_cache.sample import make_sample
from flowclip_cache.train import epoch_order


def bare_step(model, head, opt, params, x, ids, img, pos, neg, cfg):
    """open_clip's own APIs: visual tokens (output_tokens), the text tower at full context."""
    visual = model.visual
    visual.output_tokens = True
    pooled, tokens = visual(x)
    visual.output_tokens = False
    v, P = F.normalize(pooled, dim=-1), F.normalize(tokens @ visual.proj, dim=-1)
    h = (
        model.ln_final(
            model.transformer(model.token_embedding(ids) + model.positional_embedding, attn_mask=model.attn_mask)
        )
        @ model.text_projection
    )
    t = F.normalize(h[torch.arange(len(ids)), ids.argmax(-1)], dim=-1)
    loss = batch_loss(head, cfg, img, pos, neg, (v, P, t, F.normalize(h, dim=-1), ids != 0))[0]
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
    opt.step()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="ViT-B-32")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as root:
        s = make_sample(root, n_images=args.batch * 2)
        cfg = AdaptConfig(head="flow", batch_size=args.batch, seed=0, lr=1e-3, encoder_lr=1e-5)
        enc = load_model(resolve(EncoderSpec(args.model)))
        head = cfg.build_head(enc.config["model_cfg"]["embed_dim"])
        model = Adapted(enc, head).train()
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(
            [
                {"params": list(enc.model.parameters()), "lr": cfg.encoder_lr},
                {"params": list(head.parameters()), "lr": cfg.lr},
            ]
        )
        recs = read_records(s["training"], s["image_root"])
        order, pick = epoch_order(np.nonzero(recs.split == "train")[0], recs.rec_neg, 0, 0, "cpu")
        glob = order[: args.batch]
        x = torch.stack([_Images(recs, enc.preprocess)[int(r)] for r in glob])
        img, pos, neg = recs.rec_image[glob], recs.rec_pos[glob], recs.rec_neg[glob, pick[glob]]
        ids = enc.tokenizer([recs.texts[int(i)] for i in torch.cat([pos, neg])])
        ours = lambda: step(model, model, opt, params, recs, glob, glob, x, pick, cfg, Ranks(), "cpu", "nonpad")
        bare = lambda: bare_step(enc.model, head, opt, params, x, ids, img, pos, neg, cfg)
        best = {"ours": float("inf"), "bare": float("inf")}
        for i in range(args.repeats + 1):  # the first round warms up
            for name, fn in (("bare", bare), ("ours", ours)):
                t = time.perf_counter()
                fn()
                if i:
                    best[name] = min(best[name], time.perf_counter() - t)
        print(
            f"# {args.model}, random weights, flow head, batch {args.batch} records ({2 * args.batch} captions), "
            f"best of {args.repeats}, torch threads {torch.get_num_threads()}"
        )
        print(
            f"adapt step: flowclip {best['ours']:.2f} s | bare open_clip {best['bare']:.2f} s | ratio "
            f"{best['bare'] / best['ours']:.2f} (target >= 0.9)"
        )


if __name__ == "__main__":
    main()
