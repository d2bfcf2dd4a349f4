"""What the ensemble's hops cost one sentence (issue 49, deliverable 3).

    python bench/hops.py --repository REPO [--sentences 60] [--rounds 3]

On one running ``tritonserver`` (the repository as exported), the same held-out sentences one
request at a time, in alternating rounds:

* ``translate``: the public ensemble, text in and text out (tokenize -> generate -> detokenize,
  three Python-backend models);
* ``generate``: the middle model alone on the sentence's token ids (what the ensemble hands it);
* ``tokenize`` and ``detokenize`` alone, for what each hop costs by itself.

Prints p50 / p90 latency per path (ms) and the ensemble's cost over ``generate`` per request.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repository", type=Path, required=True)
    parser.add_argument("--sentences", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    import tritonclient.grpc as grpcclient

    from nmtserve.server.launcher import ServerConfig, TritonServer

    texts = (ROOT / "models" / "en-fr-numbers" / "test.en").read_text(encoding="utf-8").splitlines()[: args.sentences]

    def tensor(name, array, dtype):
        t = grpcclient.InferInput(name, list(array.shape), dtype)
        t.set_data_from_numpy(array)
        return t

    def text_in(s):
        return [tensor("TEXT", np.array([s.encode()], dtype=np.object_), "BYTES"),
                tensor("MAX_LENGTH", np.array([args.max_length], np.int32), "INT32")]

    times: dict[str, list[float]] = {"translate": [], "generate": [], "tokenize": [], "detokenize": []}
    with TritonServer(ServerConfig.on_free_ports(args.repository)) as server:
        client = grpcclient.InferenceServerClient(server.urls.grpc_address)
        ids, outs = [], []
        for s in texts:  # what the ensemble would hand generate and detokenize
            tok = client.infer("tokenize", [tensor("TEXT", np.array([s.encode()], dtype=np.object_), "BYTES")])
            ids.append((tok.as_numpy("SRC_IDS"), tok.as_numpy("SRC_LEN")))
        for src, length in ids:
            gen = client.infer("generate", [tensor("SRC_IDS", src, "INT32"), tensor("SRC_LEN", length, "INT32"),
                                            tensor("MAX_LENGTH", np.array([args.max_length], np.int32), "INT32")])
            outs.append((gen.as_numpy("OUT_IDS"), gen.as_numpy("OUT_LEN"), gen.as_numpy("OUT_SCORE")))
        calls = {
            "translate": lambda i: client.infer("translate", text_in(texts[i])),
            "generate": lambda i: client.infer("generate", [
                tensor("SRC_IDS", ids[i][0], "INT32"), tensor("SRC_LEN", ids[i][1], "INT32"),
                tensor("MAX_LENGTH", np.array([args.max_length], np.int32), "INT32")]),
            "tokenize": lambda i: client.infer("tokenize", [tensor("TEXT", np.array([texts[i].encode()], dtype=np.object_), "BYTES")]),
            "detokenize": lambda i: client.infer("detokenize", [
                tensor("OUT_IDS", outs[i][0], "INT32"), tensor("OUT_LEN", outs[i][1], "INT32"),
                tensor("OUT_SCORE", outs[i][2], "FP32")]),
        }
        for name in calls:  # warm-up
            calls[name](0)
        for _ in range(args.rounds):
            for name, call in calls.items():
                for i in range(len(texts)):
                    start = time.perf_counter()
                    call(i)
                    times[name].append(1000 * (time.perf_counter() - start))
    report = {name: {"p50_ms": round(statistics.median(v), 3), "p90_ms": round(float(np.percentile(v, 90)), 3)}
              for name, v in times.items()}
    report["ensemble_over_generate_ms"] = round(report["translate"]["p50_ms"] - report["generate"]["p50_ms"], 3)
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    sys.exit(main())
