"""Official metrics as small pure functions over score arrays (numpy in, numbers out).

Candidate scores are [n, k] with NaN where a record has fewer than k candidates.
A tie is the gold scoring exactly as high as the best foil; each benchmark's tie rule
says what its official code does with it (docs/method.md, "Tie rules"): "wrong" (a tie
is wrong: SugarCrepe, ARO VG), "first" (np.argmax / a descending argsort that keeps
index order: the earliest of the tied candidates wins: ARO Order, What's Up, CREPE), or
"correct" (a tie is right). Ties are always counted and reported.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

TIE_RULES = ("wrong", "first", "correct")


def decisions(scores: np.ndarray, gold: np.ndarray, tie_rule: str = "wrong"):
    """-> (correct [n] bool, tie [n] bool): correct when the gold ranks first under the rule."""
    return gold_rank(scores, gold, tie_rule) == 0, _tie(scores, gold)


def pool_bags(scores: np.ndarray, bags: list, gold: np.ndarray) -> np.ndarray:
    """Candidates in bags, pooled as sDCI pools them (facebookresearch/DCI loss.py
    `get_pooled_groups` 'max', and the own bag's `get_pooled_diag` 'min' written on the
    diagonal): scores [n, captions] with bags[r] each caption's bag -> [n, bags], the gold
    bag its lowest caption's score, every other bag its highest (NaN past a record's bags)."""
    n_bags = max(max(b) for b in bags) + 1
    out = np.full((len(scores), n_bags), np.nan, scores.dtype)
    for r, b in enumerate(bags):
        b = np.asarray(b)
        s = scores[r, : len(b)]
        for j in range(int(b.max()) + 1):
            out[r, j] = s[b == j].min() if j == gold[r] else s[b == j].max()
    return out


def _tie(scores: np.ndarray, gold: np.ndarray) -> np.ndarray:
    n = len(scores)
    g = scores[np.arange(n), gold]
    foils = scores.copy()
    foils[np.arange(n), gold] = np.nan
    return g == np.nanmax(np.where(np.isnan(foils), -np.inf, foils), axis=1)


def gold_rank(scores: np.ndarray, gold: np.ndarray, tie_rule: str = "wrong") -> np.ndarray:
    """0-based rank of the gold among its candidates (NaN: no candidate). Foils tied
    with the gold rank above it ("wrong"), below it ("correct"), or by index, the
    earlier first ("first": np.argmax's and a stable descending argsort's order)."""
    if tie_rule not in TIE_RULES:
        raise ValueError(f"tie_rule must be one of {TIE_RULES}, got {tie_rule!r}")
    n = len(scores)
    g = scores[np.arange(n), gold][:, None]
    valid = ~np.isnan(scores)
    higher = ((scores > g) & valid).sum(1)
    tied = (scores == g) & valid
    tied[np.arange(n), gold] = False
    if tie_rule == "first":
        tied &= np.arange(scores.shape[1])[None, :] < np.asarray(gold)[:, None]
    return higher + (tied.sum(1) if tie_rule != "correct" else 0)


def recall_at(ranks: np.ndarray, k: int) -> float:
    return float(np.mean(ranks < k))


def mean_accuracy(correct: np.ndarray, weights: np.ndarray | None = None) -> float:
    if weights is None:
        return float(np.mean(correct))
    return float((correct * weights).sum() / weights.sum())


def group_accuracies(correct: np.ndarray, groups: np.ndarray, min_count: int = 0) -> dict:
    """Accuracy of each group with at least min_count records."""
    out = {}
    for gname in np.unique(groups):
        m = groups == gname
        if m.sum() >= min_count:
            out[str(gname)] = float(correct[m].mean())
    return out


def nested_mean(correct: np.ndarray, W: np.ndarray, levels: list[np.ndarray], digits: int | None = None) -> np.ndarray:
    """The mean of means down a hierarchy of groups: levels[0] the top grouping, each
    further level nested in it (VL-CheckList: kind > category > source > file; VALSE:
    instrument > piece), the last level's groups pooled over their records. With record
    weights W [D, n] (a bootstrap's draws; one row of ones for the plain figure) -> [D].
    A group with no weight in a draw is left out of its parent's mean (NaN when none is
    left). levels [] is the pooled mean; [groups] the unweighted macro mean over groups.
    digits: each finest group's accuracy rounded so (Python's round) before the means
    above it, as an official script that averages rounded figures does (VL-CheckList)."""
    if not levels:
        tot = W.sum(1)
        with np.errstate(invalid="ignore", divide="ignore"):
            pooled = np.where(tot > 0, (W @ correct.astype(W.dtype)) / np.where(tot > 0, tot, 1), np.nan)
        return pooled if digits is None else np.array([round(float(x), digits) for x in pooled])
    if not len(correct):
        return np.full(len(W), np.nan)
    parts = []
    for g in np.unique(levels[0]):
        m = levels[0] == g
        parts.append(nested_mean(correct[m], W[:, m], [lv[m] for lv in levels[1:]], digits))
    per = np.stack(parts, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a draw with every group empty: NaN
        return np.nanmean(per, 1)


def nested_means(correct: np.ndarray, levels: list[np.ndarray], digits: int | None = None) -> tuple[float, list[dict]]:
    """nested_mean of the plain records, and each level's group means ({value: mean} per
    level, the value named by its path down the hierarchy where a name recurs under two
    parents: "Object/vg")."""
    one = np.ones((1, len(correct)))
    score = float(nested_mean(correct, one, levels, digits)[0])
    per_level: list[dict] = []
    for depth in range(len(levels)):
        path = np.array(["/".join(str(lv[i]) for lv in levels[: depth + 1]) for i in range(len(correct))])
        names = {p: p.rsplit("/", 1)[-1] for p in np.unique(path)}
        unique_names = len(set(names.values())) == len(names)
        per_level.append({
            (names[p] if unique_names else p): float(nested_mean(correct[path == p], one[:, path == p],
                                                                   [lv[path == p] for lv in levels[depth + 1 :]],
                                                                   digits)[0])
            for p in names
        })  # fmt: skip
    return score, per_level


def macro_accuracy(correct: np.ndarray, groups: np.ndarray, min_count: int = 0) -> float:
    """Unweighted mean over groups of each group's accuracy (ARO VG-R, VG-A;
    What's Up one/two-object subsets)."""
    acc = group_accuracies(correct, groups, min_count)
    return float(np.mean(list(acc.values()))) if acc else float("nan")


