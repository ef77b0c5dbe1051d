"""flowclip extract: encode every image and caption that the manifests name, once.

    collect  manifests -> unique image keys (file sha256 [+ crop]) and caption keys
    plan     all keys in a fixed order, cut into units; each unit keeps its unstored keys
             (both in plan.py)
    run      this rank's units: decode in worker processes, encode in batches, commit
             one segment per unit

The plan depends only on the keys, so a rerun after a crash computes the remaining
units exactly as the first run would have, and N ranks can split it (unit i goes to
rank i mod N) without talking to each other.
"""

from __future__ import annotations

import time

import numpy as np

from ..errors import FlowclipError
from ..hashing import keys_to_bytes
from ..progress import bar as progress_bar
from ..store import CAPTION, IMAGE, FeatureStore
from ..store.manifest_keys import image_root_key
from .images import BadImage, load_image
from .plan import (
    CAPTION_UNIT,
    IMAGE_UNIT,
    CaptionTokens,
    Failure,
    ImageItem,
    Summary,
    collect,
    make_plan,
    tokenize_captions,
)
from .tensor_decode import check_decode_device, read_raw, to_inputs

FEATURES = ("all", "global")  # what extract --features writes: every feature, or the global ones alone


class _ImageDataset:
    """An item's model input (PIL decode), or its raw form for a torchvision decode."""

    def __init__(self, items: list[ImageItem], preprocess, decode: str = "pil"):
        self.items, self.preprocess, self.decode = items, preprocess, decode

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        it = self.items[i]
        try:
            if self.decode != "pil":
                return i, read_raw(it.abs_path, it.crop), None
            return i, self.preprocess(load_image(it.abs_path, it.crop)), None
        except BadImage as e:
            return i, None, str(e)
        except Exception as e:  # a transform failing on a strange image is still a bad item
            return i, None, f"cannot preprocess ({type(e).__name__}: {e})"


class _Collate:
    """A batch as (index, input or None, error): torchvision's decode runs here on the
    decoding device (in the worker for --decode cpu, in the main process for gpu)."""

    def __init__(self, pre: dict | None, device: str | None):
        self.pre, self.device = pre, device

    def __call__(self, batch):
        if self.pre is None or self.device is None:
            return batch
        ok = [(i, raw) for i, raw, err in batch if raw is not None]
        inputs = dict(zip([i for i, _ in ok], to_inputs([raw for _, raw in ok], self.pre, self.device)))
        return [(i, None, err) if i not in inputs else
                (i, None, inputs[i]) if isinstance(inputs[i], str) else (i, inputs[i], None)
                for i, _, err in batch]  # fmt: skip


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
    on_error: str = "fail",
    allow_outside_root: bool = False,
    rank: int = 0,
    world_size: int = 1,
    progress: bool = True,
    image_unit: int = IMAGE_UNIT,
    caption_unit: int = CAPTION_UNIT,
    loaded=None,
    rehash: bool = False,
    features: str = "all",
    units: set[str] | None = None,
    log=print,
) -> Summary:
    """loaded: the encoder (encoders.load_model) already built for `enc` (a caller that
    extracts several times reuses one model); built here only when there is work.
    features: "all" (global, patch and token features) or "global" (the global ones
    alone: a fraction of the disk, all the CLIP scorer and global heads read; a later
    run with "all" adds the rest to the same store). units: only these units
    (`image-N`, `caption-N`: Plan.unit_names), in place of this rank's share."""
    if features not in FEATURES:
        raise FlowclipError(f"--features {features!r}: one of {', '.join(FEATURES)}")
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
            full=features == "all",
            units=units,
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
    full,
    units=None,
):
    t0 = time.perf_counter()
    col, tokens, plan, summary = plan_extract(
        store, enc, manifests, image_root, on_error, allow_outside_root, image_unit, caption_unit, loaded, rehash, full
    )
    mine = plan.for_rank(rank, world_size) if units is None else plan.only(units)

    if mine.n_images:
        check_decode_device(enc.config, device)
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
                    full,
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
                    full,
                )
                summary.caption_seconds = time.perf_counter() - t
    store.refresh()
    stored = store.has(IMAGE, list(col.paths.values()), full=False) if col.paths else []
    root = image_root_key(image_root)
    store.add_paths([(root, p, c, k) for ((p, c), k), ok in zip(col.paths.items(), stored) if ok])
    summary.seconds = time.perf_counter() - t0
    if summary.failures:
        summary.failures_file = write_failures(store, summary.failures)
    return summary


