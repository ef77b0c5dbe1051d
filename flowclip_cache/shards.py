"""Webdataset tar shards as an image source, read in place (never unpacked to disk).

A manifest names an image inside a shard as `<shard path>/<member name>` relative to the
image root (`test/0.tar/s0000042.jpg`): the first path component ending in `.tar` that is
a regular file under the root is the shard, the rest the member. A shard is indexed once
(its headers streamed: member name -> data offset and size) and a member is read at its
offset, so its bytes, its key (their sha256) and its features are the same as the same
image's in a folder. Only plain tar is read in place (a compressed shard has no offsets);
members over their limit, duplicates and non-regular members are refused by name.
A member's name is data: it never becomes a path flowclip writes.

Zip archives (`test.zip/images/0001.jpg`; ELEVATER's vision-datasets copies keep their
images so) are read the same way through zipfile: each member's size bounded before it is
read, its CRC checked on reading, one open handle per archive and process.

Brace ranges (`{0..127}.tar`, `{a,b}.tar`), as webdataset and CLIP_benchmark write them,
expand to shard paths; a range that matches no file is an error naming it.

The root may be an fsspec URL (`s3://bucket/wds_cars`, `https://...`, through the storage
library's usual credentials): a shard is then read by ranges, its headers once for the
index and each member at its offset, never downloaded whole. Only archive members are read
at a URL. A `pipe:` shard (a command) is never run."""

from __future__ import annotations

import functools
import os
import re
import tarfile
import zipfile
import zlib

from .errors import FlowclipError


def is_url(path: str) -> bool:
    """An fsspec URL (a `file://` one is a local path)."""
    return "://" in str(path) and not str(path).startswith("file://")


def join(root: str, *parts: str) -> str:
    """A path under root: a URL joined with '/', a folder with the OS's separator."""
    if is_url(root):
        return "/".join([root.rstrip("/"), *parts])
    return os.path.join(root, *parts)


def _url_fs(url: str):
    from fsspec.core import url_to_fs

    try:
        return url_to_fs(url)
    except ImportError as e:  # s3fs, gcsfs: the optional extra
        raise FlowclipError(f"{url}: {e}; install the cloud extra: pip install 'flowclip[cloud]'") from None
    except ValueError as e:
        raise FlowclipError(f"{url}: not a URL fsspec knows ({e})") from None


def is_file(path: str) -> bool:
    if not is_url(path):
        return os.path.isfile(path)
    return _url_info(path) is not None


@functools.lru_cache(maxsize=4096)
def _url_info(url: str) -> tuple[str, int] | None:
    """(the listing's ETag or modification time, size) of an object, None when it is not a
    file: asked once per process (a request per image member would double a run's requests)."""
    fs, p = _url_fs(url)
    try:
        info = fs.info(p)
    except FileNotFoundError:
        return None
    if info.get("type") != "file":
        return None
    return str(info.get("ETag") or info.get("LastModified") or info.get("mtime") or info.get("created")), info["size"]


def _version(path: str) -> tuple[str, int]:
    """(what changes when the file does, its size): mtime locally; at a URL, _url_info's."""
    if not is_url(path):
        st = os.stat(path)
        return str(st.st_mtime_ns), st.st_size
    info = _url_info(path)
    if info is None:
        raise FileNotFoundError(path)
    return info


def read_small(path: str, limit: int = 1 << 24) -> bytes:
    """A small file's bytes (a list of names, a count), at a URL or not; FileNotFoundError if absent."""
    with _open(path) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise FlowclipError(f"{path}: over {limit:,} bytes; not the small text file it should be")
    return data


def _open(path: str):
    if not is_url(path):
        return open(path, "rb")
    fs, p = _url_fs(path)
    return fs.open(p, "rb")


MEMBER_SEP = "\x00"  # shard path + SEP + member: NUL never occurs in a manifest's path
MAX_IMAGE_BYTES = 32 * 2**20  # an image read from an archive or a dataset copy (the field's are under 5 MiB)
MAX_MEMBERS = 1_000_000  # per shard (the field's shards hold ~1e4 samples)
MAX_EXPANSION = 100_000  # shard paths one brace pattern may name
_BRACE = re.compile(r"\{([^{}]*)\}")


