"""Aggregations checked against hand computations: each test names
the mutation it was run against (a mean turned max, ddof 1 -> 0, a filter dropped)."""

import numpy as np
import pytest
import torch

from flowclip_cache.datasets import get
from flowclip_cache.datasets.base import Scoring
from flowclip_cache.heads import build_head
from flowclip_cache.scoring import metrics
from flowclip_cache.scoring.score import aggregate, bootstrap_task, cross_task_means, write_outputs
from flowclip_cache.store.banks import FeatureBank
from flowclip_cache.studies.study import RunSpec, summarise
from flowclip_cache.training.training_data import TrainingData, pairwise_accuracy


def test_cross_task_means_by_hand():
    """Mutation checked: np.mean -> np.max fails here."""
    benches = {
        "a": Scoring("pairwise", joins=(("m2", ""),)),
        "b": Scoring("pairwise", joins=(("m2", ""), ("gx", "G"))),
        "c": Scoring("pairwise", joins=(("gx", ""),)),
    }
    results = {
        ("real", "r1"): {"a": {"score": 0.2}, "b": {"score": 0.6, "named_groups": {"G": 0.9}}, "c": {"score": 0.5}}
    }
    out = cross_task_means(results, benches, ["r1"])["real|r1"]
    assert out["m2"]["mean"] == pytest.approx(0.4) and out["m2"]["members"] == ["a", "b"]
    assert out["gx"]["mean"] == pytest.approx(0.7) and out["gx"]["members"] == ["b/G", "c"]


def test_summarise_mean_and_sample_std_by_hand():
    """Mean and sample std (ddof 1) across seeds, change from CLIP. Mutation checked:
    ddof 1 -> 0 fails here (std 0.05 would read 0.0408...)."""
    runs = [RunSpec("flow", seed, {}) for seed in range(3)]
    res = {"real|clip": {"t": {"score": 0.50}}}
    res.update({f"real|{r.folder}": {"t": {"score": v}} for r, v in zip(runs, (0.60, 0.70, 0.65))})
    score = {
        "results": res,
        "cross_task_means": {},
        "controls": ["real"],
        "bootstrap": {},
        "decision_changes": {},
        "store_fingerprint": "x",
        "git_revision": "y",
    }
    row = summarise(score, runs)["table"]["flow"]["t"]
    assert row["mean"] == pytest.approx(65.0) and row["n"] == 3
    assert row["std"] == pytest.approx(5.0)  # sqrt(((-5)^2 + 5^2 + 0) / 2)
    assert row["delta"] == pytest.approx(15.0)


def test_study_summary_marks_intervals_that_exclude_zero(tmp_path):
    """summary.md said an interval that excludes 0 is marked * and marked none (the demo's
    report,); score's results.md did. Both now use report.interval_cell."""
    from flowclip_cache.studies.summary import write_summary

    runs = [RunSpec("flow", 0, {})]
    score = {
        "results": {"real|clip": {"t": {"score": 0.5}}, f"real|{runs[0].folder}": {"t": {"score": 0.6}}},
        "cross_task_means": {},
        "controls": ["real"],
        "decision_changes": {},
        "store_fingerprint": "x",
        "git_revision": "y",
        "bootstrap": {
            "t": {
                "flow - clip": {
                    "mean_pts": 10.0,
                    "ci95_pts": [0.35, 4.4],
                    "draws_missing_a_group": 0,
                    "p_two_sided": 0.02,
                },
                "flow - flow": {
                    "mean_pts": 0.1,
                    "ci95_pts": [-1.0, 2.0],
                    "draws_missing_a_group": 0,
                    "p_two_sided": 0.6,
                },
            }
        },
    }
    write_summary(str(tmp_path), summarise(score, runs))
    md = (tmp_path / "summary.md").read_text()
    # p as the bootstrap gave it, and Holm's over the table's two by hand: 2 x 0.02, then max(0.04, 1 x 0.6)
    assert "| t | flow - clip | 10.00 | [0.35, 4.40] * | 0.0200 | 0.0400 | 0 |" in md
    assert "| t | flow - flow | 0.10 | [-1.00, 2.00] | 0.6000 | 0.6000 | 0 |" in md and "Holm p (of 2)" in md
    assert "After Holm's correction over all 2, 1 stand (p < 0.05): flow - clip on t." in md


