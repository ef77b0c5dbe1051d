"""What's Up COCO-Spatial: coco_qa_one_obj.json and coco_qa_two_obj.json, JSON lists of
[image_id, gold, foil]; images val2017/<id, 12 digits>.jpg. Official score: the
unweighted mean of the one- and two-object subset accuracies."""

from ._whatsup import spatial_benchmark

BENCHMARK = spatial_benchmark(
    "whatsup-coco-spatial",
    "What's Up COCO-Spatial",
    {"one": "coco_qa_one_obj.json", "two": "coco_qa_two_obj.json"},
    lambda i: f"val2017/{str(i).zfill(12)}.jpg",
)
