"""Offline checks of the Chaos Mesh experiments in chaos/k8s.

Each rendered document is validated against the subset of Chaos Mesh's CRD schema
the experiments use (chaos_mesh_schema.json: unknown fields refused), and checked
against the rendered deployment itself: the selectors must pick exactly the
coordinator pods, IOChaos must target the coordinator container's data volume, and
no disruptive experiment may take more than one pod at a time (the PDB's budget).
Every check is a function raising AssertionError; test_checks_catch feeds each a
broken copy, so a check that can no longer fail is noticed.
"""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Callable

import jsonschema
import pytest

from tests.deploy.test_manifests import COORDINATOR_LABELS, coordinator_container, one, pod_spec
from tests.support.manifests import ROOT, kustomize, render_overlay

EXPERIMENTS = ROOT / "chaos" / "k8s"
SCHEMA = json.loads((Path(__file__).parent / "chaos_mesh_schema.json").read_text())
MAX_DURATION_S = 300
DISRUPTIVE = {("PodChaos", "pod-kill"), ("PodChaos", "pod-failure"), ("PodChaos", "container-kill"),
              ("NetworkChaos", "partition"), ("NetworkChaos", "loss"), ("IOChaos", "fault"), ("IOChaos", "latency")}
UNITS_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def experiments() -> list[dict]:
    return kustomize(EXPERIMENTS)


def seconds(duration: str) -> float:
    return sum(float(n) * UNITS_S[u] for n, u in re.findall(r"([0-9.]+)(ns|us|µs|ms|s|m|h)", duration))


def chaos_spec(doc: dict) -> dict:
    """The experiment itself: the spec, or for a Schedule the spec it creates."""
    if doc["kind"] == "Schedule":
        kind = doc["spec"]["type"]
        return doc["spec"][kind[0].lower() + kind[1:]]
    return doc["spec"]


def chaos_kind(doc: dict) -> str:
    return doc["spec"]["type"] if doc["kind"] == "Schedule" else doc["kind"]


def selectors(spec: dict) -> list[dict]:
    return [spec["selector"]] + ([spec["target"]["selector"]] if "target" in spec else [])


# ---- checks ----------------------------------------------------------------------------
def check_schema(docs: list[dict], deployed: list[dict]) -> None:
    for doc in docs:
        errors = sorted(jsonschema.Draft7Validator(SCHEMA).iter_errors(doc), key=str)
        assert not errors, f"{doc['metadata']['name']}: {[e.message for e in errors]}"


def check_selects_only_coordinators(docs: list[dict], deployed: list[dict]) -> None:
    pod_labels = one(deployed, "StatefulSet")["spec"]["template"]["metadata"]["labels"]
    for doc in docs:
        for selector in selectors(chaos_spec(doc)):
            assert set(selector) == {"labelSelectors"}, f"{doc['metadata']['name']}: select by labels only"
            assert selector["labelSelectors"] == COORDINATOR_LABELS, doc["metadata"]["name"]
            assert selector["labelSelectors"].items() <= pod_labels.items(), \
                f"{doc['metadata']['name']} selects no pod of the StatefulSet"


def check_one_pod_at_a_time(docs: list[dict], deployed: list[dict]) -> None:
    for doc in docs:
        spec = chaos_spec(doc)
        if (chaos_kind(doc), spec["action"]) in DISRUPTIVE:
            assert spec["mode"] == "one", f"{doc['metadata']['name']}: a disruptive fault takes one pod at a time"


def check_bounded(docs: list[dict], deployed: list[dict]) -> None:
    for doc in docs:
        spec = chaos_spec(doc)
        if doc["kind"] == "Schedule":
            assert doc["spec"]["concurrencyPolicy"] == "Forbid", doc["metadata"]["name"]
            assert spec["action"] == "pod-kill", f"{doc['metadata']['name']}: only instant faults repeat"
            continue
        assert "duration" in spec, f"{doc['metadata']['name']} has no duration: it would never heal"
        assert 0 < seconds(spec["duration"]) <= MAX_DURATION_S, doc["metadata"]["name"]


