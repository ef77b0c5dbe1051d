"""A published head's model card (README.md), as the Hugging Face Hub reads it: the Hub's
metadata in the YAML front matter (license, base_model, datasets, tags, a model-index with
the scores), then what the head is, the encoder and the exact extract command that makes a
store it scores, the training data and settings, how it was selected (a sweep), and how to
use it (docs/publish.md)."""

from __future__ import annotations

import shlex

import yaml

TAGS = ["flowclip", "clip", "compositionality", "image-text-matching"]


def metadata(card: dict) -> dict:
    """The front matter: the Hub's model-card metadata (its `model-index` from the scores)."""
    meta = {"library_name": "flowclip", "license": card["license"]}
    if card.get("base_model"):
        meta["base_model"] = card["base_model"]
    if card.get("datasets"):
        meta["datasets"] = list(card["datasets"])
    meta["tags"] = TAGS + [f"flowclip-head-{card['head']['kind']}"]
    scores = (card.get("scores") or {}).get("scores")
    if scores:
        meta["model-index"] = [
            {
                "name": card["name"],
                "results": [
                    {
                        "task": {"type": "image-text-matching", "name": "Image-text matching"},
                        "dataset": {"name": bench, "type": bench},
                        "metrics": [{"type": "accuracy", "value": round(100 * s, 2), "name": "official score (%)"}],
                    }
                    for bench, s in sorted(scores.items())
                ],
            }
        ]
    return meta


def render(card: dict) -> str:
    """card: name, license, base_model, datasets, head, parameters, train, encoder, extract
    (flags or None), training_data, selection, scores, repo."""
    hp = card["head"]
    lines = ["---", yaml.safe_dump(metadata(card), sort_keys=False).rstrip(), "---", ""]
    lines += [
        f"# flowclip head: {hp['kind']}",
        "",
        f"A `{hp['kind']}` head ({card.get('parameters', '?'):,} parameters) trained with flowclip on cached "
        f"features of a frozen encoder. It scores only features of that exact encoder configuration.",
        "",
    ]
    lines += _encoder(card) + _training(card) + _selection(card) + _plugin(hp) + _scores(card) + _use(card)
    return "\n".join(lines)


def _encoder(card: dict) -> list[str]:
    enc = card["encoder"]
    weights = enc.get("weights") or {}
    lines = [
        "## Encoder",
        "",
        f"- model: `{enc.get('model')}`",
        f"- weights: `{weights.get('source', 'not recorded')}`"
        + (f" (sha256 `{weights['sha256'][:16]}`)" if weights.get("sha256") else ""),
        f"- store fingerprint: `{enc['fingerprint']}` (flowclip refuses a store of another encoder)",
        "",
    ]
    if card.get("extract"):
        command = " ".join(shlex.quote(a) if not a.startswith("<") else a for a in card["extract"])
        lines += [
            "A store this head scores (the same fingerprint) is made by:",
            "",
            "```bash",
            f"flowclip extract --store STORE {command} --manifest MANIFEST --image-root IMAGES",
            "```",
            "",
        ]
    else:
        lines += ["(The store was not found when this head was published: its extract flags are not recorded.)", ""]
    return lines


def _training(card: dict) -> list[str]:
    data = card.get("training_data") or {}
    lines = ["## Training", ""]
    if data.get("records") is not None:
        source = f", source: {data['source']}" if data.get("source") else ""
        lines += [f"Trained on the manifest `{data['manifest']}` ({data['records']:,} records{source}).", ""]
    if data.get("left_out"):
        lines += [
            f"**Partial data:** {data['left_out']:,} of the manifest's records were left out of training "
            f"(extract could not read their image or caption; trained with --allow-missing).",
            "",
        ]
    lines += ["| setting | value |", "|---|---|", *[f"| {k} | {v} |" for k, v in card["train"].items()]]
    lines += [
        f"| training manifest sha256 | `{str(data.get('sha256', '?'))[:16]}` |",
        f"| flowclip revision | `{str(card.get('git_revision'))[:12]}` |",
        "",
    ]
    return lines


def _selection(card: dict) -> list[str]:
    sel = card.get("selection")
    if not sel:
        return []
    how = "its best trial" if sel["best"] else "one of its trials (not the best)"
    return [
        "## Selection",
        "",
        f"These settings were selected by a `flowclip sweep` as {how}: trial {sel['trial']} of {sel['trials']}, "
        f"{sel['direction']} the {sel['objective']} on `{sel['selected_on']}` ({sel['value']:.4f}), searching "
        f"{', '.join(f'`{k}`' for k in sel['space'])}. Scores on `{sel['selected_on']}` are biased upward by that "
        "selection; the results below are on what the card names.",
        "",
    ]


def _plugin(hp: dict) -> list[str]:
    plugin = hp.get("plugin")
    if not plugin:
        return []
    where = f"the file `{plugin.get('source')}`" if _by_file(plugin) else f"the module `{plugin.get('module')}`"
    return [
        "## Plug-in head",
        "",
        f"This head is the class `{plugin.get('class')}` of {where} (source sha256 "
        f"`{str(plugin.get('sha256'))[:16]}`). This folder holds no code: install the package that provides "
        "it (entry point `flowclip.heads`) or pass `--plugin` with its source.",
        "",
    ]


def _scores(card: dict) -> list[str]:
    scores = card.get("scores")
    if not scores:
        return []
    lines = ["## Results (Real images, official scores, %)", "", "| benchmark | score |", "|---|---|"]
    lines += [f"| {b} | {100 * s:.2f} |" for b, s in sorted(scores["scores"].items())]
    return lines + ["", f"Scored on the store `{str(scores['fingerprint'])[:16]}` with `flowclip score`.", ""]


def _use(card: dict) -> list[str]:
    repo = card.get("repo") or "OWNER/NAME"
    plugin = card["head"].get("plugin")
    target = _plugin_target(plugin) if plugin else None
    flag = f"--plugin {target} " if target else ""
    load = f'fc.load_plugin("{target}")\n' if target else ""
    return [
        "## Use",
        "",
        "```bash",
        f"flowclip score {flag}--store STORE --manifests MANIFESTS --scorer clip --scorer mine=hf:{repo} --out results",
        "```",
        "",
        "```python",
        "import flowclip_cache as fc",
        f'{load}run = fc.load_run("hf:{repo}")  # head, config, weights',
        "```",
        "",
    ]


def _by_file(plugin: dict) -> bool:
    """A head loaded from a file (--plugin FILE.py), not from an installed module."""
    return str(plugin.get("module")).startswith("flowclip_plugin_")


def _plugin_target(plugin: dict) -> str:
    """What --plugin takes to load this head: its file's name, or its module."""
    return str(plugin.get("source") if _by_file(plugin) else plugin.get("module"))
