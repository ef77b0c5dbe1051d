"""`flowclip run`, `profile`, `pretrain-tiny-clip` and `demo`: whole studies and the synthetic world."""

from __future__ import annotations

import os

import click

from ..errors import FlowclipError
from ..head_specs import is_head_spec
from .common import READOUT_NAMES, plugin_option


def shipped_studies() -> list[str]:
    """The study configs in pipelines/ (those with a `kind:`; the others are pretraining recipes)."""
    from ..shipped import shipped_folder

    folder = shipped_folder("pipelines")
    names = sorted(f[: -len(".yaml")] for f in os.listdir(folder) if f.endswith(".yaml"))
    return [n for n in names if any(line.startswith("kind:") for line in open(os.path.join(folder, n + ".yaml")))]


@click.command(
    "run",
    context_settings={"ignore_unknown_options": False},
    help="Run a whole study from a pipeline YAML (a path, or the name of one that ships: "
    + ", ".join(shipped_studies())
    + "), with KEY=VALUE overrides (dotted keys reach inside mappings: train_config.epochs=3).",
)
@click.argument("config")
@click.argument("overrides", nargs=-1)
@click.option("--dry-run", is_flag=True, help="Print the plan and what is already done.")
@click.option("--jobs", default=1, show_default=True, help="Runs trained at once (threads sharing the features).")
@click.option("--quiet", is_flag=True, help="No progress bars.")
@plugin_option
def run_pipeline(config, overrides, dry_run, jobs, quiet):
    from ..config import apply_overrides, build, find_config, load_yaml, parse_overrides
    from ..studies import pipeline_module

    config = find_config(config)
    data = load_yaml(config)
    if "kind" not in data:
        raise FlowclipError(f"{config}: a pipeline file is a mapping with a 'kind' key")
    data = apply_overrides(data, parse_overrides(list(overrides)))

    data = study_heads(data, config)  # plug-in heads: `plugins:` loaded, head: FILE.py:Class values as kinds
    module = pipeline_module(data["kind"])
    cfg = build(module.CONFIG, data, config)
    summary = module.run(cfg, dry_run, jobs, log=click.echo, progress=not quiet)
    if summary is not None:
        click.echo(open(os.path.join(cfg.out, "summary.md")).read())


@click.command("profile")
@click.argument("config")
@click.argument("overrides", nargs=-1)
@click.option("--overwrite", is_flag=True, help="Replace a different profile.json in the study folder.")
def profile(config, overrides, overwrite):
    """The frozen encoder's profile on a study's synthetic world, without training heads:
    accuracy per family and patch grounding (the gate before any head experiment). With
    encoder.patch_readout=[standard,sclip,...] one row per readout (and per model with
    encoder.model=[...])."""
    from ..config import apply_overrides, build, find_config, load_yaml, parse_overrides
    from ..scoring.profile import PROFILE_NOTE, profile_rows
    from ..scoring.report import table
    from ..studies import ablation
    from ..studies.grid import WORLD_AXES, study_grid
    from ..studies.study import claim_folder

    config = find_config(config)
    data = apply_overrides(load_yaml(config), parse_overrides(list(overrides)))
    cfg = build(ablation.CONFIG, data, config)
    if cfg.world is None:
        raise FlowclipError(f"{config}: profile needs a synthetic world (world: {{...}})")
    grid = study_grid(cfg)
    if len(grid) > 1:
        claim_folder(cfg.out)
    profiles = {}
    for label, sub in grid:
        ablation.encoder_spec(sub.encoder)
        store, paths, _ = ablation.world_store(sub, click.echo)
        readout = sub.encoder.get("patch_readout", "standard")
        world = [f"{k} {sub.world[k]}" for k in WORLD_AXES if isinstance((cfg.world or {}).get(k), list)]
        name = ", ".join([str(cfg.encoder.get("pretrained")), readout, *world])
        profiles[f"{sub.encoder.get('model')} ({name})"] = ablation.write_profile(
            sub, store, paths, lambda *_: None, recompute=True, overwrite=overwrite
        )
    click.echo("\n".join(table(*profile_rows(profiles))) + "\n\n" + PROFILE_NOTE)


