"""What's Up GQA-Spatial: vg_qa_one_obj.json and vg_qa_two_obj.json ([image_id, gold,
foil]); images vg_images/<id>.jpg. Score: unweighted mean of the two subsets."""

from ._whatsup import spatial_benchmark

BENCHMARK = spatial_benchmark(
    "whatsup-gqa-spatial",
    "What's Up GQA-Spatial",
    {"one": "vg_qa_one_obj.json", "two": "vg_qa_two_obj.json"},
    lambda i: f"vg_images/{i}.jpg",
)
