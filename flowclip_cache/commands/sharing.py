"""`flowclip publish` (and `sweep`): share a trained head; search a head's settings."""

from __future__ import annotations

import click

from .common import plugin_option, report_to_option


@click.command()
@click.argument("run", type=click.Path(exists=True, file_okay=False))
@click.option("--out", required=True, type=click.Path(file_okay=False), help="The folder to publish (a new one).")
@click.option(
    "--results",
    type=click.Path(exists=True, file_okay=False),
    help="A flowclip score results folder that scored this head: its scores go into the model card.",
)
@click.option("--overwrite", is_flag=True, help="Replace a folder flowclip publish wrote (nothing else).")
@click.option("--push", metavar="OWNER/NAME", help="Then upload the folder to this Hub model repository.")
@click.option("--private", is_flag=True, help="With --push: create the repository private.")
@click.option("--license", "license_", default="unknown", show_default=True, help="The card's licence (a Hub id).")
@click.option("--base-model", help="The card's base_model (default: the Hub repo of the encoder's open_clip tag).")
@click.option("--dataset", "datasets", multiple=True, help="A Hub dataset the head was trained on (repeatable).")
@plugin_option
def publish(run, out, results, overwrite, push, private, license_, base_model, datasets):
    """Write RUN (a finished head run) as a folder a Hugging Face model repository can hold
    as it is: the head's safetensors and config, DONE, and a model card with the Hub's
    metadata; --push uploads it (huggingface_hub, your token). Others load it with --scorer
    hf:OWNER/NAME."""
    from ..sharing.publish import publish as publish_run

    card = {"license": license_, "base_model": base_model, "datasets": list(datasets), "push": push, "private": private}
    publish_run(run, out, results, overwrite, log=click.echo, **card)


@click.command()
@click.argument("config", type=click.Path(exists=True, dir_okay=False))
@click.argument("overrides", nargs=-1)
@click.option("--timeout", type=float, help="Seconds: no new trial starts after (the sweep's timeout: key).")
@plugin_option
@report_to_option
def sweep(config, overrides, timeout, report_to, wandb_project):
    """Search a head's settings with Optuna on a validation objective (CONFIG: a sweep YAML;
    docs/sweep.md), with KEY=VALUE overrides. Killed, it resumes where it stopped; every
    trial is a run folder; the best settings are written as a study YAML (OUT/best.yaml)."""
    from ..config import apply_overrides, build, load_yaml, parse_overrides
    from ..errors import FlowclipError

    try:
        import optuna  # noqa: F401
    except ImportError:
        raise FlowclipError("flowclip sweep needs Optuna: pip install 'flowclip[sweep]'") from None
    from ..studies.sweep import sweep as run_sweep
    from ..studies.sweep_trial import SweepConfig

    data = apply_overrides(load_yaml(config), parse_overrides(list(overrides)))
    if timeout is not None:
        data["timeout"] = timeout
    if report_to:  # the flags over the YAML's report_to: and wandb_project:
        data["report_to"], data["wandb_project"] = report_to.split(","), wandb_project
    cfg = build(SweepConfig, data, config)
    run_sweep(cfg, log=click.echo)
