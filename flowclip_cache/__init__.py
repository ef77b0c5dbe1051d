"""flowclip: a content-addressed feature cache for frozen CLIP encoders, and the
Flow-CLIP heads trained and scored from it."""

__version__ = "0.1.0"
