"""What extract reads and plans, before any encoder runs: the manifests' unique image
keys (file sha256 [+ crop], each file hashed once) and caption keys, their tokens, and
the plan of units (docs/store-format.md). The plan depends only on the keys."""

from __future__ import annotations

import hashlib
import os
import stat
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from ..errors import FlowclipError
from ..hashing import caption_key, file_sha256, image_key
from ..manifest import ImageRef, Manifest
from ..shards import MEMBER_SEP, image_file_exists, is_url
from ..store import CAPTION, IMAGE, FeatureStore
from .images import BadImage, member_bytes, resolve_image_path

IMAGE_UNIT = 256  # images per segment (12.8 MB of ViT-B/32 patches)
CAPTION_UNIT = 4096  # captions per segment


@dataclass
class ImageItem:
    key: str
    path: str  # as the manifest wrote it
    abs_path: str
    crop: tuple | None
    source: str  # "manifest.parquet:row"


@dataclass
class Failure:
    kind: str  # image | caption
    key: str
    item: str  # path or caption text
    source: str
    reason: str


@dataclass
class Collected:
    images: dict[str, ImageItem] = field(default_factory=dict)
    captions: dict[str, str] = field(default_factory=dict)
    caption_source: dict[str, str] = field(default_factory=dict)  # key -> first "manifest:row:column"
    failures: list[Failure] = field(default_factory=list)
    paths: dict[tuple, str] = field(default_factory=dict)  # (path, crop) -> key
    new_digests: list[tuple] = field(default_factory=list)  # (file, (size, mtime_ns, inode), sha256) hashed now


def _check_root(image_root: str | None, names_images: bool) -> None:
    """The image root exists where given, and is given where the manifests name images."""
    if image_root is not None and not is_url(image_root) and not os.path.isdir(image_root):
        raise FlowclipError(f"image root {image_root} does not exist or is not a folder (--image-root)")
    if names_images and image_root is None:
        raise FlowclipError("the manifests name images: pass --image-root, the folder their paths are relative to")


def check_inputs(
    manifest_paths: list[str], image_root: str | None, allow_outside_root: bool = False, on_error: str = "fail"
) -> None:
    """What can be refused before a store is created: an unreadable manifest, a missing
    image root, and an image root under which none of the manifests' images exists (or,
    with on_error "fail", any one is missing): a refused extract leaves no store behind."""
    _check_root(image_root, False)
    manifests = [Manifest.read(mp) for mp in manifest_paths]
    paths = {ref.path: m.path for m in manifests for ref in m.image_refs()}
    _check_root(image_root, bool(paths))
    if not paths:
        return
    assert image_root is not None
    missing = []
    for rel, mp in paths.items():
        try:
            resolved = resolve_image_path(image_root, rel, allow_outside_root)
            if not (image_file_exists(image_root, rel) if MEMBER_SEP in resolved else os.path.exists(resolved)):
                missing.append((rel, mp))
        except BadImage as e:
            if on_error == "fail":  # (with skip: a failure row of its own, as collect reports it)
                raise FlowclipError(f"{mp}: image {rel!r}: {e} (--on-error fail)") from None
    if missing and len(missing) == len(paths):
        rel, mp = missing[0]
        raise FlowclipError(
            f"none of the {len(paths)} images the manifests name exist under --image-root {image_root} "
            f"(first: {rel!r}, from {mp}); is it the folder their paths are relative to?"
        )
    if missing and on_error == "fail":
        rel, mp = missing[0]
        folders = sorted({os.path.dirname(r) or "." for r, _ in missing})
        raise FlowclipError(
            f"{len(missing)} of the {len(paths)} images the manifests name do not exist under --image-root "
            f"{image_root} (first: {rel!r}, from {mp}; in {', '.join(folders[:4])}"
            f"{', ...' if len(folders) > 4 else ''}): give a root that holds them all, or --on-error skip to "
            f"extract the rest (a store missing them is recorded as such)"
        )


