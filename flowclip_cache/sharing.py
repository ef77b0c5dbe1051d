"""Sharing a trained head (docs/sharing.md): `flowclip publish` writes a folder that a
Hugging Face model repository can hold as it is, and `hf:OWNER/NAME` loads one back
through huggingface_hub (its cache; HF_HUB_OFFLINE honoured). A published folder holds
data only (safetensors and JSON): a downloaded one is a stranger's run folder, checked
as such, and a plug-in head's code is never taken from it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid

from . import outputs
from .errors import FlowclipError

KIND = "published-head"
# what a run's config.json keeps when published: no local paths (store, manifest) of the publisher
KEEP = ("train", "store_fingerprint", "encoder", "manifest_sha256", "git_revision", "head", "dim", "parameters")


def publish(run: str, out: str, results: str | None = None, overwrite: bool = False, log=print) -> str:
    """RUN (a finished head run) -> OUT: the head's safetensors, its config without local
    paths, DONE, and a model card (README.md) naming the encoder, the store fingerprint,
    how to load it and, from a results folder the user names, the scores it got there."""
    from .training.run_folder import load_head

    head, cfg = load_head(run)  # checked as scoring checks it (a plug-in head must be available)
    outputs.check_replaceable(out, KIND, overwrite)
    weights = os.path.join(run, "head.safetensors")
    sha = hashlib.sha256(open(weights, "rb").read()).hexdigest()
    scores = _scores_of(results, sha) if results else None
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(os.path.abspath(out))}.tmp-{uuid.uuid4().hex[:8]}")
    os.makedirs(tmp)
    try:
        shutil.copyfile(weights, os.path.join(tmp, "head.safetensors"))
        shutil.copyfile(os.path.join(run, "DONE"), os.path.join(tmp, "DONE"))
        kept = json.loads(json.dumps({k: cfg[k] for k in KEEP if k in cfg}))
        if isinstance(kept["head"].get("plugin"), dict) and kept["head"]["plugin"].get("source"):
            kept["head"]["plugin"]["source"] = os.path.basename(kept["head"]["plugin"]["source"])  # no local path
        kept["published"] = {"head_sha256": sha, "from_run": os.path.basename(os.path.normpath(run))}
        json.dump(kept, open(os.path.join(tmp, "config.json"), "w"), indent=1)
        with open(os.path.join(tmp, "README.md"), "w") as f:
            f.write(model_card(kept, _encoder_of(cfg), head, scores))
        outputs.publish(tmp, out, KIND, overwrite)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"published {run} -> {out} (head sha256 {sha[:12]}); upload: huggingface_hub.upload_folder")
    return out


def _encoder_of(cfg: dict) -> dict:
    """The encoder's name, weights and fingerprint: from the store the run was trained on
    when it is still there, else the run's own record."""
    enc = {"model": cfg.get("encoder"), "fingerprint": cfg["store_fingerprint"]}
    try:
        store = json.load(open(os.path.join(cfg["store"], "store.json")))
        if store.get("fingerprint") == cfg["store_fingerprint"]:
            enc["weights"] = store["encoder"].get("weights")
            enc["patch_readout"] = store["encoder"].get("patch_readout", "standard")
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return enc


def _scores_of(results: str, sha: str) -> dict:
    """{benchmark: official score} of the scorer in RESULTS whose head is this one (by
    the sha256 of its weights), Real images."""
    from .scoring.score import headline

    try:
        summary = json.load(open(os.path.join(results, "results.json")))
    except (OSError, ValueError) as e:
        raise FlowclipError(f"--results {results}: not a flowclip score results folder ({e})") from None
    runs = [s["run"] for s in summary.get("scorers", []) if s.get("head_sha256") == sha]
    if not runs:
        raise FlowclipError(f"--results {results}: none of its scorers is this head (sha256 {sha[:12]})")
    res = summary["results"].get(f"real|{runs[0]}", {})
    return {"fingerprint": summary.get("store_fingerprint"), "scores": {b: headline(r) for b, r in res.items()}}


def model_card(cfg: dict, enc: dict, head, scores: dict | None) -> str:
    hp, train = cfg["head"], cfg["train"]
    plugin = hp.get("plugin")
    lines = [
        "---",
        "library_name: flowclip",
        "tags: [flowclip, clip, compositionality, image-text-matching]",
        "---",
        "",
        f"# flowclip head: {hp['kind']}",
        "",
        f"A `{hp['kind']}` head ({cfg.get('parameters', '?'):,} parameters) trained with flowclip on cached "
        f"features of a frozen encoder. It scores only features of that exact encoder configuration.",
        "",
        "## Encoder",
        "",
        f"- model: `{enc.get('model')}`",
        f"- weights: `{(enc.get('weights') or {}).get('source', 'not recorded')}`"
        + (f" (sha256 `{enc['weights']['sha256'][:16]}`)" if (enc.get("weights") or {}).get("sha256") else ""),
        f"- store fingerprint: `{enc['fingerprint']}` (flowclip refuses a store of another encoder)",
        "",
        "## Training",
        "",
        "| setting | value |",
        "|---|---|",
        *[f"| {k} | {v} |" for k, v in train.items()],
        f"| training manifest sha256 | `{cfg.get('manifest_sha256', '?')[:16]}` |",
        f"| flowclip revision | `{str(cfg.get('git_revision'))[:12]}` |",
        "",
    ]
    if plugin:
        by_file = str(plugin.get("module")).startswith("flowclip_plugin_")
        where = f"the file `{plugin.get('source')}`" if by_file else f"the module `{plugin.get('module')}`"
        lines += [
            "## Plug-in head",
            "",
            f"This head is the class `{plugin.get('class')}` of {where} (source sha256 "
            f"`{str(plugin.get('sha256'))[:16]}`). This folder holds no code: install the package that provides "
            "it (entry point `flowclip.heads`) or pass `--plugin` with its source.",
            "",
        ]
    if scores:
        lines += ["## Results (Real images, official scores, %)", "", "| benchmark | score |", "|---|---|"]
        lines += [f"| {b} | {100 * s:.2f} |" for b, s in sorted(scores["scores"].items())]
        lines += ["", f"Scored on the store `{str(scores['fingerprint'])[:16]}` with `flowclip score`.", ""]
    lines += [
        "## Use",
        "",
        "```bash",
        "flowclip score --store STORE --manifests MANIFESTS --scorer clip --scorer NAME=hf:OWNER/NAME --out results",
        "```",
        "",
        "```python",
        "import flowclip_cache as fc",
        'run = fc.load_run("hf:OWNER/NAME")  # head, config, weights',
        "```",
        "",
    ]
    return "\n".join(lines)
