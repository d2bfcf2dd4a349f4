"""nmtserve against PyTorch, transformers and CTranslate2 in one run: same machine, same weights,
same sentences, the same thread count everywhere (``--threads``, default 2).

    python bench/compare.py [--sizes demo,base] [--beams 4,1] [--rows ...] [--quick]

Rows (engines):

* ``served``        nmtserve on the real ``tritonserver`` (``nmtserve.server.launcher.TritonServer``),
  model ``translate`` over gRPC with the stock ``tritonclient`` (one sync client per client
  thread); the repository is exported here (``nmtserve.export.pipeline.export``, parity check
  skipped: outputs are checked below); the server's decode gets ``--threads`` threads in all
  (its ``workers`` x ``intra_op_threads`` parameters: 2 decode loops x 1 thread for 2);
* ``served-int8``   the same, on a repository exported with ``--precision int8`` (weights of both
  graphs in int8, ``nmtserve.export.quantize``; the export's quality gate report is in the JSON's
  size info);
* ``served-early``, ``served-int8-early``  ``served`` / ``served-int8`` with ``EARLY_STOPPING``
  (the opt-in rule: a sentence stops once beam_size hypotheses have finished, as CT2 does);
  their "identical to PyTorch" column measures what the rule changes against the default rule;
* ``engine``        the in-process in-flight engine on the same exported graphs, laid out as
  the server lays out ``--threads`` cores (``EnginePool``: 2 decode loops x threads // 2
  ONNX Runtime threads over one ``OnnxModel``, the running batch the server chooses: 12 sentences a core up to the export's 64);
* ``pytorch``       ``nmtserve.model.reference.reference_decode`` (PyTorch eager);
* ``transformers``  ``MarianMTModel.generate`` (``early_stopping=False``, pad banned, no forced
  EOS): base size only. The demo checkpoint has no Marian form (the paper's interleaved sin/cos
  position table; Marian's is [sin | cos]) and nmtserve has no nmtserve -> Marian exporter;
* ``ct2``, ``ct2-int8``  CTranslate2 ``Translator`` (``intra_threads`` = ``--threads``,
  ``inter_threads=1``), fp32 and int8 (weights quantized at load). Demo: converted with
  ``bench/decode.py``'s ``convert_to_ctranslate2``; base: CTranslate2's own
  ``TransformersConverter`` on the Marian directory. CT2 stops a sentence once it has K finished
  hypotheses (transformers' ``early_stopping=True``), which does less work on the demo model.

Scenarios (columns), each for every beam of ``--beams``:

* ``bulk``     sentences in requests (batches) of ``batch``, one request at a time, after a
  one-request warm-up: sentences/s and generated tokens/s (best hypothesis, EOS included);
* ``serving``  ``clients`` concurrent clients, one sentence per request, each client sending
  its next sentence as soon as its answer is back, until every sentence is answered:
  sentences/s (first send -> last answer) and p50/p90 request latency. ``served``: a thread per
  client with its own gRPC client; ``engine``: a thread per client calling
  ``EnginePool.translate``; CTranslate2: a thread per client calling ``translate_batch``
  with its one sentence (CT2 does not batch across calls), on a translator with as many
  workers as nmtserve has decode loops (``inter_threads=2, intra_threads=threads // 2``: on 2
  cores 2.2x its ``1 x 2`` layout, so that layout would flatter nmtserve). Not measured for ``pytorch`` and
  ``transformers`` (no cross-request batching: it would be the latency scenario, serialized);
* ``latency``  one client, one sentence at a time: p50/p90 ms.

Sizes:

* ``demo``  the shipped checkpoint ``models/en-fr-numbers``, its ``test.en`` sentences; max
  length min(2 x source tokens + 10, 200) as served;
* ``student``  Bergamot's "tiny" student shape with seeded random weights (d_model 256, 6
  encoder and 2 decoder layers, 8 heads, FFN 1536, vocabulary 32,000;
  ``bench/_marian_base.STUDENT_CONFIG``), built and measured as ``base`` is;
* ``base``  an opus-mt-base-shaped Marian with seeded random weights built here (d_model 512,
  6+6 layers, 8 heads, FFN 2048, vocabulary 58,101; ``bench/_marian_base.py``) fed to every
  engine from the same directory; every engine generates at most 32 new tokens (random weights
  rarely end with EOS: compare tokens/s); fewer sentences (see ``--help``).

Method. Per size: ``pytorch`` and ``transformers`` (the references) once; then the fast rows
(served, served-int8, engine, the CTranslate2 rows) all open at once, measured in ``--rounds``
short rounds (default 3) with the order of the rows rotated each round. Each ratio is the median
of the ratios within a round (this machine's speed drifts by tens of percent within minutes, so
figures of different minutes do not compare); the reported figure is the median round (every
round is in the JSON). Within a round the latency scenario is paired: the fast rows take blocks of
10 sentences in turn (after one untimed sentence each), the order rotated block by block, so the
rows' p50s come from the same moments of the machine. CTranslate2 runs bulk and latency in both thread layouts (1 x threads and
2 workers x threads // 2) and reports the better, serving in the latter. ``--rounds 1`` is the
older plan: the CTranslate2 rows before and after nmtserve, the better pass kept. Timings exclude tokenization (common to every row). Next to every figure: the
1/5/15-minute load average when it started and the CPU share used by *other* processes meanwhile
(``others' CPU``; trust rows where it is near 0%). ``OMP_WAIT_POLICY`` is left as found unless
``--omp-wait-policy`` sets it (for this process and the server alike; bench/README.md explains
the trade-off). Correctness: the share of outputs identical to the size's reference row
(``pytorch`` on demo, ``transformers`` on base: token ids, or the detokenized text for
``served``, whose responses are text), and pairwise agreement between all rows (JSON).

Results: bench/results/compare-<UTC>.json (+ compare-latest.json; ``--quick`` and non-default
runs are written as compare-quick-* / compare-custom-*), a PNG chart of the speed ratios vs
CTranslate2 fp32 beside it (needs matplotlib), and markdown tables on stdout.
"""