def test_study_figure_draws_chance_and_marks_the_means():
    """summary.png: a chance segment per task, relative to CLIP as the bars are
    (chance 20%, CLIP 30% -> -10 points), and the cross-task means shaded and labelled."""
    from flowclip_cache.studies.summary import summary_figure

    runs = [RunSpec("flow", 0, {})]
    mean = {"mean": 0.4, "members": ["synthetic-order"]}
    run = f"real|{runs[0].folder}"
    score = {
        "results": {"real|clip": {"synthetic-order": {"score": 0.3}}, run: {"synthetic-order": {"score": 0.6}}},
        "cross_task_means": {"real|clip": {"m": mean}, run: {"m": {**mean, "mean": 0.6}}},
        "controls": ["real"], "decision_changes": {}, "store_fingerprint": "x", "git_revision": "y", "bootstrap": {},
    }  # fmt: skip
    summary = summarise(score, runs)
    summary["encoder_profile"] = {"chance": {"order": 0.2}}
    ax = summary_figure(summary).axes[0]
    (seg,) = [c for c in ax.collections if c.get_label().startswith("chance")]
    assert seg.get_segments()[0][0][1] == pytest.approx(-10.0)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["synthetic-order", "m (mean)"]


def test_below_chance_is_said_only_with_a_test_and_learnt_only_below_the_frozen_encoder():
    """the demo called global 45.50 on 222 records 'below chance ... a learnt bias'
    (about 1.3 standard errors from 50, CLIP itself at 44.59). Exactly: 101 of 222 against
    0.5 is P = 0.101 (exact fractions), not below chance; 80 of 222 is, and with CLIP at 44.59 the head is below
    it too; with CLIP at 35 the preference is the encoder's. binomial_tail by hand: P(X <= 1)
    for Bin(3, 0.5) = 4/8."""
    from flowclip_cache.studies.answer import _below_chance, binomial_tail

    assert binomial_tail(1, 3, 0.5) == pytest.approx(0.5) and binomial_tail(3, 3, 0.5) == pytest.approx(1.0)
    chance = lambda t: 50.0  # noqa: E731
    row = lambda v: {"t": {"mean": v}}  # noqa: E731
    say = lambda head, clip: _below_chance(  # noqa: E731
        {"records": {"t": 222}, "table": {"clip": row(clip), "global": row(head)}}, chance
    )
    assert binomial_tail(101, 222, 0.5) == pytest.approx(0.101067, abs=1e-6) and say(45.50, 44.59) == []
    assert "the head learnt to prefer the foils" in say(36.04, 44.59)[0]
    assert "the preference is the encoder's" in say(30.0, 35.0)[0]


