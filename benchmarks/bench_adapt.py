"""An adapt step vs a bare open_clip forward + backward of the same batch with the same
losses, the sides alternated repetition by repetition (target: overhead ratio >= 0.9).

    python benchmarks/bench_adapt.py [--model ViT-B-32] [--batch 16] [--repeats 7] [--device cpu]

Every side: the same preprocessed images and captions, random weights, the Flow-CLIP
head, HNB + CIMR, backward, gradient clipping and an AdamW step. flowclip's side is
adapt.step (gathering, the shared feature definitions, its text batch cut to the longest
caption); the bare sides run open_clip's own output_tokens path and the text tower cut to
the same length (the overhead ratio: bare / flowclip) or at the full context (the gain
the cut brings: bare at 77 / bare cut), two lines, each the median of the per-repetition
ratios with its min-max. Decoding is outside all (DataLoader workers overlap it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch
import torch.nn.functional as F

from flowclip_cache.extraction.encoders import EncoderSpec, load_model, resolve
from flowclip_cache.synthetic.sample import make_sample
from flowclip_cache.training.adapt import AdaptConfig, Adapted, _Images, read_records, step
from flowclip_cache.training.loop import epoch_order
from flowclip_cache.training.losses import batch_loss
from flowclip_cache.training.ranks import Ranks

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import alternate, ratio  # noqa: E402


def bare_step(model, head, opt, params, x, ids, img, pos, neg, cfg):
    """open_clip's own APIs: visual tokens (output_tokens), the text tower at the ids' width
    (the full context, or cut to the longest caption: its causal mask cut alike)."""
    L = ids.shape[1]
    visual = model.visual
    visual.output_tokens = True
    pooled, tokens = visual(x)
    visual.output_tokens = False
    v, P = F.normalize(pooled, dim=-1), F.normalize(tokens @ visual.proj, dim=-1)
    h = (
        model.ln_final(
            model.transformer(
                model.token_embedding(ids) + model.positional_embedding[:L], attn_mask=model.attn_mask[:L, :L]
            )
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
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    dev = args.device
    with tempfile.TemporaryDirectory() as root:
        s = make_sample(root, n_images=args.batch * 2)
        cfg = AdaptConfig(head="flow", batch_size=args.batch, seed=0, lr=1e-3, encoder_lr=1e-5)
        enc = load_model(resolve(EncoderSpec(args.model)), dev)
        head = cfg.build_head(enc.config["model_cfg"]["embed_dim"]).to(dev)
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
        x = torch.stack([_Images(recs, enc.preprocess)[int(r)] for r in glob]).to(dev)
        img, pos, neg = recs.rec_image[glob], recs.rec_pos[glob], recs.rec_neg[glob, pick[glob]]
        ids = enc.tokenizer([recs.texts[int(i)] for i in torch.cat([pos, neg])])
        img, pos, neg, ids = img.to(dev), pos.to(dev), neg.to(dev), ids.to(dev)
        cut = ids[:, : int((ids != 0).sum(1).max())]
        sides = {
            "ours": lambda: step(model, model, opt, params, recs, glob, glob, x, pick, cfg, Ranks(), dev, "nonpad"),
            "bare_cut": lambda: bare_step(enc.model, head, opt, params, x, cut, img, pos, neg, cfg),
            "bare_full": lambda: bare_step(enc.model, head, opt, params, x, ids, img, pos, neg, cfg),
        }
        t = alternate(sides, args.repeats)
        med = {k: statistics.median(v) for k, v in t.items()}
        print(
            f"# {args.model}, random weights, flow head, batch {args.batch} records ({2 * args.batch} captions, "
            f"longest {cut.shape[1]} of {ids.shape[1]} tokens), {args.repeats} alternated repetitions, {dev}, "
            f"torch threads {torch.get_num_threads()}"
        )
        r, lo, hi = ratio(t["bare_cut"], t["ours"])
        print(
            f"adapt step: flowclip {med['ours']:.2f} s | bare open_clip, same cut {med['bare_cut']:.2f} s | "
            f"overhead ratio {r:.2f} [{lo:.2f}, {hi:.2f}] (bare / flowclip, target >= 0.9)"
        )
        r, lo, hi = ratio(t["bare_full"], t["bare_cut"])
        print(
            f"text cut  : bare at {ids.shape[1]} tokens {med['bare_full']:.2f} s | bare cut {med['bare_cut']:.2f} s | "
            f"gain {r:.2f} [{lo:.2f}, {hi:.2f}] (full / cut)"
        )


if __name__ == "__main__":
    main()
