"""The Flow-CLIP score: factorised == direct (scores and gradients), masks, init."""

import math

import pytest
import torch
import torch.nn.functional as F

from flowclip_cache.heads import build_head, flow, global_scores, token_scores, token_scores_direct
from flowclip_cache.heads.flow import _token_scores_autograd, _token_scores_inference

# the two exact factorised implementations: scoring's inference kernel, training's autograd layout
IMPLS = pytest.mark.parametrize("impl", [_token_scores_inference, _token_scores_autograd], ids=["kernel", "autograd"])


def case(I=3, T=4, L=6, N=7, d=16, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    P = F.normalize(torch.randn(I, N, d, generator=g, dtype=dtype), dim=-1)
    H = F.normalize(torch.randn(T, L, d, generator=g, dtype=dtype), dim=-1)
    mask = torch.ones(T, L, dtype=torch.bool)
    mask[0, min(4, L) :] = False
    mask[min(1, T - 1), 1:] = False  # a caption of one valid token
    M_tok = torch.eye(d, dtype=dtype) + 0.3 * torch.randn(d, d, generator=g, dtype=dtype)
    W = 0.5 * torch.randn(d, d, generator=g, dtype=dtype)
    return P, H, mask, M_tok, W


def test_parameter_count_vit_b32():
    assert sum(p.numel() for p in build_head("flow", 512).parameters()) == 786_432
    assert sum(p.numel() for p in build_head("global", 512).parameters()) == 512 * 512
    assert sum(p.numel() for p in build_head("clip", 512).parameters()) == 0


@IMPLS
@pytest.mark.parametrize("tau_p", [0.05, 0.5])
def test_factorised_equals_direct(tau_p, impl):
    P, H, mask, M_tok, W = case()
    fast = impl(P, H, mask, M_tok, W, tau_p)
    ref = token_scores_direct(P, H, mask, M_tok, W, tau_p)
    assert fast.shape == (3, 4)
    torch.testing.assert_close(fast, ref, rtol=1e-5, atol=1e-6)
    assert ref.abs().max() > 1e-3  # the case is not trivially zero


def test_gradients_agree_fp32():
    P, H, mask, M_tok, W = case()
    grads = []
    for fn in (token_scores, token_scores_direct):
        Mt, Wp = M_tok.clone().requires_grad_(), W.clone().requires_grad_()
        weights = torch.linspace(-1, 1, 12).reshape(3, 4)
        (fn(P, H, mask, Mt, Wp, 0.05) * weights).sum().backward()
        grads.append((Mt.grad, Wp.grad))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_gradcheck_float64():
    P, H, mask, M_tok, W = case(I=2, T=2, L=3, N=4, d=5, dtype=torch.float64)
    P.requires_grad_()
    H.requires_grad_()
    M_tok.requires_grad_()
    W.requires_grad_()
    assert torch.autograd.gradcheck(lambda p, h, m, w: token_scores(p, h, mask, m, w, 0.1), (P, H, M_tok, W))


@IMPLS
def test_masked_tokens_change_nothing(impl):
    P, H, mask, M_tok, W = case()
    H2 = H.clone()
    H2[~mask] = torch.randn(int((~mask).sum()), H.shape[-1])
    torch.testing.assert_close(impl(P, H2, mask, M_tok, W, 0.05), impl(P, H, mask, M_tok, W, 0.05))
    # padding to a longer L changes nothing either
    Hp = torch.cat([H, torch.randn(4, 3, H.shape[-1])], dim=1)
    mp = torch.cat([mask, torch.zeros(4, 3, dtype=torch.bool)], dim=1)
    torch.testing.assert_close(impl(P, Hp, mp, M_tok, W, 0.05), impl(P, H, mask, M_tok, W, 0.05))


def test_the_kernel_in_chunks_equals_one_chunk(monkeypatch):
    """The inference kernel a few images at a time (here one per chunk, and three) against
    one chunk of all: each chunk's own rows of q . pbar and G are taken (a shifted slice fails)."""
    P, H, mask, M_tok, W = case(I=7, T=5)
    whole = _token_scores_inference(P, H, mask, M_tok, W, 0.05)
    for images in (1, 3):
        monkeypatch.setattr(flow, "CHUNK_BYTES", images * 16 * P.shape[1] * H.shape[0] * H.shape[1])
        torch.testing.assert_close(_token_scores_inference(P, H, mask, M_tok, W, 0.05), whole, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(whole, token_scores_direct(P, H, mask, M_tok, W, 0.05), rtol=1e-5, atol=1e-6)


def test_token_scores_takes_the_kernel_only_without_autograd(monkeypatch):
    """Scoring (no tensor needs a gradient, or no_grad) runs the kernel; training, whose
    parameters need gradients, and matched pairs run the autograd layout."""
    P, H, mask, M_tok, W = case(I=4, T=4)
    took = []
    for name in ("_token_scores_inference", "_token_scores_autograd"):
        real = getattr(flow, name)
        monkeypatch.setattr(flow, name, lambda *a, _r=real, _n=name: took.append(_n) or _r(*a))
    token_scores(P, H, mask, M_tok, W, 0.05)
    Wg = W.clone().requires_grad_()
    token_scores(P, H, mask, M_tok, Wg, 0.05).sum().backward()
    with torch.no_grad():
        token_scores(P, H, mask, M_tok, Wg, 0.05)
    token_scores(P, H, mask, M_tok, W, 0.05, paired=True)
    kernel, autograd = "_token_scores_inference", "_token_scores_autograd"
    assert took == [kernel, autograd, kernel, autograd]
    assert Wg.grad is not None and Wg.grad.abs().sum() > 0


@IMPLS
def test_one_token_caption_by_hand(impl):
    """One valid token, written out without any of the library's helpers."""
    P, H, mask, M_tok, W = case(I=1, T=1, L=1, N=3, d=4)
    tau = 0.1
    q = M_tok @ H[0, 0]
    q = q / q.norm()
    p = P[0]
    a = torch.softmax(p @ q / tau, 0)
    c = (a[:, None] * (p - p.mean(0))).sum(0)
    r = c - (q @ c) * q
    qr = q + W @ r
    qr = qr / qr.norm()
    E = lambda x: tau * math.log(sum(math.exp(float(x @ pj) / tau) for pj in p) / 3)
    want = E(qr) - E(q)
    assert abs(impl(P, H, mask, M_tok, W, tau).item() - want) < 1e-5


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_matched_pairs_equal_direct(dtype):
    """Matched pairs pair by pair (what scoring and training's evaluation run without
    autograd) equal the ICER equations as written for all pairs, in float64 to 1e-12;
    every image met by several captions, every caption by several images."""
    P, H, mask, M_tok, W = case(I=3, T=4, dtype=dtype)
    image_of = torch.tensor([0, 1, 2, 0, 2, 1, 1, 0])
    cap_of = torch.tensor([0, 1, 2, 3, 0, 3, 2, 1])
    fast = flow.matched_token_scores(P[image_of], H[cap_of], mask[cap_of], M_tok, W, 0.05)
    want = token_scores_direct(P, H, mask, M_tok, W, 0.05)[image_of, cap_of]
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(fast, want, rtol=tol, atol=tol)
    assert want.abs().min() > 1e-3  # no pair trivially zero


def test_matched_scores_share_an_image_without_changing_a_bit():
    """matched_scores given distinct images and each pair's image index gives the bits it
    gives each pair with its image copied in (the image's parts are computed once)."""
    from flowclip_cache.heads.fixed_shapes import matched_scores

    P, H, mask, M_tok, W = case(I=3, T=4, d=32)
    head = build_head("flow", 32)
    with torch.no_grad():
        head.M_tok.copy_(M_tok)
        head.W.copy_(W)
        v, t = F.normalize(P.mean(1), dim=-1), F.normalize(H.mean(1), dim=-1)
        image_of = torch.tensor([0, 1, 2, 0, 2, 1, 1, 0])
        cap_of = torch.tensor([0, 1, 2, 3, 0, 3, 2, 1])
        caps = (t[cap_of], H[cap_of], mask[cap_of])
        shared = matched_scores(head, v, P, *caps, image_of=image_of)
        copied = matched_scores(head, v[image_of], P[image_of], *caps)
        want = head(v, P, t, H, mask)[image_of, cap_of]
    assert torch.equal(shared, copied)
    torch.testing.assert_close(shared, want, rtol=1e-5, atol=1e-6)


def test_paired_equals_diagonal():
    P, H, mask, M_tok, W = case(I=4, T=4)
    full = token_scores(P, H, mask, M_tok, W, 0.05)
    torch.testing.assert_close(token_scores(P, H, mask, M_tok, W, 0.05, paired=True), full.diagonal())


def test_untrained_head_scores_like_the_encoder():
    P, H, mask, _, _ = case()
    g = torch.Generator().manual_seed(1)
    v = F.normalize(torch.randn(3, 16, generator=g), dim=-1)
    t = F.normalize(torch.randn(4, 16, generator=g), dim=-1)
    clip = build_head("clip", 16)(v, P, t, H, mask)
    torch.testing.assert_close(clip, v @ t.T)
    for kind in ("global", "flow"):
        s = build_head(kind, 16)(v, P, t, H, mask)
        torch.testing.assert_close(s, clip, rtol=0, atol=1e-6)
    s_glob, s_tok = build_head("flow", 16).score_parts(v, P, t, H, mask)
    assert s_tok.abs().max() < 1e-6


def test_flow_clip_at_w_zero_scores_as_global_m_in_every_gateway():
    """with W = 0, ICER's refinement is the identity (q_res = q), so s_token is 0
    by the equations and a Flow-CLIP head is Global-M with its M. Its kernels compute that 0
    only to round-off; scoring's two gateways give it Global-M's very bits (Head.scores_as),
    never under autograd (training differentiates in W) and never once W moves."""
    from flowclip_cache.heads.fixed_shapes import all_pair_scores, matched_scores

    P, H, mask, _, _ = case(I=5, T=6)
    g = torch.Generator().manual_seed(3)
    v, t = (F.normalize(torch.randn(n, 16, generator=g), dim=-1) for n in (5, 6))
    flow_head, global_head = build_head("flow", 16), build_head("global", 16)
    with torch.no_grad():
        M = torch.eye(16) + 0.2 * torch.randn(16, 16, generator=g)
        flow_head.M.copy_(M)
        global_head.M.copy_(M)
        assert flow_head.score_parts(v, P, t, H, mask)[1].abs().max() > 0  # the kernels' round-off
        image_of = torch.arange(6) % 5
        for gateway in (lambda h: all_pair_scores(h, v, P, t, H, mask),
                        lambda h: matched_scores(h, v, P, t, H, mask, image_of=image_of)):  # fmt: skip
            assert torch.equal(gateway(flow_head), gateway(global_head))
        assert type(flow_head.scores_as()).__name__ == "GlobalHead"
        flow_head.W[0, 0] = 1e-3
        assert flow_head.scores_as() is flow_head
    assert build_head("flow", 16).scores_as().kind == "flow"  # autograd on: itself


def test_global_scores_by_hand():
    v = torch.tensor([[1.0, 0.0]])
    t = torch.tensor([[0.6, 0.8]])
    M = torch.tensor([[0.0, 1.0], [1.0, 0.0]])  # swaps the axes: M t = (0.8, 0.6)
    assert global_scores(v, t, M).item() == pytest.approx(0.8)
    assert global_scores(v, t, None).item() == pytest.approx(0.6)


def test_filip_late_interaction_against_loops():
    """The registry's FILIP head against a float64 loop over pairs, tokens and patches."""
    g = torch.Generator().manual_seed(3)
    I, T, L, N, d = 3, 4, 5, 6, 8
    P = F.normalize(torch.randn(I, N, d, generator=g, dtype=torch.float64), dim=-1)
    H = F.normalize(torch.randn(T, L, d, generator=g, dtype=torch.float64), dim=-1)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 0, 0, 0]], dtype=torch.bool)
    head = build_head("filip", d).double()
    with torch.no_grad():
        head.A.add_(0.1 * torch.randn(d, d, generator=g, dtype=torch.float64))
        head.B.add_(0.1 * torch.randn(d, d, generator=g, dtype=torch.float64))
    got = head(None, P, None, H, mask).detach()
    A, B = head.A.detach(), head.B.detach()
    for i in range(I):
        for t in range(T):
            q = [F.normalize(A @ H[t, l], dim=0) for l in range(L) if mask[t, l]]
            p = [F.normalize(B @ P[i, j], dim=0) for j in range(N)]
            t2i = sum(max(float(x @ y) for y in p) for x in q) / len(q)
            i2t = sum(max(float(x @ y) for x in q) for y in p) / len(p)
            assert abs(float(got[i, t]) - 0.5 * (t2i + i2t)) < 1e-12
    idx = torch.arange(T) % I
    paired = head.score_matched(None, P[idx], None, H, mask).detach()
    torch.testing.assert_close(paired, got[idx, torch.arange(T)], rtol=0, atol=1e-12)


