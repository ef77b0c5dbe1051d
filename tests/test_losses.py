"""HNB and CIMR on small cases computed by hand."""

import math

import pytest
import torch

from flowclip_cache.training.losses import cimr_loss, donor_map, hnb_loss, hnb_masks


def lse(xs):
    return math.log(sum(math.exp(x) for x in xs))


def test_hnb_two_records_by_hand():
    # image i x candidates [T1+, T2+, T1-, T2-]
    S = torch.tensor([[0.30, 0.10, 0.25, 0.00], [0.05, 0.40, 0.10, 0.35]])
    tau = 0.1
    u = (S / tau).tolist()
    i2t = [-(u[0][0] - lse(u[0])), -(u[1][1] - lse(u[1]))]
    t2i = [-(u[0][0] - lse([u[0][0], u[1][0]])), -(u[1][1] - lse([u[0][1], u[1][1]]))]
    want = 0.5 * (sum(i2t) / 2 + sum(t2i) / 2)
    got = hnb_loss(S, tau, torch.tensor([0, 1]), torch.tensor([0, 1]), torch.tensor([2, 3]))
    assert got.item() == pytest.approx(want, rel=1e-6)


def test_hnb_masks_other_positives_of_the_same_image_and_same_text():
    # records 0 and 1 show the same image; record 2's positive is the same text as record 0's
    img, pos, neg = torch.tensor([7, 7, 8]), torch.tensor([0, 1, 0]), torch.tensor([3, 4, 5])
    i2t, t2i = hnb_masks(img, pos, neg)
    assert i2t.tolist() == [
        [False, True, True, False, False, False],
        [True, False, False, False, False, False],
        [True, False, False, False, False, False],
    ]
    # t2i[i, j]: image i is not a negative for T_j+
    assert t2i.tolist() == [[False, True, True], [True, False, False], [True, False, False]]
    S = torch.randn(3, 6)
    tau = 0.5
    u = (S / tau).tolist()
    i2t_want = [
        -(u[0][0] - lse([u[0][0], u[0][3], u[0][4], u[0][5]])),
        -(u[1][1] - lse([u[1][1], u[1][2], u[1][3], u[1][4], u[1][5]])),
        -(u[2][2] - lse([u[2][1], u[2][2], u[2][3], u[2][4], u[2][5]])),
    ]
    t2i_want = [-(u[0][0] - lse([u[0][0]])), -(u[1][1] - lse([u[1][1], u[2][1]])), -(u[2][2] - lse([u[1][2], u[2][2]]))]
    want = 0.5 * (sum(i2t_want) / 3 + sum(t2i_want) / 3)
    assert hnb_loss(S, tau, img, pos, neg).item() == pytest.approx(want, rel=1e-5)


def test_cimr_by_hand():
    S = torch.tensor([[0.5, 0.2, 0.1, 0.3], [0.4, 0.6, 0.35, 0.1]])
    tau = 0.1
    donors = donor_map(torch.tensor([10, 11]))
    assert donors.tolist() == [1, 0]
    m = lambda img, i: S[img, i].item() - S[img, 2 + i].item()
    sp = lambda x: math.log1p(math.exp(x))
    want = (sp(-(m(0, 0) - m(1, 0)) / tau) + sp(-(m(1, 1) - m(0, 1)) / tau)) / 2
    assert cimr_loss(S, tau, donors).item() == pytest.approx(want, rel=1e-6)


def test_donor_never_shares_the_image():
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        img = torch.randint(0, 4, (8,), generator=g)
        d = donor_map(img)
        for i, j in enumerate(d.tolist()):
            if j >= 0:
                assert img[j] != img[i]
            else:
                assert (img == img[i]).all()
    assert donor_map(torch.tensor([3, 3])).tolist() == [-1, -1]
    assert cimr_loss(torch.zeros(2, 4), 0.1, torch.tensor([-1, -1])).item() == 0
