"""CC3M-100K training records with hard negatives, in NegCLIP's TSV layout (FSC-CLIP's own
release format could not be checked here)."""
from ._negclip import training_benchmark

BENCHMARK = training_benchmark("cc3m-train", "CC3M-100K (training)", "")
