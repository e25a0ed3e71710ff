from __future__ import annotations

import hashlib
import json

import pytest

from agent_client import state_codec
from agent_client.agent import config_hash as agent_config_hash
from agent_client.state_codec import BYTES, JSON, StateDecodeError, config_hash, decode, encode


def test_bytes_round_trip_as_is() -> None:
    raw = bytes(range(256)) * 10
    data = encode(raw, schema_version=3)
    assert data.endswith(raw)
    out = decode(data, expected_schema=3)
    assert (out.schema_version, out.content_type, out.value) == (3, BYTES, raw)


def test_json_round_trip_is_canonical() -> None:
    a = encode({"b": [1, 2.5, "é"], "a": None}, schema_version=1)
    b = encode({"a": None, "b": [1, 2.5, "é"]}, schema_version=1)
    assert a == b  # same state, same bytes, same digest
    out = decode(a)
    assert out.content_type == JSON and out.value == {"a": None, "b": [1, 2.5, "é"]}


@pytest.mark.parametrize("bad", [{"x": object()}, {"x": float("nan")}, {1, 2}])
def test_non_json_state_is_refused(bad: object) -> None:
    with pytest.raises(TypeError, match="not JSON"):
        encode(bad, schema_version=1)


def test_schema_mismatch_and_damage_are_reported() -> None:
    data = encode({"k": 1}, schema_version=2)
    with pytest.raises(StateDecodeError, match="schema version 2, expected 3"):
        decode(data, expected_schema=3)
    with pytest.raises(StateDecodeError, match="missing header"):
        decode(b'{"k": 1}')
    with pytest.raises(StateDecodeError, match="damaged"):
        decode(data[:-2])
    with pytest.raises(StateDecodeError, match="truncated"):
        decode(state_codec.MAGIC + b'{"content_type"')


def test_config_hash_is_canonical_and_agrees_with_agent_client() -> None:
    config = {"model": "m-1", "tools": ["a", "b"], "temperature": 0.2}
    reordered = dict(reversed(list(config.items())))
    assert config_hash(config) == config_hash(reordered) == agent_config_hash(config)
    expected = hashlib.sha256(json.dumps(config, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert config_hash(config) == expected
    assert config_hash({**config, "model": "m-2"}) != config_hash(config)