def retrieval_recall(sim: np.ndarray, caption_image: np.ndarray, ks=(1, 5, 10)) -> dict:
    """sim [n_images, n_captions]; caption_image[t] = index of caption t's image.
    image->text: an image counts if any of its captions is in its top k;
    text->image: a caption counts if its image is in its top k.
    Ties count against the query in both directions: the rank of the right answer is
    the number of wrong candidates scoring at least as high. Queries whose right
    answer ties a wrong one are counted (i2t_ties, t2i_ties)."""
    return retrieval_recall_blocks(lambda: [(0, sim)], caption_image, sim.shape[0], ks)


def retrieval_recall_blocks(row_blocks, caption_image: np.ndarray, n_images: int, ks=(1, 5, 10)) -> dict:
    """retrieval_recall over a matrix seen as row blocks: row_blocks() yields (first row,
    rows [b, n_captions]) and is called twice (the caption's true score, then its rank),
    so memory holds one block at a time. The same numbers as the whole matrix."""
    n_cap = len(caption_image)
    i_rank = np.zeros(n_images, np.int64)
    i_tie = np.zeros(n_images, bool)
    s_true = np.full(n_cap, np.nan, np.float32)
    for a, block in row_blocks():  # pass 1: images' ranks, captions' true scores
        rows = np.arange(a, a + len(block))
        pos = caption_image[None, :] == rows[:, None]
        best = np.where(pos, block, -np.inf).max(1)
        neg = np.where(pos, -np.inf, block)
        i_rank[rows] = (neg >= best[:, None]).sum(1)
        i_tie[rows] = (neg == best[:, None]).any(1)
        mine = (caption_image >= a) & (caption_image < a + len(block))
        s_true[mine] = block[caption_image[mine] - a, np.flatnonzero(mine)]
    t_rank = np.zeros(n_cap, np.int64)
    t_tie = np.zeros(n_cap, bool)
    for a, block in row_blocks():  # pass 2: captions' ranks
        rows = np.arange(a, a + len(block))
        wrong = caption_image[None, :] != rows[:, None]
        t_rank += ((block >= s_true[None, :]) & wrong).sum(0)
        t_tie |= ((block == s_true[None, :]) & wrong).any(0)
    return _recalls(i_rank, t_rank, i_tie, t_tie, ks)


