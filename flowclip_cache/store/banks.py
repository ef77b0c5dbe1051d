"""Where training and scoring read features from: a placement chosen from a memory
estimate made before anything is loaded.

    device   every feature gathered once onto the compute device (fastest; today's default)
    host     every feature in host memory (pinned on CUDA); batches copied to the device
             ahead of use on a side stream
    store    nothing loaded: each batch's rows are read from the store's files by a
             prefetching reader (for stores larger than RAM)

All three hand the loop the same FP16 rows, so the trained weights are bit-identical
across placements for the same seed (tests/test_placement.py). A bank's batch API is
`gather(imgs, caps, need_tokens)` (FP16 rows, tokens padded to the batch's longest)
and `features(...)` (re-normalised FP32 on the compute device).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import FlowclipError, SegmentDamaged, StoreDamaged
from ..hashing import caption_key
from ..progress import stage
from .core import CAPTION, IMAGE, FeatureStore

PLACEMENTS = ("auto", "device", "host", "store")


def finish(v16, P16, t16, H16, mask, device: str) -> tuple:
    """FP32 features of a batch on the device, re-normalised (FP16 storage moves norms
    by up to ~1e-3). Every bank ends here, so every placement computes the same numbers."""
    to = lambda x: x.to(device, non_blocking=True)
    v = F.normalize(to(v16).float(), dim=-1)
    t = F.normalize(to(t16).float(), dim=-1)
    if H16 is None:
        return v, None, t, None, None
    mask = to(mask)
    H = to(H16).float() * mask[..., None]
    return v, F.normalize(to(P16).float(), dim=-1), t, F.normalize(H, dim=-1), mask


@dataclass
class FeatureBank:
    """Cached features gathered once into memory (on the device, or on the host): what
    training and scoring index into. Images and captions are numbered in the order loaded."""

    img_global: torch.Tensor  # [n_img, d] fp16
    img_patches: torch.Tensor  # [n_img, N, d] fp16 (empty when no head needs tokens)
    cap_global: torch.Tensor  # [n_cap, d] fp16
    cap_tokens: torch.Tensor  # [n_tok, d] fp16, flat
    cap_offsets: torch.Tensor  # [n_cap+1] int64
    device: str = "cpu"  # where features() delivers batches

    @classmethod
    def load(
        cls,
        store: FeatureStore,
        image_keys: list[str],
        caption_texts: list[str],
        need_tokens: bool,
        device: str = "cpu",
        host: bool = False,
    ) -> "FeatureBank":
        """host: keep the features in (pinned) host memory and copy batches to `device`."""
        with stage("loading"):
            return cls._load(store, image_keys, caption_texts, need_tokens, device, host)

    @classmethod
    def _load(cls, store, image_keys, caption_texts, need_tokens, device, host) -> "FeatureBank":
        ckeys = [caption_key(c) for c in caption_texts]
        parts: tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray | None, np.ndarray]
        if need_tokens:
            im, cp = store.load_images(image_keys), store.load_captions(ckeys)
            parts = (im.global_, im.patches, cp.global_, cp.tokens, cp.offsets)
        else:  # global features only: all a global scorer reads (and all a --features global store holds)
            parts = (store.load_global(IMAGE, image_keys), None, store.load_global(CAPTION, ckeys), None,
                     np.zeros(len(ckeys) + 1, np.int64))  # fmt: skip
        where = "cpu" if host else device
        pin = host and device.startswith("cuda")

        def to(a):
            t = torch.from_numpy(np.ascontiguousarray(a))
            return t.pin_memory() if pin else t.to(where)

        empty = torch.empty(0, device=where)
        g, p, cg, t, off = parts
        return cls(to(g), empty if p is None else to(p), to(cg), empty if t is None else to(t), to(off), device)

    @property
    def dim(self) -> int:
        return self.img_global.shape[1]

    @property
    def has_patches(self) -> bool:
        return self.img_patches.numel() > 0

    def token_lengths(self) -> torch.Tensor:
        """Each caption's token count, in the bank's order."""
        return (self.cap_offsets[1:] - self.cap_offsets[:-1]).cpu()

    def max_tokens(self) -> int:
        return int(self.token_lengths().max())

    def gather(self, imgs: torch.Tensor, caps: torch.Tensor, need_tokens: bool) -> tuple[Any, ...]:
        """FP16 rows of a batch where the bank lives; tokens padded to the batch's longest."""
        imgs, caps = imgs.to(self.img_global.device), caps.to(self.img_global.device)
        v, t = self.img_global[imgs], self.cap_global[caps]
        if not need_tokens:
            return v, None, t, None, None
        starts = self.cap_offsets[caps]
        lengths = self.cap_offsets[caps + 1] - starts
        ar = torch.arange(int(lengths.max()), device=caps.device)
        mask = ar[None, :] < lengths[:, None]
        idx = torch.where(mask, starts[:, None] + ar[None, :], torch.zeros_like(starts)[:, None])
        return v, self.img_patches[imgs], t, self.cap_tokens[idx], mask

    def features(self, imgs: torch.Tensor, caps: torch.Tensor, need_tokens: bool):
        v, P, t, H, mask = self.gather(imgs, caps, need_tokens)
        return finish(v, P, t, H, mask, self.device)


