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
@click.option("--plot", type=click.Choice(["tradeoff"]),
              help="Also draw the trade-off figure (compositional against zero-shot mean) into --out.")  # fmt: skip
@click.option("--published", type=click.Path(exists=True, dir_okay=False),
              help="With --plot tradeoff: vl_compo's results.csv, its models drawn behind ours.")  # fmt: skip
def results(folders, controls, where, benchmarks, sort, out, overwrite, group_match, blind, plot, published):
    """Every score output under FOLDERS (score --out folders, studies, sweeps) as one table:
    a row per scorer and control, the head's training settings that differ as columns, the
    compositional, zero-shot and retrieval means over the tasks every row has, then each
    benchmark's headline (%)."""
    import os

    from .. import outputs
    from ..errors import FlowclipError
    from ..scoring.results_table import add_axis_means, columns, find_results, render, result_rows, select

    if (plot or published) and not out:
        raise FlowclipError("--plot and --published draw a figure into --out: name a new folder with --out")
    if published and not plot:
        raise FlowclipError("--published is the backdrop of --plot tradeoff: add --plot tradeoff")
    backdrop = _backdrop(published) if published else None
    base = os.path.commonpath([os.path.abspath(f) for f in folders])
    rows = [r for folder in find_results(list(folders)) for r in result_rows(folder, base)]
    rows = select(rows, list(controls) or ["real"], list(where), sort)
    tasks = add_axis_means(rows)
    if plot and (not tasks["compositional"] or not tasks["zero_shot"]):  # refused before anything is printed
        raise FlowclipError(
            "--plot tradeoff needs, in every row, a compositional task and a zero-shot classification set "
            f"(here: {len(tasks['compositional'])} and {len(tasks['zero_shot'])}); --where narrows the rows"
        )
    md, csv_text = render(
        rows, columns(rows, list(benchmarks), group_match, blind), {a: len(t) for a, t in tasks.items()}
    )
    md += "".join(f"\n{axis.replace('_', '-')} mean over: {', '.join(t)}" for axis, t in tasks.items() if t) + "\n"
    click.echo(md, nl=False)
    if out:
        outputs.check_replaceable(out, "results-table", overwrite)
        with outputs.staged(out, "results-table", overwrite) as tmp:
            outputs.write_text(os.path.join(tmp, "results.md"), md)
            outputs.write_text(os.path.join(tmp, "results.csv"), csv_text)
            if plot:
                _draw(rows, tasks, os.path.join(tmp, "tradeoff.png"), backdrop)
        click.echo(f"wrote {out}")


def _backdrop(path: str) -> list[tuple[float, float]]:
    from ..studies.vl_compo import read_published

    rows = read_published(path, ("comp_avg", "21_tasks_avg")).values()
    return [(r["comp_avg"], r["21_tasks_avg"]) for r in rows if {"comp_avg", "21_tasks_avg"} <= set(r)]


def _draw(rows, tasks, path, backdrop) -> None:
    """Each row at (compositional, zero-shot); an arrow from its results' frozen encoder."""
    from ..scoring.tradeoff import plot_tradeoff

    folders = {r["results"] for r in rows}
    label = lambda r: r["scorer"] if len(folders) == 1 else f"{r['results']}: {r['scorer']}"  # noqa: E731
    frozen = {(r["results"], r["control"]): label(r) for r in rows if r["method"] == "clip"}
    base = lambda r: None if r["method"] == "clip" else frozen.get((r["results"], r["control"]))  # noqa: E731
    points = [
        {"label": label(r), "x": r["mean:compositional"], "y": r["mean:zero_shot"], "base": base(r)} for r in rows
    ]
    plot_tradeoff(points, tasks, path, backdrop)


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
