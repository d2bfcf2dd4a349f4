"""bench/compare.py's report: the passes kept, agreement with the reference, ratios, tables and the chart."""


from __future__ import annotations

import itertools
import logging
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    markdown_table,
)
from _compare_setup import ROWS, SCENARIOS, Output, Results, Size  # noqa: E402

log = logging.getLogger("bench.compare")


RATIO_BASES = ("ct2", "ct2-int8", "pytorch")


def _key(entry: dict) -> tuple:
    return entry["size"], entry["row"], entry["beam"], entry["scenario"]


def _speed(entry: dict) -> float:
    return -entry["p50_ms"] if entry["scenario"] == "latency" else entry["sentences_per_s"]


def pick_reported(results: Results) -> dict[tuple, int]:
    """(size, row, beam, scenario) -> index of the reported entry: the better CT2 pass, or with
    rounds the median round."""
    groups: dict[tuple, list[int]] = {}
    for i, e in enumerate(results.entries):
        groups.setdefault(_key(e), []).append(i)
    chosen = {}
    for k, idx in groups.items():
        if results.entries[idx[0]]["pass"].startswith("round"):
            ranked = sorted(idx, key=lambda i: _speed(results.entries[i]))
            best = ranked[(len(ranked) - 1) // 2]
        else:
            best = max(idx, key=lambda i: _speed(results.entries[i]))
        for i in idx:
            results.entries[i]["reported"] = i == best
        chosen[k] = best
    return chosen


def same_output(size: Size, a: Output, b: Output) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return size.text(a) == size.text(b)
    return a == b


def agreement(size: Size, a: list, b: list) -> tuple[float | None, int]:
    """Share of the first min(len) sentences with identical outputs, and that count."""
    n = min(len(a), len(b))
    if n == 0:
        return None, 0
    return sum(same_output(size, x, y) for x, y in zip(a[:n], b[:n], strict=True)) / n, n


def differences(size: Size, outputs: list, reference: list, limit: int = 3) -> list[dict]:
    """The first few sentences whose output differs from the reference's (text)."""
    out = []
    for i, (a, b) in enumerate(zip(outputs, reference, strict=False)):
        if len(out) == limit:
            break
        if not same_output(size, a, b):
            out.append({"sentence": i, "source": size.texts[i], "output": size.text(a), "reference": size.text(b)})
    return out


def token_counts(size: Size, results: Results, index: int) -> tuple[list[int], str]:
    """Generated tokens per sentence. Served answers are text: a sentence whose text equals
    another row's decode (same beam) counts that row's ids, else its re-tokenized length."""
    outputs = results.outputs[index]
    if not any(isinstance(o, str) for o in outputs):
        return [len(o) for o in outputs], "generated ids (EOS included)"
    beam = results.entries[index]["beam"]
    known: dict[tuple[int, str], int] = {}
    for e, outs in zip(results.entries, results.outputs, strict=True):
        if e["size"] == size.name and e["beam"] == beam and not any(isinstance(o, str) for o in outs):
            for i, o in enumerate(outs):
                known.setdefault((i, size.text(o)), len(o))
    counts = [known.get((i, o)) for i, o in enumerate(outputs)]
    guessed = sum(c is None for c in counts)
    counts = [c if c is not None else len(size.ckpt.tokenizer.encode_target(o)) for c, o in zip(counts, outputs, strict=True)]
    return counts, f"ids of another row's identical output; {guessed} of {len(outputs)} re-tokenized"


def ratio(entry: dict, base: dict | None) -> float | None:
    """Speed relative to ``base`` (higher is faster): sentences/s, or base p50 / p50 for latency."""
    if base is None:
        return None
    if entry["scenario"] == "latency":
        return base["p50_ms"] / entry["p50_ms"]
    return entry["sentences_per_s"] / base["sentences_per_s"]


def round_ratios(results: Results, entry: dict, base_row: str) -> list[float]:
    """The row's speed over ``base_row``'s within each round (same beam and scenario)."""
    if not entry["pass"].startswith("round"):
        return []
    by_round: dict[str, dict[str, dict]] = {}
    for e in results.entries:
        if (e["size"], e["beam"], e["scenario"]) == (entry["size"], entry["beam"], entry["scenario"]):
            by_round.setdefault(e["pass"], {})[e["row"]] = e
    out = []
    for rows in by_round.values():
        mine, base = rows.get(entry["row"]), rows.get(base_row)
        if mine is not None and base is not None:
            out.append(ratio(mine, base))
    return [x for x in out if x is not None]


def finalize(size: Size, results: Results) -> dict:
    """Fill tokens/s, agreement and ratios into the size's reported entries; returns the pairwise
    agreement of the bulk outputs per beam."""
    chosen = pick_reported(results)
    mine = {k: i for k, i in chosen.items() if k[0] == size.name}
    for k, i in mine.items():
        e = results.entries[i]
        counts, how = token_counts(size, results, i)
        e.update(tokens=sum(counts), tokens_per_s=sum(counts) / e["seconds"], tokens_counted_from=how)
        ref = mine.get((size.name, size.reference, k[2], "bulk"))
        if ref is not None:
            share, n = agreement(size, results.outputs[i], results.outputs[ref])
            e.update(identical_to_reference=share, compared_with_reference=n, reference=size.reference,
                     differences=differences(size, results.outputs[i], results.outputs[ref]))
        for base_row in RATIO_BASES:
            base = mine.get((size.name, base_row, k[2], k[3]))
            e[f"speed_vs_{base_row}"] = ratio(e, results.entries[base] if base is not None else None)
            per_round = round_ratios(results, e, base_row)
            if per_round:  # with rounds: the median of the ratios within each round
                e[f"speed_vs_{base_row}_rounds"] = per_round
                e[f"speed_vs_{base_row}"] = statistics.median(per_round)
    pairwise: dict[str, dict[str, float]] = {}
    for beam in sorted({k[2] for k in mine}):
        bulk = {k[1]: i for k, i in mine.items() if k[2] == beam and k[3] == "bulk"}
        pairs = {}
        for a, b in itertools.combinations(sorted(bulk), 2):
            share, n = agreement(size, results.outputs[bulk[a]], results.outputs[bulk[b]])
            pairs[f"{a} ~ {b}"] = {"identical": share, "sentences": n}
        pairwise[f"beam {beam}"] = pairs
    return pairwise


TABLE_COLUMNS = {
    "bulk": ["sentences (batch)", "sent/s", "tok/s"],
    "serving": ["sentences (clients)", "sent/s", "p50 ms", "p90 ms"],
    "latency": ["sentences", "p50 ms", "p90 ms"],
}


def _fmt_ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _scenario_cells(e: dict) -> list:
    s = e["scenario"]
    if s == "bulk":
        return [f"{e['sentences']} ({e['batch']})", e["sentences_per_s"], e["tokens_per_s"]]
    if s == "serving":
        return [f"{e['sentences']} ({e['clients']})", e["sentences_per_s"], e["p50_ms"], e["p90_ms"]]
    return [e["sentences"], e["p50_ms"], e["p90_ms"]]


def tables(entries: list[dict]) -> str:
    """One markdown table per scenario: every reported row of every size and beam."""
    out = []
    sizes = list(dict.fromkeys(e["size"] for e in entries))
    beams = list(dict.fromkeys(e["beam"] for e in entries))
    order = lambda e: (sizes.index(e["size"]), beams.index(e["beam"]), ROWS.index(e["row"]))  # noqa: E731
    for scenario in SCENARIOS:
        rows = sorted((e for e in entries if e.get("reported") and e["scenario"] == scenario), key=order)
        if not rows:
            continue
        header = (["size", "beam", "row", *TABLE_COLUMNS[scenario]] + [f"vs {b}" for b in RATIO_BASES]
                  + ["identical to ref", "load before", "others' CPU"])
        body = []
        for e in rows:
            same = e.get("identical_to_reference")
            row = e["row"] if e["pass"] == "only" or e["pass"].startswith("round") else f"{e['row']} ({e['pass']})"
            if e.get("layout"):
                row += f" [{e['layout']}]"
            body.append([e["size"], e["beam"], row, *_scenario_cells(e),
                         *(_fmt_ratio(e.get(f"speed_vs_{b}")) for b in RATIO_BASES),
                         "-" if same is None else f"{100 * same:.1f}% ({e['reference']})",
                         e["load_before"], f"{e['other_processes_cpu_pct']:.0f}%"])
        title = {"bulk": "bulk (speed = sentences/s)", "serving": "serving (speed = sentences/s)",
                 "latency": "latency (speed = reference p50 / p50)"}[scenario]
        out.append(f"### {title}\n\n" + markdown_table(header, body))
    return "\n\n".join(out)


def has_matplotlib() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def chart(entries: list[dict], path: Path) -> str | None:
    """Grouped bars: speed vs CTranslate2 fp32 per scenario and beam, one panel per size."""
    if not has_matplotlib():
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [e for e in entries if e.get("reported") and e.get("speed_vs_ct2") is not None and e["row"] != "ct2"]
    sizes = list(dict.fromkeys(e["size"] for e in shown))
    if not sizes:
        return None
    fig, axes = plt.subplots(len(sizes), 1, figsize=(12, 3.8 * len(sizes)), squeeze=False)
    for ax, size in zip(axes[:, 0], sizes, strict=True):
        mine = [e for e in shown if e["size"] == size]
        beams = list(dict.fromkeys(e["beam"] for e in mine))
        groups = sorted({(e["scenario"], e["beam"]) for e in mine},
                        key=lambda g: (SCENARIOS.index(g[0]), beams.index(g[1])))
        rows = [r for r in ROWS if any(e["row"] == r for e in mine)]
        width = 0.8 / max(1, len(rows))
        for j, row in enumerate(rows):
            values = {(e["scenario"], e["beam"]): e["speed_vs_ct2"] for e in mine if e["row"] == row}
            xs = [g + j * width for g, key in enumerate(groups) if key in values]
            ys = [values[key] for key in groups if key in values]
            bars = ax.bar(xs, ys, width, label=row, color=f"C{ROWS.index(row)}")
            ax.bar_label(bars, fmt="%.2f", fontsize=7)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks([g + width * (len(rows) - 1) / 2 for g in range(len(groups))],
                      [f"{s}\nbeam {b}" for s, b in groups])
        ax.set_ylabel("speed vs CT2 fp32")
        ax.set_title(f"{size}: higher is faster (latency: CT2 p50 / p50)")
        ax.margins(y=0.12)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)