@click.command("pretrain-tiny-clip")
@click.argument("config")
@click.argument("overrides", nargs=-1)
@click.option(
    "--out",
    default="runs/pretrain-tiny-clip",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Checkpoints (resumable).",
)
@click.option("--export-to", type=click.Path(file_okay=False), help="Where the FP16 weights go (default: the package).")
@click.option("--quiet", is_flag=True)
def pretrain_tiny_clip(config, overrides, out, export_to, quiet):
    """Pretrain the tiny CLIP on the synthetic world (CONFIG: pretrain_tiny_clip, the recipe
    that made the shipped weights, or a YAML file)."""
    from ..config import apply_overrides, find_config, load_yaml, parse_overrides
    from ..training.pretrain import PretrainConfig, pretrain

    config = find_config(config)
    data = apply_overrides(load_yaml(config), parse_overrides(list(overrides)))
    cfg = PretrainConfig.from_dict(data, config)
    path = pretrain(out, cfg, log=click.echo, progress=not quiet, export_to=export_to)
    click.echo(f"weights: {path}")


@click.command()
@click.option("--out", default="flowclip-demo", show_default=True, type=click.Path(file_okay=False))
@click.option("--scenes", default=1500, show_default=True, help="Head-training scenes of the world.")
@click.option("--epochs", default=2, show_default=True)
@click.option("--quiet", is_flag=True, help="No progress bars.")
@click.option("--zoo", is_flag=True, help="Also train and score the head zoo (LABCLIP, FILIP, FSC local, DCSM).")
@click.option(
    "--patch-readout",
    type=click.Choice(READOUT_NAMES),
    default=None,
    help="The tiny CLIP's patch readout (default: the demo's, see docs/results-synthetic.md).",
)
@click.option(
    "--head",
    "extra_heads",
    multiple=True,
    metavar="NAME=HEAD",
    help="Also train and score a head of your own (NAME=FILE.py:Class, or a kind) beside the demo's, "
    "compared with each of them and with FILIP's training-free score; repeatable. The demo's world, store "
    "and finished runs in --out are reused.",
)
def demo(out, scenes, epochs, quiet, zoo, patch_readout, extra_heads):
    """The whole pipeline offline: synthetic world, tiny CLIP, three heads, scored with controls."""
    from ..studies.demo import run_demo

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    heads = {}
    for item in extra_heads:
        name, sep, target = item.partition("=")
        if not sep or not name or not target:
            raise FlowclipError(f"--head {item!r}: expected NAME=HEAD (e.g. --head mine=my_head.py:MyHead)")
        heads[name] = {"head": target}
    heads = study_heads({"heads": heads}, "--head")["heads"] if heads else {}
    run_demo(out, scenes, epochs, log=click.echo, progress=not quiet, zoo=zoo, patch_readout=patch_readout,
             extra_heads=heads)  # fmt: skip
    click.echo(open(os.path.join(out, "summary.md")).read())
    click.echo(f"report: {os.path.join(out, 'summary.md')} (tables), {os.path.join(out, 'score')} (every record)")


def study_heads(data: dict, source: str) -> dict:
    """A study config with its `plugins:` loaded (and removed) and every `head:` value
    that names a class (FILE.py:Class) replaced by the kind it registers: the runs'
    folders are then named by kind, as built-in heads' are. A config with neither imports
    nothing (its keys are checked before torch is)."""
    plugins = data.get("plugins", [])
    if not isinstance(plugins, list) or not all(isinstance(p, str) for p in plugins):
        raise FlowclipError(f"{source}: key 'plugins': expected a list of files or modules, got {plugins!r}")

    def specs(node) -> bool:
        if isinstance(node, dict):
            return any((k == "head" and is_head_spec(v)) or specs(v) for k, v in node.items())
        return isinstance(node, list) and any(specs(x) for x in node)

    rest = {k: v for k, v in data.items() if k != "plugins"}
    if not plugins and not specs(rest):
        return rest
    from ..heads.plugins import load_plugin, resolve_head

    def walk(node):
        if isinstance(node, dict):
            return {k: resolve_head(v) if k == "head" and is_head_spec(v) else walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(x) for x in node]
        return node

    try:
        for target in plugins:
            load_plugin(target)
        return walk(rest)
    except FlowclipError as e:
        raise FlowclipError(f"{source}: {e}") from None