def retrieval_recall_topk(row_blocks, caption_image: np.ndarray, n_images: int, ks=(1, 5, 10), columns: int = 4096):
    """retrieval_recall decided as torch.topk keeps the candidates (NegBench's
    `recall_at_k`: `torch.topk(scores, k, dim=1)`, called once per k, on CPU): a query
    counts when one of its right answers is among the k that topk keeps, ties with it
    decided by topk's own order. row_blocks as retrieval_recall_blocks; the text queries'
    rows (every image's score of a caption) gathered `columns` captions at a time. The
    ties columns count the queries whose right answer ties a wrong one, as there."""
    import torch

    n_cap = len(caption_image)
    i_hit = {k: np.zeros(n_images, bool) for k in ks}
    i_tie = np.zeros(n_images, bool)
    for a, block in row_blocks():  # image queries: their rows over the captions
        rows = np.arange(a, a + len(block))
        pos = caption_image[None, :] == rows[:, None]
        t = torch.from_numpy(np.ascontiguousarray(block, np.float32))
        for k in ks:
            kept = t.topk(min(k, n_cap), dim=1)[1].numpy()
            i_hit[k][rows] = (caption_image[kept] == rows[:, None]).any(1)
        best = np.where(pos, block, -np.inf).max(1)
        i_tie[rows] = (np.where(pos, -np.inf, block) == best[:, None]).any(1)
    t_hit = {k: np.zeros(n_cap, bool) for k in ks}
    t_tie = np.zeros(n_cap, bool)
    for c0 in range(0, n_cap, columns):  # caption queries: their rows over the images
        c1 = min(c0 + columns, n_cap)
        cols = np.concatenate([blk[:, c0:c1] for _, blk in row_blocks()], 0).T  # [captions, images]
        t = torch.from_numpy(np.ascontiguousarray(cols, np.float32))
        mine = caption_image[c0:c1]
        for k in ks:
            t_hit[k][c0:c1] = (t.topk(min(k, n_images), dim=1)[1].numpy() == mine[:, None]).any(1)
        true = cols[np.arange(c1 - c0), mine]
        wrong = np.arange(n_images)[None, :] != mine[:, None]
        t_tie[c0:c1] = ((cols == true[:, None]) & wrong).any(1)
    out = {}
    for k in ks:
        out[f"i2t_R@{k}"] = float(np.mean(i_hit[k]))
        out[f"t2i_R@{k}"] = float(np.mean(t_hit[k]))
    out["i2t_ties"], out["t2i_ties"] = int(i_tie.sum()), int(t_tie.sum())
    return out


def margin(scores, gold: int) -> float:
    """A record's gold score minus its best foil's (> 0: decided right, ties aside)."""
    return float(scores[gold] - max(s for j, s in enumerate(scores) if j != gold))


def _recalls(i_rank, t_rank, i_tie, t_tie, ks) -> dict:
    """R@k per direction from each query's rank of its right answer (0 = first), and
    how many queries had a tie with it."""
    out = {}
    for k in ks:
        out[f"i2t_R@{k}"] = float(np.mean(i_rank < k))
        out[f"t2i_R@{k}"] = float(np.mean(t_rank < k))
    out["i2t_ties"], out["t2i_ties"] = int(i_tie.sum()), int(t_tie.sum())
    return out


def retrieval_recall_pairs(
    img: np.ndarray, cap: np.ndarray, val: np.ndarray, caption_image: np.ndarray, n_images: int, ks=(1, 5, 10)
) -> dict:
    """retrieval_recall when only some pairs were scored (a shortlist): every pair not
    listed scores -inf, below all scored ones. A query whose right answer was not scored
    ranks below everything (and counts no tie)."""
    n_cap = len(caption_image)
    positive = caption_image[cap] == img
    best = np.full(n_images, -np.inf)
    np.maximum.at(best, img[positive], val[positive])
    n_pos = np.bincount(caption_image, minlength=n_images)
    i_rank = np.where(np.isinf(best), n_cap - n_pos, 0)
    i_tie = np.zeros(n_images, bool)
    wrong = ~positive
    np.add.at(i_rank, img[wrong], (val[wrong] >= best[img[wrong]]) & ~np.isinf(best[img[wrong]]))
    np.logical_or.at(i_tie, img[wrong], val[wrong] == best[img[wrong]])
    s_true = np.full(n_cap, -np.inf)
    s_true[cap[positive]] = val[positive]
    t_rank = np.where(np.isinf(s_true), n_images - 1, 0)
    t_tie = np.zeros(n_cap, bool)
    np.add.at(t_rank, cap[wrong], (val[wrong] >= s_true[cap[wrong]]) & ~np.isinf(s_true[cap[wrong]]))
    np.logical_or.at(t_tie, cap[wrong], val[wrong] == s_true[cap[wrong]])
    return _recalls(i_rank, t_rank, i_tie, t_tie, ks)


