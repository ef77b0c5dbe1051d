"""Every config flowclip reads (train-head's TrainConfig, pretraining's recipe, the
pipelines' studies): YAML plus key=value overrides, checked in one place. Unknown
keys, wrong types, non-finite numbers and values outside a field's range (declared
as `field(metadata={"min": 1})`) are errors that name the file and the key."""

from __future__ import annotations

import dataclasses
import math
import os
import re
import types
import typing

import yaml

from .errors import FlowclipError
from .shipped import shipped_folder

PACKAGED = shipped_folder("pipelines")


def packaged_configs() -> list[str]:
    """Names of the YAML configs that ship with flowclip (the repository's pipelines/)."""
    return sorted(f[:-5] for f in os.listdir(PACKAGED) if f.endswith(".yaml"))


def find_config(name_or_path: str) -> str:
    """A YAML file by path, or a packaged config by name (`ablation`, `synthetic`, ...)."""
    if os.path.isfile(name_or_path):
        return name_or_path
    packaged = os.path.join(PACKAGED, os.path.basename(name_or_path).removesuffix(".yaml") + ".yaml")
    if os.sep not in name_or_path and os.path.isfile(packaged):
        return packaged
    raise FlowclipError(
        f"{name_or_path}: no such file, nor a config that ships with flowclip ({', '.join(packaged_configs())})"
    )


class _Loader(yaml.SafeLoader):
    """safe_load's loader, reading numbers as YAML 1.2 does: YAML 1.1 (PyYAML) reads
    `lr: 1e-4` or `8e-05`, an exponent without a decimal point, as the text '1e-4', and a
    config would be refused for a number everyone writes so."""


_Loader.yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789")
)


# What a YAML file may expand to: its values counted as a reader walks them, each alias (*a)
# at the full size of what it names, so a few lines of aliases to aliases cannot stand for
# billions of values (PyYAML shares an alias's object, but every check and copy walks it)
MAX_YAML_VALUES = 100_000
MAX_YAML_DEPTH = 100


class _TooLarge(yaml.YAMLError):
    """A document over MAX_YAML_VALUES or MAX_YAML_DEPTH, or one that names itself."""


def _expanded_size(root: yaml.Node) -> int:
    """Values the document stands for with every alias expanded, computed once per node
    (depth first, without recursion); _TooLarge past the bounds or on a cycle."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    open_nodes: set[int] = set()
    while stack:
        node, depth, done = stack.pop()
        if depth > MAX_YAML_DEPTH:
            raise _TooLarge(f"nested over {MAX_YAML_DEPTH} levels deep")
        kids = _children(node)
        if done:
            open_nodes.discard(id(node))
            sizes[id(node)] = 1 + sum(sizes[id(k)] for k in kids)
            if sizes[id(node)] > MAX_YAML_VALUES:
                raise _TooLarge(f"expands to over {MAX_YAML_VALUES:,} values through its aliases (&name / *name)")
            continue
        if id(node) in sizes:
            continue
        if id(node) in open_nodes:
            raise _TooLarge("an alias (*name) names a value that contains it")
        open_nodes.add(id(node))
        stack.append((node, depth, True))
        stack.extend((k, depth + 1, False) for k in kids if id(k) not in sizes)
    return sizes[id(root)]


def _children(node: yaml.Node) -> list:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [x for pair in node.value for x in pair]
    return []


def _safe_load(text):
    """yaml.safe_load with YAML 1.2's numbers, refusing a document that expands past
    MAX_YAML_VALUES values or MAX_YAML_DEPTH levels before anything is built from it."""
    loader = _Loader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise _TooLarge(f"nested over {MAX_YAML_DEPTH} levels deep") from None
        if node is None:
            return None
        _expanded_size(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def read_yaml(path: str):
    """A YAML document, safely (no tags, no code, within MAX_YAML_VALUES and MAX_YAML_DEPTH);
    errors are one line naming the file."""
    try:
        with open(path, encoding="utf-8") as f:
            return _safe_load(f)
    except UnicodeDecodeError as e:
        raise FlowclipError(f"{path}: not UTF-8 text ({e})") from None
    except _TooLarge as e:
        raise FlowclipError(f"{path}: refused: the YAML {e} (a config is read only within these bounds)") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise FlowclipError(f"{path}:{where}: not valid YAML ({getattr(e, 'problem', None) or e})") from None


def load_yaml(path: str) -> dict:
    """A YAML mapping (read_yaml); an empty file is {}."""
    data = read_yaml(path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise FlowclipError(f"{path}: expected a mapping of keys, got {type(data).__name__}")
    return data


def parse_overrides(items: list[str]) -> list[tuple[list[str], object]]:
    """'a=1', 'seeds=[0,1]', 'train_config.epochs=2' -> (key path, value parsed as YAML)."""
    out = []
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise FlowclipError(f"override {item!r}: expected KEY=VALUE")
        try:
            value = _safe_load(raw)
        except _TooLarge as e:
            raise FlowclipError(f"override {item[:80]!r}: refused: the YAML {e}") from None
        except yaml.YAMLError as e:
            raise FlowclipError(f"override {item!r}: value is not valid YAML ({e})") from e
        out.append((key.split("."), value))
    return out


def apply_overrides(data: dict, overrides: list[tuple[list[str], object]]) -> dict:
    """Set each override's leaf: 'heads={...}' replaces heads, 'train_config.epochs=2' one key."""
    data = dict(data)
    for path, value in overrides:
        node = data
        for p in path[:-1]:
            child = node.get(p)
            node[p] = dict(child) if isinstance(child, dict) else {}
            node = node[p]
        node[path[-1]] = value
    return data


