"""The refinement's own heads (heads/flow_evidence.py): the refined and the unrefined
token-patch evidence beside the calibrated global score, against the equations in float64."""

import math

import torch
import torch.nn.functional as F

from flowclip_cache.heads import build_head
from flowclip_cache.heads.contract import check_head
from flowclip_cache.heads.fixed_shapes import all_pair_scores, matched_scores


def _features(I=3, T=4, L=5, N=9, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    unit = lambda *s: F.normalize(torch.randn(*s, generator=g), dim=-1)  # noqa: E731
    mask = torch.arange(L)[None] < torch.tensor([5, 3, 4, 2])[:T, None]
    return unit(I, d), unit(I, N, d), unit(T, d), unit(T, L, d) * mask[..., None], mask


def reference(head, v, P, t, H, mask, refined: bool):
    """s = v . norm(M t) + alpha mean_l E(q~_l, P), each line of the equations in float64."""
    d = lambda x: x.double()  # noqa: E731
    M, M_tok = d(head.M.detach()), d(head.M_tok.detach())
    W = d(head.W.detach()) if refined else torch.zeros_like(M)
    out = torch.zeros(len(v), len(t), dtype=torch.float64)
    for i in range(len(v)):
        p = d(P[i])
        for j in range(len(t)):
            z = F.normalize(M @ d(t[j]), dim=-1)
            ev = []
            for ell in range(int(mask[j].sum())):
                q = F.normalize(M_tok @ d(H[j, ell]), dim=-1)
                a = torch.softmax(p @ q / head.tau_p, 0)
                c = a @ (p - p.mean(0))
                r = c - (q @ c) * q
                q_res = F.normalize(q + W @ r, dim=-1)
                ev.append(head.tau_p * (torch.logsumexp(p @ q_res / head.tau_p, 0) - math.log(len(p))))
            out[i, j] = d(v[i]) @ z + head.alpha * torch.stack(ev).mean()
    return out


def test_both_heads_follow_their_equations_and_agree_where_w_is_zero():
    v, P, t, H, mask = _features()
    torch.manual_seed(0)
    refined, unrefined = build_head("flow-evidence", 16), build_head("flow-evidence-unrefined", 16)
    with torch.no_grad():
        for h in (refined, unrefined):
            h.M.add_(0.1 * torch.randn(16, 16))
            h.M_tok.add_(0.1 * torch.randn(16, 16))
        unrefined.M.copy_(refined.M), unrefined.M_tok.copy_(refined.M_tok)
        same = all_pair_scores(refined, v, P, t, H, mask)
        assert torch.allclose(same, all_pair_scores(unrefined, v, P, t, H, mask), atol=1e-6)  # W = 0: the same
        refined.W.add_(0.3 * torch.randn(16, 16))
        for head, is_refined in ((refined, True), (unrefined, False)):
            want = reference(head, v, P, t, H, mask, is_refined)
            grid = all_pair_scores(head, v, P, t, H, mask)
            assert (grid.double() - want).abs().max() < 1e-5, head.kind
            rows = torch.arange(3).repeat_interleave(4), torch.arange(4).repeat(3)
            pairs = matched_scores(head, v[rows[0]], P[rows[0]], t[rows[1]], H[rows[1]], mask[rows[1]])
            assert (pairs.double() - want.flatten()).abs().max() < 1e-5, head.kind
        assert (all_pair_scores(refined, v, P, t, H, mask) - same).abs().max() > 1e-3  # W counts
    assert not hasattr(unrefined, "W") and sum(p.numel() for p in unrefined.parameters()) == 2 * 16 * 16


def test_they_meet_the_head_contract_and_w_is_trained():
    for kind in ("flow-evidence", "flow-evidence-unrefined"):
        check_head(lambda k=kind: build_head(k, 32), kind)
    v, P, t, H, mask = _features()
    head = build_head("flow-evidence", 16)
    scores, parts = head.forward_terms(v, P, t, H, mask)
    scores.sum().backward()
    assert head.W.grad is not None and head.W.grad.abs().sum() > 0 and "evidence" in parts
