"""Offline checks of deploy/monitoring: the alerts (promtool's own checks and unit tests),
the Grafana dashboard, the mutual-TLS ServiceMonitor, and that every query names only
metrics the nodes export -- what keeps the dashboard and the alerts from rotting when a
metric is renamed.

promtool comes from Debian's `prometheus` package, which .ci/run installs; without it
these tests fail in CI (CI=true) and are skipped elsewhere, saying so.
"""
from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any, Callable

import jsonschema
import kubernetes_validate
import pytest
import yaml
from prometheus_client import REGISTRY

from coordinator import config as node_config
from coordinator.observability import metrics  # noqa: F401  (registers every raftpoint_* metric)
from raftpoint.cli import main as cli
from tests.deploy.operator_schemas import SCHEMAS
from tests.deploy.test_manifests import (ALL_CHECKS, K8S_VERSIONS, TLS_SECRET, coordinator_container, effective_env,
                                         one, selects)
from tests.support.manifests import kustomize, render_overlay

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
OVERLAY = "dev-monitoring"
UNIT_TESTS = Path(__file__).with_name("alerts_test.yaml")
SCRAPER_SECRET = "raftpoint-scraper-tls"
# Series Prometheus itself makes for every target, which alerts may use beside the nodes' own.
PROMETHEUS_SERIES = {"up"}


# ---- promtool ---------------------------------------------------------------------------
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool is missing in CI: .ci/run installs Debian's prometheus package for it")
        pytest.skip("promtool not found: `apt-get install prometheus` (Debian) provides it")
    return found


def run_promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


# ---- the manifests -------------------------------------------------------------------------
def rendered() -> list[dict]:
    return render_overlay(OVERLAY)


def rule_spec(docs: list[dict] | None = None) -> dict:
    return one(docs or rendered(), "PrometheusRule", "raftpoint")["spec"]


def alert_rules(spec: dict | None = None) -> list[dict]:
    return [r for g in (spec or rule_spec())["groups"] for r in g["rules"] if "alert" in r]


def write_rules(directory: Path, spec: dict, annotations: bool = True) -> Path:
    """The PrometheusRule's spec as a Prometheus rule file (what promtool reads)."""
    spec = copy.deepcopy(spec)
    if not annotations:
        for rule in (r for g in spec["groups"] for r in g["rules"]):
            rule.pop("annotations", None)
    path = directory / "raftpoint.rules.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def unit_test(directory: Path, spec: dict) -> subprocess.CompletedProcess[str]:
    write_rules(directory, spec, annotations=False)
    shutil.copy(UNIT_TESTS, directory / UNIT_TESTS.name)
    return run_promtool("test", "rules", UNIT_TESTS.name, cwd=directory)


def load_dashboard() -> dict:
    return json.loads((MONITORING / "dashboard.json").read_text())


def dashboard_generator():
    spec = importlib.util.spec_from_file_location("raftpoint_dashboard", MONITORING / "dashboard.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dashboard_targets(dashboard: dict) -> list[tuple[str, dict]]:
    return [(p["title"], t) for p in dashboard["panels"] for t in p.get("targets", [])]


# ---- metric names in PromQL ------------------------------------------------------------------
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
             "offset", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects. Enough of PromQL for these files:
    strings, label matchers, ranges and grouping label lists are dropped first; what is
    left that is neither a function or aggregation (followed by a parenthesis), a
    keyword nor a number is a metric name."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w.$])[a-zA-Z_:][a-zA-Z0-9_:]*", text):
        word = match.group(0)
        if word.lower() in _KEYWORDS or text[match.end():].lstrip().startswith("("):
            continue
        names.add(word)
    return names


