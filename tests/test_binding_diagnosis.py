"""The binding lab's token-role diagnosis (scoring/binding_diagnosis.py) on a hand-made record."""

import pytest
import torch
import torch.nn.functional as F

from flowclip_cache.heads import build_head, token_scores_direct
from flowclip_cache.scoring.binding_diagnosis import ROLES, cell_mask, diagnose, record_figures, role_of

GOLD = ["<start_of_text>", "a", "red", "circle", "left", "of", "a", "blue", "star", "<end_of_text>"]
FOIL = ["<start_of_text>", "a", "blue", "circle", "left", "of", "a", "red", "star", "<end_of_text>"]
OBJECTS = ["red circle small 0 1", "blue star large 2 1"]


def record(seed=0, d=16, n=64):
    g = torch.Generator().manual_seed(seed)
    unit = lambda *s: F.normalize(torch.randn(*s, generator=g), dim=-1)
    H = unit(2, len(GOLD) + 2, d)
    mask = torch.zeros(2, len(GOLD) + 2, dtype=torch.bool)
    mask[:, : len(GOLD)] = True  # two padding positions, never counted
    return {"v": unit(d), "P": unit(n, d), "t": unit(2, d), "H": H, "mask": mask, "tokens": [GOLD, FOIL],
            "objects": OBJECTS}  # fmt: skip


def trained_like(d=16, seed=1):
    g = torch.Generator().manual_seed(seed)
    head = build_head("flow", d)
    with torch.no_grad():
        head.M_tok.add_(0.3 * torch.randn(d, d, generator=g))
        head.W.copy_(0.5 * torch.randn(d, d, generator=g))
    return head


def test_roles_and_cells_by_hand():
    assert [role_of(t) for t in GOLD] == ["special", "function", "attribute", "object", "relation", "function",
                                         "function", "attribute", "object", "special"]  # fmt: skip
    # an 8 x 8 patch grid over the world's 3 x 3 cells: centres (k + 0.5) / 8 fall in cells 0, 1, 2 as k in
    # {0, 1, 2}, {3, 4}, {5, 6, 7}
    assert [int(cell_mask(64, c, c).sum()) for c in range(3)] == [9, 4, 9]
    assert int(cell_mask(64, 2, 1).sum()) == 3 * 2


def test_the_roles_parts_add_up_to_the_heads_own_difference():
    """Each role's part of s_token(gold) - s_token(foil), summed, is the head's difference
    computed by the direct formula (a foil counted with the gold's sign fails); the
    untrained head (W = 0) has none; the colour words' supports are masses on their cells."""
    rec, head = record(), trained_like()
    fig = record_figures(head, **rec)
    s = token_scores_direct(rec["P"][None], rec["H"], rec["mask"], head.M_tok.detach(), head.W.detach(), head.tau_p)[0]
    assert sum(fig["diff"].values()) == pytest.approx(float(s[0] - s[1]), abs=1e-6)
    assert abs(float(s[0] - s[1])) > 1e-4 and fig["diff"]["relation"] != 0.0
    assert len(fig["moved"]) == 2 and all(0 <= b <= 1 and 0 <= a <= 1 for b, a, _ in fig["moved"])
    untrained = record_figures(build_head("flow", 16), **rec)
    assert max(abs(x) for x in untrained["diff"].values()) < 1e-6
    assert all(b == pytest.approx(a, abs=1e-6) for b, a, _ in untrained["moved"])  # nothing moves


def test_diagnose_averages_records():
    head = trained_like()
    recs = [record(seed=s) for s in range(3)]
    d = diagnose(head, recs)
    per = [record_figures(head, **r)["diff"] for r in recs]
    assert d["records"] == 3 and sum(d["share_of_abs_difference"].values()) == pytest.approx(1.0)
    for role in ROLES:
        assert d["s_token_gold_minus_foil"][role] == pytest.approx(sum(p[role] for p in per) / 3)
    assert d["attribute_support_on_own_object"]["words"] == 6
    # chance: each colour word's own cell's share, averaged; red's cell (0, 1) and blue's (2, 1)
    # hold 3 x 2 = 6 of the 64 patches
    assert d["attribute_support_on_own_object"]["chance"] == pytest.approx(6 / 64)


def test_the_support_change_and_its_interval_by_hand():
    """diagnose keeps each record's mean after - before over its colour words; the interval
    resamples images: equal changes give a point, and its sign is the change's."""
    import numpy as np

    from flowclip_cache.scoring.binding_diagnosis import support_change

    head, recs = trained_like(), [record(seed=s) for s in range(3)]
    d = diagnose(head, recs)
    want = [np.mean([a - b for b, a, _ in record_figures(head, **r)["moved"]]) for r in recs]
    assert d["support_change_by_record"] == pytest.approx(want)
    c = support_change(np.array([0.1, 0.3, np.nan]), np.array([0, 1, 2]), draws=200)
    assert c["mean_pts"] == pytest.approx(20.0) and 10.0 - 1e-6 <= c["ci95_pts"][0] < c["ci95_pts"][1] <= 30.0 + 1e-6
    flat = support_change(np.array([-0.05, -0.05, -0.05]), np.array([0, 0, 1]), draws=50)
    assert flat["mean_pts"] == pytest.approx(-5.0) and flat["ci95_pts"] == pytest.approx([-5.0, -5.0], abs=1e-5)
    assert np.isnan(support_change(np.array([np.nan]), np.array([0]))["mean_pts"])
