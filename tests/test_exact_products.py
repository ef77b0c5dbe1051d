"""Exact products (heads/exact.py): every entry a function of its two vectors alone, within
float32's round-off of the true product, and torch's own product wherever a gradient is
wanted or the inputs are float64."""

import math
import random

import pytest
import torch

from flowclip_cache.heads.exact import _on_grid, dots, exact_products, grid_bits


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("k", [16, 512, 768])
def test_an_entry_is_its_two_vectors_alone_whatever_the_call(k):
    a, b = _rand(37, k), _rand(53, k, seed=1)
    with torch.no_grad(), exact_products():
        full = a @ b.T
        for i, j in [(0, 0), (5, 17), (36, 52), (20, 0)]:
            assert torch.equal(full[i, j], a[i] @ b[j])  # a dot of one pair
            assert torch.equal(full[i, j], (a[i : i + 1] @ b[j : j + 1].T)[0, 0])  # a 1 x 1 product
            assert torch.equal(full[i], (a[i : i + 1] @ b.T)[0])  # one row
            assert torch.equal(full[:, j], (a @ b[j : j + 1].T)[:, 0])  # one column
        # the same entries through every form a head writes
        assert torch.equal(full, torch.einsum("md,nd->mn", a, b))
        assert torch.equal(full, torch.nn.functional.linear(a, b))
        assert torch.equal(full, torch.mm(a, b.T))
        batched = torch.bmm(a[None].expand(3, -1, -1), b.T[None].expand(3, -1, -1))
        assert all(torch.equal(full, x) for x in batched)
        H, P = a[:30].reshape(3, 10, k), b[:50].reshape(5, 10, k)
        grid = torch.einsum("tld,ind->itln", H, P)  # every token against every patch
        assert torch.equal(grid[2, 1, 3], full[13, 20:30])
        paired = torch.einsum("tld,tnd->tln", H, P[:3])
        assert torch.equal(paired[1, 4], full[14, 10:20])
        assert torch.equal(dots(a, b), full)


def test_within_float32_round_off_of_the_true_product():
    """|exact - true| <= K 2^-b max|a| max|b| (each vector's rounding to its grid) plus one
    rounding to float32; in practice about float32 GEMM's own error."""
    for k in (16, 512, 1024):
        a, b = _rand(40, k, seed=2), _rand(30, k, seed=3) * 1e-3
        with torch.no_grad(), exact_products():
            got = (a @ b.T).double()
        true = a.double() @ b.double().T
        bound = k * 2.0 ** -grid_bits(k) * a.abs().amax(1, True).double() * b.abs().amax(1).double()
        assert ((got - true).abs() <= bound + true.abs() * 2.0**-24).all()
        plain = (a @ b.T).double()
        assert (got - true).abs().max() <= 8 * (plain - true).abs().max()


def test_the_grid_sum_is_exact_at_the_largest_whole_numbers():
    """Sums of K products of b-bit whole numbers stay below 2^53, so float64 adds them
    exactly in any order: checked against Python's integers on odd numbers near 2^b (two
    bits more per vector, and the float64 sum rounds)."""
    rng = random.Random(0)
    for k in (512, 768):
        for bits, exact in ((grid_bits(k), True), (grid_bits(k) + 2, False)):
            outcomes = []
            for _ in range(5):
                top = lambda: rng.randrange(2**bits - 2 ** (bits - 3), 2**bits) | 1  # noqa: E731
                ya, yb = [top() for _ in range(k)], [top() for _ in range(k)]
                x = torch.tensor(ya, dtype=torch.float64) * 2.0**-bits  # max in [0.5, 1): the grid is 2^-bits
                y, s = _on_grid(x[None], (-1,), bits)
                assert y[0].tolist() == ya and s.item() == 2.0**-bits
                got = torch.tensor(ya, dtype=torch.float64) @ torch.tensor(yb, dtype=torch.float64)
                outcomes.append(int(got.item()) == sum(p * q for p, q in zip(ya, yb)))
            assert all(outcomes) if exact else not all(outcomes), (k, bits, outcomes)


def test_torch_own_product_where_a_gradient_is_wanted_or_inputs_are_float64():
    a, b = _rand(6, 32).requires_grad_(), _rand(5, 32, seed=1)
    with exact_products():
        out = a @ b.T
        out.sum().backward()
        d64 = a.detach().double() @ b.double().T
    assert torch.equal(out, a @ b.T) and a.grad is not None
    assert torch.equal(d64, a.detach().double() @ b.double().T)
    with torch.no_grad(), exact_products():
        assert torch.equal(torch.einsum("...d,nd->...n", a, b), torch.einsum("...d,nd->...n", a, b))  # not taken


def test_the_scoring_kernel_threads_score_exactly_too():
    """Flow-CLIP's all-pairs kernel spreads chunks over threads; each re-enters the mode."""
    from flowclip_cache.heads import exact
    from flowclip_cache.heads.flow import run_chunks

    seen = []
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with exact_products():
            run_chunks(lambda i: seen.append(exact.active()), range(4), cpu=True)
    finally:
        torch.set_num_threads(threads)
    assert seen == [True] * 4


def test_grid_bits():
    assert [grid_bits(k) for k in (1, 512, 768, 1024, 1152)] == [26, 22, 21, 21, 21]
    assert all(2 * grid_bits(k) + math.ceil(math.log2(k)) <= 53 for k in range(1, 5000))
