"""Offline checks of the Kubernetes manifests: render every overlay with `kubectl
kustomize`, validate every document against the Kubernetes schema, and assert the
properties the Raft cluster relies on.

The property checks are plain functions raising AssertionError; test_checks_catch_*
feeds them deliberately broken manifests, so a check that can no longer fail is noticed.
"""
from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from fnmatch import fnmatch
from pathlib import Path
from typing import Any, Callable

import kubernetes_validate
import pytest
import yaml

import coordinator
from coordinator import config as node_config
from coordinator.transport.server import LIVENESS_SERVICE
from tests.support.manifests import render_overlay

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
EXPECTED_REPLICAS = {"dev": 3, "dev-single": 1, "prod": 5, "release": 5}
OVERLAYS = list(EXPECTED_REPLICAS)
# The oldest Kubernetes we claim to support (persistentVolumeClaimRetentionPolicy is GA
# in 1.32) and the newest schema the installed kubernetes-validate ships.
K8S_VERSIONS = sorted({"1.33.0", kubernetes_validate.latest_version()})
COORDINATOR_LABELS = {"app.kubernetes.io/name": "raftpoint", "app.kubernetes.io/component": "coordinator"}
AGENT_LABELS = {"raftpoint.io/agent": "true"}
RAFT, GRPC, METRICS, PROBES = 7000, 50051, 9100, 9101
SECRET_NAME, PASSWORD_KEY = "raftpoint-secrets", "raft-password"


# ---- rendering ------------------------------------------------------------------------
render = render_overlay


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, [d["metadata"]["name"] for d in found])
    return found[0]


def pod_spec(docs: list[dict]) -> dict:
    return one(docs, "StatefulSet")["spec"]["template"]["spec"]


def coordinator_container(docs: list[dict]) -> dict:
    [container] = [c for c in pod_spec(docs)["containers"] if c["name"] == "coordinator"]
    return container


def effective_env(docs: list[dict], container: dict) -> dict[str, Any]:
    """The container's environment as the kubelet builds it: envFrom, then env (which wins).
    Values from the downward API or secrets stay as their valueFrom dicts."""
    env: dict[str, Any] = {}
    for source in container.get("envFrom", []):
        assert "configMapRef" in source, f"unexpected envFrom source {source}"
        env.update(one(docs, "ConfigMap", source["configMapRef"]["name"])["data"])
    for var in container.get("env", []):
        env[var["name"]] = var["value"] if "value" in var else var.get("valueFrom")
    return env


def selects(selector: dict, labels: dict) -> bool:
    assert set(selector) <= {"matchLabels"}, f"only matchLabels selectors are checked here: {selector}"
    return selector.get("matchLabels", {}).items() <= labels.items()


def quantity(value: str | int) -> float:
    """Kubernetes quantity -> float (cores or bytes)."""
    units = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
             "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40}
    match = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", str(value))
    assert match and (match[2] in units or not match[2]), f"cannot parse quantity {value!r}"
    return float(match[1]) * units.get(match[2], 1)


