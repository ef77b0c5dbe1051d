"""flowclip score: every benchmark manifest, every scorer, from one store.

    manifests -> their benchmark's Scoring (from the registry) -> scores per record
    and candidate, per scorer and image control -> official aggregation -> tables,
    paired decision changes, paired image-cluster bootstrap, figures.

The engine knows task kinds, not benchmarks: everything particular to a benchmark
comes from its Scoring declaration.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from . import metrics, outputs
from .banks import FeatureBank
from .data import drop_failed_rows, manifest_keys
from .datasets import all_benchmarks
from .datasets import get as get_benchmark
from .datasets.base import Scoring
from .errors import FlowclipError
from .hashing import caption_key
from .heads import Head, build_head
from .manifest import Manifest
from .report import results_markdown
from .stats import paired_bootstrap
from .store import FeatureStore
from .train import _git_revision

CONTROLS = ("real", "shuffle", "fixed")


@dataclass
class Scorer:
    method: str          # runs of one method (seeds) share this name
    run: str             # unique label
    head: Head
    head_sha256: str     # of the weights file; "frozen" for clip
    train: dict | None = None    # the run's training settings (config.json); None for clip


def load_scorers(specs: list[str], store: FeatureStore, device: str) -> list[Scorer]:
    """'clip', a run folder, or 'name=run folder' (runs sharing a name are seeds of one method)."""
    from .train import load_head
    out, seen = [], set()
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or "/" in name or os.path.exists(spec):      # a bare path
            name, path = "", spec
        if path == "clip":
            scorer = Scorer(name or "clip", "clip", build_head("clip", store.meta["dim"]).to(device), "frozen")
        else:
            if not os.path.isdir(path):
                raise FlowclipError(f"--scorer {spec}: the folder {path} does not exist" + _nearest(path))
            if not os.path.exists(os.path.join(path, "head.safetensors")) and not os.path.exists(
                    os.path.join(path, "DONE")):
                raise FlowclipError(f"--scorer {spec}: {path} is not a finished train-head run folder")
            if not os.path.exists(os.path.join(path, "DONE")):
                raise FlowclipError(f"--scorer {spec}: {path} is an unfinished run")
            head, cfg = load_head(path, device)
            if cfg["store_fingerprint"] != store.fingerprint:
                raise FlowclipError(f"--scorer {spec}: trained on encoder {cfg['store_fingerprint'][:12]}, this store "
                                    f"holds {store.fingerprint[:12]}; refused")
            sha = hashlib.sha256(open(os.path.join(path, "head.safetensors"), "rb").read()).hexdigest()
            label = os.path.basename(os.path.normpath(path))
            scorer = Scorer(name or label, label, head, sha, cfg["train"])
        if scorer.run in seen:
            raise FlowclipError(f"--scorer {spec}: two scorers named {scorer.run!r}")
        seen.add(scorer.run)
        out.append(scorer)
    _same_method(out)
    return out


def _nearest(path: str) -> str:
    import difflib
    parent = os.path.dirname(os.path.normpath(path)) or "."
    if not os.path.isdir(parent):
        return f" (nor does {parent})"
    names = [n for n in os.listdir(parent) if os.path.isdir(os.path.join(parent, n))]
    near = difflib.get_close_matches(os.path.basename(os.path.normpath(path)), names, n=3, cutoff=0.6)
    return f"; did you mean {', '.join(os.path.join(parent, n) for n in near)}?" if near else ""


def _same_method(scorers: list[Scorer]) -> None:
    """Runs grouped under one name are seeds of one method: the same head and settings,
    differing in the seed only."""
    by_name: dict = {}
    for sc in scorers:
        if sc.train is None:
            continue
        settings = {k: v for k, v in sc.train.items() if k != "seed"}
        by_name.setdefault(sc.method, []).append((sc.run, settings))
    for name, runs in by_name.items():
        first_run, first = runs[0]
        for run, settings in runs[1:]:
            differ = sorted(k for k in set(first) | set(settings) if first.get(k) != settings.get(k))
            if differ:
                raise FlowclipError(f"--scorer {name}=...: {first_run} and {run} are grouped as seeds of one method "
                                    f"but differ in {', '.join(f'{k} ({first.get(k)} vs {settings.get(k)})' for k in differ)}; "
                                    f"give them different names")


def find_manifests(paths: list[str]) -> list[str]:
    out = []
    for p in paths:
        if os.path.isdir(p):
            out += sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".parquet"))
        else:
            out.append(p)
    if not out:
        raise FlowclipError(f"no manifests (*.parquet) in {', '.join(paths)}")
    return out


def evaluation_manifests(paths: list[str], log=print) -> list[Manifest]:
    """The manifests to score: files named, and the manifests of folders named. A training
    manifest met in a folder is skipped with a note (folders often hold both); one named
    explicitly is an error."""
    named = {os.path.abspath(p) for p in paths if not os.path.isdir(p)}
    out = []
    for p in find_manifests(paths):
        m = Manifest.read(p)
        if m.kind == "training" and os.path.abspath(p) not in named:
            log(f"note: skipping {p}: a training manifest (score takes evaluation manifests)")
            continue
        out.append(m)
    if not out:
        raise FlowclipError(f"no evaluation manifests in {', '.join(paths)} (only training sets)")
    return out


GENERIC = {"pairwise": Scoring(task="pairwise", tie_rule="wrong"), "candidates": Scoring(task="candidates",
                                                                                         tie_rule="wrong")}


def scoring_of(m: Manifest, log=None) -> tuple[str, Scoring]:
    """A manifest's task name and Scoring: its registered benchmark's, or one declared in
    its metadata ("scoring": {...}), or, for a candidates manifest that declares neither,
    the generic scoring: accuracy, pooled, a tie counted wrong (docs/manifests.md)."""
    name = m.meta.get("benchmark")
    if name and name in all_benchmarks():
        bench = get_benchmark(name)
        if bench.scoring is None or m.kind == "training":
            raise FlowclipError(f"{m.path}: {name} is a training set; score takes evaluation manifests "
                                f"(keep training manifests out of the folders you score, or name files one by one)")
        sc = bench.scoring
    elif m.kind == "training":
        raise FlowclipError(f"{m.path}: a training manifest; score takes evaluation manifests")
    elif m.kind != "candidates":
        raise FlowclipError(f"{m.path}: {'unknown benchmark ' + repr(name) if name else 'no benchmark'} in its "
                            f"flowclip.meta; a {m.kind} manifest needs a registered one "
                            f"({', '.join(sorted(all_benchmarks()))})")
    else:
        name = m.meta.get("name") or name or os.path.splitext(os.path.basename(m.path))[0]
        if "scoring" in m.meta:
            sc = Scoring.declared(m.meta["scoring"], f"{m.path}: flowclip.meta")
            how = "the scoring its metadata declares"
        else:
            two = all(len(c) == 2 for c in m.table.column("captions").to_pylist())
            sc = GENERIC["pairwise" if two else "candidates"]
            how = f"generic {'pairwise' if two else 'candidate-set'} accuracy, a tie counted wrong"
        if log is not None:
            log(f"note: {m.path} names no registered benchmark: scored as {name!r} with {how}")
    needed = {"candidates": ("captions", "gold"), "pairwise": ("captions", "gold"),
              "retrieval": ("captions",), "classification": ("label",)}[sc.task]
    for col in needed + tuple(c for c in (sc.group_by, sc.exclude_column, *sc.report_by) if c):
        if col not in m.table.column_names:
            raise FlowclipError(f"{m.path}: the {name} benchmark needs column {col!r}, which is missing")
    return name, sc


def _chunked_matched(head: Head, bank: FeatureBank, imgs: torch.Tensor, caps: torch.Tensor,
                     max_memory_mb: float = 2048) -> np.ndarray:
    """Scores of matched pairs, in chunks whose gathered features (FP32: each pair's
    patches and tokens, a few copies) take about max_memory_mb at most."""
    d = bank.dim
    per_pair = 4 * d * (3 * (bank.img_patches.shape[1] + bank.max_tokens()) + 4) if head.uses_tokens else 16 * d
    # (the gathered FP32 features of each pair: patches and tokens, a few copies)
    chunk = int(min(4096, max(1, max_memory_mb * 2**20 / per_pair)))
    out = []
    with torch.no_grad():
        for s in range(0, len(imgs), chunk):
            out.append(head.score_matched(*bank.features(imgs[s:s + chunk], caps[s:s + chunk], head.uses_tokens)))
    return torch.cat(out).cpu().numpy() if out else np.zeros(0, np.float32)


def control_images(rec_img: np.ndarray, control: str, seed: int, task: str) -> np.ndarray:
    """Real: the record's image; Shuffle: one seeded permutation of the records' images;
    Fixed: one seeded anchor image for every record."""
    rng = np.random.default_rng([seed, int(hashlib.sha256(task.encode()).hexdigest()[:8], 16)])
    if control == "real":
        return rec_img
    if control == "shuffle":
        return rec_img[rng.permutation(len(rec_img))]
    if control == "fixed":
        return np.full_like(rec_img, rec_img[rng.integers(len(rec_img))])
    raise FlowclipError(f"unknown control {control!r}; use {', '.join(CONTROLS)}")


def aggregate(sc: Scoring, scores: np.ndarray, gold: np.ndarray, cols: dict) -> dict:
    """The official score of a candidate task, with ties, groups and breakdowns."""
    keep = ~np.asarray(cols[sc.exclude_column], bool) if sc.exclude_column else np.ones(len(gold), bool)
    correct, tie = metrics.decisions(scores, gold, sc.tie_rule)
    c, t = correct[keep], tie[keep]
    res = {"n": int(keep.sum()), "excluded": int((~keep).sum()), "ties": int(t.sum()), "tie_rule": sc.tie_rule,
           "pooled": metrics.mean_accuracy(c)}
    if sc.group_by:
        g = np.asarray(cols[sc.group_by])[keep]
        res["by_" + sc.group_by] = metrics.group_accuracies(c, g)
        for name, members in sc.groups:
            res.setdefault("named_groups", {})[name] = _named_group(c, g, members, res["by_" + sc.group_by],
                                                                    sc.group_weighting)
    if sc.aggregate == "mean":
        res["score"] = res["pooled"]
    elif sc.aggregate == "group_means":       # a group with no record scored is left out, and named
        there = [n for n in sc.headline_groups if not np.isnan(res["named_groups"][n])]
        res["score"] = float(np.mean([res["named_groups"][n] for n in there])) if there else float("nan")
        if len(there) < len(sc.headline_groups):
            res["partial"] = f"mean of {', '.join(there)} only: no record of {', '.join(n for n in sc.headline_groups if n not in there)}"
    else:   # macro / subset_mean: unweighted over groups
        g = np.asarray(cols[sc.group_by])[keep]
        res["score"] = metrics.macro_accuracy(c, g, sc.min_group)
        res["groups_used"] = len(metrics.group_accuracies(c, g, sc.min_group))
    for col in sc.report_by:
        res["by_" + col] = metrics.group_accuracies(c, np.asarray(cols[col])[keep].astype(str))
    if sc.extra is not None:
        res["extra"] = sc.extra(c, {k: [v for v, kept in zip(vals, keep) if kept] for k, vals in cols.items()})
    if sc.min_group:
        g = np.asarray(cols[sc.group_by])[keep]
        res["left_out_groups"] = sorted(str(x) for x, n in zip(*np.unique(g, return_counts=True)) if n < sc.min_group)
    if sc.task == "candidates":
        ranks = metrics.gold_rank(scores[keep], gold[keep], sc.tie_rule)
        res["recall"] = {f"R@{k}": metrics.recall_at(ranks, k) for k in sc.recall_at}
        for col in sc.report_by:
            vals = np.asarray(cols[col])[keep].astype(str)
            res.setdefault("recall_by_" + col, {})
            for v in np.unique(vals):
                res["recall_by_" + col][v] = metrics.recall_at(ranks[vals == v], 1)
            res["ties_by_" + col] = {v: int(t[vals == v].sum()) for v in np.unique(vals)}
    return res


def _named_group(correct, groups, members, per_group: dict, weighting: str) -> float:
    """A named group's accuracy: pooled over its records, or the unweighted mean of its
    members' accuracies; NaN when none of its members was scored."""
    present = [m for m in members if m in per_group]
    if not present:
        return float("nan")
    if weighting == "records":
        return metrics.mean_accuracy(correct[np.isin(groups, present)])
    return float(np.mean([per_group[m] for m in present]))


