"""What's Up Controlled-A: controlled_images_dataset.json, a JSON list of {image_path,
caption_options: [gold, 3 foils]}; candidate set of 4, the gold must rank first."""

from ._whatsup import controlled_benchmark

BENCHMARK = controlled_benchmark("a", "controlled_images_dataset.json")