def exported_series() -> set[str]:
    """Every series name the nodes' registry can export: counters as _total, histograms
    as _bucket/_sum/_count, whether or not a labelled metric has a child yet."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "summary": ("", "_sum", "_count")}
    return {family.name + s for family in REGISTRY.collect() for s in suffixes.get(family.type, ("",))}


def unknown_metrics(exprs: list[str]) -> dict[str, set[str]]:
    known = exported_series() | PROMETHEUS_SERIES
    found = {expr: metric_names(expr) - known for expr in exprs}
    return {expr: names for expr, names in found.items() if names}


# ---- alerts ---------------------------------------------------------------------------------------
def test_promtool_accepts_the_rules_and_their_annotation_templates(tmp_path: Path) -> None:
    path = write_rules(tmp_path, rule_spec())
    proc = run_promtool("check", "rules", path.name, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in proc.stdout


def test_promtool_unit_tests_pass(tmp_path: Path) -> None:
    proc = unit_test(tmp_path, rule_spec())
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("breakage", ["no-leader-without-for", "fsync-threshold-lowered", "shedding-any-rate"])
def test_the_unit_tests_catch_a_loosened_rule(breakage: str, tmp_path: Path) -> None:
    spec = rule_spec()
    rules = {(r["alert"], r["labels"]["severity"]): r for r in alert_rules(spec)}
    if breakage == "no-leader-without-for":
        rules["RaftpointNoLeader", "critical"]["for"] = "0s"  # an election would page
    elif breakage == "fsync-threshold-lowered":
        rules["RaftpointSlowFsync", "warning"]["expr"] = rules["RaftpointSlowFsync", "warning"]["expr"].replace(
            "> 0.5", "> 0.005")
    else:
        rules["RaftpointSheddingSustained", "warning"]["for"] = "1m"
    proc = unit_test(tmp_path, spec)
    assert proc.returncode != 0 and "FAILED" in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_every_alert_has_a_case_where_it_fires_and_one_where_it_does_not() -> None:
    cases = yaml.safe_load(UNIT_TESTS.read_text())["tests"]
    checks = [c for case in cases for c in case.get("alert_rule_test", [])]
    for name in {r["alert"] for r in alert_rules()}:
        mine = [c for c in checks if c["alertname"] == name]
        assert any(c.get("exp_alerts") for c in mine), f"{name}: no unit test where it fires"
        assert any(not c.get("exp_alerts") for c in mine), f"{name}: no unit test where it stays quiet"
    severities = {(r["alert"], r["labels"]["severity"]) for r in alert_rules()}
    fired = {(c["alertname"], e["exp_labels"]["severity"]) for c in checks for e in c.get("exp_alerts") or []}
    assert severities <= fired, f"severities never seen firing: {severities - fired}"


def test_every_alert_says_what_it_means_and_what_to_run() -> None:
    [subcommands] = [a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    commands = set(subcommands.choices)
    assert "status" in commands, commands
    for rule in alert_rules():
        name, annotations = rule["alert"], rule["annotations"]
        assert set(annotations) == {"summary", "description", "runbook"}, name
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        named = set(re.findall(r"\braftpoint (\w+)", annotations["runbook"]))
        assert named and named <= commands, f"{name}: the runbook names no raftpoint command ({named})"
        assert re.search(r"\d", annotations["description"]), f"{name}: the description states no threshold"


def test_alerts_use_only_exported_metrics() -> None:
    assert unknown_metrics([r["expr"] for r in alert_rules()]) == {}


def test_the_metric_check_catches_a_renamed_metric() -> None:
    exprs = ["max by (namespace, job) (raftpoint_raft_role{role=\"leader\"}) < 1",
             "sum(rate(raftpoint_shed_calls_total[5m])) > 1",  # not what the node exports
             "histogram_quantile(0.99, sum by (le) (rate(raftpoint_journal_fsync_seconds[5m])))"]  # no _bucket
    assert unknown_metrics(exprs) == {exprs[1]: {"raftpoint_shed_calls_total"},
                                      exprs[2]: {"raftpoint_journal_fsync_seconds"}}
    assert metric_names('a_b{x="c_d"} and on (e_f) g_h[5m] offset 1m * 1e-3 + time()') == {"a_b", "g_h"}


# ---- dashboard ------------------------------------------------------------------------------------
def test_the_dashboard_is_what_its_generator_writes() -> None:
    assert (MONITORING / "dashboard.json").read_text() == dashboard_generator().render(), \
        "deploy/monitoring/dashboard.json is stale: run python deploy/monitoring/dashboard.py"


def check_dashboard(dashboard: dict) -> None:
    assert dashboard["schemaVersion"] >= 36 and dashboard["uid"] and dashboard["title"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    source = {"type": "prometheus", "uid": "${datasource}"}
    for name, variable in variables.items():
        if variable["type"] == "query":
            assert variable["datasource"] == source, name
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    cells: dict[tuple[int, int], str] = {}
    for p in dashboard["panels"]:
        grid = p["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, p["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps {cells[x, y]}"
                cells[x, y] = p["title"]
        if p["type"] == "row":
            continue
        assert p["datasource"] == source and p["targets"] and p.get("description"), p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["datasource"] == source and 'namespace="$namespace"' in t["expr"], (p["title"], t["expr"])


def test_the_dashboard_is_well_formed() -> None:
    check_dashboard(load_dashboard())


@pytest.mark.parametrize("breakage", ["fixed-datasource", "overlap", "unscoped-query"])
def test_the_dashboard_check_catches(breakage: str) -> None:
    dashboard = load_dashboard()
    panel = next(p for p in dashboard["panels"] if p["type"] != "row")
    if breakage == "fixed-datasource":
        panel["targets"][0]["datasource"] = {"type": "prometheus", "uid": "P1809F7CD0C75ACF3"}
    elif breakage == "overlap":
        panel["gridPos"]["x"] += 4
    else:
        panel["targets"][0]["expr"] = "max(raftpoint_raft_term)"
    with pytest.raises(AssertionError):
        check_dashboard(dashboard)


# What the dashboard is for: each topic and a metric that shows it.
DASHBOARD_TOPICS = {
    "leader": "raftpoint_raft_role", "term": "raftpoint_raft_term", "elections": "raftpoint_raft_events_total",
    "quorum": "raftpoint_raft_live_voters", "commit rate": "raftpoint_raft_commit_index",
    "commit latency": "raftpoint_proposal_seconds_bucket", "fsync latency": "raftpoint_journal_fsync_seconds_bucket",
    "shed calls": "raftpoint_shed_total", "loop lag": "raftpoint_event_loop_lag_seconds",
    "agents by state": "raftpoint_live_agents", "agents declared failed": "raftpoint_agents_declared_failed_total",
    "recoveries": "raftpoint_recoveries_total", "rollback delivery latency": "raftpoint_rollback_delivery_seconds_bucket",
    "certificate expiry": "raftpoint_tls_certificate_expiry_timestamp_seconds",
}


def test_the_dashboard_covers_every_topic_with_exported_metrics_only() -> None:
    dashboard = load_dashboard()
    exprs = [t["expr"] for _, t in dashboard_targets(dashboard)]
    used = set().union(*(metric_names(e) for e in exprs))
    assert {topic: m for topic, m in DASHBOARD_TOPICS.items() if m not in used} == {}
    assert unknown_metrics(exprs) == {}
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            [metric] = re.findall(r"label_values\((\w+),", variable["definition"])
            assert metric in exported_series(), variable["name"]


def test_promtool_parses_every_dashboard_query(tmp_path: Path) -> None:
    """Each query as a recording rule, Grafana's variables replaced by values: promtool
    parses the PromQL that Grafana would send."""
    rules = [{"record": f"dashboard:panel_{i}", "expr": t["expr"].replace("$__rate_interval", "1m")
              .replace("$namespace", "raftpoint")} for i, (_, t) in enumerate(dashboard_targets(load_dashboard()))]
    path = tmp_path / "dashboard.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    proc = run_promtool("check", "rules", path.name, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---- the kustomize component ------------------------------------------------------------------------
def test_the_monitoring_overlay_is_cert_manager_plus_monitoring() -> None:
    docs = rendered()
    base = {(d["kind"], d["metadata"]["name"]) for d in render_overlay("cert-manager")}
    added = sorted({(d["kind"], d["metadata"]["name"]) for d in docs} - base)
    assert added == [("ConfigMap", "raftpoint-dashboard"), ("PrometheusRule", "raftpoint"),
                     ("ServiceMonitor", "raftpoint")]


def test_every_document_is_schema_valid() -> None:
    for doc in rendered():
        schema = SCHEMAS.get(doc["kind"])
        if schema is not None:
            jsonschema.validate(doc, schema)
        elif not doc["apiVersion"].startswith("cert-manager.io/"):  # test_manifests checks those
            for version in K8S_VERSIONS:
                kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("breakage", ["misspelled-key-secret", "scheme-typo", "rule-key-typo", "bad-duration"])
def test_the_operator_schemas_catch(breakage: str) -> None:
    docs = rendered()
    endpoint = one(docs, "ServiceMonitor")["spec"]["endpoints"][0]
    rule = alert_rules(rule_spec(docs))[0]
    if breakage == "misspelled-key-secret":
        endpoint["tlsConfig"]["keySecrets"] = endpoint["tlsConfig"].pop("keySecret")
    elif breakage == "scheme-typo":
        endpoint["scheme"] = "tls"
    elif breakage == "rule-key-typo":
        rule["annotation"] = rule.pop("annotations")
    else:
        rule["for"] = "1 minute"
    with pytest.raises(jsonschema.ValidationError):
        for doc in docs:
            if doc["kind"] in SCHEMAS:
                jsonschema.validate(doc, SCHEMAS[doc["kind"]])


def test_the_core_checks_still_hold_with_monitoring() -> None:
    core = [d for d in rendered() if not d["apiVersion"].startswith(("cert-manager.io/", "monitoring.coreos.com/"))]
    for check in ALL_CHECKS:
        check(copy.deepcopy(core))


def test_the_dashboard_configmap_carries_the_dashboard_for_grafanas_sidecar() -> None:
    configmap = one(rendered(), "ConfigMap", "raftpoint-dashboard")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["raftpoint.json"]) == load_dashboard()
    # kubectl apply keeps the whole object in an annotation, which may not exceed 256 KiB.
    assert len(configmap["data"]["raftpoint.json"]) < 200 * 1024


def test_the_component_alone_renders_with_a_base(tmp_path: Path) -> None:
    """Any overlay can take the component (prod too): it needs only the base's ConfigMap."""
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [os.path.relpath(ROOT / "deploy" / "overlays" / "prod", tmp_path)],
        "components": [os.path.relpath(MONITORING, tmp_path)]}))
    docs = kustomize(tmp_path)
    assert "RAFTPOINT_METRICS_PLAINTEXT" not in one(docs, "ConfigMap", "raftpoint-config")["data"]
    assert one(docs, "StatefulSet")["spec"]["replicas"] == 5


