"""Two builds of nmtserve served side by side, in alternating pairs (issue 49's per-request work).

    python bench/served_ab.py --repository REPO --tree-b TREE [--tree-a TREE] [--pairs 3]
    python bench/served_ab.py --repository REPO --native-b DIR      # another nmtserve_native build
    python bench/served_ab.py --repository REPO --env-b NMTSERVE_PARK=0
    python bench/served_ab.py --repository REPO --repository-b REPO2   # another export of the model

Side A serves REPO with this checkout's nmtserve (or ``--tree-a``). Side B serves a copy of REPO
that loads ``--tree-b`` (another checkout: ``git worktree add /tmp/b REV``), ``--native-b`` (a
directory holding another ``nmtserve_native`` build: ``pip install --target DIR ./native``),
and/or runs with ``--env-b`` set. Both servers run at once (an idle one costs next to nothing),
and each pair measures them in turn, the order alternating from pair to pair, so that the
machine's drift (tens of percent within minutes) falls on both sides alike:

* ``clients`` concurrent clients, each sending one sentence per request (``--sentences`` in
  all), A's pass then B's: sentences/s, and the server's CPU a sentence (all its processes);
* one client, one sentence at a time (``--latency`` sentences), the sides taking blocks of 10
  in turn, each after one untimed sentence: p50 and mean.

The held-out sentences are the demo's `test.en`. Prints each pair's B/A ratios and their medians,
and checks that both sides answered the one-client pass the same. Writes
bench/results/served-ab-*.json.

Models on the nmtserve backend (generate, the CPU target's default) run in tritonserver's embedded
interpreter, which honours ``PYTHONPATH``: a side with a tree or a native build gets them first on
it, and the backend's own log line (``nmtserve.server.inprocess.LOADED_FROM``) says what it loaded.
The backend library itself (native/triton/backend.cpp) comes with the native build: the launcher
installs the one beside the nmtserve_native first on the server's PYTHONPATH, each side into its own
cache, and the script checks that the server mapped that build's bytes.

Why copies of the repository: the Python backend's stub ignores ``PYTHONPATH``. A server started
with another tree on it still runs the environment's nmtserve. So each copy's ``model.py`` files
put their tree first on ``sys.path``, and the script checks in each server's log that the tree was
loaded (bench/RESULTS.md "Session 30").
"""

from __future__ import annotations

import argparse
import filecmp
import itertools
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from _common import ROOT, machine, process_group_cpu_seconds, write_json

from nmtserve.server.inprocess import LOADED_FROM

MARK = "nmtserve-ab: loaded"


def side_repository(repository: Path, dest: Path, paths: list[Path]) -> Path:
    """A copy of ``repository`` whose Python models import from ``paths`` first and say in the
    server's log which nmtserve and nmtserve_native they loaded; ``repository`` itself when there
    are no paths."""
    if not paths:
        return repository
    shutil.copytree(repository, dest)
    first = ", ".join(repr(str(p)) for p in paths)
    prelude = (f"import sys; sys.path[:0] = [{first}]\n"
               "import nmtserve as _nmtserve\n"
               "try:\n    import nmtserve_native as _native\nexcept ImportError:\n    _native = None\n"
               f"print({MARK!r}, _nmtserve.__file__, getattr(_native, '__file__', None), file=sys.stderr, flush=True)\n")
    for model in dest.glob("*/1/model.py"):
        model.write_text(prelude + model.read_text(encoding="utf-8"), encoding="utf-8")
    return dest


def side_environment(repository: Path, paths: list[Path], env: dict) -> dict:
    """A side's server environment: with ``paths`` first on PYTHONPATH where a model of the
    repository runs on the nmtserve backend (its interpreter is embedded in tritonserver and honours
    PYTHONPATH; model.py preludes never run there; the server, once started, lists those models:
    ``TritonServer.in_process_models``)."""
    uses_backend = any('backend: "nmtserve"' in config.read_text(encoding="utf-8")
                       for config in repository.glob("*/config.pbtxt"))
    if not paths or not uses_backend:
        return env
    first = [str(p) for p in paths] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**env, "PYTHONPATH": os.pathsep.join(first)}