def test_study_conclusion_comes_first_grouped_with_chance_and_controls():
    """the overall reading first (how many intervals exclude 0 against chance,
    by question), what Fixed-control accuracy above chance and a head below chance mean."""
    from flowclip_cache.scoring.profile import PROFILE_FAMILIES
    from flowclip_cache.studies.summary import summary_markdown

    runs = [RunSpec("flow", 0, {})]
    run = f"real|{runs[0].folder}"
    res = {"synthetic-order": {"score": 0.1}, "synthetic-swap-att": {"score": 0.6}, "synthetic-add": {"score": 0.9}}
    n = {"synthetic-order": 100, "synthetic-swap-att": 100, "synthetic-add": 100}
    ci = lambda lo, hi: {"mean_pts": (lo + hi) / 2, "ci95_pts": [lo, hi], "draws_missing_a_group": 0}  # noqa: E731
    score = {
        "results": {"real|clip": {t: {"score": 0.5, "n": n[t]} for t in res}, run: res,
                    "fixed|clip": {"synthetic-add": {"score": 0.85}},
                    f"fixed|{runs[0].folder}": {"synthetic-add": {"score": 0.55}}},
        "cross_task_means": {}, "controls": ["real", "fixed"], "decision_changes": {}, "store_fingerprint": "x",
        "git_revision": "y",
        "bootstrap": {
            "synthetic-swap-att": {"flow - clip": ci(-1.0, 3.0)}, "synthetic-order": {"flow - clip": ci(-9, -2)}
        },
    }  # fmt: skip
    summary = summarise(score, runs)
    chance = {"order": 0.2, "swap-att": 0.5, "add": 0.5}
    summary["encoder_profile"] = {
        "chance": chance, "accuracy": {f: 0.5 for f in PROFILE_FAMILIES}, "grounding": {"hit_rate": 0.1, "chance": 0.1}
    }  # fmt: skip
    md = "\n".join(summary_markdown(summary))
    assert "Columns: each task family's accuracy" in md  # the profile's columns explained
    body = md[md.index("## Conclusions") :]
    overall = body.index("**Overall.** Of 2 paired comparisons, 1 has a 95% interval")
    assert overall < body.index("- synthetic-swap-att: flow - clip")
    assert "- Binding (1 comparison): no interval excludes 0" in body
    assert (
        "- Word order (1 comparison): 1 of 1 excludes 0: flow - clip on synthetic-order -5.50 [-9.00, -2.00]." in body
    )
    assert "1 or more by chance alone has probability 0.098" in body and "each is weak evidence" in body
    assert "CLIP scores synthetic-add 85.00 (chance 50)" in body and "on its text alone" in body
    # 10 of 100 against chance 20%: exact binomial P(X <= 10) = 0.005696 (exact fractions); CLIP is at 50
    assert (
        "- Below chance: flow 10.00 on synthetic-order (100 records, chance 20; exact binomial one-sided p = "
        "0.0057); below the frozen encoder's 50.00 as well: the head learnt to prefer the foils." in body
    )
    # the trained head's own Fixed accuracy beside CLIP's: its +40 with real images is not the text's
    assert (
        "- synthetic-add, the other scorers against CLIP's 85.00 under Fixed: flow +40.00 with real images, 55.00 "
        "under Fixed: each keeps less of the text-alone preference than CLIP, so its gain with real images rests "
        "on the image." in body
    )
    score["results"][f"fixed|{runs[0].folder}"]["synthetic-add"]["score"] = 0.9  # keeps the preference
    body = "\n".join(summary_markdown(summarise(score, runs) | {"encoder_profile": summary["encoder_profile"]}))
    assert "flow keeps at least CLIP's text-alone preference, so part of a gain there may be the text's" in body


def test_a_reports_sentences_follow_its_figures():
    """15 of 22 intervals excluding 0 is not 'weak evidence'; a question listing
    only its significant comparisons says how many of how many; the binding lab's sentence
    names what the project's run found for this encoder and readout, and only for those;
    the wall time counts the invocation from its start. Each checked by hand."""
    from flowclip_cache.studies.answer import _beyond_chance, binomial_tail, overall
    from flowclip_cache.studies.summary import _binding_lab_pointer, _wall_time

    p15 = 1 - binomial_tail(14, 22, 0.05)
    assert p15 < 1e-12 and "more than chance" in _beyond_chance(15, 22) and "weak" not in _beyond_chance(15, 22)
    assert "weak evidence" in _beyond_chance(1, 22) and _beyond_chance(0, 22) == "None does."
    ci = lambda lo, hi: {"mean_pts": (lo + hi) / 2, "ci95_pts": [lo, hi]}  # noqa: E731
    boot = {f"synthetic-add-{i}": {"a - b": ci(1, 2) if i < 7 else ci(-1, 2)} for i in range(14)}
    lines = overall({"bootstrap": boot, "controls": {}, "table": {}})
    other = next(line for line in lines if line.startswith("- Other tasks"))
    assert other.startswith("- Other tasks (14 comparisons): 7 of 14 exclude 0: ") and other.endswith(
        "; the other 7 include 0."
    )
    standard = _binding_lab_pointer({"model": "flowclip-tiny-clip-filip", "patch_readout": "standard"})
    clear = _binding_lab_pointer({"model": "flowclip-tiny-clip-filip", "patch_readout": "clearclip"})
    other_enc = _binding_lab_pointer({"model": "flowclip-tiny-clip", "patch_readout": "standard"})
    assert "all 12 of its binding intervals were above 0" in standard and "3 of its 12" in clear
    assert "holds no figures for flowclip-tiny-clip with standard patches" in other_enc and "above 0" not in other_enc
    # a training-free scorer below chance is not said to have learnt anything; a trained head is
    from flowclip_cache.studies.answer import _below_chance

    table = {"clip": {"t": {"mean": 44.59}}, "filip-score": {"t": {"mean": 30.0}}, "flow": {"t": {"mean": 30.0}}}
    low = {"records": {"t": 222}, "table": table, "training_free": ["filip-score"]}
    said = _below_chance(low, lambda t: 50.0)
    assert len(said) == 1 and said[0].startswith("- Below chance: flow 30.00") and "learnt" in said[0]
    timing = {"this_invocation_seconds": 2108.4, "study_seconds": 1672.0, "train_seconds_per_run": {"a": 10.0},
              "score_seconds": 55.0}  # fmt: skip
    assert _wall_time(timing).startswith(
        "Wall time: 2108 s for this invocation, from its start (the study's training and scoring: 1672 s of it)"
    )
    timing.update(stage_seconds={"steps": 1000.0, "scoring": 600.0}, study_wall_seconds=1700.0)
    assert _wall_time(timing).endswith("Where the time went: steps 1000.0 s, scoring 600.0 s; the rest 100.0 s.")