# ---- the mutual-TLS scrape -------------------------------------------------------------------------------
def check_scrape(docs: list[dict]) -> None:
    """The ServiceMonitor reaches the metrics port of the client Service, over HTTPS, with
    the scraper's own client certificate (never the node's), checking the node's
    certificate for a name it carries; the nodes serve /metrics over TLS and require a
    client certificate; the scraper's certificate comes from the nodes' CA, for client
    auth only, and holds no role on the gRPC port; the job the alerts name is this one."""
    monitor = one(docs, "ServiceMonitor", "raftpoint")["spec"]
    [endpoint] = monitor["endpoints"]
    services = [d for d in docs if d["kind"] == "Service" and selects(monitor["selector"], d["metadata"]["labels"])]
    scraped = [s for s in services if endpoint["port"] in {p.get("name") for p in s["spec"]["ports"]}]
    assert [s["metadata"]["name"] for s in scraped] == ["raftpoint"], "the scrape must reach one Service's port"
    [port] = [p for p in scraped[0]["spec"]["ports"] if p["name"] == endpoint["port"]]
    cfg_env = {k: v for k, v in effective_env(docs, coordinator_container(docs)).items()
               if isinstance(v, str) and k != "RAFTPOINT_RAFT_PASSWORD_FILE"}
    cfg = node_config.load(env={**cfg_env, "RAFTPOINT_POD_NAME": "raftpoint-0",
                                "RAFTPOINT_RAFT_PASSWORD": "a-password-of-32-characters-long"})
    assert cfg.metrics_address.endswith(f":{port['port']}")
    assert cfg.tls_cert_file and not cfg.metrics_plaintext and cfg.tls_client_auth == "require", \
        "the nodes would not serve /metrics over TLS asking for the scraper's certificate"
    assert endpoint["scheme"].lower() == "https" and endpoint.get("path", "/metrics") == "/metrics"
    tls = endpoint["tlsConfig"]
    assert not tls.get("insecureSkipVerify", False)
    assert tls["ca"]["secret"] == {"name": SCRAPER_SECRET, "key": "ca.crt"}
    assert tls["cert"]["secret"] == {"name": SCRAPER_SECRET, "key": "tls.crt"}
    assert tls["keySecret"] == {"name": SCRAPER_SECRET, "key": "tls.key"}
    alerts_job = {m for r in alert_rules(rule_spec(docs)) for m in re.findall(r'up\{job="([^"]+)"\}', r["expr"])}
    assert "jobLabel" not in monitor and alerts_job == {scraped[0]["metadata"]["name"]}  # job = the Service's name
    certificates = {d["spec"]["secretName"]: d["spec"] for d in docs if d["kind"] == "Certificate"}
    node, scraper = certificates[TLS_SECRET], certificates[SCRAPER_SECRET]
    assert tls["serverName"] in node["dnsNames"], "the node's certificate would fail the scrape's name check"
    assert scraper["issuerRef"] == node["issuerRef"], "the nodes would not trust the scraper's certificate"
    assert "client auth" in scraper["usages"] and "server auth" not in scraper["usages"]
    bindings = tomllib.loads(one(docs, "ConfigMap", "raftpoint-auth")["data"]["bindings.toml"])
    assert not {scraper["commonName"], f"cert:{scraper['commonName']}"} & set(bindings)


