"""flowclip explain: where each caption word found its evidence, how the refinement moved
it, and which patches the gold-foil decision hinges on (paper Figs. 4-8), from the cached
features (no encoder) plus the image files for display.

    select   score the manifests' records with every scorer (score's own path), keep the
             repairs / regressions between the first and the last scorer (or ids)
    explain  per record and token scorer: each token's patch support before and after
             the refinement, its share of s_token, and the patch sensitivity of the
             gold-foil s_token margin (autograd through the head)
    write    explain.json (every number), a PNG per record, grid.png, explorer.html (one
             self-contained page: data and images inlined, no server, no network)
"""

from __future__ import annotations

import base64
import io
import json
import os

import numpy as np
import torch

from .. import outputs
from ..errors import FlowclipError
from ..extraction.images import BadImage, load_image, resolve_image_path
from . import metrics
from .explain_figures import token_role, tokens_by_role

SELECTIONS = ("repairs", "regressions", "changed", "all")
TOP_PATCHES = 3
PAGE = os.path.join(os.path.dirname(__file__), "explain_page.html")


# -- select ---------------------------------------------------------------------------------------
def select_records(
    store, manifests, scorers, selection, limit, image_root, device, per_status: bool = False
) -> list[dict]:
    """Score every record with every scorer (score_candidates, as `flowclip score` does) and
    keep the chosen ones, the largest margin changes first: `limit` in all, or with
    per_status `limit` of each decision (repairs, regressions, ...)."""
    from .engines import score_candidates
    from .scorers import evaluation_manifests, scoring_of

    ids = None if selection in SELECTIONS else set(selection.split(","))
    chosen = []
    for m in evaluation_manifests(manifests, log=lambda *_: None):
        name, sc = scoring_of(m)
        if sc.task in ("image_candidates", "groups"):
            chosen += matrix_views(store, m, name, sc, scorers, selection, ids, image_root, device)
            continue
        if sc.task == "paraphrases":
            chosen += paraphrase_views(store, m, name, scorers, selection, ids, image_root, device)
            continue
        if sc.task not in ("pairwise", "candidates"):
            continue  # retrieval / classification have no gold-foil margin
        mats, gold, cols, ikeys = score_candidates(store, m, scorers, ["real"], 0, device, image_root, name)
        rec_ids = [str(x) for x in cols.get("record_id", range(len(gold)))]
        correct = {s.run: metrics.decisions(mats[("real", s.run)], gold, sc.tie_rule)[0] for s in scorers}
        a, b = scorers[0].run, scorers[-1].run
        for i, rid in enumerate(rec_ids):
            status = _status(correct[a][i], correct[b][i])
            if _kept(rid, status, selection, ids):
                scores = {s.run: [float(x) for x in mats[("real", s.run)][i] if not np.isnan(x)] for s in scorers}
                chosen.append(
                    {
                        "benchmark": name,
                        "record_id": rid,
                        "status": status,
                        "gold": int(gold[i]),
                        "task": str(cols["subset"][i]) if "subset" in cols else name,
                        "image": cols["image"][i],
                        "crop": (cols.get("crop") or [None] * len(gold))[i],
                        "image_key": ikeys[i],
                        "captions": list(cols["captions"][i]),
                        "scores": scores,
                        "correct": {r: bool(c[i]) for r, c in correct.items()},
                    }
                )
    for r in chosen:
        if "margins" not in r:  # (an image-choice view carries its record's image margins)
            r["margins"] = {run: metrics.margin(s, r["gold"]) for run, s in r["scores"].items()}
        r["margin_change"] = r["margins"][scorers[-1].run] - r["margins"][scorers[0].run]
    chosen.sort(key=lambda r: -abs(r["margin_change"]))
    if ids is not None and len(chosen) < len(ids):
        missing = sorted(ids - {r["record_id"] for r in chosen})
        raise FlowclipError(f"--records: no candidate record with id {', '.join(missing[:5])} in the manifests")
    if limit and per_status:
        kept = {st: [r for r in chosen if r["status"] == st][:limit] for st in ("repair", "regression", "unchanged")}
        return sorted((r for rs in kept.values() for r in rs), key=lambda r: -abs(r["margin_change"]))
    return chosen[:limit] if limit else chosen