def check_io_targets_data_volume(docs: list[dict], deployed: list[dict]) -> None:
    container = coordinator_container(deployed)
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    for doc in docs:
        if chaos_kind(doc) != "IOChaos":
            continue
        spec = chaos_spec(doc)
        assert spec["volumePath"] == mounts["data"], doc["metadata"]["name"]
        assert spec["path"].startswith(spec["volumePath"] + "/"), doc["metadata"]["name"]
        assert spec["containerNames"] == [container["name"]], doc["metadata"]["name"]


def check_covers_fault_kinds(docs: list[dict], deployed: list[dict]) -> None:
    kinds = {(chaos_kind(d), chaos_spec(d)["action"]) for d in docs}
    assert {("PodChaos", "pod-kill"), ("NetworkChaos", "partition"), ("NetworkChaos", "delay"),
            ("IOChaos", "latency"), ("IOChaos", "fault")} <= kinds
    directions = {chaos_spec(d).get("direction") for d in docs if chaos_spec(d)["action"] == "partition"}
    assert {"both", "to"} <= directions, "a full and an asymmetric partition"


CHECKS: list[Callable[[list[dict], list[dict]], None]] = [
    check_schema, check_selects_only_coordinators, check_one_pod_at_a_time, check_bounded,
    check_io_targets_data_volume, check_covers_fault_kinds]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_experiments(check: Callable[[list[dict], list[dict]], None]) -> None:
    check(experiments(), render_overlay("dev"))


def _named(docs: list[dict], name: str) -> dict:
    [doc] = [d for d in docs if d["metadata"]["name"] == name]
    return doc


def _misspell(docs: list[dict]) -> None:
    spec = _named(docs, "raftpoint-delay")["spec"]
    spec["delay"]["latancy"] = spec["delay"].pop("latency")


BREAKAGES: dict[str, tuple[Callable[[list[dict]], None], Callable]] = {
    "misspelt-field": (_misspell, check_schema),
    "unknown-action": (lambda d: _named(d, "raftpoint-loss")["spec"].update(action="drop"), check_schema),
    "other-app": (lambda d: _named(d, "raftpoint-partition-one")["spec"]["target"]["selector"]
                  ["labelSelectors"].update({"app.kubernetes.io/name": "etcd"}), check_selects_only_coordinators),
    "all-pods-killed": (lambda d: _named(d, "raftpoint-failure-one")["spec"].update(mode="all"),
                        check_one_pod_at_a_time),
    "never-heals": (lambda d: _named(d, "raftpoint-partition-one")["spec"].pop("duration"), check_bounded),
    "wrong-volume": (lambda d: _named(d, "raftpoint-fsync-latency")["spec"].update(volumePath="/var/lib/raftpoint"),
                     check_io_targets_data_volume),
    "no-asymmetric-partition": (lambda d: _named(d, "raftpoint-one-way")["spec"].update(direction="both"),
                                check_covers_fault_kinds),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_checks_catch(breakage: str) -> None:
    docs, deployed = experiments(), render_overlay("dev")
    for check in CHECKS:
        check(copy.deepcopy(docs), deployed)  # the unbroken manifests pass every check
    breaker, check = BREAKAGES[breakage]
    breaker(docs)
    with pytest.raises(AssertionError):
        check(docs, deployed)


def test_data_volume_mount_is_where_the_node_keeps_its_state() -> None:
    """The IOChaos volumePath cross-check is only meaningful if `data` is the node's data dir."""
    deployed = render_overlay("dev")
    mounts = {m["name"]: m["mountPath"] for m in coordinator_container(deployed)["volumeMounts"]}
    config = one(deployed, "ConfigMap", "raftpoint-config")["data"]
    assert config["RAFTPOINT_DATA_DIR"] == mounts["data"]
    assert any(v["name"] == "data" for v in pod_spec(deployed).get("volumes", [])) or \
        any(t["metadata"]["name"] == "data" for t in one(deployed, "StatefulSet")["spec"]["volumeClaimTemplates"])
