"""A pair's score is a function of the pair alone: in each engine, every
scorer gives a pair the same bits alone as among others of other token counts, in any
position: matched pairs (candidates, groups, image choice, paraphrases, training's
evaluation, OnlineScorer) and all pairs (retrieval, zero-shot with a pairwise head).
Before heads/fixed_shapes.py, 26 of 32 Global-M and Flow-CLIP pairs differed alone."""

import pytest
import torch
import torch.nn.functional as F
from conftest import doc_file

import flowclip_cache as fc
from flowclip_cache.heads import available_kinds, build_head
from flowclip_cache.heads.fixed_shapes import PAIR_BLOCK, all_pair_scores, matched_scores


def _features(n=2 * PAIR_BLOCK + 5, d=64, N=49, seed=0):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(2, 20, (n,), generator=g)
    L = int(lens.max())
    mask = torch.arange(L)[None] < lens[:, None]
    unit = lambda *s: F.normalize(torch.randn(*s, generator=g), dim=-1)  # noqa: E731
    return unit(n, d), unit(n, N, d), unit(n, d), unit(n, L, d) * mask[..., None], mask, lens


def _kinds(tmp_path):
    (tmp_path / "bilinear.py").write_text(doc_file("plugins.md", "bilinear", "bilinear.py"))
    fc.load_plugin(str(tmp_path / "bilinear.py"))
    return available_kinds()


def test_every_scorer_gives_a_pair_its_bits_alone(tmp_path):
    v, P, t, H, mask, lens = _features()
    n = len(v)
    for kind in _kinds(tmp_path):
        torch.manual_seed(1)
        head = build_head(kind, v.shape[1])
        with torch.no_grad():
            for p in head.parameters():  # away from the identity start, so every term counts
                p.add_(0.05 * torch.randn_like(p))
            tok = head.uses_tokens

            def own(i):  # pair i alone, its caption cut to its own tokens
                if not tok:
                    return v[i : i + 1], None, t[i : i + 1], None, None
                return v[i : i + 1], P[i : i + 1], t[i : i + 1], H[i : i + 1, : lens[i]], mask[i : i + 1, : lens[i]]

            every = (v, P if tok else None, t, H if tok else None, mask if tok else None)
            batch = matched_scores(head, *every)
            alone = torch.stack([matched_scores(head, *own(i))[0] for i in range(n)])
            assert torch.equal(batch, alone), (kind, int((batch != alone).sum()))
            perm = torch.randperm(n)
            shuffled = matched_scores(head, *(None if x is None else x[perm] for x in every))
            assert torch.equal(shuffled, batch[perm]), kind  # other neighbours, other positions
            grid = all_pair_scores(head, *every)
            some = sorted({int(i) for i in torch.randperm(n)[:6]} | {0, n - 1})  # (a gallery of one: 128 x 64 padded)
            one = torch.stack([all_pair_scores(head, *own(i))[0, 0] for i in some])
            assert torch.equal(grid.diagonal()[some], one), (kind, int((grid.diagonal()[some] != one).sum()))
            assert torch.allclose(grid.diagonal(), batch, atol=1e-6), kind  # the two engines: round-off apart


@pytest.mark.parametrize("n_tokens", [77])
def test_flow_all_pairs_at_full_length_chunks_images_alike(n_tokens):
    """At 77 tokens the scoring kernel splits images into chunks of a few: the last chunk
    is filled to the same size, so an image's bits do not depend on its chunk."""
    v, P, t, H, mask, _ = _features(n=21, d=128)
    H = F.normalize(torch.randn(21, n_tokens, 128), dim=-1)
    mask = torch.ones(21, n_tokens, dtype=torch.bool)
    head = build_head("flow", 128)
    with torch.no_grad():
        for p in head.parameters():
            p.add_(0.05 * torch.randn_like(p))
        grid = all_pair_scores(head, v, P, t, H, mask)
        one = torch.stack([all_pair_scores(head, v[i : i + 1], P[i : i + 1], t, H, mask)[0] for i in (0, 10, 20)])
    assert torch.equal(grid[[0, 10, 20]], one)


def test_every_position_of_a_block_and_the_planted_ties(tmp_path):
    """A pair at every position of its block, among random neighbours, scores its bits
    alone in both engines, and FILIP's released ties (a caption with a token repeated, for
    image to text) tie at every position (tests/pair_positions.py)."""
    from pair_positions import every_failure

    assert every_failure(_kinds(tmp_path)) == []


@pytest.mark.slow
@pytest.mark.parametrize("isa", ["AVX2", "SSE4_2"])
def test_the_same_under_the_code_paths_mkl_takes_on_other_cpus(tmp_path, isa):
    """MKL picks its kernels by CPU: on an AMD EPYC it takes other paths than on a Xeon, and
    there, before products were exact (heads/exact.py), a token's dot with a patch changed
    with its caption's length and FILIP's planted ties came one ulp apart. The same checks
    in a process held to MKL's AVX2 or SSE4.2 kernels (a Xeon then computes as those CPUs
    do; without the exact products both fail: tried)."""
    import os
    import subprocess
    import sys

    (tmp_path / "bilinear.py").write_text(doc_file("plugins.md", "bilinear", "bilinear.py"))
    env = {**os.environ, "MKL_ENABLE_INSTRUCTIONS": isa}
    script = os.path.join(os.path.dirname(__file__), "pair_positions.py")
    r = subprocess.run([sys.executable, script, str(tmp_path / "bilinear.py")], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr[-2000:]
