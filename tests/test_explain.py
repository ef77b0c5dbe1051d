"""flowclip explain: its numbers are score's (records.parquet), its maps are distributions,
its sensitivity is a derivative (finite differences), its PNGs print the same numbers, and
its page works in a real browser (headless Chromium)."""

import json
import math
import os
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner
from conftest import ROOT

from flowclip_cache.cli import main


@pytest.fixture(scope="module")
def explained(tmp_path_factory):
    """A small store, Global-M and Flow-CLIP heads, their score, and explain of every record."""
    from flowclip_cache.synthetic.sample import make_sample

    root = tmp_path_factory.mktemp("explain")
    s = make_sample(str(root / "sample"), n_images=30)
    st, g, f, res, ex = (str(root / n) for n in ("store", "global", "flow", "res", "ex"))
    run = lambda args: CliRunner().invoke(main, args)
    r = run(
        [
            "extract",
            "--store",
            st,
            "--model",
            "flowclip-tiny-vit",
            "--pretrained",
            "none",
            "--manifest",
            s["candidates"],
            "--manifest",
            s["training"],
            "--image-root",
            s["image_root"],
            "--workers",
            "0",
            "--quiet",
        ]
    )
    assert r.exit_code == 0, r.output
    for out, head, extra in ((g, "global", []), (f, "flow", ["--lr", "1e-2", "--epochs", "2"])):
        r = run(
            [
                "train-head",
                "--store",
                st,
                "--train",
                s["training"],
                "--out",
                out,
                "--head",
                head,
                "--epochs",
                "1",
                *extra,
                "--quiet",
            ]
        )
        assert r.exit_code == 0, r.output
    r = run(
        [
            "score",
            "--store",
            st,
            "--manifests",
            s["candidates"],
            "--scorer",
            "clip",
            "--scorer",
            f"global={g}",
            "--scorer",
            f"flow={f}",
            "--out",
            res,
            "--bootstrap",
            "0",
            "--quiet",
        ]
    )
    assert r.exit_code == 0, r.output
    r = run(
        [
            "explain",
            "--store",
            st,
            "--manifest",
            s["candidates"],
            "--scorer",
            "clip",
            "--scorer",
            f"global={g}",
            "--scorer",
            f"flow={f}",
            "--records",
            "all",
            "--max",
            "0",
            "--image-root",
            s["image_root"],
            "--out",
            ex,
        ]
    )
    assert r.exit_code == 0, r.output
    return {
        "root": root,
        "sample": s,
        "store": st,
        "global": g,
        "flow": f,
        "res": res,
        "ex": ex,
        "data": json.load(open(os.path.join(ex, "explain.json"))),
    }


def test_numbers_equal_the_score_records(explained):
    rows = pq.read_table(os.path.join(explained["res"], "records.parquet")).to_pylist()
    real = {(r["record_id"], r["scorer"]): r for r in rows if r["control"] == "real"}
    data = explained["data"]
    assert len(data["records"]) == 30 and data["scorers"] == ["clip", "global", "flow"]
    for rec in data["records"]:
        for run, scores in rec["scores"].items():
            want = real[(rec["record_id"], run)]
            np.testing.assert_allclose(scores, want["scores"], rtol=0, atol=1e-6)
            assert rec["correct"][run] == want["correct"] and rec["gold"] == want["gold"]
        a, b = rec["correct"]["clip"], rec["correct"]["flow"]
        assert rec["status"] == ("repair" if b and not a else "regression" if a and not b else "unchanged")
        flow = rec["maps"]["flow"]
        assert set(rec["maps"]) == {"flow"}  # clip and Global-M have no token evidence
        for cap in flow["captions"]:
            # the maps' own numbers add up to the scorer's score of that caption
            assert math.isclose(cap["s"], rec["scores"]["flow"][cap["index"]], abs_tol=1e-5)
            assert math.isclose(sum(cap["contrib"]), cap["s_token"], abs_tol=1e-6)
            maps = cap["maps"]
            assert list(maps) == ["before", "after", "moved"]
            for before, after, moved in zip(maps["before"], maps["after"], maps["moved"]):
                assert math.isclose(sum(before), 1, abs_tol=1e-5) and math.isclose(sum(after), 1, abs_tol=1e-5)
                np.testing.assert_allclose(moved, np.subtract(after, before), atol=2e-6)
            assert len(cap["tokens"]) == len(cap["contrib"]) and all(isinstance(t, str) for t in cap["tokens"])
        assert len(flow["sensitivity"]) == 16 and len(flow["top_patches"]) == 3