def _status(right_first: bool, right_last: bool) -> str:
    return (
        "repair" if right_last and not right_first else "regression" if right_first and not right_last else "unchanged"
    )


def _kept(rid: str, status: str, selection: str, ids) -> bool:
    if ids is not None:
        return rid in ids
    return selection == "all" or (selection == "changed" and status != "unchanged") or selection == status + "s"


def matrix_views(store, m, name, sc, scorers, selection, ids, image_root, device) -> list[dict]:
    """Image-choice and group records as views of one image each, in the candidates'
    layout. A group: each of its two images with both captions, its own the gold (the
    text direction), record ids <id>#image0 / #image1. An image-choice record: its caption
    on the gold image and on the image the last scorer chose (#gold, #chosen), each view
    carrying the record's image margins (gold image's score - the best other image's)."""
    from .matrix_tasks import score_matrices

    mats, cols, ikeys = score_matrices(store, m, scorers, device, image_root)
    groups = sc.task == "groups"
    if groups:
        correct = {s.run: metrics.group_decisions(mats[s.run], sc.tie_rule)[sc.headline_metric] for s in scorers}
    else:
        gold = np.asarray(cols["gold"])
        correct = {s.run: metrics.decisions(mats[s.run][:, :, 0], gold, sc.tie_rule)[0] for s in scorers}
    a, b = scorers[0].run, scorers[-1].run
    out = []
    for r, rid in enumerate(str(x) for x in cols["record_id"]):
        status = _status(correct[a][r], correct[b][r])
        if not _kept(rid, status, selection, ids):
            continue
        base = {
            "benchmark": name,
            "status": status,
            "crop": None,
            "correct": {k: bool(c[r]) for k, c in correct.items()},
        }
        base["task"] = str(cols["subset"][r]) if "subset" in cols else name
        if groups:
            for i in (0, 1):
                scores = {s.run: [float(x) for x in mats[s.run][r, i]] for s in scorers}
                view = {"record_id": f"{rid}#image{i}", "gold": i, "image": cols["images"][r][i], "scores": scores}
                out.append({**base, **view, "image_key": ikeys[r][i], "captions": list(cols["captions"][r])})
            continue
        col = {s.run: mats[s.run][r, : len(ikeys[r]), 0] for s in scorers}
        g = int(gold[r])
        margins = {run: metrics.margin(list(v), g) for run, v in col.items()}
        pick = int(np.argmax(col[b]))  # the image the last scorer chose (np.argmax: the first of equals)
        for tag, i in [("gold", g)] + ([("chosen", pick)] if pick != g else []):
            out.append({**base, "record_id": f"{rid}#{tag}", "gold": 0, "image": cols["images"][r][i],
                        "image_key": ikeys[r][i], "captions": [cols["caption"][r]], "margins": dict(margins),
                        "scores": {run: [float(v[i])] for run, v in col.items()}})  # fmt: skip
    return out


def paraphrase_views(store, m, name, scorers, selection, ids, image_root, device) -> list[dict]:
    """Paraphrase records (SugarCrepe++) as two pairwise views each: P1 against the negative
    and P2 against it (record ids <id>#p1 / #p2), the record's status from ITT."""
    from .engines import score_candidates
    from .paraphrase_task import ITT, as_candidates, paraphrase_decisions

    mats, _, cols, ikeys = score_candidates(store, as_candidates(m), scorers, ["real"], 0, device, image_root, name)
    correct = {s.run: paraphrase_decisions(mats[("real", s.run)])[ITT] for s in scorers}
    a, b = scorers[0].run, scorers[-1].run
    out = []
    for r, rid in enumerate(str(x) for x in cols["record_id"]):
        status = _status(correct[a][r], correct[b][r])
        if not _kept(rid, status, selection, ids):
            continue
        base = {"benchmark": name, "status": status, "crop": None, "gold": 0, "image": cols["image"][r],
                "image_key": ikeys[r], "task": str(cols["subset"][r]) if "subset" in cols else name,
                "correct": {k: bool(c[r]) for k, c in correct.items()}}  # fmt: skip
        for i in (0, 1):
            scores = {s.run: [float(mats[("real", s.run)][r, i]), float(mats[("real", s.run)][r, 2])] for s in scorers}
            captions = [cols["captions"][r][i], cols["captions"][r][2]]
            out.append({**base, "record_id": f"{rid}#p{i + 1}", "captions": captions, "scores": scores})
    return out


