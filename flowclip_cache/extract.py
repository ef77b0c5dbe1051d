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

import os
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from .errors import FlowclipError
from .hashing import caption_key, file_sha256, image_key
from .images import BadImage, load_image, resolve_image_path
from .manifest import Manifest
from .store import CAPTION, IMAGE, FeatureStore

IMAGE_UNIT = 256        # images per segment (12.8 MB of ViT-B/32 patches)
CAPTION_UNIT = 4096     # captions per segment


@dataclass
class ImageItem:
    key: str
    path: str           # as the manifest wrote it
    abs_path: str
    crop: tuple | None
    source: str         # "manifest.parquet:row"


@dataclass
class Failure:
    kind: str           # image | caption
    key: str
    item: str           # path or caption text
    source: str
    reason: str


@dataclass
class Collected:
    images: dict[str, ImageItem] = field(default_factory=dict)
    captions: dict[str, str] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    paths: dict[tuple, str] = field(default_factory=dict)   # (path, crop) -> key
    new_digests: list[tuple] = field(default_factory=list)  # (file, (size, mtime_ns, inode), sha256) hashed now


def collect(manifest_paths: list[str], image_root: str | None, allow_outside_root: bool = False,
            threads: int = 8, known_digests: dict | None = None) -> Collected:
    """Unique image and caption keys of all manifests (images hashed once per file).
    known_digests (FeatureStore.file_digests): a file whose size, mtime and inode are
    unchanged keeps its digest without being read."""
    known_digests = known_digests or {}
    if image_root is not None and not os.path.isdir(image_root):
        raise FlowclipError(f"image root {image_root} does not exist or is not a folder (--image-root)")
    out = Collected()
    refs = []   # (manifest, ImageRef)
    for mp in manifest_paths:
        m = Manifest.read(mp)
        for c in m.caption_refs():
            if not c.text.strip():
                out.failures.append(Failure("caption", caption_key(c.text), c.text,
                                            f"{mp}:{c.row}:{c.column}", "empty caption"))
                continue
            out.captions.setdefault(caption_key(c.text), c.text)
        refs.extend((mp, r) for r in m.image_refs())
    if refs and image_root is None:
        raise FlowclipError("the manifests name images: pass --image-root, the folder their paths are relative to")

    resolved: dict[str, str | BadImage] = {}
    for mp, r in refs:
        if r.path not in resolved:
            try:
                resolved[r.path] = resolve_image_path(image_root, r.path, allow_outside_root)
            except BadImage as e:
                resolved[r.path] = e
    files = sorted({p for p in resolved.values() if isinstance(p, str)})

    def digest(p):
        try:
            st = os.stat(p)
            sig = (st.st_size, st.st_mtime_ns, st.st_ino)       # taken before reading: a later edit rehashes
            known = known_digests.get(p)
            if known is not None and tuple(known[0]) == sig:
                return p, known[1], None
            return p, file_sha256(p), sig
        except FileNotFoundError:
            return p, BadImage("missing file"), None
        except OSError as e:
            return p, BadImage(f"unreadable file ({e.strerror})"), None

    digests = {}
    with ThreadPoolExecutor(threads) as pool:   # hashlib releases the GIL
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
        return Plan([u for u in self.image_units if u[0] % world == rank],
                    [u for u in self.caption_units if u[0] % world == rank],
                    self.stored_images, self.stored_captions)

    @property
    def n_images(self):
        return sum(len(k) for _, k in self.image_units)

    @property
    def n_captions(self):
        return sum(len(k) for _, k in self.caption_units)


