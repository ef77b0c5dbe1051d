"""A training manifest's records as indices into a bank of their features (store/banks.py),
and the pairwise accuracy every run reports: what train-head, studies and adapt share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..errors import FlowclipError
from ..heads import Head
from ..heads.fixed_shapes import matched_scores
from ..manifest import Manifest
from ..store import FeatureStore
from ..store.banks import choose_placement, make_bank, memory_need
from ..store.manifest_keys import drop_failed_rows, manifest_keys


@dataclass
class TrainingData:
    bank: Any  # FeatureBank (device / host placement) or StoreBank (store placement)
    rec_image: torch.Tensor  # [R] index into the bank's images
    rec_pos: torch.Tensor  # [R] index into the bank's captions
    rec_neg: torch.Tensor  # [R, K] index into the bank's captions, -1 = none
    rec_neg_kind: list  # [R][K] negative kind names ("" when unknown)
    split: np.ndarray  # [R] str
    placement: str = "device"
    skipped: list = field(default_factory=list)  # [{record, row, reason}] left out: failed at extract
    # pairwise accuracies computed on these data, by what decides them (evaluation_key): runs
    # that start from the same weights (every head starts as the frozen encoder) share theirs
    evaluations: dict = field(default_factory=dict, repr=False, compare=False)

    def features(self, imgs, caps, need_tokens: bool):
        return self.bank.features(imgs, caps, need_tokens)


def caption_records(manifest: Manifest, command: str) -> tuple[dict, list[str], torch.Tensor, torch.Tensor]:
    """A training manifest's columns, its distinct captions (sorted: their index is the
    caption id), each record's positive [R] and negatives [R, K] (-1 pads) as caption ids.
    train-head and adapt both read records with it; refused: another kind of manifest, a
    record without negatives."""
    if manifest.kind != "training":
        raise FlowclipError(
            f"{manifest.path}: {command} needs a 'training' manifest "
            f"(record_id, image, positive, negatives, split), got {manifest.kind!r}"
        )
    t = manifest.table.to_pydict()
    negs = t["negatives"]
    if any(not n for n in negs):
        bad = [i for i, n in enumerate(negs) if not n][:5]
        raise FlowclipError(f"{manifest.path}: rows {bad} have no negatives")
    texts = sorted(set(t["positive"]) | {n for ns in negs for n in ns})
    cap_index = {c: i for i, c in enumerate(texts)}
    rec_neg = torch.full((len(negs), max(map(len, negs))), -1, dtype=torch.long)
    for r, ns in enumerate(negs):
        rec_neg[r, : len(ns)] = torch.tensor([cap_index[n] for n in ns])
    return t, texts, torch.tensor([cap_index[c] for c in t["positive"]]), rec_neg


@dataclass
class TrainingRecords:
    """A training manifest as training reads it: the rows left once those extract recorded
    as failed are dropped (skipped names them), its columns, its distinct captions, each
    record's positive and negatives as caption ids (caption_records) and each record's
    image key, every feature known to be stored. What a study's checks read, training
    then loads from (load_training_data)."""

    manifest: Manifest
    skipped: list
    columns: dict
    texts: list[str]
    rec_pos: torch.Tensor
    rec_neg: torch.Tensor
    image_keys: list[str]


def training_records(store: FeatureStore, manifest: Manifest, image_root: str | None = None) -> TrainingRecords:
    manifest, skipped = drop_failed_rows(store, manifest, image_root)
    t, texts, rec_pos, rec_neg = caption_records(manifest, "train-head")
    ikeys = manifest_keys(store, manifest, texts, image_root)
    return TrainingRecords(manifest, skipped, t, texts, rec_pos, rec_neg, ikeys)


def check_missing(recs: TrainingRecords, allow_missing: bool) -> str | None:
    """Records extract could not give features to (an image or caption it recorded as
    failed): a refusal unless allow_missing, else the line that says how many were left
    out. None when every record is there."""
    skipped = recs.skipped
    if not skipped:
        return None
    whole = len(skipped) + len(recs.manifest)
    what = (
        f"{recs.manifest.path}: {len(skipped)} of {whole} records ({100 * len(skipped) / whole:.1f}%) rest on an "
        f"image or caption extract could not read (first: {skipped[0]['record']}, {skipped[0]['reason']})"
    )
    if not allow_missing:
        raise FlowclipError(
            f"{what}; extract them (check --image-root holds every folder the manifest names), or pass "
            f"--allow-missing (allow_missing: true in a config) to train on the rest, recorded in the run"
        )
    return f"{what}: left out of training (--allow-missing); the run's config.json lists them under excluded_failed"


def load_training_data(
    store: FeatureStore,
    manifest: Manifest | TrainingRecords,
    need_patches: bool,
    device: str,
    image_root: str | None = None,
    placement: str = "device",
    log=print,
    allow_missing: bool = False,
) -> TrainingData:
    """The manifest's records (or its TrainingRecords, already read) as indices into a bank
    of their features; placement auto|device|host|store says where the features live
    (store/banks.py), chosen from a memory estimate made before anything is loaded. Records
    whose features extract could not make are refused unless allow_missing (check_missing)."""
    recs = manifest if isinstance(manifest, TrainingRecords) else training_records(store, manifest, image_root)
    skipped, t, texts, ikeys = recs.skipped, recs.columns, recs.texts, recs.image_keys
    rec_pos, rec_neg = recs.rec_pos, recs.rec_neg
    said = check_missing(recs, allow_missing)
    if said:
        log(said)
    uimg = sorted(set(ikeys))
    img_index = {k: i for i, k in enumerate(uimg)}
    need = memory_need(store, uimg, texts, need_patches, len(rec_pos), rec_neg.shape[1])
    placement = choose_placement(placement, need, device, log)
    bank = make_bank(store, uimg, texts, need_patches, device, placement, log)
    kinds = t.get("negative_kinds") or [[""] * len(ns) for ns in t["negatives"]]
    return TrainingData(
        bank=bank,
        rec_image=torch.tensor([img_index[k] for k in ikeys], device=device),
        rec_pos=rec_pos.to(device),
        rec_neg=rec_neg.to(device),
        rec_neg_kind=kinds,
        split=np.array(t["split"]),
        placement=placement,
        skipped=skipped,
    )


# -- evaluation: pairwise accuracy (positive vs each of its negatives) -----------------------
def evaluation_key(head: Head, records: np.ndarray) -> str:
    """What decides an evaluation on given data: the head's class, settings and every bit of
    its weights, and the records (each pair's score is a function of the pair and the head
    alone: heads/fixed_shapes.py)."""
    import hashlib
    import json

    h = hashlib.sha256(f"{type(head).__module__}.{type(head).__qualname__}".encode())
    h.update(json.dumps(head.hparams(), sort_keys=True, default=str).encode())
    for name, t in sorted(head.state_dict().items()):
        h.update(name.encode() + str(t.dtype).encode() + str(tuple(t.shape)).encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    h.update(np.ascontiguousarray(records, dtype=np.int64).tobytes())
    return h.hexdigest()


def pairwise_accuracy(head: Head, data: TrainingData, records: np.ndarray, chunk: int = 512) -> dict:
    """Accuracy over (record, negative) pairs; a tie is an error. Per negative kind too."""
    return pairwise_accuracies([head], data, records, chunk)[0]


def pairwise_accuracies(heads: list[Head], data: TrainingData, records: np.ndarray, chunk: int = 512) -> list[dict]:
    """pairwise_accuracy of each head on the same records. Each is computed once per
    evaluation_key on these data (a copy of it returned), with the head that scores for it
    (Head.scores_as: every head starting as Global-M's identity shares one start
    evaluation, whatever its class); the heads still to compute gather each chunk's
    features once between them (runs that start or reach an epoch's end together)."""
    with torch.no_grad():
        scorers = [h.scores_as() for h in heads]
    keys = [evaluation_key(h, records) for h in scorers]
    todo = {k: h for k, h in zip(keys, scorers) if k not in data.evaluations}  # one head per key
    if todo:
        data.evaluations.update(zip(todo, _pairwise_accuracies(list(todo.values()), data, records, chunk)))
    return [dict(data.evaluations[k]) for k in keys]


@torch.no_grad()
def _pairwise_accuracies(heads: list[Head], data: TrainingData, records: np.ndarray, chunk: int) -> list[dict]:
    correct: list[dict[str, list[int]]] = [{} for _ in heads]
    tokens = any(h.uses_tokens for h in heads)
    for s in range(0, len(records), chunk):
        r = torch.as_tensor(records[s : s + chunk], device=data.rec_image.device)
        caps = torch.cat([data.rec_pos[r][:, None], data.rec_neg[r]], 1)  # [n, 1 + K]: positive, negatives
        pairs = _record_pairs(data.rec_image[r], caps)
        feats = data.features(pairs.images, pairs.captions, tokens)  # once for every head
        has_neg = caps[:, 1:].cpu().numpy() >= 0  # (to the host once per chunk, not per record)
        for head, got in zip(heads, correct):
            scores = pairs.scores(head, feats)
            ok = (scores[:, :1] > scores[:, 1:]).cpu().numpy()  # the positive above each negative (a tie: wrong)
            for i, rec in enumerate(r.cpu().numpy()):
                for k in np.nonzero(has_neg[i])[0]:
                    got.setdefault(data.rec_neg_kind[rec][k] or "all", []).append(int(ok[i, k]))
    return [_accuracy(got) for got in correct]


def _accuracy(correct: dict[str, list[int]]) -> dict:
    out = {kind: float(np.mean(v)) for kind, v in sorted(correct.items())}
    allv = [x for v in correct.values() for x in v]
    out["all"] = float(np.mean(allv)) if allv else float("nan")
    out["pairs"] = len(allv)
    return out


@dataclass
class _RecordPairs:
    """Each record's image against its captions caps [n, C] (-1: none): each distinct
    (image, caption) pair scored once, each distinct image's parts computed once (a
    positive is not rescored for each of its negatives)."""

    caps: torch.Tensor
    valid: torch.Tensor
    pair_of: torch.Tensor  # each valid (record, caption) -> its distinct pair
    image_of: torch.Tensor  # each distinct pair -> its distinct image
    images: torch.Tensor
    captions: torch.Tensor  # each distinct pair's caption

    def scores(self, head: Head, feats: tuple) -> torch.Tensor:
        """[n, C] scores (NaN: no caption) from the pairs' features (tokens read only by a
        head that uses them: one gather serves heads of either kind)."""
        v, P, t, H, mask = feats if head.uses_tokens else (feats[0], None, feats[2], None, None)
        out = torch.full(self.caps.shape, float("nan"), device=self.caps.device)
        out[self.valid] = matched_scores(head, v, P, t, H, mask, image_of=self.image_of).to(out.device)[self.pair_of]
        return out


def _record_pairs(img: torch.Tensor, caps: torch.Tensor) -> _RecordPairs:
    valid = caps >= 0
    pair_img, pair_cap = img[:, None].expand_as(caps)[valid], caps[valid]
    pairs, pair_of = torch.unique(torch.stack([pair_img, pair_cap], 1), dim=0, return_inverse=True)
    images, image_of = torch.unique(pairs[:, 0], return_inverse=True)
    return _RecordPairs(caps, valid, pair_of, image_of, images, pairs[:, 1])