def _bank(v, t, caps_per_record):
    f = lambda a: torch.tensor(np.asarray(a, np.float32)).half()
    return FeatureBank(f(v), torch.empty(0), f(t), torch.empty(0), torch.arange(len(t) + 1))


def test_pairwise_accuracy_by_hand():
    """Images e0, e1; record 0: pos e0 vs negs [e1, e0] (a tie, counted wrong);
    record 1: pos e1 vs neg e0 (right). Per kind and pooled."""
    e = np.eye(2)
    bank = _bank(e, [e[0], e[1], e[1], e[0], e[0]], None)  # captions 0..4
    data = TrainingData(
        bank=bank,
        rec_image=torch.tensor([0, 1]),
        rec_pos=torch.tensor([0, 2]),
        rec_neg=torch.tensor([[1, 4], [3, -1]]),
        rec_neg_kind=[["swap", "dup"], ["swap"]],
        split=np.array(["train", "train"]),
    )
    acc = pairwise_accuracy(build_head("clip", 2), data, np.array([0, 1]))
    assert acc["swap"] == 1.0 and acc["dup"] == 0.0
    assert acc["all"] == pytest.approx(2 / 3) and acc["pairs"] == 3


def test_decision_changes_by_hand():
    a = np.array([1, 1, 0, 0, 1], bool)
    b = np.array([1, 0, 1, 1, 1], bool)
    assert metrics.decision_changes(a, b) == {"repairs": 2, "regressions": 1, "both_right": 2, "both_wrong": 0}


def test_crepe_recall_by_complexity_and_foil_by_hand():
    """Three records of complexity 4 and one of 5; gold is candidate 0. Record 2's gold ties
    its first foil at the top: CREPE's official torch.argsort(logits, descending=True) keeps
    the gold (index 0) ahead of it, so it ranks first (tie rule "first"). Mutation checked:
    the old rule (tied foils above the gold) gives R@1 0.25 here."""
    sc = get("crepe-productivity").scoring
    scores = np.array([[0.9, 0.1, 0.2, 0.3], [0.2, 0.9, 0.1, 0.3], [0.5, 0.5, 0.1, 0.2], [0.3, 0.4, 0.5, 0.6]])
    official = torch.argsort(torch.tensor(scores), descending=True)  # RAIVNLab/CREPE's ranking
    assert [int((row == 0).nonzero()) for row in official] == [0, 2, 0, 3]
    gold = np.zeros(4, int)
    cols = {
        "foil_type": np.array(["atom", "atom", "swap", "swap"]),
        "complexity": np.array([4, 4, 4, 5]),
        "foil_complexity": np.array(["atom/04", "atom/04", "swap/04", "swap/05"]),
    }
    res = aggregate(sc, scores, gold, cols)
    assert res["recall"] == {"R@1": 0.5, "R@3": 0.75, "R@5": 1.0, "R@10": 1.0}
    assert res["recall_by_complexity"] == {"4": pytest.approx(2 / 3), "5": 0.0}
    assert res["recall_by_foil_complexity"] == {"atom/04": 0.5, "swap/04": 1.0, "swap/05": 0.0}
    # per file (foil type and complexity) at every k the official get_one2many_metrics
    # reports: ranks 0, 2 | 0 | 3 -> R@3 atom/04 1/2, swap/05 0; R@5 and R@10 all 1
    assert res["recall_at3_by_foil_complexity"] == {"atom/04": 1.0, "swap/04": 1.0, "swap/05": 0.0}
    assert res["recall_at5_by_foil_complexity"] == {"atom/04": 1.0, "swap/04": 1.0, "swap/05": 1.0}
    assert res["recall_at10_by_foil_complexity"] == res["recall_at5_by_foil_complexity"]
    assert ("Recall@3 per foil_complexity", "recall_at3_by_foil_complexity") in sc.breakdowns()
    assert res["by_foil_type"] == {"atom": 0.5, "swap": 0.5} and res["ties"] == 1
    assert res["ties_by_foil_complexity"] == {"atom/04": 0, "swap/04": 1, "swap/05": 0}