def test_labclip_ranks_by_its_linear_map_and_learns_its_temperature():
    """s = v . norm(A t); the loop sees s * tau_c / tau, so HNB's logits are s / tau, and at
    the start (tau = tau_c, A = I) LABCLIP's loss equals Global-M's."""
    from flowclip_cache.training.loop import TrainConfig
    from flowclip_cache.training.losses import batch_loss

    g = torch.Generator().manual_seed(4)
    v = F.normalize(torch.randn(4, 8, generator=g), dim=-1)
    t = F.normalize(torch.randn(8, 8, generator=g), dim=-1)
    img, pos, neg = torch.arange(4), torch.arange(4), torch.arange(4, 8)
    cfg = TrainConfig.from_dict({"head": "labclip", "tau_c": 0.02})
    assert (cfg.batch_size, cfg.lr, cfg.epochs) == (1024, 1e-3, 10)  # its published recipe
    lab, glob = cfg.build_head(8), build_head("global", 8)
    feats = (v, None, t, None, None)
    assert torch.equal(batch_loss(lab, cfg, img, pos, neg, feats)[0], batch_loss(glob, cfg, img, pos, neg, feats)[0])
    with torch.no_grad():
        lab.A.add_(0.3 * torch.randn(8, 8, generator=g))
        lab.log_tau.fill_(math.log(0.05))
    want = v @ F.normalize(t @ lab.A.T, dim=-1).T
    torch.testing.assert_close(lab(v, None, t, None, None), want * (0.02 / 0.05))
    torch.testing.assert_close(lab.score_matched(v, None, t[:4], None, None), torch.diagonal(want) * 0.4)
    loss = batch_loss(lab, cfg, img, pos, neg, feats)[0]
    loss.backward()
    assert lab.log_tau.grad is not None and lab.log_tau.grad != 0  # the temperature learns


