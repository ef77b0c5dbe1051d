"""Matrix products whose every entry is a function of its two vectors alone.

A BLAS computes an entry of a product in an order it chooses per call: the kernel for a
few rows is not the kernel for many, a tile's edge is not its middle, and the choice
differs between CPUs (MKL takes other paths on an AMD EPYC than on a Xeon; forcing
MKL_ENABLE_INSTRUCTIONS=AVX2 on a Xeon shows it: a token's dot with a patch changes in its
last bit with the caption's length). Fixed shapes (fixed_shapes.py) pin the call, not the
order, so two captions that differ only in a repeated token could score one float32 ulp
apart where the released code ties them.

Here an entry is computed exactly, so the order cannot matter. Each vector is put on a
grid of its own: x = y * 2^(e - b), with e the exponent of its largest |x_k| and y a whole
number of at most b bits, rounded to nearest-even (a function of x alone). A sum of K
products of such numbers is a whole number below 2^(2b + log2 K) <= 2^53, which float64
holds exactly whatever the order of its additions (any BLAS, CPU, GPU or thread count):
b = (53 - ceil(log2 K)) // 2, 22 bits at K = 512 (ViT-B), 21 at K = 768 or 1024. The
entry is then scaled by two powers of two and rounded once to the inputs' dtype. Its error
against the exact product of the float32 inputs is at most about sqrt(K) 2^-(b+1) |a| |b|,
of the order of float32's own round-off in a GEMM (tests/test_exact_products.py).

`exact_products()` turns this on for every matrix product torch is asked for in its
`with` block (a TorchFunctionMode: matmul and @, mm, bmm, mv, dot, inner, einsum of two
operands, linear, addmm, baddbmm), unless the product needs a gradient (training keeps
float32 GEMMs, and their speed) or its inputs are float64. The scoring gateways
(fixed_shapes.py) score under it, so built-in heads and plug-ins alike get it without a
line of their own. Products it does not know (cdist, convolutions, an einsum of three
operands or with '...') run as torch runs them."""

from __future__ import annotations

import math
import re
import threading
from contextlib import contextmanager

import torch
from torch.overrides import TorchFunctionMode

_STATE = threading.local()
_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def grid_bits(terms: int) -> int:
    """Bits of each vector's grid for an exact float64 sum of `terms` products."""
    return (53 - math.ceil(math.log2(max(terms, 1)))) // 2


