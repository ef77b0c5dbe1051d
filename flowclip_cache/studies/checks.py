"""Everything a study can check before it trains anything, and its plan. `flowclip run
--dry-run` prints both and creates nothing; a real run makes the same checks first, so
a mistake in an evaluation manifest stops the study before hours of training, not after.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from ..errors import FlowclipError
from ..training import checkpoint

DONE = "STUDY_DONE"  # a study's marker: its summary is written (done_key says of what)


@dataclass
class Checked:
    problems: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # the plan, for the dry run
    store: Any = None  # the FeatureStore, once found
    cfgs: dict = field(default_factory=dict)  # run folder -> TrainConfig
    device: str = "cpu"
    train_path: str | None = None
    training: Any = None  # the training manifest's TrainingRecords as checked: what the study then trains on
    train_records: int = 0  # records with split == 'train'
    estimated: bool = False  # train_records estimated from the world's settings (not built yet)
    feature_dims: tuple[int, int] | None = None  # (d, patches) of the encoder, for a step's timing

    def refuse_problems(self) -> None:
        """Every problem found before training, in one refusal."""
        if self.problems:
            n = len(self.problems)
            raise FlowclipError(
                f"{n} problem{'s' if n > 1 else ''} found before training:\n  " + "\n  ".join(self.problems)
            )


def _try(out: Checked, fn, *a, **k):
    """fn's result, or None with its error added to the problems."""
    try:
        return fn(*a, **k)
    except FlowclipError as e:
        out.problems.append(str(e))
        return None


def _check_world(world) -> None:
    from ..synthetic.world import check_world

    if not isinstance(world, dict):
        raise FlowclipError(f"world: a mapping of the world's settings, got {world!r}")
    check_world(world, "world")


def _ok(out: Checked, fn, *a) -> bool:
    before = len(out.problems)
    _try(out, fn, *a)
    return len(out.problems) == before


def check_study(
    *,
    store_path,
    train_manifest,
    eval_manifests,
    runs,
    run_dirs,
    base_train,
    device,
    world=None,
    feature_dims=None,
    allow_missing: bool = False,
    log=print,
) -> Checked:
    from ..devices import resolve_device
    from ..progress import stage

    with stage("imports"):  # the training stack, first needed here: timed as imports, not checks
        from ..training.loop import TrainConfig
    out = Checked()
    out.device = _try(out, resolve_device, device, "device=") or "cpu"
    # the shared train_config first, once, by its own name; then each run's (its head's keys)
    if _ok(out, TrainConfig.from_dict, dict(base_train), "train_config"):
        for r in runs:
            where = f"run {r.method} (train_config with the head's keys)"
            cfg = _try(out, TrainConfig.from_dict, {**base_train, **r.train, "seed": r.seed}, where)
            if cfg is not None:
                out.cfgs[r.folder] = cfg
        out.problems[:] = list(dict.fromkeys(out.problems))  # a head's error once, not once per seed
    if world is not None and not _ok(out, _check_world, world):
        return out
    if world is not None and not (store_path and os.path.exists(os.path.join(store_path, "store.json"))):
        from ..synthetic.world import estimate_training_records

        knobs = {k: world.get(k) for k in ("scene_objects", "binding_negatives")}
        out.train_records = estimate_training_records(world.get("train_scenes", 2000), world.get("seed", 0), **knobs)
        out.estimated, out.feature_dims = True, feature_dims
        if feature_dims is not None:
            _check_heads(out, feature_dims[0])
        out.lines.append(
            "store: built from the synthetic world on the first real run (world=...); "
            "manifests and features are checked then"
        )
        out.lines.append(
            f"training records: about {out.train_records:,} (estimated from the world's settings; counted once built)"
        )
        return out
    from ..store import FeatureStore

    out.store = _try(out, FeatureStore, store_path) if store_path else None
    if not store_path:
        out.problems.append("no store=... given")
    if out.store is None:
        return out
    out.lines.append(
        f"store: {out.store.root} (fingerprint {out.store.fingerprint[:16]}, {out.store.encoder_config['model']})"
    )
    _check_heads(out, out.store.meta["dim"])
    _check_training(out, train_manifest, allow_missing)
    _check_evaluation(out, eval_manifests, log)
    return out


