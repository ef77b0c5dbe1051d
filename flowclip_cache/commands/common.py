"""What the command modules share: a run's settings from its YAML and flags, the device
flag, and the patch readout names (without importing torch)."""

from __future__ import annotations

import click

from ..errors import FlowclipError

# the names of patch_readouts.READOUTS, here without importing torch (a test keeps them equal)
READOUT_NAMES = ["standard", "maskclip", "clearclip", "sclip", "naclip", "maskclip-reduced", "sclip-reduced"]


def config_and_flags(cls, config_file, flags: dict) -> tuple[dict, str]:
    """A run's settings: the YAML file's keys (checked on their own first, so an error names
    the file), then the flags given on the command line over them."""
    from ..config import load_yaml

    values = {}
    if config_file:
        values = load_yaml(config_file)
        head = {"head": flags["head"]} if flags.get("head") else {}  # the file's head_options are that head's
        (getattr(cls, "precheck", None) or cls.from_dict)({**values, **head}, config_file)  # (before torch)
    for key in ("head_options", "loss_weights"):  # --head-option / --loss-weight: over the file's, name by name
        given = flags.pop(key, None)
        if given:
            base = values.get(key) or {}
            values[key] = {**(base if isinstance(base, dict) else {}), **given}
    values.update({k: v for k, v in flags.items() if v is not None})
    return values, config_file or "flags"


def name_values(pairs, flag: str) -> dict:
    """Repeated NAME=VALUE flags as {name: number} (an int where the text is one, else a
    float); the head checks the names and values it declares (TrainConfig)."""
    out: dict = {}
    for pair in pairs or ():
        name, sep, text = pair.partition("=")
        if not sep or not name.strip():
            raise FlowclipError(f"{flag} {pair!r}: expected NAME=VALUE (e.g. {flag} rank=16)")
        try:
            value: float = int(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                raise FlowclipError(f"{flag} {pair!r}: {text!r} is not a number") from None
        if name.strip() in out:
            raise FlowclipError(f"{flag}: {name.strip()} given twice")
        out[name.strip()] = value
    return out


def device_name(name: str) -> str:
    from ..devices import resolve_device

    return resolve_device(name)


def _load_plugins(ctx, param, values):
    if values:
        from ..heads.plugins import defer_plugin

        for target in values:
            defer_plugin(target)  # imported when a head kind is first needed, after any run's sha256 check
    return values


def plugin_option(f):
    """--plugin FILE_OR_MODULE (repeatable): plug-in heads this command may load runs of;
    a run folder never imports code by itself (docs/plugins.md)."""
    import click

    f = click.option(
        "--allow-changed-plugin",
        is_flag=True,
        expose_value=False,
        callback=_allow_changed,
        help="Score a run whose plug-in head's source file changed since training (refused otherwise).",
    )(f)
    return click.option(
        "--plugin",
        "plugins",
        multiple=True,
        expose_value=False,
        callback=_load_plugins,
        help="A file (heads.py) or module whose Head classes runs may use; repeatable. "
        "Installed plug-ins (entry points flowclip.heads) are always available.",
    )(f)


def _allow_changed(ctx, param, value):
    import sys

    # (imported only when needed, so a command line with an error answers before torch loads;
    # an earlier call in this process is reset)
    if value or "flowclip_cache.heads.plugins" in sys.modules:
        from ..heads.plugins import allow_changed

        allow_changed(bool(value))
    return value


def report_to_option(f):
    """--report-to tensorboard,wandb and --wandb-project-name, as open_clip_train names them
    (training/tracking.py; docs/tracking.md)."""
    import click

    f = click.option(
        "--wandb-project-name", "wandb_project", default="flowclip", show_default=True, help="The W&B project."
    )(f)
    return click.option(
        "--report-to",
        "report_to",
        default="",
        metavar="tensorboard,wandb",
        help="Also log every step's losses and learning rate, each epoch's accuracy, the settings and the final "
        "scores to TensorBoard and/or W&B (offline unless logged in). Needs pip install 'flowclip[track]'.",
    )(f)


def tracking(report_to, project: str, group: str | None = None, log=None):
    """The command's Tracking (a no-op without --report-to)."""
    from ..training.tracking import Tracking, parse_report_to

    return Tracking(parse_report_to(report_to), project, group, log or (lambda *_: None))


class StorePlace(click.ParamType):
    """A feature store: an existing folder, or a URL (s3://, gs://, ...) passed as written
    (a store at a URL is read through FLOWCLIP_CHUNK_CACHE; docs/store-format.md)."""

    name = "folder|url"

    def __init__(self, exists: bool = True):
        self.exists = exists

    def convert(self, value, param, ctx):
        from ..store.location import is_url

        if is_url(str(value)):
            return str(value)
        return click.Path(exists=self.exists, file_okay=False).convert(value, param, ctx)


STORE = StorePlace()
