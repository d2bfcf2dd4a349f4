"""What the gateway's test modules share: a real `nmtserve gateway` process, a two-pair model
repository, and the demo's showcase sentences."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests
import torch

from nmtserve.demo.showcase import SHOWCASE
from nmtserve.export.pipeline import ExportOptions, export
from nmtserve.model.checkpoint import save_checkpoint
from nmtserve.model.transformer import Transformer
from nmtserve.server.launcher import free_port

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "models" / "en-fr-numbers"
# English sentence -> the demo model's exact French (written by the corpus generator).
EXPECTED = dict(SHOWCASE)


@dataclasses.dataclass
class Gateway:
    url: str  # "http://127.0.0.1:PORT"
    process: subprocess.Popen
    log: Path

    def post(self, path: str, **kw) -> requests.Response:
        return requests.post(self.url + path, timeout=60, **kw)

    def get(self, path: str, **kw) -> requests.Response:
        return requests.get(self.url + path, timeout=60, **kw)

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


@contextmanager
def running_gateway(triton_grpc: str, log_dir: Path, *options: str, ready_timeout: float = 60) -> Iterator[Gateway]:
    """`nmtserve gateway --url triton_grpc OPTIONS` on a free port, once its /health answers."""
    port = free_port()
    log = log_dir / f"gateway-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "nmtserve.cli", "gateway", "--url", triton_grpc, "--port", str(port), *options],
            stdout=out, stderr=subprocess.STDOUT,
        )
    gateway = Gateway(f"http://127.0.0.1:{port}", process, log)
    try:
        deadline = time.monotonic() + ready_timeout
        while True:
            if process.poll() is not None:
                raise AssertionError(f"the gateway exited ({process.returncode}):\n{gateway.output()}")
            try:
                if requests.get(gateway.url + "/health", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"the gateway did not answer /health in {ready_timeout} s:\n{gateway.output()}")
            time.sleep(0.1)
        yield gateway
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def export_two_pairs(directory: Path, demo_checkpoint) -> tuple[Path, Path]:
    """A repository of two pairs: en-fr (the demo model) and en-es (a 2+2-layer random model on
    the demo's sentencepiece model: a second, different model). Returns (repository, en-es
    checkpoint directory)."""
    config = dataclasses.replace(demo_checkpoint.config, d_model=64, h=4, d_ff=128, encoder_layers=2,
                                 decoder_layers=2)
    torch.manual_seed(3)
    second = directory / "en-es"
    save_checkpoint(Transformer(config).eval(), second, DEMO / "source.spm")
    repo = directory / "repository"
    common = dict(repository=repo, skip_parity=True, max_source_len=128, max_target_len=128, max_batch=16)
    export(DEMO, ExportOptions(pair="en-fr", **common))
    export(second, ExportOptions(pair="en-es", **common))
    return repo, second
