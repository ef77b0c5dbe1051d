"""A scorer as the command line names it ('clip' or another training-free scorer by its
kind, a run folder, NAME=folder, hf:OWNER/NAME)
and the image controls, read and checked without importing torch: a mistake in either is
refused at once, before a head or the store's features are loaded."""

from __future__ import annotations

import os

from ..errors import FlowclipError

CONTROLS = ("real", "shuffle", "fixed")


def parse_controls(text: str) -> tuple[str, ...]:
    """--controls real,shuffle,fixed -> the names, each one known."""
    ctl = tuple(c.strip() for c in text.split(",") if c.strip())
    bad = [c for c in ctl if c not in CONTROLS]
    if bad:
        raise FlowclipError(f"--controls: unknown {bad}; use {', '.join(CONTROLS)}")
    return ctl


def scorer_folder(spec: str) -> tuple[str, str, bool]:
    """(the NAME given or '', a training-free scorer's kind ('clip', 'filip-score', ...) or
    a finished run folder, whether it is a published head's snapshot) of one --scorer; a
    folder that is missing or unfinished is refused."""
    from ..head_specs import training_free_kinds
    from ..hub import hub_folder, is_hub_spec

    name, sep, path = spec.partition("=")
    if not sep or "/" in name or os.path.exists(spec):  # a bare path
        name, path = "", spec
    hub = is_hub_spec(path)
    if hub:  # a published head (sharing/publish.py): its local snapshot, labelled by its NAME
        name, path = name or path.rsplit("/", 1)[-1].split("@")[0], hub_folder(path)
    if path in training_free_kinds():
        return name, path, hub
    if not os.path.isdir(path):
        raise FlowclipError(f"--scorer {spec}: the folder {path} does not exist" + _nearest(path))
    if not os.path.exists(os.path.join(path, "head.safetensors")) and not os.path.exists(os.path.join(path, "DONE")):
        raise FlowclipError(f"--scorer {spec}: {path} is not a finished train-head run folder")
    if not os.path.exists(os.path.join(path, "DONE")):
        raise FlowclipError(f"--scorer {spec}: {path} is an unfinished run")
    return name, path, hub


def check_scorers(specs, store: str | None = None, labels: str = "name") -> None:
    """Every --scorer, before anything heavier is imported: its folder, a run folder's files
    (config, weights header and length, published hash; with `store`, that it was trained on
    that store's encoder), one label per scorer, runs grouped under one name alike."""
    from ..training.run_header import check_run_files

    parsed = [scorer_folder(spec) for spec in specs]  # (a mistyped name first)
    meta = _store_meta(store) if any(path not in _training_free() for _, path, _ in parsed) else None
    trains = [
        None if path in _training_free() else check_run_files(path, f"--scorer {spec}", meta)["train"]
        for spec, (_, path, _) in zip(specs, parsed)
    ]
    runs = scorer_labels(parsed, labels)
    same_method([(method, run, train) for (method, run), train in zip(runs, trains)])


def _training_free():
    from ..head_specs import training_free_kinds

    return training_free_kinds()


def _store_meta(store: str | None) -> dict | None:
    """A local store's store.json (torch-free), or None (no store given, or one at a URL)."""
    if store is None or "://" in store:
        return None
    from ..store.layout import read_store_json

    return read_store_json(store)


def scorer_labels(parsed: list[tuple[str, str, bool]], labels: str = "name") -> list[tuple[str, str]]:
    """(method, run label) of each parsed --scorer (scorer_folder's triples). A method is the
    NAME given, else the label; a run is labelled by its folder's name (a published head by
    its NAME), except that a NAME given to one scorer alone labels it (labels="name";
    labels="folder" keeps folders' names, as a study's runs are its folders). Two scorers of
    one label are refused."""
    out = []
    for name, path, hub in parsed:
        label = path if path in _training_free() else name if hub else os.path.basename(os.path.normpath(path))
        out.append([name or label, label])
    if labels == "name":
        methods = [m for m, _ in out]
        for entry, (name, _, _) in zip(out, parsed):
            if name and methods.count(entry[0]) == 1:
                entry[1] = entry[0]
    seen = set()
    for _, run in out:
        if run in seen:
            raise FlowclipError(f"--scorer: two scorers named {run!r} (give each a NAME=folder of its own)")
        seen.add(run)
    return [(m, r) for m, r in out]


def same_method(runs: list[tuple[str, str, dict | None]]) -> None:
    """Runs grouped under one name are seeds of one method: the same head and settings,
    differing in the seed only. runs: (method, run label, its training settings or None)."""
    from ..training.train_config import recorded_settings

    by_name: dict = {}
    for method, run, train in runs:
        if train is None:
            continue
        settings = {k: v for k, v in recorded_settings(train).items() if k != "seed"}
        by_name.setdefault(method, []).append((run, settings))
    for name, group in by_name.items():
        first_run, first = group[0]
        for run, settings in group[1:]:
            differ = sorted(k for k in set(first) | set(settings) if first.get(k) != settings.get(k))
            if differ:
                raise FlowclipError(
                    f"--scorer {name}=...: {first_run} and {run} are grouped as seeds of one method "
                    f"but differ in {', '.join(f'{k} ({first.get(k)} vs {settings.get(k)})' for k in differ)}; "
                    f"give them different names"
                )


def _nearest(path: str) -> str:
    import difflib

    parent = os.path.dirname(os.path.normpath(path)) or "."
    if not os.path.isdir(parent):
        return f" (nor does {parent})"
    names = [n for n in os.listdir(parent) if os.path.isdir(os.path.join(parent, n))]
    near = difflib.get_close_matches(os.path.basename(os.path.normpath(path)), names, n=3, cutoff=0.6)
    return f"; did you mean {', '.join(os.path.join(parent, n) for n in near)}?" if near else ""
