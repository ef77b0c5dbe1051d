"""The task engines of flowclip score, one per task kind: candidate sets and pairs
(scores per record and candidate, per scorer and image control, in memory-bounded
chunks), retrieval (exact or shortlisted, in blocks), and zero-shot classification."""

from __future__ import annotations

import os
import uuid

import numpy as np
import torch
import torch.nn.functional as F

from ..hashing import caption_key
from ..heads import Head
from ..heads.fixed_shapes import IMAGE_BLOCK, TEXT_BLOCK, all_pair_scores, matched_scores
from ..manifest import Manifest
from ..store.banks import FeatureBank
from ..store.manifest_keys import manifest_keys
from . import metrics
from .scorers import Scorer, control_images


def _chunked_matched(
    head: Head, bank: FeatureBank, imgs: torch.Tensor, caps: torch.Tensor, max_memory_mb: float = 2048
) -> np.ndarray:
    """Scores of matched pairs, in chunks whose gathered features (FP32: each pair's
    patches and tokens, a few copies) take about max_memory_mb at most."""
    d = bank.dim
    per_pair = 4 * d * (3 * (bank.img_patches.shape[1] + bank.max_tokens()) + 4) if head.uses_tokens else 16 * d
    # (the gathered FP32 features of each pair: patches and tokens, a few copies)
    chunk = int(min(4096, max(1, max_memory_mb * 2**20 / per_pair)))
    out = []
    with torch.no_grad():
        for s in range(0, len(imgs), chunk):
            images, image_of = torch.unique(imgs[s : s + chunk], return_inverse=True)  # each image's parts once
            v, P, t, H, mask = bank.features(images, caps[s : s + chunk], head.uses_tokens)
            out.append(matched_scores(head, v, P, t, H, mask, image_of=image_of))
    return torch.cat(out).cpu().numpy() if out else np.zeros(0, np.float32)


def score_candidates(
    store,
    m: Manifest,
    scorers,
    controls,
    seed,
    device,
    image_root=None,
    task: str | None = None,
    max_memory_mb: int | None = None,
):
    """Scores [records, candidates] per (control, scorer). Records are scored in chunks
    whose features (own and control images, captions) fit max_memory_mb; a record's
    scores depend on its own features only, bit for bit (heads/fixed_shapes.py)."""
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
                out[(control, s.run)][rec_of, slot] = _chunked_matched(
                    s.head, bank, imgs, cap_ids, max_memory_mb or 2048
                )
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


