"""Replicas: one vs two local tritonservers behind one client, and the failover of in-flight work.

    python bench/replicas.py [--sentences 1000] [--repository DIR]

Exports the demo model (unless ``--repository`` names an exported one), starts two servers on
loopback, and measures with one ``Translator`` (batch 16, 8 requests in flight):

* bulk throughput over one replica, then over both (on this 2-core machine the two servers
  share the same cores, so two replicas cannot be faster than one: this measures what the
  spreading costs, not what a second machine gains);
* a run over both in which the second server is killed (SIGKILL) after 200 answers: its total
  time, the longest pause between two consecutive in-order answers (the failover stall), and
  that every answer is still its own reference translation, in order;
* the second server started again on the same port: seconds from its readiness until the
  client sends it work again.

Every answer is compared with the served reference from the first run. Writes
``bench/results/replicas-*.json``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DEFAULT_CHECKPOINT, load_average, machine, markdown_table, write_json  # noqa: E402


def _server(repo: Path, grpc_port: int | None = None):
    from nmtserve.server.launcher import ServerConfig, TritonServer

    return TritonServer(ServerConfig.on_free_ports(repo, **({"grpc_port": grpc_port} if grpc_port else {})))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--repository", type=Path, default=None, help="an exported repository (default: export the demo)")
    args = parser.parse_args(argv)

    from nmtserve.client import Translator
    from nmtserve.export.pipeline import ExportOptions, export

    texts = (DEFAULT_CHECKPOINT / "test.en").read_text(encoding="utf-8").splitlines()[: args.sentences]
    rows: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="nmtserve-replicas-") as tmp:
        repo = args.repository
        if repo is None:
            repo = Path(tmp) / "model_repository"
            export(DEFAULT_CHECKPOINT, ExportOptions(repository=repo, skip_parity=True, max_target_len=128))
        a, b = _server(repo), _server(repo)
        a.start()
        b.start()
        revived = None
        try:
            a.wait_until_ready(180)
            b.wait_until_ready(180)
            rows["load_before"] = load_average()
            urls = [a.urls.grpc_address, b.urls.grpc_address]
            options = dict(batch_size=16, concurrency=8, max_retries=6)
            with Translator(urls[:1], **options) as one:
                one.translate(texts[:64])  # warm-up
                started = time.perf_counter()
                want = [t.text for t in one.translate(texts)]
                rows["one_replica_sent_per_s"] = round(len(texts) / (time.perf_counter() - started), 1)
            with Translator(urls, **options) as both:
                both.translate(texts[:64])
                started = time.perf_counter()
                same = [t.text for t in both.translate(texts)] == want
                rows["two_replicas_sent_per_s"] = round(len(texts) / (time.perf_counter() - started), 1)
                rows["two_replicas_identical"] = same
                rows["requests_per_replica"] = [r.requests for r in both._transport.replicas]

                got: list[str] = []
                stamps: list[float] = []

                def kill_after_200() -> None:
                    while len(got) < 200:
                        time.sleep(0.005)
                    b.kill()

                killer = threading.Thread(target=kill_after_200)
                killer.start()
                started = time.perf_counter()
                for t in both.translate_iter(texts):
                    got.append(t.text)
                    stamps.append(time.perf_counter())
                killer.join()
                gaps = [y - x for x, y in zip([started, *stamps], stamps, strict=False)]
                rows["with_kill_sent_per_s"] = round(len(texts) / (stamps[-1] - started), 1)
                rows["with_kill_identical_in_order"] = got == want
                rows["longest_pause_s"] = round(max(gaps), 3)

                port = int(urls[1].rsplit(":", 1)[1])
                revived = _server(repo, grpc_port=port)
                revived.start()
                revived.wait_until_ready(180)
                ready = time.perf_counter()
                replica_b = next(r for r in both._transport.replicas if r.address == urls[1])
                before = replica_b.requests
                while replica_b.requests == before and time.perf_counter() - ready < 60:
                    both.translate(texts[:32])
                rows["back_in_service_s"] = round(time.perf_counter() - ready, 2)
        finally:
            for server in (a, b, revived):
                if server is not None:
                    server.stop()
    print(markdown_table(list(rows), [list(rows.values())]))
    path = write_json("replicas", {"machine": machine(), "sentences": len(texts), "summary": rows})
    print(f"written {path}")
    return 0 if rows.get("two_replicas_identical") and rows.get("with_kill_identical_in_order") else 1


if __name__ == "__main__":
    sys.exit(main())