def score_candidates(store, m: Manifest, scorers, controls, seed, device, image_root=None, task: str | None = None,
                     max_memory_mb: int | None = None):
    """Scores [records, candidates] per (control, scorer). Records are scored in chunks
    whose features (own and control images, captions) fit max_memory_mb; a record's
    scores depend on its own features only (chunking moves them by FP32 round-off, from
    batches of another size)."""
    t = m.table.to_pydict()
    captions = t["captions"]
    texts = sorted({c for cs in captions for c in cs})
    ikeys = manifest_keys(store, m, texts, image_root)
    uimg = sorted(set(ikeys))
    img_index = {k: i for i, k in enumerate(uimg)}
    need_tokens = any(s.head.uses_tokens for s in scorers)
    rec_img = np.array([img_index[k] for k in ikeys])
    per_control = {c: control_images(rec_img, c, seed, task or m.meta["benchmark"]) for c in controls}
    kmax = max(map(len, captions))
    out = {(c, s.run): np.full((len(captions), kmax), np.nan, np.float32) for c in controls for s in scorers}
    for chunk in _record_chunks(store, captions, texts, len(uimg), need_tokens, len(controls), max_memory_mb):
        imgs_needed = sorted({int(per_control[c][r]) for c in controls for r in chunk})
        texts_needed = sorted({x for r in chunk for x in captions[r]})
        bank = FeatureBank.load(store, [uimg[i] for i in imgs_needed], texts_needed, need_tokens, device)
        local_img = {g: i for i, g in enumerate(imgs_needed)}
        cap_index = {c: i for i, c in enumerate(texts_needed)}
        rec_of = np.repeat(chunk, [len(captions[r]) for r in chunk])
        slot = np.concatenate([np.arange(len(captions[r])) for r in chunk])
        cap_ids = torch.tensor([cap_index[c] for r in chunk for c in captions[r]], device=device)
        for control in controls:
            imgs = torch.as_tensor([local_img[int(per_control[control][r])] for r in rec_of], device=device)
            for s in scorers:
                out[(control, s.run)][rec_of, slot] = _chunked_matched(s.head, bank, imgs, cap_ids,
                                                                       max_memory_mb or 2048)
    return out, np.array(t["gold"]), t, np.array(ikeys)


