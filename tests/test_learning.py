"""Tests that fail when learning is wrong: a planted world where only
the token term can tell gold from foil, and golden values of a seeded run on it.

The planted store is written directly (seeded numpy, no encoder), so these numbers
depend on the training arithmetic alone. Mutations each test was checked against
(docs/architecture.md lists them): the sign of s_token in the training step, the sign
of the CIMR term, the seed of the data order."""

import numpy as np
import pyarrow as pa
import pytest

from flowclip_cache.hashing import caption_key
from flowclip_cache.manifest import write_manifest
from flowclip_cache.store import CAPTION, IMAGE, FeatureStore
from flowclip_cache.training.loop import TrainConfig, train_head

D, P, L = 16, 6, 3


def unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """n images of P random patches. The gold caption's tokens lie near patches of its
    own image; the foil's tokens near patches of no image. Gold and foil share one
    sentence vector, so the global term ties them and only the tokens can decide."""
    root = tmp_path_factory.mktemp("planted")
    rng = np.random.default_rng(0)
    n = 400
    patches = unit(rng.standard_normal((n, P, D)))
    glob = unit(patches.mean(1) + 0.1 * rng.standard_normal((n, D)))
    cfg = {
        "model": "planted",
        "model_cfg": {"embed_dim": D},
        "num_patches": P,
        "token_mask": "nonpad",
        "weights": {"source": "random-init", "init_seed": 0},
    }
    fs = FeatureStore.open_or_create(str(root / "store"), cfg)
    ikeys = [caption_key(f"img{i}") for i in range(n)]
    fs.write_segment(IMAGE, ikeys, {"global": glob.astype(np.float16), "patches": patches.astype(np.float16)})
    texts, sent, toks = [], [], []
    for i in range(n):
        shared = unit(glob[i] + 0.3 * rng.standard_normal(D))
        gold = unit(patches[i, rng.choice(P, L, replace=False)] + 0.2 * rng.standard_normal((L, D)))
        foil = unit(rng.standard_normal((L, D)))
        for kind, t in (("gold", gold), ("foil", foil)):
            texts.append(f"{kind} {i}")
            sent.append(shared)
            toks.append(t)
    fs.write_segment(
        CAPTION,
        [caption_key(t) for t in texts],
        {
            "global": np.stack(sent).astype(np.float16),
            "tokens": np.concatenate(toks).astype(np.float16),
            "offsets": np.arange(0, L * len(texts) + 1, L, dtype=np.int64),
            "truncated": np.zeros(len(texts), np.uint8),
        },
    )
    fs.release_writer()
    fs.refresh()
    man = str(root / "train.parquet")
    write_manifest(
        man,
        pa.Table.from_pylist(
            [
                {
                    "record_id": f"r{i}",
                    "image": f"img{i}",
                    "image_key": ikeys[i],
                    "positive": f"gold {i}",
                    "negatives": [f"foil {i}"],
                    "negative_kinds": ["planted"],
                    "split": "train" if i < 320 else "val",
                }
                for i in range(n)
            ]
        ),
        "training",
    )
    return fs, man


def cfg(**kw):
    base = dict(epochs=3, batch_size=32, lr=1e-3, tau_c=0.05, train_eval_records=320, checkpoint_every=1000)
    base.update(kw)
    return TrainConfig(**base)


def final_accuracy(out):
    import json

    return json.load(open(f"{out}/DONE"))


def test_only_the_token_term_can_learn_the_planted_binding(planted, tmp_path):
    fs, man = planted
    q = dict(progress=False, log=lambda *_: None)
    flow = train_head(fs, man, str(tmp_path / "flow"), cfg(head="flow", cimr=0.0), **q)["metrics"]
    glob = train_head(fs, man, str(tmp_path / "glob"), cfg(head="global", cimr=0.0), **q)["metrics"]
    assert (
        glob[0]["train_sample"]["all"] == 0.0 and flow[0]["train_sample"]["all"] <= 0.5
    )  # untrained: ties (flow: round-off)
    # measured: flow 0.90 train / 0.85 held-out; Global-M 0 (every pair a tie, counted wrong)
    assert flow[-1]["train_sample"]["all"] >= 0.85 and flow[-1]["val"]["all"] >= 0.75, flow[-1]
    assert glob[-1]["train_sample"]["all"] == 0.0 and glob[-1]["val"]["all"] == 0.0, glob[-1]


def test_golden_values_of_a_seeded_run(planted, tmp_path):
    """First losses and the final weights of a fixed small run (tolerance 1e-5 relative:
    FP32 on one CPU is deterministic here; other BLAS builds may differ in the last bits)."""
    import json

    fs, man = planted
    out = str(tmp_path / "g")
    train_head(fs, man, out, cfg(head="flow", cimr=0.1, epochs=2), progress=False, log=lambda *_: None)
    steps = [json.loads(x) for x in open(f"{out}/log.jsonl") if '"step"' in x]
    got = {"loss": [s["loss"] for s in steps[:4]], "cimr": [s["cimr"] for s in steps[:2]]}
    from safetensors.torch import load_file

    w = load_file(f"{out}/head.safetensors")
    got["weights"] = {k: float(v.double().sum()) for k, v in sorted(w.items())}
    got["W_abs"] = float(w["W"].double().abs().sum())
    close = lambda v: pytest.approx(v, rel=1e-5, abs=1e-6)
    assert got["loss"] == close(GOLDEN["loss"]) and got["cimr"] == close(GOLDEN["cimr"])
    # the final weights after 2 epochs carry the CPU's rounding further: two machines of this
    # workplace, same code, differ by 2.5e-5 relative in sum(M_tok) and 1e-5 in sum(W); a flipped sign or a
    # dropped term moves these sums by far more than 1e-4
    near = lambda v: pytest.approx(v, rel=1e-4, abs=5e-5)
    for k, v in GOLDEN["weights"].items():
        assert got["weights"][k] == near(v), k
    assert got["W_abs"] == near(GOLDEN["W_abs"])


# printed by this test on the project's machine (python -m pytest tests/test_learning.py -k golden -s)
GOLDEN = {
    "loss": [1.4542906284332275, 1.3142169713974, 0.9550623893737793, 0.8083287477493286],
    "cimr": [0.6931471824645996, 0.6928003430366516],
    "weights": {"M": 15.920483794267057, "M_tok": 16.156954100573785, "W": -0.0912917196219496},
    "W_abs": 1.4248314751130238,
}