def make_plan(store: FeatureStore, col: Collected, caption_lengths: dict[str, int],
              image_unit: int = IMAGE_UNIT, caption_unit: int = CAPTION_UNIT) -> Plan:
    """Cut *all* keys into units in a fixed order, then keep each unit's missing keys.

    Units are drawn over every key, stored or not, so that a unit's number and content
    do not depend on what is already stored: a resumed run redoes exactly the units
    that did not commit, and ranks started at different times still agree."""
    ikeys = sorted(col.images)
    ckeys = sorted(col.captions, key=lambda k: (caption_lengths.get(k, 0), k))  # batches of similar length
    ihave = store.has(IMAGE, ikeys) if ikeys else np.zeros(0, bool)
    chave = store.has(CAPTION, ckeys) if ckeys else np.zeros(0, bool)

    def units(keys, have, size):
        out = []
        for u, start in enumerate(range(0, len(keys), size)):
            new = [k for k, h in zip(keys[start:start + size], have[start:start + size]) if not h]
            if new:
                out.append((u, new))
        return out

    return Plan(units(ikeys, ihave, image_unit), units(ckeys, chave, caption_unit),
                int(ihave.sum()), int(chave.sum()))


@dataclass
class Summary:
    images_new: int = 0
    images_stored: int = 0
    captions_new: int = 0
    captions_stored: int = 0
    captions_truncated: int = 0
    failures: list[Failure] = field(default_factory=list)
    seconds: float = 0.0                  # the whole run
    image_seconds: float = 0.0            # decoding + encoding + writing images
    caption_seconds: float = 0.0          # encoding + writing captions
    failures_file: str | None = None

    def lines(self) -> list[str]:
        out = [f"images:   {self.images_new} new, {self.images_stored} already stored",
               f"captions: {self.captions_new} new, {self.captions_stored} already stored, "
               f"{self.captions_truncated} truncated to the context length",
               f"failed:   {len(self.failures)}" + (f" (table: {self.failures_file})" if self.failures_file else ""),
               f"time:     {self.seconds:.1f} s"]
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
        except Exception as e:   # a transform failing on a strange image is still a bad item
            return i, None, f"cannot preprocess ({type(e).__name__}: {e})"


def _collate(batch):
    return batch


def run_extract(store: FeatureStore, enc, manifests: list[str], image_root: str | None, *,
                device: str = "cpu", batch_size: int = 64, text_batch_size: int = 256,
                workers: int = 2, on_error: str = "skip", allow_outside_root: bool = False,
                rank: int = 0, world_size: int = 1, progress: bool = True,
                image_unit: int = IMAGE_UNIT, caption_unit: int = CAPTION_UNIT, loaded=None,
                rehash: bool = False, log=print) -> Summary:
    """loaded: (model, preprocess, tokenizer) already built for `enc` (a caller that
    extracts several times reuses one model); built here only when there is work."""
    t0 = time.perf_counter()
    col = collect(manifests, image_root, allow_outside_root, known_digests=None if rehash else store.file_digests())
    store.add_file_digests(col.new_digests)          # kept even if extraction stops later
    summary = Summary(failures=list(col.failures))
    if on_error == "fail" and summary.failures:
        f = summary.failures[0]
        raise FlowclipError(f"{f.kind} {f.item!r} ({f.source}): {f.reason} (--on-error fail)")

    # Caption lengths are needed only for captions the store lacks: tokenise those alone.
    # Caption order needs token lengths; tokenise only when some caption is missing.
    ckeys = sorted(col.captions)
    lengths, token_ids, truncated = {}, {}, {}
    if ckeys and not store.has(CAPTION, ckeys).all():
        import open_clip
        tokenizer = open_clip.get_tokenizer(enc.spec.model)
        ctx = enc.config["tokenizer"]["context_length"]
        ids = tokenizer([col.captions[k] for k in ckeys], context_length=ctx)
        lens = (ids != 0).sum(1).tolist()
        for k, row, n in zip(ckeys, ids, lens):
            lengths[k], token_ids[k] = n, row
            truncated[k] = n == ctx and len(tokenizer.encode(col.captions[k])) + 2 > ctx
    plan = make_plan(store, col, lengths, image_unit, caption_unit)
    summary.images_stored, summary.captions_stored = plan.stored_images, plan.stored_captions
    mine = plan.for_rank(rank, world_size)

    if mine.n_images or mine.n_captions:
        import torch
        from .encoders import load_model
        from .features import disable_tf32
        disable_tf32()
        model, preprocess, _ = loaded if loaded is not None else load_model(enc, device)
        with torch.no_grad():
            if mine.n_images:
                t = time.perf_counter()
                _extract_images(store, model, preprocess, col, mine.image_units, summary, device,
                                batch_size, workers, on_error, progress)
                summary.image_seconds = time.perf_counter() - t
            if mine.n_captions:
                t = time.perf_counter()
                _extract_captions(store, model, col, mine.caption_units, token_ids, truncated, summary,
                                  device, text_batch_size, enc.spec.token_mask, progress)
                summary.caption_seconds = time.perf_counter() - t
    store.refresh()
    stored = store.has(IMAGE, list(col.paths.values())) if col.paths else []
    root = os.path.realpath(image_root) if image_root else ""
    store.add_paths([(root, p, c, k) for ((p, c), k), ok in zip(col.paths.items(), stored) if ok])
    summary.seconds = time.perf_counter() - t0
    if summary.failures:
        summary.failures_file = write_failures(store, summary.failures)
    return summary


