"""Heads from outside the package (docs/plugins.md): a file or module the user names
(`--head FILE.py:Class`, `--head package.module:Class`, `--plugin FILE_OR_MODULE`, a
study's `plugins:`), and heads that installed packages declare under the entry-point
group `flowclip.heads`. Each plug-in class is registered by its `kind` beside the
built-in heads, with its origin (module, class, source file and its sha256), which run
folders record. Code is imported only from what a user named on the command line, in a
study YAML or from Python, or from an installed package: never from a path a run
folder records."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
import os
import re
import sys
import traceback

from ..errors import FlowclipError
from ..head_specs import is_file_target, is_head_spec  # noqa: F401  (is_head_spec: callers import it from here)
from .base import REGISTRY, Head

GROUP = "flowclip.heads"
KIND = re.compile(r"^[a-z][a-z0-9_.-]*\Z")
_files: dict[str, object] = {}  # absolute path -> the module imported from it (each file once)
_entry_points_loaded = False
_deferred: list[str] = []  # --plugin targets not imported yet (a run's recorded sha256 is checked first)
_allow_changed = False  # --allow-changed-plugin: score a run with a plug-in file changed since training


def allow_changed(yes: bool = True) -> None:
    """The user's word that a run may be scored with its plug-in's source changed since
    training (the command line's --allow-changed-plugin)."""
    global _allow_changed
    _allow_changed = yes


def origin_of(cls: type) -> dict:
    """Where a head class comes from: module, class, source file and that file's sha256."""
    from ..hashing import file_sha256

    try:
        source: str | None = inspect.getsourcefile(cls)
    except TypeError:  # defined where no file holds it (an interactive session)
        source = None
    return {
        "module": cls.__module__,
        "class": cls.__qualname__,
        "source": os.path.abspath(source) if source else None,
        "sha256": file_sha256(source) if source and os.path.isfile(source) else None,
    }


def register(cls, label: str) -> str:
    """A plug-in head class into the registry under its kind; the same class twice is one."""
    if not (isinstance(cls, type) and issubclass(cls, Head)):
        raise FlowclipError(f"{label}: {getattr(cls, '__name__', cls)!r} is not a subclass of flowclip_cache.Head")
    kind = cls.__dict__.get("kind")
    if not isinstance(kind, str) or not KIND.match(kind):
        raise FlowclipError(
            f"{label}: class {cls.__name__} needs its own `kind`, a lower-case name such as "
            f'kind = "{cls.__name__.lower()}" (got {kind!r})'
        )
    have = REGISTRY.get(kind)
    if have is cls or (have is not None and _same_code(have, cls)):
        return kind  # (the same file imported twice, as a module and by its path, is one head)
    if have is not None:
        where = f"{have.__module__}.{have.__qualname__}"
        raise FlowclipError(f"{label}: kind {kind!r} is already the head {where}; give {cls.__name__} another kind")
    setattr(cls, "plugin_origin", origin_of(cls))  # this class only (read from cls.__dict__)
    REGISTRY[kind] = cls
    return kind


def _same_code(a: type, b: type) -> bool:
    oa, ob = a.__dict__.get("plugin_origin") or origin_of(a), origin_of(b)
    key = lambda o: (o["class"], o["source"], o["sha256"])  # noqa: E731
    return oa["sha256"] is not None and key(oa) == key(ob)


def _import(target: str, label: str):
    """A module from a file path (anything ending in .py or holding a path separator) or
    a dotted module name; an error inside it is one line naming its file and line."""
    as_file = is_file_target(target)
    try:
        if not as_file:
            return importlib.import_module(target)
        path = os.path.abspath(target)
        if path in _files:
            return _files[path]
        if not os.path.isfile(path):
            raise FlowclipError(f"{label}: no such file {target}")
        stem = re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
        name = f"flowclip_plugin_{stem}_{len(_files)}"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses and pickling-free introspection look it up
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
        _files[path] = module
        return module
    except FlowclipError:
        raise
    except ModuleNotFoundError as e:
        if not as_file and e.name and target.startswith(e.name):
            raise FlowclipError(f"{label}: no module named {target} (a file needs its .py suffix)") from None
        raise FlowclipError(f"{label}: importing it failed ({_where(e)}{type(e).__name__}: {e})") from None
    except Exception as e:
        raise FlowclipError(f"{label}: importing it failed ({_where(e)}{type(e).__name__}: {e})") from None


def _where(e: BaseException) -> str:
    frames = traceback.extract_tb(e.__traceback__)
    return f"{frames[-1].filename}:{frames[-1].lineno}: " if frames else ""


def resolve_head(spec: str) -> str:
    """A --head value as a registered kind: a kind as it is, or FILE.py:Class /
    package.module:Class imported and registered (the caller named it)."""
    if not is_head_spec(spec):
        return spec
    target, _, name = spec.rpartition(":")
    label = f"head {spec}"
    module = _import(target, label)
    cls = getattr(module, name, None)
    if cls is None:
        raise FlowclipError(f"{label}: {target} defines no {name!r}")
    return register(cls, label)


def load_plugin(target: str) -> list[str]:
    """--plugin FILE_OR_MODULE: every Head subclass with its own kind that it defines, registered."""
    label = f"--plugin {target}"
    module = _import(target, label)
    found = [
        c
        for c in vars(module).values()
        if isinstance(c, type) and issubclass(c, Head) and c.__module__ == module.__name__ and "kind" in c.__dict__
    ]
    if not found:
        raise FlowclipError(f"{label}: defines no Head subclass with a `kind`")
    return [register(c, label) for c in found]


def defer_plugin(target: str) -> None:
    """--plugin FILE_OR_MODULE from the command line: imported only when a head kind is
    first looked for (load_entry_points), and after check_deferred has compared the file's
    sha256 with the run that needs it, so a changed file is refused before it runs."""
    if is_file_target(target) and not os.path.isfile(target):
        raise FlowclipError(f"--plugin {target}: no such file")
    if target not in _deferred:
        _deferred.append(target)


def _target_sha256(target: str) -> tuple[str | None, str | None]:
    """(source file, sha256) of a --plugin target, found without importing it (a module's
    file by its import spec; its parent packages are imported, the module is not)."""
    from ..hashing import file_sha256

    path: str | None = target if is_file_target(target) else None
    if path is None:
        try:
            spec = importlib.util.find_spec(target)
        except (ImportError, ValueError):
            spec = None
        path = spec.origin if spec is not None and spec.origin not in (None, "built-in", "frozen") else None
    if path is None or not os.path.isfile(path):
        return None, None
    return os.path.abspath(path), file_sha256(path)


SHA256 = re.compile(r"^[0-9a-f]{64}\Z")


def recorded_sha256(origin: dict, where: str) -> str:
    """The sha256 a run folder records for its plug-in head's source. Without one the code
    it would run cannot be checked: refused, never read as "nothing to check" (a head
    trained from code no file held, a notebook's cell, records none either)."""
    want = origin.get("sha256")
    if not isinstance(want, str) or not SHA256.match(want):
        raise FlowclipError(
            f"{where}: its config records no sha256 of its plug-in head's source ({want!r}: the field was "
            f"removed, or the head was trained from code no file held), so the code it would run cannot be "
            f"checked; refused (pass --allow-changed-plugin to score it with the code found now)"
        )
    return want


def check_deferred(origin: dict, where: str) -> None:
    """Before any deferred --plugin is imported for a run that records a plug-in head's
    sha256: one of them must be that file, unchanged (or the user said
    --allow-changed-plugin); otherwise refused here, with nothing imported."""
    if _allow_changed:
        return
    want = recorded_sha256(origin, where)
    if not _deferred:
        return
    found = [_target_sha256(t) for t in _deferred]
    if any(sha == want for _, sha in found):
        return
    if any(sha is None for _, sha in found):  # a module whose file cannot be found: judged after import
        return
    said = ", ".join(f"{src} has sha256 {sha[:12]}" for src, sha in found if sha)
    raise FlowclipError(
        f"{where}: its head {origin.get('class')!r} is not the one it was trained with (sha256 {want[:12]} then; "
        f"{said} now); refused before importing it (pass --allow-changed-plugin to score it with this code)"
    )


def load_entry_points() -> None:
    """The --plugin targets deferred so far, then the heads installed packages declare
    (entry-point group flowclip.heads), once."""
    global _entry_points_loaded
    while _deferred:
        load_plugin(_deferred[0])
        _deferred.pop(0)
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in importlib.metadata.entry_points(group=GROUP):
        dist = getattr(ep.dist, "name", "?")
        label = f"installed plug-in head {ep.name} ({ep.value}, package {dist})"
        try:
            cls = ep.load()
        except Exception as e:
            raise FlowclipError(f"{label}: importing it failed ({_where(e)}{type(e).__name__}: {e})") from None
        register(cls, label)


def plugin_hint(kind: str, origin: dict | None, kinds: tuple[str, ...]) -> str:
    """What to pass so that a run's plug-in head is available (never imported from the run):
    the recorded module, class and source, and the sha256 the run expects of that file, so
    that a file of the same name placed elsewhere by someone else is not taken for it."""
    if not origin:
        return f"head kind {kind!r} is not one of the available kinds ({', '.join(kinds)}; a plug-in's needs --plugin)"
    module, source, sha = str(origin.get("module")), origin.get("source"), origin.get("sha256")
    by_path = module.startswith("flowclip_plugin_")  # imported from a file, not as a module
    what = f"class {origin.get('class')} of " + (f"the file {source}" if by_path or not source else f"module {module}")
    expect = f" (sha256 {sha})" if sha else " (no sha256 recorded: check the file yourself)"
    how = "--plugin FILE" if by_path or not source else f"--plugin {module}, or --plugin FILE"
    return (
        f"its head {kind!r} is the plug-in {what}{expect}; pass {how} naming that code once you have "
        f"checked it is the one expected and trust it (a run folder never imports code by itself; a "
        f"--plugin whose source has another sha256 is refused unless --allow-changed-plugin)"
    )


def check_origin(cls: type[Head], recorded: dict, where: str, warn) -> None:
    """A run's recorded plug-in origin against the class available now: another class is
    refused; so is a changed source file, unless the user said so (allow_changed), then it
    is said plainly (the scores may differ from training's)."""
    now = cls.__dict__.get("plugin_origin") or origin_of(cls)
    if recorded.get("class") != now["class"]:
        raise FlowclipError(
            f"{where}: its head {cls.kind!r} was {recorded.get('module')}.{recorded.get('class')}, the one "
            f"available now is {now['module']}.{now['class']}; refused"
        )
    if not _allow_changed:
        recorded_sha256(recorded, where)
    if now.get("sha256") != recorded.get("sha256"):
        said = (
            f"the source of its head {cls.kind!r} ({now['source']}) is not the one it was trained with "
            f"(sha256 {str(recorded.get('sha256'))[:12]} then, {str(now.get('sha256'))[:12]} now)"
        )
        if not _allow_changed:
            raise FlowclipError(f"{where}: {said}; refused (pass --allow-changed-plugin to score it with this code)")
        warn(f"warning: {where}: {said}; its scores may differ")