def check_loaded(log: Path, tree: Path | None, native: Path | None, in_process: bool = False) -> None:
    """The server's log says which nmtserve and native module its models imported (the model.py
    preludes' lines, and, ``in_process``, the nmtserve backend's own, which must be there:
    nmtserve.server.inprocess.LOADED_FROM): ``tree``'s and ``native``'s, or the run stops here."""
    if tree is None and native is None:
        return
    backend = LOADED_FROM.split("{")[0]
    text = log.read_text(encoding="utf-8", errors="replace").splitlines()
    lines = [line for line in text if MARK in line or backend in line]
    if in_process and not any(backend in line for line in lines):
        raise SystemExit(f"the server's nmtserve backend did not say what it loaded (a tree older than its "
                         f"'{backend}' log line?): see {log}")
    wanted = ([str((tree / "nmtserve").resolve())] if tree else []) + \
        ([str(native.resolve()) + "/nmtserve_native"] if native else [])
    if not lines or any(w not in line for line in lines for w in wanted):
        raise SystemExit(f"the server did not load {wanted} (its log {log} says: {lines[:2]})")


def check_backend(pid: int, native: Path | None) -> None:
    """The nmtserve backend library the server mapped has ``native``'s bytes (the launcher installs
    the one beside the nmtserve_native first on the server's PYTHONPATH: triton_backend_library)."""
    if native is None:
        return
    from nmtserve.decoding.native import TRITON_BACKEND_LIBRARY

    wanted = native / "nmtserve_triton_backend" / TRITON_BACKEND_LIBRARY
    mapped = {line.split()[-1] for line in Path(f"/proc/{pid}/maps").read_text().splitlines()
              if line.endswith(TRITON_BACKEND_LIBRARY)}
    if not wanted.is_file() or len(mapped) != 1 or not filecmp.cmp(wanted, mapped.pop(), shallow=False):
        raise SystemExit(f"the server did not map {wanted} (mapped: {sorted(mapped) or 'no nmtserve backend'})")