def test_pngs_print_the_same_margins(explained, monkeypatch, tmp_path):
    """Every text the figures draw, captured at savefig: each record figure's title carries
    every scorer's margin as the records give them."""
    import matplotlib.figure

    drawn = []
    real_save = matplotlib.figure.Figure.savefig

    def capture(fig, path, *a, **k):
        drawn.append((str(path), [t.get_text() for t in fig.texts] + [ax.get_title() for ax in fig.axes]))
        return real_save(fig, path, *a, **k)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", capture)
    e = explained
    r = CliRunner().invoke(
        main,
        [
            "explain",
            "--store",
            e["store"],
            "--manifest",
            e["sample"]["candidates"],
            "--scorer",
            "clip",
            "--scorer",
            f"flow={e['flow']}",
            "--records",
            "changed",
            "--image-root",
            e["sample"]["image_root"],
            "--out",
            str(tmp_path / "ex"),
        ],
    )
    assert r.exit_code == 0, r.output
    data = json.load(open(tmp_path / "ex" / "explain.json"))
    rows = pq.read_table(os.path.join(e["res"], "records.parquet")).to_pylist()
    real = {(x["record_id"], x["scorer"]): x for x in rows if x["control"] == "real"}
    figs = {os.path.basename(p): texts for p, texts in drawn}
    assert data["records"] and all(rec["status"] != "unchanged" for rec in data["records"])
    for rec in data["records"]:
        texts = " ".join(figs[os.path.basename(rec["png"])])
        for run in ("clip", "flow"):
            sc, gold = real[(rec["record_id"], run)]["scores"], rec["gold"]
            m = sc[gold] - max(x for j, x in enumerate(sc) if j != gold)
            assert f"{run} {m:+.4f}" in texts
    assert "grid.png" in figs


def test_displayed_image_is_what_the_encoder_saw(explained):
    """The picture under the maps is the store's preprocessing before ToTensor/Normalize:
    normalised, it equals the encoder's own input for the record's image."""
    from torchvision.transforms.functional import normalize, to_tensor

    from flowclip_cache.extraction.encoders import EncoderSpec, load_model, resolve
    from flowclip_cache.extraction.images import load_image, resolve_image_path
    from flowclip_cache.scoring.explain import display_image
    from flowclip_cache.store import FeatureStore

    store = FeatureStore(explained["store"])
    rec = explained["data"]["records"][0]
    pre = store.encoder_config["preprocess"]
    shown = normalize(to_tensor(display_image(store, rec, explained["sample"]["image_root"])), pre["mean"], pre["std"])
    enc = load_model(resolve(EncoderSpec("flowclip-tiny-vit")))
    seen = enc.preprocess(load_image(resolve_image_path(explained["sample"]["image_root"], rec["image"]), None))
    assert torch.equal(shown, seen)
    assert display_image(store, {**rec, "image": "missing.png"}, explained["sample"]["image_root"]) is None


def test_sensitivity_is_the_directional_derivative():
    from flowclip_cache.heads.flow import FlowHead
    from flowclip_cache.scoring.explain import sensitivity

    torch.manual_seed(0)
    head = FlowHead(12, tau_p=0.1).double()
    with torch.no_grad():
        head.W.normal_(0, 0.4)
        head.M_tok.add_(0.2 * torch.randn(12, 12, dtype=torch.float64))
    P = F.normalize(torch.randn(9, 12, dtype=torch.float64), dim=-1)
    H = F.normalize(torch.randn(3, 4, 12, dtype=torch.float64), dim=-1)
    mask = torch.ones(3, 4, dtype=torch.bool)
    mask[2, 3] = False
    sens = sensitivity(head, P, H, mask, 0, 2)
    eps = 1e-6
    for j in range(9):
        d = torch.zeros_like(P)
        d[j] = P[j] - P.mean(0)
        with torch.no_grad():
            fd = (head.token_margin(P + eps * d, H, mask, 0, 2) - head.token_margin(P - eps * d, H, mask, 0, 2)) / (
                2 * eps
            )
        assert math.isclose(float(sens[j]), float(fd), rel_tol=1e-5, abs_tol=1e-9)


