"""flowclip demo: the whole pipeline, offline, on the synthetic world and the tiny CLIP.

    world (cached) -> manifests -> extract (tiny CLIP) -> frozen-encoder profile ->
    train Global-M, Flow-CLIP (HNB), Flow-CLIP (HNB + CIMR) -> score every synthetic
    benchmark with Real / Shuffle / Fixed controls -> report folder

It is the synthetic ablation study (synthetic) at demo size: one seed.
"""

from __future__ import annotations

import os

from .ablation import AblationConfig, run

HEADS = {
    "global": {"head": "global", "cimr": 0.0},
    "flow_hnb": {"head": "flow", "cimr": 0.0},
    "flow_hnb_cimr": {"head": "flow", "cimr": 0.1},
}
ZOO = {
    "labclip": {"head": "labclip"},
    "filip": {"head": "filip"},
    "fsc_local": {"head": "fsc-local"},
    "dcsm": {"head": "dcsm"},
}  # --zoo: at the demo's size, with the demo's training settings


DEMO_MODEL = "flowclip-tiny-clip-filip"


def demo_encoder() -> dict:
    """The grounded tiny CLIP (the causal recipe plus FILIP's token-wise loss,
    pipelines/pretrain_tiny_clip_filip.yaml): the shipped encoder whose patches ground
    words, under which the binding lab shows Flow-CLIP's binding gain over Global-M
    (docs/results-synthetic.md, section 9). Random weights if this install has none."""
    from ..errors import WeightsUnavailable
    from ..extraction.encoders import shipped_weights

    try:
        shipped_weights(DEMO_MODEL)
        return {"model": DEMO_MODEL, "pretrained": "synthetic"}
    except WeightsUnavailable:
        return {"model": DEMO_MODEL, "pretrained": "none"}


# The grounded tiny CLIP's own patches (standard readout): with them the binding lab's
# gain is clear in every world (section 9); ClearCLIP's readout, which grounded the
# shipped causal tiny CLIP's words (section 6), makes it smaller here.
# --patch-readout clearclip (or any other) reads its patches anew.
DEMO_READOUT = "standard"


def run_demo(
    out: str,
    scenes: int = 1500,
    epochs: int = 2,
    log=print,
    bootstrap_draws: int = 1000,
    progress: bool = True,
    zoo: bool = False,
    patch_readout: str | None = None,
    extra_heads: dict | None = None,
) -> dict:
    """The demo's study; extra_heads (name -> {head: kind}): heads of one's own trained beside
    the demo's and compared with each of them and with FILIP's training-free score (the
    demo's world, store and finished runs reused)."""
    enc = demo_encoder()
    readout = patch_readout or DEMO_READOUT
    if readout != "standard":
        enc["patch_readout"] = readout
    log(f"patch readout: {readout}")
    if enc["pretrained"] == "none":
        log("note: no shipped synthetic-world weights; the tiny CLIP runs with random weights")
    cfg = AblationConfig(
        kind="ablation",
        out=os.path.abspath(out),
        world={
            "seed": 0,
            "train_scenes": scenes,
            "eval_scenes": max(100, scenes // 5),
            "heldout_scenes": max(100, scenes // 6),
        },
        encoder=enc,
        seeds=[0],
        heads={**HEADS, **(ZOO if zoo else {}), **(extra_heads or {})},
        train_config={"epochs": epochs, "batch_size": 32, "lr": 1e-3},
        controls=["real", "shuffle", "fixed"],
        bootstrap=bootstrap_draws,
        training_free=["filip-score"],  # the encoder's own local evidence, untrained: the baseline to beat
        compare=[["global", "flow_hnb"], ["global", "flow_hnb_cimr"], ["filip-score", "flow_hnb_cimr"]]
        + ([["flow_hnb_cimr", k] for k in ZOO] if zoo else [])
        + [[base, k] for k in extra_heads or {} for base in ("filip-score", *HEADS)],
    )
    summary = run(cfg, dry_run=False, jobs=1, log=log, progress=progress)
    explain_demo(cfg, log)
    return summary


def explain_demo(cfg: AblationConfig, log, most: int = 15) -> None:
    """The evidence explorer of the binding task (Global-M -> Flow-CLIP HNB + CIMR, seed 0),
    linked from the demo's summary."""
    from ..outputs import write_text
    from ..scoring.explain import run_explain
    from ..store import FeatureStore

    folder = lambda method: os.path.join(cfg.out, "runs", _folder(cfg, method))
    out = os.path.join(cfg.out, "explain")
    if not os.path.exists(os.path.join(out, "explorer.html")):  # a finished demo run again: already there
        binding = next(m for m in cfg.eval if "swap-att" in os.path.basename(m) and "heldout" not in m)
        images = os.path.join(cfg.world_folder or os.path.join(cfg.out, "world"), "images")
        run_explain(
            FeatureStore(cfg.store or ""),
            [binding],
            [f"global={folder('global')}", f"flow_hnb_cimr={folder('flow_hnb_cimr')}"],
            out,
            records="changed",
            limit=most,
            per_status=True,
            image_root=images,
            overwrite=True,
            log=log,
        )
    summary = os.path.join(cfg.out, "summary.md")
    text = open(summary).read()
    if EXPLORER_LINK not in text:  # linked once, whether the study rewrote its summary or not
        write_text(summary, text + EXPLORER_LINK)


EXPLORER_LINK = (
    "\n## Where the words looked\n\nThe evidence explorer of the binding task (swap-att), Global-M -> "
    "Flow-CLIP (HNB + CIMR), the largest repairs and regressions: "
    "[explain/explorer.html](explain/explorer.html) (one self-contained page), "
    "figures in explain/records/ and explain/grid.png.\n"
)


def _folder(cfg: AblationConfig, method: str) -> str:
    from .ablation import plan

    return next(r.folder for r in plan(cfg) if r.method == method and r.seed == cfg.seeds[0])
