"""`flowclip checkpoint`: released checkpoints in their authors' forms made loadable by
extract (extraction/released.py), and random stand-ins in those forms."""

from __future__ import annotations

import click


@click.group()
def checkpoint():
    """Released checkpoints: merge low-rank releases (TSVLC, DAC) into open_clip weights."""


@checkpoint.command("merge-lora")
@click.argument("src", type=click.Path(exists=True, dir_okay=False))
@click.option("--model", required=True, help="The open_clip architecture it adapts (TSVLC and DAC: ViT-B-32).")
@click.option(
    "--built-as",
    required=True,
    help="The open_clip pretrained tag its base was built as (TSVLC and DAC: openai, so QuickGELU and "
    "OpenAI's preprocessing), or 'none'.",
)
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="The merged .safetensors to write.")
def merge_lora_cmd(src, model, built_as, out):
    """Fold SRC's low-rank deltas (TSVLC's and DAC's loralib checkpoints) into its weights as
    their code does at eval time, and write one open_clip state dict that `extract
    --pretrained OUT` loads with the base's activation and preprocessing."""
    from ..errors import FlowclipError
    from ..extraction.released import write_merged

    if not out.endswith(".safetensors"):
        raise FlowclipError(f"--out {out}: name a .safetensors file")
    n = write_merged(src, out, model, built_as)
    click.echo(f"wrote {out}: {n} low-rank deltas folded into {model}'s weights; extract it with --pretrained {out}")


@checkpoint.command("standin")
@click.option("--form", required=True, type=click.Choice(["open_clip", "tsvlc-lora"]))
@click.option("--model", required=True, help="The encoder the stand-in is made from.")
@click.option("--pretrained", default="none", show_default=True, help="As for extract.")
@click.option("--seed", default=0, show_default=True)
@click.option("--rank", default=4, show_default=True, help="tsvlc-lora: the deltas' rank (TSVLC's and DAC's --lora 4).")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="The checkpoint file to write.")
def standin_cmd(form, model, pretrained, seed, rank, out):
    """A random stand-in for a release in FORM's file layout (tests, the paper's reduced run):
    not anyone's trained weights."""
    from ..extraction.released import write_standin

    write_standin(form, model, pretrained, seed, out, rank)
    click.echo(f"wrote {out}: a random {form} stand-in made from {model} ({pretrained}), seed {seed}")