def test_crepes_argsort_keeps_a_tied_gold_first_up_to_16_candidates_only():
    """What docs/method.md says of CREPE's tie rule, measured: the official
    torch.argsort(logits, descending=True) ranks a gold tied with one foil first in every
    trial up to 16 candidates, and not in every trial above (CPU); flowclip's "first" keeps
    it first at any count."""
    gen = torch.Generator().manual_seed(0)
    lost = {}
    for n in (4, 10, 16, 17, 24):
        lost[n] = 0
        for _ in range(100):
            x = torch.rand(n, generator=gen)
            x[0] = 2.0
            x[int(torch.randint(1, n, (1,), generator=gen))] = 2.0
            lost[n] += int((torch.argsort(x, descending=True) == 0).nonzero()) != 0
            assert metrics.gold_rank(x.numpy()[None], np.array([0]), "first")[0] == 0
    assert lost[4] == lost[10] == lost[16] == 0 and lost[17] > 0 and lost[24] > 0, lost


def test_tie_rules_by_hand():
    """One record, gold at index 1, tied with index 0 and index 2 at the top: 'wrong' ranks
    both foils above it (rank 2), 'first' only the earlier one (np.argmax picks index 0:
    rank 1, wrong), 'correct' neither (rank 0)."""
    s = np.array([[0.7, 0.7, 0.7, 0.1]])
    g = np.array([1])
    assert [metrics.gold_rank(s, g, r)[0] for r in ("wrong", "first", "correct")] == [2, 1, 0]
    assert [bool(metrics.decisions(s, g, r)[0][0]) for r in ("wrong", "first", "correct")] == [False, False, True]
    g0 = np.array([0])  # gold first among the tied: argmax picks it
    assert bool(metrics.decisions(s, g0, "first")[0][0]) and int(np.argmax(s[0])) == 0
    assert not metrics.decisions(s, g0, "wrong")[0][0]
    nan = np.array([[0.2, 0.5, np.nan]])  # fewer candidates: NaN never ranks
    assert metrics.gold_rank(nan, np.array([1]), "wrong")[0] == 0


def test_whatsup_pair_and_set_accuracy_by_hand():
    """Controlled-A as the official evaluate_scores counts: two object pairs x (left, right,
    on, under). Pair 1 all right (2 pairs, 1 set); pair 2: left and right right, on wrong
    (1 pair, no set). Pair accuracy 3 / (8/2), set accuracy 1 / (8/4)."""
    sc = get("whatsup-controlled-a").scoring
    names = [
        f"controlled_images/{o}_{p}_plate.jpeg" for o in ("mug", "cup") for p in ("left_of", "right_of", "on", "under")
    ]
    correct = np.array([1, 1, 1, 1, 1, 1, 0, 1], bool)
    scores = np.where(correct[:, None], [[0.9, 0.1, 0.2, 0.3]], [[0.1, 0.9, 0.2, 0.3]])
    res = aggregate(sc, scores, np.zeros(8, int), {"image": names, "preposition": np.array(["x"] * 8)})
    assert res["extra"] == {"pair": pytest.approx(3 / 4), "set": pytest.approx(1 / 2)}
    assert ("pair and set accuracy (official evaluate_scores)", "extra") in sc.breakdowns()


def test_bootstrap_task_drops_small_groups_and_excluded_records():
    """VG-Attribution style: groups under min_group and excluded records are left out of
    the bootstrap exactly as the official score leaves them. Mutation checked: dropping
    the min_group filter fails here."""
    sc = Scoring("pairwise", aggregate="macro", group_by="g", min_group=2, exclude_column="x")
    cols = {"g": np.array(["a", "a", "b", "c", "c", "c"]), "x": np.array([0, 0, 0, 1, 0, 0], bool)}
    ikeys = np.array(["i0", "i1", "i0", "i2", "i3", "i1"])
    correct = {"r": np.array([1, 0, 1, 1, 0, 1], bool)}
    images = {"i9": 0}
    t = bootstrap_task("t", sc, cols, ikeys, correct, images)
    # kept: records 0, 1 (group a, 2 records) and 4, 5 (group c after exclusion: 2); b has 1
    assert [lv.tolist() for lv in t["groups"]] == [["a", "a", "c", "c"]]
    assert t["correct"]["r"].tolist() == [True, False, False, True]
    assert t["image_index"].tolist() == [1, 2, 3, 2] and images == {"i9": 0, "i0": 1, "i1": 2, "i3": 3}


