"""How a head is named on a command line, checked without importing torch: a built-in
kind, FILE.py:Class or package.module:Class (heads/plugins.py imports and registers it).
What can be told from the name alone (a file that is not there, a file without its class)
is answered here, at once, before the commands import torch."""

from __future__ import annotations

import functools
import os

from .errors import FlowclipError


def is_head_spec(value: object) -> bool:
    """FILE.py:Class or package.module:Class (a kind has no colon)."""
    return isinstance(value, str) and ":" in value


def is_file_target(target: str) -> bool:
    """A plug-in target read as a file path (anything ending in .py or holding a path
    separator), not a dotted module name."""
    return target.endswith(".py") or os.sep in target or "/" in target


@functools.cache
def _builtin_classes() -> tuple[tuple[str, dict], ...]:
    """(kind, {attribute: constant}) of each built-in head in the registry's order, read
    from heads/__init__.py's REGISTRY line and each class's constant attributes in
    heads/*.py, without importing them (which imports torch): the files the registry is
    built from."""
    import ast

    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "heads")
    attrs: dict[str, dict] = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py"):
            tree = ast.parse(open(os.path.join(folder, name), encoding="utf-8").read())
            for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
                attrs[cls.name] = {}
                for st in cls.body:
                    if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.value, ast.Constant):
                        target = st.targets[0]
                        if isinstance(target, ast.Name):
                            attrs[cls.name][target.id] = st.value.value
    init = ast.parse(open(os.path.join(folder, "__init__.py"), encoding="utf-8").read())
    calls = [n for n in ast.walk(init) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "update"]
    names = [
        e.id for c in calls for g in ast.walk(c) if isinstance(g, ast.Tuple) for e in g.elts if isinstance(e, ast.Name)
    ]
    return tuple((str(attrs[n]["kind"]), attrs[n]) for n in names if attrs.get(n, {}).get("kind"))


def builtin_kinds() -> tuple[str, ...]:
    """The built-in head kinds, in the registry's order (read without importing them)."""
    return tuple(kind for kind, _ in _builtin_classes())


def training_free_kinds() -> tuple[str, ...]:
    """The built-in scorers with no parameters (`training_free = True`): what --scorer takes
    by name, as it takes 'clip'."""
    return tuple(kind for kind, a in _builtin_classes() if a.get("training_free") is True)


def plugins_possible() -> bool:
    """Whether a head kind outside the built-in ones could be known in this process: a
    --plugin waiting, one loaded, or an installed package declaring flowclip.heads (read
    from package metadata: nothing is imported)."""
    import importlib.metadata
    import sys

    plugins = sys.modules.get("flowclip_cache.heads.plugins")
    if plugins is not None and (plugins._deferred or set(plugins.REGISTRY) - set(builtin_kinds())):
        return True
    return bool(importlib.metadata.entry_points(group="flowclip.heads"))


def check_head_name(head: object, where: str) -> None:
    """One line for a head name that cannot work, whatever else the command does."""
    if not isinstance(head, str):
        return
    if head.endswith(".py") and not is_head_spec(head):
        raise FlowclipError(
            f"{where}: {head} is a file; name the head class in it: {head}:ClassName "
            f"(or package.module:ClassName; docs/plugins.md)"
        )
    target = head.rpartition(":")[0]
    if is_head_spec(head) and is_file_target(target) and not os.path.isfile(os.path.abspath(target)):
        raise FlowclipError(f"{where}: head {head}: no such file {target}")
