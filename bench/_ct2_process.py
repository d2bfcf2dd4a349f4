"""CTranslate2 in a process of its own (so its memory is its alone): ``ct2_worker`` serves
``translate_batch`` over stdin/stdout when this file runs as a script, ``Ct2Process`` is its
parent's handle (bench/multilingual.py)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path


def ct2_worker(argv: list[str]) -> int:
    """Serve ``translate_batch`` over stdin/stdout, one JSON object a line, requests in parallel.

    In: ``{"id": n, "src": [[token, ...], ...]}``; out: ``{"id": n, "out": [[token, ...], ...]}``
    (each sentence's best hypothesis, the target prefix and any end token included) or
    ``{"id": n, "error": "..."}``. The first line out is ``{"ready": true, "load_s": ...}``."""
    ap = argparse.ArgumentParser(prog="_ct2_process.py")
    ap.add_argument("model")
    ap.add_argument("--compute-type", required=True)
    ap.add_argument("--inter", type=int, required=True)
    ap.add_argument("--intra", type=int, required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--beam", type=int, required=True)
    ap.add_argument("--max-length", type=int, required=True)
    args = ap.parse_args(argv)
    import ctranslate2

    started = time.perf_counter()
    translator = ctranslate2.Translator(args.model, device="cpu", compute_type=args.compute_type,
                                        inter_threads=args.inter, intra_threads=args.intra)
    lock = threading.Lock()

    def send(message: dict) -> None:
        with lock:
            sys.stdout.write(json.dumps(message) + "\n")
            sys.stdout.flush()

    def handle(message: dict) -> None:
        try:
            src = message["src"]
            results = translator.translate_batch(
                src, target_prefix=[[args.prefix]] * len(src), beam_size=args.beam, length_penalty=1.0,
                max_decoding_length=args.max_length, min_decoding_length=0, return_end_token=True)
            send({"id": message["id"], "out": [r.hypotheses[0] for r in results]})
        except Exception as exc:  # noqa: BLE001 - the caller raises it
            send({"id": message["id"], "error": f"{type(exc).__name__}: {exc}"})

    send({"ready": True, "load_s": round(time.perf_counter() - started, 2), "version": ctranslate2.__version__})
    # A thread per waiting request, as compare.py's clients call translate_batch each from its own
    # thread: CT2 queues them to its workers.
    with ThreadPoolExecutor(max_workers=64) as pool:
        for line in sys.stdin:
            pool.submit(handle, json.loads(line))
    return 0


class Ct2Process:
    """This module run as a child (``ct2_worker``): ``translate(batch)`` from any thread, answers matched by id."""

    def __init__(self, model: Path, compute_type: str, inter: int, intra: int, log: Path, *, prefix: str,
                 beam: int, max_length: int):
        self._log = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, __file__, str(model), "--compute-type", compute_type, "--inter", str(inter),
             "--intra", str(intra), "--prefix", prefix, "--beam", str(beam), "--max-length", str(max_length)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True, bufsize=1)
        ready = self.proc.stdout.readline()  # type: ignore[union-attr]
        if not ready:
            raise RuntimeError(f"the CTranslate2 worker exited ({self.proc.wait()}); see {log}")
        self.ready = json.loads(ready)
        self._pending: dict[int, Future] = {}
        self._lock = threading.Lock()  # the pending table
        self._write = threading.Lock()  # stdin (apart: a full pipe must not block the reader)
        self._next = 0
        self._reader = threading.Thread(target=self._read, name="ct2-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            message = json.loads(line)
            with self._lock:
                future = self._pending.pop(message["id"])
            if "error" in message:
                future.set_exception(RuntimeError(message["error"]))
            else:
                future.set_result(message["out"])
        with self._lock:  # the worker is gone: nobody waits forever
            for future in self._pending.values():
                future.set_exception(RuntimeError("the CTranslate2 worker exited"))
            self._pending.clear()

    def translate(self, src: list[list[str]]) -> list[list[str]]:
        future: Future = Future()
        with self._lock:
            self._next += 1
            request = self._next
            self._pending[request] = future
        with self._write:
            self.proc.stdin.write(json.dumps({"id": request, "src": src}) + "\n")  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
        return future.result()

    def close(self) -> None:
        self.proc.stdin.close()  # type: ignore[union-attr]
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=10)
        self._log.close()


if __name__ == "__main__":
    sys.exit(ct2_worker(sys.argv[1:]))