def expand_braces(pattern: str) -> list[str]:
    """`{0..9}` (zero-padded as the bounds are written: `{000..127}`), `{a,b}`, nested or
    repeated, left to right, as webdataset's braceexpand reads them."""
    m = _BRACE.search(pattern)
    if not m:
        return [pattern]
    body, head, tail = m.group(1), pattern[: m.start()], pattern[m.end() :]
    if ".." in body and "," not in body:
        lo, _, hi = body.partition("..")
        if not (lo.isdigit() and hi.isdigit()) or int(hi) < int(lo):
            raise FlowclipError(f"{pattern}: brace range {{{body}}} must be two integers, low..high")
        width = len(lo) if lo.startswith("0") and len(lo) > 1 else 0
        choices = [str(i).zfill(width) for i in range(int(lo), int(hi) + 1)]
    else:
        choices = body.split(",")
    if len(choices) > MAX_EXPANSION:
        raise FlowclipError(f"{pattern}: {{{body}}} names {len(choices):,} shards, over the {MAX_EXPANSION:,} read")
    out = [p for c in choices for p in expand_braces(head + c + tail)]
    if len(out) > MAX_EXPANSION:
        raise FlowclipError(f"{pattern}: names {len(out):,} shards, over the {MAX_EXPANSION:,} read")
    return out


def shard_paths(pattern: str, root: str = "") -> list[str]:
    """The shard files a pattern names (relative to root), each a regular file; one line
    naming the first that is not, or the pattern when none is. A command (`pipe:`) is never
    run and a URL is not read in place: both refused, saying what to do."""
    if pattern.startswith("pipe:"):
        raise FlowclipError(f"{pattern[:80]}: a pipe: shard is a command, which flowclip never runs; run it yourself "
                            f"into a folder and name the .tar files there")  # fmt: skip
    if "://" in pattern or pattern.startswith("/"):
        raise FlowclipError(f"{pattern[:80]}: a shard pattern is relative to the source (give the URL as --source)")
    paths = expand_braces(pattern)
    missing = [p for p in paths if not is_file(join(root, p))]
    if len(missing) == len(paths):
        raise FlowclipError(f"{join(root, pattern)}: matches no shard file")
    if missing:
        raise FlowclipError(f"{join(root, missing[0])}: no such shard ({len(missing)} of {len(paths)} missing)")
    return paths


ARCHIVES = (".tar", ".zip")  # what a path component may name to be read in place


def shard_index(path: str) -> dict[str, tuple[int, int]]:
    """member name -> (data offset, size) of a plain tar's regular members, read once per
    version of the file; for a zip, (-1, uncompressed size)."""
    version, size = _version(path)
    if path.endswith(".zip"):
        return _zip_indexed(path, version, size)
    return _indexed(path, version, size)


@functools.lru_cache(maxsize=16)
def _zip_handle(path: str, version: str, size: int, pid: int) -> zipfile.ZipFile:
    """One open archive per process (a handle shared across a fork would share its offset)."""
    try:
        return zipfile.ZipFile(_open(path))
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise FlowclipError(f"{path}: not a zip archive flowclip reads ({e})") from None


@functools.lru_cache(maxsize=16)
def _zip_indexed(path: str, version: str, size: int) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    infos = _zip_handle(path, version, size, os.getpid()).infolist()
    if len(infos) > MAX_MEMBERS:
        raise FlowclipError(f"{path}: over {MAX_MEMBERS:,} members; split the archive")
    for info in infos:
        if info.is_dir():
            continue
        if info.filename in out:
            raise FlowclipError(f"{path}: member {info.filename[:120]!r} occurs twice; an archive names each once")
        out[info.filename] = (-1, info.file_size)
    return out


