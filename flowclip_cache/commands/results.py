"""`flowclip results`: the score outputs under folders as one table (scoring/results_table.py)."""

from __future__ import annotations

import click


@click.command()
@click.argument("folders", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--control", "controls", multiple=True, help="Image controls to show (repeatable). Default real.")
@click.option(
    "--where", multiple=True, metavar="COLUMN=VALUE", help="Keep rows whose column equals VALUE (repeatable)."
)
@click.option("--benchmark", "benchmarks", multiple=True, help="Benchmarks to show, in this order (default all).")
@click.option("--sort", help="A column or benchmark to sort by, highest first.")
@click.option(
    "--out", type=click.Path(file_okay=False), help="Also write results.md and results.csv to this new folder."
)
@click.option("--overwrite", is_flag=True, help="Replace an --out this command wrote before.")
@click.option(
    "--group-match",
    is_flag=True,
    help="Also each group task's GroupMatch (test-time matching; not its official score).",
)
@click.option(
    "--blind",
    is_flag=True,
    help="Also each scorer's accuracy where score --blind-audit's text probe fails (not an official score).",
)
def results(folders, controls, where, benchmarks, sort, out, overwrite, group_match, blind):
    """Every score output under FOLDERS (score --out folders, studies, sweeps) as one table:
    a row per scorer and control, the head's training settings that differ as columns,
    each benchmark's headline (%)."""
    import os

    from .. import outputs
    from ..scoring.results_table import columns, find_results, render, result_rows, select

    base = os.path.commonpath([os.path.abspath(f) for f in folders])
    rows = [r for folder in find_results(list(folders)) for r in result_rows(folder, base)]
    rows = select(rows, list(controls) or ["real"], list(where), sort)
    md, csv_text = render(rows, columns(rows, list(benchmarks), group_match, blind))
    click.echo(md, nl=False)
    if out:
        outputs.check_replaceable(out, "results-table", overwrite)
        with outputs.staged(out, "results-table", overwrite) as tmp:
            outputs.write_text(os.path.join(tmp, "results.md"), md)
            outputs.write_text(os.path.join(tmp, "results.csv"), csv_text)
        click.echo(f"wrote {out}")


@click.command()
@click.argument("results_folder", type=click.Path(exists=True, file_okay=False))
@click.option("--benchmark", required=True, help="A group task scored in that folder (winoground, vismin, ...).")
@click.option("--scorer", required=True, help="The scorer's label in the results (as results.md names it).")
@click.option(
    "--format",
    "fmt",
    required=True,
    type=click.Choice(["c0_i0", "vismin-csv", "naturalbench-npy"]),
    help="c0_i0: Winoground's and NaturalBench's per-group keys (CSV); vismin-csv: VisMin's submission "
    "CSV; naturalbench-npy: NaturalBench's [groups, image, caption] score array.",
)
@click.option("--out", required=True, type=click.Path(file_okay=False), help="A new folder for the export.")
@click.option("--overwrite", is_flag=True, help="Replace an --out this command wrote before.")
def export(results_folder, benchmark, scorer, fmt, out, overwrite):
    """One scorer's per-group scores of a group task, from a score folder, in the format
    the benchmark's own evaluator reads (not a flowclip figure: the raw scores)."""
    import os

    from .. import outputs
    from ..scoring.exports import write_export

    outputs.check_replaceable(out, "leaderboard-export", overwrite)
    with outputs.staged(out, "leaderboard-export", overwrite) as tmp:
        path = write_export(results_folder, benchmark, scorer, fmt, tmp)
    click.echo(f"wrote {os.path.join(out, os.path.basename(path))}")
