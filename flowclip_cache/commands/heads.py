"""`flowclip train-head`, `score` and `explain`: train a head from the store, score it, explain it."""

from __future__ import annotations

import os

import click

from .common import STORE, config_and_flags, device_name, plugin_option, report_to_option


class _HeadOption(click.Option):
    """--head: the registry's kinds are listed only when help is shown, so that the command
    line starts without importing torch; an unknown kind is refused by TrainConfig."""

    def get_help_record(self, ctx):
        from ..heads import available_kinds, head_class

        self.help = (
            "Head kind: "
            + "; ".join(f"{k}: {head_class(k).title}" for k in available_kinds())
            + ". Or a head of your own: FILE.py:Class or package.module:Class (docs/plugins.md). Default flow."
        )
        return super().get_help_record(ctx)


def _train_option(name, typ, help):
    return click.option(f"--{name.replace('_', '-')}", name, type=typ, default=None, help=help)


@click.command("train-head")
@click.option("--store", required=True, type=STORE)
@click.option(
    "--train",
    "train_manifest",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="A training manifest (record_id, image, positive, negatives, split).",
)
@click.option(
    "--out",
    "outs",
    required=True,
    multiple=True,
    type=click.Path(file_okay=False),
    help="Run folder; repeatable: several runs trained side by side on the batches they share, "
    "the features loaded once (each --config pairs with the --out in its place).",
)
@click.option(
    "--config",
    "config_files",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="YAML file of TrainConfig keys; flags override it. With several --out: one for all, or one per --out.",
)
@click.option(
    "--stack",
    is_flag=True,
    help="Several --out: runs whose heads stack take one batched step (training/stacked.py; equal to "
    "side by side to FP32 round-off, not bit for bit).",
)
@click.option("--head", default=None, cls=_HeadOption, help="Head kind (listed when asked for help). Default flow.")
@plugin_option
@_train_option(
    "cimr",
    float,
    "lambda_CIMR (0 = HNB alone). Default: the paper's row for the head (Tab. 2): "
    "0 for global (Global-M), 0.1 for flow (complete Flow-CLIP).",
)
@_train_option("alpha", float, "Weight of s_token. Default 1.")
@_train_option("tau_p", float, "Patch pooling temperature. Default 0.05.")
@_train_option("tau_c", float, "Contrastive temperature. Default 0.01.")
@_train_option("epochs", int, "Default 5.")
@_train_option("batch_size", int, "Records per batch. Default 32.")
@_train_option("lr", float, "AdamW learning rate. Default 8e-5.")
@_train_option("weight_decay", float, "Default 1e-4.")
@_train_option("grad_clip", float, "Gradient norm clip. Default 1.0.")
@_train_option("seed", int, "Default 0.")
@_train_option("checkpoint_every", int, "Steps between checkpoints. Default 500.")
@_train_option(
    "max_steps",
    int,
    "Stop after this many optimiser steps in all, as a finished run; --resume with a larger one continues it.",
)
@click.option(
    "--head-option",
    "head_option",
    multiple=True,
    metavar="NAME=VALUE",
    help="A setting the head declares (its `options`; repeatable), over the config file's head_options.",
)
@click.option(
    "--loss-weight",
    "loss_weight",
    multiple=True,
    metavar="NAME=VALUE",
    help="The weight of a loss term the head declares (its `loss_terms`; repeatable), over the config's.",
)
@click.option("--device", default="auto", show_default=True)
@click.option(
    "--data-placement",
    type=click.Choice(["auto", "device", "host", "store"]),
    default="auto",
    show_default=True,
    help="Where the training features live: on the device, in host memory (batches "
    "copied ahead), or read from the store batch by batch; auto chooses from a memory estimate.",
)
@click.option("--image-root", type=click.Path(), help="Only where the store saw the same paths under several roots.")
@click.option("--resume", is_flag=True, help="Continue an unfinished run in --out.")
@click.option("--overwrite", is_flag=True, help="Replace a run in --out.")
@click.option(
    "--allow-missing",
    is_flag=True,
    help="Train on the records left when some rest on images or captions extract could not read "
    "(refused otherwise; the run's config.json lists those left out).",
)
@click.option("--quiet", is_flag=True)
@report_to_option
def train_head_cmd(
    store,
    train_manifest,
    outs,
    config_files,
    stack,
    head_option,
    loss_weight,
    device,
    data_placement,
    image_root,
    resume,
    overwrite,
    allow_missing,
    quiet,
    report_to,
    wandb_project,
    **flags,
):
    """Train a Flow-CLIP (or Global-M) head from cached features (several, side by side,
    with several --out)."""
    from ..errors import FlowclipError
    from ..head_specs import check_head_name
    from ..training.train_config import TrainConfig
    from .common import name_values, tracking

    check_head_name(flags.get("head"), "flags: key 'head'")  # at once, before torch is imported
    if len(config_files) not in (0, 1, len(outs)):
        raise FlowclipError(f"{len(config_files)} --config for {len(outs)} --out: give one for all, or one per --out")
    if len(set(map(os.path.abspath, outs))) < len(outs):
        raise FlowclipError("two --out name the same folder")
    flags["head_options"] = name_values(head_option, "--head-option")
    flags["loss_weights"] = name_values(loss_weight, "--loss-weight")
    files = list(config_files) * len(outs) if len(config_files) == 1 else list(config_files) or [None] * len(outs)
    checked = [config_and_flags(TrainConfig, f, flags) for f in files]
    for settings, source in checked:
        TrainConfig.precheck(settings, source)  # every mistake a name, key or value can be, before torch
    from ..training.checkpoint import check_claim

    for out in outs:  # and every --out, before the settings are printed
        check_claim(out, "head-run", "run", resume, overwrite, ", or score it: --scorer " + out)
    track = tracking(report_to, wandb_project, log=click.echo)
    from ..store import FeatureStore
    from ..training.loop import train_heads

    runs = [(out, TrainConfig.from_dict(settings, source)) for out, (settings, source) in zip(outs, checked)]
    order = lambda c: f"seed {c.seed}, batch size {c.batch_size}, {c.epochs} epochs"  # noqa: E731
    for out, cfg in runs[1:]:  # the batches they share
        if order(cfg) != order(runs[0][1]):
            raise FlowclipError(
                f"--out {out}: {order(cfg)}, but --out {outs[0]}: {order(runs[0][1])}; runs trained together share "
                f"their batches: train it in a command of its own"
            )
    with track:
        states = train_heads(
            FeatureStore(store),
            train_manifest,
            runs,
            device=device_name(device),
            resume=resume,
            overwrite=overwrite,
            image_root=image_root,
            progress=not quiet,
            placement=data_placement,
            watch=track.watch,
            stack=stack,
            allow_missing=allow_missing,
            log=click.echo,
        )
        for out, state in zip(outs, states):
            track.summary(out, final_accuracy(state))
    for out, state in zip(outs, states):
        click.echo(f"done: {out} ({state['global_step']} steps)")


