"""Offline checks of deploy/operations: the backup and blob GC CronJobs render, validate,
run with the operator's admin certificate, reach the gRPC port, are selected by none
of the coordinator's selectors, and their scripts call the `raftpoint` commands with
flags those commands accept (run for real, against a `raftpoint` stand-in)."""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Callable

import kubernetes_validate
import pytest

from raftpoint.cli import main as cli
from tests.deploy.test_manifests import K8S_VERSIONS, effective_env, one, selects
from tests.support.manifests import render_overlay

OVERLAY = "dev-operations"
ADMIN_MOUNT_VARS = ("RAFTPOINT_CA_FILE", "RAFTPOINT_CERT_FILE", "RAFTPOINT_KEY_FILE")
GRPC = 50051


def rendered() -> list[dict]:
    return render_overlay(OVERLAY)


def cronjobs(docs: list[dict]) -> list[dict]:
    found = [d for d in docs if d["kind"] == "CronJob"]
    assert {d["metadata"]["name"] for d in found} == {"raftpoint-backup", "raftpoint-gc"}, found
    return found


def pod_of(job: dict) -> dict:
    return job["spec"]["jobTemplate"]["spec"]["template"]


def container_of(job: dict) -> dict:
    [container] = pod_of(job)["spec"]["containers"]
    return container


