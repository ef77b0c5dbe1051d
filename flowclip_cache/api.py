"""flowclip from Python (docs/python-api.md): read a store's features, train a head, load
a run, score manifests, and score images and captions online. Each function is the
command line's own code path (the same checks, the same files, the same numbers); none
prints where `quiet=True`.

    import flowclip_cache as fc
    run = fc.train_head("cache/s", "train.parquet", "runs/flow", head="flow", epochs=2, quiet=True)
    scorers = ["clip", f"flow={run.folder}"]
    results = fc.score_manifests("cache/s", ["manifests/eval/"], scorers, "results/a", quiet=True)
    results.score("sugarcrepe", "flow")
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import torch

from .errors import FlowclipError
from .store import FeatureStore
from .training.train_config import TrainConfig

_silent = lambda *_: None  # noqa: E731


def open_store(store: str | FeatureStore) -> FeatureStore:
    """A store, checked as every command checks it (a damaged part is refused)."""
    return store if isinstance(store, FeatureStore) else FeatureStore(store)


@dataclass
class Features:
    """A manifest's images and captions as FP32 tensors, L2-normalised as every head
    receives them (FP16 in the store, re-normalised). `row_image[r]` is the image of
    manifest row r; captions are the manifest's distinct texts, sorted."""

    image_keys: list[str]
    caption_texts: list[str]
    row_image: torch.Tensor  # [R] index into image_*
    image_global: torch.Tensor  # [n_img, d]
    image_patches: torch.Tensor | None  # [n_img, P, d] (tokens=True)
    caption_global: torch.Tensor  # [n_cap, d]
    caption_tokens: torch.Tensor | None  # [n_cap, L, d], zero past each caption's length
    caption_mask: torch.Tensor | None  # [n_cap, L] bool, the valid tokens

    def as_head_inputs(self) -> tuple:
        """(v, P, t, H, mask): what Head.forward takes for all image-caption pairs."""
        return self.image_global, self.image_patches, self.caption_global, self.caption_tokens, self.caption_mask


def read_features(
    store: str | FeatureStore, manifest: str, *, tokens: bool = True, image_root: str | None = None, device="cpu"
) -> Features:
    """Every image and caption a manifest names (any kind), from the store: a row whose
    image or caption was never extracted is refused with the extract command to run."""
    from .manifest import Manifest
    from .store.banks import FeatureBank, finish
    from .store.manifest_keys import manifest_keys

    fs = open_store(store)
    m = Manifest.read(manifest)
    texts = sorted({c.text for c in m.caption_refs()})
    keys = manifest_keys(fs, m, texts, image_root)
    uimg = sorted(set(keys))
    bank = FeatureBank.load(fs, uimg, texts, tokens, device)
    v16, P16, t16, H16, mask = bank.gather(
        torch.arange(len(uimg), device=device), torch.arange(len(texts), device=device), tokens
    )
    v, P, t, H, mask = finish(v16, P16, t16, H16, mask, device)
    index = {k: i for i, k in enumerate(uimg)}
    return Features(uimg, texts, torch.tensor([index[k] for k in keys]), v, P, t, H, mask)


@dataclass
class Run:
    """A finished head run folder: its head (weights loaded), settings and history."""

    folder: str
    head: Any  # the Head, in eval mode
    config: dict  # config.json: training settings, store fingerprint, manifest sha256, ...
    history: list[dict] = field(default_factory=list)  # one evaluation per epoch (and at max_steps)

    @property
    def weights(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.head.state_dict().items()}


def load_run(folder: str, device: str = "cpu", store_dim: int | None = None) -> Run:
    """A finished run folder, or a published head `hf:OWNER/NAME` (docs/publish.md),
    checked as `flowclip score` checks it (a malformed one is refused); nothing in it is
    executed. store_dim: the width of the store it will score (a built-in head of that
    width is built as it is; otherwise its size is checked on torch's meta device first)."""
    from .hub import run_folder
    from .training import checkpoint
    from .training.run_folder import load_head

    folder = run_folder(folder)  # hf:OWNER/NAME: a published head, from the Hugging Face cache
    if not os.path.exists(os.path.join(folder, "DONE")):
        raise FlowclipError(f"{folder} is not a finished head run (no DONE)")
    head, cfg = load_head(folder, device, store_dim=store_dim)
    history = checkpoint.read_state(folder).get("metrics", []) if checkpoint.exists(folder) else []
    return Run(folder, head, cfg, history)


