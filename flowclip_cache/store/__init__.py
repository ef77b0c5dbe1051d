"""The store: content-addressed features on disk (Zarr v3 or HDF5), and the rows out of it.

Reads nothing from the stages above; written by extraction (`core.FeatureStore`, committed
segments), read by training and scoring: `manifest_keys.py` maps a manifest's rows to store
keys (and says which features are missing, with the command to run), `banks.py` gathers
them into a bank on the device, in host memory, or read batch by batch. Entry point:
`core.py` (`FeatureStore`); `integrity.py` is `store verify/compact/upgrade`."""

from .core import CAPTION, FORMAT_VERSION, IMAGE, CaptionFeatures, FeatureStore, ImageFeatures, MissingFeatures, Segment

__all__ = [
    "FeatureStore",
    "ImageFeatures",
    "CaptionFeatures",
    "MissingFeatures",
    "Segment",
    "IMAGE",
    "CAPTION",
    "FORMAT_VERSION",
]
