"""The training-free FILIP score (heads/filip_score.py,) against a float64
transcription of its authors' released code (mindspore-lab/mindformers,
mindformers/models/filip/filip.py: FilipImgProcess, FilipTextProcess, FilipLogit as
FilipGather calls it), on random features and on planted ties; then through `flowclip
score`, by name as 'clip' is."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner

from flowclip_cache.cli import main
from flowclip_cache.heads import build_head
from flowclip_cache.heads.fixed_shapes import all_pair_scores, matched_scores

CONTEXT = 12  # the release pads every caption to its context length


def released(image_tokens: np.ndarray, text_tokens: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """FilipLogit's two logits, line by line in float64, logit scale 1 (flowclip leaves the
    positive constant out): image_tokens [I, 1 + N, d] (a CLS first, as the encoder gives
    them), text_tokens[t] [L_t, d] (the valid ones) -> (logits_per_image [I, T],
    logits_per_text [T, I])."""
    img = image_tokens[:, 1:, :]  # FilipImgProcess: the CLS dropped, then each row normalised
    img = img / np.linalg.norm(img, axis=-1, keepdims=True)
    T, d = len(text_tokens), image_tokens.shape[-1]
    txt = np.zeros((T, CONTEXT, d))
    pad_mask = np.zeros((T, CONTEXT), bool)
    for t, tok in enumerate(text_tokens):  # FilipTextProcess: normalised, padding zeroed
        txt[t, : len(tok)] = tok / np.linalg.norm(tok, axis=-1, keepdims=True)
        pad_mask[t, : len(tok)] = True
    I, N, _ = img.shape
    # FilipLogit(): out = rep1 @ rep2^T reshaped [I, N, T, C], max over the text tokens, mean over patches
    out = (img.reshape(-1, d) @ txt.reshape(-1, d).T).reshape(I, N, T, CONTEXT).max(3)
    per_image = out.mean(1)
    # FilipLogit(True): [T, C, I, N], max over patches, summed over tokens, over the valid count
    out = (txt.reshape(-1, d) @ img.reshape(-1, d).T).reshape(T, CONTEXT, I, N).max(3)
    per_text = out.sum(1) / np.clip(pad_mask.sum(1, keepdims=True), 1.0, None)
    return per_image, per_text


def _case(seed=0, I=5, T=7, N=9, d=16):
    rng = np.random.default_rng(seed)
    images = rng.normal(size=(I, 1 + N, d)).astype(np.float32).astype(np.float64)
    texts = [rng.normal(size=(int(rng.integers(2, CONTEXT - 1)), d)).astype(np.float32).astype(np.float64)
             for _ in range(T)]  # fmt: skip
    return images, texts


def _ours(images, texts):
    """Our heads' inputs as the bank gives them: normalised, padding zeroed and masked."""
    P = F.normalize(torch.tensor(images[:, 1:, :], dtype=torch.float32), dim=-1)
    L = max(len(t) for t in texts)
    H = torch.zeros(len(texts), L, images.shape[-1])
    mask = torch.zeros(len(texts), L, dtype=torch.bool)
    for i, t in enumerate(texts):
        H[i, : len(t)] = F.normalize(torch.tensor(t, dtype=torch.float32), dim=-1)
        mask[i, : len(t)] = True
    v, t = P.mean(1), H.sum(1)
    return v, P, t, H, mask


@pytest.mark.parametrize("seed", [0, 1])
def test_both_directions_equal_the_released_logits(seed):
    images, texts = _case(seed)
    per_image, per_text = released(images, texts)
    v, P, t, H, mask = _ours(images, texts)
    with torch.no_grad():
        t2i = all_pair_scores(build_head("filip-score", 16), v, P, t, H, mask).double().numpy()
        i2t = all_pair_scores(build_head("filip-score-i2t", 16), v, P, t, H, mask).double().numpy()
    assert np.abs(t2i - per_text.T).max() < 2e-6 and np.abs(i2t - per_image).max() < 2e-6
    # the release's zeroed padding is a floor at 0 for image to text: planted, a caption
    # pointing away from every patch of image 0 scores exactly 0 there, as in the release
    near_e1 = 0.1 * np.random.default_rng(seed).normal(size=(1, 10, 16))
    near_e1[..., 0] += 5.0  # every patch close to e1
    away = [-np.eye(16)[:2]]  # -e1 and -e2: below 0 against every patch, or near it
    away[0][1] = -near_e1[0, 1:].sum(0)
    per_image, _ = released(near_e1, away)
    v, P, t, H, mask = _ours(near_e1, away)
    with torch.no_grad():
        got = all_pair_scores(build_head("filip-score-i2t", 16), v, P, t, H, mask)[0, 0].item()
    assert per_image[0, 0] == 0.0 and got == 0.0


def test_planted_ties_tie_as_in_the_release_and_decisions_match():
    """Candidates that tie exactly in the release (a caption repeated; for image to text, a
    caption with one of its tokens repeated) tie exactly here, in every engine: the tie rule
    decides them, as for every scorer. Mutation checked: taking the max over valid tokens
    only (no 0 floor) fails the floor's case above; summing instead of averaging fails here."""
    from flowclip_cache.scoring.metrics import decisions

    images, texts = _case(3, I=4, T=3)
    texts = [texts[0], texts[0].copy(), np.concatenate([texts[1], texts[1][:1]]), texts[1], texts[2]]
    per_image, per_text = released(images, texts)
    assert per_image[0, 2] == per_image[0, 3] and per_text[0, 0] == per_text[1, 0]  # the planted ties
    v, P, t, H, mask = _ours(images, texts)
    for kind, official in (("filip-score", per_text.T), ("filip-score-i2t", per_image)):
        head = build_head(kind, 16)
        with torch.no_grad():
            grid = all_pair_scores(head, v, P, t, H, mask).numpy()
            pairs = [(i, j) for i in range(4) for j in range(5)]
            a, b = torch.tensor([p[0] for p in pairs]), torch.tensor([p[1] for p in pairs])
            matched = matched_scores(head, v[a], P[a], t[b], H[b], mask[b]).numpy().reshape(4, 5)
        assert grid[0, 0] == grid[0, 1] and matched[0, 0] == matched[0, 1]
        if kind == "filip-score-i2t":
            assert grid[0, 2] == grid[0, 3] and matched[0, 2] == matched[0, 3]
        # records: gold caption 0 against each other caption, per image; ties wrong (strict >)
        gold = np.zeros(4, np.int64)
        for scores in (grid, matched):
            ours = decisions(scores[:, [0, 1, 2]], gold, "wrong")[0]
            theirs = decisions(official[:, [0, 1, 2]], gold, "wrong")[0]
            assert (ours == theirs).all() and not ours.any()  # caption 1 ties caption 0: never right


def test_flowclip_score_takes_them_by_name(lab, tmp_path):
    r = CliRunner().invoke(main, ["score", "--store", lab["store"], "--manifests", lab["candidates"], "--scorer",
                                  "clip", "--scorer", "filip-score", "--scorer", "local=filip-score-i2t", "--out",
                                  str(tmp_path / "s"), "--bootstrap", "0", "--quiet"])  # fmt: skip
    assert r.exit_code == 0, r.output
    import json

    res = json.load(open(tmp_path / "s" / "results.json"))
    assert {"real|clip", "real|filip-score", "real|local"} <= set(res["results"])
    kinds = {s["run"]: (s["kind"], s["head_sha256"]) for s in res["scorers"]}
    assert kinds["filip-score"] == ("filip-score", "frozen") and kinds["local"] == ("filip-score-i2t", "frozen")