def collect(
    manifest_paths: list[str],
    image_root: str | None,
    allow_outside_root: bool = False,
    threads: int = 8,
    known_digests: dict | None = None,
) -> Collected:
    """Unique image and caption keys of all manifests (images hashed once per file).
    known_digests (FeatureStore.file_digests): a file whose size, mtime and inode are
    unchanged keeps its digest without being read."""
    known_digests = known_digests or {}
    _check_root(image_root, False)
    out = Collected()
    refs: list[tuple[str, ImageRef]] = []
    for mp in manifest_paths:
        m = Manifest.read(mp)
        for c in m.caption_refs():
            if not c.text.strip():
                out.failures.append(
                    Failure("caption", caption_key(c.text), c.text, f"{mp}:{c.row}:{c.column}", "empty caption")
                )
                continue
            k = caption_key(c.text)
            out.captions.setdefault(k, c.text)
            out.caption_source.setdefault(k, f"{mp}:{c.row}:{c.column}")
        refs.extend((mp, r) for r in m.image_refs())
    _check_root(image_root, bool(refs))
    root = image_root or ""  # (no image is resolved when no manifest names one)

    resolved: dict[str, str | BadImage] = {}
    for mp, r in refs:
        if r.path not in resolved:
            try:
                resolved[r.path] = resolve_image_path(root, r.path, allow_outside_root)
            except BadImage as e:
                resolved[r.path] = e
    files = sorted({p for p in resolved.values() if isinstance(p, str)})

    def digest(p):
        if MEMBER_SEP in p:  # a shard member: its bytes hashed (no file of its own to stat)
            try:
                return p, hashlib.sha256(member_bytes(p)).hexdigest(), None
            except BadImage as e:
                return p, e, None
        try:
            st = os.stat(p)
            if not stat.S_ISREG(st.st_mode):  # a FIFO would block the read forever
                return p, BadImage("not a regular file (a folder, FIFO, socket or device)"), None
            sig = (st.st_size, st.st_mtime_ns, st.st_ino)  # taken before reading: a later edit rehashes
            known = known_digests.get(p)
            if known is not None and tuple(known[0]) == sig:
                return p, known[1], None
            return p, file_sha256(p), sig
        except FileNotFoundError:
            return p, BadImage("missing file"), None
        except OSError as e:
            return p, BadImage(f"unreadable file ({e.strerror})"), None

    digests = {}
    with ThreadPoolExecutor(threads) as pool:  # hashlib releases the GIL
        for p, d, sig in pool.map(digest, files):
            digests[p] = d
            if sig is not None:
                out.new_digests.append((p, sig, d))
    for mp, r in refs:
        source = f"{mp}:{r.row}"
        target = resolved[r.path]
        d = digests.get(target) if isinstance(target, str) else target
        if isinstance(d, BadImage):
            out.failures.append(Failure("image", "", r.path, source, str(d)))
            continue
        assert isinstance(d, str) and isinstance(target, str)  # a digest, of a resolved file
        key = image_key(d, r.crop)
        out.paths[(r.path, r.crop)] = key
        out.images.setdefault(key, ImageItem(key, r.path, target, r.crop, source))
    return out


@dataclass
class Plan:
    """Units of work: (unit number, keys of that unit still missing from the store)."""

    image_units: list[tuple[int, list[str]]]
    caption_units: list[tuple[int, list[str]]]
    stored_images: int
    stored_captions: int

    def for_rank(self, rank: int, world: int) -> "Plan":
        return Plan(
            [u for u in self.image_units if u[0] % world == rank],
            [u for u in self.caption_units if u[0] % world == rank],
            self.stored_images,
            self.stored_captions,
        )

    def only(self, units: set[str]) -> "Plan":
        """The units named (`image-N`, `caption-N`, as unit_names gives them)."""
        return Plan(
            [u for u in self.image_units if f"image-{u[0]}" in units],
            [u for u in self.caption_units if f"caption-{u[0]}" in units],
            self.stored_images,
            self.stored_captions,
        )

    def unit_names(self) -> list[str]:
        """The units with work left, named for a worker (extraction/worker.py)."""
        return [f"image-{n}" for n, keys in self.image_units if keys] + [
            f"caption-{n}" for n, keys in self.caption_units if keys
        ]

    @property
    def n_images(self):
        return sum(len(k) for _, k in self.image_units)

    @property
    def n_captions(self):
        return sum(len(k) for _, k in self.caption_units)


@dataclass
class CaptionTokens:
    """Token ids of the captions to encode: what orders, cuts and deduplicates them."""

    ids: dict[str, "object"]  # caption key -> Tokens of one row (ids and attention mask)
    lengths: dict[str, int]  # caption key -> valid tokens (the attention mask's count)
    token_key: dict[str, str]  # caption key -> sha256 of its token ids: equal ids, equal features
    truncated: dict[str, bool]


