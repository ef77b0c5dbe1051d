"""Full-caption hard negatives for one's own captions (flowclip negatives).

Kinds: swap-att (two attribute words trade places), swap-obj (two object nouns trade
places), shuffle-bigram (the caption's bigrams in another order), wordnet (a noun
replaced by a WordNet co-hyponym; needs nltk's WordNet, an optional dependency).
Word classes come from small built-in lexicons, so no tagger is needed. Every
negative differs from its positive as a string; deterministic by seed."""

from __future__ import annotations

import random
import re

from .errors import FlowclipError

KINDS = ("swap-att", "swap-obj", "shuffle-bigram", "wordnet")
ATTRIBUTES = set(
    """red orange yellow green blue purple pink brown black white gray grey silver gold golden
beige tan small large big little tiny huge tall short long wide narrow old new young wooden metal plastic
glass stone brick leather striped spotted dark bright wet dry empty full open closed clean dirty""".split()
)
OBJECTS = set(
    """person man woman child boy girl people bicycle car motorcycle airplane bus train truck boat
light hydrant sign bench bird cat dog horse sheep cow elephant bear zebra giraffe backpack umbrella handbag
tie suitcase frisbee skis snowboard ball kite bat glove skateboard surfboard racket bottle glass cup fork
knife spoon bowl banana apple sandwich orange broccoli carrot pizza donut cake chair couch plant bed table
toilet tv laptop mouse remote keyboard phone microwave oven toaster sink refrigerator book clock vase
scissors teddy toothbrush shirt hat jacket wall floor door window tree grass field street road building sky
water beach mountain snow plate box bag cube sphere cylinder cone""".split()
)
_WORD = re.compile(r"[A-Za-z]+")


def _swap(words: list[str], lexicon: set[str], rng: random.Random) -> str | None:
    idx = [i for i, w in enumerate(words) if w.lower() in lexicon]
    pairs = [(i, j) for a, i in enumerate(idx) for j in idx[a + 1 :] if words[i].lower() != words[j].lower()]
    if not pairs:
        return None
    i, j = rng.choice(pairs)
    out = list(words)
    out[i], out[j] = words[j], words[i]
    return " ".join(out)


def _shuffle_bigrams(words: list[str], rng: random.Random) -> str | None:
    grams = [words[i : i + 2] for i in range(0, len(words), 2)]
    if len(grams) < 2:
        return None
    for _ in range(10):
        order = rng.sample(range(len(grams)), len(grams))
        if order != sorted(order):
            return " ".join(w for k in order for w in grams[k])
    return None


def _wordnet(words: list[str], rng: random.Random) -> str | None:
    try:
        from nltk.corpus import wordnet as wn

        wn.synsets("dog")
    except (ImportError, LookupError) as e:
        raise FlowclipError(
            "the wordnet kind needs nltk's WordNet: pip install nltk && python -m nltk.downloader wordnet"
        ) from e
    idx = [i for i, w in enumerate(words) if w.lower() in OBJECTS]
    rng.shuffle(idx)
    for i in idx:
        syns = wn.synsets(words[i].lower(), pos="n")
        if not syns:
            continue
        hyper = syns[0].hypernyms()
        sisters = sorted(
            {l.name().replace("_", " ") for h in hyper for s in h.hyponyms() for l in s.lemmas()} - {words[i].lower()}
        )
        if sisters:
            out = list(words)
            out[i] = rng.choice(sisters)
            return " ".join(out)
    return None


WHY_NONE = {
    "swap-att": "fewer than two different words from the attribute list (add words with --attributes)",
    "swap-obj": "fewer than two different words from the object list (add words with --objects)",
    "shuffle-bigram": "fewer than two bigrams (a caption of three words or fewer)",
    "wordnet": "no noun from the object list with WordNet co-hyponyms",
    "duplicate": "the same text as another negative of the caption",
}


def read_word_list(path: str) -> set[str]:
    """Words of a text file (whitespace or one per line; '#' starts a comment), lower-cased."""
    try:
        text = open(path, encoding="utf-8").read()
    except (OSError, UnicodeDecodeError) as e:
        raise FlowclipError(f"{path}: cannot read the word list ({e})") from None
    words = {w.lower() for line in text.splitlines() for w in line.split("#", 1)[0].split()}
    if not words:
        raise FlowclipError(f"{path}: the word list is empty")
    return words


def make_negative(
    caption: str, kind: str, rng: random.Random, attributes: set[str] = ATTRIBUTES, objects: set[str] = OBJECTS
) -> str | None:
    words = caption.split()
    if kind == "swap-att":
        neg = _swap(words, attributes, rng)
    elif kind == "swap-obj":
        neg = _swap(words, objects, rng)
    elif kind == "shuffle-bigram":
        neg = _shuffle_bigrams(words, rng)
    elif kind == "wordnet":
        neg = _wordnet(words, rng)
    else:
        raise FlowclipError(f"unknown negative kind {kind!r}; known: {', '.join(KINDS)}")
    return neg if neg is not None and neg != caption else None


def build_training(
    rows: list[dict], kinds: list[str], seed: int = 0, attributes: set[str] = ATTRIBUTES, objects: set[str] = OBJECTS
) -> tuple[list[dict], list[tuple]]:
    """rows: {image, caption[, split, record_id]} -> training rows, and (row, kind, reason)
    for each kind a caption got no negative of (reasons: WHY_NONE)."""
    for k in kinds:
        if k not in KINDS:
            raise FlowclipError(f"unknown negative kind {k!r}; known: {', '.join(KINDS)}")
    out, missing = [], []
    for i, r in enumerate(rows):
        negs, got = [], []
        for k in kinds:
            neg = make_negative(r["caption"], k, random.Random(f"{seed}:{i}:{k}"), attributes, objects)
            if neg is None or neg in negs:
                missing.append((i, k, WHY_NONE[k] if neg is None else WHY_NONE["duplicate"]))
                continue
            negs.append(neg)
            got.append(k)
        if negs:
            out.append(
                {
                    "record_id": str(r.get("record_id", i)),
                    "image": r["image"],
                    "positive": r["caption"],
                    "negatives": negs,
                    "negative_kinds": got,
                    "split": r.get("split") or "train",
                }
            )
    return out, missing
