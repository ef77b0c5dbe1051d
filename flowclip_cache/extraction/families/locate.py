"""Where encoder weights and configs come from: the model configs and synthetic-world
weights that ship with flowclip, and open_clip / Hugging Face weights found in the local
caches (downloaded only when a network is there). The families and encoders.py both
import this module; it imports neither."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from ...errors import WeightsUnavailable
from ...hashing import file_sha256

OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)
_CONFIG_DIR = Path(__file__).parent.parent / "model_configs"
_registered = False


def register_package_configs() -> None:
    """Register the model configs that ship with flowclip (e.g. the tiny CLIP)."""
    global _registered
    if not _registered:
        import open_clip

        open_clip.add_model_config(_CONFIG_DIR)
        _registered = True


WEIGHTS_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "weights")  # flowclip_cache/extraction/weights


def _has_shipped(model: str) -> bool:
    try:
        shipped_weights(model)
        return True
    except WeightsUnavailable:
        return False


def shipped_weights(model: str) -> str:
    """Weights flowclip ships (the tiny CLIP pretrained on the synthetic world), checked
    against the sha256 on their card."""
    import json

    folder = WEIGHTS_DIR
    path = os.path.join(folder, f"{model}-synthetic.safetensors")
    card = path.replace(".safetensors", ".json")
    if not os.path.isfile(path) or not os.path.isfile(card):
        shipped = sorted(
            f[: -len("-synthetic.safetensors")] for f in os.listdir(folder) if f.endswith("-synthetic.safetensors")
        )
        from ...config import packaged_configs

        recipe = "pretrain_" + model.removeprefix("flowclip-").replace("-", "_")  # pipelines/pretrain_tiny_clip*.yaml
        if recipe not in packaged_configs():
            recipe = f"pretrain_tiny_clip model={model}"
        if model.startswith("flowclip-tiny"):  # the recipes make tiny-CLIP weights, nothing else
            fix = f"make them with: flowclip pretrain-tiny-clip {recipe}"
        else:
            fix = (
                f"it ships them only for {', '.join(shipped) or 'no model'}; for {model} pass an open_clip tag "
                f"(`flowclip models` lists them), a weights file, or --pretrained none (random weights)"
            )
        raise WeightsUnavailable(f"flowclip ships no synthetic-world weights for {model}: {fix}")
    want = json.load(open(card))["sha256"]
    got = file_sha256(path)
    if got != want:
        raise WeightsUnavailable(f"{path}: sha256 {got[:12]} does not match its card ({want[:12]}); reinstall flowclip")
    return path


def local_pretrained(tag_cfg: dict) -> str | None:
    """The open_clip weights of a pretrained tag if a local cache holds them (the Hugging
    Face cache, or open_clip's ~/.cache/clip for URL weights), else None. Never downloads."""
    hf = tag_cfg.get("hf_hub", "")
    if hf:
        repo, filename = os.path.split(hf)
        filenames = [filename] if filename else ["open_clip_model.safetensors", "open_clip_pytorch_model.bin"]
        try:
            from huggingface_hub import hf_hub_download

            for fn in filenames:
                try:
                    return hf_hub_download(repo_id=repo, filename=fn, local_files_only=True)
                except Exception:
                    pass
        except ImportError:
            pass
    url = tag_cfg.get("url", "")
    if url:
        cached = os.path.join(os.path.expanduser("~/.cache/clip"), os.path.basename(url))
        if os.path.isfile(cached):
            return cached
    return None


def locate_pretrained(model: str, tag: str, tag_cfg: dict) -> str:
    """Find open_clip weights on disk; download only when a network is there.

    open_clip's own download retries for ~46 s before failing on a machine without a
    network. We look in the local caches first, and fail at once when offline."""
    from open_clip import pretrained as ocp

    found = local_pretrained(tag_cfg)
    if found:
        return found
    hf, url = tag_cfg.get("hf_hub", ""), tag_cfg.get("url", "")
    where = f"Hugging Face hub {hf}" if hf else url
    if _offline() or not _network_reachable():
        raise WeightsUnavailable(
            f"{model} weights {tag!r} are not on this machine and cannot be downloaded "
            f"({'HF_HUB_OFFLINE is set' if _offline() else 'no network'}). Download them where "
            f"there is a network (from {where}) into the Hugging Face cache, or pass the file "
            f"itself: --pretrained /path/to/weights.safetensors. For a run without weights use "
            f"--pretrained none (random weights)."
        )
    path = ocp.download_pretrained(tag_cfg)
    if not path:
        raise WeightsUnavailable(f"open_clip could not download {model}:{tag} from {where}")
    return path


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes", "on")


def _network_reachable(host: str = "huggingface.co", port: int = 443, timeout: float = 3.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