def _check_heads(out: Checked, dim: int) -> None:
    """Each head of the grid meets the head contract (heads/contract.py), once per settings."""
    seen = set()
    for cfg in out.cfgs.values():
        key = (cfg.head, repr(sorted(cfg.head_options.items())))
        if key not in seen:
            seen.add(key)
            _try(out, cfg.check_contract, dim)


def _check_training(out: Checked, path, allow_missing: bool = False) -> None:
    """The training manifest read as training reads it (training_data.training_records:
    failed rows dropped, every record's captions and features found), kept for the study
    to train on."""
    from ..manifest import Manifest
    from ..training.training_data import training_records

    m = _try(out, Manifest.read, path) if path else None
    if m is None:
        if not path:
            out.problems.append("no train=... manifest given")
        return
    if m.kind != "training":
        out.problems.append(f"{path}: train=... needs a 'training' manifest, this one is {m.kind!r}")
        return
    recs = _try(out, training_records, out.store, m)
    split = recs.columns["split"] if recs else m.table.column("split").to_pylist()  # (the plan's steps even so)
    out.train_path, out.train_records = path, sum(s == "train" for s in split)
    if recs is None:
        return
    if recs.skipped and not allow_missing:
        from ..training.training_data import check_missing

        _try(out, check_missing, recs, False)  # the refusal, a problem found before training
        return
    out.training = recs
    out.lines.append(
        f"train: {path} ({len(recs.manifest)} records, {out.train_records} with split == 'train'), every feature "
        f"stored" + _left_out(recs.skipped)
    )


def _without_failed(out: Checked, m):
    """The manifest less the rows extract recorded as failed, as score leaves them out, and
    the words that say so (the dry run agrees with the commands it checks)."""
    from ..store.manifest_keys import drop_failed_rows

    kept, dropped = drop_failed_rows(out.store, m)
    return kept, _left_out(dropped)


def _left_out(dropped: list) -> str:
    return f"; {len(dropped)} records left out (failed at extract; first: {dropped[0]['record']})" if dropped else ""


def _check_evaluation(out: Checked, paths, log) -> None:
    from ..scoring.scorers import evaluation_manifests, scoring_of
    from ..store.manifest_keys import manifest_keys

    if not paths:
        out.problems.append("no eval=[...] manifests given")
        return
    ms = _try(out, evaluation_manifests, paths, log) or []
    for m in ms:
        got = _try(out, scoring_of, m)
        if got is None:
            continue
        name, sc = got
        m, left = _without_failed(out, m)
        texts = sorted({c.text for c in m.caption_refs()})
        if _ok(out, manifest_keys, out.store, m, texts):
            out.lines.append(f"eval: {m.path} ({name}, {len(m)} records, {sc.task}), every feature stored{left}")


def run_status(path: str) -> str:
    """done (DONE written), partial (a checkpoint to resume) or todo."""
    if os.path.exists(os.path.join(path, "DONE")):
        return "done"
    if checkpoint.exists(path):
        return "partial"
    return "todo"


