"""Retake docs/gateway-page.png: the gateway's page on the served demo model, in Debian's chromium.

    python scripts/gateway-screenshot.py [--repository DIR] [--text "..."] [--out docs/gateway-page.png]

Exports the demo model into a temporary repository (unless ``--repository`` names one), starts
tritonserver and ``nmtserve gateway`` on free ports, types ``--text`` into the page, waits for
its translation and writes the screenshot. Needs chromium (``apt-get install chromium``) and the
test extras (playwright).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

TEXT = "I have three red apples. The train leaves at 7:45."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repository", type=Path)
    parser.add_argument("--text", default=TEXT)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "gateway-page.png")
    args = parser.parse_args()
    chromium = shutil.which("chromium")
    if chromium is None:
        raise SystemExit("chromium is not installed (Debian: apt-get install chromium)")
    from gateway_helpers import running_gateway
    from playwright.sync_api import sync_playwright

    from nmtserve.export.pipeline import ExportOptions, export
    from nmtserve.server.launcher import ServerConfig, TritonServer

    with tempfile.TemporaryDirectory(prefix="nmtserve-screenshot-") as tmp:
        repository = args.repository
        if repository is None:
            repository = Path(tmp) / "model_repository"
            export(ROOT / "models" / "en-fr-numbers", ExportOptions(repository=repository, skip_parity=True))
        with TritonServer(ServerConfig.on_free_ports(repository)) as server:
            server.wait_until_ready(120)
            with running_gateway(server.urls.grpc_address, Path(tmp)) as gateway, sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=chromium)
                page = browser.new_page(viewport={"width": 1100, "height": 560})
                page.goto(gateway.url + "/")
                page.fill("#source-text", args.text)
                page.click("#translate")
                page.wait_for_function("document.getElementById('translation').value !== ''")
                page.wait_for_timeout(300)
                page.screenshot(path=str(args.out))
                print(f"{args.out}: {page.input_value('#translation')!r}")
                browser.close()


if __name__ == "__main__":
    main()
