"""What flowclip score scores with and on: scorers (the frozen encoder or a finished
run folder), the manifests to score and each one's Scoring (its benchmark's, one its
metadata declares, or the generic one), and the Real/Shuffle/Fixed image controls."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

import numpy as np

from ..errors import FlowclipError
from ..head_specs import training_free_kinds
from ..heads import Head, build_head
from ..store import FeatureStore
from .manifest_specs import CHOICE_KINDS, GENERIC, evaluation_manifests, find_manifests, scoring_of  # noqa: F401
from .scorer_specs import CONTROLS, same_method, scorer_folder, scorer_labels  # noqa: F401  (CONTROLS: score.py's callers import it here)


@dataclass
class Scorer:
    method: str  # runs of one method (seeds) share this name
    run: str  # unique label
    head: Head
    head_sha256: str  # of the weights file; "frozen" for clip
    train: dict | None = None  # the run's training settings (config.json); None for clip
    identity: str = ""  # what decided its weights, named (run_header.identity_digest); "" for clip


def load_scorers(specs: list[str], store: FeatureStore, device: str, labels: str = "name") -> list[Scorer]:
    """'clip', a run folder, or 'name=run folder' (runs sharing a name are seeds of one method).
    Results name a scorer by its label: the NAME the user gave when no other scorer shares it
    (`mine=runs/x` -> mine), else the run folder's name; labels="folder" keeps the folder's
    name for every run (a study, whose runs are its folders)."""
    from ..heads.base import check_token_mask
    from ..training.run_folder import load_head
    from ..training.run_header import check_encoder, identity_digest, run_identity

    parsed = [scorer_folder(spec) for spec in specs]
    labelled = scorer_labels(parsed, labels)  # (before any head is built: a clash is refused at once)
    out = []
    for spec, (_, path, _), (method, run) in zip(specs, parsed, labelled):
        if path in training_free_kinds():  # the encoder's own features, scored (a kind, never a folder)
            scorer = Scorer(method, run, build_head(path, store.meta["dim"]).to(device), "frozen")
        else:
            head, cfg = load_head(path, device, store_dim=store.meta["dim"])
            check_encoder(cfg, store.meta, f"--scorer {spec}")
            sha = hashlib.sha256(open(os.path.join(path, "head.safetensors"), "rb").read()).hexdigest()
            scorer = Scorer(method, run, head, sha, cfg["train"], identity_digest(run_identity(cfg)))
        check_token_mask(type(scorer.head), store.encoder_config["token_mask"], f"--scorer {spec}")
        out.append(scorer)
    same_method([(s.method, s.run, s.train) for s in out])
    return out


def control_images(rec_img: np.ndarray, control: str, seed: int, task: str) -> np.ndarray:
    """Real: the record's image; Shuffle: one seeded permutation of the records' images;
    Fixed: one seeded anchor image for every record."""
    rng = np.random.default_rng([seed, int(hashlib.sha256(task.encode()).hexdigest()[:8], 16)])
    if control == "real":
        return rec_img
    if control == "shuffle":
        return rec_img[rng.permutation(len(rec_img))]
    if control == "fixed":
        return np.full_like(rec_img, rec_img[rng.integers(len(rec_img))])
    raise FlowclipError(f"unknown control {control!r}; use {', '.join(CONTROLS)}")
