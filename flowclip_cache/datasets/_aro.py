"""Shared reading of ARO's files (mertyg/vision-language-models-are-bows)."""

from __future__ import annotations

import os
import random
import re

from ..errors import FlowclipError
from .base import Benchmark, BuildReport, RowErrors, Scoring, load_json, text_field, write_records

NOUN_TAGS = {"NN", "NNS", "NNP", "NNPS"}
ADJ_TAGS = {"JJ", "JJR", "JJS"}


def vg_items(path: str, errors: RowErrors, class_of) -> list[dict]:
    """VG-Relation / VG-Attribution JSON list -> candidate rows (gold first), cropped to the bbox."""
    rows = []
    for i, rec in enumerate(load_json(path)):
        where = f"item {i}"
        gold = text_field(rec, "true_caption", path, where, errors)
        foil = text_field(rec, "false_caption", path, where, errors)
        image = text_field(rec, "image_path", path, where, errors)
        if None in (gold, foil, image):
            continue
        try:
            box = [float(rec[k]) for k in ("bbox_x", "bbox_y", "bbox_w", "bbox_h")]
        except (KeyError, TypeError, ValueError):
            errors(path, where, "missing or non-numeric bbox_x/bbox_y/bbox_w/bbox_h")
            continue
        cls = class_of(rec)
        if cls is None:
            errors(path, where, "missing its class key (relation_name / attributes)")
            continue
        rows.append(
            {"record_id": f"{i}", "image": image, "captions": [gold, foil], "gold": 0, "crop": box, "class": cls}
        )
    return rows


def pre_caption(caption: str, max_words: int = 30) -> str:
    """ARO's caption clean-up: lower case, punctuation .!"()*#:; ~ to spaces, at most max_words."""
    caption = re.sub(r"([.!\"()*#:;~])", " ", caption.lower())
    caption = re.sub(r"\s{2,}", " ", caption).rstrip("\n").strip(" ")
    words = caption.split(" ")
    return " ".join(words[:max_words])


def spacy_tagger():
    """The POS tagger ARO uses (spaCy en_core_web_sm), an optional dependency."""
    try:
        import spacy

        nlp = spacy.load("en_core_web_sm")
    except (ImportError, OSError) as e:
        raise FlowclipError(
            "the ARO order converters tag parts of speech with spaCy's English model, which is not "
            "installed: pip install spacy && python -m spacy download en_core_web_sm"
        ) from e
    return lambda text: [(t.text, t.tag_) for t in nlp(text)]


def order_foils(caption: str, tagged: list[tuple[str, str]], rng: random.Random) -> list[str]:
    """ARO's four shuffles: nouns+adjectives, all but nouns+adjectives, within trigrams, trigrams.
    (ARO tokenises trigrams with nltk; we use the tagger's tokens, one tokeniser for all four.)"""
    tokens = [t for t, _ in tagged]

    def shuffled_at(words, idx):
        out, vals = list(words), [words[i] for i in idx]
        rng.shuffle(vals)
        for i, v in zip(idx, vals):
            out[i] = v
        return out

    nouns = [i for i, (_, tag) in enumerate(tagged) if tag in NOUN_TAGS]
    adjs = [i for i, (_, tag) in enumerate(tagged) if tag in ADJ_TAGS]
    rest = [i for i, (_, tag) in enumerate(tagged) if tag not in NOUN_TAGS | ADJ_TAGS]
    nouns_adj = shuffled_at(shuffled_at(tokens, nouns), adjs)
    allbut = shuffled_at(tokens, rest)
    trigrams = [tokens[i : i + 3] for i in range(0, len(tokens), 3)]
    within = [w for tri in trigrams for w in rng.sample(tri, len(tri))]
    rng.shuffle(trigrams)
    across = [w for tri in trigrams for w in tri]
    return [" ".join(x) for x in (nouns_adj, allbut, within, across)]


def order_rows(source: str, errors: RowErrors, tagger, seed: int, prefix: str) -> list[dict]:
    """Karpathy test JSON (list of {image, caption: [...]}) -> 5-candidate records."""
    path = source
    data = load_json(path)
    if tagger is None:
        tagger = spacy_tagger()
    rows = []
    for i, ann in enumerate(data):
        where = f"item {i}"
        image = text_field(ann, "image", path, where, errors)
        caps = ann.get("caption") if isinstance(ann, dict) else None
        if image is None:
            continue
        if not isinstance(caps, list) or not caps:
            errors(path, where, "missing list 'caption'")
            continue
        for j, cap in enumerate(caps):
            if not isinstance(cap, str) or not cap.strip():
                errors(path, f"{where} caption {j}", "empty caption")
                continue
            rng = random.Random(f"{seed}:{i}:{j}")
            foils = order_foils(cap, tagger(cap), rng)
            rows.append(
                {
                    "record_id": f"{prefix}{i}/{j}",
                    "image": image,
                    "captions": [pre_caption(cap)] + [pre_caption(f) for f in foils],
                    "gold": 0,
                }
            )
    return rows


def karpathy_file(source: str, name: str) -> str:
    return source if os.path.isfile(source) else os.path.join(source, name)


def order_benchmark(name: str, title: str, filename: str) -> Benchmark:
    """COCO-/Flickr30k-Order: five candidates (the caption and ARO's four shuffles),
    precision@1; a tie goes to the earliest candidate, the gold (ARO's np.argmax)."""

    def build(source: str, out: str, errors: RowErrors, seed: str = "0", tagger=None) -> BuildReport:
        rows = order_rows(karpathy_file(source, filename), errors, tagger, int(seed), name.split("-", 1)[1] + "/")
        report = BuildReport(len(rows), len({r["image"] for r in rows}), {}, errors.skipped)
        return write_records(out, rows, "candidates", name, report, {"seed": int(seed)})

    return Benchmark(
        name=name,
        title=title,
        kind="candidates",
        build=build,
        scoring=Scoring(task="candidates", tie_rule="first", joins=(("aro", ""), ("all11", ""))),
        options={"seed": "seed of the shuffles (default 0)"},
    )