def train_head(
    store: str | FeatureStore,
    train_manifest: str,
    out: str,
    config: TrainConfig | dict | None = None,
    *,
    device: str = "cpu",
    resume: bool = False,
    overwrite: bool = False,
    placement: str = "auto",
    quiet: bool = False,
    allow_missing: bool = False,
    **settings,
) -> Run:
    """Train a head as `flowclip train-head` does (the same function, so the same weights
    for the same settings): `config` a TrainConfig or a dict of its keys, `settings` keys
    over it (head="global", epochs=2, ...); checked like a YAML config. `head` is a kind,
    "FILE.py:Class", a Head subclass, or a Head instance (training starts from its weights;
    its options are the run's head_options). allow_missing: train on the records left when some
    rest on images or captions extract could not read (refused otherwise)."""
    from .devices import resolve_device
    from .training.loop import train_head as train_run

    base = dict(config.__dict__) if isinstance(config, TrainConfig) else dict(config or {})
    merged, initial = _head_setting({**base, **settings})
    cfg = TrainConfig.from_dict(merged, "train_head()")
    device = resolve_device(device)
    fs = open_store(store)
    train_run(
        fs, train_manifest, out, cfg, device=device, resume=resume, overwrite=overwrite,
        placement=placement, progress=not quiet, initial_weights=initial, allow_missing=allow_missing,
        log=_silent if quiet else print,
    )  # fmt: skip
    return load_run(out, device, store_dim=fs.meta["dim"])


def _head_setting(settings: dict) -> tuple[dict, dict | None]:
    """settings with a Head class or instance as `head` replaced by its registered kind;
    an instance's weights (the starting point) and options."""
    from .heads import Head
    from .heads.plugins import register

    head = settings.get("head")
    if isinstance(head, type):
        return {**settings, "head": register(head, "train_head(head=...)")}, None
    if isinstance(head, Head):
        kind = register(type(head), "train_head(head=...)")
        options = {k: getattr(head, k) for k in head.options}
        weights = {k: v.detach().cpu().clone() for k, v in head.state_dict().items()}
        return {**settings, "head": kind, "head_options": {**options, **settings.get("head_options", {})}}, weights
    return settings, None


@dataclass
class ScoreResults:
    """What `flowclip score` wrote, read back: results.json as `summary`, the per-record
    scores as a pyarrow Table."""

    folder: str
    summary: dict

    def result(self, benchmark: str, scorer: str, control: str = "real") -> dict:
        """Everything a benchmark reports for one scorer (a run label, or the NAME of NAME=folder
        when it names one run): official score, breakdowns, ties."""
        from .errors import FlowclipError

        runs = [s["run"] for s in self.summary["scorers"] if s["method"] == scorer and s["run"] != scorer]
        if len(runs) > 1:
            raise FlowclipError(f"{scorer!r} names {len(runs)} runs (seeds of one method): name one of {runs}")
        key = f"{control}|{runs[0] if runs else scorer}"
        if key not in self.summary["results"] or benchmark not in self.summary["results"][key]:
            have = sorted({b for r in self.summary["results"].values() for b in r})
            raise FlowclipError(f"no result for {benchmark!r} / {scorer!r} / {control!r}; benchmarks: {have}")
        return self.summary["results"][key][benchmark]

    def score(self, benchmark: str, scorer: str, control: str = "real") -> float:
        """The benchmark's official score (a fraction in [0, 1]), or R@1 / top-1."""
        from .scoring.score import headline

        return headline(self.result(benchmark, scorer, control))

    @property
    def records(self):
        import pyarrow.parquet as pq

        return pq.read_table(os.path.join(self.folder, "records.parquet"))


def score_manifests(
    store: str | FeatureStore,
    manifests: list[str],
    scorers: list[str],
    out: str,
    *,
    controls=("real",),
    device: str = "cpu",
    bootstrap: int = 10_000,
    overwrite: bool = False,
    quiet: bool = False,
    **options,
) -> ScoreResults:
    """Score manifests (files or folders) with scorers ('clip', a run folder, NAME=folder)
    as `flowclip score` does, into `out`; the results read back. options: seed,
    max_memory_mb, shortlist, image_root, compare."""
    from .devices import resolve_device
    from .scoring.score import run_score

    run_score(
        open_store(store), list(manifests), list(scorers), out, controls=tuple(controls),
        device=resolve_device(device), bootstrap_draws=bootstrap, overwrite=overwrite, progress=not quiet,
        log=_silent if quiet else print, **options,
    )  # fmt: skip
    return read_results(out)


def test_time_match(
    store: str | FeatureStore,
    manifest: str,
    scorer: str,
    out: str,
    *,
    recipe: str = "simplematch",
    device: str = "cpu",
    overwrite: bool = False,
    quiet: bool = False,
    image_root: str | None = None,
    **settings,
) -> dict:
    """`flowclip test-time-match`: a head (a run folder, or 'clip') adapted to a 2x2 group
    task's test set on the matchings GroupMatch induces (ours; not an official score), into
    `out`; returns results.json. settings: TTMConfig keys (iterations, epochs,
    batch_groups, lr, seed, threshold_start, ...) over the recipe's."""
    from .devices import resolve_device
    from .scoring.test_time_matching import RECIPES, TTMConfig, run_test_time_matching

    if recipe not in RECIPES:
        raise FlowclipError(f"unknown recipe {recipe!r}; use {', '.join(RECIPES)}")
    try:
        cfg = TTMConfig(**{**RECIPES[recipe], **settings})
    except TypeError as e:
        raise FlowclipError(f"test_time_match: {e}") from None
    return run_test_time_matching(
        open_store(store), manifest, scorer, out, cfg, recipe, device=resolve_device(device),
        image_root=image_root, overwrite=overwrite, log=_silent if quiet else print,
    )  # fmt: skip


