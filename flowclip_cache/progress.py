"""One progress bar for every long loop (extract, train, score, pretrain): rate and ETA
on stderr when it is a terminal; nothing when it is not (logs, CI) or under --quiet."""

from __future__ import annotations

import sys


def bar(total: int, desc: str, unit: str, enabled: bool = True, initial: int = 0):
    from tqdm.autonotebook import tqdm  # a widget in a notebook, text on a terminal

    in_notebook = tqdm.__module__.startswith("tqdm.notebook")
    # disable=None: tqdm shows a text bar only when stderr is a terminal
    return tqdm(
        total=total,
        initial=initial,
        desc=desc,
        unit=unit,
        file=sys.stderr,
        dynamic_ncols=True,
        disable=(False if in_notebook else None) if enabled else True,
        leave=False,
    )
