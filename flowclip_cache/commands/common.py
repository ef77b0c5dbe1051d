"""What the command modules share: a run's settings from its YAML and flags, the device
flag, and the patch readout names (without importing torch)."""

from __future__ import annotations

# the names of patch_readouts.READOUTS, here without importing torch (a test keeps them equal)
READOUT_NAMES = ["standard", "maskclip", "clearclip", "sclip", "naclip", "maskclip-reduced", "sclip-reduced"]


def config_and_flags(cls, config_file, flags: dict) -> tuple[dict, str]:
    """A run's settings: the YAML file's keys (checked on their own first, so an error names
    the file), then the flags given on the command line over them."""
    from ..config import load_yaml

    values = {}
    if config_file:
        values = load_yaml(config_file)
        cls.from_dict(values, config_file)
    values.update({k: v for k, v in flags.items() if v is not None})
    return values, config_file or "flags"


def device_name(name: str) -> str:
    from ..devices import resolve_device

    return resolve_device(name)
