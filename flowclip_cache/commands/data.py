"""`flowclip manifest` (build, check, list the catalogue) and `flowclip negatives`."""

from __future__ import annotations

import os

import click

from ..errors import FlowclipError


@click.group()
def manifest():
    """Build, check and list benchmark manifests."""


@manifest.command("build")
@click.argument("name")
@click.option(
    "--source",
    required=True,
    help="The benchmark's official files (a folder or file; for the webdataset layouts also an fsspec URL).",
)
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Manifest to write (.parquet).")
@click.option("--option", "options", multiple=True, help="KEY=VALUE for the converter (see `manifest list`).")
@click.option("--on-error", type=click.Choice(["fail", "skip"]), default="fail", show_default=True)
@click.option("--overwrite", is_flag=True)
def manifest_build(name, source, out, options, on_error, overwrite):
    """Convert benchmark NAME's official files into a manifest."""
    from ..catalogue import check_counts
    from ..datasets import get
    from ..datasets.base import RowErrors

    bench = get(name)
    if "://" in source and not source.startswith("file://"):
        if not bench.reads_urls:
            raise FlowclipError(f"--source {source}: {name} reads a local copy; download it to a folder first")
    elif not os.path.exists(source):
        raise FlowclipError(f"--source {source}: no such file or folder")
    opts = {}
    for o in options:
        k, sep, v = o.partition("=")
        if not sep or k not in bench.options:
            raise FlowclipError(f"--option {o!r}: {name} takes {', '.join(bench.options) or 'no options'}")
        opts[k] = v
    if os.path.exists(out) and not overwrite:
        raise FlowclipError(f"{out} exists; pass --overwrite to replace it")
    report = bench.build(source, out, RowErrors(on_error), **opts)
    click.echo(f"{name}: {report.records} records, {report.images} images -> {out}")
    for k, v in report.counts.items():
        click.echo(f"  {k}: {v}")
    for n in report.notes:
        click.echo(f"  note: {n}")
    if report.skipped:
        click.echo(f"  skipped {len(report.skipped)} rows:")
        for path, where, why in report.skipped[:20]:
            click.echo(f"    {path}: {where}: {why}")
    for line in check_counts(name, report):
        click.echo(f"  catalogue: {line}")


@manifest.command("check")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--image-root", type=click.Path(exists=True, file_okay=False))
def manifest_check(path, image_root):
    """Report missing images, duplicate record ids and duplicate captions in a candidate set."""
    from ..manifest import Manifest, check_manifest

    problems = check_manifest(Manifest.read(path), image_root)
    for p in problems[:50]:
        click.echo(p)
    if len(problems) > 50:
        click.echo(f"... and {len(problems) - 50} more")
    if problems:
        raise FlowclipError(f"{len(problems)} problems in {path}")
    click.echo(f"ok: {path}")


@manifest.command("split")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--out-a", required=True, type=click.Path(dir_okay=False), help="Part A (a new file).")
@click.option("--out-b", required=True, type=click.Path(dir_okay=False), help="Part B, the rest (a new file).")
@click.option("--fraction", default=0.5, show_default=True, type=click.FloatRange(0, 1, min_open=True, max_open=True),
              help="The share of images in part A.")  # fmt: skip
@click.option("--seed", default=0, show_default=True, help="Which images go to A (a hash of the seed and the image).")
def manifest_split(path, out_a, out_b, fraction, seed):
    """Split a manifest into two with no image in both: one to select on (a sweep's
    validation), the other to report on (its eval). A row follows its image(s)."""
    from ..manifest import Manifest, split_by_image, write_manifest

    if os.path.abspath(out_a) == os.path.abspath(out_b):
        raise FlowclipError(f"--out-a and --out-b are both {out_a}; give two new files")
    for out in (out_a, out_b):
        if os.path.exists(out):
            raise FlowclipError(f"{out} exists; give a new file")
    m = Manifest.read(path)
    a, b = split_by_image(m, fraction, seed)
    meta = {**m.meta, "split_of": {"manifest": os.path.basename(path), "fraction": fraction, "seed": seed}}
    write_manifest(out_a, a, m.kind, {**meta, "split_part": "a"})
    try:
        write_manifest(out_b, b, m.kind, {**meta, "split_part": "b"})
    except BaseException:  # both parts or neither
        os.remove(out_a)
        raise
    click.echo(f"{path}: {a.num_rows} rows -> {out_a}, {b.num_rows} rows -> {out_b} (no image in both)")