def best_foil(scores: list[float], gold: int) -> int:
    return max((j for j in range(len(scores)) if j != gold), key=lambda j: scores[j])


# -- explain --------------------------------------------------------------------------------------
def explain_record(store, rec: dict, scorers, labels, device) -> dict:
    """Maps and sensitivities of one record for every scorer whose head reads tokens
    against patches (Flow-CLIP: support before / after the refinement; FILIP-style,
    FSC-CLIP local, DCSM-style: the map each reads); global-only scorers have none."""
    from ..store.banks import FeatureBank

    bank = FeatureBank.load(store, [rec["image_key"]], rec["captions"], True, device)
    n = len(rec["captions"])
    v, P, t, H, mask = bank.features(
        torch.zeros(n, dtype=torch.long, device=device), torch.arange(n, device=device), True
    )
    maps = {}
    for s in scorers:
        if not hasattr(s.head, "token_evidence"):
            continue  # global-only (or other) scorers: margins only
        with torch.no_grad():
            ev = s.head.token_evidence(v[0], P[0], t, H, mask)
        # one caption (an image-choice view): no foil, so no margin to take the sensitivity of
        foil = best_foil(rec["scores"][s.run], rec["gold"]) if n > 1 else None
        sens = sensitivity(s.head, P[0], H, mask, rec["gold"], foil) if foil is not None else None
        caps = []
        for c in range(n):
            valid = mask[c]
            tokens = labels[c][: int(valid.sum())]
            contrib = _r(ev["contrib"][c][valid])
            entry = {
                "index": c,
                "tokens": tokens,
                "maps": {name: _r(m[c][valid]) for name, m in ev["maps"].items()},
                "contrib": contrib,
                "roles": [token_role(t) for t in tokens],
                "order": tokens_by_role(tokens, contrib),  # content words first (explain_figures)
            }
            entry.update({k: float(ev[k][c]) for k in ("s_global", "s_token", "s") if k in ev})
            caps.append(entry)
        maps[s.run] = {
            "foil": foil,
            "captions": caps,
            "sensitivity": _r(sens) if sens is not None else None,
            "top_patches": [int(j) for j in np.argsort(-np.abs(sens.numpy()))[:TOP_PATCHES]]
            if sens is not None
            else [],
        }
    return maps


def sensitivity(head, P: torch.Tensor, H, mask, gold: int, foil: int) -> torch.Tensor:
    """The first-order change of the head's token-evidence margin (Flow-CLIP: s_token(gold)
    - s_token(foil); token-map heads: their whole score's) when each patch p_j moves
    along its centred direction p_j - pbar: grad_{p_j} . (p_j - pbar), by autograd."""
    P = P.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        delta = head.token_margin(P, H.detach(), mask, gold, foil)
        (grad,) = torch.autograd.grad(delta, P)
    return (grad * (P - P.mean(0))).sum(-1).detach()


def _r(x: torch.Tensor):
    """Seven significant digits (FP32's): small contributions keep their precision."""
    a = x.detach().cpu().double().numpy()
    return [[float(f"{v:.7g}") for v in row] for row in a] if a.ndim == 2 else [float(f"{v:.7g}") for v in a]