class _Files:
    """A few hundred open files at most (a large store has thousands of chunk files)."""

    def __init__(self, limit: int = 256, local=None):
        self.limit, self.lock = limit, threading.Lock()
        self.fds: OrderedDict[str, int] = OrderedDict()
        self.local = local  # a store at a URL: fn(object path) -> its file in the chunk cache

    def _open(self, path: str) -> int:
        return os.open(self.local(path) if self.local else path, os.O_RDONLY)

    def pread(self, path: str, n: int, offset: int) -> bytes:
        with self.lock:
            fd = self.fds.pop(path, None)
            if fd is None:
                fd = self._open(path)
                if len(self.fds) >= self.limit:
                    os.close(self.fds.popitem(last=False)[1])
            self.fds[path] = fd
        data = os.pread(fd, n, offset)
        if len(data) != n:
            raise SegmentDamaged(path, f"read {len(data)} bytes at {offset}, expected {n}")
        return data

    def close(self):
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


class StoreBank:
    """Rows read from the store's files for each batch (placement 'store'): memory holds
    only the key index and the caption offsets. Every segment the bank touches is checked
    against its checksums once, when the bank is made (one streaming pass, one array in
    memory at a time), so damage is refused, never read."""

    def __init__(
        self,
        store: FeatureStore,
        image_keys: list[str],
        caption_texts: list[str],
        need_tokens: bool,
        device: str = "cpu",
        log=None,
    ):
        self.store, self.device, self.need_tokens = store, device, need_tokens
        self.d, self.P = store.meta["dim"], store.meta["num_patches"]
        # at a URL, rows are read from the chunk cache's files (checked below, as every read is)
        self.files = _Files(local=store.cache.local if store.cache is not None else None)
        self.img_seg, self.img_row = store._locate(IMAGE, image_keys)
        self.cap_seg, self.cap_row = store._locate(CAPTION, [caption_key(c) for c in caption_texts])
        if need_tokens:
            store._refuse_global(IMAGE, self.img_seg)
            store._refuse_global(CAPTION, self.cap_seg)
        used = sorted(set(self.img_seg.tolist()) | set(self.cap_seg.tolist()))
        self.offsets = self._check(used, log is not None)
        self.locate = {
            (s, n): store.backend.row_locator(store.segments[s].path, n)
            for s in used
            for n in store.backend.array_names(store.segments[s].path)
        }
        self.cap_lengths = np.array(  # (global-only rows have no tokens: only read without them)
            [self.offsets[s][r + 1] - self.offsets[s][r] if s in self.offsets else 0
             for s, r in zip(self.cap_seg, self.cap_row)], np.int64,
        )  # fmt: skip

    def _check(self, used: list[int], progress: bool) -> dict[int, np.ndarray]:
        """Read every array of every segment used once, checking its checksum (then
        dropping it): damage is refused before training starts. Returns caption offsets."""
        from ..progress import bar

        store, offsets = self.store, {}
        check = bar(len(used), "checking segments", "seg", progress)
        try:
            for s in used:
                seg = store.segments[s]
                for name in store.backend.array_names(seg.path):
                    a = store.read_array(seg, name)
                    if name == "offsets":
                        offsets[s] = a
                check.update(1)
        except SegmentDamaged as e:
            raise StoreDamaged(store.root, [f"{store.rel(e.path)}: {e.reason}"]) from None
        check.close()
        return offsets

    @property
    def dim(self) -> int:
        return self.d

    @property
    def has_patches(self) -> bool:
        return self.need_tokens

    def max_tokens(self) -> int:
        return int(self.cap_lengths.max())

    def _rows(self, seg: int, name: str, start: int, stop: int, row_shape, dtype=np.float16) -> np.ndarray:
        """Rows [start, stop) of one array, read from its files (split at chunk ends)."""
        out = np.empty((stop - start,) + tuple(row_shape), dtype)
        flat = out.reshape(stop - start, -1).view(np.uint8)
        for path, offset, a, b in self.locate[(seg, name)](start, stop):
            flat[a - start : b - start] = np.frombuffer(
                self.files.pread(path, (b - a) * flat.shape[1], offset), np.uint8
            ).reshape(b - a, -1)
        return out

    def gather(self, imgs_t: torch.Tensor, caps_t: torch.Tensor, need_tokens: bool) -> tuple[Any, ...]:
        imgs, caps = imgs_t.cpu().numpy(), caps_t.cpu().numpy()
        d = self.d
        v = np.stack(
            [self._rows(self.img_seg[i], "global", self.img_row[i], self.img_row[i] + 1, (d,))[0] for i in imgs]
        )
        t = np.stack(
            [self._rows(self.cap_seg[c], "global", self.cap_row[c], self.cap_row[c] + 1, (d,))[0] for c in caps]
        )
        if not need_tokens:
            return torch.from_numpy(v), None, torch.from_numpy(t), None, None
        P = np.stack(
            [self._rows(self.img_seg[i], "patches", self.img_row[i], self.img_row[i] + 1, (self.P, d))[0] for i in imgs]
        )
        L = int(self.cap_lengths[caps].max())
        H = np.zeros((len(caps), L, d), np.float16)
        for j, c in enumerate(caps):
            s, r = self.cap_seg[c], self.cap_row[c]
            a, b = self.offsets[s][r], self.offsets[s][r + 1]
            H[j, : b - a] = self._rows(s, "tokens", a, b, (d,))
        mask = torch.arange(L)[None, :] < torch.from_numpy(self.cap_lengths[caps])[:, None]
        return torch.from_numpy(v), torch.from_numpy(P), torch.from_numpy(t), torch.from_numpy(H), mask

    def features(self, imgs: torch.Tensor, caps: torch.Tensor, need_tokens: bool):
        v, P, t, H, mask = self.gather(imgs, caps, need_tokens)
        return finish(v, P, t, H, mask, self.device)