def check_schedule_and_safety(docs: list[dict]) -> None:
    for job in cronjobs(docs):
        assert job["spec"]["concurrencyPolicy"] == "Forbid", "two runs at once"
        assert job["spec"]["jobTemplate"]["spec"]["activeDeadlineSeconds"] > 0
        spec = pod_of(job)["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True and spec.get("automountServiceAccountToken") is False
        assert spec.get("enableServiceLinks") is False
        sc = container_of(job)["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert container_of(job)["resources"]["limits"]


def check_admin_certificate(docs: list[dict]) -> None:
    """Each job shows the operator's certificate, whose name is bound to the admin role."""
    bindings = tomllib.loads(one(docs, "ConfigMap", "raftpoint-auth")["data"]["bindings.toml"])
    for job in cronjobs(docs):
        container, volumes = container_of(job), {v["name"]: v for v in pod_of(job)["spec"]["volumes"]}
        env = effective_env(docs, container)
        for variable in ADMIN_MOUNT_VARS:
            path = env[variable]
            [mount] = [m for m in container["volumeMounts"] if path.startswith(m["mountPath"].rstrip("/") + "/")]
            assert mount.get("readOnly") is True, mount
            secret = volumes[mount["name"]]["secret"]
            assert not secret.get("defaultMode", 0o644) & 0o007, "the admin key is world-readable"
            [certificate] = [d["spec"] for d in docs if d["kind"] == "Certificate"
                             and d["spec"]["secretName"] == secret["secretName"]]
            role = bindings.get(f"cert:{certificate['commonName']}", {}).get("role")
            assert role == "admin", f"{secret['secretName']} (CN {certificate['commonName']}) has role {role}"


def check_network_and_selectors(docs: list[dict]) -> None:
    """The jobs may reach gRPC, and no coordinator selector counts them as coordinators."""
    ingress = one(docs, "NetworkPolicy")["spec"]["ingress"]
    coordinator_selectors = [{"matchLabels": d["spec"]["selector"]} if d["kind"] == "Service" else d["spec"]["selector"]
                             for d in docs if d["kind"] in ("Service", "StatefulSet", "PodDisruptionBudget")]
    for job in cronjobs(docs):
        labels = pod_of(job)["metadata"]["labels"]
        assert any(any(p["port"] == GRPC for p in rule["ports"]) and "namespaceSelector" not in peer
                   and selects(peer["podSelector"], labels) for rule in ingress for peer in rule["from"]), labels
        for selector in coordinator_selectors:
            assert not selects(selector, labels), f"{job['metadata']['name']} pods match {selector}"


CHECKS: list[Callable[[list[dict]], None]] = [check_schedule_and_safety, check_admin_certificate,
                                               check_network_and_selectors]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_property(check: Callable[[list[dict]], None]) -> None:
    check(rendered())


def test_the_jobs_and_the_volume_are_schema_valid() -> None:
    for doc in rendered():
        if doc["kind"] in ("CronJob", "PersistentVolumeClaim") or doc["metadata"]["name"] == "raftpoint-gc":
            for version in K8S_VERSIONS:
                kubernetes_validate.validate(doc, version, strict=True)


BREAKAGES = {
    "concurrent-runs": (check_schedule_and_safety,
                        lambda d: cronjobs(d)[0]["spec"].update(concurrencyPolicy="Allow")),
    "world-readable-key": (check_admin_certificate, lambda d: next(
        v for v in pod_of(cronjobs(d)[0])["spec"]["volumes"] if "secret" in v)["secret"].update(defaultMode=0o444)),
    "scraper-certificate": (check_admin_certificate, lambda d: next(
        v for v in pod_of(cronjobs(d)[1])["spec"]["volumes"] if "secret" in v)["secret"].update(
        secretName="raftpoint-scraper-tls")),
    "counted-as-coordinator": (check_network_and_selectors, lambda d: pod_of(cronjobs(d)[0])["metadata"][
        "labels"].update({"app.kubernetes.io/name": "raftpoint"})),
    "no-grpc-access": (check_network_and_selectors,
                       lambda d: pod_of(cronjobs(d)[1])["metadata"]["labels"].pop("raftpoint.io/agent")),
}


@pytest.mark.parametrize("breakage", BREAKAGES)
def test_checks_catch(breakage: str) -> None:
    check, breaks = BREAKAGES[breakage]
    docs = rendered()
    broken = copy.deepcopy(docs)
    breaks(broken)
    with pytest.raises((AssertionError, KeyError)):
        check(broken)


STAND_IN = """#!{python}
import json, os, sys
with open(os.environ["CALLS"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
if sys.argv[1:3] == ["snapshot", "save"]:
    open(sys.argv[3], "w").close()
"""


def run_script(job: dict, docs: list[dict], tmp_path: Path, backups: Path) -> list[list[str]]:
    """Run the job's shell script with its environment, `raftpoint` a stand-in that records its arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    stand_in = bin_dir / "raftpoint"
    stand_in.write_text(STAND_IN.format(python=sys.executable))
    stand_in.chmod(0o755)
    container = container_of(job)
    assert container["command"] == ["/bin/sh", "-c"]
    script = container["args"][0].replace("/backups", str(backups))
    env = {k: v for k, v in effective_env(docs, container).items() if isinstance(v, str)}
    calls = tmp_path / "calls"
    proc = subprocess.run(["/bin/sh", "-c", script], env={**env, "CALLS": str(calls),
                                                          "PATH": f"{bin_dir}:{os.environ['PATH']}"},
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in calls.read_text().splitlines()]


def test_the_backup_script_saves_one_file_and_keeps_the_newest(tmp_path: Path) -> None:
    docs = rendered()
    job = one(docs, "CronJob", "raftpoint-backup")
    mount = next(m["mountPath"] for m in container_of(job)["volumeMounts"] if m["name"] == "backups")
    assert mount == "/backups" and pod_of(job)["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == \
        one(docs, "PersistentVolumeClaim", "raftpoint-backups")["metadata"]["name"]
    backups = tmp_path / "backups"
    backups.mkdir()
    kept = int(effective_env(docs, container_of(job))["RAFTPOINT_BACKUPS_KEPT"])
    for day in range(1, kept + 3):
        (backups / f"raftpoint-202601{day:02d}T000000Z.backup").touch()
    (backups / "raftpoint-20260101T060000Z.backup.partial").touch()  # a killed run's
    [call] = run_script(job, docs, tmp_path, backups)
    args = cli.build_parser().parse_args(call)
    assert (args.command, args.action, args.endpoints) == ("snapshot", "save", "raftpoint:50051")
    left = sorted(p.name for p in backups.iterdir())
    assert len(left) == kept and left[-1] == args.file.name, left
    assert "raftpoint-20260101T000000Z.backup" not in left and not any(n.endswith(".partial") for n in left)


def test_the_gc_script_collects_every_configured_group(tmp_path: Path) -> None:
    docs = rendered()
    job = one(docs, "CronJob", "raftpoint-gc")
    docs_two_groups = copy.deepcopy(docs)
    one(docs_two_groups, "ConfigMap", "raftpoint-gc")["data"]["RAFTPOINT_GC_GROUPS"] = "payments  search"
    [call] = run_script(job, docs_two_groups, tmp_path, tmp_path)
    args = cli.build_parser().parse_args(call)
    assert (args.command, args.group, args.endpoints) == ("gc", ["payments", "search"], "raftpoint:50051")
    assert args.blob_store == one(docs, "ConfigMap", "raftpoint-gc")["data"]["RAFTPOINT_GC_BLOB_STORE"]
