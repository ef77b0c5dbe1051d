"""Folders that ship with flowclip but live at the repository's top level, where a
researcher finds them without reading Python: pipelines/ (the study configs) and
manifests/ (the benchmark and training-source catalogue). A checkout (an editable
install) reads them there; a wheel carries them as package data, mapped from the same
folders into flowclip_cache/_shipped/ (pyproject.toml), so no second copy is committed."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def shipped_folder(name: str) -> str:
    """The folder `name` ("pipelines" or "manifests"): the checkout's, else the wheel's."""
    checkout = _PACKAGE.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / name).is_dir():
        return str(checkout / name)
    return str(_PACKAGE / "_shipped" / name)