def score_retrieval(
    store,
    m: Manifest,
    scorer: Scorer,
    device,
    max_memory_mb: int,
    shortlist: int | None,
    image_root=None,
    spill_dir: str | None = None,
    tie_rule: str = "wrong",
    read: dict | None = None,
) -> dict:
    """Recall@k both ways over the whole gallery, in memory bounded by max_memory_mb: the
    pair scores are computed in blocks; when the score matrix itself does not fit, it
    goes to a file in spill_dir (the score's own temporary folder) and is read back in
    row blocks. With shortlist, each query's global top K (kept blockwise) is re-ranked
    by the head, and the result is labelled approximate (a tie in it counted wrong).
    tie_rule "topk": the queries decided as torch.topk keeps candidates (CLIP_benchmark,
    NegBench), on the whole matrix. read: what
    one score's scorers share of this manifest (its keys and feature bank), filled by the
    first of them and read by the rest."""
    read = {} if read is None else read
    t = m.table.to_pydict()
    caps = [c for cs in t["captions"] for c in cs]
    texts = sorted(set(caps))
    ikeys = shared_keys(read, store, m, texts, image_root)
    cap_image = np.repeat(np.arange(len(ikeys)), [len(c) for c in t["captions"]])
    n_i = len(ikeys)
    budget = max_memory_mb * 2**20
    if shortlist and scorer.head.uses_tokens:  # (token heads give coarse global scores)
        cap_index = {c: i for i, c in enumerate(texts)}
        bank = FeatureBank.load(store, list(ikeys), texts, True, device)
        cid = torch.tensor([cap_index[c] for c in caps], device=device)
        with torch.no_grad():
            img, cap = _shortlist_pairs(scorer.head, bank, cid, n_i, shortlist, budget, device)
            val = _chunked_matched(scorer.head, bank, torch.as_tensor(img, device=device), cid[cap], max_memory_mb)
        res = metrics.retrieval_recall_pairs(img, cap, val, cap_image, n_i)
        # approximate, and a tie inside the shortlist counts against the query whatever the set's rule
        res.update(approximate=True, shortlist=shortlist, tie_rule="wrong")
        return res
    row_blocks = retrieval_scores(store, ikeys, caps, scorer, device, budget, spill_dir, read.setdefault("banks", {}))
    if tie_rule == "topk":
        res = metrics.retrieval_recall_topk(row_blocks, cap_image, n_i, columns=max(1, budget // 16 // max(n_i, 1)))
        res["tie_rule"] = "topk"
        return {**res, "approximate": False}
    res = metrics.retrieval_recall_blocks(row_blocks, cap_image, n_i)
    res["approximate"] = False
    return res


def retrieval_scores(
    store, ikeys: list, caps: list[str], scorer: Scorer, device, budget: int, spill_dir=None, banks: dict | None = None
):
    """The gallery's [images, captions] scores (ikeys: each record's image key, caps: every
    caption in record order) as row_blocks() for metrics.retrieval_recall_blocks. Each
    distinct image and caption text is scored once and the matrix indexed out of that, so
    the same image or caption text gives the same bits wherever it recurs (a duplicate
    never wins or loses a tie by rounding). banks: the gallery's feature banks kept for the
    next scorer (by whether they hold tokens; one with tokens serves every head)."""
    texts = sorted(set(caps))
    uimg = sorted(set(ikeys))
    where = {k: i for i, k in enumerate(uimg)}
    img_of = np.array([where[k] for k in ikeys], np.int64)
    cap_index = {c: i for i, c in enumerate(texts)}
    text_of = np.array([cap_index[c] for c in caps], np.int64)
    bank = shared_bank(banks, store, uimg, texts, scorer.head.uses_tokens, device)
    with torch.no_grad():
        return _score_matrix(scorer.head, bank, (len(uimg), len(texts)), img_of, text_of, budget, device, spill_dir)


def shared_keys(read: dict, store, m: Manifest, texts: list[str], image_root) -> list[str]:
    """The manifest's image keys (manifest_keys: every feature found), looked up for the
    first of a score's scorers and kept in read for the rest."""
    if "ikeys" not in read:
        read["ikeys"] = manifest_keys(store, m, texts, image_root)
    return read["ikeys"]


def shared_bank(banks: dict | None, store, uimg: list, texts: list[str], tokens: bool, device) -> FeatureBank:
    """A manifest's feature bank for one scorer, kept in banks (by whether it holds tokens)
    for the scorers after it: a bank with tokens serves every head, and replaces one without."""
    banks = {} if banks is None else banks
    if True not in banks and tokens not in banks:
        banks.clear()
        banks[tokens] = FeatureBank.load(store, uimg, texts, tokens, device)
    return banks[True] if True in banks else banks[tokens]


def _pair_blocks(head, bank, n_t: int, budget: int) -> tuple[int, int]:
    """Images x captions gathered per call of all_pair_scores, which bounds the head's own
    intermediates by scoring in fixed blocks: images a whole IMAGE_BLOCK, captions as many
    whole TEXT_BLOCKs as their gathered features fit in a quarter of the budget."""
    per_caption = 4 * bank.dim * ((bank.max_tokens() if head.uses_tokens else 0) + 1)
    bt = max(TEXT_BLOCK, int(budget / 4 / per_caption) // TEXT_BLOCK * TEXT_BLOCK)
    return IMAGE_BLOCK, min(n_t, bt)


def _score_matrix(head, bank, shape, img_of: np.ndarray, text_of: np.ndarray, budget: int, device, spill_dir):
    """Scores of the bank's distinct images x distinct texts (shape), kept in memory when they take
    at most a quarter of the budget, else spilled to a file; returned as row_blocks() of the
    gallery's [len(img_of), len(text_of)] matrix (row r is image img_of[r], column j text
    text_of[j]). Captions go in order of their token count, so that all_pair_scores' blocks
    of one count are full."""
    n_ui, n_ut = shape
    order = torch.argsort(bank.token_lengths(), stable=True) if head.uses_tokens else torch.arange(n_ut)
    bi, bt = _pair_blocks(head, bank, n_ut, budget)
    rows_per_block = max(bi, int(budget / 4 / (4 * max(n_ut, len(text_of)))) // bi * bi or bi)
    in_memory = 4 * n_ui * n_ut <= budget / 4 or spill_dir is None
    path = None if in_memory else os.path.join(spill_dir, f".retrieval-{uuid.uuid4().hex[:8]}.f32")
    sim = np.empty((n_ui, n_ut), np.float32) if in_memory else None
    for r0 in range(0, n_ui, rows_per_block):
        rows = np.empty((min(n_ui, r0 + rows_per_block) - r0, n_ut), np.float32)
        for i0 in range(r0, r0 + len(rows), bi):
            ii = torch.arange(i0, min(r0 + len(rows), i0 + bi), device=device)
            for t0 in range(0, n_ut, bt):
                tc = order[t0 : t0 + bt]
                rows[i0 - r0 : i0 - r0 + len(ii), tc.numpy()] = (
                    all_pair_scores(head, *bank.features(ii, tc.to(device), head.uses_tokens)).cpu().numpy()
                )
        if sim is not None:
            sim[r0 : r0 + len(rows)] = rows
        else:
            assert path is not None
            with open(path, "ab") as f:
                rows.tofile(f)

    def row_blocks():
        src = sim if sim is not None else np.memmap(path, np.float32, "r", shape=(n_ui, n_ut))
        for r0 in range(0, len(img_of), rows_per_block):
            yield r0, np.asarray(src[img_of[r0 : r0 + rows_per_block]])[:, text_of]

    return row_blocks


def _shortlist_pairs(head, bank, cid, n_i: int, k: int, budget: int, device) -> tuple[np.ndarray, np.ndarray]:
    """(image, caption index) pairs: each image's top k captions and each caption's top k
    images by the head's global score, found block by block (no full matrix). Ties at
    the k-th place keep the lower index (metrics.top_k), so the pairs do not depend on
    the block size (--max-memory)."""
    n_t = len(cid)
    k_t, k_i = min(k, n_t), min(k, n_i)
    _, _, tt, _, _ = bank.features(torch.arange(1, device=device), cid, False)
    rows = max(1, int(budget / (40 * n_t)))  # a block's float32 scores, their copies and int64 indices
    best_v = np.full((k_i, n_t), -np.inf, np.float32)
    best_i = np.zeros((k_i, n_t), np.int64)
    img_top = []
    for i0 in range(0, n_i, rows):  # images in increasing order: a position is an image index
        ii = torch.arange(i0, min(n_i, i0 + rows), device=device)
        v = bank.features(ii, cid[:1], False)[0]
        block = head.coarse(v, tt).cpu().numpy()
        img_top.append(metrics.top_k(block, k_t, axis=1))
        cand_v = np.concatenate([best_v, block])
        cand_i = np.concatenate([best_i, np.repeat(ii.cpu().numpy()[:, None], n_t, 1)])
        # the running best come first and hold lower image indices: ties keep the lower index
        keep = metrics.top_k(cand_v, k_i, axis=0)
        best_v, best_i = np.take_along_axis(cand_v, keep, 0), np.take_along_axis(cand_i, keep, 0)
    top_t = np.concatenate(img_top)
    pairs = np.unique(
        np.concatenate(
            [
                np.stack([np.repeat(np.arange(n_i), k_t), top_t.ravel()], 1),
                np.stack(
                    [best_i[np.isfinite(best_v)].ravel(), np.tile(np.arange(n_t), (k_i, 1))[np.isfinite(best_v)]], 1
                ),
            ]
        ),
        axis=0,
    )
    return pairs[:, 0], pairs[:, 1]


def score_classification(store, m: Manifest, scorer: Scorer, device, image_root=None, read: dict | None = None) -> dict:
    """Top-1 and top-5 accuracy (not for a set of several labels an image), and a set's
    own metric where its metadata names one (ELEVATER's: `score`); read: what one score's
    scorers share of this manifest."""
    per_class, ensemble = classification_scores(store, m, scorer, device, image_root, read)
    labels = np.array(m.table.column("label").to_pylist())
    res = {} if m.meta.get("multilabel") else metrics.topk_accuracy(per_class, labels, (1, 5))
    res["prompt_ensemble"] = ensemble
    if "metric" in m.meta:
        from .elevater import elevater_metric, probabilities

        # ELEVATER's softmax(100 * cosine): an embedding scorer's logits carry the 100; a
        # pairwise head's class score stands where the cosine stands
        probs = probabilities(per_class if ensemble == "embedding" else 100.0 * per_class)
        if m.meta.get("multilabel"):
            targets = np.zeros(per_class.shape, np.int64)
            for i, ls in enumerate(m.table.column("labels").to_pylist()):
                targets[i, ls] = 1
            res["score"] = elevater_metric(m.meta["metric"], probs, targets)
        else:
            res["score"] = elevater_metric(m.meta["metric"], probs, labels)
        res["metric"] = m.meta["metric"]
    if m.meta.get("partial"):
        res["partial"] = m.meta["partial"]
    return res


# images a pairwise head classifies per call: each call prepares every prompt's token side
# again, so small blocks spend most of their time there (64 images ran at half the kernel's
# rate, benchmarks/bench_zeroshot.py); 1,024 ViT-B/32 images' patches are 100 MB in float32
PAIRWISE_IMAGE_BLOCK = 1024


def classification_scores(
    store, m: Manifest, scorer: Scorer, device, image_root=None, read: dict | None = None
) -> tuple[np.ndarray, str]:
    """[records, classes] zero-shot scores, and how prompts were ensembled. Two classes
    with the same prompts score the same bits: an embedding scorer's logits are
    CLIP_benchmark's (100 * v @ a contiguous [d, C] classifier), each duplicate class then
    given its first occurrence's column (a GEMM may round two equal columns apart, and
    topk would then decide their tie image by image); a pairwise head scores each distinct
    prompt text once."""
    prompts = m.meta["prompts"]
    flat = [p for ps in prompts for p in ps]
    read = {} if read is None else read
    texts = sorted(set(flat))
    ikeys = shared_keys(read, store, m, texts, image_root)
    uimg = sorted(set(ikeys))
    bank = shared_bank(read.setdefault("banks", {}), store, uimg, texts, scorer.head.uses_tokens, device)
    cap_index = {c: i for i, c in enumerate(texts)}
    cid = torch.tensor([cap_index[p] for p in flat], device=device)
    owner = np.repeat(np.arange(len(prompts)), [len(p) for p in prompts])
    per_class = np.empty((len(uimg), len(prompts)), np.float32)
    with torch.no_grad():
        class_vecs = _ensembled_classes(scorer.head, bank, cid, owner, len(prompts), device)
        if class_vecs is not None:
            classifier = class_vecs.T.contiguous()  # [d, C], as CLIP_benchmark's zero_shot_classifier stacks it
            first = _first_equal_row(class_vecs)
        every_text = torch.arange(len(texts), device=device)
        block = 64 if class_vecs is not None else PAIRWISE_IMAGE_BLOCK
        for i0 in range(0, len(uimg), block):
            ii = torch.arange(i0, min(len(uimg), i0 + block), device=device)
            if class_vecs is not None:  # CLIP's rule: 100 * v . (renormalised mean prompt embedding)
                v = bank.features(ii, cid[:1], False)[0].float()
                per_class[i0 : i0 + len(ii)] = (100.0 * v @ classifier).cpu().numpy()[:, first]
            else:  # a pairwise head: the mean of its per-prompt scores, each text scored once
                scored = all_pair_scores(scorer.head, *bank.features(ii, every_text, scorer.head.uses_tokens))
                logits = scored.cpu().numpy()
                logits = logits[:, cid.cpu().numpy()]
                per_class[i0 : i0 + len(ii)] = np.stack([logits[:, owner == c].mean(1) for c in range(len(prompts))], 1)
    img_row = {k: i for i, k in enumerate(uimg)}
    return per_class[[img_row[k] for k in ikeys]], "embedding" if class_vecs is not None else "score"


def _first_equal_row(x: torch.Tensor) -> np.ndarray:
    """For each row, the index of the first row bit-identical to it."""
    seen: dict[bytes, int] = {}
    rows = x.cpu().numpy()
    return np.array([seen.setdefault(r.tobytes(), i) for i, r in enumerate(rows)], np.int64)


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
