"""CLIP_benchmark's own evaluation code (the `clip-benchmark` package:
clip_benchmark/metrics/zeroshot_classification.py `evaluate`, zeroshot_retrieval.py
`evaluate`) run on a model wrapper that returns flowclip's stored features for the same
images and prompts gives every figure `flowclip score` prints: top-1, top-5 and mean
per-class recall, and recall@1/5/10 both ways, on data with planted exact ties.

The features are sparse vectors of +-0.5 and +-0.25 (norm exactly 1), so every product,
mean and renormalisation is exact in float32 whatever order a GEMM sums in: the ties are
ties on both sides, and the figures must agree on how each is decided (torch.topk's order
for top-k and recall@k, the first maximum for the argmax). CLIP_benchmark is run with
amp=False (its default autocasts to half precision, which flowclip's float32 scores are not).

Mutation tried: top-1 decided by a >= rank (a tie counted wrong) instead of torch.topk's
order, the per-class recall averaged over the predicted classes instead of the true ones,
and top-5 reported as 1.0 for a set of three classes: each turns a test red."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch

import flowclip_cache as fc
from flowclip_cache.extraction.encoders import EncoderSpec, resolve
from flowclip_cache.hashing import caption_key
from flowclip_cache.manifest import write_manifest
from flowclip_cache.store import FeatureStore

zsc = pytest.importorskip("clip_benchmark.metrics.zeroshot_classification", reason="pip install clip-benchmark")
zsr = pytest.importorskip("clip_benchmark.metrics.zeroshot_retrieval", reason="pip install clip-benchmark")


def _float(x):
    """Python's float, and a one-element array's value: CLIP_benchmark 1.6.2's `accuracy`
    calls float() on a shape-(1,) array, which NumPy 2 refuses; its module is given this
    float (nothing else in its code changes)."""
    return float(x.reshape(-1)[0]) if isinstance(x, np.ndarray) else float(x)


TEMPLATES = ["a photo of a {c}.", "a {c}."]


def _sparse(rng, d: int, nonzero: int, value: float, avoid=()) -> np.ndarray:
    x = np.zeros(d, np.float32)
    where = rng.choice([i for i in range(d) if i not in set(avoid)], nonzero, replace=False)
    x[where] = value * rng.choice([-1.0, 1.0], nonzero)
    return x


def _prompt_pair(rng, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two unit prompt embeddings whose mean, renormalised, is `target` exactly: each holds
    target/2 (0.25 on its 4 places) and +-0.25 on 12 others, of opposite signs."""
    rest = _sparse(rng, len(target), 12, 0.25, avoid=np.flatnonzero(target))
    return target / 2 + rest, target / 2 - rest


class Stored(torch.nn.Module):
    """A CLIP-like model for CLIP_benchmark: encode_image and encode_text return the
    store's features of the images and texts its loader and tokenizer name by index."""

    def __init__(self, images: np.ndarray, texts: dict[str, np.ndarray]):
        super().__init__()
        self.images = torch.from_numpy(images)
        self.names = list(texts)
        self.texts = torch.from_numpy(np.stack([texts[t] for t in self.names]))

    def tokenize(self, texts: list[str]) -> torch.Tensor:
        return torch.tensor([self.names.index(t) for t in texts])

    def encode_image(self, index):
        return self.images[index]

    def encode_text(self, index):
        return self.texts[index]


def _store(tmp_path, images: dict[str, np.ndarray], texts: dict[str, np.ndarray]) -> FeatureStore:
    fs = FeatureStore.open_or_create(str(tmp_path / "store"), resolve(EncoderSpec("flowclip-tiny-clip")).config)
    fs.write_segment("img", list(images), {"global": np.stack(list(images.values())).astype(np.float16)})
    keys = [caption_key(t) for t in texts]
    fs.write_segment("cap", keys, {"global": np.stack(list(texts.values())).astype(np.float16)})
    fs.refresh()
    return fs