def final_accuracy(state: dict) -> dict[str, float]:
    """A finished run's last pairwise accuracies, its tracking summary."""
    last = state["metrics"][-1]
    return {f"{k}_pairwise_accuracy": last[k]["all"] for k in ("train_sample", "val") if k in last}


@click.command()
@click.option("--store", required=True, type=STORE)
@click.option(
    "--manifests",
    "manifests",
    multiple=True,
    required=True,
    type=click.Path(exists=True),
    help="A manifest or a folder of them; repeatable.",
)
@click.option(
    "--suite",
    help="Score only a named suite's benchmarks among the manifests (field, vl-compo), naming the absent ones.",
)
@click.option(
    "--scorer",
    "scorers",
    multiple=True,
    required=True,
    help="'clip', a train-head run folder, or NAME=folder (same NAME = seeds of one method). Results name "
    "a scorer by its NAME when no other shares it, else by its folder's name.",
)
@click.option("--controls", default="real", show_default=True, help="Comma-separated: real,shuffle,fixed.")
@click.option("--out", required=True, type=click.Path(file_okay=False))
@click.option("--device", default="auto", show_default=True)
@click.option("--seed", default=0, show_default=True, help="Seed of the controls and the bootstrap.")
@click.option(
    "--bootstrap",
    "draws",
    type=click.IntRange(min=0),
    default=10000,
    show_default=True,
    help="Bootstrap draws (0 = none).",
)
@click.option(
    "--max-memory", type=click.IntRange(min=1), default=2048, show_default=True, help="MiB bound for retrieval blocks."
)
@click.option(
    "--shortlist", type=click.IntRange(min=1), help="Re-rank the global top K in retrieval (approximate; labelled)."
)
@click.option("--image-root", type=click.Path())
@click.option("--overwrite", is_flag=True, help="Replace a results folder flowclip score wrote (nothing else).")
@click.option(
    "--explain",
    "explain_n",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Also explain the N largest repairs and N largest regressions between the first and the last "
    "scorer (OUT/explain/explorer.html; needs --image-root to show the images).",
)
@click.option(
    "--blind-audit",
    "blind_folds",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Also the blind audit with K folds (e.g. 5): a probe on the captions' text features alone, "
    "each caption-choice task's blind accuracy, every scorer's accuracy where the text alone fails (0: none).",
)
@click.option("--quiet", is_flag=True, help="No progress bar, and the results table not printed (only where it is).")
@click.option("--no-figures", is_flag=True, help="No PNGs (margins, CREPE curves): results only.")
@plugin_option
def score(
    store,
    manifests,
    scorers,
    controls,
    out,
    device,
    seed,
    draws,
    max_memory,
    shortlist,
    image_root,
    overwrite,
    explain_n,
    quiet,
    no_figures,
    suite,
    blind_folds,
):
    """Score every benchmark manifest with every scorer, from one store."""
    from ..outputs import check_replaceable
    from ..scoring.manifest_specs import checked_manifests
    from ..scoring.scorer_specs import check_scorers, parse_controls
    from ..scoring.suites import members

    ctl = parse_controls(controls)  # every mistake a name, a file or a folder can be, before torch is imported
    if suite:
        members(suite)
    check_scorers(scorers, store)
    check_replaceable(out, "score-results", overwrite)
    checked_manifests(list(manifests))
    from ..scoring.score import run_score
    from ..store import FeatureStore

    run_score(
        FeatureStore(store),
        list(manifests),
        list(scorers),
        out,
        controls=ctl,
        device=device_name(device),
        seed=seed,
        bootstrap_draws=draws,
        max_memory_mb=max_memory,
        shortlist=shortlist,
        overwrite=overwrite,
        image_root=image_root,
        progress=not quiet,
        figures=not no_figures,
        suite=suite,
        blind_folds=blind_folds,
        log=click.echo,
    )
    if quiet:  # (the tables are in the folder; --quiet says where, in one line)
        click.echo(f"results: {os.path.join(out, 'results.md')}")
    else:
        click.echo(open(os.path.join(out, "results.md")).read())
    if explain_n:
        from ..scoring.explain import run_explain

        run_explain(
            FeatureStore(store),
            list(manifests),
            list(scorers),
            os.path.join(out, "explain"),
            records="changed",
            limit=explain_n,
            per_status=True,
            image_root=image_root,
            device=device_name(device),
            log=click.echo,
        )


