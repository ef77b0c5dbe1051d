"""COCO Karpathy train+restval training records with full-caption hard negatives, from
NegCLIP's TSVs (train_neg_clip.tsv, valid_neg_clip.tsv). For your own captions, make
such records with `flowclip negatives`."""
from ._negclip import training_benchmark

BENCHMARK = training_benchmark("coco-train", "COCO Karpathy train+restval (training)", "coco/")