# -- choosing a placement ---------------------------------------------------------------------
def estimate_bytes(store: FeatureStore, image_keys: list[str], caption_texts: list[str], need_tokens: bool) -> int:
    """Bytes the features of these rows take in memory (FP16), from the store's index and
    its caption offsets, before anything is loaded."""
    d, P = store.meta["dim"], store.meta["num_patches"]
    n_img, n_cap = len(set(image_keys)), len(caption_texts)
    total = (n_img + n_cap) * d * 2 + (n_cap + 1) * 8
    if need_tokens:
        total += n_img * P * d * 2 + store.count_tokens([caption_key(c) for c in caption_texts]) * d * 2
    return total


MARGIN_BYTES = 2**30  # memory left free after loading: at least this much ...
MARGIN_SHARE = 0.10  # ... or this share of what was available, whichever is larger


def memory_need(
    store: FeatureStore, image_keys: list[str], caption_texts: list[str], need_tokens: bool, n_records: int, k: int
) -> dict[str, int]:
    """What loading the training data adds to this process, by part: the features; the
    transient copy made while loading (rows wanted from a segment are copied out of its
    whole array: the largest array a load may read); the records' index tensors (n_records
    x (k negatives + 2) int64, a copy on the device too)."""
    biggest = 0
    for seg in store.segments:
        names = ("global",) + (("patches",) if seg.kind == IMAGE else ("tokens",)) * need_tokens
        for name in names:
            shape, dtype = store.backend.shape(seg.path, name)
            biggest = max(biggest, int(np.prod(shape)) * np.dtype(dtype).itemsize)
    features = estimate_bytes(store, image_keys, caption_texts, need_tokens)
    return {"features": features, "loading": biggest, "records": 2 * n_records * (k + 2) * 8}