from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import logging
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    RESULTS,
    load_average,
    machine,
    versions,
    write_json,
)
from _compare_report import chart, finalize, has_matplotlib, tables  # noqa: E402
from _compare_runners import (  # noqa: E402
    ct2_runner,
    engine_runner,
    export_repository,
    measure,
    measure_paired_latency,
    pytorch_runner,
    served_runner,
    transformers_runner,
)
from _compare_setup import (  # noqa: E402
    COUNTS,
    CT2_ROWS,
    MAX_SENTENCES,
    NMTSERVE_ROWS,
    QUICK_COUNTS,
    ROWS,
    SCENARIOS,
    SLOW_ROWS,
    Results,
    Size,
    setup_base,
    setup_demo,
    setup_student,
)

log = logging.getLogger("bench.compare")


def run_row(results: Results, size: Size, make_runner: Callable, row: str, beams: list[int],
            pass_name: str) -> None:
    """Every beam x scenario of one row; a failing row is recorded and the run goes on."""
    scenarios = [s for s in SCENARIOS if not (s == "serving" and row in SLOW_ROWS)]
    log.info("[%s] %s (%s pass; load %s)", size.name, row, pass_name, load_average())
    try:
        with make_runner() as runner:
            results.what.setdefault(size.name, {})[row] = runner.what
            for beam in beams:
                for scenario in scenarios:
                    results.add(*measure(size, runner, beam, scenario, pass_name))
    except Exception as exc:  # noqa: BLE001 - a benchmark reports a broken row and goes on
        log.error("[%s] %s failed: %s", size.name, row, exc)
        results.errors.append({"size": size.name, "row": row, "pass": pass_name,
                               "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
    gc.collect()  # the row's model / translator / engine go now, not during the next row


def bench_size(size: Size, tmp: Path, args, results: Results) -> None:
    """References first, CT2 before, served, engine, CT2 after (the fairness rule)."""
    wanted, beams = args.rows, args.beams
    repo = repo_int8 = None
    if {"served", "served-early", "engine"} & set(wanted):
        repo = export_repository(size, tmp / "repository", args.threads, backend=args.generate_backend)
    if {"served-int8", "served-int8-early"} & set(wanted):
        repo_int8 = export_repository(size, tmp / "repository-int8", args.threads, precision="int8",
                                      backend=args.generate_backend)
    log_dir = RESULTS / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    runners: dict[str, Callable] = {
        "pytorch": lambda: pytorch_runner(size),
        "transformers": lambda: transformers_runner(size),
        "served": lambda: served_runner(size, repo, log_dir),
        "served-int8": lambda: served_runner(size, repo_int8, log_dir, name="served-int8"),
        "served-early": lambda: served_runner(size, repo, log_dir, name="served-early", early_stopping=True),
        "served-int8-early": lambda: served_runner(size, repo_int8, log_dir, name="served-int8-early", early_stopping=True),
        "engine": lambda: engine_runner(size, repo, args.threads),
        **{name: (lambda name=name: ct2_runner(size, name, args.threads)) for name in CT2_ROWS},
    }
    ct2 = [r for r in CT2_ROWS if r in wanted]
    if args.rounds > 1:
        for row in (r for r in SLOW_ROWS if r in wanted and r not in size.not_applicable):
            run_row(results, size, runners[row], row, beams, "only")
        fast = [r for r in (*NMTSERVE_ROWS, *ct2) if r in wanted and r not in size.not_applicable]
        run_rounds(results, size, {r: runners[r] for r in fast}, beams, args.rounds)
        return
    plan = ([(r, "only") for r in SLOW_ROWS if r in wanted] + [(r, "before") for r in ct2]
            + [(r, "only") for r in NMTSERVE_ROWS if r in wanted]
            + [(r, "after") for r in ct2])
    for row, pass_name in plan:
        if row in size.not_applicable:
            log.info("[%s] %s: %s", size.name, row, size.not_applicable[row])
            continue
        run_row(results, size, runners[row], row, beams, pass_name)


def run_rounds(results: Results, size: Size, runners: dict[str, Callable], beams: list[int], rounds: int) -> None:
    """Every fast row open at once, measured in ``rounds`` short rounds, the order of the rows
    rotated each round: the machine's drift (tens of percent within minutes here) falls on every
    row alike, and the report takes the median of the per-round ratios."""
    with contextlib.ExitStack() as stack:
        opened = {}
        for row, make in runners.items():
            runner = stack.enter_context(make())
            opened[row] = runner
            results.what.setdefault(size.name, {})[row] = runner.what
        rows = list(opened)
        for r in range(rounds):
            order = rows[r % len(rows):] + rows[: r % len(rows)]
            for beam in beams:
                for scenario in SCENARIOS:
                    if scenario == "latency" and len(order) > 1:  # every row sentence by sentence
                        try:
                            for measured in measure_paired_latency(size, [opened[row] for row in order], beam,
                                                                   f"round {r + 1}"):
                                results.add(*measured)
                        except Exception as exc:  # noqa: BLE001 - report the failed figure and go on
                            _failed(results, size, ",".join(order), r, exc)
                        continue
                    for row in order:
                        if scenario == "serving" and row in SLOW_ROWS:
                            continue
                        try:
                            results.add(*measure(size, opened[row], beam, scenario, f"round {r + 1}"))
                        except Exception as exc:  # noqa: BLE001 - report the failed figure and go on
                            _failed(results, size, row, r, exc)
            gc.collect()


def _failed(results: Results, size: Size, row: str, r: int, exc: Exception) -> None:
    log.error("[%s] %s round %d failed: %s", size.name, row, r + 1, exc)
    results.errors.append({"size": size.name, "row": row, "pass": f"round {r + 1}",
                           "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})


SETUP = {"demo": setup_demo, "student": setup_student, "base": setup_base}


def _counts_help() -> str:
    lines = ["sentences per scenario (slow = the pytorch / transformers rows):"]
    for label, table in (("full", COUNTS), ("--quick", QUICK_COUNTS)):
        for name, c in table.items():
            new = f", {c.max_new_tokens} new tokens" if c.max_new_tokens else ""
            lines.append(f"  {label:8s}{name}: bulk {c.bulk} in requests of {c.batch} (slow {c.slow_bulk}), serving "
                         f"{c.serving} with {c.clients} clients, latency {c.latency} (slow {c.slow_latency}){new}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    def names(allowed):
        def parse(text: str) -> list[str]:
            items = [x for x in text.split(",") if x]
            bad = [x for x in items if x not in allowed]
            if bad or not items:
                raise argparse.ArgumentTypeError(f"choose from {','.join(allowed)}; got {text!r}")
            return items
        return parse

    ap = argparse.ArgumentParser(description=__doc__, epilog=_counts_help(),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=names(tuple(SETUP)), default=list(SETUP), help="default: demo,student,base")
    ap.add_argument("--beams", type=lambda t: [int(x) for x in t.split(",")], default=[4, 1], help="default: 4,1")
    ap.add_argument("--rows", type=names(ROWS), default=list(ROWS), help=f"default: {','.join(ROWS)}")
    ap.add_argument("--quick", action="store_true",
                    help="smoke configuration (~3 min): few sentences, 8 clients, base size with 8 new tokens")
    ap.add_argument("--threads", type=int, default=2, help="intra-op threads of every engine (default 2)")
    ap.add_argument("--generate-backend", choices=("python", "nmtserve"), default="",
                    help="the served rows' generate backend (export --generate-backend; default: export's, nmtserve "
                         "where nmtserve_native has it)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternating rounds of the fast rows (served, engine, CTranslate2), every row open at "
                         "once and the order rotated each round; ratios are the median of the per-round ratios "
                         "(default 3; 1: the older plan, CT2 before and after nmtserve, the better pass kept)")
    ap.add_argument("--omp-wait-policy", default="keep",
                    help="OMP_WAIT_POLICY for PyTorch / CTranslate2 (this process) and the server: PASSIVE, "
                         "ACTIVE, or keep (default: leave the environment as it is)")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be >= 1")
    if any(b < 1 for b in args.beams):
        ap.error("--beams: beam sizes must be >= 1")
    return args


def run_sizes(args, results: Results) -> dict:
    counts_of = QUICK_COUNTS if args.quick else COUNTS
    sizes: dict[str, dict] = {}
    for name in args.sizes:
        tmp = Path(tempfile.mkdtemp(prefix=f"nmtserve-compare-{name}-"))
        out = sizes[name] = {"counts": dataclasses.asdict(counts_of[name])}
        try:
            size = SETUP[name](tmp, counts_of[name], set(args.rows))
            out.update(info=size.info, reference=size.reference, not_applicable=size.not_applicable,
                       not_measured={r: "serving: no cross-request batching (it would be the latency scenario "
                                        "run back to back)" for r in SLOW_ROWS
                                     if r in args.rows and r not in size.not_applicable})
            bench_size(size, tmp, args, results)
            out["pairwise_agreement_bulk"] = finalize(size, results)
            out["rows"] = results.what.get(name, {})
            del size
        except Exception as exc:  # noqa: BLE001 - report and go on with the next size
            log.exception("[%s] setup failed", name)
            results.errors.append({"size": name, "row": None, "error": f"{type(exc).__name__}: {exc}",
                                   "traceback": traceback.format_exc()})
        finally:
            gc.collect()
            shutil.rmtree(tmp, ignore_errors=True)
    return sizes


def served_generate_backend(asked: str) -> str:
    """The backend the served rows' export gives ``generate`` (``asked``, or export's choice)."""
    from nmtserve.export.pipeline import ExportOptions

    return ExportOptions(repository=Path("."), generate_backend=asked).served_generate_backend()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.omp_wait_policy != "keep":  # before torch / ctranslate2 load their OpenMP runtimes
        os.environ["OMP_WAIT_POLICY"] = args.omp_wait_policy
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for noisy in ("nmtserve", "transformers", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    import torch

    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    info = {"machine": machine(), "versions": versions("torch", "onnxruntime", "ctranslate2", "transformers",
                                                        "nvidia-pytriton", "tritonclient", "numpy"),
            "settings": {"sizes": args.sizes, "beams": args.beams, "rows": args.rows, "quick": args.quick,
                         "threads": args.threads, "generate_backend": served_generate_backend(args.generate_backend),
                         "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(unset)"),
                         "engine_max_sentences": MAX_SENTENCES, "length_penalty": 1.0,
                         "ratios": "speed vs the named row, higher is faster: sentences/s ratio (bulk, "
                                   "serving), base p50 / p50 (latency); CT2 figures: better of 2 passes"}}
    results = Results()
    info["sizes"] = run_sizes(args, results)
    info["measurements"] = results.entries
    info["errors"] = results.errors
    info["machine"]["load_average_end"] = load_average()
    info["wall_s"] = round(time.perf_counter() - started, 1)
    default = (args.sizes, args.beams, args.rows, args.threads) == (list(SETUP), [4, 1], list(ROWS), 2)
    name = "compare" + ("-quick" if args.quick else "" if default else "-custom")
    info["chart"] = "the same name with .png (speed vs CT2 fp32)" if has_matplotlib() else "not drawn: no matplotlib"
    path = write_json(name, info)
    png = chart(results.entries, path.with_suffix(".png"))
    if png:
        shutil.copy(png, RESULTS / f"{name}-latest.png")

    m = info["machine"]
    print(f"\n{m['nproc']} CPUs ({m['cpu']}), {m['date_utc']} UTC, load {m['load_average_1_5_15']} -> "
          f"{m['load_average_end']}; {args.threads} threads everywhere, OMP_WAIT_POLICY "
          f"{info['settings']['omp_wait_policy']}; {info['wall_s'] / 60:.1f} min")
    for size_name, s in info["sizes"].items():
        details = s.get("info", {})
        print(f"* {size_name}: {details.get('model', '?')}; max length {details.get('max_length', '?')}; "
              f"export {details.get('export_s', '-')} s, server start {details.get('served_startup_s', '-')} s")
        gate = details.get("quality_gate_int8")
        if gate:
            print(f"  - int8 export {details.get('export_int8_s', '-')} s; quality gate ({gate['sentences']} sentences "
                  f"against {gate['references']}): BLEU {gate['bleu_fp32']} -> {gate['bleu']}, drop {gate['bleu_drop']} "
                  f"(limit {gate['max_bleu_drop']}), {100 * gate['identical']:.1f}% identical to fp32, token "
                  f"agreement {100 * gate['token_agreement']:.1f}%")
        for row, why in [*s.get("not_applicable", {}).items(), *s.get("not_measured", {}).items()]:
            print(f"  - {row}: {why}")
    print()
    print(tables(results.entries))
    for err in results.errors:
        print(f"\nERROR [{err['size']}] {err['row']}: {err['error']}")
    print(f"\nwritten {path}" + (f" and {png}" if png else " (no chart: matplotlib is not installed)"))
    return 1 if results.errors else 0


if __name__ == "__main__":
    sys.exit(main())