def _pairs_case(seed=5, I=2, T=3, L=4, N=9, d=6):
    g = torch.Generator().manual_seed(seed)
    P = F.normalize(torch.randn(I, N, d, generator=g, dtype=torch.float64), dim=-1)
    H = F.normalize(torch.randn(T, L, d, generator=g, dtype=torch.float64), dim=-1)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.bool)
    return g, P, H, mask


def _fsc_released(image_tokens, text_tokens, attn_mask, logit_scale):
    """A float64 transcription (written here, one caption and image at a time) of
    ytaek-oh/fsc-clip's Local_HNLoss.get_per_token_visual_patches (minmax, no sparsify)
    and get_aggregated_local_score: image_tokens [P, D], text_tokens [T, D] un-normalised,
    attn_mask [T] (already without the start token)."""
    sim = [[float(text_tokens[t] @ image_tokens[p]) for p in range(len(image_tokens))] for t in range(len(text_tokens))]
    scores = []
    for t, row in enumerate(sim):
        lo, hi = min(row), max(row)
        w = [(x - lo) / (hi - lo) for x in row]
        w = [x / sum(w) for x in w]
        pooled = sum(wj * image_tokens[j] for j, wj in enumerate(w))
        pooled = pooled / pooled.norm()
        txt = text_tokens[t] / text_tokens[t].norm()
        if attn_mask[t]:
            scores.append(logit_scale * float(pooled @ txt))
    return math.log(sum(math.exp(s) for s in scores))


