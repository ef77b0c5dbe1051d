"""flowclip: a content-addressed feature cache for frozen CLIP encoders, and the
Flow-CLIP heads trained and scored from it.

The Python API (docs/python-api.md) is exported here and imported on first use, so that
`import flowclip_cache` and the command line start without torch. (Its functions are not
named like the package's modules or stage packages: importing a submodule binds its name here,
which would hide a function of that name.)"""

__version__ = "0.1.0"

__all__ = [
    "open_store",
    "read_features",
    "Features",
    "train_head",
    "TrainConfig",
    "Run",
    "load_run",
    "score_manifests",
    "read_results",
    "ScoreResults",
    "test_time_match",
    "OnlineScorer",
    "Head",
    "TokenMapHead",
    "masked_token_mean",
    "token_shares",
    "load_plugin",
    "sweep",
    "sweep_objective",
    "list_units",
    "extract_units",
    "FlowclipError",
]

_HEADS = ("Head", "TokenMapHead", "masked_token_mean", "token_shares")
_WHERE = {
    "TrainConfig": ".training.train_config",
    "FlowclipError": ".errors",
    "load_plugin": ".heads.plugins",
    "list_units": ".extraction.worker",
    "extract_units": ".extraction.worker",
}
_WHERE.update({name: ".heads" for name in _HEADS})


def __getattr__(name: str):
    if name not in __all__:
        raise AttributeError(f"module 'flowclip_cache' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_WHERE.get(name, ".api"), __name__), name)


def __dir__():
    return sorted(list(globals()) + __all__)