def _check(value, typ, where: str):
    origin = typing.get_origin(typ)
    args = typing.get_args(typ)
    if typ is typing.Any:
        return value
    if origin is typing.Union or origin is types.UnionType:
        if value is None and type(None) in args:
            return None
        for a in args:
            if a is type(None):
                continue
            try:
                return _check(value, a, where)
            except FlowclipError:
                pass
        raise FlowclipError(f"{where}: expected {typ}, got {value!r}")
    if origin is list:
        if not isinstance(value, list):
            raise FlowclipError(f"{where}: expected a list, got {value!r}")
        return [_check(v, args[0], f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise FlowclipError(f"{where}: expected a mapping, got {value!r}")
        return {k: _check(v, args[1], f"{where}.{k}") for k, v in value.items()}
    if typ is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, typ) or (typ is not bool and isinstance(value, bool)):
        raise FlowclipError(f"{where}: expected {typ.__name__}, got {value!r}")
    if typ is float and not math.isfinite(value):
        raise FlowclipError(f"{where}: must be a finite number, got {value!r}")
    return value


def _check_range(value, meta: dict, where: str) -> None:
    if value is None:
        return
    if "min" in meta and value < meta["min"]:
        raise FlowclipError(f"{where}: must be at least {meta['min']}, got {value!r}")
    if "gt" in meta and not value > meta["gt"]:
        raise FlowclipError(f"{where}: must be greater than {meta['gt']}, got {value!r}")
    choices = meta.get("choices")
    if callable(choices):  # a registry that grows at run time (plug-in heads)
        choices = choices()
    if choices is not None and value not in choices:
        raise FlowclipError(f"{where}: must be one of {list(choices)}, got {value!r}")


def build(cls, data: dict, source: str):
    """A dataclass from a dict: unknown keys and wrong types are errors naming the key."""
    return cls(**check_fields(cls, data, source))


def check_fields(cls, data: dict, source: str) -> dict:
    """build's checks without making the instance (its __post_init__ may import what a
    check before torch must not): unknown, missing, mistyped and out-of-range keys are
    errors naming the key; -> the checked values."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise FlowclipError(f"{source}: unknown keys {unknown}; known: {sorted(fields)}")
    if not isinstance(data, dict):
        raise FlowclipError(f"{source}: expected a mapping of keys, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    kwargs = {k: _check(v, hints[k], f"{source}: key {k!r}") for k, v in data.items()}
    for k, v in kwargs.items():
        _check_range(v, dict(fields[k].metadata), f"{source}: key {k!r}")
    missing = [
        n
        for n, f in fields.items()
        if n not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise FlowclipError(f"{source}: missing keys {missing} (set them in the file or as KEY=VALUE)")
    return kwargs