# ---- property checks (each raises AssertionError) -----------------------------------
def check_statefulset(docs: list[dict]) -> None:
    sts = one(docs, "StatefulSet", "raftpoint")
    spec = sts["spec"]
    assert spec["podManagementPolicy"] == "Parallel"  # a quorum must start together
    assert spec["serviceName"] == "raftpoint-peers"
    assert spec.get("updateStrategy", {}).get("type", "RollingUpdate") == "RollingUpdate"
    labels = spec["template"]["metadata"]["labels"]
    assert COORDINATOR_LABELS.items() <= labels.items()
    assert selects(spec["selector"], labels)
    pod = spec["template"]["spec"]
    assert 20 <= pod["terminationGracePeriodSeconds"] <= 60
    assert pod.get("enableServiceLinks") is False  # Service "raftpoint" would inject RAFTPOINT_* vars
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert any(t["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
               and selects(t["podAffinityTerm"]["labelSelector"], labels) for t in anti)
    annotations = spec["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(METRICS)
    ports = {p["name"]: p["containerPort"] for p in coordinator_container(docs)["ports"]}
    assert ports == {"raft": RAFT, "grpc": GRPC, "metrics": METRICS, "probe": PROBES}


def check_security(docs: list[dict]) -> None:
    pod = pod_spec(docs)
    context = pod["securityContext"]
    assert context["runAsNonRoot"] is True
    assert context.get("runAsUser", 10001) != 0
    for container in pod["containers"] + pod.get("initContainers", []):
        sc = container["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True, container["name"]
        assert sc["allowPrivilegeEscalation"] is False, container["name"]
        assert sc["capabilities"]["drop"] == ["ALL"] and not sc["capabilities"].get("add"), container["name"]
        assert sc.get("runAsUser", 10001) != 0 and not sc.get("privileged", False), container["name"]
    mounts = {m["mountPath"]: m["name"] for m in coordinator_container(docs)["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]  # the only writable place besides the PVC


def check_resources(docs: list[dict]) -> None:
    pod = pod_spec(docs)
    for container in pod["containers"] + pod.get("initContainers", []):
        resources = container["resources"]
        for kind in ("cpu", "memory"):
            request, limit = resources["requests"][kind], resources["limits"][kind]
            assert 0 < quantity(request) <= quantity(limit), (container["name"], kind, request, limit)


def http_probe(docs: list[dict], probe: dict) -> tuple[str, int, str]:
    """(path, container port number, scheme) of an httpGet probe."""
    get = probe["httpGet"]
    ports = {p["name"]: p["containerPort"] for p in coordinator_container(docs)["ports"]}
    return get["path"], ports.get(get["port"], get["port"]), get.get("scheme", "HTTP")


def check_probes(docs: list[dict]) -> None:
    container = coordinator_container(docs)
    env = effective_env(docs, container)
    assert env.get("RAFTPOINT_PROBE_PORT") == str(PROBES), "the probe port is not served"
    # The plain probe port: the kubelet shows no client certificate to the metrics port.
    readiness = container["readinessProbe"]
    assert http_probe(docs, readiness) == ("/readyz", PROBES, "HTTP"), readiness
    liveness = container["livenessProbe"]
    # /readyz fails without a leader: liveness must not use it, or a cluster that lost
    # quorum would restart itself in a loop; /livez does not.
    assert http_probe(docs, liveness) == ("/livez", PROBES, "HTTP"), liveness
    assert liveness["periodSeconds"] * liveness["failureThreshold"] >= 30
    startup = container["startupProbe"]
    assert http_probe(docs, startup)[1] == PROBES and startup["httpGet"]["path"] != "/readyz", startup
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120  # store/snapshot load


def check_replicas_match_config(docs: list[dict], expected: int | None = None) -> None:
    sts = one(docs, "StatefulSet", "raftpoint")
    replicas = sts["spec"]["replicas"]
    if expected is not None:
        assert replicas == expected
    pod = pod_spec(docs)
    for container in pod["containers"] + pod.get("initContainers", []):
        env = effective_env(docs, container)
        assert env["RAFTPOINT_HEADLESS_SERVICE"].split(".")[0] == sts["spec"]["serviceName"]
        assert env["RAFTPOINT_POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
        if container["name"] == "coordinator":
            # Every pod derives its peers from this: it must be the real replica count.
            assert int(env["RAFTPOINT_STATEFULSET_REPLICAS"]) == replicas


def check_config_keys_are_node_settings(docs: list[dict]) -> None:
    """Unknown RAFTPOINT_* variables are silently ignored by the node: catch typos here."""
    fields = {f.name.upper() for f in node_config.dataclasses.fields(node_config.NodeConfig)} | {"CONFIG"}
    env = effective_env(docs, coordinator_container(docs))
    unknown = sorted(k for k in env if k.startswith("RAFTPOINT_") and k.removeprefix("RAFTPOINT_") not in fields)
    assert not unknown, f"not NodeConfig fields: {unknown}"
    # Service links would inject <SERVICE>_SERVICE_HOST, <SERVICE>_PORT, ... for every
    # Service with a cluster IP; "raftpoint" shares the node's prefix.
    if pod_spec(docs).get("enableServiceLinks", True):
        for svc in (d for d in docs if d["kind"] == "Service" and d["spec"].get("clusterIP") != "None"):
            prefix = svc["metadata"]["name"].upper().replace("-", "_") + "_"
            assert prefix != "RAFTPOINT_", "service links inject RAFTPOINT_* variables; set enableServiceLinks: false"


def check_raft_password_from_secret(docs: list[dict]) -> None:
    assert not any(d["kind"] == "Secret" for d in docs)  # the Secret is created out of band
    config = one(docs, "ConfigMap", "raftpoint-config")["data"]
    assert "RAFTPOINT_RAFT_PASSWORD" not in config
    pod = pod_spec(docs)
    container = coordinator_container(docs)
    env = effective_env(docs, container)
    literal = [v["name"] for c in pod["containers"] + pod.get("initContainers", []) for v in c.get("env", [])
               if "PASSWORD" in v["name"] and "value" in v]
    assert not literal, f"literal password values: {literal}"
    if "RAFTPOINT_RAFT_PASSWORD_FILE" in env:
        path = env["RAFTPOINT_RAFT_PASSWORD_FILE"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        for mount in container["volumeMounts"]:
            volume = volumes.get(mount["name"], {})  # "data" is a volumeClaimTemplate
            if "secret" in volume and path.startswith(mount["mountPath"].rstrip("/") + "/"):
                assert mount.get("readOnly") is True
                secret = volume["secret"]
                assert secret["secretName"] == SECRET_NAME and not secret.get("optional", False)
                inside = path[len(mount["mountPath"].rstrip("/")) + 1:]
                items = {i["path"]: i["key"] for i in secret.get("items", [])} or {PASSWORD_KEY: PASSWORD_KEY}
                assert items.get(inside) == PASSWORD_KEY, (inside, items)
                # Files are root-owned; the node (runAsUser 10001) reads them via fsGroup.
                mode = secret.get("defaultMode", 0o644)
                assert mode & 0o040 and not mode & 0o007, oct(mode)
                assert pod["securityContext"].get("fsGroup") == pod["securityContext"].get("runAsGroup")
                return
        raise AssertionError(f"RAFTPOINT_RAFT_PASSWORD_FILE={path} is not inside a mounted {SECRET_NAME} Secret")
    ref = env.get("RAFTPOINT_RAFT_PASSWORD")
    assert isinstance(ref, dict) and ref["secretKeyRef"] == {"name": SECRET_NAME, "key": PASSWORD_KEY}, ref


def check_storage(docs: list[dict]) -> None:
    spec = one(docs, "StatefulSet", "raftpoint")["spec"]
    [template] = spec["volumeClaimTemplates"]
    assert template["spec"]["accessModes"] == ["ReadWriteOnce"]
    size = quantity(template["spec"]["resources"]["requests"]["storage"])
    env = effective_env(docs, coordinator_container(docs))
    mounts = {m["mountPath"]: m["name"] for m in coordinator_container(docs)["volumeMounts"]}
    assert mounts[env["RAFTPOINT_DATA_DIR"]] == template["metadata"]["name"]  # state lives on the PVC
    # LMDB at its cap plus one compact snapshot copy of it must fit on the volume.
    assert 2 * int(env["RAFTPOINT_MAX_MAP_SIZE_MB"]) * 2 ** 20 < size
    assert int(env["RAFTPOINT_MAP_SIZE_MB"]) <= int(env["RAFTPOINT_MAX_MAP_SIZE_MB"])
    assert spec["persistentVolumeClaimRetentionPolicy"]["whenScaled"] == "Retain"


def check_services_and_pdb(docs: list[dict]) -> None:
    labels = one(docs, "StatefulSet")["spec"]["template"]["metadata"]["labels"]
    peers = one(docs, "Service", "raftpoint-peers")["spec"]
    assert peers["clusterIP"] == "None" and peers["publishNotReadyAddresses"] is True
    assert [(p["port"], p["targetPort"]) for p in peers["ports"]] == [(RAFT, "raft")]
    client = one(docs, "Service", "raftpoint")["spec"]
    assert client.get("clusterIP") != "None"
    assert sorted((p["port"], p["targetPort"]) for p in client["ports"]) == [(METRICS, "metrics"), (GRPC, "grpc")]
    assert all(p["port"] != RAFT for p in client["ports"])  # Raft is never behind a load balancer
    for spec in (peers, client):
        assert spec["selector"].items() <= labels.items()
    pdb = one(docs, "PodDisruptionBudget")["spec"]
    assert pdb["maxUnavailable"] == 1 and "minAvailable" not in pdb
    assert selects(pdb["selector"], labels)


def check_network_policy(docs: list[dict]) -> None:
    labels = one(docs, "StatefulSet")["spec"]["template"]["metadata"]["labels"]
    policy = one(docs, "NetworkPolicy")["spec"]
    assert selects(policy["podSelector"], labels) and policy["podSelector"]["matchLabels"]
    assert "Ingress" in policy["policyTypes"]
    rules = policy["ingress"]
    for rule in rules:  # a rule without ports or peers opens every port or every source
        assert rule.get("ports") and rule.get("from"), rule

    def allowed(port: int) -> list[dict]:
        return [peer for r in rules if any(p["port"] == port for p in r["ports"]) for peer in r["from"]]

    # Raft: from coordinator pods of this namespace only.
    raft = allowed(RAFT)
    assert raft, "the coordinators could not reach each other's Raft port"
    for peer in raft:
        assert set(peer) == {"podSelector"}, f"Raft open beyond this namespace's pods: {peer}"
        assert peer["podSelector"]["matchLabels"].items() >= COORDINATOR_LABELS.items(), peer
        assert selects(peer["podSelector"], labels)
    # gRPC: agents, and nobody without a selector (no ipBlock, no empty selector).
    grpc = allowed(GRPC)
    assert {"podSelector": {"matchLabels": AGENT_LABELS}} in grpc
    for peer in grpc:
        assert "ipBlock" not in peer
        assert peer["podSelector"]["matchLabels"], peer
        assert (peer["podSelector"]["matchLabels"].items() >= AGENT_LABELS.items()
                or selects(peer["podSelector"], labels)), peer
    # Metrics: this namespace or the monitoring namespace.
    metrics = allowed(METRICS)
    assert metrics and all("ipBlock" not in peer for peer in metrics)
    # The probe port is the kubelet's alone: traffic from a pod's own node passes any policy.
    assert not allowed(PROBES), "the plain probe port is open to pods"
    assert all(p["port"] in (RAFT, GRPC, METRICS) and p.get("protocol", "TCP") == "TCP"
               for r in rules for p in r["ports"])


def check_config_loads_for_every_pod(docs: list[dict], secret_file: Path) -> None:
    """The rendered environment is accepted by the node's own loader, for each ordinal."""
    sts = one(docs, "StatefulSet", "raftpoint")
    replicas, headless = sts["spec"]["replicas"], sts["spec"]["serviceName"]
    env = {k: v for k, v in effective_env(docs, coordinator_container(docs)).items() if isinstance(v, str)}
    env["RAFTPOINT_RAFT_PASSWORD_FILE"] = str(secret_file)  # where the Secret mount would be
    for i in range(replicas):
        cfg = node_config.load(env={**env, "RAFTPOINT_POD_NAME": f"raftpoint-{i}"})
        assert cfg.raft_address == f"raftpoint-{i}.{headless}:{RAFT}"
        assert cfg.grpc_address.endswith(f":{GRPC}") and cfg.metrics_address.endswith(f":{METRICS}")
        assert cfg.probe_address == f"raftpoint-{i}.{headless}:{PROBES}"
        assert sorted(p.raft for p in cfg.peer_list()) == sorted(
            f"raftpoint-{j}.{headless}:{RAFT}" for j in range(replicas) if j != i)
        assert cfg.store == "lmdb" and cfg.dynamic_membership
        assert cfg.dns_cache_time <= 30 and cfg.leader_fallback_timeout <= 10


TLS_SECRET = "raftpoint-tls"
TLS_FILES = {"RAFTPOINT_TLS_CERT_FILE": "tls.crt", "RAFTPOINT_TLS_KEY_FILE": "tls.key",
             "RAFTPOINT_TLS_CLIENT_CA_FILE": "ca.crt"}


def check_tls_from_secret(docs: list[dict]) -> None:
    """The node's certificate, key and client CA come from the mounted TLS Secret, as a
    directory (a subPath mount never sees a renewed certificate), and clients must show one."""
    env = effective_env(docs, coordinator_container(docs))
    assert env.get("RAFTPOINT_INSECURE", "false") in ("false", "0", "no")
    assert env.get("RAFTPOINT_TLS_CLIENT_AUTH") == "require"
    pod = pod_spec(docs)
    volumes = {v["name"]: v for v in pod["volumes"]}
    for variable, key in TLS_FILES.items():
        path = env.get(variable)
        assert isinstance(path, str), f"{variable} is not set"
        mounts = [m for m in coordinator_container(docs)["volumeMounts"]
                  if path.startswith(m["mountPath"].rstrip("/") + "/")]
        assert len(mounts) == 1, (variable, path)
        mount = mounts[0]
        assert mount.get("readOnly") is True and "subPath" not in mount, mount
        secret = volumes[mount["name"]]["secret"]
        assert secret["secretName"] == TLS_SECRET and not secret.get("optional", False)
        inside = path[len(mount["mountPath"].rstrip("/")) + 1:]
        items = {i["path"]: i["key"] for i in secret.get("items", [])} or {key: key}
        assert items.get(inside) == key, (inside, items)
        mode = secret.get("defaultMode", 0o644)
        assert not mode & 0o007, oct(mode)


ALL_CHECKS: list[Callable[[list[dict]], None]] = [
    check_statefulset, check_security, check_resources, check_probes, check_replicas_match_config,
    check_config_keys_are_node_settings, check_raft_password_from_secret, check_storage,
    check_services_and_pdb, check_network_policy, check_tls_from_secret,
]


# ---- tests on the real overlays ---------------------------------------------------------
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_expected_kinds(overlay: str) -> None:
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in render(overlay))
    assert kinds == [("ConfigMap", "raftpoint-auth"), ("ConfigMap", "raftpoint-config"), ("NetworkPolicy", "raftpoint"),
                     ("PodDisruptionBudget", "raftpoint"), ("Service", "raftpoint"),
                     ("Service", "raftpoint-peers"), ("StatefulSet", "raftpoint")]


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_document_is_schema_valid(overlay: str, version: str) -> None:
    for doc in render(overlay):
        kubernetes_validate.validate(doc, version, strict=True)


def test_schema_validation_can_fail() -> None:
    sts = one(render("dev"), "StatefulSet")
    sts["spec"]["podManagmentPolicy"] = sts["spec"].pop("podManagementPolicy")  # a typo
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(sts, K8S_VERSIONS[0], strict=True)


@pytest.mark.parametrize("check", ALL_CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_property(overlay: str, check: Callable[[list[dict]], None]) -> None:
    check(render(overlay))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_replicas_per_overlay(overlay: str) -> None:
    check_replicas_match_config(render(overlay), EXPECTED_REPLICAS[overlay])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_node_config_loads_for_every_pod(overlay: str, tmp_path: Path) -> None:
    secret = tmp_path / PASSWORD_KEY
    secret.write_text("from-the-secret-mount\n")
    check_config_loads_for_every_pod(render(overlay), secret)


def test_prod_is_bigger_than_dev() -> None:
    dev, prod = coordinator_container(render("dev")), coordinator_container(render("prod"))
    for kind in ("cpu", "memory"):
        assert quantity(prod["resources"]["limits"][kind]) >= quantity(dev["resources"]["limits"][kind])
    assert quantity(prod["resources"]["requests"]["memory"]) > quantity(dev["resources"]["requests"]["memory"])


def container_images(docs: list[dict]) -> dict[str, str]:
    pod = pod_spec(docs)
    return {c["name"]: c["image"] for c in pod["containers"] + pod.get("initContainers", [])}


def test_release_pins_every_container_to_the_source_version() -> None:
    assert set(container_images(render("prod")).values()) == {"raftpoint:latest"}
    images = container_images(render("release"))
    assert set(images.values()) == {f"registry.example/raftpoint:{coordinator.__version__}"}, images


def test_secret_example_is_not_deployed_and_has_both_keys() -> None:
    base = yaml.safe_load((DEPLOY / "base" / "kustomization.yaml").read_text())
    assert "secret.example.yaml" not in base["resources"]
    example = yaml.safe_load((DEPLOY / "base" / "secret.example.yaml").read_text())
    assert example["kind"] == "Secret" and example["metadata"]["name"] == SECRET_NAME
    assert set(example["stringData"]) == {PASSWORD_KEY, "aead-key"}
    kubernetes_validate.validate(example, K8S_VERSIONS[0], strict=True)


# ---- the checks can fail ------------------------------------------------------------------
def _env_var(docs: list[dict], name: str, value: str) -> None:
    coordinator_container(docs).setdefault("env", []).append({"name": name, "value": value})


def _raft_rule(docs: list[dict]) -> dict:
    return next(r for r in one(docs, "NetworkPolicy")["spec"]["ingress"] if r["ports"][0]["port"] == RAFT)


BREAKAGES: dict[str, Callable[[list[dict]], None]] = {
    "ordered-ready": lambda d: one(d, "StatefulSet")["spec"].update(podManagementPolicy="OrderedReady"),
    "replicas-differ-from-env": lambda d: one(d, "StatefulSet")["spec"].update(replicas=4),
    "env-overrides-replicas": lambda d: _env_var(d, "RAFTPOINT_STATEFULSET_REPLICAS", "7"),
    "literal-password": lambda d: _env_var(d, "RAFTPOINT_RAFT_PASSWORD", "hunter2"),
    "password-file-outside-secret": lambda d: one(d, "ConfigMap", "raftpoint-config")["data"].update(
        RAFTPOINT_RAFT_PASSWORD_FILE="/data/raft-password"),
    "secret-world-readable": lambda d: next(v for v in pod_spec(d)["volumes"] if "secret" in v)["secret"].update(
        defaultMode=0o444),
    "config-key-typo": lambda d: one(d, "ConfigMap", "raftpoint-config")["data"].update(RAFTPOINT_DNS_CACHE_TIMES="5"),
    "service-links": lambda d: pod_spec(d).pop("enableServiceLinks"),
    "not-ready-addresses-hidden": lambda d: one(d, "Service", "raftpoint-peers")["spec"].update(
        publishNotReadyAddresses=False),
    "raft-behind-client-service": lambda d: one(d, "Service", "raftpoint")["spec"]["ports"].append(
        {"name": "raft", "port": RAFT, "targetPort": "raft"}),
    "pdb-allows-two": lambda d: one(d, "PodDisruptionBudget")["spec"].update(maxUnavailable=2),
    "raft-from-any-namespace": lambda d: _raft_rule(d)["from"].append({"namespaceSelector": {}}),
    "raft-from-agents": lambda d: _raft_rule(d)["from"].append({"podSelector": {"matchLabels": AGENT_LABELS}}),
    "raft-port-in-grpc-rule": lambda d: one(d, "NetworkPolicy")["spec"]["ingress"][1]["ports"].append(
        {"port": RAFT, "protocol": "TCP"}),
    "rule-without-ports": lambda d: one(d, "NetworkPolicy")["spec"]["ingress"][2].pop("ports"),
    "grpc-from-ipblock": lambda d: one(d, "NetworkPolicy")["spec"]["ingress"][1]["from"].append(
        {"ipBlock": {"cidr": "0.0.0.0/0"}}),
    "readiness-tcp": lambda d: coordinator_container(d).update(readinessProbe={"tcpSocket": {"port": GRPC}}),
    "liveness-on-health": lambda d: coordinator_container(d).update(
        livenessProbe={"grpc": {"port": GRPC}, "periodSeconds": 10, "failureThreshold": 6}),
    "root": lambda d: pod_spec(d)["securityContext"].update(runAsNonRoot=False),
    "writable-root": lambda d: coordinator_container(d)["securityContext"].update(readOnlyRootFilesystem=False),
    "init-keeps-capabilities": lambda d: pod_spec(d)["initContainers"][0]["securityContext"].update(
        capabilities={"drop": []}),
    "no-limits": lambda d: coordinator_container(d)["resources"].pop("limits"),
    "no-pvc": lambda d: one(d, "StatefulSet")["spec"].pop("volumeClaimTemplates"),
    "map-larger-than-pvc": lambda d: one(d, "ConfigMap", "raftpoint-config")["data"].update(RAFTPOINT_MAX_MAP_SIZE_MB="1000000"),
    "data-not-on-pvc": lambda d: one(d, "ConfigMap", "raftpoint-config")["data"].update(RAFTPOINT_DATA_DIR="/tmp"),
    "no-anti-affinity": lambda d: pod_spec(d).pop("affinity"),
    "tls-key-outside-secret": lambda d: one(d, "ConfigMap", "raftpoint-config")["data"].update(RAFTPOINT_TLS_KEY_FILE="/data/tls.key"),
    "tls-subpath": lambda d: next(m for m in coordinator_container(d)["volumeMounts"] if m["name"] == "tls").update(
        subPath="tls.crt"),
    "tls-client-auth-off": lambda d: one(d, "ConfigMap", "raftpoint-config")["data"].update(RAFTPOINT_TLS_CLIENT_AUTH="none"),
    "liveness-kubelet-grpc": lambda d: coordinator_container(d).update(
        livenessProbe={"grpc": {"port": GRPC, "service": LIVENESS_SERVICE}, "periodSeconds": 10,
                       "failureThreshold": 6}),
    "liveness-on-readyz": lambda d: coordinator_container(d)["livenessProbe"]["httpGet"].update(path="/readyz"),
    "probes-on-mtls-metrics": lambda d: coordinator_container(d)["readinessProbe"]["httpGet"].update(
        port="metrics", scheme="HTTPS"),
    "probe-port-open-to-pods": lambda d: one(d, "NetworkPolicy")["spec"]["ingress"][2]["ports"].append(
        {"port": PROBES, "protocol": "TCP"}),
}


_S, _X, _P, _R = "check_statefulset", "check_security", "check_probes", "check_replicas_match_config"
_K, _W, _D, _N = "check_config_keys_are_node_settings", "check_raft_password_from_secret", "check_storage", \
    "check_network_policy"
CAUGHT_BY = {  # the check meant to notice each breakage
    "ordered-ready": _S, "replicas-differ-from-env": _R, "env-overrides-replicas": _R, "literal-password": _W,
    "password-file-outside-secret": _W, "secret-world-readable": _W, "config-key-typo": _K, "service-links": _K,
    "not-ready-addresses-hidden": "check_services_and_pdb", "raft-behind-client-service": "check_services_and_pdb",
    "pdb-allows-two": "check_services_and_pdb", "raft-from-any-namespace": _N, "raft-from-agents": _N,
    "raft-port-in-grpc-rule": _N, "rule-without-ports": _N, "grpc-from-ipblock": _N, "readiness-tcp": _P,
    "liveness-on-health": _P, "root": _X, "writable-root": _X, "init-keeps-capabilities": _X,
    "no-limits": "check_resources", "no-pvc": _D, "map-larger-than-pvc": _D, "data-not-on-pvc": _D,
    "no-anti-affinity": _S, "tls-key-outside-secret": "check_tls_from_secret", "tls-subpath": "check_tls_from_secret",
    "tls-client-auth-off": "check_tls_from_secret", "liveness-kubelet-grpc": _P,
    "liveness-on-readyz": _P, "probes-on-mtls-metrics": _P, "probe-port-open-to-pods": _N,
}


@pytest.mark.parametrize("breakage", BREAKAGES)
def test_checks_catch(breakage: str, tmp_path: Path) -> None:
    docs = render("dev")
    for check in ALL_CHECKS:
        check(copy.deepcopy(docs))  # the unbroken manifests pass
    BREAKAGES[breakage](docs)
    failed = []
    for check in ALL_CHECKS:
        try:
            check(copy.deepcopy(docs))
        except (AssertionError, KeyError, StopIteration):
            failed.append(check.__name__)
    assert CAUGHT_BY[breakage] in failed, f"{CAUGHT_BY[breakage]} did not notice {breakage} (failed: {failed})"


def test_node_config_check_can_fail(tmp_path: Path) -> None:
    docs = render("dev")
    one(docs, "ConfigMap", "raftpoint-config")["data"]["RAFTPOINT_RAFT_MIN_TIMEOUT"] = "5"  # > max timeout: invalid
    secret = tmp_path / PASSWORD_KEY
    secret.write_text("x-but-long-enough-to-pass")
    with pytest.raises(node_config.ConfigError):
        check_config_loads_for_every_pod(docs, secret)


# ---- the wait-for-own-DNS init container -------------------------------------------------
def _init_script() -> tuple[list[str], dict]:
    docs = render("dev")
    [init] = pod_spec(docs)["initContainers"]
    env = {k: v for k, v in effective_env(docs, init).items() if isinstance(v, str)}
    assert effective_env(docs, init)["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert init["command"][:2] == ["python", "-c"]
    return [sys.executable, "-c", init["command"][2]], env


def _can_isolate() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode == 0


def test_init_container_fails_when_own_name_does_not_resolve() -> None:
    command, env = _init_script()
    env.update(RAFTPOINT_POD_NAME="raftpoint-0", RAFTPOINT_HEADLESS_SERVICE="raftpoint-peers.invalid",
               POD_IP="10.1.2.3", WAIT_FOR_DNS_SECONDS="0", PATH=os.environ.get("PATH", ""))
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1 and "does not resolve to this pod's IP 10.1.2.3" in proc.stderr


@pytest.mark.skipif(not _can_isolate(), reason="needs root and unshare --mount for a private /etc/hosts")
@pytest.mark.parametrize("record, expect_rc", [("127.0.0.11", 0), ("127.0.0.99", 1)], ids=["own-ip", "stale-ip"])
def test_init_container_waits_for_its_own_ip(tmp_path: Path, record: str, expect_rc: int) -> None:
    command, env = _init_script()
    hosts = tmp_path / "hosts"
    hosts.write_text(f"127.0.0.1 localhost\n{record} raftpoint-0.{env['RAFTPOINT_HEADLESS_SERVICE']}\n")
    env.update(RAFTPOINT_POD_NAME="raftpoint-0", POD_IP="127.0.0.11", WAIT_FOR_DNS_SECONDS="0",
               PATH=os.environ.get("PATH", ""))
    script = f'mount --bind "{hosts}" /etc/hosts && exec "$0" "$@"'
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, *command],
                          env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == expect_rc, proc.stderr


# ---- container image ---------------------------------------------------------------------
def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (DEPLOY / "Dockerfile").read_text()
    logical = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1].strip() if " " in line.strip() else "")
            for line in logical.splitlines() if line.strip()]


def test_dockerfile_runs_the_coordinator_as_non_root() -> None:
    instructions = dockerfile_instructions()
    assert instructions[:2] == [("ARG", "BASE_IMAGE=python:3.11-slim"), ("FROM", "${BASE_IMAGE}")]
    users = [arg for op, arg in instructions if op == "USER"]
    assert users, "no USER: the image would run as root"
    user = users[-1].split(":")[0]
    assert user not in ("0", "root") and user == "10001"
    last_user = max(i for i, (op, _) in enumerate(instructions) if op == "USER")
    assert all(op != "RUN" for op, _ in instructions[last_user:])
    [entrypoint] = [arg for op, arg in instructions if op == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["raftpoint", "coordinator"]  # exec form: gets SIGTERM directly
    exposed = {int(p.split("/")[0]) for op, arg in instructions if op == "EXPOSE" for p in arg.split()}
    assert exposed == {RAFT, GRPC, METRICS, PROBES}
    # Offline, wheels only, at the pinned versions.
    assert any(op == "RUN" and re.search(r"pip install --no-cache-dir --no-index --only-binary=:all: "
                                         r"--find-links /wheelhouse -c /constraints\.txt ", arg)
               for op, arg in instructions)
    labels = dict(re.findall(r'(org\.opencontainers\.image\.[a-z.]+)="([^"]*)"',
                             " ".join(arg for op, arg in instructions if op == "LABEL")))
    assert labels["org.opencontainers.image.version"] == "${VERSION}", labels
    assert {"title", "description", "licenses", "revision", "base.name"} <= {
        k.removeprefix("org.opencontainers.image.") for k in labels}, labels
    # The manifests' securityContext agrees with the image's user.
    assert pod_spec(render("prod"))["securityContext"]["runAsUser"] == int(user)


def test_entrypoint_subcommand_exists() -> None:
    proc = subprocess.run([sys.executable, "-m", "coordinator", "--help"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0 and "--statefulset-replicas" in proc.stdout, proc.stderr


def _ignored(path: str, patterns: list[str]) -> bool:
    """Enough of .dockerignore semantics for this file: globs, `**/`, no `!` exceptions."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    for pattern in patterns:
        bare = pattern.removeprefix("**/")
        for prefix in prefixes:
            if fnmatch(prefix, pattern) or (pattern != bare and fnmatch(prefix.split("/")[-1], bare)):
                return True
    return False


def test_dockerignore_keeps_the_build_inputs_and_drops_the_rest() -> None:
    patterns = [line.strip().rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    assert not any(p.startswith("!") for p in patterns)  # _ignored does not model exceptions
    instructions = dockerfile_instructions()
    copied = [src for op, arg in instructions if op == "COPY" for src in arg.split()[:-1]]
    mounted = [src for op, arg in instructions if op == "RUN" for src in re.findall(r"--mount=type=bind,source=([^,]+)", arg)]
    assert sorted(copied + mounted) == ["constraints.txt", "wheelhouse"]
    for src in copied + mounted + ["wheelhouse/raftpoint-0.1.0-py3-none-any.whl"]:
        assert not _ignored(src, patterns), f".dockerignore drops {src}, which the image needs"
    for junk in [".git/HEAD", ".venv/bin/python", "coordinator/__pycache__/x.pyc", ".pytest_cache/v",
                 ".hypothesis/examples", "raftpoint-data/raft.snapshot", "tests/deploy/test_manifests.py",
                 "raftpoint.egg-info/PKG-INFO"]:
        assert _ignored(junk, patterns), f".dockerignore keeps {junk}"


# ---- the cert-manager overlay --------------------------------------------------------------
CERT_MANAGER = "cert-manager"


def grpc_name_matches(entry: str, host: str) -> bool:
    """gRPC's hostname check of a certificate name: equal, or a wildcard `*.rest` for one
    label before `rest` when `rest` has a dot itself (`*.raftpoint-peers` matches no name)."""
    first, _, rest = host.lower().partition(".")
    if entry.lower() == host.lower():
        return True
    return entry.startswith("*.") and "." in rest and entry[2:].lower() == rest


def check_cert_manager(docs: list[dict]) -> None:
    """The overlay's Certificates: issued by its CA, into the Secret the nodes mount,
    naming every node's address, usable by nodes both to serve and to call peers."""
    issuers = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Issuer"}
    certs = {d["spec"]["secretName"]: d for d in docs if d["kind"] == "Certificate"}
    for cert in certs.values():  # every Certificate names an Issuer of this overlay
        assert cert["apiVersion"] == "cert-manager.io/v1" and cert["spec"]["issuerRef"]["name"] in issuers
    assert certs["raftpoint-ca"]["spec"]["isCA"] is True
    assert issuers[certs[TLS_SECRET]["spec"]["issuerRef"]["name"]]["spec"]["ca"]["secretName"] == "raftpoint-ca"
    nodes = certs[TLS_SECRET]["spec"]
    assert {"server auth", "client auth"} <= set(nodes["usages"])  # nodes call their peers with it
    # Every node's gRPC address, as its own settings derive it, is a name of the certificate.
    sts = one(docs, "StatefulSet", "raftpoint")
    env = {k: v for k, v in effective_env(docs, coordinator_container(docs)).items()
           if isinstance(v, str) and k != "RAFTPOINT_RAFT_PASSWORD_FILE"}
    for i in range(sts["spec"]["replicas"]):
        cfg = node_config.load(env={**env, "RAFTPOINT_POD_NAME": f"raftpoint-{i}", "RAFTPOINT_RAFT_PASSWORD": "a-password-of-32-characters-long"})
        host = cfg.grpc_address.rsplit(":", 1)[0]
        assert any(grpc_name_matches(name, host) for name in nodes["dnsNames"]), host
    assert certs["raftpoint-admin-tls"]["spec"]["usages"] == ["digital signature", "client auth"]


def test_cert_manager_overlay_issues_the_secret_the_nodes_mount() -> None:
    docs = render(CERT_MANAGER)
    core = [d for d in docs if not d["apiVersion"].startswith("cert-manager.io/")]
    for check in ALL_CHECKS:
        check(copy.deepcopy(core))
    for doc in core:
        kubernetes_validate.validate(doc, K8S_VERSIONS[0], strict=True)
    check_cert_manager(docs)


def _node_certificate(docs: list[dict]) -> dict:
    return next(d for d in docs if d["kind"] == "Certificate" and d["metadata"]["name"] == TLS_SECRET)["spec"]


def test_grpc_name_matching() -> None:
    assert grpc_name_matches("raftpoint-0.raftpoint-peers", "raftpoint-0.raftpoint-peers")
    assert grpc_name_matches("*.raftpoint-peers.ns.svc", "raftpoint-0.raftpoint-peers.ns.svc")
    assert not grpc_name_matches("*.raftpoint-peers", "raftpoint-0.raftpoint-peers")
    assert not grpc_name_matches("*.ns.svc", "raftpoint-0.raftpoint-peers.ns.svc")


@pytest.mark.parametrize("breakage", ["secret-name", "no-client-usage", "fqdn-only", "self-signed-nodes",
                                      "short-wildcard"])
def test_cert_manager_check_catches(breakage: str) -> None:
    docs = render(CERT_MANAGER)
    spec = _node_certificate(docs)
    if breakage == "secret-name":
        spec["secretName"] = "elsewhere"
    elif breakage == "no-client-usage":
        spec["usages"].remove("client auth")
    elif breakage == "fqdn-only":
        spec["dnsNames"] = ["*.raftpoint-peers.default.svc.cluster.local"]
    elif breakage == "short-wildcard":
        spec["dnsNames"] = ["*.raftpoint-peers", "raftpoint"]
    else:
        spec["issuerRef"]["name"] = "raftpoint-selfsigned"
    with pytest.raises((AssertionError, KeyError)):
        check_cert_manager(docs)
