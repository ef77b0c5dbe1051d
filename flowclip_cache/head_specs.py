"""How a head is named on a command line, checked without importing torch: a built-in
kind, FILE.py:Class or package.module:Class (heads/plugins.py imports and registers it).
What can be told from the name alone (a file that is not there, a file without its class)
is answered here, at once, before the commands import torch."""

from __future__ import annotations

import os

from .errors import FlowclipError


def is_head_spec(value: object) -> bool:
    """FILE.py:Class or package.module:Class (a kind has no colon)."""
    return isinstance(value, str) and ":" in value


def is_file_target(target: str) -> bool:
    """A plug-in target read as a file path (anything ending in .py or holding a path
    separator), not a dotted module name."""
    return target.endswith(".py") or os.sep in target or "/" in target


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
