"""What's Up Controlled-B: controlled_clevr_dataset.json (CLEVR renders), same format as A."""

from ._whatsup import controlled_benchmark

BENCHMARK = controlled_benchmark("b", "controlled_clevr_dataset.json")
