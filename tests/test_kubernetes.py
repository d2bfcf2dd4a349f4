"""deploy/kubernetes and the CPU image: every overlay renders with `kubectl kustomize`, validates
against the Kubernetes schemas (kubernetes-validate, strict), and keeps the rules a review would
check: probes on Triton's health endpoints, graceful termination, limits, non-root where the
image allows, a GPU per GPU replica, the autoscaler's metric being one the server exports.
The manifests are also played for real under podman: tests/test_containers.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy" / "kubernetes"
OVERLAYS = ("gpu", "cpu")
KUBERNETES_VERSION = "1.30.0"


def render(overlay: str) -> list[dict]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl (with kustomize) is not installed")
    out = subprocess.run([kubectl, "kustomize", str(K8S / "overlays" / overlay)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_and_validates_strictly(overlay):
    import kubernetes_validate

    docs = render(overlay)
    assert {d["kind"] for d in docs} >= {"Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler",
                                         "PersistentVolumeClaim"}
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)  # raises naming the field


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_replicas_probe_terminate_gracefully_and_set_limits(overlay):
    (deployment,) = by_kind(render(overlay), "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["startupProbe"]["periodSeconds"] * container["startupProbe"]["failureThreshold"] >= 900
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert pod["terminationGracePeriodSeconds"] >= 15  # serve drains in ~2 s; Triton's exit timeout is 5 s
    assert {"cpu", "memory"} <= set(container["resources"]["limits"])
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/models"]["readOnly"] is True and "/dev/shm" in mounts


def test_gpu_replicas_get_a_gpu_and_a_shared_plan_cache():
    docs = render("gpu")
    (container,) = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert container["image"].startswith("nmtserve-triton:")
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["NMTSERVE_ENGINE_CACHE"] == "/cache" and env["NMTSERVE_FP16_GATE"] == "fallback"
    claims = {d["metadata"]["name"]: d for d in by_kind(docs, "PersistentVolumeClaim")}
    assert claims["nmtserve-engine-cache"]["spec"]["accessModes"] == ["ReadWriteMany"]


def test_cpu_replicas_run_as_non_root_on_a_read_only_root():
    (deployment,) = by_kind(render("cpu"), "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 10001
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    assert container["image"].startswith("nmtserve-cpu:")


def test_services_pdb_and_autoscaler_fit_the_server():
    from nmtserve.server.triton_models import _EngineMetrics

    docs = render("cpu")
    services = {d["metadata"]["name"]: d for d in by_kind(docs, "Service")}
    assert services["nmtserve-replicas"]["spec"]["clusterIP"] == "None"  # DNS lists every replica
    assert {p["port"] for p in services["nmtserve"]["spec"]["ports"]} == {8000, 8001, 8002}
    (pdb,) = by_kind(docs, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    (hpa,) = by_kind(docs, "HorizontalPodAutoscaler")
    pod_metrics = [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"]
    assert pod_metrics and set(pod_metrics) <= set(_EngineMetrics.GAUGES)  # a gauge the server really exports
    labels = by_kind(docs, "Deployment")[0]["spec"]["selector"]["matchLabels"]
    assert all(s["spec"]["selector"] == labels for s in services.values())


def test_kserve_example_uses_the_triton_predictor_with_the_nmtserve_image():
    doc = yaml.safe_load((K8S / "kserve" / "inferenceservice.yaml").read_text())
    assert doc["apiVersion"] == "serving.kserve.io/v1beta1" and doc["kind"] == "InferenceService"
    triton = doc["spec"]["predictor"]["triton"]
    assert triton["storageUri"].startswith("s3://") and triton["image"].startswith("nmtserve-triton:")
    assert {e["name"] for e in triton["env"]} >= {"NMTSERVE_MODEL_REPOSITORY", "NMTSERVE_ENGINE_CACHE"}


def test_cpu_dockerfile_passes_hadolint_and_runs_serve_as_non_root():
    dockerfile = ROOT / "docker" / "Dockerfile.cpu"
    text = dockerfile.read_text()
    assert "USER 10001" in text and '"nmtserve", "serve", "--host", "0.0.0.0"' in text
    assert '"--console-log"' in text  # Triton's own log in the container's (docker/podman logs)
    assert "ARG BASE_IMAGE=python:3.11-slim-bookworm\n" in text and "\nFROM ${BASE_IMAGE}\n" in text  # the official image by default
    # nmtserve_native built in a stage of its own (no compiler in the image) and installed: exact int8 on every CPU
    assert "FROM ${BASE_IMAGE} AS native" in text and "wheels/nmtserve_native-*.whl" in text
    from helpers import assert_hadolint_passes

    assert_hadolint_passes(dockerfile)


def test_grafana_dashboard_queries_only_metrics_the_server_exports():
    import json
    import re

    from nmtserve.server.triton_models import _EngineMetrics

    dashboard = json.loads((ROOT / "deploy" / "grafana" / "nmtserve-dashboard.json").read_text())
    ours = set(_EngineMetrics.GAUGES) | set(_EngineMetrics.COUNTERS)
    used = {name for p in dashboard["panels"] for t in p["targets"]
            for name in re.findall(r"\b((?:nmtserve|nv)_[a-z_]+)\b", t["expr"])}
    assert {n for n in used if n.startswith("nmtserve_")} <= ours
    assert {"nmtserve_batch_occupancy", "nmtserve_request_seconds_total", "nmtserve_sentences_queued"} <= used
    assert {n for n in used if n.startswith("nv_")} <= {"nv_inference_request_success", "nv_inference_request_failure"}
