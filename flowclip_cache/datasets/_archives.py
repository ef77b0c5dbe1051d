"""Members of a stranger's tar archive, read with stated bounds.

- A member is read only up to its limit: its header's size is checked before a byte is
  read, and the read itself stops one byte past the limit (MAX_TEXT_BYTES for a caption
  or JSON member, _hf.MAX_IMAGE_BYTES for an image). A member over its limit is a row
  error naming the archive and the member.
- Archives are plain tar or gzip-compressed tar: deflate expands a byte to at most about
  1,032, so a 1 MiB archive is at most about 1 GiB to read through (seconds), whatever its
  members claim. Other compressions (bzip2, xz expand without such a bound) are refused.
- Members stream: the archive's member list is dropped as it is read, so memory does not
  grow with the number of members (a small gzip can hold millions of empty headers).
- A member's name is data: it never becomes a path flowclip writes."""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from typing import Literal

from ..errors import ManifestError

MAX_TEXT_BYTES = 1 << 20  # a caption, an alt-text or a sample's JSON: the field's are under 10 KiB
MODES: dict[str, Literal["r:", "r:gz"]] = {"tar": "r:", "tar.gz": "r:gz"}


class MemberTooLarge(ValueError):
    """A member over its stated limit (a row error: the caller names the sample)."""


def members(path: str, compression: str) -> Iterator[tuple[tarfile.TarFile, tarfile.TarInfo]]:
    """(the open archive, each regular member) in file order; an unreadable or truncated
    archive, or one of another compression, is one ManifestError naming it."""
    mode = MODES[compression]
    try:
        with tarfile.open(path, mode) as tf:
            while True:
                m = tf.next()
                if m is None:
                    return
                tf.members = []  # type: ignore[attr-defined]  # streamed: tarfile keeps no member list
                if m.isfile():
                    yield tf, m
    except (tarfile.TarError, EOFError, OSError, ValueError) as e:
        what = "plain tar" if compression == "tar" else "gzip-compressed tar"
        raise ManifestError(f"{path}: unreadable {what} archive ({type(e).__name__}: {e})") from None


def read_member(tf: tarfile.TarFile, m: tarfile.TarInfo, limit: int) -> bytes:
    """A regular member's bytes, at most `limit` (MemberTooLarge beyond it: from the header,
    then while reading)."""
    if m.size > limit:
        raise MemberTooLarge(f"member {m.name[:120]!r} is {m.size:,} bytes, over the {limit:,} flowclip reads")
    f = tf.extractfile(m)
    if f is None:
        raise tarfile.TarError(f"{m.name[:120]!r}: not a regular file")
    data = f.read(limit + 1)
    if len(data) > limit:
        raise MemberTooLarge(f"member {m.name[:120]!r} holds over the {limit:,} bytes flowclip reads")
    return data
