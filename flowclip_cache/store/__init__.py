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