def test_selections_and_refusals(explained, tmp_path):
    e = explained
    base = [
        "explain",
        "--store",
        e["store"],
        "--manifest",
        e["sample"]["candidates"],
        "--scorer",
        "clip",
        "--scorer",
        f"flow={e['flow']}",
        "--image-root",
        e["sample"]["image_root"],
    ]
    data = e["data"]["records"]
    repairs = sorted(r["record_id"] for r in data if r["status"] == "repair")
    r = CliRunner().invoke(main, [*base, "--records", "repairs", "--out", str(tmp_path / "a")])
    assert r.exit_code == 0, r.output
    got = json.load(open(tmp_path / "a" / "explain.json"))["records"]
    assert sorted(x["record_id"] for x in got) == repairs
    changes = [x["margin_change"] for x in got]
    assert [abs(c) for c in changes] == sorted((abs(c) for c in changes), reverse=True)
    one = data[0]["record_id"]
    r = CliRunner().invoke(main, [*base, "--records", f"{one},nope", "--out", str(tmp_path / "b")])
    assert r.exit_code != 0 and "no candidate record with id nope" in r.output
    r = CliRunner().invoke(main, [*base, "--records", one, "--out", e["res"], "--overwrite"])
    assert r.exit_code != 0 and "is a score results folder, not an explain folder" in r.output


def _chromium():
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("the browser test needs playwright (pip install -e '.[test]')")
    for path in ("/usr/bin/chromium", "/usr/bin/chromium-browser", shutil.which("chromium") or ""):
        if path and os.path.exists(path):
            return path
    pytest.skip("no Chromium on this machine (Debian: apt-get install chromium; .ci/run installs it)")


