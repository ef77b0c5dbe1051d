"""The Flow-CLIP head and its score (docs/method.md; METHOD.md in the design notes).

    GCC:   z = norm(M t)                       s_global = v . z
    ICER:  q_l = norm(M_tok h_l)
           a_lj = softmax_j(q_l . p_j / tau_p)
           c_l = sum_j a_lj (p_j - pbar)       r_l = c_l - (q_l . c_l) q_l
           qres_l = norm(q_l + W r_l)
           E(q, P) = tau_p log( (1/N) sum_j exp(q . p_j / tau_p) )
           s_token = sum_l m_l [E(qres_l, P) - E(q_l, P)] / sum_l m_l
    s = s_global + alpha s_token

s_token over all B_I x B_T pairs, written twice, and over matched pairs once more:
  token_scores_direct  follows the equations line by line (builds [B_I, B_T, L, d]): the
                       reference every other form is tested against;
  token_scores         the factorised form: W is applied once per image (Y = P~ W^T)
                       and once per token (W q), so every pair costs only the four
                       L x N x d products {q, Wq} x {p, Y}, which run as GEMMs. It lays
                       them out for autograd when a gradient is needed (training) and
                       runs an in-place kernel, a few images at a time, when none is
                       (scoring). All agree to FP32 round-off.
  matched_token_scores the equations pair by pair, for matched pairs without autograd
                       (candidates, groups, training's evaluation): with one or a few
                       captions an image, W r per token costs less than Y per image.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import FlowclipError
from . import exact
from .base import Head, masked_token_mean, token_shares
from .global_m import GlobalHead, global_scores


def _pooled_evidence(logits: torch.Tensor, tau_p: float) -> torch.Tensor:
    """tau_p * log mean_j exp(logits_j / tau_p) over the last axis."""
    return tau_p * (torch.logsumexp(logits / tau_p, dim=-1) - math.log(logits.shape[-1]))


def token_scores_direct(P, H, mask, M_tok, W, tau_p):
    """Reference: the ICER equations as written. P [I,N,d], H [T,L,d], mask [T,L] -> [I,T]."""
    q = F.normalize(H @ M_tok.T, dim=-1)  # [T,L,d]
    logits = torch.einsum("tld,ind->itln", q, P)  # q_l . p_j
    a = torch.softmax(logits / tau_p, dim=-1)  # patch support
    pbar = P.mean(dim=1)  # [I,d]
    c = torch.einsum("itln,ind->itld", a, P - pbar[:, None, :])  # visual context
    qc = (q[None] * c).sum(-1, keepdim=True)
    r = c - qc * q[None]  # tangent projection
    q_tilde = q[None] + r @ W.T
    q_res = F.normalize(q_tilde, dim=-1)
    e_res = _pooled_evidence(torch.einsum("itld,ind->itln", q_res, P), tau_p)
    e_q = _pooled_evidence(logits, tau_p)
    return masked_token_mean(e_res - e_q, mask)


def token_scores(P, H, mask, M_tok, W, tau_p, paired: bool = False):
    """Factorised ICER, exact. P [I,N,d], H [T,L,d], mask [T,L] -> [I,T] for all pairs;
    with paired=True, P [T,N,d] holds caption t's own image and the result is [T].
    Scoring all pairs without autograd runs the inference kernel (_token_scores_inference);
    training, and matched pairs under autograd, the layout it differentiates (_token_scores_autograd).
    Both are the same equations and agree with token_scores_direct to FP32 round-off."""
    if paired or (torch.is_grad_enabled() and any(x.requires_grad for x in (P, H, M_tok, W))):
        return _token_scores_autograd(P, H, mask, M_tok, W, tau_p, paired)
    return _token_scores_inference(P, H, mask, M_tok, W, tau_p)


def _token_scores_autograd(P, H, mask, M_tok, W, tau_p, paired: bool = False):
    """token_scores laid out [I,T,L,N] for autograd. With Y = (P - pbar) W^T (per image) and w = W q (per token):
      W c_l    = sum_k a_lk Y_k
      q~ . p_j = q.p_j + sum_k a_lk (Y_k . p_j) - (q.c) (w . p_j)
      |q~|^2   = q.q + |Wc|^2 + (q.c)^2 |w|^2 + 2 q.Wc - 2 (q.c) q.w - 2 (q.c) Wc.w
    where q.c = sum_j a_lj q.p_j - mean_j q.p_j. The four pair products
    {q, w} x {p, Y} are two matrix products."""
    I, N, d = P.shape
    T, L, _ = H.shape
    q = F.normalize(H @ M_tok.T, dim=-1)  # [T,L,d]
    w = q @ W.T  # [T,L,d]
    Y = (P - P.mean(dim=1, keepdim=True)) @ W.T  # [I,N,d]
    if paired:  # image axis = caption axis; one "caption" per image
        pair = lambda a, b: torch.einsum("tld,tnd->tln", a, b)[:, None]  # [T,1,L,N]
        s_qp, s_wp, s_qy, s_wy = pair(q, P), pair(w, P), pair(q, Y), pair(w, Y)
        per_token = lambda x: x[:, None]  # [T,L] -> [T,1,L]
        T_ = 1
    else:  # two GEMMs, [q; w] against every patch and every Y row, laid out [I,T,L,N]
        lhs = torch.cat([q, w], 0).reshape(2 * T * L, d)
        both = lambda R: (R.reshape(I * N, d) @ lhs.T).reshape(I, N, 2, T, L).permute(2, 0, 3, 4, 1)
        s_qp, s_wp = both(P).contiguous().unbind(0)
        s_qy, s_wy = both(Y).contiguous().unbind(0)
        per_token = lambda x: x[None]  # [T,L] -> [1,T,L]
        T_ = T
    x = s_qp / tau_p
    lse = torch.logsumexp(x, dim=-1)  # reused for E(q, P)
    a = torch.exp(x - lse[..., None])  # softmax_j, [I,T,L,N]
    qc = (a * s_qp).sum(-1) - s_qp.mean(-1)  # q . c
    a_flat = a.reshape(I, T_ * L, N)
    wc_p = torch.bmm(a_flat, Y @ P.transpose(1, 2)).reshape(I, T_, L, N)  # (W c) . p_j
    wc_sq = (torch.bmm(a_flat, Y @ Y.transpose(1, 2)) * a_flat).sum(-1).reshape(I, T_, L)
    q_wc = (a * s_qy).sum(-1)  # q . Wc
    wc_w = (a * s_wy).sum(-1)  # w . Wc
    qq = per_token((q * q).sum(-1))  # = 1 up to round-off
    qw = per_token((q * w).sum(-1))
    ww = per_token((w * w).sum(-1))
    norm_sq = qq + wc_sq + qc**2 * ww + 2 * q_wc - 2 * qc * qw - 2 * qc * wc_w
    res_logits = (s_qp + wc_p - qc[..., None] * s_wp) / norm_sq.clamp_min(1e-12).sqrt()[..., None]
    e_diff = _pooled_evidence(res_logits, tau_p) - tau_p * (lse - math.log(N))
    out = masked_token_mean(e_diff, per_token(mask))
    return out[:, 0] if paired else out


CHUNK_BYTES = 12 << 20  # one chunk's pair products: a few MiB, so its passes stay in cache


def run_chunks(chunk, starts, cpu: bool) -> None:
    """chunk(i0) for every start. On the CPU each chunk runs on one thread, the chunks
    spread over torch's threads (a pool), never one op split across threads: an op split
    across two threads waits at its end for the slower one, and the kernel's many small
    passes each waited on a second core that another process kept busy (with one of two
    cores loaded: 6.7k pairs/s split, below the autograd layout's 9.1k; 16.4k this way). One
    thread per chunk also makes a chunk's bits independent of the thread count."""
    starts = list(starts)
    threads = torch.get_num_threads()
    if not cpu:
        for i0 in starts:
            chunk(i0)
        return
    torch.set_num_threads(1)
    try:
        if threads == 1 or len(starts) == 1:
            for i0 in starts:
                chunk(i0)
        else:
            from concurrent.futures import ThreadPoolExecutor

            if exact.active():  # the mode is per thread: each worker re-enters it
                inner = chunk

                def chunk(i0: int) -> None:
                    with exact.exact_products():
                        inner(i0)

            with ThreadPoolExecutor(min(threads, len(starts))) as pool:
                list(pool.map(chunk, starts))
    finally:
        torch.set_num_threads(threads)


def _token_scores_inference(P, H, mask, M_tok, W, tau_p):
    """All pairs without autograd (docs/performance.md, "Scoring"): each image's and
    each token's projections, then the kernel over them (token_scores_from_parts)."""
    return token_scores_from_parts(*image_parts(P, W), *token_parts(H, M_tok, W), mask, tau_p)


def token_parts(H, M_tok, W):
    """What ICER computes once per caption token: (q = norm(M_tok h), w = W q), [T,L,d] each."""
    q = F.normalize(H @ M_tok.T, dim=-1)
    return q, q @ W.T


def token_scores_from_parts(R, G, pbar, q, w, mask, tau_p):
    """All pairs from each image's parts (image_parts) and each token's (token_parts), in
    place, a few images at a time. One GEMM per chunk gives the four pair products laid
    out [n, 2N, 2TL] (rows p_j then Y_k, columns q then w), so every sum over patches runs
    along rows of contiguous tokens and nothing is transposed; G = [P; Y] Y^T [I, 2N, N]
    turns (W c) . p_j and |W c|^2 into one small batched product per chunk."""
    I, N, d = len(R), G.shape[2], R.shape[2]  # R = [P; Y] [I, 2N, d]
    T, L, _ = q.shape
    TL = T * L
    step = max(1, CHUNK_BYTES // (16 * N * TL))
    given = I
    if I % step:  # every chunk of exactly `step` images: an image's bits never depend on the chunk it met
        R, G, pbar = (torch.cat([x, x[-1:].expand((-I) % step, *x.shape[1:])]) for x in (R, G, pbar))
        I = len(R)
    q, w = q.reshape(TL, d), w.reshape(TL, d)
    lhs_t = torch.cat([q, w], 0).T  # [d, 2TL]
    q_pbar = pbar @ q.T  # [I, TL]: mean_j q . p_j
    qq, qw, ww = (q * q).sum(-1), (q * w).sum(-1), (w * w).sum(-1)
    e = torch.empty(I, TL, dtype=R.dtype, device=R.device)

    def chunk(i0: int) -> None:
        n = min(step, I - i0)
        S = (R[i0 : i0 + n].reshape(n * 2 * N, d) @ lhs_t).reshape(n, 2 * N, 2 * TL)
        e[i0 : i0 + n] = _evidence_change(S, G[i0 : i0 + n], q_pbar[i0 : i0 + n], qq, qw, ww, tau_p)

    run_chunks(chunk, range(0, I, step), R.device.type == "cpu")
    return masked_token_mean(e[:given].reshape(given, T, L), mask[None])


def _evidence_change(S, G, q_pbar, qq, qw, ww, tau_p):
    """E(qres_l, P) - E(q_l, P) for n images from their pair products, in place: S [n, 2N, 2K]
    (rows p_j then Y_k, columns q then w of K tokens), G [n, 2N, N] = [P; Y] Y^T, q_pbar
    [n, K] = mean_j q . p_j, and qq, qw, ww (each token's q.q, q.w, w.w, broadcastable to
    [n, K]) -> [n, K]: the scoring kernel's chunk (one caption set for all n images)."""
    N, K = G.shape[2], S.shape[2] // 2
    s_qp, s_wp, s_qy, s_wy = S[:, :N, :K], S[:, :N, K:], S[:, N:, :K], S[:, N:, K:]
    m = s_qp.amax(1, keepdim=True)
    a = torch.sub(s_qp, m).div_(tau_p).exp_()
    z = a.sum(1, keepdim=True)
    a.div_(z)  # softmax_j
    qc = (a * s_qp).sum(1).sub_(q_pbar)  # q . c
    q_wc = (a * s_qy).sum(1)  # q . Wc
    wc_w = (a * s_wy).sum(1)  # w . Wc
    g_a = torch.bmm(G, a)  # [(W c) . p_j ; Y_j . W c]
    wc_sq = (g_a[:, N:] * a).sum(1)
    norm_sq = qq + wc_sq + qc**2 * ww + 2 * q_wc - 2 * qc * qw - 2 * qc * wc_w
    res = g_a[:, :N].add_(s_qp).addcmul_(s_wp, qc[:, None], value=-1)  # qres . p_j, unnormalised
    res.mul_((norm_sq.clamp_min(1e-12).rsqrt() / tau_p)[:, None])
    return torch.logsumexp(res, 1).sub_(m[:, 0] / tau_p + z[:, 0].log()).mul_(tau_p)


def image_parts(P, W):
    """What ICER computes once per image: (R = [P; Y] [I,2N,d] with Y = (P - pbar) W^T,
    G = R Y^T [I,2N,N], pbar [I,d]). The patches and Y side by side, as every pair
    product reads them."""
    pbar = P.mean(dim=1)
    Y = (P - pbar[:, None]) @ W.T
    R = torch.cat([P, Y], 1)
    return R, torch.bmm(R, Y.transpose(1, 2)), pbar


def matched_token_scores(P, H, mask, M_tok, W, tau_p):
    """s_token of matched pairs without autograd, the ICER equations pair by pair: P [n,N,d]
    row i's own image, H [n,L,d], mask [n,L] -> [n]. A pair costs its caption's two d x d
    products (q = norm(M_tok h), W r) and three L x N x d ones (q . p, c, q_res . p): less
    than the factorised form, whose W q and per-image Y = P~ W^T pay off only over many
    pairs (all pairs: token_scores_from_parts)."""
    q = F.normalize(H @ M_tok.T, dim=-1)  # [n,L,d]
    logits = torch.bmm(q, P.transpose(1, 2))  # q_l . p_j, [n,L,N]
    lse = torch.logsumexp(logits / tau_p, dim=-1)  # reused for E(q, P)
    a = torch.exp(logits.div_(tau_p).sub_(lse[..., None]))  # softmax_j
    c = torch.bmm(a, P - P.mean(dim=1, keepdim=True))  # visual context, [n,L,d]
    r = c.sub_((q * c).sum(-1, keepdim=True) * q)  # tangent projection
    q_res = F.normalize(q + r @ W.T, dim=-1)
    e_res = _pooled_evidence(torch.bmm(q_res, P.transpose(1, 2)), tau_p)
    return masked_token_mean(e_res.sub_(tau_p * (lse - math.log(P.shape[1]))), mask)


class FlowHead(GlobalHead):
    """Flow-CLIP: GCC (M) plus ICER (M_tok, W), s = s_global + alpha s_token. Initialised
    as identity maps and W = 0: an untrained head scores like the encoder. 3 d^2
    parameters (786,432 at d = 512)."""

    kind = "flow"
    title = "Flow-CLIP: GCC (M) + ICER (M_tok, W), s = s_global + alpha s_token"
    uses_tokens = True
    default_cimr = 0.1  # the complete Flow-CLIP row of Tab. 2: HNB + CIMR
    hparam_names = ("alpha", "tau_p")

    def __init__(self, dim: int, alpha: float = 1.0, tau_p: float = 0.05):
        super().__init__(dim)
        self.alpha, self.tau_p = alpha, tau_p
        self.M_tok = nn.Parameter(torch.eye(dim))
        self.W = nn.Parameter(torch.zeros(dim, dim))

    def score_parts(self, v, P, t, H, mask, direct: bool = False):
        """All pairs of I images x T captions -> (s_global [I,T], s_token [I,T])."""
        fn = token_scores_direct if direct else token_scores
        return global_scores(v, t, self.M), fn(P, H, mask, self.M_tok, self.W, self.tau_p)

    def forward_terms(self, v, P, t, H, mask, direct: bool = False):
        s_global, s_token = self.score_parts(v, P, t, H, mask, direct)
        return s_global + self.alpha * s_token, {"s_token": s_token}

    def score_matched(self, v, P, t, H, mask) -> torch.Tensor:
        return super().score_matched(v, P, t, H, mask) + self.alpha * token_scores(
            P, H, mask, self.M_tok, self.W, self.tau_p, paired=True
        )

    def scores_as(self):
        # (training differentiates in W; a subclass may score more than these equations)
        if torch.is_grad_enabled() or type(self) is not FlowHead or bool(self.W.detach().any()):
            return self
        reduced = GlobalHead(self.dim).to(self.M.device)  # W = 0: q_res = q, so s_token = 0 exactly
        reduced.M = self.M
        return reduced

    def image_parts(self, v, P):
        if torch.is_grad_enabled() and any(x.requires_grad for x in (P, self.M_tok, self.W)):
            return v, P  # autograd: forward's layout
        return (v, *image_parts(P, self.W))

    matched_image_parts = Head.image_parts  # matched pairs read the patches alone (matched_token_scores)

    def caption_parts(self, t, H, mask):
        if torch.is_grad_enabled() and any(x.requires_grad for x in (H, self.M, self.M_tok, self.W)):
            return t, H, mask  # autograd: forward's layout
        return (t, H, mask, F.normalize(t @ self.M.T, dim=-1), *token_parts(H, self.M_tok, self.W))

    def score_from_parts(self, image: tuple, caption: tuple):
        if len(image) == 2 or len(caption) == 3:  # either side kept for autograd: forward itself
            N = image[2].shape[2] if len(image) == 4 else None  # (R = [P; Y]: P is its first N rows)
            return super().score_from_parts(image if N is None else (image[0], image[1][:, :N]), caption[:3])
        (v, R, G, pbar), (_, _, mask, z, q, w) = image, caption
        return v @ z.T + self.alpha * token_scores_from_parts(R, G, pbar, q, w, mask, self.tau_p)

    def score_matched_parts(self, parts, t, H, mask):
        v, P = parts
        if torch.is_grad_enabled() and any(x.requires_grad for x in (P, H, self.M, self.M_tok, self.W)):
            return self.score_matched(v, P, t, H, mask)  # autograd: the paired layout
        s_token = matched_token_scores(P, H, mask, self.M_tok, self.W, self.tau_p)
        return GlobalHead.score_matched(self, v, None, t, H, mask) + self.alpha * s_token

    def pair_bytes(self, L: int, N: int, d: int) -> int:
        # the autograd layout's [I, T, L, N] intermediates; the scoring kernel holds a few
        # images' worth at a time (CHUNK_BYTES), so this bounds it from above
        return 4 * 12 * L * N

    def token_evidence(self, v, P, t, H, mask) -> dict:
        """Where each word looked, for one image and T captions (flowclip explain), from
        the ICER equations: v [d], P [N,d], t [T,d], H [T,L,d], mask [T,L] -> maps
        before/after/moved [T,L,N] (softmax_j of q_l.p_j and of qres_l.p_j over tau_p: each
        token's patch support before and after the refinement), contrib [T,L] (each
        valid token's share of s_token: m_l (E(qres_l) - E(q_l)) / sum m), s_global,
        s_token and s [T]."""
        q = F.normalize(H @ self.M_tok.T, dim=-1)  # [T,L,d]
        logits = q @ P.T  # [T,L,N]
        before = torch.softmax(logits / self.tau_p, dim=-1)
        r = before @ (P - P.mean(0))  # c_l
        r = r - (q * r).sum(-1, keepdim=True) * q
        q_res = F.normalize(q + r @ self.W.T, dim=-1)
        res_logits = q_res @ P.T
        contrib = token_shares(_pooled_evidence(res_logits, self.tau_p) - _pooled_evidence(logits, self.tau_p), mask)
        s_global = global_scores(v[None], t, self.M)[0]
        s_token = contrib.sum(-1)
        after = torch.softmax(res_logits / self.tau_p, dim=-1)
        return {
            "maps": {"before": before, "after": after, "moved": after - before},
            "contrib": contrib,
            "s_global": s_global,
            "s_token": s_token,
            "s": s_global + self.alpha * s_token,
        }

    def token_margin(self, P, H, mask, gold: int, foil: int) -> torch.Tensor:
        """s_token(gold) - s_token(foil) of one image P [N,d] (differentiable in P)."""
        s = token_scores_direct(P[None], H[[gold, foil]], mask[[gold, foil]], self.M_tok, self.W, self.tau_p)[0]
        return s[0] - s[1]

    @classmethod
    def check_hparams(cls, hp: dict, where: str) -> dict:
        out = super().check_hparams(hp, where)
        if out["tau_p"] <= 0:
            raise FlowclipError(f"{where}: tau_p = {out['tau_p']!r} must be a finite number > 0")
        return out

    def caption_embedding(self, t):
        return None  # ICER's term reads the image's patches: a pairwise score