def _on_grid(x: torch.Tensor, dims: tuple[int, ...], bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x as (whole numbers y, scale s) in float64, x ~ y * s with |y| <= 2^bits, the scale a
    power of two per vector (the largest |x| over `dims`, kept as size-1 dims). Kept on the
    tensor while it is unchanged (its version counter), so an operand that meets many
    products (the captions' side of a scoring kernel, chunk after chunk) is put on its grid
    once, whichever thread asks."""
    key = (dims, bits)
    kept = getattr(x, "_flowclip_grid", None)
    if kept is not None and kept[0] == key and kept[1] == x._version:
        return kept[2], kept[3]
    y = x.to(torch.float64, copy=True)
    if not dims:  # each number its own vector
        amax = y.abs()
    elif y.numel():
        amax = torch.linalg.vector_norm(y, float("inf"), dims, keepdim=True)
    else:
        amax = y.sum(dims, keepdim=True).fill_(1.0)
    _, e = torch.frexp(amax)  # amax = m 2^e, m in [0.5, 1); 0 -> e = 0
    s = torch.ldexp(torch.ones_like(amax), (e - bits).to(torch.float64))
    y = y.mul_(torch.ldexp(torch.ones_like(amax), (bits - e).to(torch.float64))).round_()  # x / s, exact
    x._flowclip_grid = (key, x._version, y, s)  # type: ignore[attr-defined]  # (a tensor takes attributes)
    return y, s


def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """torch.matmul(a, b), each entry exact then rounded once."""
    va, vb = a.dim() == 1, b.dim() == 1
    a2 = a[None] if va else a
    b2 = b[:, None] if vb else b
    bits = grid_bits(a2.shape[-1])
    ya, sa = _on_grid(a2, (-1,), bits)  # sa [..., m, 1]
    yb, sb = _on_grid(b2, (-2,), bits)  # sb [..., 1, n]
    out = torch.matmul(ya, yb).mul_(sa).mul_(sb).to(torch.promote_types(a.dtype, b.dtype))
    if va:
        out = out.squeeze(-2)
    if vb:
        out = out.squeeze(-1)
    return out


_EINSUM_TERM = re.compile(r"^[a-zA-Z]*\Z")


def _einsum(equation: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor | None:
    """torch.einsum of two operands, each entry exact then rounded once; None for forms this
    does not take (ellipsis, a letter twice in one operand, no summed letter)."""
    eq = equation.replace(" ", "")
    if "->" not in eq or "." in eq:
        return None
    ins, out = eq.split("->")
    terms = ins.split(",")
    if len(terms) != 2 or not all(_EINSUM_TERM.match(t) for t in (*terms, out)):
        return None
    A, B = terms
    if len(set(A)) != len(A) or len(set(B)) != len(B) or len(set(out)) != len(out):
        return None
    summed = (set(A) | set(B)) - set(out)
    if not summed:
        return None
    sizes = {**dict(zip(B, b.shape)), **dict(zip(A, a.shape))}
    bits = grid_bits(math.prod(sizes[c] for c in summed))
    ya, sa = _on_grid(a, tuple(i for i, c in enumerate(A) if c in summed), bits)
    yb, sb = _on_grid(b, tuple(i for i, c in enumerate(B) if c in summed), bits)
    exact = torch.einsum(eq, ya, yb)
    kept_a, kept_b = "".join(c for c in A if c not in summed), "".join(c for c in B if c not in summed)
    scale = torch.einsum(
        f"{kept_a},{kept_b}->{out}",
        sa.reshape([n for n, c in zip(sa.shape, A) if c not in summed]),
        sb.reshape([n for n, c in zip(sb.shape, B) if c not in summed]),
    )
    return exact.mul_(scale).to(torch.promote_types(a.dtype, b.dtype))


def _plain(*xs) -> bool:
    """Whether torch's own product should run: a gradient is wanted, or not float32-ish
    tensors (float64 keeps its precision)."""
    tensors = [x for x in xs if isinstance(x, torch.Tensor)]
    if len(tensors) != len(xs) or any(x.dtype not in _FLOATS for x in tensors):
        return True
    return torch.is_grad_enabled() and any(x.requires_grad for x in tensors)


def _linear(x, weight, bias=None):
    out = _matmul(x, weight.T)
    return out if bias is None else out + bias


def _addmm(input, m1, m2, *, beta=1, alpha=1):
    prod = _matmul(m1, m2)
    return (prod if alpha == 1 else alpha * prod) + (input if beta == 1 else beta * input)


_TWO = {
    torch.matmul: _matmul,
    torch.Tensor.matmul: _matmul,
    torch.Tensor.__matmul__: _matmul,
    torch.mm: _matmul,
    torch.Tensor.mm: _matmul,
    torch.bmm: _matmul,
    torch.Tensor.bmm: _matmul,
    torch.mv: _matmul,
    torch.Tensor.mv: _matmul,
    torch.dot: _matmul,
    torch.Tensor.dot: _matmul,
    torch.inner: lambda a, b: _matmul(a, b.mT if b.dim() > 1 else b),
    torch.Tensor.inner: lambda a, b: _matmul(a, b.mT if b.dim() > 1 else b),
}


class ExactProducts(TorchFunctionMode):
    """Every matrix product in the block exact per entry (the module's docstring)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not kwargs and len(args) == 2 and func in _TWO and not _plain(*args):
            return _TWO[func](*args)
        if func is torch.Tensor.__rmatmul__ and not kwargs and len(args) == 2 and not _plain(*args):
            return _matmul(args[1], args[0])
        if func is torch.nn.functional.linear and not _plain(args[0], args[1]):
            bias = args[2] if len(args) > 2 else kwargs.get("bias")
            if bias is None or not _plain(bias):
                return _linear(args[0], args[1], bias)
        if func in (torch.addmm, torch.baddbmm) and len(args) == 3 and not _plain(*args):
            return _addmm(*args, **kwargs)
        if func is torch.einsum and not kwargs:
            ops = args[1:]
            if len(ops) == 1 and isinstance(ops[0], (list, tuple)):
                ops = tuple(ops[0])
            if len(ops) == 2 and not _plain(*ops):
                out = _einsum(args[0], *ops)
                if out is not None:
                    return out
        return func(*args, **kwargs)


def active() -> bool:
    """Whether this thread scores under exact_products()."""
    return getattr(_STATE, "depth", 0) > 0


@contextmanager
def exact_products():
    """Every matrix product in the block exact per entry, in this thread (threads a scoring
    kernel starts re-enter it: flow.run_chunks)."""
    _STATE.depth = getattr(_STATE, "depth", 0) + 1
    try:
        with ExactProducts():
            yield
    finally:
        _STATE.depth -= 1


def dots(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a [..., m, k] . b [..., n, k] -> [..., m, n], each entry exact then rounded once."""
    return _matmul(a, b.mT)
