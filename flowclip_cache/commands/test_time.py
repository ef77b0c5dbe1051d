"""`flowclip test-time-match`: a head adapted to a group task's own test set without labels
(scoring/test_time_matching.py; ours, after Zhu et al. 2025's SimpleMatch and TTM)."""

from __future__ import annotations

import click

from .common import STORE, device_name, plugin_option


@click.command("test-time-match")
@click.option("--store", required=True, type=STORE)
@click.option("--manifest", required=True, type=click.Path(exists=True, dir_okay=False), help="A 2x2 group task.")
@click.option("--scorer", required=True, help="A train-head run folder, or clip (a Global-M head from the identity).")
@click.option(
    "--recipe",
    type=click.Choice(["simplematch", "ttm"]),
    default="simplematch",
    show_default=True,
    help="simplematch: one iteration at threshold 0; ttm: 10 iterations, threshold 2 -> 0 (ttm.sh).",
)
@click.option("--iterations", type=click.IntRange(min=1), help="Matching-training iterations (default: the recipe's).")
@click.option("--epochs", type=click.IntRange(min=1), default=30, show_default=True, help="Epochs per iteration.")
@click.option(
    "--batch-groups", type=click.IntRange(min=1), default=50, show_default=True, help="Groups a training batch."
)
@click.option("--lr", type=float, help="Learning rate (default: the run's own training learning rate).")
@click.option("--seed", type=int, default=42, show_default=True)
@click.option("--out", required=True, type=click.Path(file_okay=False), help="A new folder for the results.")
@click.option("--device", default="auto", show_default=True)
@click.option("--image-root", type=click.Path())
@click.option("--overwrite", is_flag=True, help="Replace a folder this command wrote before (nothing else).")
@plugin_option
def test_time_match(store, manifest, scorer, recipe, iterations, epochs, batch_groups, lr, seed, out, device,
                    image_root, overwrite):  # fmt: skip
    """Adapt a head to a 2x2 group task's test images and captions without labels (the
    matching GroupMatch picks, as Zhu et al. 2025's SimpleMatch / TTM do, here over the
    head on cached features), and report the official figures before and after each
    iteration. Labelled everywhere as adapted to the test set: not an official score."""
    from ..errors import FlowclipError
    from ..manifest import Manifest
    from ..outputs import check_replaceable
    from ..scoring.manifest_specs import scoring_of
    from ..scoring.scorer_specs import check_scorers

    check_replaceable(out, "test-time-matching", overwrite)  # every mistake a file can be, before torch is imported
    name, sc = scoring_of(Manifest.read(manifest))
    if sc.task != "groups":
        raise FlowclipError(f"{manifest}: test-time matching takes a 2x2 group task; {name} is a {sc.task} task")
    check_scorers([scorer], store)
    from ..scoring.test_time_matching import RECIPES, TTMConfig, run_test_time_matching
    from ..store import FeatureStore

    settings = {**RECIPES[recipe], "epochs": epochs, "batch_groups": batch_groups, "lr": lr, "seed": seed}
    if iterations is not None:
        settings["iterations"] = iterations
    run_test_time_matching(
        FeatureStore(store),
        manifest,
        scorer,
        out,
        TTMConfig(**settings),
        recipe,
        device=device_name(device),
        image_root=image_root,
        overwrite=overwrite,
        log=click.echo,
    )
