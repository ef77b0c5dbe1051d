"""Encoder families: one module each, all giving the store the same features (global,
patches, sentence, tokens + valid mask). Adding a family is one file plus one line in
registry.py's FAMILIES; the first family that claims a model name serves it.

The registry is imported on first use, so that the torch-free modules of this package
(claims.py, open_clip_tables.py, locate.py, listing.py: `flowclip models`) load without
importing open_clip or torch."""

from __future__ import annotations

__all__ = ["FAMILIES", "Family", "Tokens", "family_for", "family_of"]


def __getattr__(name: str):
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import registry

    return getattr(registry, name)