def plan_lines(runs, run_dirs, checked: Checked, log, measure: bool = True, stacked: bool = False) -> None:
    """Runs, epochs, steps, device, what is done, the groups that take one batched step
    (stacked), and (measure) the time left from a measured step."""
    from ..manifest import Manifest
    from ..training.loop import seconds_per_step
    from ..training.training_data import load_training_data

    n_train = checked.train_records
    left = 0
    step_time: dict = {}
    for r in runs:
        cfg = checked.cfgs.get(r.folder)
        if cfg is None:
            continue
        d = run_dirs[r.folder]
        done = checkpoint.read_state(d)["global_step"] if checkpoint.exists(d) else 0
        steps = (max(1, n_train // cfg.batch_size) if n_train else 0) * cfg.epochs
        per_epoch = (("~" if checked.estimated else "") + str(steps // max(1, cfg.epochs))) if n_train else "?"
        planned = f"{cfg.epochs} epochs x {per_epoch} steps"
        if cfg.max_steps is not None and (not n_train or cfg.max_steps < steps):  # the run ends at its cap
            steps, planned = cfg.max_steps, f"{cfg.max_steps} steps (max_steps; {planned})"
        status = run_status(d)
        log(
            f"  [{status:7s}] {r.method:16s} {r.folder}: {cfg.head} head, {planned}, batch {cfg.batch_size}, "
            f"{checked.device}" + (f"; {done} steps done" if status == "partial" else "")
        )
        if status != "done":
            left += max(0, steps - done)
            step_time.setdefault(cfg.head, (cfg, 0))
            step_time[cfg.head] = (cfg, step_time[cfg.head][1] + max(0, steps - done))
    if stacked:
        stack_lines(runs, checked, log)
    if not (measure and left and not checked.problems):
        return
    batch = 4 * max(c.batch_size for c, _ in step_time.values())
    if checked.store is not None and checked.train_path:
        m = Manifest.read(checked.train_path)
        small = Manifest(m.path, m.kind, m.table.slice(0, batch), m.meta)
        data = load_training_data(checked.store, small, True, checked.device, placement="device", log=lambda *_: None)
        how = "measured on one batch per head kind here"
    elif checked.feature_dims is not None:
        data = random_training_data(*checked.feature_dims, batch, checked.device)
        how = "measured on random features of the encoder's shape, the world not being built yet; an estimate"
    else:
        return
    total = sum(seconds_per_step(data, cfg, checked.device) * n for cfg, n in step_time.values())
    log(
        f"  time left: about {total / 60:.1f} min of training ({left} steps, {how}; runs that share a "
        f"data order train side by side and share batches)"
    )


def stack_lines(runs, checked: Checked, log) -> None:
    """The stacked groups a study will train: runs sharing a data order whose heads stack."""
    from ..training.stacked import planned_groups

    dim = checked.store.meta["dim"] if checked.store is not None else (checked.feature_dims or (None,))[0]
    cfgs = {r.folder: checked.cfgs[r.folder] for r in runs if r.folder in checked.cfgs}
    if dim is None or not cfgs:
        return
    order = lambda f: (cfgs[f].seed, cfgs[f].batch_size, cfgs[f].epochs)  # noqa: E731
    for data_order in dict.fromkeys(map(order, cfgs)):
        same = {f: c for f, c in cfgs.items() if order(f) == data_order}
        for group in planned_groups(same, dim):
            how = f"one batched step for {len(group)} runs" if len(group) > 1 else "alone (nothing to stack with)"
            log(f"  stacked: {', '.join(group)}: {how}")


def random_training_data(d: int, patches: int, records: int, device: str, tokens: int = 12):
    """TrainingData of random unit features (records images, 2 x records captions of `tokens`
    tokens): a step's cost at the encoder's shape, before any feature exists."""
    import numpy as np
    import torch

    from ..store.banks import FeatureBank
    from ..training.training_data import TrainingData

    g = torch.Generator().manual_seed(0)
    unit = lambda *shape: torch.nn.functional.normalize(torch.randn(*shape, generator=g), dim=-1).half()
    n_cap = 2 * records
    bank = FeatureBank(
        unit(records, d), unit(records, patches, d), unit(n_cap, d), unit(n_cap * tokens, d),
        torch.arange(0, n_cap * tokens + 1, tokens), device,
    )  # fmt: skip
    ar = torch.arange(records)
    return TrainingData(
        bank, ar.to(device), ar.to(device), (ar + records)[:, None].to(device), [[""]] * records,
        np.array(["train"] * records),
    )  # fmt: skip


def done_key(
    runs: list, eval_manifests: list[str], controls, bootstrap: int, compare, suite=None, training_free=(), moved=None
) -> dict:
    """What a summary was made from: a study whose grid, manifests, controls or comparisons
    change (more seeds, say) is not finished just because an older summary is in place; nor
    one whose runs moved to other folders (place_runs: trained with other settings). Keys
    absent when unused, so summaries written before them stay current."""
    what = {
        "runs": sorted(r.folder for r in runs),
        "eval_manifests": sorted(os.path.abspath(m) for m in eval_manifests),
        "controls": list(controls),
        "bootstrap": int(bootstrap),
        "compare": [list(p) for p in compare],
    }
    if suite:
        what["suite"] = suite
    if training_free:
        what["training_free"] = list(training_free)
    if moved:
        what["run_folders"] = moved
    return what


def summary_is_current(out: str, what: dict, log) -> bool:
    """Whether the summary in place was made from this grid (says which, either way)."""
    path = os.path.join(out, DONE)
    if not os.path.exists(path):
        return False
    try:
        recorded = json.load(open(path))
    except ValueError:
        recorded = None  # a marker written before the key was recorded: its grid is unknown
    if recorded == what:
        log("  the study is finished (summary in place)")
        return True
    log(
        "  the summary in place was made for another grid (runs, manifests, controls or comparisons"
        " changed): finished runs are kept, the rest is trained and everything is scored again"
    )
    return False


def place_runs(runs, run_dirs: dict, checked, train_manifest: str, log) -> dict:
    """Each run's folder: its settings' name, unless a run trained with other settings holds
    it (another epochs, head option, plug-in source, store or manifest: run_header.run_identity).
    Such a run is never reported as done: this one trains into <name>__id-<identity>, and the
    old stays. The dry run says so."""
    from ..training.head_run import HeadRun
    from ..training.run_header import identity_changes, identity_digest, read_run_config, run_identity

    if checked.store is None:
        return run_dirs
    placed = dict(run_dirs)
    for r in runs:
        cfg, base = checked.cfgs.get(r.folder), run_dirs[r.folder]
        if cfg is None or not os.path.isfile(os.path.join(base, "config.json")):
            continue
        want = run_identity(HeadRun.run_config(checked.store, train_manifest, cfg, checked.device))
        have = run_identity(read_run_config(base, base))
        if have == want:
            continue
        alt = f"{base}__id-{identity_digest(want)}"
        if os.path.isfile(os.path.join(alt, "config.json")) and run_identity(read_run_config(alt, alt)) != want:
            raise FlowclipError(f"{alt}: its settings are not those its name says; remove it or give another out:")
        placed[r.folder] = alt
        changes = identity_changes(have, want)
        log(
            f"  [changed] {r.folder}: trained with other settings ({'; '.join(changes[:4])}"
            f"{'; ...' if len(changes) > 4 else ''}); this study's run goes to {os.path.basename(alt)}, "
            "the old one stays"
        )
    return placed


def check_compare(compare, runs, training_free) -> None:
    """Each contrast names scorers the study has, refused before any training otherwise."""
    have = ["clip", *training_free, *dict.fromkeys(r.method for r in runs)]
    for pair in compare:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise FlowclipError(f"compare: {pair!r} is not a pair [baseline, other]")
        absent = [m for m in pair if m not in have]
        if absent:
            raise FlowclipError(
                f"compare: {pair[0]} vs {pair[1]}: {', '.join(absent)} {'is' if len(absent) == 1 else 'are'} not among "
                f"this study's scorers ({', '.join(have)}); name two of them, or give compare: []"
            )


def check_names(suite: str | None, training_free) -> None:
    """An unknown suite or training-free scorer, refused at once (CLIP is always scored)."""
    from ..head_specs import training_free_kinds
    from ..scoring.suites import members

    if suite:
        members(suite)
    known = [k for k in training_free_kinds() if k != "clip"]
    unknown = [k for k in training_free if k not in known]
    if unknown:
        raise FlowclipError(f"training_free: {unknown} are not training-free scorers; use {', '.join(known)}")