def test_the_page_in_a_real_browser(explained):
    from playwright.sync_api import sync_playwright

    exe = _chromium()
    page_path = os.path.join(explained["ex"], "explorer.html")
    records = explained["data"]["records"]
    art = os.environ.get("FLOWCLIP_TEST_ARTIFACTS", os.path.join(ROOT, "test-artifacts"))
    os.makedirs(art, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        errors = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on(
            "request",
            lambda r: errors.append(f"network request {r.url}") if not r.url.startswith(("file:", "data:")) else None,
        )
        page.goto("file://" + page_path)
        assert page.locator("tr.rec").count() == len(records) == int(page.inner_text("#count"))
        page.select_option("#f-status", "regression")
        regressions = [r for r in records if r["status"] == "regression"]
        assert page.locator("tr.rec").count() == len(regressions)
        page.select_option("#f-status", "")
        page.fill("#f-min", "0")
        assert page.locator("tr.rec").count() == sum(r["margin_change"] >= 0 for r in records)
        page.fill("#f-min", "")
        first = page.locator("tr.rec").first
        rid = int(first.get_attribute("data-id"))
        first.click()
        rec = next(r for r in records if r["id"] == rid)
        assert rec["record_id"] in page.inner_text("#rec-title")
        shown = [float(x) for x in page.locator("td.score").all_inner_texts()]
        want = [x for run in explained["data"]["scorers"] for x in rec["scores"][run]]
        np.testing.assert_allclose(shown, want, rtol=0, atol=1e-6)
        n_tokens = sum(
            len(c["contrib"])
            for c in rec["maps"]["flow"]["captions"]
            if c["index"] in (rec["gold"], rec["maps"]["flow"]["foil"])
        )
        assert page.locator(".scorer-maps canvas").count() == 1 + 3 * n_tokens  # before, after, moved
        page.wait_for_timeout(300)
        page.screenshot(path=os.path.join(art, "explain-explorer.png"), full_page=True)
        browser.close()
    assert errors == []


def test_score_explain_n(explained, tmp_path):
    e = explained
    out = str(tmp_path / "res")
    r = CliRunner().invoke(
        main,
        [
            "score",
            "--store",
            e["store"],
            "--manifests",
            e["sample"]["candidates"],
            "--scorer",
            "clip",
            "--scorer",
            f"flow={e['flow']}",
            "--out",
            out,
            "--bootstrap",
            "0",
            "--quiet",
            "--explain",
            "2",
            "--image-root",
            e["sample"]["image_root"],
        ],
    )
    assert r.exit_code == 0, r.output
    got = json.load(open(os.path.join(out, "explain", "explain.json")))["records"]
    every = e["data"]["records"]
    for status in ("repair", "regression"):
        want = sorted((x for x in every if x["status"] == status), key=lambda x: -abs(x["margin_change"]))[:2]
        assert sorted(x["record_id"] for x in got if x["status"] == status) == sorted(x["record_id"] for x in want)
    assert not any(x["status"] == "unchanged" for x in got)


@pytest.mark.parametrize("kind", ["filip", "fsc-local", "dcsm"])
def test_token_map_heads_explain_their_own_maps(kind):
    """FILIP-style, FSC-CLIP local and DCSM-style heads: their token shares add up to
    their score (FILIP: its token-to-image half), FSC's alignment weights sum to one, and
    the sensitivity of their margin is its directional derivative."""
    from flowclip_cache.heads import build_head
    from flowclip_cache.scoring.explain import sensitivity

    torch.manual_seed(1)
    head = build_head(kind, 12).double().eval()  # as load_head returns it
    with torch.no_grad():
        for p in head.parameters():
            p.add_(0.05 * torch.randn_like(p))
    P = F.normalize(torch.randn(16, 12, dtype=torch.float64), dim=-1)
    H = F.normalize(torch.randn(2, 5, 12, dtype=torch.float64), dim=-1)
    mask = torch.ones(2, 5, dtype=torch.bool)
    mask[1, 4] = False
    ev = head.token_evidence(None, P, None, H, mask)
    score = head.pair_scores(P[None], H, mask)[0]
    torch.testing.assert_close(ev["s"], score)
    shares = ev["contrib"].sum(-1)
    if kind == "filip":  # the token-to-image half of FILIP's score
        q, p = F.normalize(H @ head.A.T, dim=-1), F.normalize(P @ head.B.T, dim=-1)
        sim = torch.einsum("tld,nd->tln", q, p).masked_fill(~mask[:, :, None], -1e4)
        torch.testing.assert_close(shares, score - 0.5 * sim.max(1).values.mean(-1))
    else:
        torch.testing.assert_close(shares, score)
    if kind == "fsc-local":
        torch.testing.assert_close(ev["maps"]["alignment"].sum(-1), torch.ones(2, 5, dtype=torch.float64))
    sens = sensitivity(head, P, H, mask, 0, 1)
    eps = 1e-6
    for j in (0, 7):
        d = torch.zeros_like(P)
        d[j] = P[j] - P.mean(0)
        fd = (head.token_margin(P + eps * d, H, mask, 0, 1) - head.token_margin(P - eps * d, H, mask, 0, 1)) / (2 * eps)
        assert math.isclose(float(sens[j]), float(fd.detach()), rel_tol=1e-4, abs_tol=1e-8)


def test_scorers_are_labelled_by_the_name_they_were_given(explained, tmp_path):
    """explain.json, the page and the figures name a scorer by its NAME=, not its folder's
    name; the margins figure of a score says both when they differ."""
    s, ex = explained["sample"], str(tmp_path / "ex")
    args = ["explain", "--store", explained["store"], "--manifest", s["candidates"], "--scorer",
            f"calibrated={explained['global']}", "--scorer", f"local={explained['flow']}", "--records", "all",
            "--max", "2", "--image-root", s["image_root"], "--out", ex]  # fmt: skip
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert json.load(open(os.path.join(ex, "explain.json")))["scorers"] == ["calibrated", "local"]
    assert "calibrated -> local" in r.output


def test_tokens_are_shown_by_role_content_words_first(explained):
    """The explorer and the record figures list a caption's tokens content words first, then
    function words, then special tokens, each by |share of s_token| (by share alone the list
    was led by <start_of_text> and 'a')."""
    from flowclip_cache.scoring.explain_figures import token_role, tokens_by_role

    tokens = ["<start_of_text>", "a", "red</w>", "cube", "left", "of", "the", "sphere", "<end_of_text>"]
    share = [0.9, 0.8, 0.1, -0.3, 0.05, 0.7, 0.01, 0.2, -0.95]
    assert [token_role(t) for t in tokens] == ["special", "function", "content", "content", "content", "function",
                                                "function", "content", "special"]  # fmt: skip
    assert tokens_by_role(tokens, share) == [3, 7, 2, 4, 1, 5, 6, 8, 0]
    caps = [c for r in explained["data"]["records"] for m in r["maps"].values() for c in m["captions"]]
    assert caps
    for c in caps:
        assert sorted(c["order"]) == list(range(len(c["contrib"]))) and len(c["roles"]) == len(c["tokens"])
        ranks = [("content", "function", "special").index(c["roles"][i]) for i in c["order"]]
        assert ranks == sorted(ranks)
    assert any(c["roles"][c["order"][0]] == "content" and "special" in c["roles"] for c in caps)


def test_the_figures_read_alone(explained):
    """grid.png names its margin axis, says in a legend which colour is a right and
    which a wrong decision, and gives each sensitivity map a colour bar; a record's figure
    has a colour bar too, the note on how maps read, and as many map columns per token as
    the head has maps (a one-map head's figure was laid out for three)."""
    from flowclip_cache.scoring.explain_figures import MAP_NOTE, TOKENS_SHOWN, grid_plot, record_plot

    recs = explained["data"]["records"]
    grid = explained["data"]["grid"][0]
    fig = grid_plot(recs, grid, most=2)
    bars = [ax for ax in fig.axes if ax.get_xlabel().startswith("margin: gold score - best foil")]
    assert len(bars) == min(2, len(recs))
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "decided right (margin > 0)", "decided wrong (margin <= 0)"
    ]  # fmt: skip
    assert sum(ax.get_ylabel() == "sensitivity, relative" for ax in fig.axes) == len(bars)  # one colour bar each
    assert any(t.get_text() == MAP_NOTE for t in fig.texts)
    rec = next(r for r in recs if r["maps"])
    n_maps = len(rec["maps"][list(rec["maps"])[-1]]["captions"][rec["gold"]]["maps"])
    fig = record_plot(rec, None, grid)
    assert sum(ax.get_ylabel() == "relative" for ax in fig.axes) == 2  # gold's and foil's sensitivity
    assert len(fig.axes) == 2 * (1 + n_maps * TOKENS_SHOWN) + 2
    one = json.loads(json.dumps(rec))  # a one-map head: keep its first map only
    for cap in one["maps"][list(one["maps"])[-1]]["captions"]:
        cap["maps"] = dict(list(cap["maps"].items())[:1])
    assert len(record_plot(one, None, grid).axes) == 2 * (1 + TOKENS_SHOWN) + 2


