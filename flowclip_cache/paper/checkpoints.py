"""The released checkpoints the paper scores frozen with the CLIP scorer (Tabs. 1, 4, 7):
where their authors put them, the form each is in (extraction/released.py), the row and
Tab. 1 block each fills, and the commands that make each loadable and stand in for it.

Sources, each project's README and code:

- FSC-CLIP: github.com/ytaek-oh/fsc-clip, "Model Zoo". The paper does not say which variant
  it scored; these are the full fine-tunes (the README's `fsc-clip` rows), the LoRA ones
  (`*_fsc-clip-lora-*`) the alternative.
- NegCLIP: the ARO repository's model_zoo/__init__.py (github.com/mertyg/vision-language-
  models-are-bows, get_model "NegCLIP"), which loads it as open_clip's ViT-B-32 from the file.
- CE-CLIP: github.com/lezhang7/Enhance-FineGrained, README "Checkpoints" (gdown id, or
  huggingface.co/le723z/CE_CLIP); an open_clip training checkpoint that their README's
  SugarCrepe command loads as `--model ViT-B-32 --pretrained epoch_5.pt`, as extract does.
- DAC (two variants, DAC-LLM and DAC-SAM): github.com/SivanDoveh/DAC, README "Evaluation"
  (a Google Drive folder); TSVLC: github.com/SivanDoveh/TSVLC, README (a Google Drive folder,
  the checkpoint "trained with [LLM,RB] negatives"). Both are loralib checkpoints of OpenAI's
  ViT-B/32 trained with `--lora 4 --pretrained openai` on CC3M, merged here as their code
  applies them (`flowclip checkpoint merge-lora`). The folders' file names are not in the
  repositories: the dry run names the folder and the path the plan expects.

No sha256 is published for any of them: the store records each file's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from shlex import quote as q


@dataclass(frozen=True)
class Release:
    what: str
    where: str
    fetch: str  # the command that fetches it into {dir} ("" where a folder's file must be picked by hand)
    file: str  # the name the fetch gives it
    row: str  # its row in the tables it feeds
    block: str  # Tab. 1's training-source block: COCO or CC3M
    form: str = "open_clip"  # extraction/released.py FORMS
    tables: str = "Tab. 1"  # the tables it feeds (the plan's step labels)
    # built with QuickGELU as its authors' code builds it (FSC-CLIP fine-tunes `--pretrained openai`,
    # which their open_clip 2.24 loads with load_openai_model: QuickGELU); extracted so
    quick_gelu: bool = False


_HF = "huggingface-cli download ytaek-oh/fsc-clip {file} --local-dir {{dir}}"
_DAC = "the Google Drive folder 1DmHeV8oWiMwtkaTH-nruMyjBiuJvcwnv (github.com/SivanDoveh/DAC, README 'Evaluation')"
_DAC_FETCH = "gdown --folder 1DmHeV8oWiMwtkaTH-nruMyjBiuJvcwnv -O {dir}/dac-release"
RELEASED = {
    "fsc_clip": Release(
        "FSC-CLIP, ViT-B-32, OpenAI CLIP fine-tuned on COCO",
        "huggingface.co/ytaek-oh/fsc-clip, file coco_fsc-clip-ViT-B-32.pt",
        _HF.format(file="coco_fsc-clip-ViT-B-32.pt"), "coco_fsc-clip-ViT-B-32.pt", "FSC-CLIP", "COCO",
        tables="Tabs. 1, 4", quick_gelu=True),
    "fsc_clip_cc3m": Release(
        "FSC-CLIP, ViT-B-32, fine-tuned on CC3M-100K",
        "huggingface.co/ytaek-oh/fsc-clip, file cc3m_fsc-clip-ViT-B-32.pt",
        _HF.format(file="cc3m_fsc-clip-ViT-B-32.pt"), "cc3m_fsc-clip-ViT-B-32.pt", "FSC-CLIP", "CC3M",
        quick_gelu=True),
    "negclip": Release(
        "NegCLIP as released (ViT-B-32, COCO)",
        "the ARO repository's Google Drive file 1ooVVPxB-tvptgmHlIMMFGV3Cg-IrhbRZ",
        "gdown --id 1ooVVPxB-tvptgmHlIMMFGV3Cg-IrhbRZ -O {dir}/negclip.pth", "negclip.pth",
        "NegCLIP (released)", "COCO", tables="Tabs. 1, 4, 7"),
    "ce_clip": Release(
        "CE-CLIP, ViT-B-32, COCO", "the Google Drive file 1DWPw3CtGh5cHz9bW_-iXRSG7BBUVl13K "
        "(github.com/lezhang7/Enhance-FineGrained; also huggingface.co/le723z/CE_CLIP)",
        "gdown 1DWPw3CtGh5cHz9bW_-iXRSG7BBUVl13K -O {dir}/ce-clip.pt", "ce-clip.pt", "CE-CLIP", "COCO"),
    "dac_llm": Release("DAC-LLM (LoRA, rank 4, on OpenAI's ViT-B-32; CC3M)", _DAC + ", the DAC_LLM checkpoint",
                       _DAC_FETCH, "", "DAC-LLM", "CC3M", "tsvlc-lora"),
    "dac_sam": Release("DAC-SAM (LoRA, rank 4, on OpenAI's ViT-B-32; CC3M)", _DAC + ", the DAC_SAM checkpoint",
                       _DAC_FETCH, "", "DAC-SAM", "CC3M", "tsvlc-lora"),
    "tsvlc": Release(
        "TSVLC, [LLM,RB] negatives (LoRA, rank 4, on OpenAI's ViT-B-32; CC3M)",
        "the Google Drive folder 1WosT_kdam1ymWjVSK2ezyydLoqmm0LdX (github.com/SivanDoveh/TSVLC, README)",
        "gdown --folder 1WosT_kdam1ymWjVSK2ezyydLoqmm0LdX -O {dir}/tsvlc-release", "", "TSVLC", "CC3M",
        "tsvlc-lora"),
}  # fmt: skip
ROWS = {r.row for r in RELEASED.values()}


def release(name: str) -> Release:
    """A configured checkpoint's entry; a name the catalogue does not know is an open_clip
    checkpoint with a row of its own name (in the COCO block)."""
    return RELEASED.get(name) or Release(name, "", "", "", name, "COCO")


def extract_model(cfg, name: str, model: str) -> str:
    """The open_clip config a release is extracted with: its authors' activation (a
    QuickGELU release of an OpenAI-style config as MODEL-quickgelu); a stand-in's is the
    stand-in encoder's own."""
    if release(name).quick_gelu and cfg.standins is None and not model.endswith("-quickgelu"):
        return f"{model}-quickgelu"
    return model