def topk_accuracy(logits: np.ndarray, labels: np.ndarray, ks=(1, 5)) -> dict:
    """Top-k accuracy as open_clip's and CLIP_benchmark's `accuracy` computes it:
    torch.topk(logits, max k, largest, sorted) keeps k classes, tied ones included or
    left out as topk keeps them (a tie with the true class is not counted correct by
    rule); a k above the class count is None (CLIP_benchmark's `evaluate` leaves acc5 NaN
    on a set of fewer than 5 classes). Also `mean_per_class_recall` (its
    balanced_accuracy_score of the argmax) and `ties`: images whose true class ties the
    best other class."""
    import torch

    t = torch.from_numpy(np.ascontiguousarray(logits, np.float32))
    kmax = min(max(ks), t.shape[1])
    pred = t.topk(kmax, 1, True, True)[1].numpy()
    hit = pred == labels[:, None]
    true = logits[np.arange(len(labels)), labels]
    others = logits.copy()
    others[np.arange(len(labels)), labels] = -np.inf
    out = {f"top{k}": float(hit[:, :k].any(1).mean()) if k <= t.shape[1] else None for k in ks}
    out["mean_per_class_recall"] = mean_per_class_recall(t.argmax(1).numpy(), labels)
    out["ties"] = int((others.max(1) == true).sum())
    return out


def mean_per_class_recall(predicted: np.ndarray, labels: np.ndarray) -> float:
    """The mean over the classes that occur in `labels` of the share of their images
    predicted right: scikit-learn's balanced_accuracy_score (not adjusted), which
    CLIP_benchmark's zeroshot_classification.evaluate reports as mean_per_class_recall
    (predicted: the argmax, its first maximum on a tie, as torch's argmax gives it)."""
    classes = np.unique(labels)
    return float(np.mean([np.mean(predicted[labels == c] == c) for c in classes]))


def top_k(values: np.ndarray, k: int, axis: int = 1) -> np.ndarray:
    """Positions of the k largest values along `axis`, ties broken by a fixed rule: the
    higher score first, then the lower position (the same k whatever else is computed
    alongside: a shortlist kept block by block equals the whole matrix's). Linear time:
    the k-th value by partition, everything above it, then the first tied ones. Returned
    in position order along `axis` (k of them, or all when there are fewer)."""
    v = np.moveaxis(np.asarray(values), axis, -1)
    n = v.shape[-1]
    if k >= n:
        out = np.broadcast_to(np.arange(n), v.shape)
    else:
        kth = -np.partition(-v, k - 1, axis=-1)[..., k - 1 : k]  # the k-th largest of each line
        above = v > kth
        tied = v == kth
        need = k - above.sum(-1, keepdims=True)  # how many of the tied values are kept
        keep = above | (tied & (np.cumsum(tied, -1) <= need))
        out = np.nonzero(keep)[-1].reshape(*v.shape[:-1], k)
    return np.moveaxis(np.ascontiguousarray(out), -1, axis)


def decision_changes(correct_a: np.ndarray, correct_b: np.ndarray) -> dict:
    """Paired changes from scorer A to scorer B on identical records."""
    return {
        "repairs": int((~correct_a & correct_b).sum()),
        "regressions": int((correct_a & ~correct_b).sum()),
        "both_right": int((correct_a & correct_b).sum()),
        "both_wrong": int((~correct_a & ~correct_b).sum()),
    }


def changes_between_runs(correct: dict[str, np.ndarray]) -> dict[str, dict]:
    """decision_changes for every pair of runs, in the order given: {"B vs A": ...}."""
    runs = list(correct)
    return {f"{b} vs {a}": decision_changes(correct[a], correct[b]) for i, a in enumerate(runs) for b in runs[i + 1 :]}


GROUP_RULES = ("wrong", "second_image")


