"""Sharing a trained head (docs/publish.md): `flowclip publish` writes a folder that a
Hugging Face model repository can hold as it is, and `hf:OWNER/NAME` loads one back
through huggingface_hub (its cache; HF_HUB_OFFLINE honoured). A published folder holds
data only (safetensors and JSON): a downloaded one is a stranger's run folder, checked
as such, and a plug-in head's code is never taken from it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil

from .. import outputs
from ..errors import FlowclipError
from ..hashing import file_sha256
from ..store.manifest_keys import extract_flags
from .model_card import render as render_card

KIND = "published-head"
# what a run's config.json keeps when published: no local paths (store, manifest) of the publisher
KEEP = ("train", "store_fingerprint", "encoder", "encoder_description", "manifest_sha256", "git_revision", "head",
        "dim", "parameters")  # fmt: skip


def publish(run: str, out: str, results: str | None = None, overwrite: bool = False, log=print, **card) -> str:
    """RUN (a finished head run) -> OUT: the head's safetensors, its config without local
    paths, DONE, and a model card (README.md) with the Hub's metadata, naming the encoder and
    the extract command of its store, the training data, a sweep's selection, how to load it
    and, from a results folder the user names, the scores it got there. card: license,
    base_model, datasets, push (OWNER/NAME: upload it there), private."""
    from ..training.run_header import check_run_files

    push = card.pop("push", None)
    if push is not None:
        check_repo_id(push)
    outputs.check_replaceable(out, KIND, overwrite)
    if not os.path.isfile(os.path.join(run, "DONE")):  # (before torch: a folder that is no run, or unfinished)
        raise FlowclipError(f"{run} is not a finished train-head run folder (no DONE); publish takes one")
    check_run_files(run, f"run folder {run}")
    from ..training.run_folder import load_head

    head, cfg = load_head(run)  # checked as scoring checks it (a plug-in head must be available)
    weights = os.path.join(run, "head.safetensors")
    sha = hashlib.sha256(open(weights, "rb").read()).hexdigest()
    scores = _scores_of(results, sha) if results else None
    with outputs.staged(out, KIND, overwrite) as tmp:
        shutil.copyfile(weights, os.path.join(tmp, "head.safetensors"))
        shutil.copyfile(os.path.join(run, "DONE"), os.path.join(tmp, "DONE"))
        kept = json.loads(json.dumps({k: cfg[k] for k in KEEP if k in cfg}))
        if isinstance(kept["head"].get("plugin"), dict) and kept["head"]["plugin"].get("source"):
            kept["head"]["plugin"]["source"] = os.path.basename(kept["head"]["plugin"]["source"])  # no local path
        enc, store_encoder = _encoder_of(cfg)
        kept["published"] = {
            "head_sha256": sha,
            "from_run": os.path.basename(os.path.normpath(run)),
            "training_data": training_data(cfg),
            "extract": extract_flags(store_encoder) if store_encoder else None,
            "selection": sweep_selection(run),
        }
        json.dump(kept, open(os.path.join(tmp, "config.json"), "w"), indent=1)
        text = render_card(
            {
                **kept["published"], "name": os.path.basename(os.path.normpath(out)), "license": "unknown",
                "base_model": base_model(store_encoder), **{k: v for k, v in card.items() if v},
                "head": kept["head"], "parameters": cfg.get("parameters"), "train": kept["train"], "encoder": enc,
                "git_revision": cfg.get("git_revision"), "scores": scores,
                "repo": push,
            }
        )  # fmt: skip
        with open(os.path.join(tmp, "README.md"), "w") as f:
            f.write(text)
    log(f"published {run} -> {out} (head sha256 {sha[:12]})")
    if push is not None:
        push_folder(out, push, bool(card.get("private")), log)
    return out


def check_repo_id(repo: str) -> None:
    owner, slash, name = repo.partition("/")
    if not slash or not owner or not name or "/" in name or repo.startswith(("hf:", "hf-hub:")):
        raise FlowclipError(f"--push {repo!r}: expected a Hugging Face model repository, OWNER/NAME")


def push_folder(out: str, repo: str, private: bool, log) -> None:
    """Upload a published folder to the Hub with huggingface_hub (its token, its API): the
    repository is created when absent; flowclip's own marker stays local."""
    from huggingface_hub import HfApi

    try:
        api = HfApi()
        api.create_repo(repo, repo_type="model", private=private, exist_ok=True)
        api.upload_folder(
            repo_id=repo, folder_path=out, repo_type="model", ignore_patterns=[outputs.MARKER],
            commit_message=f"flowclip publish: {os.path.basename(os.path.normpath(out))}",
        )  # fmt: skip
    except Exception as e:  # huggingface_hub's errors: no token, no network, no permission
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise FlowclipError(
            f"--push {repo}: the upload failed ({first}); {out} is complete: push it again with "
            f"huggingface_hub.upload_folder or `huggingface-cli upload {repo} {out}`"
        ) from None
    log(f"pushed {out} -> https://huggingface.co/{repo}; others score with --scorer hf:{repo}")