def _classification_world(rng, d, n_classes, n_images):
    """Class names (the first named twice when there are enough), each class's two prompts'
    embeddings (ensembling to one of a few shared vectors: classes tie), images whose
    features are those vectors (an image ties its true class with others)."""
    names = [f"thing{i}" for i in range(n_classes - 1)] + (["thing0"] if n_classes > 3 else [f"thing{n_classes - 1}"])
    pool = [_sparse(rng, d, 4, 0.5) for _ in range(max(2, n_classes // 2))]
    texts, class_vec = {}, {}
    for name in dict.fromkeys(names):
        class_vec[name] = pool[rng.integers(len(pool))]
        for t, e in zip(TEMPLATES, _prompt_pair(rng, class_vec[name])):
            texts[t.format(c=name)] = e
    labels = rng.integers(0, n_classes, n_images)
    own_or_any = [class_vec[names[lab]] if rng.random() < 0.6 else pool[rng.integers(len(pool))] for lab in labels]
    image_vec = np.stack(own_or_any)
    return names, texts, labels, image_vec


@pytest.mark.parametrize("n_classes", [11, 3])
def test_classification_figures_equal_clip_benchmarks_evaluate(tmp_path, monkeypatch, n_classes):
    rng = np.random.default_rng(n_classes)
    d = 128  # the tiny CLIP's width
    names, texts, labels, image_vec = _classification_world(rng, d, n_classes, 90)
    keys = [caption_key(f"image {i}") for i in range(len(labels))]  # (any 64 hex digits)
    fs = _store(tmp_path, dict(zip(keys, image_vec)), texts)
    prompts = [[t.format(c=c) for t in TEMPLATES] for c in names]
    meta = {"benchmark": "cifar10", "classes": names, "templates": [t.replace("{c}", "{}") for t in TEMPLATES],
            "prompts": prompts}  # fmt: skip
    rows = [{"image": k, "image_key": k, "label": int(lab)} for k, lab in zip(keys, labels)]
    write_manifest(tmp_path / "zs.parquet", pa.Table.from_pylist(rows), "classification", meta)
    ours = fc.score_manifests(fs, [str(tmp_path / "zs.parquet")], ["clip"], str(tmp_path / "out"), bootstrap=0,
                              quiet=True).result("cifar10", "clip")  # fmt: skip

    model = Stored(image_vec, texts)
    dataset = torch.utils.data.TensorDataset(torch.arange(len(labels)), torch.from_numpy(labels))
    dataset.classes = names
    loader = torch.utils.data.DataLoader(dataset, batch_size=16)
    monkeypatch.setattr(zsc, "float", _float, raising=False)
    theirs = zsc.evaluate(model, loader, model.tokenize, names, TEMPLATES, "cpu", amp=False)
    assert ours["ties"] > 5  # the planted ties are there
    assert ours["top1"] == theirs["acc1"] and ours["mean_per_class_recall"] == theirs["mean_per_class_recall"]
    if n_classes >= 5:
        assert ours["top5"] == theirs["acc5"]
    else:
        assert ours["top5"] is None and np.isnan(theirs["acc5"])  # not given below 5 classes


def test_retrieval_figures_equal_clip_benchmarks_evaluate(tmp_path):
    rng = np.random.default_rng(0)
    d = 128  # the tiny CLIP's width
    image_pool = [_sparse(rng, d, 4, 0.5) for _ in range(5)]
    text_pool = [_sparse(rng, d, 4, 0.5) for _ in range(7)]
    n = 40
    image_vec = np.stack([image_pool[rng.integers(5)] for _ in range(n)])
    captions = [[f"caption {i} {j}" for j in range(2)] for i in range(n)]
    captions[7][1] = captions[3][0]  # a caption text two records share
    texts = {t: text_pool[rng.integers(7)] for cs in captions for t in cs}
    keys = [caption_key(f"image {i}") for i in range(n)]
    keys[12], image_vec[12] = keys[5], image_vec[5]  # an image two records share
    fs = _store(tmp_path, dict(zip(keys, image_vec)), texts)
    rows = [{"image": k, "image_key": k, "captions": cs} for k, cs in zip(keys, captions)]
    meta = {"benchmark": "coco-retrieval"}
    write_manifest(tmp_path / "gallery.parquet", pa.Table.from_pylist(rows), "retrieval", meta)
    ours = fc.score_manifests(fs, [str(tmp_path / "gallery.parquet")], ["clip"], str(tmp_path / "out"), bootstrap=0,
                              quiet=True).result("coco-retrieval", "clip")  # fmt: skip

    model = Stored(image_vec, texts)

    def collate(batch):
        return torch.stack([i for i, _ in batch]), [cs for _, cs in batch]

    dataset = [(torch.tensor(i), cs) for i, cs in enumerate(captions)]
    loader = torch.utils.data.DataLoader(dataset, batch_size=16, collate_fn=collate)
    theirs = zsr.evaluate(model, loader, model.tokenize, "cpu", amp=False, recall_k_list=[1, 5, 10])
    assert ours["t2i_ties"] > 5 and ours["i2t_ties"] > 5  # the planted ties are there
    for k in (1, 5, 10):  # (its means are float32's: 0.0125 is 0.012500000186...)
        assert np.float32(ours[f"t2i_R@{k}"]) == theirs[f"image_retrieval_recall@{k}"], k
        assert np.float32(ours[f"i2t_R@{k}"]) == theirs[f"text_retrieval_recall@{k}"], k
    assert 0 < ours["t2i_R@1"] < ours["t2i_R@5"] < 1 and 0 < ours["i2t_R@1"] < 1  # figures a tie rule can move