def test_fsc_local_score_is_the_released_function():
    """Against the transcription of FSC-CLIP's released code with the head's maps applied
    to the states: A h, B p un-normalised; the start token (first valid) dropped, the end
    token kept. Mutations checked: a plain token mean, the old 1/N sparsification, dropping
    no start token: each fails here."""
    from flowclip_cache.heads.fsc_local import LOGIT_SCALE

    g, P, H, mask = _pairs_case()
    head = build_head("fsc-local", 6).double().eval()
    with torch.no_grad():
        head.A.add_(0.2 * torch.randn(6, 6, generator=g, dtype=torch.float64))
        head.B.add_(0.2 * torch.randn(6, 6, generator=g, dtype=torch.float64))
    got = head(None, P, None, H, mask).detach()
    A, B = head.A.detach(), head.B.detach()
    for i in range(2):
        for t in range(3):
            valid = [l for l in range(4) if mask[t, l]]
            fsc_mask = [l != valid[0] for l in valid]  # encode_text: attn_mask[:, 0] = 0
            want = _fsc_released(P[i] @ B.T, H[t, valid] @ A.T, fsc_mask, LOGIT_SCALE)
            assert abs(float(got[i, t]) - want) < 1e-9 * max(1.0, abs(want))
    idx = torch.arange(3) % 2
    torch.testing.assert_close(
        head.score_matched(None, P[idx], None, H, mask).detach(), got[idx, torch.arange(3)], rtol=0, atol=1e-12
    )
    # where all of a token's similarities are equal the released code gives NaN; here uniform weights
    flat = head(None, torch.ones(1, 9, 6, dtype=torch.float64) / 6**0.5, None, H, mask)
    assert torch.isfinite(flat).all()
    # in training the weights pass no gradient (the released .detach()); in eval they do
    head.train()
    Pg = P.clone().requires_grad_(True)
    head(None, Pg, None, H, mask).sum().backward()
    g_train = Pg.grad.clone()
    head.eval()
    Pg.grad = None
    head(None, Pg, None, H, mask).sum().backward()
    assert not torch.allclose(g_train, Pg.grad)