def test_the_grid_shows_repairs_and_regressions_by_its_stated_rule():
    """15 repairs and 8 regressions sorted by change: the grid takes 4 of each, the largest
    |change of margin| first, and says so in its title (before: the first 8 repairs and no
    regression). One side short: the other fills the rows. The maps draw the image in colour."""
    from flowclip_cache.scoring.explain_figures import draw_map, grid_selection

    def rec(i, status, change):
        return {"record_id": str(i), "status": status, "margins": {"a": 0.0, "b": change}}

    recs = [rec(i, "repair", 0.01 * (i + 1)) for i in range(15)] + [rec(15 + i, "regression", -0.02 * (i + 1))
                                                                     for i in range(8)]  # fmt: skip
    shown, title = grid_selection(recs, 8)
    assert [r["record_id"] for r in shown] == ["14", "13", "12", "11", "22", "21", "20", "19"]
    assert title == "4 of 15 repairs, 4 of 8 regressions: the largest |change of margin| of each"
    shown, title = grid_selection(recs[:15] + recs[15:17], 8)
    assert sum(r["status"] == "regression" for r in shown) == 2 and len(shown) == 8
    assert title.startswith("6 of 15 repairs, 2 of 2 regressions")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from PIL import Image

    fig, ax = plt.subplots()
    im = Image.new("RGB", (16, 16), (220, 30, 30))  # a red image stays red under its map
    draw_map(ax, im, np.zeros(16), 4, "t")
    assert ax.images[0].get_array().shape == (16, 16, 3) and tuple(ax.images[0].get_array()[0, 0]) == (220, 30, 30)
    plt.close(fig)
