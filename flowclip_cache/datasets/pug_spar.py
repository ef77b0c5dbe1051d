"""PUG:SPAR (facebookresearch/PUG): labels.csv with filename, world_name,
character_name, character2_name, character_texture, character2_texture,
character1_pos, character2_pos. The paper's 19,840 attribute-assignment pairs: two
different animals with non-default textures; caption "This is a photo of a {a1}
textured with {t1} and a {a2} textured with {t2}", foil swaps the animals."""

import os

from .base import Benchmark, BuildReport, RowErrors, Scoring, read_csv, write_records

TEMPLATE = "This is a photo of a {a1} textured with {t1} and a {a2} textured with {t2}"
KEYS = ("filename", "world_name", "character_name", "character2_name", "character_texture", "character2_texture")


def build(source: str, out: str, errors: RowErrors, default_texture: str = "Default") -> BuildReport:
    path = source if os.path.isfile(source) else os.path.join(source, "labels.csv")
    rows, dropped = [], 0
    for line, rec in read_csv(path):
        if not isinstance(rec, dict) or any(k not in rec for k in KEYS):
            errors(path, f"line {line}", f"missing fields (need {', '.join(KEYS)})")
            continue
        a1, a2 = rec["character_name"].strip(), rec["character2_name"].strip()
        t1, t2 = rec["character_texture"].strip(), rec["character2_texture"].strip()
        if not a1 or not a2 or a1 == a2 or default_texture in (t1, t2) or not t1 or not t2:
            dropped += 1  # not an attribute-assignment pair
            continue
        gold = TEMPLATE.format(a1=a1, t1=t1, a2=a2, t2=t2)
        foil = TEMPLATE.format(a1=a2, t1=t1, a2=a1, t2=t2)
        rows.append(
            {
                "record_id": f"pug/{line}",
                "image": rec["filename"],
                "captions": [gold, foil],
                "gold": 0,
                "world": rec["world_name"],
            }
        )
    report = BuildReport(len(rows), len({r["image"] for r in rows}), {"not_assignment_pairs": dropped}, errors.skipped)
    return write_records(out, rows, "candidates", "pug-spar", report)


BENCHMARK = Benchmark(
    name="pug-spar",
    title="PUG:SPAR attribute assignment",
    kind="candidates",
    build=build,
    scoring=Scoring(task="pairwise", tie_rule="wrong", joins=(("binding7", ""), ("all11", ""))),
    options={"default_texture": "the texture name that means 'no texture' (default: Default)"},
)