def available_bytes(device: str) -> int:
    """Free memory where the features would live: the GPU's, or the host's MemAvailable."""
    if device.startswith("cuda"):
        return torch.cuda.mem_get_info(torch.device(device))[0]
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")  # elsewhere: free pages


def process_bytes() -> int:
    """What this process holds now (resident set: torch, the manifest's rows, ...): already
    outside the free figure, so the estimate counts it as used."""
    try:
        with open("/proc/self/status") as f:
            return next(int(x.split()[1]) * 1024 for x in f if x.startswith("VmRSS:"))
    except (OSError, StopIteration):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # the peak: an upper bound


def margin_bytes(available: int) -> int:
    return max(MARGIN_BYTES, int(MARGIN_SHARE * available))


def choose_placement(requested: str, need: dict[str, int] | int, device: str, log=print) -> str:
    """auto: the device when everything loading adds (memory_need: features, the transient
    copy, the records) still leaves the margin free there; else the host's memory (CUDA
    only) under the same rule; else the store. What the process holds already (torch, the
    manifest's rows) is outside the free figure; the margin covers what training adds
    (its step's activations, the optimiser). Printed with the estimate and the margin."""
    if requested not in PLACEMENTS:
        raise FlowclipError(f"--data-placement {requested!r}: use one of {', '.join(PLACEMENTS)}")
    parts = need if isinstance(need, dict) else {"features": need}
    gib = lambda b: f"{b / 2**30:.2f} GiB"
    dev_free = available_bytes(device)
    host_free = available_bytes("cpu")
    cuda = device.startswith("cuda")
    # on CUDA the transient copy is made in host memory; on the CPU everything is one memory
    on_device = sum(parts.values()) - (parts.get("loading", 0) if cuda else 0)
    fits = lambda n, free: n + margin_bytes(free) <= free
    if requested == "auto":
        host_ok = fits(parts.get("loading", 0), host_free) if cuda else True
        if fits(on_device, dev_free) and host_ok:
            requested = "device"
        elif cuda and fits(sum(parts.values()), host_free):
            requested = "host"
        else:
            requested = "store"
    if requested == "host" and not device.startswith("cuda"):
        requested = "device"  # on the CPU the host is the device
    where = {
        "device": f"{device} memory ({gib(dev_free)} free)",
        "host": f"host memory ({gib(host_free)} free)",
        "store": f"the store's files, read batch by batch ({gib(host_free)} host memory free at the decision"
        + (f", {gib(dev_free)} on {device}" if cuda else "")
        + ")",
    }[requested]
    said = " + ".join(f"{gib(v)} {k}" for k, v in parts.items())
    free = dev_free if requested == "device" else host_free
    log(
        f"data: {said} -> placement '{requested}': {where}; at least {gib(margin_bytes(free))} is kept free "
        f"(this process holds {gib(process_bytes())} already, counted as used; what other processes take "
        f"later is not foreseen: --data-placement store caps this run's share)"
    )
    return requested


def make_bank(
    store: FeatureStore,
    image_keys: list[str],
    caption_texts: list[str],
    need_tokens: bool,
    device: str,
    placement: str = "device",
    log=print,
):
    if placement == "store":
        return StoreBank(store, image_keys, caption_texts, need_tokens, device, log)
    return FeatureBank.load(store, image_keys, caption_texts, need_tokens, device, host=placement == "host")


def prefetch(make, items, ahead: int = 2, device: str = "cpu"):
    """make(item) for each item, computed up to `ahead` items early on a worker thread
    (on CUDA, on a side stream, so host-to-device copies overlap the step); yields in order."""
    from concurrent.futures import ThreadPoolExecutor

    stream = torch.cuda.Stream(device) if device.startswith("cuda") else None

    def run(item):
        if stream is None:
            return make(item), None
        with torch.cuda.stream(stream):
            out = make(item)
            event = torch.cuda.Event()
            event.record(stream)
        return out, event

    items = list(items)
    with ThreadPoolExecutor(1) as pool:
        pending = [pool.submit(run, it) for it in items[:ahead]]
        for i in range(len(items)):
            out, event = pending.pop(0).result()
            if i + ahead < len(items):
                pending.append(pool.submit(run, items[i + ahead]))
            if event is not None:
                torch.cuda.current_stream(device).wait_event(event)
            yield out