@click.command()
@click.option("--store", required=True, type=STORE)
@click.option(
    "--manifest",
    "manifests",
    multiple=True,
    required=True,
    type=click.Path(exists=True),
    help="A candidates/pairwise manifest or a folder of them; repeatable.",
)
@click.option(
    "--scorer",
    "scorers",
    multiple=True,
    required=True,
    help="As for score: 'clip', a run folder or NAME=folder. Repairs and regressions are between the "
    "first and the last.",
)
@click.option(
    "--records",
    default="changed",
    show_default=True,
    help="repairs, regressions, changed (both), all, or record ids separated by commas.",
)
@click.option(
    "--max", "limit", default=40, show_default=True, help="Records explained (largest margin change first; 0 = all)."
)
@click.option(
    "--image-root", type=click.Path(), help="Folder the manifests' image paths are relative to (for display)."
)
@click.option("--out", required=True, type=click.Path(file_okay=False))
@click.option("--device", default="auto", show_default=True)
@click.option("--overwrite", is_flag=True, help="Replace an explain folder flowclip wrote (nothing else).")
@plugin_option
def explain(store, manifests, scorers, records, limit, image_root, out, device, overwrite):
    """Where each word found its evidence: token->patch maps before and after the
    refinement, patch sensitivity of the gold-foil margin, every scorer's margins; PNGs and
    one self-contained HTML explorer (explorer.html)."""
    from ..scoring.scorer_specs import check_scorers

    check_scorers(scorers, store)  # before torch is imported
    from ..scoring.explain import run_explain
    from ..store import FeatureStore

    run_explain(
        FeatureStore(store),
        list(manifests),
        list(scorers),
        out,
        records=records,
        limit=limit,
        image_root=image_root,
        device=device_name(device),
        overwrite=overwrite,
        log=click.echo,
    )