def tokenize_captions(enc, col: Collected, summary: "Summary", text_encoder=None) -> CaptionTokens:
    """Tokenise every caption once with the family's tokenizer; a caption with no valid
    token under the token-mask policy (content: nothing between the specials) becomes a
    failure row. text_encoder: the family object (built from the tokenizer alone if None)."""
    fam = text_encoder or enc.family.text_only(enc)
    ckeys = sorted(col.captions)
    toks = fam.tokenize([col.captions[k] for k in ckeys])
    specials = sum(fam.special_tokens)
    out = CaptionTokens({}, {}, {}, {})
    for i, (k, n) in enumerate(zip(ckeys, toks.mask.sum(1).tolist())):
        if enc.spec.token_mask == "content" and n <= specials:
            summary.failures.append(
                Failure(
                    "caption",
                    k,
                    col.captions.pop(k),
                    col.caption_source[k],
                    "no content tokens under --token-mask content",
                )
            )
            continue
        row = toks[i : i + 1]
        out.ids[k], out.lengths[k] = row, n
        # right-padded: the valid ids and the family's padding fix the whole row
        out.token_key[k] = hashlib.sha256(np.asarray(row.ids[0, :n], "<i8").tobytes()).hexdigest()
        out.truncated[k] = n == fam.context_length and fam.untruncated_length(col.captions[k]) > n
    return out


def make_plan(
    store: FeatureStore,
    col: Collected,
    tokens: CaptionTokens | None,
    image_unit: int = IMAGE_UNIT,
    caption_unit: int = CAPTION_UNIT,
    full: bool = True,
) -> Plan:
    """Cut *all* keys into units in a fixed order, then keep each unit's missing keys.

    Units are drawn over every key, stored or not, so that a unit's number and content
    do not depend on what is already stored: a resumed run redoes exactly the units
    that did not commit, and ranks started at different times still agree. Captions go
    by (length, token ids): batches are tight, and captions with equal token ids are
    never cut apart, so one unit encodes them once. full: a key counts as stored only
    with every feature (False: its global feature suffices, extract --features global)."""
    ikeys = sorted(col.images)
    ihave = store.has(IMAGE, ikeys, full) if ikeys else np.zeros(0, bool)
    if tokens is None:  # every caption is stored: nothing to cut
        ckeys, cut = sorted(col.captions), None
    else:
        ckeys = sorted(col.captions, key=lambda k: (tokens.lengths[k], tokens.token_key[k], k))
        cut = [tokens.token_key[k] for k in ckeys]
    chave = store.has(CAPTION, ckeys, full) if ckeys else np.zeros(0, bool)
    return Plan(
        _units(ikeys, ihave, image_unit, None),
        _units(ckeys, chave, caption_unit, cut),
        int(ihave.sum()),
        int(chave.sum()),
    )


def _units(keys: list[str], have: np.ndarray, size: int, group: list[str] | None) -> list[tuple[int, list[str]]]:
    """Consecutive runs of about `size` keys (never splitting equal `group` values),
    numbered in order; each keeps only its keys not yet stored."""
    out, start, u = [], 0, 0
    while start < len(keys):
        stop = min(start + size, len(keys))
        while group is not None and stop < len(keys) and group[stop] == group[stop - 1]:
            stop += 1
        new = [k for k, h in zip(keys[start:stop], have[start:stop]) if not h]
        if new:
            out.append((u, new))
        start, u = stop, u + 1
    return out


@dataclass
class Summary:
    images_new: int = 0
    images_stored: int = 0
    captions_new: int = 0
    captions_stored: int = 0
    captions_truncated: int = 0
    failures: list[Failure] = field(default_factory=list)
    seconds: float = 0.0  # the whole run
    image_seconds: float = 0.0  # decoding + encoding + writing images
    caption_seconds: float = 0.0  # encoding + writing captions
    failures_file: str | None = None

    def lines(self) -> list[str]:
        out = [
            f"images:   {self.images_new} new, {self.images_stored} already stored",
            f"captions: {self.captions_new} new, {self.captions_stored} already stored, "
            f"{self.captions_truncated} truncated to the context length",
            f"failed:   {len(self.failures)}" + (f" (table: {self.failures_file})" if self.failures_file else ""),
            f"time:     {self.seconds:.1f} s",
        ]
        for f in self.failures[:10]:
            out.append(f"  {f.kind} {f.item!r} ({f.source}): {f.reason}")
        if len(self.failures) > 10:
            out.append(f"  ... and {len(self.failures) - 10} more")
        return out
