"""The numbers the Flow-CLIP paper states, with where each comes from
(published/flow_clip_paper.yaml): what `flowclip run paper` puts beside ours."""

from __future__ import annotations

import os
from dataclasses import dataclass

UNITS = ("%", "points", "count")


@dataclass(frozen=True)
class Published:
    id: str
    table: str  # "Tab. 1" .. "Tab. 7", "Fig. 3", or the section
    row: str
    column: str
    text: str  # as printed ("7,511", "-3.20")
    unit: str  # "%", "points" (percentage points) or "count"
    sentence: str  # the sentence or table row it comes from, verbatim

    @property
    def value(self) -> float:
        return float(self.text.replace(",", ""))


def published_numbers(path: str | None = None) -> list[Published]:
    """Every entry of the data file, its keys checked (a damaged file is refused, naming the entry)."""
    from ..config import read_yaml
    from ..errors import FlowclipError

    path = path or os.path.join(os.path.dirname(__file__), "published", "flow_clip_paper.yaml")
    data = read_yaml(path)
    out = []
    for i, e in enumerate(data.get("numbers", []) if isinstance(data, dict) else []):
        try:
            entry = Published(**e)
            entry.value  # noqa: B018  (a number it must parse as)
        except (TypeError, ValueError) as err:
            raise FlowclipError(f"{path}: entry {i} ({e.get('id') if isinstance(e, dict) else e!r}): {err}") from None
        if entry.unit not in UNITS:
            raise FlowclipError(f"{path}: {entry.id}: unit {entry.unit!r} is not one of {UNITS}")
        out.append(entry)
    if not out:
        raise FlowclipError(f"{path}: no numbers")
    return out