def _record_chunks(store, captions, texts, n_images, need_tokens, n_controls, max_memory_mb) -> list[np.ndarray]:
    """Consecutive record ranges whose features take about max_memory_mb at most (all
    records at once when they fit, or when no bound is given)."""
    n = len(captions)
    if not max_memory_mb:
        return [np.arange(n)]
    d, P = store.meta["dim"], store.meta["num_patches"]
    tokens_per_caption = (store.count_tokens([caption_key(c) for c in texts]) / len(texts)) if need_tokens else 0
    per_image = d * 2 * (1 + (P if need_tokens else 0))
    per_record = per_image * (1 + n_controls) + np.mean([len(c) for c in captions]) * d * 2 * (1 + tokens_per_caption)
    whole = n_images * per_image + len(texts) * d * 2 * (1 + tokens_per_caption)
    if whole <= max_memory_mb * 2**20:
        return [np.arange(n)]
    size = max(1, int(max_memory_mb * 2**20 / per_record))
    return [np.arange(a, min(n, a + size)) for a in range(0, n, size)]


def score_retrieval(store, m: Manifest, scorer: Scorer, device, max_memory_mb: int, shortlist: int | None,
                    image_root=None, spill_dir: str | None = None) -> dict:
    """Recall@k both ways over the whole gallery, in memory bounded by max_memory_mb: the
    pair scores are computed in blocks; when the score matrix itself does not fit, it
    goes to a file in spill_dir (the score's own temporary folder) and is read back in
    row blocks. With shortlist, each query's global top K (kept blockwise) is re-ranked
    by the head, and the result is labelled approximate."""
    t = m.table.to_pydict()
    caps = [c for cs in t["captions"] for c in cs]
    ikeys = manifest_keys(store, m, sorted(set(caps)), image_root)
    cap_image = np.repeat(np.arange(len(ikeys)), [len(c) for c in t["captions"]])
    texts = sorted(set(caps))
    cap_index = {c: i for i, c in enumerate(texts)}
    bank = FeatureBank.load(store, list(ikeys), texts, scorer.head.uses_tokens, device)
    cid = torch.tensor([cap_index[c] for c in caps], device=device)
    n_i = len(ikeys)
    budget = max_memory_mb * 2**20
    with torch.no_grad():
        if shortlist and scorer.head.uses_tokens:           # (token heads give coarse global scores)
            img, cap = _shortlist_pairs(scorer.head, bank, cid, n_i, shortlist, budget, device)
            val = _chunked_matched(scorer.head, bank, torch.as_tensor(img, device=device), cid[cap], max_memory_mb)
            res = metrics.retrieval_recall_pairs(img, cap, val, cap_image, n_i)
            res.update(approximate=True, shortlist=shortlist)
            return res
        row_blocks = _score_matrix(scorer.head, bank, cid, n_i, budget, device, spill_dir)
        res = metrics.retrieval_recall_blocks(row_blocks, cap_image, n_i)
    res["approximate"] = False
    return res