def _read_zip_member(path: str, member: str, want: int, whole: bool) -> bytes:
    zf = _zip_handle(path, *_version(path), os.getpid())
    try:
        with zf.open(member) as f:
            data = f.read(want)
            if whole and f.read(1):  # the stream is longer than the directory says
                raise ValueError(f"member {member[:120]!r}: longer than its stated size (damaged archive)")
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError) as e:
        raise ValueError(f"member {member[:120]!r}: damaged in the archive ({type(e).__name__}: {e})") from None
    return data


@functools.lru_cache(maxsize=64)
def _indexed(path: str, version: str, size: int) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    try:
        with _open(path) as f, tarfile.open(fileobj=f, mode="r:") as tf:  # plain tar only: reads need offsets
            while (m := tf.next()) is not None:
                tf.members = []  # type: ignore[attr-defined]  # streamed: no member list kept
                if len(out) >= MAX_MEMBERS:
                    raise FlowclipError(f"{path}: over {MAX_MEMBERS:,} members; split the shard")
                if not m.isfile():
                    continue
                if m.name in out:
                    raise FlowclipError(f"{path}: member {m.name[:120]!r} occurs twice; a shard names each once")
                if m.offset_data + m.size > size:
                    raise FlowclipError(f"{path}: member {m.name[:120]!r} runs past the end of the file (truncated)")
                out[m.name] = (m.offset_data, m.size)
    except (tarfile.TarError, EOFError, ValueError) as e:
        raise FlowclipError(
            f"{path}: not a plain tar flowclip reads in place ({type(e).__name__}: {e}); a compressed shard "
            f"must be decompressed to .tar first"
        ) from None
    return out


def read_member(path: str, member: str, limit: int, head: int | None = None) -> bytes:
    """A member's bytes (at most `limit`; ValueError naming it beyond, or when absent);
    with head, its first `head` bytes only (its size still checked against the limit)."""
    index = shard_index(path)
    if member not in index:
        raise ValueError(f"no member {member[:120]!r} in the shard")
    offset, size = index[member]
    if size > limit:
        raise ValueError(f"member {member[:120]!r} is {size:,} bytes, over the {limit:,} flowclip reads")
    want = size if head is None else min(head, size)
    if path.endswith(".zip"):  # read whole: zipfile checks the CRC at the end
        data = _read_zip_member(path, member, want, head is None)
    else:
        with _open(path) as f:
            f.seek(offset)
            data = f.read(want)
    if len(data) != want:
        raise ValueError(f"member {member[:120]!r}: the shard ends inside it (truncated)")
    return data


def split_member_path(root: str, rel: str) -> tuple[str, str] | None:
    """(shard path relative to root, member name) when rel names a member of a shard file
    under root, else None."""
    parts = rel.replace("\\", "/").split("/")
    for i, part in enumerate(parts[:-1]):
        if part.endswith(ARCHIVES) and is_file(join(root, *parts[: i + 1])):
            return "/".join(parts[: i + 1]), "/".join(parts[i + 1 :])
    return None


def samples(path: str) -> list[tuple[str, dict[str, str]]]:
    """A shard's samples in file order as webdataset groups them: (key, {extension:
    member name}); key = the member's name up to the first '.' of its base name."""
    out: list[tuple[str, dict[str, str]]] = []
    for name in shard_index(path):  # dicts keep the file order
        folder, _, base = name.rpartition("/")
        stem, dot, ext = base.partition(".")
        if not dot:
            continue  # webdataset skips a member without an extension
        key = f"{folder}/{stem}" if folder else stem
        if not out or out[-1][0] != key:
            out.append((key, {}))
        out[-1][1][ext] = name  # as written: webdataset matches `jpg`, never `JPG`
    return out


def image_file_exists(root: str, rel: str) -> bool:
    """rel names a file under root, or a member of a shard file under root."""
    in_shard = split_member_path(root, rel)
    if in_shard is None:
        return False if is_url(root) else os.path.isfile(os.path.join(root, rel))
    return in_shard[1] in shard_index(join(root, in_shard[0]))
