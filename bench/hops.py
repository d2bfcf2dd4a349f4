"""What the ensemble's hops cost one sentence (issue 49, deliverable 3).

    python bench/hops.py --repository REPO [--sentences 60] [--rounds 3]
    python bench/hops.py --repository REPO --against REPO_TEXT_IN_GENERATE [--bulk 256]

On one running ``tritonserver`` (the repository as exported), the same held-out sentences one
request at a time, in alternating rounds:

* ``translate``: the public ensemble, text in and text out (tokenize -> generate -> detokenize,
  three Python-backend models);
* ``generate``: the middle model alone on the sentence's token ids (what the ensemble hands it);
* ``tokenize`` and ``detokenize`` alone, for what each hop costs by itself.

Prints p50 / p90 latency per path (ms) and the ensemble's cost over ``generate`` per request.

``--against``: a second repository of the same model (``export --text-in-generate``: the
ensemble as one step), both servers up at once and measured in turn, round by round: the
one-sentence ``translate`` latency and a bulk pass (``--bulk`` sentences in requests of 32) on
each, and ``--clients`` concurrent clients sending one sentence per request (``--bulk``
sentences in all), with the ratios per round and whether both answered the same.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repository", type=Path, required=True)
    parser.add_argument("--sentences", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--against", type=Path, help="a second repository, measured in turn with the first")
    parser.add_argument("--bulk", type=int, default=256)
    parser.add_argument("--clients", type=int, default=64, help="--against: concurrent one-sentence clients (0: skip)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.against:
        return against(args)
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


def against(args) -> None:
    """Two repositories' ``translate``, one sentence at a time and in bulk, round by round."""
    import tritonclient.grpc as grpcclient

    from nmtserve.server.launcher import ServerConfig, TritonServer

    lines = (ROOT / "models" / "en-fr-numbers" / "test.en").read_text(encoding="utf-8").splitlines()
    one, bulk = lines[: args.sentences], lines[: args.bulk]

    def request(texts):
        text = grpcclient.InferInput("TEXT", [len(texts)], "BYTES")
        text.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=np.object_))
        return [text]

    names = (str(args.repository), str(args.against))
    report: dict = {"repositories": names, "rounds": []}
    with TritonServer(ServerConfig.on_free_ports(args.repository)) as a, \
            TritonServer(ServerConfig.on_free_ports(args.against)) as b:
        clients = [grpcclient.InferenceServerClient(s.urls.grpc_address) for s in (a, b)]
        answers: list[list] = [[], []]
        for client in clients:
            client.infer("translate", request(one[:4]))  # warm-up
        for _ in range(args.rounds):
            entry = {}
            for i, client in enumerate(clients):
                latencies, out = [], []
                for s in one:
                    start = time.perf_counter()
                    out.append(client.infer("translate", request([s])).as_numpy("TRANSLATION").tolist())
                    latencies.append(1000 * (time.perf_counter() - start))
                start = time.perf_counter()
                for at in range(0, len(bulk), 32):
                    out.append(client.infer("translate", request(bulk[at:at + 32])).as_numpy("TRANSLATION").tolist())
                seconds = time.perf_counter() - start
                answers[i] = out
                entry[names[i]] = {"p50_ms": round(statistics.median(latencies), 3),
                                   "p90_ms": round(float(np.percentile(latencies, 90)), 3),
                                   "bulk_sent_per_s": round(len(bulk) / seconds, 1)}
                if args.clients:
                    address = (a, b)[i].urls.grpc_address
                    local = threading.local()

                    def one_request(s, address=address, local=local):
                        if not hasattr(local, "client"):
                            local.client = grpcclient.InferenceServerClient(address)
                        return local.client.infer("translate", request([s])).as_numpy("TRANSLATION").tolist()

                    start = time.perf_counter()
                    with ThreadPoolExecutor(args.clients) as pool:
                        served = list(pool.map(one_request, bulk))
                    entry[names[i]]["clients_sent_per_s"] = round(len(bulk) / (time.perf_counter() - start), 1)
                    answers[i] = [*out, *served]
            x, y = entry[names[0]], entry[names[1]]
            entry["p50_first_over_second"] = round(x["p50_ms"] / y["p50_ms"], 3)
            entry["bulk_second_over_first"] = round(y["bulk_sent_per_s"] / x["bulk_sent_per_s"], 3)
            if args.clients:
                entry["clients_second_over_first"] = round(y["clients_sent_per_s"] / x["clients_sent_per_s"], 3)
            report["rounds"].append(entry)
            print(json.dumps(entry), flush=True)
        report["same_answers"] = answers[0] == answers[1]
    print(json.dumps({"same_answers": report["same_answers"]}))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    sys.exit(main())
