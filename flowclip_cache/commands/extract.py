"""`flowclip extract`: frozen encoders once over every image and caption the manifests name."""

from __future__ import annotations

import os
import sys

import click

from ..devices import rank_device
from ..errors import FlowclipError
from .common import READOUT_NAMES, StorePlace, device_name


@click.command()
@click.option(
    "--store", required=True, type=StorePlace(exists=False), help="Store folder or URL (s3://...), created if absent."
)
@click.option(
    "--model",
    required=True,
    help="An open_clip config (OpenAI-style CLIP: ViT-B-32, ViT-B-16, ViT-L-14, ViT-L-14-336; SigLIP: "
    "ViT-B-16-SigLIP, ViT-B-16-SigLIP2, ...), an open_clip Hub repository hf-hub:ORG/REPO (with "
    "--pretrained hf), or blip:<HF repo or folder> (BLIP ITC). `flowclip models` lists them.",
)
@click.option(
    "--pretrained",
    default=None,
    help="Required: an open_clip pretrained tag (e.g. openai), a local checkpoint file, 'synthetic' (the tiny "
    "CLIP that ships: --model flowclip-tiny-clip), for BLIP and hf-hub: models 'hf' (the repo's or folder's "
    "safetensors weights), or 'none' for RANDOM weights (a store of random features, said so by its name).",
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
    "--decode",
    type=click.Choice(["pil", "cpu", "gpu"]),
    default="pil",
    show_default=True,
    help="Who decodes and resizes images: PIL (open_clip's transform), or torchvision in batches on the CPU "
    "(cpu) or with nvJPEG on the GPU (gpu, with --device cuda). Each is its own preprocessing: its own store "
    "fingerprint (docs/scale.md, 'GPU decode').",
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
@click.option(
    "--batch-size", type=click.IntRange(min=1), default=64, show_default=True, help="Images per forward pass."
)
@click.option(
    "--text-batch-size", type=click.IntRange(min=1), default=256, show_default=True, help="Captions per forward pass."
)
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    default=min(4, os.cpu_count() or 1),
    show_default=True,
    help="Image decoding processes (0 = in the main process).",
)
@click.option("--token-mask", type=click.Choice(["nonpad", "content"]), default="nonpad", show_default=True)
@click.option(
    "--on-error",
    type=click.Choice(["fail", "skip"]),
    default="fail",
    show_default=True,
    help="fail: an image or caption that cannot be read stops the command (missing files before anything is "
    "written); skip: extract the rest and record the failures in the store (store info counts them).",
)
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
@click.option(
    "--image-unit", type=click.IntRange(min=1), default=256, show_default=True, help="Images per committed segment."
)
@click.option(
    "--caption-unit",
    type=click.IntRange(min=1),
    default=4096,
    show_default=True,
    help="Captions per committed segment.",
)
@click.option(
    "--rehash",
    is_flag=True,
    help="Hash every image file again, even those whose size, mtime and "
    "inode the store recorded (for files edited in place without a new mtime).",
)
@click.option(
    "--features",
    type=click.Choice(["all", "global"]),
    default="all",
    show_default=True,
    help="global: the global features alone (a fraction of the disk and time; enough for the CLIP scorer and "
    "global heads). A later run with all adds patch and token features to the same store.",
)
@click.option("--quiet", is_flag=True, help="No progress bar.")
def extract(
    store,
    model,
    pretrained,
    init_seed,
    tokenizer,
    patch_readout,
    decode,
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
    features,
    quiet,
):
    """Encode every image and caption the manifests name, once, into a feature store."""
    from ..extraction.encoders import EncoderSpec, resolve
    from ..extraction.extract import run_extract
    from ..extraction.families.listing import check_encoder_name
    from ..extraction.plan import check_inputs
    from ..extraction.tensor_decode import check_decode_device
    from ..store import FeatureStore

    if not 0 <= rank < world_size:
        raise FlowclipError(f"--rank {rank} must lie in [0, --world-size {world_size})")
    if pretrained is None:  # random features look like any others: never the default
        from ..extraction.families.listing import released_tags

        tags = released_tags(model)
        raise FlowclipError(
            f"--pretrained is required: {model}'s released weights are "
            + (", ".join(tags) if tags else "none known here")
            + "; or a local checkpoint file, or 'none' for random weights"
        )
    check_encoder_name(model, pretrained)  # a mistyped name, before torch is imported
    check_inputs(list(manifests), image_root, allow_outside_root, on_error)  # refused before a store exists
    enc = resolve(
        EncoderSpec(model, pretrained, init_seed, token_mask, tokenizer=tokenizer, patch_readout=patch_readout,
                    decode=decode)
    )  # fmt: skip
    device = rank_device(device_name(device))  # under torchrun each rank on its own GPU
    check_decode_device(enc.config, device)  # before a store exists
    fs = FeatureStore.open_or_create(store, enc.config, backend)
    summary = run_extract(
        fs,
        enc,
        list(manifests),
        image_root,
        device=device,
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
        features=features,
    )
    if enc.config["weights"]["source"] == "random-init":
        click.echo(f"weights:  random (--pretrained none, init seed {init_seed}): features of an untrained encoder")
    for line in summary.lines():
        click.echo(line)
    if summary.failures and on_error == "fail":
        sys.exit(1)


@click.command("models")
@click.option("--all", "show_all", is_flag=True, help="Also configs with no pretrained tag (random weights only).")
@click.option("--json", "as_json", is_flag=True)
def models(show_all, as_json):
    """The encoders extract can cache, by family, with their --pretrained tags; `*` marks
    weights this machine already holds (nothing is downloaded)."""
    import json

    from ..extraction.families.listing import list_models

    entries = list_models(with_tags_only=not show_all)
    if as_json:
        click.echo(json.dumps([e.__dict__ for e in entries], indent=1))
        return
    family = None
    for e in entries:
        if e.family != family:
            family = e.family
            click.echo(f"{family}:")
        tags = [t + ("*" if t in e.local else "") for t in e.tags] + (
            [f"synthetic* (ships with flowclip: {e.about})"] if e.shipped else []
        )
        click.echo(f"  {e.model:28s} {', '.join(tags) or '(random weights only: --pretrained none)'}")
    click.echo(
        "blip:\n  blip:<Hugging Face repo or local folder>, e.g. blip:Salesforce/blip-itm-base-coco "
        "(needs pip install 'flowclip[hf]')"
    )
    click.echo(
        "\n* weights found on this machine. Any model also runs with random weights (--pretrained none), "
        "or from a file (--pretrained /path/to/weights.safetensors); `flowclip extract --help` for the flags, and "
        "docs/encoders.md in the flowclip repository for each family."
    )
