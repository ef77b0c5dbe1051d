"""The PNG figures of flowclip explain (matplotlib): one per record (token support before,
after and their difference, gold and foil; the patch sensitivity), and a paper-style grid
of records with every scorer's margin. Maps are drawn relative to the within-image mean
(warm above, cool below)."""

from __future__ import annotations

import numpy as np

TOKENS_SHOWN = 3  # per caption in a record's figure: the first by role (below), largest |share of s_token| first
# words that carry no attribute, object or relation of their own: shown after the content words
FUNCTION_WORDS = frozenset(
    "a an the of on in at to and or is are was were be been its it this that these those with by for from as "
    "there here some one two three has have".split()
)
ROLES = ("content", "function", "special")


def token_role(token: str) -> str:
    """content, function (a FUNCTION_WORDS word) or special (<start_of_text>, [CLS], </s>, ...)."""
    t = token.strip()
    if (t.startswith("<") and t.endswith(">")) or (t.startswith("[") and t.endswith("]")):
        return "special"
    word = t.removesuffix("</w>").lstrip("Ġ▁#").lower().strip(".,;:!?")
    return "function" if word in FUNCTION_WORDS or not word else "content"


def tokens_by_role(tokens: list[str], contrib: list[float]) -> list[int]:
    """Token indices in reading order for a person: content words first, then function
    words, then special tokens, each by |share of s_token|, largest first. (By share alone
    the list was led by <start_of_text> and 'a'.)"""
    role = lambda i: ROLES.index(token_role(tokens[i])) if i < len(tokens) else len(ROLES)  # noqa: E731
    return sorted(range(len(contrib)), key=lambda i: (role(i), -abs(contrib[i]), i))


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def relative(values, grid: int) -> np.ndarray:
    """A patch map [N] as a grid, minus its within-image mean."""
    a = np.asarray(values, dtype=np.float64).reshape(grid, grid)
    return a - a.mean()


def draw_map(ax, im, values, grid: int, title: str, top=None) -> None:
    a = relative(values, grid)
    lim = max(float(np.abs(a).max()), 1e-12)
    size = im.size[0] if im is not None else grid
    if im is not None:
        ax.imshow(np.asarray(im.convert("L")), cmap="gray", extent=(0, size, size, 0))
    ax.imshow(
        a,
        cmap="RdBu_r",
        vmin=-lim,
        vmax=lim,
        alpha=0.6 if im is not None else 1.0,
        extent=(0, size, size, 0),
        interpolation="nearest",
    )
    for j in top or []:
        cell = size / grid
        y, x = divmod(j, grid)
        ax.add_patch(_rect(x * cell, y * cell, cell))
    ax.set_title(title, fontsize=7)
    ax.set_xticks([])
    ax.set_yticks([])


def _rect(x, y, s):
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), s, s, fill=False, edgecolor="lime", linewidth=1.5)


def record_figure(rec: dict, im, grid: int, path: str) -> None:
    """Gold and foil rows of the last token scorer: the image with the sensitivity map,
    then its maps (Flow-CLIP: before / after / moved) for the most contributing tokens."""
    plt = _plt()
    runs = list(rec["maps"])
    if not runs:
        fig, ax = plt.subplots(figsize=(3, 3))
        if im is not None:
            ax.imshow(im)
        ax.set_title(_margins_text(rec), fontsize=7)
        ax.axis("off")
        fig.savefig(path, dpi=90)
        plt.close(fig)
        return
    run = runs[-1]
    mp = rec["maps"][run]
    rows = [rec["gold"], mp["foil"]]
    cols = 1 + 3 * TOKENS_SHOWN
    fig, axes = plt.subplots(2, cols, figsize=(1.9 * cols, 4.4), squeeze=False)  # readable at the page's width
    for r, c in enumerate(rows):
        cap = mp["captions"][c]
        draw_map(
            axes[r, 0],
            im,
            mp["sensitivity"],
            grid,
            f"{'gold' if c == rec['gold'] else 'foil'}: s={cap['s']:.4f}\nsensitivity",
            mp["top_patches"],
        )
        order = tokens_by_role(cap["tokens"], cap["contrib"])[:TOKENS_SHOWN]
        names = list(cap["maps"])[:3]
        for k, l in enumerate(order):
            token = cap["tokens"][l] if l < len(cap["tokens"]) else f"#{l}"
            for m, what in enumerate(names):
                draw_map(
                    axes[r, 1 + 3 * k + m],
                    im,
                    cap["maps"][what][l],
                    grid,
                    f"'{token}' {what}" + (f"\n{cap['contrib'][l]:+.4f}" if m == 0 else ""),
                )
            for m in range(len(names), 3):
                axes[r, 1 + 3 * k + m].axis("off")
        for k in range(len(order), TOKENS_SHOWN):
            for m in range(3):
                axes[r, 1 + 3 * k + m].axis("off")
    fig.suptitle(f"{rec['benchmark']} {rec['record_id']} ({rec['status']}; {run})  " + _margins_text(rec), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _margins_text(rec: dict) -> str:
    return "margins: " + ", ".join(f"{run} {m:+.4f}" for run, m in rec["margins"].items())


def grid_figure(records: list[dict], grid: int, path: str, most: int = 8) -> None:
    """Paper-style grid (Figs. 7-8): per record the image with the last token scorer's
    sensitivity (top patches boxed) and every scorer's gold-foil margin."""
    plt = _plt()
    shown = records[:most]
    n_scorers = max((len(r["margins"]) for r in shown), default=1)
    row_height = max(2.2, 0.35 * n_scorers + 1.0)  # every scorer's label its own line: no overlap
    fig, axes = plt.subplots(
        max(1, len(shown)), 2, figsize=(9, row_height * max(1, len(shown))), squeeze=False,
        gridspec_kw={"width_ratios": [1, 1.6]},
    )  # fmt: skip
    from PIL import Image

    for r, rec in enumerate(shown):
        im = _decode(rec.get("picture"), Image)
        runs = list(rec["maps"])
        if runs:
            mp = rec["maps"][runs[-1]]
            draw_map(
                axes[r, 0], im, mp["sensitivity"], grid, f"{rec['record_id']} ({rec['status']})", mp["top_patches"]
            )
        else:
            axes[r, 0].axis("off")
        names = [n if len(n) <= 32 else n[:31] + "…" for n in rec["margins"]]
        vals = list(rec["margins"].values())
        axes[r, 1].barh(names, vals, color=["tab:green" if v > 0 else "tab:red" for v in vals])
        axes[r, 1].axvline(0, color="k", lw=0.8)
        gold = rec["captions"][rec["gold"]]
        axes[r, 1].set_title(f"gold: {gold[:60]}", fontsize=7)
        axes[r, 1].tick_params(labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _decode(url, Image):
    if not url:
        return None
    import base64
    import io

    return Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGB")
