"""How the gateway is shipped and deployed: the page inside the wheel, its image (hadolint, only
what its .dockerignore lets in), its compose service, its Kubernetes Deployment and Service
(rendered by kustomize, validated strictly against the Kubernetes schemas, with probes)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "docker" / "Dockerfile.gateway"
K8S = ROOT / "deploy" / "kubernetes"
STATIC = ("index.html", "app.js", "style.css", "favicon.svg")


def test_the_page_ships_in_the_wheel(tmp_path):
    source = tmp_path / "src"  # a copy: setuptools builds in the source tree
    shutil.copytree(ROOT / "nmtserve", source / "nmtserve", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                          "-w", str(tmp_path / "dist"), str(source)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("nmtserve-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"nmtserve/gateway/static/{name}" for name in STATIC} <= names


def test_the_page_loads_nothing_from_elsewhere():
    for name in STATIC:
        text = (ROOT / "nmtserve" / "gateway" / "static" / name).read_text(encoding="utf-8")
        assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", text), name
        assert "@import" not in text and "url(" not in text, name


def test_the_image_passes_hadolint_and_copies_only_what_its_dockerignore_lets_in():
    from helpers import assert_hadolint_passes

    assert_hadolint_passes(DOCKERFILE)
    text = DOCKERFILE.read_text()
    allowed = {line[1:].rstrip("/") for line in Path(f"{DOCKERFILE}.dockerignore").read_text().splitlines()
               if line.startswith("!")}
    for sources in re.findall(r"^COPY (.+) \S+$", text, re.MULTILINE):
        for src in sources.split():
            assert src in allowed and (ROOT / src).exists(), src
    assert '".[gateway]"' in text and re.search(r"^USER 10001$", text, re.MULTILINE)
    assert re.search(r'^ENTRYPOINT \["nmtserve", "gateway", "--host", "0.0.0.0"', text, re.MULTILINE)


def test_compose_runs_the_gateway_beside_triton(tmp_path):
    from test_gpu_deploy import _compose_command

    command, env = _compose_command(tmp_path)
    out = subprocess.run([*command, "-f", str(ROOT / "docker-compose.yml"), "config", "--format", "json"],
                         capture_output=True, text=True, env=env, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    service = json.loads(out.stdout)["services"]["gateway"]
    assert service["build"]["dockerfile"] == "docker/Dockerfile.gateway"
    assert service["command"] == ["--url", "triton:8001"]
    assert {(p["target"], str(p["published"])) for p in service["ports"]} == {(5000, "5000")}
    assert "triton" in service["depends_on"]
    assert any("/health" in part for part in service["healthcheck"]["test"])


def _render(directory: Path) -> list[dict]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl (with kustomize) is not installed")
    out = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def test_kubernetes_deployment_and_service_validate_and_probe_health():
    import kubernetes_validate

    docs = _render(K8S / "gateway")
    for doc in docs:
        kubernetes_validate.validate(doc, "1.30.0", strict=True)
    kinds = {d["kind"]: d for d in docs}
    assert set(kinds) == {"Deployment", "Service"}
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}
    assert container["ports"] == [{"name": "http", "containerPort": 5000}]
    assert {"cpu", "memory"} <= set(container["resources"]["limits"])
    assert container["securityContext"]["readOnlyRootFilesystem"] is True and pod["securityContext"]["runAsNonRoot"]
    # /tmp: translated files; /var/lib/nmtserve: glossaries ($NMTSERVE_STATE_DIR), the root being read-only
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/tmp", "/var/lib/nmtserve"}
    service = kinds["Service"]["spec"]
    assert service["selector"] == kinds["Deployment"]["spec"]["selector"]["matchLabels"]
    assert service["sessionAffinity"] == "ClientIP"  # a translated file is downloaded from its pod


def test_the_gateway_reaches_every_triton_replica_through_the_headless_service():
    (deployment,) = [d for d in _render(K8S / "gateway") if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    url = container["args"][container["args"].index("--url") + 1]
    match = re.fullmatch(r"dns:///([a-z0-9-]+):(\d+)", url)
    assert match, url
    triton = {d["metadata"]["name"]: d for d in _render(K8S / "overlays" / "cpu") if d["kind"] == "Service"}
    headless = triton[match.group(1)]["spec"]
    assert headless["clusterIP"] == "None"
    assert int(match.group(2)) in {p["port"] for p in headless["ports"] if p["name"] == "grpc"}