def test_dcsm_score_against_loops():
    g, P, H, mask = _pairs_case()
    head = build_head("dcsm", 6).double()
    got = head(None, P, None, H, mask).detach()
    net = head.net
    for i in range(2):
        for t in range(3):
            valid = [l for l in range(4) if mask[t, l]]
            m = torch.stack([H[t, l] @ P[i].T for l in valid])  # [valid, N]
            z = (m - m.mean()) / m.std(unbiased=False)
            rows = []
            for r in z:  # 3x3 grid -> 7x7 average pooling
                grid = r.reshape(1, 1, 3, 3)
                pooled = F.adaptive_avg_pool2d(grid, 7).reshape(49)
                rows.append(float(net(pooled).detach()))
            assert abs(float(got[i, t]) - sum(rows) / len(rows)) < 1e-10
    idx = torch.arange(3) % 2
    torch.testing.assert_close(
        head.score_matched(None, P[idx], None, H, mask).detach(), got[idx, torch.arange(3)], rtol=0, atol=1e-12
    )


def test_the_kernel_keeps_every_retrieval_decision_on_the_sample(lab):
    """The sample's 16 images against every caption it holds, with a head moved away from
    the identity: the kernel's scores are the autograd layout's to FP32 round-off, and
    every query's ranking is the same (the decisions score made before the kernel)."""
    import numpy as np

    from flowclip_cache.manifest import Manifest
    from flowclip_cache.store import FeatureStore
    from flowclip_cache.store.banks import FeatureBank
    from flowclip_cache.store.manifest_keys import manifest_keys

    store = FeatureStore(lab["store"])
    m = Manifest.read(lab["candidates"])
    caps = sorted({c for cs in m.table.column("captions").to_pylist() for c in cs})
    keys = sorted(set(manifest_keys(store, m, caps, lab["image_root"])))
    bank = FeatureBank.load(store, keys, caps, True, "cpu")
    _, P, _, H, mask = bank.features(torch.arange(len(keys)), torch.arange(len(caps)), True)
    g = torch.Generator().manual_seed(7)
    d = P.shape[-1]
    M_tok, W = torch.eye(d) + 0.2 * torch.randn(d, d, generator=g), 0.3 * torch.randn(d, d, generator=g)
    old = _token_scores_autograd(P, H, mask, M_tok, W, 0.05).numpy()
    new = _token_scores_inference(P, H, mask, M_tok, W, 0.05).numpy()
    assert old.shape == (16, len(caps)) and np.abs(old).max() > 1e-3
    np.testing.assert_allclose(new, old, rtol=1e-5, atol=1e-6)
    assert (np.argsort(-old, 1, kind="stable") == np.argsort(-new, 1, kind="stable")).all()
    assert (np.argsort(-old, 0, kind="stable") == np.argsort(-new, 0, kind="stable")).all()


