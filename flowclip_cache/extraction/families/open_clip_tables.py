"""open_clip's model configs and pretrained tags read as data, without importing open_clip
(which imports torch): the JSON configs in its package folder and the tag table of its
pretrained.py, evaluated from the syntax tree with a reader that knows literals, dict(...)
and the tag helpers' keyword arguments only (nothing is executed). `flowclip models` lists
from these in a fraction of a second; anything unexpected raises TableUnreadable and the
caller imports open_clip instead. tests/test_families.py checks both give the same list."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re


class TableUnreadable(Exception):
    """open_clip's files are not laid out as this reader expects."""


def package_dir() -> str:
    spec = importlib.util.find_spec("open_clip")  # finds the package without running it
    if spec is None or not spec.submodule_search_locations:
        raise TableUnreadable("open_clip is not installed")
    return list(spec.submodule_search_locations)[0]


def natural_key(name: str) -> list:
    """open_clip's order of config names (factory._natural_key)."""
    return [int(s) if s.isdigit() else s for s in re.split(r"(\d+)", name.lower())]


def model_configs(extra_dirs: list[str]) -> dict[str, dict]:
    """{name: config} as open_clip.list_models() has them after add_model_config(extra_dirs)."""
    found: dict[str, dict] = {}
    for folder in [os.path.join(package_dir(), "model_configs"), *extra_dirs]:
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            if name.endswith(".json"):
                cfg = json.load(open(os.path.join(folder, name)))
                if all(k in cfg for k in ("embed_dim", "vision_cfg", "text_cfg")):
                    found[name[: -len(".json")]] = cfg
    return dict(sorted(found.items(), key=lambda kv: natural_key(kv[0])))


def pretrained_table() -> dict[str, dict[str, dict]]:
    """{model: {tag: its config (url, hf_hub, quick_gelu, ...)}} as open_clip.pretrained's
    _PRETRAINED holds it, quickgelu variants included."""
    tree = ast.parse(open(os.path.join(package_dir(), "pretrained.py")).read())
    env: dict = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                env[node.targets[0].id] = _value(node.value, env)
            except TableUnreadable:
                pass  # an assignment the table does not use (or fails below, by name)
    table = env.get("_PRETRAINED")
    if not isinstance(table, dict) or not table:
        raise TableUnreadable("pretrained.py: no _PRETRAINED table")
    quick = {f"{m}-quickgelu": {t: c for t, c in tags.items() if c.get("quick_gelu")} for m, tags in table.items()}
    table.update({m: tags for m, tags in quick.items() if tags})  # as its quickgelu loop does
    return table


def _value(node, env):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise TableUnreadable(f"unknown name {node.id}")
        return env[node.id]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_value(e, env) for e in node.elts]
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise TableUnreadable("a ** in a dict")
        return {_value(k, env): _value(v, env) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        if node.func.id == "dict" and not node.args:
            return {kw.arg: _value(kw.value, env) for kw in node.keywords if kw.arg}
        if node.func.id.startswith("_") and node.func.id.endswith("cfg"):  # _pcfg(url=..., hf_hub=..., ...)
            return {kw.arg: v for kw in node.keywords if kw.arg and (v := _literal(kw.value)) is not _NO}
    raise TableUnreadable(f"line {getattr(node, 'lineno', '?')}: not a literal")


_NO = object()


def _literal(node):
    try:
        return ast.literal_eval(node)
    except ValueError:
        return _NO  # a helper's argument that is not a literal (a mean/std constant): not needed here