def plan_extract(store, enc, manifests, image_root, on_error="fail", allow_outside_root=False,
                 image_unit=IMAGE_UNIT, caption_unit=CAPTION_UNIT, loaded=None, rehash=False, full=True):  # fmt: skip
    """(collected keys, caption tokens, the plan, the summary so far): what every extract
    decides before an encoder runs; the plan depends on the keys alone."""
    col = collect(manifests, image_root, allow_outside_root, known_digests=None if rehash else store.file_digests())
    store.add_file_digests(col.new_digests)  # kept even if extraction stops later
    summary = Summary(failures=list(col.failures))
    # Caption order needs token lengths; tokenise only when some caption is missing.
    ckeys = sorted(col.captions)
    tokens = None
    if ckeys and not store.has(CAPTION, ckeys, full).all():
        tokens = tokenize_captions(enc, col, summary, loaded)
    if on_error == "fail" and summary.failures:
        f = summary.failures[0]
        raise FlowclipError(f"{f.kind} {f.item!r} ({f.source}): {f.reason} (--on-error fail)")
    plan = make_plan(store, col, tokens, image_unit, caption_unit, full)
    summary.images_stored, summary.captions_stored = plan.stored_images, plan.stored_captions
    return col, tokens, plan, summary


def _extract_images(
    store, model, preprocess, col, units, summary, device, batch_size, workers, on_error, progress, full=True
):
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
    decode = model.config.get("decode")  # None: PIL's decode and the model's own transform
    pre = model.config["preprocess"] if decode else None
    on_gpu = decode is not None and decode["device"] != "cpu"
    loader = DataLoader(
        _ImageDataset(items, preprocess, "pil" if decode is None else decode["device"]),
        batch_sampler=batches,
        num_workers=workers,
        collate_fn=_Collate(pre, None if decode is None or on_gpu else "cpu"),
        prefetch_factor=4 if workers else None,
    )
    finish = _Collate(pre, device if on_gpu else None)  # nvJPEG in this process, on the model's device
    bar = progress_bar(len(items), "images", "img", progress)
    acc_keys, acc_g, acc_p = [], [], []
    unit_i = 0
    for bi, batch in enumerate(loader):
        batch = finish(batch)
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
            if full:
                acc_p.append(p.half().cpu().numpy())
        bar.update(len(batch))
        if bi + 1 == unit_end[unit_i]:
            if acc_keys:
                arrays = {"global": np.concatenate(acc_g)} | ({"patches": np.concatenate(acc_p)} if full else {})
                store.write_segment(IMAGE, acc_keys, arrays)
                summary.images_new += len(acc_keys)
            acc_keys, acc_g, acc_p = [], [], []
            unit_i += 1
    bar.close()


def _extract_captions(
    store, model, units, tokens: CaptionTokens, summary, device, text_batch_size, mask_policy, progress, full=True
):
    bar = progress_bar(sum(len(u) for _, u in units), "captions", "cap", progress)
    for _, unit in units:
        tks = [tokens.token_key[k] for k in unit]
        feats = _caption_features(store, model, tks, tokens, unit, device, text_batch_size, mask_policy, bar)
        n_tok = np.array([len(feats[t][1]) for t in tks])
        offsets = np.zeros(len(unit) + 1, np.int64)
        np.cumsum(n_tok, out=offsets[1:])
        trunc = np.array([tokens.truncated[k] for k in unit], np.uint8)
        arrays = {"global": np.stack([feats[t][0] for t in tks])}
        if full:
            arrays |= {"token_keys": keys_to_bytes(tks), "tokens": np.concatenate([feats[t][1] for t in tks]),
                       "offsets": offsets, "truncated": trunc}  # fmt: skip
        store.write_segment(CAPTION, list(unit), arrays)
        summary.captions_new += len(unit)
        summary.captions_truncated += int(trunc.sum())
    bar.close()


def _caption_features(store, model, tks, tokens, unit, device, text_batch_size, mask_policy, bar) -> dict:
    """token key -> (global [d], valid tokens [n, d]) FP16, for every distinct token
    sequence of a unit: taken from the store where a stored caption has the same token
    ids, else encoded once. So captions with equal token ids get bit-identical features."""

    from .families import Tokens
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