def how_to_get(name: str, path: str) -> str:
    """Where a released checkpoint is and the command that fetches it to `path`."""
    rel = release(name)
    if not rel.where:
        return f"download the released open_clip checkpoint {name} to {path}"
    folder = os.path.dirname(path) or "."
    if rel.file and rel.file != os.path.basename(path):
        then = f", then name it {os.path.basename(path)}"
    elif not rel.file:
        then = f", then move the checkpoint it names to {path}"
    else:
        then = ""
    form = (
        "a torch checkpoint open_clip loads with weights_only"
        if rel.form == "open_clip"
        else "a loralib checkpoint the plan merges with `flowclip checkpoint merge-lora`"
    )
    return f"download {rel.what} ({rel.where}; {form}, no sha256 published): {rel.fetch.format(dir=folder)}{then}"


def merged_path(cfg, name: str) -> str:
    """Where the plan writes a low-rank release merged into open_clip weights."""
    return os.path.join(cfg.cache, f"{name}-merged.safetensors")


def loadable(cfg, name: str, path: str, enc: dict) -> tuple[str, list[str], list[str]]:
    """(what extract takes as --pretrained, the commands that make it, their done-markers)."""
    if release(name).form == "open_clip":
        return path, [], []
    out = merged_path(cfg, name)
    base = "openai" if cfg.standins is None else "none"  # a stand-in's base is the stand-in encoder's own
    cmd = f"flowclip checkpoint merge-lora {q(path)} --model {q(enc['model'])} --built-as {base} --out {q(out)}"
    return out, [cmd], [out]


def standin_command(name: str, path: str, enc: dict, seed: int) -> str:
    """A random stand-in in the release's own form (flowclip checkpoint standin)."""
    return (
        f"flowclip checkpoint standin --form {release(name).form} --model {q(enc['model'])} "
        f"--pretrained {q(enc['pretrained'])} --seed {seed} --out {q(path)}"
    )