def test_fsc_local_refuses_a_content_mask_store(sample, tmp_path):
    """A --token-mask content store holds neither the start nor the end token (FSC keeps
    the end token), so FSC-CLIP's released mask cannot be formed: train-head refuses it in
    one line (before, it dropped the first content word and scored a one-word caption
    -inf); a nonpad store trains, and other token heads take either store."""
    from click.testing import CliRunner

    from flowclip_cache.cli import main

    def run(*args):
        return CliRunner().invoke(main, [str(a) for a in args])

    for mask in ("content", "nonpad"):
        r = run("extract", "--store", tmp_path / mask, "--model", "flowclip-tiny-clip", "--pretrained", "none",
                "--token-mask", mask,
                "--manifest", sample["training"], "--image-root", sample["image_root"], "--quiet")  # fmt: skip
        assert r.exit_code == 0, r.output
    train = ["train-head", "--train", sample["training"], "--epochs", "1", "--batch-size", "4", "--quiet"]
    r = run(*train, "--store", tmp_path / "content", "--head", "fsc-local", "--out", tmp_path / "r1")
    last = r.output.strip().splitlines()[-1]  # (after the resolved settings) the refusal, one line
    assert r.exit_code == 2 and "defined on stores extracted with --token-mask nonpad" in last, r.output
    assert "Traceback" not in r.output and not (tmp_path / "r1").exists()
    r = run(*train, "--store", tmp_path / "nonpad", "--head", "fsc-local", "--out", tmp_path / "r2")
    assert r.exit_code == 0, r.output
    r = run(*train, "--store", tmp_path / "content", "--head", "filip", "--out", tmp_path / "r3")
    assert r.exit_code == 0, r.output
    # FILIP's released score reads every token of the caption, start and end included: a content
    # store's scores would differ from it (by up to 0.064), so neither direction scores one under its name
    for kind in ("filip-score", "filip-score-i2t"):
        r = run("score", "--store", tmp_path / "content", "--manifests", sample["candidates"], "--scorer", kind,
                "--out", tmp_path / f"s-{kind}", "--quiet")  # fmt: skip
        assert r.exit_code == 2 and "defined on stores extracted with --token-mask nonpad" in r.output, r.output
        assert not (tmp_path / f"s-{kind}").exists()


def test_the_kernels_chunks_run_one_thread_each_spread_over_torchs_threads():
    """run_chunks: each chunk of the scoring kernel runs single-threaded and the
    chunks spread over torch's threads, so no op waits at a barrier for a core another
    process keeps busy (bench_score.py with one core loaded: 6.7k pairs/s before, 16.4k
    after; docs/performance.md); torch's thread count is restored after; the
    scores are the same bits at one thread and at two. Mutation checked: without
    set_num_threads(1) the chunks see two threads."""
    import threading

    from flowclip_cache.heads.flow import _token_scores_inference, run_chunks

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        seen = []
        run_chunks(lambda i0: seen.append((i0, torch.get_num_threads(), threading.get_ident())), range(0, 40, 4), True)
        assert sorted(i for i, _, _ in seen) == list(range(0, 40, 4)) and {n for _, n, _ in seen} == {1}
        assert torch.get_num_threads() == 2
        torch.manual_seed(0)
        P, H = F.normalize(torch.randn(20, 9, 32), dim=-1), F.normalize(torch.randn(30, 6, 32), dim=-1)
        mask = torch.rand(30, 6) > 0.2
        mask[:, 0] = True
        Mt, W = torch.eye(32) + 0.05 * torch.randn(32, 32), 0.05 * torch.randn(32, 32)
        two = _token_scores_inference(P, H, mask, Mt, W, 0.05)
        torch.set_num_threads(1)
        assert torch.equal(_token_scores_inference(P, H, mask, Mt, W, 0.05), two)
    finally:
        torch.set_num_threads(before)