def test_results_md_for_a_hand_built_case(tmp_path):
    class S:
        def __init__(self, run, kind):
            self.run, self.method, self.head = run, run, build_head(kind, 2)

    scorers = [S("clip", "clip"), S("flow", "flow")]
    benches = {
        "t1": Scoring("pairwise", group_by="subset", joins=(("m", ""),)),
        "t2": Scoring("pairwise", joins=(("m", ""),)),
    }
    results = {
        "real|clip": {
            "t1": {"score": 0.5, "ties": 2, "by_subset": {"a": 0.25, "b": 0.75}},
            "t2": {"score": 0.7, "ties": 0},
        },
        "real|flow": {
            "t1": {"score": 0.625, "ties": 0, "by_subset": {"a": 0.5, "b": 0.75}},
            "t2": {"score": 0.75, "ties": 1},
        },
    }
    summary = {
        "store_fingerprint": "f" * 64,
        "git_revision": "abc",
        "results": results,
        "cross_task_means": cross_task_means(
            {tuple(k.split("|")): v for k, v in results.items()}, benches, ["clip", "flow"], {"m": ["t1", "t2", "t3"]}
        ),
        "bootstrap": {"t1": {"flow - clip": {"mean_pts": 12.5, "ci95_pts": [2.0, 23.0], "draws_missing_a_group": 0}}},
        "decision_changes": {"t1": {"flow vs clip": {"repairs": 3, "regressions": 1}}},
    }
    write_outputs(str(tmp_path), summary, [], scorers, ["real"], benches)
    md = (tmp_path / "results.md").read_text()
    assert "| real | clip | 50.00 | 70.00 | 60.00 * |" in md  # partial: t3 was not scored
    assert "| real | flow | 62.50 | 75.00 | 68.75 * |" in md
    assert "m is partial: the mean of 2 of its 3 members (t1, t2); missing t3." in md
    assert "### t1: per subset" in md and "| real | flow | 50.00 | 75.00 |" in md
    assert "| clip | 2 | 0 |" in md and "| flow | 0 | 1 |" in md
    assert "**Shuffle**" in md and "lower is better" in md
    assert "| t1 | flow - clip | 12.50 | [2.00, 23.00] * | – | – | 0 |" in md  # (no p recorded)
    assert "| t1 | flow vs clip | 3 | 1 |" in md
    csv = (tmp_path / "results.csv").read_text()
    assert csv.startswith("control,scorer,column,percent,partial\n") and "real,flow,m,68.7500,partial\n" in csv
    assert "real,clip,t1,50.0000,\n" in csv  # (m lacks t3: partial; t1 rests on all its records)
    assert "real,flow,t1/by_subset/a,50.0000" in csv


def test_margin_is_gold_minus_the_best_foil():
    from flowclip_cache.scoring.metrics import margin

    assert margin([0.2, 0.5, 0.1], 1) == pytest.approx(0.3)
    assert margin([0.2, 0.5, 0.1], 0) == pytest.approx(-0.3)
    assert margin([0.4, 0.4], 0) == 0.0


def test_groups_left_out_of_a_macro_mean_are_marked(tmp_path):
    """VG-Attribution style: a group under min_group is listed, marked † and named as left
    out of the macro mean; aggregate names it. Mutation checked: without the mark the
    table shows 'c' as if it counted."""

    class S:
        def __init__(self, run):
            self.run, self.method, self.head = run, run, build_head("clip", 2)

    sc = Scoring("pairwise", aggregate="macro", group_by="g", min_group=2)
    res = aggregate(
        sc,
        np.array([[0.9, 0.1], [0.2, 0.8], [0.7, 0.3], [0.6, 0.1], [0.9, 0.2]]),
        np.zeros(5, int),
        {"g": np.array(["a", "a", "b", "b", "c"])},
    )
    assert res["left_out_groups"] == ["c"] and res["score"] == pytest.approx(0.75) and res["by_g"]["c"] == 1.0
    summary = {
        "store_fingerprint": "f" * 64,
        "git_revision": "abc",
        "results": {"real|clip": {"t": res}},
        "cross_task_means": {},
        "bootstrap": {},
        "decision_changes": {},
    }
    write_outputs(str(tmp_path), summary, [], [S("clip")], ["real"], {"t": sc})
    md = (tmp_path / "results.md").read_text()
    assert "| control | scorer | a | b | c † |" in md
    assert "† fewer than 2 records: shown, but left out of the macro mean (1 of 3 groups)." in md