def training_data(cfg: dict) -> dict:
    """The training manifest's name, records and source, when it is still where the run read it."""
    from ..manifest import Manifest

    data = {"manifest": os.path.basename(str(cfg.get("manifest", "?"))), "sha256": cfg.get("manifest_sha256")}
    if cfg.get("excluded_failed"):  # trained on part of its manifest (--allow-missing): said on the card
        data["left_out"] = len(cfg["excluded_failed"])
    try:
        if file_sha256(cfg["manifest"]) == cfg.get("manifest_sha256"):
            m = Manifest.read(cfg["manifest"])
            data["records"] = len(m)
            data["source"] = m.meta.get("source") or m.meta.get("benchmark")
    except (OSError, KeyError, TypeError, FlowclipError):
        pass
    return data


def sweep_selection(run: str) -> dict | None:
    """How a sweep chose this run, when it is a trial of a flowclip sweep (OUT/trials/<name>)."""
    trials = os.path.dirname(os.path.abspath(run))
    sweep = os.path.dirname(trials)
    if os.path.basename(trials) != "trials" or outputs.kind_of(sweep) != "sweep":
        return None
    try:
        best = json.load(open(os.path.join(sweep, "best.json")))
    except (OSError, ValueError):
        return None
    keep = ("trial", "value", "direction", "selected_on", "objective", "trials", "space")
    return {**{k: best.get(k) for k in keep}, "best": os.path.basename(os.path.abspath(run)) in best.get("runs", [])}


def base_model(store_encoder: dict | None) -> str | None:
    """The Hub repository of the encoder's weights, when open_clip's tag names one."""
    if not store_encoder or not str(store_encoder.get("weights", {}).get("source", "")).startswith("open_clip:"):
        return None
    try:
        import open_clip

        tag = store_encoder["weights"]["source"].split(":", 1)[1]
        hub = (open_clip.get_pretrained_cfg(store_encoder["model"], tag) or {}).get("hf_hub", "")
    except Exception:  # an unknown config: no base model named
        return None
    return hub.strip("/") or None


def _encoder_of(cfg: dict) -> tuple[dict, dict | None]:
    """(the encoder's name, weights and fingerprint, its store.json entry): from the store the
    run was trained on when it is still there (None otherwise), else the run's own record."""
    enc = {"model": cfg.get("encoder"), "fingerprint": cfg["store_fingerprint"]}
    try:
        store = json.load(open(os.path.join(cfg["store"], "store.json")))
        if store.get("fingerprint") == cfg["store_fingerprint"]:
            enc["weights"] = store["encoder"].get("weights")
            enc["patch_readout"] = store["encoder"].get("patch_readout", "standard")
            return enc, store["encoder"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return enc, None


def _scores_of(results: str, sha: str) -> dict:
    """{benchmark: official score} of the scorer in RESULTS whose head is this one (by
    the sha256 of its weights), Real images."""
    from ..scoring.score import headline

    try:
        summary = json.load(open(os.path.join(results, "results.json")))
    except (OSError, ValueError) as e:
        raise FlowclipError(f"--results {results}: not a flowclip score results folder ({e})") from None
    runs = [s["run"] for s in summary.get("scorers", []) if s.get("head_sha256") == sha]
    if not runs:
        raise FlowclipError(f"--results {results}: none of its scorers is this head (sha256 {sha[:12]})")
    res = summary["results"].get(f"real|{runs[0]}", {})
    return {"fingerprint": summary.get("store_fingerprint"), "scores": {b: headline(r) for b, r in res.items()}}
