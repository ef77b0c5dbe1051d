"""The flowclip command line (a click group; one sub-command per stage)."""

from __future__ import annotations

import errno
import sys

import click

from .commands import adapt as adapt_commands
from .commands import checkpoint as checkpoint_commands
from .commands import data as data_commands
from .commands import extract as extract_commands
from .commands import heads as head_commands
from .commands import results as results_commands
from .commands import sharing as sharing_commands
from .commands import store as store_commands
from .commands import studies as study_commands
from .commands import test_time as test_time_commands
from .commands.common import READOUT_NAMES
from .errors import FlowclipError

_OS_HINTS = {
    errno.ENOSPC: "the disk is full: free space (or choose another folder) and rerun; nothing half-written was kept",
    errno.EDQUOT: "the disk quota is exhausted: free space and rerun",
    errno.EROFS: "the file system is read-only: choose a writable folder",
    errno.EACCES: "permission denied: choose a folder you may write to",
    errno.EPERM: "operation not permitted: choose a folder you may write to",
}


class _Group(click.Group):
    """Prints FlowclipError messages, a command line's usage errors, and the OS errors a
    user can fix (full disk, read-only or forbidden folder), in one line without a
    traceback; exit code 2."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.UsageError as e:
            where = e.ctx.command_path if e.ctx is not None else ctx.command_path
            message = " ".join(e.format_message().split())  # (click lays a choice list out on several lines)
            click.secho(f"error: {message} (see {where} --help)", fg="red", err=True)
            sys.exit(2)
        except FlowclipError as e:
            click.secho(f"error: {e}", fg="red", err=True)
            sys.exit(2)
        except RecursionError:  # a JSON or YAML file nested deeper than the reader's stack: never a traceback
            click.secho(
                "error: an input file is nested too deeply to read (JSON or YAML deeper than Python's recursion "
                "limit); check the files and folders this command was given",
                fg="red",
                err=True,
            )
            sys.exit(2)
        except KeyboardInterrupt:
            click.secho(
                "interrupted. Rerun the same command to go on: extract skips what is stored, "
                "train-head continues with --resume, run resumes unfinished runs.",
                fg="yellow",
                err=True,
            )
            sys.exit(130)
        except OSError as e:
            if e.errno in _OS_HINTS:
                where = f"{e.filename}: " if e.filename else ""
                click.secho(f"error: {where}{_OS_HINTS[e.errno]} ({e.strerror})", fg="red", err=True)
                sys.exit(2)
            _storage_failure(e)
            raise
        except Exception as e:
            _storage_failure(e)
            raise


# (google's storage libraries by name: google.protobuf, under tensorboard, is not one)
_STORAGE_LIBRARIES = (
    "s3fs",
    "gcsfs",
    "adlfs",
    "botocore",
    "aiobotocore",
    "google.auth",
    "google.cloud",
    "google.api_core",
)


def _storage_failure(e: BaseException) -> None:
    """An error raised in an object storage library (a missing bucket, refused
    credentials, an unreachable endpoint, for a store at a URL): one line, exit 2."""
    names = [type(e).__module__]
    tb = e.__traceback__
    while tb is not None:
        names.append(str(tb.tb_frame.f_globals.get("__name__", "")))
        tb = tb.tb_next
    if any(n == lib or n.startswith(lib + ".") for n in names for lib in _STORAGE_LIBRARIES):
        click.secho(
            f"error: object storage: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''} (check the URL, "
            "that the bucket exists, and the storage's credentials and endpoint in its usual environment)",
            fg="red",
            err=True,
        )
        sys.exit(2)


@click.group(cls=_Group)
@click.version_option(package_name="flowclip")
def main():
    """flowclip: cached CLIP features, Flow-CLIP heads, compositional benchmarks."""


@main.command()
@click.argument("folder", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--kind",
    required=True,
    type=click.Choice(["score-results", "head-run", "study", "pretrain-run", "explain", "adapt-run"]),
    help="What the folder is.",
)
def adopt(folder, kind):
    """Mark FOLDER, an output of a flowclip older than output markers, as KIND: everything
    in it now becomes the command's own, so --overwrite may replace it. Only the marker
    proves ownership; flowclip never takes a folder for its own by what it contains."""
    from .outputs import adopt as adopt_folder

    entries = adopt_folder(folder, kind)
    click.echo(
        f"{folder}: marked as {kind}; --overwrite may now replace these {len(entries)} entries: " + ", ".join(entries)
    )


# every command lives in a module of commands/ (which imports nothing from this one)
for _command in (
    extract_commands.extract,
    extract_commands.models,
    store_commands.store,
    checkpoint_commands.checkpoint,
    head_commands.train_head_cmd,
    head_commands.score,
    head_commands.explain,
    study_commands.run_pipeline,
    study_commands.profile,
    study_commands.pretrain_tiny_clip,
    study_commands.demo,
    data_commands.manifest,
    data_commands.negatives,
    adapt_commands.adapt,
    sharing_commands.publish,
    sharing_commands.sweep,
    results_commands.results,
    results_commands.export,
    test_time_commands.test_time_match,
):
    main.add_command(_command)

__all__ = ["main", "READOUT_NAMES"]

if __name__ == "__main__":
    main()
