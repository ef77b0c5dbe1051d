"""`flowclip adapt`: the unfrozen path, both encoders trained with a head."""

from __future__ import annotations

import click

from .common import config_and_flags, device_name, report_to_option, tracking


@click.command()
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
@click.option("--tau-p", type=float, default=None, help="The pooling temperature (paper: 0.05 on COCO, 0.06 on CC3M).")
@click.option("--seed", type=int, default=None)
@click.option("--precision", type=click.Choice(["fp32", "bf16"]), default=None, help="bf16: autocast on CUDA.")
@click.option("--grad-checkpointing", is_flag=True, default=None, help="Recompute activations (large towers).")
@click.option("--workers", type=int, default=None, help="Image decoding processes.")
@click.option("--checkpoint-every", type=int, default=None)
@click.option("--max-steps", type=int, default=None, help="Stop after this many steps in all, as a finished run.")
@click.option("--device", default="auto", show_default=True)
@click.option("--resume", is_flag=True)
@click.option("--overwrite", is_flag=True, help="Replace an adapt run folder (nothing else).")
@click.option("--quiet", is_flag=True)
@report_to_option
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
    report_to,
    wandb_project,
    **flags,
):
    """Adapt both encoders with a head (the unfrozen path); `torchrun -m flowclip_cache adapt ...`
    runs it on several GPUs (or CPU processes). Writes OUT/encoder.safetensors and a head
    run folder: extract with --pretrained OUT/encoder.safetensors, then score --scorer OUT."""
    from ..extraction.encoders import EncoderSpec
    from ..training.adapt import AdaptConfig, run_adapt

    cfg = AdaptConfig.from_dict(*config_and_flags(AdaptConfig, config_file, flags))
    with tracking(report_to, wandb_project, log=click.echo) as track:
        state = run_adapt(
            EncoderSpec(model, pretrained, init_seed, token_mask, tokenizer=tokenizer),
            train_manifest,
            image_root,
            out,
            cfg,
            device=device_name(device),
            resume=resume,
            overwrite=overwrite,
            progress=not quiet,
            watch=track.watch,
            log=click.echo,
        )
    click.echo(f"done: {out} ({state['global_step']} steps)")