def read_results(folder: str) -> ScoreResults:
    return ScoreResults(folder, json.load(open(os.path.join(folder, "results.json"))))


class OnlineScorer:
    """Scores PIL images against caption strings with an encoder and a head, no store:
    the features are computed as extract computes them (fixed-shape forwards, rounded to
    the store's FP16) and scored as `flowclip score` scores them, so the matrix equals
    the store path's (extract, then score). `run`: a finished run folder made on this
    encoder (its fingerprint is checked), or None for the frozen encoder (CLIP)."""

    def __init__(
        self,
        model: str,
        run: str | None = None,
        *,
        pretrained: str = "none",
        patch_readout: str = "standard",
        token_mask: str = "nonpad",
        device: str = "cpu",
        **spec,
    ):
        from .devices import resolve_device
        from .extraction.encoders import EncoderSpec, load_model, resolve
        from .heads import build_head

        if spec.get("decode", "pil") != "pil":
            raise FlowclipError(
                f"a Scorer takes decoded PIL images, so its preprocessing is PIL's; decode={spec['decode']!r} "
                "decodes files: extract them with `flowclip extract --decode` and score the store"
            )
        self.device = resolve_device(device)
        enc = resolve(
            EncoderSpec(model, pretrained=pretrained, patch_readout=patch_readout, token_mask=token_mask, **spec)
        )
        self.encoder = load_model(enc, self.device)
        dim = enc.config["model_cfg"]["embed_dim"]
        if run is None:
            self.head = build_head("clip", dim).to(self.device)
        else:
            from .hashing import fingerprint_of
            from .training.run_header import check_encoder

            loaded = load_run(run, self.device)
            here = {"fingerprint": fingerprint_of(enc.config), "encoder": enc.config}
            check_encoder(loaded.config, here, run, "the encoder configured here is")
            self.head = loaded.head

    @torch.no_grad()
    def __call__(self, images: list, captions: list[str]) -> torch.Tensor:
        """[len(images), len(captions)] scores of every pair, each equal bit for bit to the
        score `flowclip score` gives that pair from a store of the same encoder."""
        from .extraction.features import encode_images, encode_texts
        from .extraction.images import to_rgb
        from .heads.fixed_shapes import matched_scores
        from .store.banks import finish

        x = torch.stack([self.encoder.preprocess(to_rgb(im)) for im in images]).to(self.device)
        g, p = encode_images(self.encoder, x)
        f = encode_texts(self.encoder, self.encoder.tokenize(list(captions)), self.encoder.config["token_mask"])
        lengths = f.mask.sum(1)
        L = int(lengths.max())
        # the store keeps each caption's valid tokens, FP16; a batch pads them at the end
        H = torch.zeros(len(captions), L, f.tokens.shape[-1], dtype=torch.float16, device=f.tokens.device)
        mask = torch.arange(L, device=lengths.device)[None, :] < lengths[:, None]
        for i in range(len(captions)):
            H[i, : int(lengths[i])] = f.tokens[i][f.mask[i]].half()
        feats = finish(g.half(), p.half(), f.sentence.half(), H, mask, self.device)
        # every pair scored as flowclip score scores a record's candidates (matched_scores): the
        # same bits as its records.parquet, whatever else this call holds
        rows, cols = torch.meshgrid(torch.arange(len(images)), torch.arange(len(captions)), indexing="ij")
        a, b = rows.reshape(-1).to(self.device), cols.reshape(-1).to(self.device)
        pick = lambda x, k: x[k] if self.head.uses_tokens else None  # noqa: E731
        out = matched_scores(
            self.head, feats[0], feats[1] if self.head.uses_tokens else None, feats[2][b], pick(feats[3], b),
            pick(feats[4], b), image_of=a,
        )  # fmt: skip
        return out.float().cpu().reshape(len(images), len(captions))


def sweep(out: str, store: str, train: str, space: dict, *, quiet: bool = False, **settings) -> dict:
    """flowclip sweep from Python (docs/sweep.md): the same checks, trial folders, Optuna
    study and best.yaml; settings are the sweep YAML's other keys (validation=, eval=, ...).
    Returns the best trial: {trial, value, params, yaml, on_selection}."""
    from .config import build
    from .studies.sweep import sweep as run_sweep
    from .studies.sweep_trial import SweepConfig

    cfg = build(SweepConfig, {"out": out, "store": store, "train": train, "space": space, **settings}, "fc.sweep")
    return run_sweep(cfg, log=_silent if quiet else print)


def sweep_objective(out: str, store: str, train: str, space: dict, **settings):
    """objective(trial) -> float for your own optuna.create_study().optimize(...): each call
    draws the space's settings with the trial's suggest API, trains the trial's runs under
    OUT/trials and scores them exactly as flowclip sweep does (it reports each epoch's val
    accuracy, so your study's pruner can stop it)."""
    from .config import build
    from .studies.sweep_trial import SweepConfig, make_objective

    data = {"out": out, "store": store, "train": train, "space": space, **settings}
    return make_objective(build(SweepConfig, data, "fc.sweep_objective"))