def test_the_scrape_uses_mutual_tls() -> None:
    check_scrape(rendered())


def _endpoint(docs: list[dict]) -> dict:
    return one(docs, "ServiceMonitor")["spec"]["endpoints"][0]


def _certificate(docs: list[dict], secret: str) -> dict:
    return next(d for d in docs if d["kind"] == "Certificate" and d["spec"]["secretName"] == secret)["spec"]


SCRAPE_BREAKAGES: dict[str, Callable[[list[dict]], Any]] = {
    "plain-http": lambda d: _endpoint(d).update(scheme="http"),
    "skip-verify": lambda d: _endpoint(d)["tlsConfig"].update(insecureSkipVerify=True),
    "node-key-for-scraper": lambda d: _endpoint(d)["tlsConfig"].update(keySecret={"name": TLS_SECRET, "key": "tls.key"}),
    "no-client-certificate": lambda d: _endpoint(d)["tlsConfig"].pop("cert"),
    "name-not-on-certificate": lambda d: _endpoint(d)["tlsConfig"].update(serverName="raftpoint.monitoring"),
    "metrics-in-plaintext": lambda d: one(d, "ConfigMap", "raftpoint-config")["data"].update(
        RAFTPOINT_METRICS_PLAINTEXT="true"),
    "wrong-port": lambda d: _endpoint(d).update(port="grpc"),
    "scraper-from-another-ca": lambda d: _certificate(d, SCRAPER_SECRET)["issuerRef"].update(
        name="raftpoint-selfsigned"),
    "scraper-is-a-server": lambda d: _certificate(d, SCRAPER_SECRET)["usages"].append("server auth"),
    "job-renamed": lambda d: one(d, "ServiceMonitor")["spec"].update(jobLabel="app.kubernetes.io/name"),
}


@pytest.mark.parametrize("breakage", SCRAPE_BREAKAGES)
def test_the_scrape_check_catches(breakage: str) -> None:
    docs = rendered()
    SCRAPE_BREAKAGES[breakage](docs)
    with pytest.raises((AssertionError, KeyError)):
        check_scrape(docs)


def test_the_scrapers_role_check_catches_a_binding() -> None:
    docs = rendered()
    auth = one(docs, "ConfigMap", "raftpoint-auth")["data"]
    auth["bindings.toml"] += '\n["cert:prometheus-scraper"]\nrole = "observer"\n'
    with pytest.raises(AssertionError):
        check_scrape(docs)
