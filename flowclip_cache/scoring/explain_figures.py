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


MAP_NOTE = (
    "Each map: relative to its within-image mean (red above, blue below), scaled to its own largest "
    "|value|; green boxes: the patches the gold-foil margin is most sensitive to."
)


def draw_map(ax, im, values, grid: int, title: str, top=None):
    """The map over the image, in its own colours (a colour-binding record's colours are what
    its captions are about); returns the drawn map, for a colour bar."""
    a = relative(values, grid)
    lim = max(float(np.abs(a).max()), 1e-12)
    size = im.size[0] if im is not None else grid
    if im is not None:
        ax.imshow(np.asarray(im.convert("RGB")), extent=(0, size, size, 0))
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
    return ax.images[-1]


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
    fig = record_plot(rec, im, grid)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def record_plot(rec: dict, im, grid: int):
    """The record figure itself: as many map columns per token as the head has maps (one
    for a one-map head, Flow-CLIP's three), a colour bar for the sensitivity map, and the
    note that says how the maps read."""
    plt = _plt()
    run = list(rec["maps"])[-1]
    mp = rec["maps"][run]
    rows = [rec["gold"]] + ([mp["foil"]] if mp["foil"] is not None else [])  # (an image-choice view: one caption)
    n_maps = max(1, min(3, max(len(mp["captions"][c]["maps"]) for c in rows)))
    cols = 1 + n_maps * TOKENS_SHOWN
    fig, axes = plt.subplots(len(rows), cols, figsize=(1.9 * cols, 2.4 * len(rows) + 0.5), squeeze=False)
    for r, c in enumerate(rows):
        cap = mp["captions"][c]
        title = f"{'gold' if c == rec['gold'] else 'foil'}: s={cap['s']:.4f}"
        if mp["sensitivity"] is None:
            _picture(axes[r, 0], im, title + "\n(one caption: no sensitivity)")
        else:
            shown = draw_map(axes[r, 0], im, mp["sensitivity"], grid, title + "\nsensitivity", mp["top_patches"])
            fig.colorbar(shown, ax=axes[r, 0], fraction=0.046, pad=0.02).set_label("relative", fontsize=6)
        order = tokens_by_role(cap["tokens"], cap["contrib"])[:TOKENS_SHOWN]
        names = list(cap["maps"])[:n_maps]
        for k in range(TOKENS_SHOWN):
            for m in range(n_maps):
                ax = axes[r, 1 + n_maps * k + m]
                if k >= len(order) or m >= len(names):
                    ax.axis("off")
                    continue
                l = order[k]
                token = cap["tokens"][l] if l < len(cap["tokens"]) else f"#{l}"
                draw_map(ax, im, cap["maps"][names[m]][l], grid,
                         f"'{token}' {names[m]}" + (f"\n{cap['contrib'][l]:+.4f}" if m == 0 else ""))  # fmt: skip
    fig.suptitle(f"{rec['benchmark']} {rec['record_id']} ({rec['status']}; {run})  " + _margins_text(rec), fontsize=8)
    fig.text(0.5, 0.005, MAP_NOTE + " Under a token: its share of s_token.", ha="center", fontsize=6)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig


def _picture(ax, im, title: str) -> None:
    if im is not None:
        ax.imshow(im)
    ax.set_title(title, fontsize=7)
    ax.axis("off")


def _margins_text(rec: dict) -> str:
    return "margins: " + ", ".join(f"{run} {m:+.4f}" for run, m in rec["margins"].items())


def margin_change(rec: dict) -> float:
    """The last scorer's gold-foil margin minus the first's."""
    m = list(rec["margins"].values())
    return m[-1] - m[0] if m else 0.0


def grid_selection(records: list[dict], most: int = 8) -> tuple[list[dict], str]:
    """The records a grid shows, by a stated rule, and the rule with its counts: repairs and
    regressions alike, half the rows each (the other's share where one has fewer), each the
    largest |change of margin| first; other records only where both run out. A figure pasted
    into slides then shows both sides and says how many of each it chose from."""
    by = {st: sorted((r for r in records if r["status"] == st), key=lambda r: -abs(margin_change(r)))
          for st in ("repair", "regression")}  # fmt: skip
    half = most // 2
    take_rep = min(len(by["repair"]), max(half, most - len(by["regression"])))
    take_reg = min(len(by["regression"]), most - take_rep)
    shown = by["repair"][:take_rep] + by["regression"][:take_reg]
    others = [r for r in records if r["status"] not in by]
    shown += others[: most - len(shown)]
    extra = len(shown) - take_rep - take_reg
    title = (
        f"{take_rep} of {len(by['repair'])} repairs, {take_reg} of {len(by['regression'])} regressions"
        + (f", {extra} of {len(others)} others" if extra else "")
        + ": the largest |change of margin| of each"
    )
    return shown, title


def grid_figure(records: list[dict], grid: int, path: str, most: int = 8) -> None:
    """Paper-style grid (Figs. 7-8): per record the image with the last token scorer's
    sensitivity (top patches boxed) and every scorer's gold-foil margin; the records by
    grid_selection's rule, named in the title."""
    plt = _plt()
    fig = grid_plot(records, grid, most)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def grid_plot(records: list[dict], grid: int, most: int = 8):
    """The grid itself, labelled to be read alone: the margin axis named, right and wrong
    decisions in a legend, a colour bar beside each sensitivity map, the maps' note."""
    from matplotlib.patches import Patch

    plt = _plt()
    shown, rule = grid_selection(records, most)
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
        if runs and rec["maps"][runs[-1]]["sensitivity"] is None:
            _picture(axes[r, 0], im, f"{rec['record_id']} ({rec['status']})")
        elif runs:
            mp = rec["maps"][runs[-1]]
            drawn = draw_map(
                axes[r, 0], im, mp["sensitivity"], grid, f"{rec['record_id']} ({rec['status']})", mp["top_patches"]
            )
            fig.colorbar(drawn, ax=axes[r, 0], fraction=0.046, pad=0.02).set_label("sensitivity, relative", fontsize=6)
        else:
            axes[r, 0].axis("off")
        names = [n if len(n) <= 32 else n[:31] + "…" for n in rec["margins"]]
        vals = list(rec["margins"].values())
        axes[r, 1].barh(names, vals, color=["tab:green" if v > 0 else "tab:red" for v in vals])
        axes[r, 1].axvline(0, color="k", lw=0.8)
        axes[r, 1].set_xlabel("margin: gold score - best foil's score", fontsize=7)
        gold = rec["captions"][rec["gold"]]
        axes[r, 1].set_title(f"gold: {gold[:60]}", fontsize=7)
        axes[r, 1].tick_params(labelsize=7)
    right_wrong = [Patch(color="tab:green", label="decided right (margin > 0)"),
                   Patch(color="tab:red", label="decided wrong (margin <= 0)")]  # fmt: skip
    fig.suptitle(rule, fontsize=8, y=0.995)
    fig.legend(handles=right_wrong, loc="upper center", ncol=2, fontsize=7, bbox_to_anchor=(0.5, 0.975))
    fig.text(0.5, 0.005, MAP_NOTE, ha="center", fontsize=6)
    fig.tight_layout(rect=(0, 0.02, 1, 0.95))
    return fig


def _decode(url, Image):
    if not url:
        return None
    import base64
    import io

    return Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGB")
