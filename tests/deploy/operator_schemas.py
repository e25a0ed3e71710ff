"""JSON schemas of the Prometheus Operator resources deploy/monitoring ships, for offline
validation: kubernetes-validate knows only Kubernetes' own kinds.

Written from the monitoring.coreos.com/v1 CRDs (prometheus-operator 0.93): the same
types, patterns and required fields, for the fields these manifests use and their
siblings an edit is likely to reach for. Any other field is refused, as `kubectl apply`
(strict field validation) refuses a field the CRD does not define, so a misspelled or
misplaced key fails here rather than at apply time.
"""
from __future__ import annotations

from typing import Any

DURATION = {"type": "string",
            "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}
STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}


def _closed(required: list[str], **properties: Any) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "required": required, "properties": properties}


def _document(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    metadata = {"type": "object", "required": ["name"],
                "properties": {"name": {"type": "string", "minLength": 1}, "namespace": {"type": "string"},
                               "labels": STRINGS, "annotations": STRINGS}}
    return _closed(["apiVersion", "kind", "metadata", "spec"], apiVersion={"const": "monitoring.coreos.com/v1"},
                   kind={"const": kind}, metadata=metadata, spec=spec)


_SECRET_KEY = _closed(["key"], name={"type": "string"}, key={"type": "string"}, optional={"type": "boolean"})
_SECRET_OR_CONFIGMAP = _closed([], secret=_SECRET_KEY, configMap=_SECRET_KEY)
_TLS = _closed([], ca=_SECRET_OR_CONFIGMAP, cert=_SECRET_OR_CONFIGMAP, keySecret=_SECRET_KEY,
               serverName={"type": "string"}, insecureSkipVerify={"type": "boolean"},
               minVersion={"enum": ["TLS10", "TLS11", "TLS12", "TLS13"]},
               maxVersion={"enum": ["TLS10", "TLS11", "TLS12", "TLS13"]})
_RELABEL = _closed([], sourceLabels={"type": "array", "items": {"type": "string"}},
                   separator={"type": "string"}, targetLabel={"type": "string"}, regex={"type": "string"},
                   modulus={"type": "integer"}, replacement={"type": "string"},
                   action={"enum": ["replace", "Replace", "keep", "Keep", "drop", "Drop", "hashmod", "HashMod",
                                    "labelmap", "LabelMap", "labeldrop", "LabelDrop", "labelkeep", "LabelKeep",
                                    "lowercase", "Lowercase", "uppercase", "Uppercase", "keepequal", "KeepEqual",
                                    "dropequal", "DropEqual"]})
_ENDPOINT = _closed([], port={"type": "string"}, targetPort={"type": ["string", "integer"]},
                    path={"type": "string"}, scheme={"enum": ["http", "https", "HTTP", "HTTPS"]},
                    interval=DURATION, scrapeTimeout=DURATION, tlsConfig=_TLS, honorLabels={"type": "boolean"},
                    relabelings={"type": "array", "items": _RELABEL},
                    metricRelabelings={"type": "array", "items": _RELABEL})
_SELECTOR = _closed([], matchLabels=STRINGS, matchExpressions={"type": "array", "items": _closed(
    ["key", "operator"], key={"type": "string"}, operator={"type": "string"},
    values={"type": "array", "items": {"type": "string"}})})

SERVICE_MONITOR = _document("ServiceMonitor", _closed(
    ["endpoints", "selector"], endpoints={"type": "array", "items": _ENDPOINT}, selector=_SELECTOR,
    namespaceSelector=_closed([], any={"type": "boolean"}, matchNames={"type": "array", "items": {"type": "string"}}),
    jobLabel={"type": "string"}, targetLabels={"type": "array", "items": {"type": "string"}},
    podTargetLabels={"type": "array", "items": {"type": "string"}}))

_RULE = _closed(["expr"], alert={"type": "string"}, record={"type": "string"},
                expr={"type": ["string", "integer"]}, labels=STRINGS, annotations=STRINGS,
                keep_firing_for={**DURATION, "minLength": 1}, **{"for": DURATION})
PROMETHEUS_RULE = _document("PrometheusRule", _closed([], groups={"type": "array", "items": _closed(
    ["name"], name={"type": "string", "minLength": 1}, interval=DURATION, query_offset=DURATION,
    limit={"type": "integer"}, labels=STRINGS, partial_response_strategy={"type": "string"},
    rules={"type": "array", "items": _RULE})}))

SCHEMAS = {"ServiceMonitor": SERVICE_MONITOR, "PrometheusRule": PROMETHEUS_RULE}