class Side:
    """One side's running server and its client calls. Each side has its own cache of backends:
    two sides with different native builds install different nmtserve backend libraries."""

    def __init__(self, name: str, repository: Path, env: dict, log: Path):
        from nmtserve.server.launcher import ServerConfig, TritonServer

        self.name, self.log = name, log
        self.server = TritonServer(ServerConfig.on_free_ports(repository, log_file=log, env=env,
                                                              cache_dir=log.parent / f"cache-{name}"))

    def request(self, client, text: str) -> str:
        import tritonclient.grpc as grpcclient

        inputs = [grpcclient.InferInput("TEXT", [1], "BYTES")]
        inputs[0].set_data_from_numpy(np.array([text.encode("utf-8")], dtype=np.object_))
        # The outputs parameter as the nmtserve client sends it (a tree older than it ignores it).
        result = client.infer("translate", inputs, outputs=[grpcclient.InferRequestedOutput("TRANSLATION")],
                              parameters={"outputs": "TRANSLATION"})
        return result.as_numpy("TRANSLATION")[0].decode("utf-8")

    def client(self):
        import tritonclient.grpc as grpcclient

        return grpcclient.InferenceServerClient(self.server.urls.grpc_address)

    def concurrent(self, texts: list[str], clients: int, sentences: int) -> dict:
        """``clients`` threads, one sentence a request, ``sentences`` in all."""
        counter, failures = itertools.count(), []

        def client_thread() -> None:
            client = self.client()
            try:
                while (i := next(counter)) < sentences:
                    self.request(client, texts[i % len(texts)])
            except Exception as exc:  # noqa: BLE001 - reported after the pass
                failures.append(exc)
            finally:
                client.close()

        cpu = process_group_cpu_seconds(self.server.pid)
        started = time.perf_counter()
        threads = [threading.Thread(target=client_thread) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - started
        cpu = process_group_cpu_seconds(self.server.pid) - cpu
        if failures:
            raise SystemExit(f"{self.name}: {len(failures)} requests failed: {failures[0]}")
        return {"sentences_per_s": sentences / seconds, "server_cpu_ms": 1000 * cpu / sentences}

    def one_by_one(self, client, texts: list[str]) -> tuple[list[float], list[str]]:
        self.request(client, texts[-1])  # untimed: this side's caches warm again after the other's turn
        latencies, answers = [], []
        for text in texts:
            sent = time.perf_counter()
            answers.append(self.request(client, text))
            latencies.append(time.perf_counter() - sent)
        return latencies, answers


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repository", type=Path, required=True, help="an exported model repository")
    ap.add_argument("--repository-b", type=Path, help="side B serves this repository (the same model exported "
                                                       "another way: --request-path) instead of --repository")
    ap.add_argument("--tree-a", type=Path, help="side A's checkout (default: this one's nmtserve)")
    ap.add_argument("--tree-b", type=Path, help="side B's checkout")
    ap.add_argument("--native-a", type=Path, help="a directory with side A's nmtserve_native build")
    ap.add_argument("--native-b", type=Path, help="a directory with side B's nmtserve_native build")
    ap.add_argument("--env-a", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--env-b", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--sentences", type=int, default=640, help="sentences of a concurrent pass")
    ap.add_argument("--latency", type=int, default=300, help="sentences of the one-client pass")
    args = ap.parse_args(argv)
    if not (args.tree_b or args.native_b or args.env_b or args.tree_a or args.native_a or args.env_a
            or args.repository_b):
        ap.error("nothing differs between A and B: give --tree-b, --native-b, --env-b or --repository-b")
    texts = (ROOT / "models" / "en-fr-numbers" / "test.en").read_text(encoding="utf-8").splitlines()
    work = Path(tempfile.mkdtemp(prefix="nmtserve-ab-"))
    sides = {}
    for name, tree, native, env in (("A", args.tree_a, args.native_a, args.env_a),
                                    ("B", args.tree_b, args.native_b, args.env_b)):
        paths = [p.resolve() for p in (native, tree) if p is not None]
        repository = args.repository_b if name == "B" and args.repository_b else args.repository
        sides[name] = (side_repository(repository.resolve(), work / name, paths), tree, native,
                       side_environment(repository.resolve(), paths, dict(kv.split("=", 1) for kv in env)))
    pairs = []
    running = []
    try:
        for name, (repository, tree, native, env) in sides.items():
            side = Side(name, repository, env, work / f"tritonserver-{name}.log")
            side.server.start()
            running.append((side, tree, native))
        for side, tree, native in running:
            side.server.wait_until_ready(300)
            check_loaded(side.log, tree, native, bool(side.server.in_process_models))
            if side.server.in_process_models:
                check_backend(side.server.pid, native)
        a, b = (side for side, _, _ in running)
        clients = {side.name: side.client() for side in (a, b)}
        for side in (a, b):  # warm-up, on sentences the passes below do not time
            for text in texts[-30:]:
                side.request(clients[side.name], text)
        for pair in range(args.pairs):
            order = (a, b) if pair % 2 == 0 else (b, a)
            figures = {side.name: side.concurrent(texts, args.clients, args.sentences) for side in order}
            # One sentence at a time: the sides take blocks of 10 sentences in turn.
            latencies: dict[str, list[float]] = {"A": [], "B": []}
            answers: dict[str, list[str]] = {"A": [], "B": []}
            for lo in range(0, args.latency, 10):
                for side in order if (lo // 10) % 2 == 0 else order[::-1]:
                    lat, ans = side.one_by_one(clients[side.name], texts[lo:min(lo + 10, args.latency)])
                    latencies[side.name] += lat
                    answers[side.name] += ans
            for name in ("A", "B"):
                figures[name].update(p50_ms=1000 * statistics.median(latencies[name]),
                                     mean_ms=1000 * statistics.mean(latencies[name]))
            fa, fb = figures["A"], figures["B"]
            same = answers["A"] == answers["B"]
            ratios = {"sentences_per_s": fb["sentences_per_s"] / fa["sentences_per_s"],
                      "server_cpu_ms": fb["server_cpu_ms"] / fa["server_cpu_ms"], "p50_ms": fb["p50_ms"] / fa["p50_ms"]}
            pairs.append({"A": fa, "B": fb, "B/A": ratios, "same_answers": same})
            print(f"pair {pair + 1}: {args.clients} clients {fa['sentences_per_s']:.1f} -> {fb['sentences_per_s']:.1f} "
                  f"sent/s ({ratios['sentences_per_s']:.3f}x), server CPU {fa['server_cpu_ms']:.2f} -> "
                  f"{fb['server_cpu_ms']:.2f} ms a sentence, p50 {fa['p50_ms']:.3f} -> {fb['p50_ms']:.3f} ms "
                  f"({ratios['p50_ms']:.3f}x); same answers: {same}", flush=True)
        for client in clients.values():
            client.close()
    finally:
        for side, _, _ in running:
            side.server.stop()
        shutil.rmtree(work, ignore_errors=True)
    medians = {k: statistics.median(p["B/A"][k] for p in pairs) for k in pairs[0]["B/A"]}
    print("median B/A: " + ", ".join(f"{k} {v:.3f}" for k, v in medians.items()))
    out = {"machine": machine(), "args": {k: str(v) for k, v in vars(args).items()}, "pairs": pairs,
           "median_b_over_a": medians}
    print(f"written {write_json('served-ab', out)}")
    return 0 if all(p["same_answers"] for p in pairs) else 1


if __name__ == "__main__":
    sys.exit(main())