def _pair_blocks(head, bank, n_i: int, n_t: int, budget: int) -> tuple[int, int]:
    """Images x captions per block so that the head's intermediates fit the budget."""
    per_pair = head.pair_bytes(bank.max_tokens(), bank.img_patches.shape[1] if head.uses_tokens else 1, bank.dim)
    block = max(1, int(budget / 2 / per_pair))
    bi = max(1, min(n_i, int(block ** 0.5)))
    return bi, max(1, min(n_t, block // bi))


def _score_matrix(head, bank, cid, n_i: int, budget: int, device, spill_dir):
    """The [n_i, n_t] scores as row_blocks() for metrics.retrieval_recall_blocks: kept in
    memory when they take at most a quarter of the budget, else spilled to a file."""
    n_t = len(cid)
    bi, bt = _pair_blocks(head, bank, n_i, n_t, budget)
    rows_per_block = max(bi, int(budget / 4 / (4 * n_t)) // bi * bi or bi)
    in_memory = 4 * n_i * n_t <= budget / 4 or spill_dir is None
    path = None if in_memory else os.path.join(spill_dir, f".retrieval-{uuid.uuid4().hex[:8]}.f32")
    sim = np.empty((n_i, n_t), np.float32) if in_memory else None
    for r0 in range(0, n_i, rows_per_block):
        rows = np.empty((min(n_i, r0 + rows_per_block) - r0, n_t), np.float32)
        for i0 in range(r0, r0 + len(rows), bi):
            ii = torch.arange(i0, min(r0 + len(rows), i0 + bi), device=device)
            for t0 in range(0, n_t, bt):
                tc = cid[t0:t0 + bt]
                rows[i0 - r0:i0 - r0 + len(ii), t0:t0 + len(tc)] = head(*bank.features(ii, tc, head.uses_tokens)).cpu().numpy()
        if in_memory:
            sim[r0:r0 + len(rows)] = rows
        else:
            with open(path, "ab") as f:
                rows.tofile(f)
    if in_memory:
        return lambda: [(0, sim)]

    def from_file():
        with open(path, "rb") as f:
            for r0 in range(0, n_i, rows_per_block):
                n = min(n_i, r0 + rows_per_block) - r0
                yield r0, np.fromfile(f, np.float32, n * n_t).reshape(n, n_t)
    return from_file


def _shortlist_pairs(head, bank, cid, n_i: int, k: int, budget: int, device) -> tuple[np.ndarray, np.ndarray]:
    """(image, caption index) pairs: each image's top k captions and each caption's top k
    images by the head's global score, found block by block (no full matrix)."""
    n_t = len(cid)
    k_t, k_i = min(k, n_t), min(k, n_i)
    _, _, tt, _, _ = bank.features(torch.arange(1, device=device), cid, False)
    rows = max(1, int(budget / (40 * n_t)))      # a block's float32 scores, their copies and int64 indices
    best_v = np.full((k_i, n_t), -np.inf, np.float32)
    best_i = np.zeros((k_i, n_t), np.int64)
    img_top = []
    for i0 in range(0, n_i, rows):
        ii = torch.arange(i0, min(n_i, i0 + rows), device=device)
        v = bank.features(ii, cid[:1], False)[0]
        block = head.coarse(v, tt).cpu().numpy()
        img_top.append(np.argpartition(-block, k_t - 1, axis=1)[:, :k_t].copy() if k_t < n_t   # (not a view
                       else np.tile(np.arange(n_t), (len(ii), 1)))                              # of the block)
        cand_v = np.concatenate([best_v, block])
        cand_i = np.concatenate([best_i, np.repeat(ii.cpu().numpy()[:, None], n_t, 1)])
        keep = np.argpartition(-cand_v, k_i - 1, axis=0)[:k_i] if len(cand_v) > k_i else np.arange(len(cand_v))[:, None]
        best_v = np.take_along_axis(cand_v, keep, 0) if len(cand_v) > k_i else cand_v
        best_i = np.take_along_axis(cand_i, keep, 0) if len(cand_i) > k_i else cand_i
    top_t = np.concatenate(img_top)
    pairs = np.unique(np.concatenate([
        np.stack([np.repeat(np.arange(n_i), k_t), top_t.ravel()], 1),
        np.stack([best_i[np.isfinite(best_v)].ravel(), np.tile(np.arange(n_t), (k_i, 1))[np.isfinite(best_v)]], 1)]),
        axis=0)
    return pairs[:, 0], pairs[:, 1]


def score_classification(store, m: Manifest, scorer: Scorer, device, image_root=None) -> dict:
    prompts = m.meta["prompts"]
    flat = [p for ps in prompts for p in ps]
    ikeys = manifest_keys(store, m, sorted(set(flat)), image_root)
    uimg = sorted(set(ikeys))
    texts = sorted(set(flat))
    bank = FeatureBank.load(store, uimg, texts, scorer.head.uses_tokens, device)
    cap_index = {c: i for i, c in enumerate(texts)}
    cid = torch.tensor([cap_index[p] for p in flat], device=device)
    owner = np.repeat(np.arange(len(prompts)), [len(p) for p in prompts])
    per_class = np.empty((len(uimg), len(prompts)), np.float32)
    with torch.no_grad():
        class_vecs = _ensembled_classes(scorer.head, bank, cid, owner, len(prompts), device)
        for i0 in range(0, len(uimg), 64):
            ii = torch.arange(i0, min(len(uimg), i0 + 64), device=device)
            if class_vecs is not None:        # CLIP's rule: 100 * v . (renormalised mean prompt embedding)
                v = bank.features(ii, cid[:1], False)[0].float()
                per_class[i0:i0 + len(ii)] = (100.0 * v @ class_vecs.T).cpu().numpy()
            else:                             # a pairwise head: the mean of its per-prompt scores
                logits = scorer.head(*bank.features(ii, cid, scorer.head.uses_tokens)).cpu().numpy()
                per_class[i0:i0 + len(ii)] = np.stack([logits[:, owner == c].mean(1) for c in range(len(prompts))], 1)
    img_row = {k: i for i, k in enumerate(uimg)}
    labels = np.array(m.table.column("label").to_pylist())
    res = metrics.topk_accuracy(per_class[[img_row[k] for k in ikeys]], labels, (1, 5))
    res["prompt_ensemble"] = "embedding" if class_vecs is not None else "score"
    return res


def _ensembled_classes(head, bank, cid, owner, n_classes: int, device) -> torch.Tensor | None:
    """[C, d] class vectors for an embedding scorer (CLIP_benchmark's zero_shot_classifier:
    the mean of the L2-normalised prompt embeddings, renormalised), else None."""
    t = bank.features(torch.arange(1, device=device), cid, False)[2].float()
    z = head.caption_embedding(t)
    if z is None:
        return None
    z = F.normalize(z, dim=-1)
    own = torch.as_tensor(owner, device=z.device)
    c = torch.stack([z[own == k].mean(0) for k in range(n_classes)])
    return c / c.norm(dim=-1, keepdim=True)


def bootstrap_task(name: str, sc: Scoring, cols: dict, ikeys: np.ndarray, correct: dict, all_images: dict) -> dict:
    """One task's input to the paired bootstrap: the records its official score uses
    (excluded records and groups below min_group left out, as the official score leaves
    them), each record's image index into the study-wide list (all_images, grown here)
    and each run's decisions."""
    n = len(ikeys)
    keep = ~np.asarray(cols[sc.exclude_column], bool) if sc.exclude_column else np.ones(n, bool)
    groups = np.asarray(cols[sc.group_by])[keep] if sc.aggregate != "mean" else None
    keep_idx = np.flatnonzero(keep)
    if sc.aggregate == "group_means":          # records labelled by their headline group; others left out
        label = {m: name for name, members in sc.groups if name in sc.headline_groups for m in members}
        groups = np.array([label.get(str(g), "") for g in groups], dtype=object)
        sel = groups != ""
        keep_idx, groups = keep_idx[sel], groups[sel]
    if groups is not None and sc.min_group:
        sizes = dict(zip(*np.unique(groups, return_counts=True)))
        sel = np.array([sizes[g] >= sc.min_group for g in groups], bool)
        keep_idx, groups = keep_idx[sel], groups[sel]
    idx = np.array([all_images.setdefault(k, len(all_images)) for k in ikeys[keep_idx]], np.int64)
    return {"name": name, "image_index": idx, "groups": groups,
            "correct": {r: c[keep_idx] for r, c in correct.items()}}


def cross_task_means(results: dict, benches: dict[str, Scoring], runs: list[str],
                     expected: dict[str, list[str]] | None = None) -> dict:
    """binding7 / all11 / aro / controls6 from each benchmark's joins declaration. With
    expected (mean -> every member the registry declares), a mean missing some members
    is marked partial and names what it used and what is missing."""
    out = {}
    for (control, run), per_task in results.items():
        members: dict[str, list] = {}
        for bench, sc in benches.items():
            r = per_task.get(bench)
            if r is None:
                continue
            for mean_name, group in sc.joins:
                val = r["score"] if not group else r.get("named_groups", {}).get(group)
                members.setdefault(mean_name, []).append((f"{bench}/{group}" if group else bench, val))
        out[f"{control}|{run}"] = {}
        for k, vs in members.items():
            entry = {"mean": float(np.mean([v for _, v in vs])), "members": [n for n, _ in vs]}
            short = [n for n, _ in vs if "excluded_failed" in per_task.get(n.split("/")[0], {})]
            if expected is not None and k in expected:
                missing = [m for m in expected[k] if m not in entry["members"]]
                entry.update(expected=len(expected[k]), partial=bool(missing), missing=missing)
            if short:
                entry.update(partial=True, members_with_excluded_records=short)
            out[f"{control}|{run}"][k] = entry
    return out


def expected_members() -> dict[str, list[str]]:
    """Every member of every cross-task mean, as the registry declares them."""
    from .datasets import all_benchmarks
    out: dict[str, list[str]] = {}
    for name, b in all_benchmarks().items():
        for mean_name, group in (b.scoring.joins if b.scoring else ()):
            out.setdefault(mean_name, []).append(f"{name}/{group}" if group else name)
    return out


def run_score(store: FeatureStore, manifest_paths: list[str], scorer_specs: list[str], out: str, *,
              controls=("real",), device: str = "cpu", seed: int = 0, bootstrap_draws: int = 10_000,
              max_memory_mb: int = 2048, shortlist: int | None = None, overwrite: bool = False,
              image_root: str | None = None, compare: list[tuple[str, str]] | None = None, progress: bool = True,
              log=print) -> dict:
    """compare: (baseline, other) method pairs for the bootstrap; default every pair."""
    outputs.check_replaceable(out, "score-results", overwrite)
    scorers = load_scorers(scorer_specs, store, device)
    checked = [(m, *scoring_of(m, log)) for m in evaluation_manifests(manifest_paths, log)]   # fail before any work
    names = [n for _, n, _ in checked]
    if len(set(names)) < len(names):
        raise FlowclipError(f"two manifests score as the same task ({', '.join(sorted({n for n in names if names.count(n) > 1}))}); "
                            f"give one a different flowclip.meta 'name'")
    tmp = f"{out}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    os.makedirs(tmp)
    try:
        summary = _score_all(store, checked, scorers, tmp, controls, device, seed, bootstrap_draws, max_memory_mb,
                             shortlist, image_root, compare, progress, log)
        outputs.publish(tmp, out, "score-results", overwrite)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)       # a failure (or a full disk) leaves nothing behind
    log(f"wrote {out}")
    return summary


def _score_all(store, checked, scorers, tmp, controls, device, seed, bootstrap_draws, max_memory_mb, shortlist,
               image_root, compare, progress, log) -> dict:
    from .progress import bar
    t0 = time.perf_counter()
    records_bar = bar(sum(len(m) for m, _, _ in checked), "score", "record", progress)
    results: dict = {}            # (control, run) -> benchmark -> result
    record_rows, boot_tasks, changes = [], [], {}
    all_images: dict[str, int] = {}
    benches: dict[str, Scoring] = {}
    excluded: dict[str, list[dict]] = {}
    for m, name, sc in checked:
        benches[name] = sc
        records_bar.update(len(m))
        m, dropped = drop_failed_rows(store, m, image_root)
        if dropped:
            excluded[name] = dropped
            log(f"{name}: {len(dropped)} records left out: extract recorded their image or caption as failed "
                f"(first: {dropped[0]['record']}, {dropped[0]['reason']})")
        if not len(m):
            raise FlowclipError(f"{m.path}: every record's image or caption failed at extract; nothing to score")
        log(f"scoring {name} ({len(m)} records, {sc.task})")
        if sc.task in ("pairwise", "candidates"):
            mats, gold, cols, ikeys = score_candidates(store, m, scorers, controls, seed, device, image_root, name,
                                                       max_memory_mb)
            correct_real = {}
            ids = [str(x) for x in cols.get("record_id", range(len(gold)))]
            for (control, run), mat in mats.items():
                res = aggregate(sc, mat, gold, cols)
                results.setdefault((control, run), {})[name] = res
                correct = metrics.decisions(mat, gold, sc.tie_rule)[0]
                if control == "real":
                    correct_real[run] = correct
                record_rows += [{"benchmark": name, "record_id": rid, "control": control, "scorer": run,
                                 "scores": row[~np.isnan(row)].tolist(), "gold": g, "correct": c}
                                for rid, row, g, c in zip(ids, mat, gold.tolist(), correct.tolist())]
            runs = [s.run for s in scorers]
            changes[name] = {f"{b} vs {a}": metrics.decision_changes(correct_real[a], correct_real[b])
                             for i, a in enumerate(runs) for b in runs[i + 1:]} if "real" in controls else {}
            if "real" in controls:
                boot_tasks.append(bootstrap_task(name, sc, cols, ikeys, correct_real, all_images))
        elif sc.task == "retrieval":
            for s in scorers:
                results.setdefault(("real", s.run), {})[name] = score_retrieval(store, m, s, device, max_memory_mb,
                                                                                shortlist, image_root, tmp)
        else:
            for s in scorers:
                results.setdefault(("real", s.run), {})[name] = score_classification(store, m, s, device, image_root)

    for per_task in results.values():               # a figure resting on a part of its records says so
        for name, dropped in excluded.items():
            if name in per_task:
                per_task[name]["excluded_failed"] = dropped
                per_task[name]["partial"] = "; ".join(filter(None, [per_task[name].get("partial"), (
                    f"{len(dropped)} records left out (extract recorded their image or caption as failed; listed "
                    f"in results.json under excluded_failed)")]))
    methods: dict[str, list[str]] = {}
    for s in scorers:
        methods.setdefault(s.method, []).append(s.run)
    names = list(methods)
    pairs = [(names[i], names[j]) for i in range(len(names)) for j in range(i + 1, len(names))] \
        if compare is None else list(compare)
    for a, b in pairs:
        if a not in methods or b not in methods:
            raise FlowclipError(f"bootstrap comparison {a} vs {b}: no such scorer (have {', '.join(methods)})")
    bootstrap = paired_bootstrap(boot_tasks, methods, pairs, len(all_images), bootstrap_draws, seed) \
        if pairs and boot_tasks and bootstrap_draws else {}
    summary = {
        "store": store.root, "store_fingerprint": store.fingerprint,
        "scorers": [{"run": s.run, "method": s.method, "head_sha256": s.head_sha256, "kind": s.head.kind}
                    for s in scorers],
        "git_revision": _git_revision(), "controls": list(controls), "seed": seed,
        "units": "fractions in [0, 1] (accuracies, recalls); the bootstrap in percentage points; "
                 "results.md and results.csv in percent",
        "results": {f"{c}|{r}": v for (c, r), v in results.items()},
        "cross_task_means": cross_task_means(results, benches, [s.run for s in scorers], expected_members()),
        "decision_changes": changes, "bootstrap": bootstrap, "seconds": time.perf_counter() - t0,
    }
    write_outputs(tmp, summary, record_rows, scorers, controls, benches)
    return summary


def headline(res: dict) -> float:
    """The one number a task reports: its official score, or R@1 / top-1."""
    if "score" in res:
        return res["score"]
    return res.get("i2t_R@1", res.get("top1", float("nan")))


def write_outputs(folder: str, summary: dict, record_rows: list, scorers, controls, benches) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    with open(os.path.join(folder, "results.json"), "w") as f:
        json.dump(summary, f, indent=1)
    if record_rows:
        pq.write_table(pa.Table.from_pylist(record_rows), os.path.join(folder, "records.parquet"))
    md, csv_rows = results_markdown(summary, scorers, controls, benches)
    open(os.path.join(folder, "results.md"), "w").write("\n".join(md) + "\n")
    open(os.path.join(folder, "results.csv"), "w").write("\n".join(csv_rows) + "\n")
    write_figures(folder, summary, record_rows)


def write_figures(folder: str, summary: dict, record_rows: list) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    # gold-foil margins of pairwise tasks, Real control, one panel per benchmark
    by_task: dict = {}
    for r in record_rows:
        if r["control"] == "real" and len(r["scores"]) == 2:
            by_task.setdefault(r["benchmark"], {}).setdefault(r["scorer"], []).append(
                metrics.margin(r["scores"], r["gold"]))
    for task, per in by_task.items():
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for run, margins in per.items():
            ax.hist(margins, bins=40, alpha=0.5, label=run)
        ax.axvline(0, color="k", lw=0.8)
        ax.set_xlabel("gold - foil score")
        ax.set_ylabel("records")
        ax.set_title(f"{task}: margins (Real)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(folder, f"margins_{task}.png"), dpi=100)
        plt.close(fig)
    # Recall@1 against complexity (CREPE), per scorer and foil type
    for key, per in summary["results"].items():
        control, run = key.split("|")
        for task, r in per.items():
            if "recall_by_complexity" in r and control == "real":
                fig, ax = plt.subplots(figsize=(5, 3.5))
                xs = sorted(r["recall_by_complexity"], key=int)
                ax.plot([int(x) for x in xs], [r["recall_by_complexity"][x] for x in xs], marker="o", label=run)
                ax.set_xlabel("complexity")
                ax.set_ylabel("Recall@1")
                ax.set_title(task)
                ax.legend()
                fig.tight_layout()
                fig.savefig(os.path.join(folder, f"recall_vs_complexity_{task}_{run}.png"), dpi=100)
                plt.close(fig)