def token_labels(store, captions: list[str]) -> list[list[str]]:
    """Each caption's stored tokens as text (the family's tokenizer under the store's mask)."""
    from ..extraction.encoders import EncoderSpec, ResolvedEncoder
    from ..extraction.families import family_of
    from ..extraction.features import valid_mask

    cfg = store.encoder_config
    fam = family_of(cfg).text_only(ResolvedEncoder(EncoderSpec(cfg["model"]), None, cfg))
    tok = fam.tokenize(captions)
    keep = valid_mask(tok.mask, cfg["token_mask"], fam.special_tokens)
    return [fam.token_strings(ids[k].tolist()) for ids, k in zip(tok.ids, keep)]


# -- images ---------------------------------------------------------------------------------------
def display_image(store, rec: dict, image_root: str | None):
    """The image as the encoder saw it (open_clip's own resize and crop of the store's
    preprocessing, before ToTensor and Normalize) as a PIL image, or None when the file is
    not there."""
    from open_clip.transform import image_transform
    from torchvision.transforms import Compose, Normalize

    pre = store.encoder_config["preprocess"]
    steps = image_transform(
        pre["image_size"],
        is_train=False,
        mean=tuple(pre["mean"]),
        std=tuple(pre["std"]),
        resize_mode=pre["resize_mode"],
        interpolation=pre["interpolation"],
    ).transforms
    assert isinstance(steps[-1], Normalize), steps  # [..., to tensor, normalise]
    try:
        if image_root is None:
            return None
        im = load_image(resolve_image_path(image_root, rec["image"]), tuple(rec["crop"]) if rec["crop"] else None)
    except (BadImage, TypeError):
        return None
    return Compose(steps[:-2])(im)


def png_data_url(im) -> str:
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


# -- write ----------------------------------------------------------------------------------------
def run_explain(
    store,
    manifests: list[str],
    scorer_specs: list[str],
    out: str,
    *,
    records: str = "changed",
    limit: int = 40,
    image_root: str | None = None,
    device: str = "cpu",
    overwrite: bool = False,
    per_status: bool = False,
    log=print,
) -> dict:
    from .explain_figures import grid_figure, record_figure
    from .scorers import load_scorers

    outputs.check_replaceable(out, "explain", overwrite)
    if len(scorer_specs) < 1:
        raise FlowclipError("give at least one --scorer (two to find repairs and regressions)")
    scorers = load_scorers(scorer_specs, store, device)  # labelled as score labels them (NAME= when unique)
    chosen = select_records(store, manifests, scorers, records, limit, image_root, device, per_status)
    log(f"explaining {len(chosen)} records ({records}; {scorers[0].run} -> {scorers[-1].run})")
    grid = int(round(np.sqrt(store.meta["num_patches"])))
    with outputs.staged(out, "explain", overwrite) as tmp:
        os.makedirs(os.path.join(tmp, "records"))
        texts = sorted({c for rec in chosen for c in rec["captions"]})
        labels = dict(zip(texts, token_labels(store, texts))) if texts else {}
        for i, rec in enumerate(chosen):
            rec["id"] = i
            rec["maps"] = explain_record(store, rec, scorers, [labels[c] for c in rec["captions"]], device)
            im = display_image(store, rec, image_root)
            rec["picture"] = png_data_url(im) if im is not None else None
            rec["png"] = f"records/{i:04d}.png"
            record_figure(rec, im, grid, os.path.join(tmp, rec["png"]))
        data = {
            "scorers": [s.run for s in scorers],
            "grid": [grid, grid],
            "records": chosen,
            "selection": records,
            "store_fingerprint": store.fingerprint,
        }
        with open(os.path.join(tmp, "explain.json"), "w") as f:
            json.dump(data, f)
        grid_figure(chosen, grid, os.path.join(tmp, "grid.png"))
        write_page(data, os.path.join(tmp, "explorer.html"))
    log(f"wrote {out} (open {os.path.join(out, 'explorer.html')} in a browser)")
    return data


def write_page(data: dict, path: str) -> None:
    """The explorer: the page template with the data inlined (</ escaped inside JSON)."""
    page = open(PAGE).read().replace("__FLOWCLIP_DATA__", json.dumps(data).replace("</", "<\\/"))
    with open(path, "w") as f:
        f.write(page)