def group_decisions(s: np.ndarray, rule: str = "wrong") -> dict[str, np.ndarray]:
    """Winoground's decisions on 2x2 groups. s [n, 2, 2]: s[:, i, c] scores image i with
    caption c; image i's own caption is caption i. Each comparison is strict (`>`: a tie
    is wrong), as Winoground's text_correct/image_correct and EqBen's cal_wino_score
    write it; under rule "second_image" a caption whose two images tie chooses the
    second (MMVP's `"img1" if p > 0.5 else "img2"`), so caption 1's tie is right.
    -> bool [n] each: text_0 / text_1 (image 0 / 1 prefers its own caption), image_0 /
    image_1 (caption 0 / 1 prefers its own image), text, image, group (both), and the
    ties: text_tie / image_tie (a comparison of that direction was exactly equal)."""
    if rule not in GROUP_RULES:
        raise ValueError(f"group rule must be one of {GROUP_RULES}, got {rule!r}")
    c0i0, c1i0, c0i1, c1i1 = s[:, 0, 0], s[:, 0, 1], s[:, 1, 0], s[:, 1, 1]
    out = {
        "text_0": c0i0 > c1i0,
        "text_1": c1i1 > c0i1,
        "image_0": c0i0 > c0i1,
        "image_1": c1i1 >= c1i0 if rule == "second_image" else c1i1 > c1i0,
    }
    out["text"] = out["text_0"] & out["text_1"]
    out["image"] = out["image_0"] & out["image_1"]
    out["group"] = out["text"] & out["image"]
    out["text_tie"] = (c0i0 == c1i0) | (c1i1 == c0i1)
    out["image_tie"] = (c0i0 == c0i1) | (c1i1 == c1i0)
    return out


def group_margins(s: np.ndarray) -> np.ndarray:
    """s [n, 2, 2] (image x caption) -> each group's margin s00 + s11 - s01 - s10 [n], float64,
    summed exactly and rounded once (math.fsum): its sign, zero included, is the exact sum's.
    Left to right in float32 (the release's order), two images or two captions that are
    byte-identical leave a residue of either sign where the exact margin is 0, and a tie
    would be counted a win."""
    flat = np.asarray(s, dtype=np.float64).reshape(-1, 4)  # s00, s01, s10, s11 (float32 -> float64: exact)
    return np.array([math.fsum((a, d, -b, -c)) for a, b, c, d in flat.tolist()], dtype=np.float64)


def group_match_decisions(s: np.ndarray) -> dict[str, np.ndarray]:
    """Test-time matching's figures on 2x2 groups (Zhu et al. 2025, yinglunz/test-time-matching,
    evaluate.py `evaluate_model`), not any benchmark's official score. s [n, 2, 2] as in
    group_decisions. -> group_match bool [n]: the best joint assignment of the two captions to
    the two images is the right one, the released `oracle_margin > 0` decided on the exact
    margin (group_margins: a tie is wrong); individual_match bool [n, 2]: each image prefers
    its own caption, strictly (the released individual_match_score, pooled over images)."""
    c0i0, c1i0, c0i1, c1i1 = s[:, 0, 0], s[:, 0, 1], s[:, 1, 0], s[:, 1, 1]
    return {"group_match": group_margins(s) > 0, "individual_match": np.stack([c0i0 > c1i0, c1i1 > c0i1], 1)}


# SugarCrepe++'s figures, named as Sri-Harsha/scpp's VLMs/test_Variants_CLIP.py prints them
ITT, P1, P2, TOT = "ITT", "Image-P1-Neg", "Image-P2-Neg", "TOT"


def paraphrase_decisions(s: np.ndarray, text: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """s [n, 3]: the image's scores of P1, P2, N; text [n, 3]: sim(P1, P2), sim(P1, N),
    sim(P2, N), or None. Every comparison strict, as test_Variants_CLIP.py writes them.
    -> bool [n] each: ITT, Image-P1-Neg, Image-P2-Neg, TOT (when text is given), and the
    ties: itt_tie (a positive scores exactly as N), tot_tie."""
    out = {P1: s[:, 0] > s[:, 2], P2: s[:, 1] > s[:, 2], "itt_tie": (s[:, 0] == s[:, 2]) | (s[:, 1] == s[:, 2])}
    out[ITT] = out[P1] & out[P2]
    if text is not None:
        out[TOT] = (text[:, 0] > text[:, 1]) & (text[:, 0] > text[:, 2])
        out["tot_tie"] = (text[:, 0] == text[:, 1]) | (text[:, 0] == text[:, 2])
    return out


def headline(res: dict) -> float:
    """The one number a task reports: its official score, or R@1 / top-1."""
    if "score" in res:
        return res["score"]
    return res.get("i2t_R@1", res.get("top1", float("nan")))