def _extract_images(store, model, preprocess, col, units, summary, device, batch_size, workers,
                    on_error, progress):
    import torch
    from torch.utils.data import DataLoader
    from tqdm import tqdm

    from .features import encode_images

    items = [col.images[k] for _, u in units for k in u]
    batches, unit_end = [], []   # batches never straddle a unit
    start = 0
    for _, u in units:
        for b in range(start, start + len(u), batch_size):
            batches.append(list(range(b, min(b + batch_size, start + len(u)))))
        start += len(u)
        unit_end.append(len(batches))
    loader = DataLoader(_ImageDataset(items, preprocess), batch_sampler=batches, num_workers=workers,
                        collate_fn=_collate, prefetch_factor=4 if workers else None)
    bar = tqdm(total=len(items), desc="images", unit="img", disable=not progress, file=sys.stderr)
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
                store.write_segment(IMAGE, acc_keys, {"global": np.concatenate(acc_g),
                                                      "patches": np.concatenate(acc_p)})
                summary.images_new += len(acc_keys)
            acc_keys, acc_g, acc_p = [], [], []
            unit_i += 1
    bar.close()


def _extract_captions(store, model, col, units, token_ids, truncated, summary, device, text_batch_size,
                      mask_policy, progress):
    import torch
    from tqdm import tqdm

    from .features import encode_texts

    bar = tqdm(total=sum(len(u) for _, u in units), desc="captions", unit="cap", disable=not progress,
               file=sys.stderr)
    for _, unit in units:
        gs, toks, lens = [], [], []
        for b in range(0, len(unit), text_batch_size):
            keys = unit[b:b + text_batch_size]
            ids = torch.stack([token_ids[k] for k in keys]).to(device)
            f = encode_texts(model, ids, mask_policy)
            gs.append(f.sentence.half().cpu().numpy())
            toks.append(f.tokens[f.mask].half().cpu().numpy())   # valid tokens only, row-major
            lens.append(f.mask.sum(1).cpu().numpy())
            bar.update(len(keys))
        n_tok = np.concatenate(lens)
        if (n_tok == 0).any():
            raise FlowclipError("a caption has no valid tokens under the token-mask policy")
        offsets = np.zeros(len(unit) + 1, np.int64)
        np.cumsum(n_tok, out=offsets[1:])
        trunc = np.array([truncated[k] for k in unit], np.uint8)
        store.write_segment(CAPTION, list(unit), {"global": np.concatenate(gs), "tokens": np.concatenate(toks),
                                                  "offsets": offsets, "truncated": trunc})
        summary.captions_new += len(unit)
        summary.captions_truncated += int(trunc.sum())
    bar.close()


def write_failures(store: FeatureStore, failures: list[Failure]) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq
    run_id = time.strftime("%Y%m%dT%H%M%S") + f"-{uuid.uuid4().hex[:6]}"
    path = os.path.join(store.root, "failures", f"{run_id}.parquet")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    table = pa.table({"kind": [f.kind for f in failures], "key": [f.key for f in failures],
                      "path_or_text": [f.item for f in failures], "source": [f.source for f in failures],
                      "reason": [f.reason for f in failures]})
    pq.write_table(table, path + ".tmp")
    os.replace(path + ".tmp", path)
    return path
