"""`flowclip store`: inspect, verify, compact, upgrade and sync feature stores."""

from __future__ import annotations

import json

import click

from ..errors import FlowclipError
from .common import STORE


@click.group()
def store():
    """Inspect and check feature stores."""


@store.command("info")
@click.argument("path", type=STORE)
@click.option("--json", "as_json", is_flag=True)
def store_info(path, as_json):
    """Fingerprint, counts and size on disk."""
    from ..store import FeatureStore

    info = FeatureStore(path, cache=False).info()  # (at a URL: read from the service, nothing cached)
    if as_json:
        click.echo(json.dumps(info, indent=1))
        return
    for k, v in info.items():
        if k == "bytes_on_disk":
            v = f"{v} ({v / 2**20:.1f} MiB)"
        click.echo(f"{k:15s} {v}")


@store.command("verify")
@click.argument("path", type=STORE)
@click.option(
    "--quarantine",
    is_flag=True,
    help="Move damaged segments and record files to PATH/quarantine/ (at a URL: damaged segments' commit "
    "records, which hides them); the next extract re-encodes what they held.",
)
def store_verify(path, quarantine):
    """Read every byte of the store: checksums, names, shapes, dtypes, NaN, record files.
    Reports every problem in one run."""
    from ..store.integrity import quarantine as move_aside
    from ..store.integrity import verify_store

    rep = verify_store(path)
    for _, msg in rep.problems:
        click.echo(f"problem: {msg}")
    for note in rep.notes:
        click.echo(f"note: {note}")
    if rep.problems and quarantine:
        dest = move_aside(path, rep, log=click.echo)
        left = [m for p, m in rep.problems if p is None]
        if dest:
            click.echo(f"quarantined in {dest}; rerun extract with the same manifests to re-encode what it held")
        if left:
            raise FlowclipError(f"{len(left)} problems cannot be quarantined: {left[0]}")
        return
    if rep.problems:
        raise FlowclipError(
            f"{len(rep.problems)} problems in {path}; `flowclip store verify --quarantine {path}` "
            f"moves the damaged parts aside"
        )
    click.echo(f"ok: {rep.segments} segments, {rep.images} images, {rep.captions} captions")


@store.command("sync")
@click.argument("src")
@click.argument("dst")
@click.option(
    "--manifest",
    "manifests",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Copy only the segments these manifests' images and captions are read from (repeatable; "
    "record files are copied whole).",
)
@click.option("--image-root", default=None, help="As for train-head and score: which extracted images a path names.")
def store_sync(src, dst, manifests, image_root):
    """Copy the committed segments DST lacks from SRC (each a local folder or a URL such
    as s3://bucket/path; credentials from the storage's usual environment and config
    files), each checked by its CRC-32s at DST before its commit record is written.
    Rerun to resume. URLs need `pip install 'flowclip[cloud]'`; HDF5 stores stay local."""
    from ..store.sync import sync

    sync(src, dst, log=click.echo, manifests=manifests, image_root=image_root)


@store.command("compact")
@click.argument("path", type=STORE)
@click.option(
    "--uncommitted-after",
    type=float,
    default=24.0,
    show_default=True,
    help="At a URL: remove segment uploads without a commit record (killed writers') once their newest object "
    "is this many hours old (at least 1: a live writer's upload is seconds old).",
)
def store_compact(path, uncommitted_after):
    """Remove rows whose key an earlier segment already holds (left by writers that ran
    at once); every reader keeps reading the same vectors."""
    from ..store.integrity import compact

    n = compact(path, log=click.echo, uncommitted_after_s=uncommitted_after * 3600)
    click.echo(f"{n} duplicate rows removed")


@store.command("upgrade")
@click.argument("path", type=click.Path(exists=True, file_okay=False))
def store_upgrade(path):
    """Rewrite a format-1 store as format 2 (checksums on every array and record file)."""
    from ..store.integrity import upgrade

    upgrade(path, log=click.echo)
