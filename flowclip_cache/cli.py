"""The flowclip command line (a click group; one sub-command per stage)."""

from __future__ import annotations

import errno
import os
import sys

import click

from .commands import data as data_commands
from .commands import store as store_commands
from .errors import FlowclipError
from .heads import REGISTRY

_OS_HINTS = {
    errno.ENOSPC: "the disk is full: free space (or choose another folder) and rerun; nothing half-written was kept",
    errno.EDQUOT: "the disk quota is exhausted: free space and rerun",
    errno.EROFS: "the file system is read-only: choose a writable folder",
    errno.EACCES: "permission denied: choose a folder you may write to",
    errno.EPERM: "operation not permitted: choose a folder you may write to",
}


class _Group(click.Group):
    """Prints FlowclipError messages, and the OS errors a user can fix (full disk,
    read-only or forbidden folder), in one line without a traceback; exit code 2."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except FlowclipError as e:
            click.secho(f"error: {e}", fg="red", err=True)
            sys.exit(2)
        except KeyboardInterrupt:
            click.secho(
                "interrupted. Rerun the same command to go on: extract skips what is stored, "
                "train-head continues with --resume, run resumes unfinished runs.",
                fg="yellow",
                err=True,
            )
            sys.exit(130)
        except OSError as e:
            if e.errno not in _OS_HINTS:
                raise
            where = f"{e.filename}: " if e.filename else ""
            click.secho(f"error: {where}{_OS_HINTS[e.errno]} ({e.strerror})", fg="red", err=True)
            sys.exit(2)


# the names of patch_readouts.READOUTS, here without importing torch (a test keeps them equal)
READOUT_NAMES = ["standard", "maskclip", "clearclip", "sclip", "naclip", "maskclip-reduced", "sclip-reduced"]


@click.group(cls=_Group)
@click.version_option(package_name="flowclip")
def main():
    """flowclip: cached CLIP features, Flow-CLIP heads, compositional benchmarks."""


def _config_and_flags(cls, config_file, flags: dict) -> tuple[dict, str]:
    """A run's settings: the YAML file's keys (checked on their own first, so an error names
    the file), then the flags given on the command line over them."""
    from .config import load_yaml

    values = {}
    if config_file:
        values = load_yaml(config_file)
        cls.from_dict(values, config_file)
    values.update({k: v for k, v in flags.items() if v is not None})
    return values, config_file or "flags"


def _device(name: str) -> str:
    from .devices import resolve_device

    return resolve_device(name)


@main.command()
@click.option("--store", required=True, type=click.Path(file_okay=False), help="Store folder (created if absent).")
@click.option(
    "--model",
    required=True,
    help="An open_clip config (OpenAI-style CLIP: ViT-B-32, ViT-B-16, ViT-L-14, ViT-L-14-336; SigLIP: "
    "ViT-B-16-SigLIP, ViT-B-16-SigLIP2, ...) or blip:<HF repo or folder> (BLIP ITC). "
    "docs/encoders.md lists the families.",
)
@click.option(
    "--pretrained",
    default="none",
    show_default=True,
    help="open_clip pretrained tag (e.g. openai), a local checkpoint file, 'synthetic' (the tiny CLIP "
    "that ships: --model flowclip-tiny-clip), for BLIP 'hf' (the repo's or folder's "
    "model.safetensors), or 'none': RANDOM weights, the default.",
)
@click.option("--init-seed", default=0, show_default=True, help="Seed of random weights (--pretrained none).")
@click.option(
    "--tokenizer",
    type=click.Path(exists=True, file_okay=False),
    help="A local Hugging Face tokenizer folder instead of the model config's (SigLIP); fingerprinted "
    "by its files' content.",
)
@click.option(
    "--patch-readout",
    type=click.Choice(READOUT_NAMES),
    default="standard",
    show_default=True,
    help="How the last ViT block is read out into patch features (OpenAI-style CLIP only; "
    "docs/method.md, 'Patch readouts'). The global is unchanged.",
)
@click.option(
    "--manifest",
    "manifests",
    multiple=True,
    required=True,
    type=click.Path(dir_okay=False),
    help="A manifest (Parquet); repeat for several.",
)
@click.option("--image-root", type=click.Path(), help="Folder the manifests' image paths are relative to.")
@click.option(
    "--backend",
    type=click.Choice(["zarr", "hdf5"]),
    default="zarr",
    show_default=True,
    help="Backend of a new store (an existing store keeps its own).",
)
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda, cuda:N.")
@click.option("--batch-size", default=64, show_default=True, help="Images per forward pass.")
@click.option("--text-batch-size", default=256, show_default=True, help="Captions per forward pass.")
@click.option(
    "--workers",
    default=min(4, os.cpu_count() or 1),
    show_default=True,
    help="Image decoding processes (0 = in the main process).",
)
@click.option("--token-mask", type=click.Choice(["nonpad", "content"]), default="nonpad", show_default=True)
@click.option("--on-error", type=click.Choice(["skip", "fail"]), default="skip", show_default=True)
@click.option("--allow-outside-root", is_flag=True, help="Allow image paths outside --image-root.")
@click.option(
    "--rank", type=int, default=lambda: int(os.environ.get("RANK", 0)), help="This worker's share (default $RANK)."
)
@click.option(
    "--world-size",
    type=int,
    default=lambda: int(os.environ.get("WORLD_SIZE", 1)),
    help="Number of workers (default $WORLD_SIZE).",
)
@click.option("--image-unit", default=256, show_default=True, help="Images per committed segment.")
@click.option("--caption-unit", default=4096, show_default=True, help="Captions per committed segment.")
@click.option(
    "--rehash",
    is_flag=True,
    help="Hash every image file again, even those whose size, mtime and "
    "inode the store recorded (for files edited in place without a new mtime).",
)
@click.option("--quiet", is_flag=True, help="No progress bar.")
def extract(
    store,
    model,
    pretrained,
    init_seed,
    tokenizer,
    patch_readout,
    manifests,
    image_root,
    backend,
    device,
    batch_size,
    text_batch_size,
    workers,
    token_mask,
    on_error,
    allow_outside_root,
    rank,
    world_size,
    image_unit,
    caption_unit,
    rehash,
    quiet,
):
    """Encode every image and caption the manifests name, once, into a feature store."""
    from .encoders import EncoderSpec, resolve
    from .extract import run_extract
    from .store import FeatureStore

    if not 0 <= rank < world_size:
        raise FlowclipError(f"--rank {rank} must lie in [0, --world-size {world_size})")
    enc = resolve(
        EncoderSpec(model, pretrained, init_seed, token_mask, tokenizer=tokenizer, patch_readout=patch_readout)
    )
    fs = FeatureStore.open_or_create(store, enc.config, backend)
    summary = run_extract(
        fs,
        enc,
        list(manifests),
        image_root,
        device=_device(device),
        batch_size=batch_size,
        text_batch_size=text_batch_size,
        workers=workers,
        on_error=on_error,
        allow_outside_root=allow_outside_root,
        rank=rank,
        world_size=world_size,
        progress=not quiet,
        image_unit=image_unit,
        caption_unit=caption_unit,
        rehash=rehash,
    )
    if enc.config["weights"]["source"] == "random-init":
        click.echo(f"weights:  random (--pretrained none, init seed {init_seed}): features of an untrained encoder")
    for line in summary.lines():
        click.echo(line)
    if summary.failures and on_error == "fail":
        sys.exit(1)


def _train_option(name, typ, help):
    return click.option(f"--{name.replace('_', '-')}", name, type=typ, default=None, help=help)


@main.command("train-head")
@click.option("--store", required=True, type=click.Path(exists=True, file_okay=False))
@click.option(
    "--train",
    "train_manifest",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="A training manifest (record_id, image, positive, negatives, split).",
)
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Run folder.")
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False),
    help="YAML file of TrainConfig keys; flags override it.",
)
@_train_option(
    "head",
    click.Choice(list(REGISTRY)),
    "Head kind: " + "; ".join(f"{k}: {h.title}" for k, h in REGISTRY.items()) + ". Default flow.",
)
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
@click.option("--quiet", is_flag=True)
def train_head_cmd(
    store, train_manifest, out, config_file, device, data_placement, image_root, resume, overwrite, quiet, **flags
):
    """Train a Flow-CLIP (or Global-M) head from cached features."""
    from .store import FeatureStore
    from .train import TrainConfig, train_head

    cfg = TrainConfig.from_dict(*_config_and_flags(TrainConfig, config_file, flags))
    state = train_head(
        FeatureStore(store),
        train_manifest,
        out,
        cfg,
        device=_device(device),
        resume=resume,
        overwrite=overwrite,
        image_root=image_root,
        progress=not quiet,
        placement=data_placement,
        log=click.echo,
    )
    click.echo(f"done: {out} ({state['global_step']} steps)")


@main.command()
@click.option("--store", required=True, type=click.Path(exists=True, file_okay=False))
@click.option(
    "--manifests",
    "manifests",
    multiple=True,
    required=True,
    type=click.Path(exists=True),
    help="A manifest or a folder of them; repeatable.",
)
@click.option(
    "--scorer",
    "scorers",
    multiple=True,
    required=True,
    help="'clip', a train-head run folder, or NAME=folder (same NAME = seeds of one method).",
)
@click.option("--controls", default="real", show_default=True, help="Comma-separated: real,shuffle,fixed.")
@click.option("--out", required=True, type=click.Path(file_okay=False))
@click.option("--device", default="auto", show_default=True)
@click.option("--seed", default=0, show_default=True, help="Seed of the controls and the bootstrap.")
@click.option("--bootstrap", "draws", default=10000, show_default=True, help="Bootstrap draws (0 = none).")
@click.option("--max-memory", default=2048, show_default=True, help="MiB bound for retrieval blocks.")
@click.option("--shortlist", type=int, help="Re-rank the global top K in retrieval (approximate; labelled).")
@click.option("--image-root", type=click.Path())
@click.option("--overwrite", is_flag=True, help="Replace a results folder flowclip score wrote (nothing else).")
@click.option(
    "--explain",
    "explain_n",
    default=0,
    show_default=True,
    help="Also explain the N largest repairs and N largest regressions between the first and the last "
    "scorer (OUT/explain/explorer.html; needs --image-root to show the images).",
)
@click.option("--quiet", is_flag=True, help="No progress bar.")
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
):
    """Score every benchmark manifest with every scorer, from one store."""
    from .score import CONTROLS, run_score
    from .store import FeatureStore

    ctl = tuple(c.strip() for c in controls.split(",") if c.strip())
    bad = [c for c in ctl if c not in CONTROLS]
    if bad:
        raise FlowclipError(f"--controls: unknown {bad}; use {', '.join(CONTROLS)}")
    run_score(
        FeatureStore(store),
        list(manifests),
        list(scorers),
        out,
        controls=ctl,
        device=_device(device),
        seed=seed,
        bootstrap_draws=draws,
        max_memory_mb=max_memory,
        shortlist=shortlist,
        overwrite=overwrite,
        image_root=image_root,
        progress=not quiet,
        log=click.echo,
    )
    click.echo(open(os.path.join(out, "results.md")).read())
    if explain_n:
        from .explain import run_explain

        run_explain(
            FeatureStore(store),
            list(manifests),
            list(scorers),
            os.path.join(out, "explain"),
            records="changed",
            limit=explain_n,
            per_status=True,
            image_root=image_root,
            device=_device(device),
            log=click.echo,
        )


@main.command("run", context_settings={"ignore_unknown_options": False})
@click.argument("config")
@click.argument("overrides", nargs=-1)
@click.option("--dry-run", is_flag=True, help="Print the plan and what is already done.")
@click.option("--jobs", default=1, show_default=True, help="Runs trained at once (threads sharing the features).")
@click.option("--quiet", is_flag=True, help="No progress bars.")
def run_pipeline(config, overrides, dry_run, jobs, quiet):
    """Run a whole study from a pipeline YAML (a path, or the name of one that ships:
    ablation, sensitivity, synthetic), with KEY=VALUE overrides."""
    from .config import apply_overrides, build, find_config, load_yaml, parse_overrides
    from .studies import pipeline_module

    config = find_config(config)
    data = load_yaml(config)
    if "kind" not in data:
        raise FlowclipError(f"{config}: a pipeline file is a mapping with a 'kind' key")
    data = apply_overrides(data, parse_overrides(list(overrides)))
    module = pipeline_module(data["kind"])
    cfg = build(module.CONFIG, data, config)
    summary = module.run(cfg, dry_run, jobs, log=click.echo, progress=not quiet)
    if summary is not None:
        click.echo(open(os.path.join(cfg.out, "summary.md")).read())


@main.command("profile")
@click.argument("config")
@click.argument("overrides", nargs=-1)
@click.option("--overwrite", is_flag=True, help="Replace a different profile.json in the study folder.")
def profile(config, overrides, overwrite):
    """The frozen encoder's profile on a study's synthetic world, without training heads:
    accuracy per family and patch grounding (the gate before any head experiment). With
    encoder.patch_readout=[standard,sclip,...] one row per readout."""
    from .clip_profile import profile_rows
    from .config import apply_overrides, build, find_config, load_yaml, parse_overrides
    from .report import table
    from .studies import ablation
    from .studies.study import claim_folder

    config = find_config(config)
    data = apply_overrides(load_yaml(config), parse_overrides(list(overrides)))
    cfg = build(ablation.CONFIG, data, config)
    if cfg.world is None:
        raise FlowclipError(f"{config}: profile needs a synthetic world (world: {{...}})")
    grid = ablation.readout_grid(cfg)
    if len(grid) > 1:
        claim_folder(cfg.out)
    profiles = {}
    for readout, sub in grid:
        ablation.encoder_spec(sub.encoder)
        store, paths, _ = ablation.world_store(sub, click.echo)
        profiles[f"{cfg.encoder.get('model')} ({cfg.encoder.get('pretrained')}, {readout})"] = ablation.write_profile(
            sub, store, paths, lambda *_: None, recompute=True, overwrite=overwrite
        )
    click.echo("\n".join(table(*profile_rows(profiles))))


@main.command("pretrain-tiny-clip")
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
    from .config import apply_overrides, find_config, load_yaml, parse_overrides
    from .pretrain import PretrainConfig, pretrain

    config = find_config(config)
    data = apply_overrides(load_yaml(config), parse_overrides(list(overrides)))
    cfg = PretrainConfig.from_dict(data, config)
    path = pretrain(out, cfg, log=click.echo, progress=not quiet, export_to=export_to)
    click.echo(f"weights: {path}")


@main.command()
@click.option("--model", required=True, help="The encoder to adapt (an open_clip config; docs/adapt.md).")
@click.option(
    "--pretrained", default="none", show_default=True, help="As for extract: a tag, a file, 'synthetic' or 'none'."
)
@click.option("--init-seed", default=0, show_default=True)
@click.option("--token-mask", type=click.Choice(["nonpad", "content"]), default="nonpad", show_default=True)
@click.option(
    "--tokenizer",
    type=click.Path(exists=True, file_okay=False),
    help="As for extract: a local Hugging Face tokenizer folder (SigLIP); the adapted encoder keeps it.",
)
@click.option(
    "--train",
    "train_manifest",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="A training manifest (record_id, image, positive, negatives, split).",
)
@click.option("--image-root", required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Run folder.")
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False),
    help="YAML of AdaptConfig keys (TrainConfig's plus encoder_lr, precision, grad_checkpointing, workers).",
)
@click.option(
    "--head",
    type=click.Choice(["none", "global", "flow"]),
    default=None,
    help="none: NegCLIP-style (encoders alone under HNB); global: Global-M; flow: Flow-CLIP. Default flow.",
)
@click.option("--cimr", type=float, default=None, help="lambda_CIMR (default: the head's Tab. 2 row).")
@click.option("--epochs", type=int, default=None)
@click.option("--batch-size", type=int, default=None, help="The GLOBAL batch (records), split over torchrun's ranks.")
@click.option("--lr", type=float, default=None, help="The head's AdamW learning rate.")
@click.option("--encoder-lr", type=float, default=None, help="Both encoders' AdamW learning rate. Default 1e-5.")
@click.option("--weight-decay", type=float, default=None)
@click.option("--seed", type=int, default=None)
@click.option("--precision", type=click.Choice(["fp32", "bf16"]), default=None, help="bf16: autocast on CUDA.")
@click.option("--grad-checkpointing", is_flag=True, default=None, help="Recompute activations (large towers).")
@click.option("--workers", type=int, default=None, help="Image decoding processes.")
@click.option("--checkpoint-every", type=int, default=None)
@click.option("--device", default="auto", show_default=True)
@click.option("--resume", is_flag=True)
@click.option("--overwrite", is_flag=True, help="Replace an adapt run folder (nothing else).")
@click.option("--quiet", is_flag=True)
def adapt(
    model,
    pretrained,
    init_seed,
    token_mask,
    tokenizer,
    train_manifest,
    image_root,
    out,
    config_file,
    device,
    resume,
    overwrite,
    quiet,
    **flags,
):
    """Adapt both encoders with a head (the unfrozen path); `torchrun -m flowclip_cache adapt ...`
    runs it on several GPUs (or CPU processes). Writes OUT/encoder.safetensors and a head
    run folder: extract with --pretrained OUT/encoder.safetensors, then score --scorer OUT."""
    from .adapt import AdaptConfig, run_adapt
    from .encoders import EncoderSpec

    cfg = AdaptConfig.from_dict(*_config_and_flags(AdaptConfig, config_file, flags))
    state = run_adapt(
        EncoderSpec(model, pretrained, init_seed, token_mask, tokenizer=tokenizer),
        train_manifest,
        image_root,
        out,
        cfg,
        device=_device(device),
        resume=resume,
        overwrite=overwrite,
        progress=not quiet,
        log=click.echo,
    )
    click.echo(f"done: {out} ({state['global_step']} steps)")


@main.command()
@click.option("--store", required=True, type=click.Path(exists=True, file_okay=False))
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
def explain(store, manifests, scorers, records, limit, image_root, out, device, overwrite):
    """Where each word found its evidence: token->patch maps before and after the
    refinement, patch sensitivity of the gold-foil margin, every scorer's margins; PNGs and
    one self-contained HTML explorer (explorer.html)."""
    from .explain import run_explain
    from .store import FeatureStore

    run_explain(
        FeatureStore(store),
        list(manifests),
        list(scorers),
        out,
        records=records,
        limit=limit,
        image_root=image_root,
        device=_device(device),
        overwrite=overwrite,
        log=click.echo,
    )


@main.command()
@click.argument("folder", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--kind",
    required=True,
    type=click.Choice(["score-results", "head-run", "study", "pretrain-run", "explain", "adapt-run"]),
    help="What the folder is.",
)
def adopt(folder, kind):
    """Mark FOLDER, an output of a flowclip older than output markers, as KIND: everything
    in it now becomes the command's own, so --overwrite may replace it. Only the marker
    proves ownership; flowclip never takes a folder for its own by what it contains."""
    from .outputs import adopt as adopt_folder

    entries = adopt_folder(folder, kind)
    click.echo(
        f"{folder}: marked as {kind}; --overwrite may now replace these {len(entries)} entries: " + ", ".join(entries)
    )


@main.command()
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
def demo(out, scenes, epochs, quiet, zoo, patch_readout):
    """The whole pipeline offline: synthetic world, tiny CLIP, three heads, scored with controls."""
    from .demo import run_demo

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    run_demo(out, scenes, epochs, log=click.echo, progress=not quiet, zoo=zoo, patch_readout=patch_readout)
    click.echo(open(os.path.join(out, "summary.md")).read())
    click.echo(f"report: {os.path.join(out, 'summary.md')} (tables), {os.path.join(out, 'score')} (every record)")


if __name__ == "__main__":
    main()


# command groups that live in their own modules (they import nothing from this one)
main.add_command(store_commands.store)
main.add_command(data_commands.manifest)
main.add_command(data_commands.negatives)
