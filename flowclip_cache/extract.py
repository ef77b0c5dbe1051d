"""flowclip extract: encode every image and caption that the manifests name, once.

    collect  manifests -> unique image keys (file sha256 [+ crop]) and caption keys
    plan     all keys in a fixed order, cut into units; each unit keeps its unstored keys
    run      this rank's units: decode in worker processes, encode in batches, commit
             one segment per unit

The plan depends only on the keys, so a rerun after a crash computes the remaining
units exactly as the first run would have, and N ranks can split it (unit i goes to
rank i mod N) without talking to each other.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from .errors import FlowclipError
from .hashing import caption_key, file_sha256, image_key, keys_to_bytes
from .images import BadImage, load_image, resolve_image_path
from .manifest import ImageRef, Manifest
from .progress import bar as progress_bar
from .store import CAPTION, IMAGE, FeatureStore

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
    if image_root is not None and not os.path.isdir(image_root):
        raise FlowclipError(f"image root {image_root} does not exist or is not a folder (--image-root)")
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
    if refs and image_root is None:
        raise FlowclipError("the manifests name images: pass --image-root, the folder their paths are relative to")
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
) -> Plan:
    """Cut *all* keys into units in a fixed order, then keep each unit's missing keys.

    Units are drawn over every key, stored or not, so that a unit's number and content
    do not depend on what is already stored: a resumed run redoes exactly the units
    that did not commit, and ranks started at different times still agree. Captions go
    by (length, token ids): batches are tight, and captions with equal token ids are
    never cut apart, so one unit encodes them once."""
    ikeys = sorted(col.images)
    ihave = store.has(IMAGE, ikeys) if ikeys else np.zeros(0, bool)
    if tokens is None:  # every caption is stored: nothing to cut
        ckeys, cut = sorted(col.captions), None
    else:
        ckeys = sorted(col.captions, key=lambda k: (tokens.lengths[k], tokens.token_key[k], k))
        cut = [tokens.token_key[k] for k in ckeys]
    chave = store.has(CAPTION, ckeys) if ckeys else np.zeros(0, bool)
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


class _ImageDataset:
    def __init__(self, items: list[ImageItem], preprocess):
        self.items, self.preprocess = items, preprocess

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        it = self.items[i]
        try:
            return i, self.preprocess(load_image(it.abs_path, it.crop)), None
        except BadImage as e:
            return i, None, str(e)
        except Exception as e:  # a transform failing on a strange image is still a bad item
            return i, None, f"cannot preprocess ({type(e).__name__}: {e})"


def _collate(batch):
    return batch


def run_extract(
    store: FeatureStore,
    enc,
    manifests: list[str],
    image_root: str | None,
    *,
    device: str = "cpu",
    batch_size: int = 64,
    text_batch_size: int = 256,
    workers: int = 2,
    on_error: str = "skip",
    allow_outside_root: bool = False,
    rank: int = 0,
    world_size: int = 1,
    progress: bool = True,
    image_unit: int = IMAGE_UNIT,
    caption_unit: int = CAPTION_UNIT,
    loaded=None,
    rehash: bool = False,
    log=print,
) -> Summary:
    """loaded: the encoder (encoders.load_model) already built for `enc` (a caller that
    extracts several times reuses one model); built here only when there is work."""
    try:
        return _run_extract(
            store,
            enc,
            manifests,
            image_root,
            device=device,
            batch_size=batch_size,
            text_batch_size=text_batch_size,
            workers=workers,
            on_error=on_error,
            allow_outside_root=allow_outside_root,
            rank=rank,
            world_size=world_size,
            progress=progress,
            image_unit=image_unit,
            caption_unit=caption_unit,
            loaded=loaded,
            rehash=rehash,
        )
    finally:
        store.release_writer()  # our temporaries go; a crash leaves them to the next writer's sweep


def _run_extract(
    store,
    enc,
    manifests,
    image_root,
    *,
    device,
    batch_size,
    text_batch_size,
    workers,
    on_error,
    allow_outside_root,
    rank,
    world_size,
    progress,
    image_unit,
    caption_unit,
    loaded,
    rehash,
):
    t0 = time.perf_counter()
    col = collect(manifests, image_root, allow_outside_root, known_digests=None if rehash else store.file_digests())
    store.add_file_digests(col.new_digests)  # kept even if extraction stops later
    summary = Summary(failures=list(col.failures))
    # Caption order needs token lengths; tokenise only when some caption is missing.
    ckeys = sorted(col.captions)
    tokens = None
    if ckeys and not store.has(CAPTION, ckeys).all():
        tokens = tokenize_captions(enc, col, summary, loaded)
    if on_error == "fail" and summary.failures:
        f = summary.failures[0]
        raise FlowclipError(f"{f.kind} {f.item!r} ({f.source}): {f.reason} (--on-error fail)")
    plan = make_plan(store, col, tokens, image_unit, caption_unit)
    summary.images_stored, summary.captions_stored = plan.stored_images, plan.stored_captions
    mine = plan.for_rank(rank, world_size)

    if mine.n_images or mine.n_captions:
        import torch

        from .encoders import load_model
        from .features import disable_tf32

        disable_tf32()
        model = loaded if loaded is not None else load_model(enc, device)
        preprocess = model.preprocess
        with torch.no_grad():
            if mine.n_images:
                t = time.perf_counter()
                _extract_images(
                    store,
                    model,
                    preprocess,
                    col,
                    mine.image_units,
                    summary,
                    device,
                    batch_size,
                    workers,
                    on_error,
                    progress,
                )
                summary.image_seconds = time.perf_counter() - t
            if mine.n_captions:
                t = time.perf_counter()
                _extract_captions(
                    store,
                    model,
                    mine.caption_units,
                    tokens,
                    summary,
                    device,
                    text_batch_size,
                    enc.spec.token_mask,
                    progress,
                )
                summary.caption_seconds = time.perf_counter() - t
    store.refresh()
    stored = store.has(IMAGE, list(col.paths.values())) if col.paths else []
    root = os.path.realpath(image_root) if image_root else ""
    store.add_paths([(root, p, c, k) for ((p, c), k), ok in zip(col.paths.items(), stored) if ok])
    summary.seconds = time.perf_counter() - t0
    if summary.failures:
        summary.failures_file = write_failures(store, summary.failures)
    return summary


def _extract_images(store, model, preprocess, col, units, summary, device, batch_size, workers, on_error, progress):
    import torch
    from torch.utils.data import DataLoader

    from .features import IMAGE_ROWS, encode_images

    # whole forwards: a decode batch is a multiple of the encoder's fixed rows, so only a
    # unit's last batch is padded (a batch of 8 would otherwise run 16 rows for 8 images)
    batch_size = -(-batch_size // IMAGE_ROWS) * IMAGE_ROWS
    items = [col.images[k] for _, u in units for k in u]
    batches, unit_end = [], []  # batches never straddle a unit
    start = 0
    for _, u in units:
        for b in range(start, start + len(u), batch_size):
            batches.append(list(range(b, min(b + batch_size, start + len(u)))))
        start += len(u)
        unit_end.append(len(batches))
    loader = DataLoader(
        _ImageDataset(items, preprocess),
        batch_sampler=batches,
        num_workers=workers,
        collate_fn=_collate,
        prefetch_factor=4 if workers else None,
    )
    bar = progress_bar(len(items), "images", "img", progress)
    acc_keys, acc_g, acc_p = [], [], []
    unit_i = 0
    for bi, batch in enumerate(loader):
        ok = [(i, x) for i, x, err in batch if x is not None]
        for i, x, err in batch:
            if x is None:
                it = items[i]
                summary.failures.append(Failure("image", it.key, it.path, it.source, err))
                if on_error == "fail":
                    raise FlowclipError(f"image {it.path!r} ({it.source}): {err} (--on-error fail)")
        if ok:
            x = torch.stack([t for _, t in ok]).to(device)
            g, p = encode_images(model, x)
            acc_keys += [items[i].key for i, _ in ok]
            acc_g.append(g.half().cpu().numpy())
            acc_p.append(p.half().cpu().numpy())
        bar.update(len(batch))
        if bi + 1 == unit_end[unit_i]:
            if acc_keys:
                store.write_segment(
                    IMAGE, acc_keys, {"global": np.concatenate(acc_g), "patches": np.concatenate(acc_p)}
                )
                summary.images_new += len(acc_keys)
            acc_keys, acc_g, acc_p = [], [], []
            unit_i += 1
    bar.close()


def _extract_captions(
    store, model, units, tokens: CaptionTokens, summary, device, text_batch_size, mask_policy, progress
):
    bar = progress_bar(sum(len(u) for _, u in units), "captions", "cap", progress)
    for _, unit in units:
        tks = [tokens.token_key[k] for k in unit]
        feats = _caption_features(store, model, tks, tokens, unit, device, text_batch_size, mask_policy, bar)
        n_tok = np.array([len(feats[t][1]) for t in tks])
        offsets = np.zeros(len(unit) + 1, np.int64)
        np.cumsum(n_tok, out=offsets[1:])
        trunc = np.array([tokens.truncated[k] for k in unit], np.uint8)
        store.write_segment(
            CAPTION,
            list(unit),
            {
                "token_keys": keys_to_bytes(tks),
                "global": np.stack([feats[t][0] for t in tks]),
                "tokens": np.concatenate([feats[t][1] for t in tks]),
                "offsets": offsets,
                "truncated": trunc,
            },
        )
        summary.captions_new += len(unit)
        summary.captions_truncated += int(trunc.sum())
    bar.close()


def _caption_features(store, model, tks, tokens, unit, device, text_batch_size, mask_policy, bar) -> dict:
    """token key -> (global [d], valid tokens [n, d]) FP16, for every distinct token
    sequence of a unit: taken from the store where a stored caption has the same token
    ids, else encoded once. So captions with equal token ids get bit-identical features."""

    from .encoder_families import Tokens
    from .features import TEXT_ROWS, encode_texts

    text_batch_size = -(-text_batch_size // TEXT_ROWS) * TEXT_ROWS  # whole forwards, as for images
    first: dict = {}
    for k, t in zip(unit, tks):
        first.setdefault(t, k)
    distinct = list(first)
    feats = {}
    stored = {t: c for t, c in zip(distinct, store.caption_with_tokens(distinct)) if c}
    if stored:
        cf = store.load_captions(list(stored.values()))
        for i, t in enumerate(stored):
            feats[t] = (cf.global_[i], cf.tokens[cf.offsets[i] : cf.offsets[i + 1]])
    todo = [t for t in distinct if t not in stored]
    for b in range(0, len(todo), text_batch_size):
        batch = todo[b : b + text_batch_size]
        f = encode_texts(model, Tokens.stack([tokens.ids[first[t]] for t in batch]).to(device), mask_policy)
        g, h, mask = f.sentence.half().cpu().numpy(), f.tokens.half().cpu().numpy(), f.mask.cpu().numpy()
        for i, t in enumerate(batch):
            feats[t] = (g[i], h[i][mask[i]])
    bar.update(len(unit))
    return feats


def write_failures(store: FeatureStore, failures: list[Failure]) -> str:
    import pyarrow as pa

    return store.append_records(
        "failures",
        pa.table(
            {
                "kind": [f.kind for f in failures],
                "key": [f.key for f in failures],
                "path_or_text": [f.item for f in failures],
                "source": [f.source for f in failures],
                "reason": [f.reason for f in failures],
            }
        ),
    )