def test_a_study_summary_marks_figures_resting_on_part_of_their_records():
    """Two seeds of one method on task t, one seed's score partial (rows failed at extract):
    the method's mean over seeds is marked (*) in summary.md and 'partial' in summary.csv;
    CLIP's complete cell and a complete task u are not; a partial bootstrap entry is marked."""
    from flowclip_cache.studies.study import RunSpec, summarise
    from flowclip_cache.studies.summary import summary_csv, summary_markdown

    runs = [RunSpec("flow", seed, {"head": "flow"}) for seed in (0, 1)]
    f0, f1 = (r.folder for r in runs)
    res = {
        "real|clip": {"t": {"score": 0.5}, "u": {"score": 0.4}},
        f"real|{f0}": {"t": {"score": 0.6, "partial": "2 records left out"}, "u": {"score": 0.5}},
        f"real|{f1}": {"t": {"score": 0.7}, "u": {"score": 0.55}},
    }
    boot = {"t": {"flow - clip": {"mean_pts": 15.0, "ci95_pts": [5.0, 25.0], "draws_missing_a_group": 0,
                                  "partial": "2 records left out"}}}  # fmt: skip
    score = {"results": res, "cross_task_means": {}, "controls": ["real"], "bootstrap": boot,
             "decision_changes": {}, "store_fingerprint": "f" * 64, "git_revision": "g" * 40}  # fmt: skip
    summary = summarise(score, runs)
    assert (
        summary["controls"]["real"]["flow"]["t"]["partial"] and not summary["controls"]["real"]["flow"]["u"]["partial"]
    )
    md = "\n".join(summary_markdown(summary))
    assert "| flow | 65.00 ± 7.07 (+15.00) * | 52.50 ± 3.54 (+12.50) |" in md
    assert "| clip | 50.00 (+0.00) | 40.00 (+0.00) |" in md
    assert "| t (partial) | flow - clip | 15.00 | [5.00, 25.00] * | – | – | 0 |" in md  # * only for excluding 0
    csv = summary_csv(summary)
    assert "real,flow,t,65.0000,7.0711,2,15.0000,partial" in csv and "real,flow,u,52.5000,3.5355,2,12.5000," in csv


def test_the_binding_labs_summary_counts_intervals_that_exclude_zero():
    """the grid summary prints, itself, how many intervals exclude 0 and how many
    would by chance (docs/results-synthetic.md computed them by hand). By hand: 3 of 48
    exclude 0 (two above, one below); 48 / 20 = 2.4 by chance."""
    from flowclip_cache.studies.grid import exclusion_count

    rows = (
        [("s", "t", "d", 0.0, -1.0, 1.0)] * 45
        + [("s", "t", "d", 2.0, 1.0, 3.0)] * 2
        + [("s", "t", "d", -2.0, -3.0, -0.5)]
    )
    assert exclusion_count(rows) == (
        "**3 of 48 intervals exclude 0** (2 above, 1 below); about 2.4 would by chance alone if no setting made a "
        "difference."
    )
    assert exclusion_count([("s", "t", "d", 0.0, 0.0, 1.0)]).startswith("**0 of 1")  # an edge at 0 includes it