@manifest.command("list")
@click.option("--suite", help="Only a suite's members (score --suite NAME): paper, field, vl-compo.")
@click.option("--sizes", is_flag=True, help="Each entry's images, store size and extraction time (estimates).")
@click.option("--model", "models", multiple=True, default=["ViT-B-32"], show_default=True,
              help="With --sizes: an encoder to size the stores for (repeat for several).")  # fmt: skip
@click.option("--built", default="manifests/eval", show_default=True,
              help="With --sizes: the folder of built manifests (<name>.parquet), read for their counts.")  # fmt: skip
@click.option("--image-root", type=click.Path(exists=True, file_okay=False),
              help="With --sizes: measure the bytes of each built manifest's images under this folder.")  # fmt: skip
@click.option("--device", default="cpu", show_default=True, help="With --sizes: the device to time the forward on.")
@click.option("--features", type=click.Choice(["all", "global"]), default="all", show_default=True,
              help="With --sizes: the features extract would write (extract --features).")  # fmt: skip
def manifest_list(suite, sizes, models, built, image_root, device, features):
    """The benchmark catalogue: converters, expected counts, sources, options; with --suite,
    the suite's members, each with the column and figure it gives the suite's table; with
    --sizes, each entry's images, its store per encoder and the extraction's time."""
    from ..catalogue import load_catalogue
    from ..datasets import all_benchmarks

    if sizes:
        from ..devices import resolve_device
        from ..extraction.catalogue_sizes import print_catalogue_sizes

        kinds = {n: b.kind for n, b in all_benchmarks().items() if not b.task_name}  # (a layout has no one size)
        dev, global_only = resolve_device(device), features == "global"
        print_catalogue_sizes(load_catalogue(), kinds, list(models), built, image_root, dev, global_only, click.echo)
        return
    if suite:
        from ..scoring.suites import members

        rows = members(suite)
        click.echo(f"{suite}: {len({b for _, b, _ in rows})} benchmarks, {len({c for c, _, _ in rows})} columns")
        for column, bench, figure in rows:
            click.echo(f"  {column:24s} {bench:28s} {figure}")
        return
    cat = load_catalogue()
    for name, b in all_benchmarks().items():
        entry = cat.get(name, {})
        click.echo(f"{name:24s} {b.kind:14s} {b.title}")
        if entry:
            click.echo(f"{'':24s} source: {entry.get('source')}  licence: {entry.get('licence')}")
            if entry.get("records"):
                click.echo(f"{'':24s} expected records: {entry['records']}")
        for k, h in b.options.items():
            click.echo(f"{'':24s} --option {k}=...: {h}")


@click.command()
@click.option(
    "--in",
    "inp",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Parquet with columns image, caption (and optionally split, record_id).",
)
@click.option("--out", required=True, type=click.Path(dir_okay=False))
@click.option("--kinds", default="swap-att,swap-obj,shuffle-bigram", show_default=True)
@click.option("--seed", default=0, show_default=True)
@click.option(
    "--attributes",
    type=click.Path(exists=True, dir_okay=False),
    help="A word list added to swap-att's attribute words (one per line or space-separated).",
)
@click.option(
    "--objects", type=click.Path(exists=True, dir_okay=False), help="A word list added to swap-obj's object words."
)
def negatives(inp, out, kinds, seed, attributes, objects):
    """Make a training manifest with full-caption hard negatives for your own captions."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..manifest import write_manifest
    from ..negatives import ATTRIBUTES, OBJECTS, build_training, read_word_list

    table = pq.read_table(inp)
    for col in ("image", "caption"):
        if col not in table.column_names:
            raise FlowclipError(f"{inp}: missing column {col!r}")
    atts = ATTRIBUTES | (read_word_list(attributes) if attributes else set())
    objs = OBJECTS | (read_word_list(objects) if objects else set())
    captions = table.to_pylist()
    rows, missing = build_training(captions, kinds.split(","), seed, atts, objs)
    report = [
        f"  {k}: {len(captions) - sum(m[1] == k for m in missing)} of {len(captions)} captions got one"
        for k in kinds.split(",")
    ]
    reasons: dict = {}
    for _, k, why in missing:
        reasons[(k, why)] = reasons.get((k, why), 0) + 1
    report += [f"  {k}: {n} got none: {why}" for (k, why), n in sorted(reasons.items())]
    if not rows:
        raise FlowclipError(f"{inp}: no record got a negative of kinds {kinds}\n" + "\n".join(report))
    write_manifest(out, pa.Table.from_pylist(rows), "training", {"negatives": kinds, "seed": seed})
    click.echo(f"{len(rows)} of {len(captions)} records -> {out} (a record needs at least one negative)")
    click.echo("\n".join(report))