def test_the_bootstrap_statistic_at_unit_weights_is_each_official_score():
    """Every aggregation kind: the bootstrap's statistic with each record drawn once equals the
    official score (pooled; macro; SugarCrepe's record-weighted group means; VALSE's instrument
    mean of piece means; VL-CheckList's means of means down four levels). Mutation checked: the
    VALSE levels without the piece level (pooled within an instrument) fail here."""
    from flowclip_cache.datasets import get
    from flowclip_cache.scoring.aggregation import aggregate
    from flowclip_cache.scoring.stats import weighted_stat

    rng = np.random.default_rng(3)
    vc = [("Object", "Object_Size_large", "vg", "f1"), ("Object", "Object_Size_large", "vg", "f2"),
          ("Object", "Object_Size_large", "swig", "f3"), ("Object", "Object_Location_mid", "hake", "f4"),
          ("Attribute", "Attribute_color", "vaw", "f5"), ("Relation", "Relation_spatial", "vg", "f6")]  # fmt: skip
    cases = {
        "sugarcrepe": {"subset": [s for s in ("add_att", "add_obj", "replace_att", "swap_att", "swap_obj")
                                  for _ in range(3 + len(s))]},
        "valse": {"piece": [p for i, p in enumerate(("existence", "plurals", "counting-hard", "counting-small-quant",
                  "relations", "actant-swap", "action-replacement", "foil-it")) for _ in range(3 + i)]},
        "aro-vg-attribution": {"attribute_pair": [str(i % 4) for i in range(120)] + ["small"] * 3},
        "vl-checklist": dict(zip(("kind", "category", "source", "file"),
                                 map(list, zip(*[r for i, r in enumerate(vc) for _ in range(2 + i)])))),
    }  # fmt: skip
    for name, cols in cases.items():
        sc = get(name).scoring
        n = len(next(iter(cols.values())))
        cols = {**cols, "record_id": [str(i) for i in range(n)]}
        if sc.exclude_column:
            cols[sc.exclude_column] = [False] * n
        s = rng.normal(size=(n, 2)).astype(np.float32)
        res = aggregate(sc, s, np.zeros(n, np.int64), cols)
        correct = {"r": s[:, 0] > s[:, 1]}
        t = bootstrap_task(name, sc, cols, np.array([f"i{i}" for i in range(n)]), correct, {})
        stat, lost = weighted_stat(
            t["correct"]["r"], np.ones((1, len(t["image_index"]))), t["groups"], None, t["digits"]
        )
        assert stat[0] == pytest.approx(res["score"], abs=1e-12), name
        assert not lost[0]


def test_a_summary_opens_with_the_answer_where_a_training_free_scorer_wins():
    """demo: the untrained filip-score ahead of both trained heads on the synthetic
    mean, and a summary that said so nowhere. The answer now comes first: the best scorer on
    each cross-task mean, the best trained head against the best training-free scorer with
    the bootstrap's interval of that mean, and 'no trained head beats' said plainly."""
    from flowclip_cache.studies.summary import summary_markdown

    runs = [RunSpec("flow", 0, {"head": "flow"}), RunSpec("global", 0, {"head": "global"})]
    tasks = ("synthetic-swap-att", "synthetic-order")
    scores = {"clip": 0.70, "filip-score": 0.84, runs[0].folder: 0.795, runs[1].folder: 0.80}
    mean = {r: {"synthetic": {"mean": v, "members": list(tasks)}} for r, v in scores.items()}
    score = {
        "results": {f"real|{r}": {t: {"score": v, "n": 50} for t in tasks} for r, v in scores.items()},
        "cross_task_means": {f"real|{r}": m for r, m in mean.items()}, "controls": ["real"],
        "decision_changes": {}, "store_fingerprint": "x", "git_revision": "y",
        "bootstrap": {"mean: synthetic": {"flow - filip-score": {"mean_pts": -4.5, "ci95_pts": [-7.25, -1.5],
                                                                 "p_two_sided": 0.002, "draws_missing_a_group": 0}}},
    }  # fmt: skip
    summary = summarise(score, runs, training_free=["filip-score"])
    md = "\n".join(summary_markdown(summary))
    answer = md[md.index("## The answer") :]
    assert md.index("## The answer") < md.index("|")  # before any table
    assert "- **synthetic** mean (2 tasks): best filip-score, 84.00." in answer
    assert (
        "The best trained head, global (80.00), is -4.00 points from the best training-free scorer, filip-score "
        "(84.00) (not bootstrapped: name [filip-score, global] in compare: for its interval). **No trained head "
        "beats filip-score here.**" in answer
    )
    summary["table"]["global"]["synthetic"]["mean"] = 79.0  # flow now the best head: its interval is there
    answer = "\n".join(summary_markdown(summary))
    assert "flow (79.50), is -4.50 points from the best training-free scorer, filip-score (84.00): 95% interval " \
           "[-7.25, -1.50], which excludes 0 (p 0.002)." in answer  # fmt: skip
