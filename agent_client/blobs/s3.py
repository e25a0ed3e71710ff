"""Chunks and manifests in an S3 bucket (AWS or any S3-compatible server), via obstore.

Why obstore rather than boto3: it has what this backend needs built in -- create-only
puts (`If-None-Match: *`), SHA-256 upload checksums, retries with exponential backoff
and jitter on 5xx (S3 throttles with 503 SlowDown) and dropped connections, connect
and request timeouts, and the standard credential chain (environment, web identity
token file as on EKS, container and instance credentials) -- in one compiled wheel
with no other dependency; it releases the GIL, so the store's bounded thread pool
really uploads in parallel, and it has an asyncio API for later. boto3 would bring
botocore's ~80 MB and a Python-level request path per chunk.

The location is a URL, `s3://bucket/prefix?endpoint=http://host:port&region=r` (and
optionally connect_timeout, request_timeout, retry_timeout in seconds, max_retries):
only where the data is and how patiently to reach it, never who may read it. Credentials come from the environment
(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, or a web identity
token file) or from the shared credentials file (AWS_SHARED_CREDENTIALS_FILE,
default ~/.aws/credentials, profile AWS_PROFILE or "default"), so a Kubernetes
Secret works as env vars or as a mounted file. A URL carrying credentials is refused.

Every upload carries x-amz-checksum-sha256, so the server rejects a body damaged in
transit (BadDigest) instead of storing it; reads are verified by the store above.
"""
from __future__ import annotations

import configparser
import os
import re
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping
from urllib.parse import parse_qs, urlparse

import obstore
from obstore.exceptions import AlreadyExistsError
from obstore.store import S3Store

from agent_client.blobs.backend import Buffer, StoredObject
from agent_client.blobs.errors import BlobMissing, BlobStoreUnavailable

if TYPE_CHECKING:  # obstore's option types exist only in its stubs
    from obstore.store import ClientConfig, RetryConfig, S3Config

SCHEME = "s3"
_S3_ERROR_CODE = re.compile(r"<Code>(\w+)</Code>")  # e.g. BadDigest, SlowDown, AccessDenied
_TUNING_KEYS = {"connect_timeout": "connect_timeout_s", "request_timeout": "request_timeout_s",
                "retry_timeout": "retry_timeout_s", "max_retries": "max_retries"}
_QUERY_KEYS = frozenset({"endpoint", "region", *_TUNING_KEYS})
_SECRET_HINTS = ("key", "secret", "token", "password", "credential", "signature")


@dataclass(frozen=True)
class S3Tuning:
    """Timeouts and retries (seconds). Defaults suit a checkpoint path: a dead endpoint
    fails the checkpoint within about `retry_timeout_s`, not minutes later."""
    connect_timeout_s: float = 5.0
    request_timeout_s: float = 30.0
    max_retries: int = 6
    retry_timeout_s: float = 30.0
    initial_backoff_s: float = 0.05
    max_backoff_s: float = 2.0


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str  # "" or "a/b" (no leading or trailing slash)
    endpoint: str | None
    region: str | None
    tuning: S3Tuning = S3Tuning()

    @classmethod
    def parse(cls, url: str) -> "S3Location":
        """Bad URLs fail here, before anything is contacted."""
        parsed = urlparse(url)
        if parsed.scheme != SCHEME:
            raise ValueError(f"not an s3:// URL: {parsed.scheme}://...")
        if "@" in parsed.netloc or parsed.password is not None:
            raise ValueError("credentials never go in the blob store URL; set AWS_ACCESS_KEY_ID and "
                             "AWS_SECRET_ACCESS_KEY, or a credentials file")
        if not parsed.netloc:
            raise ValueError("the s3:// URL names no bucket (s3://bucket/prefix)")
        query = parse_qs(parsed.query, keep_blank_values=True)
        for name in query:
            if any(hint in name.lower() for hint in _SECRET_HINTS):
                raise ValueError(f"credentials never go in the blob store URL (found {name!r}); "
                                 "use the environment or a credentials file")
            if name not in _QUERY_KEYS:
                raise ValueError(f"unknown s3:// URL parameter {name!r} (known: {sorted(_QUERY_KEYS)})")
        single = {name: values[-1] for name, values in query.items()}
        endpoint = single.get("endpoint") or None
        if endpoint is not None and urlparse(endpoint).scheme not in ("http", "https"):
            raise ValueError(f"endpoint must be an http:// or https:// URL, got {endpoint!r}")
        tuning: dict[str, Any] = {}
        for name, attr in _TUNING_KEYS.items():
            if name in single:
                try:
                    tuning[attr] = int(single[name]) if attr == "max_retries" else float(single[name])
                except ValueError:
                    raise ValueError(f"s3:// URL parameter {name} must be a number, got {single[name]!r}") from None
                if tuning[attr] < 0:
                    raise ValueError(f"s3:// URL parameter {name} must not be negative")
        return cls(parsed.netloc, parsed.path.strip("/"), endpoint, single.get("region") or None,
                   S3Tuning(**tuning))

    @property
    def name(self) -> str:
        """How errors and logs name the store: bucket, prefix and endpoint, nothing secret."""
        where = f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"
        return where if self.endpoint is None else f"{where} at {self.endpoint}"


def shared_file_credentials(env: Mapping[str, str]) -> S3Config:
    """Keys from the shared credentials file when the environment holds none.

    obstore reads environment variables and token files itself but not this ini file,
    which is how a Secret mounted as a file (or a developer's ~/.aws) usually looks."""
    if env.get("AWS_ACCESS_KEY_ID") or env.get("AWS_WEB_IDENTITY_TOKEN_FILE"):
        return {}
    path = Path(env.get("AWS_SHARED_CREDENTIALS_FILE") or Path.home() / ".aws" / "credentials")
    if not path.is_file():
        return {}
    parser = configparser.ConfigParser()
    parser.read(path)
    profile = env.get("AWS_PROFILE", "default")
    if not parser.has_section(profile):
        raise ValueError(f"the shared credentials file {path} has no profile {profile!r}")
    section = parser[profile]
    found: S3Config = {}
    if key_id := section.get("aws_access_key_id"):
        found["access_key_id"] = key_id
    if secret := section.get("aws_secret_access_key"):
        found["secret_access_key"] = secret
    if token := section.get("aws_session_token"):
        found["session_token"] = token
    return found


class S3Backend:
    """A ChunkBackend over one bucket prefix; s3:// URIs (the endpoint is not part of them:
    the same checkpoint is reachable through any endpoint of the same bucket)."""

    def __init__(self, url: str, *, env: Mapping[str, str] | None = None) -> None:
        self.where = S3Location.parse(url)
        tuning = self.where.tuning
        self.location = self.where.name
        config: S3Config = {"checksum_algorithm": "sha256", **shared_file_credentials(
            os.environ if env is None else env)}
        if self.where.endpoint is not None:
            config["endpoint"] = self.where.endpoint
        if self.where.region is not None:
            config["region"] = self.where.region
        client: ClientConfig = {"connect_timeout": timedelta(seconds=tuning.connect_timeout_s),
                  "timeout": timedelta(seconds=tuning.request_timeout_s),
                  "allow_http": bool(self.where.endpoint and self.where.endpoint.startswith("http://"))}
        retry: RetryConfig = {"max_retries": tuning.max_retries, "retry_timeout": timedelta(seconds=tuning.retry_timeout_s),
                 "backoff": {"init_backoff": timedelta(seconds=tuning.initial_backoff_s),
                             "max_backoff": timedelta(seconds=tuning.max_backoff_s), "base": 2}}
        self._store = S3Store(self.where.bucket, prefix=self.where.prefix or None, config=config,
                              client_options=client, retry_config=retry)

    # ---- errors ---------------------------------------------------------------------
    def _unavailable(self, action: str, key: str, exc: Exception) -> BlobStoreUnavailable:
        """obstore messages name the request URL and status, never the signing keys."""
        code = _S3_ERROR_CODE.search(str(exc))
        named = f" ({code.group(1)})" if code else ""
        return BlobStoreUnavailable(f"blob store {self.location}: {action} {key} failed{named}: "
                                    f"{type(exc).__name__}: {_first_line(exc)}")

    # ---- ChunkBackend ---------------------------------------------------------------
    def put(self, key: str, data: Buffer) -> None:
        try:
            obstore.put(self._store, key, data, mode="overwrite", use_multipart=False)
        except Exception as exc:
            raise self._unavailable("put", key, exc) from None

    def create(self, key: str, data: Buffer | Iterable[Buffer]) -> bool:
        body = data if isinstance(data, (bytes, bytearray, memoryview)) else b"".join(data)
        try:
            obstore.put(self._store, key, body, mode="create", use_multipart=False)
            return True
        except AlreadyExistsError:
            return False
        except Exception as exc:
            raise self._unavailable("create", key, exc) from None

    def flush(self) -> None:
        """Nothing to do: S3 acknowledges a PUT once the object is stored."""

    def get(self, key: str, max_bytes: int | None = None) -> bytes:
        try:
            result = obstore.get(self._store, key)
            if max_bytes is None or result.meta["size"] <= max_bytes:
                return bytes(result.bytes())
            return _prefix(result.stream(), max_bytes + 1)  # the rest is never downloaded
        except FileNotFoundError:
            raise BlobMissing(f"{self.uri(key)} is missing") from None
        except Exception as exc:
            raise self._unavailable("get", key, exc) from None

    def get_range(self, key: str, start: int, length: int) -> bytes:
        meta = self._head(key)
        if meta is None:
            raise BlobMissing(f"{self.uri(key)} is missing")
        length = min(length, int(meta["size"]) - start)  # a range past the end is an error on S3
        if length <= 0:
            return b""
        try:
            return bytes(obstore.get_range(self._store, key, start=start, length=length))
        except FileNotFoundError:
            raise BlobMissing(f"{self.uri(key)} is missing") from None
        except Exception as exc:
            raise self._unavailable("get", key, exc) from None

    def _head(self, key: str) -> Mapping[str, Any] | None:
        try:
            return obstore.head(self._store, key)
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise self._unavailable("head", key, exc) from None

    def exists(self, key: str) -> bool:
        return self._head(key) is not None

    def size(self, key: str) -> int:
        meta = self._head(key)
        if meta is None:
            raise BlobMissing(f"{self.uri(key)} is missing")
        return int(meta["size"])

    def delete(self, key: str) -> None:
        try:
            obstore.delete(self._store, key)
        except FileNotFoundError:
            pass
        except Exception as exc:
            raise self._unavailable("delete", key, exc) from None

    def entries(self, prefix: str) -> Iterator[StoredObject]:
        try:
            for batch in obstore.list(self._store, prefix.rstrip("/") + "/", chunk_size=1000):
                for meta in batch:
                    yield StoredObject(meta["path"], int(meta["size"]), meta["last_modified"].timestamp())
        except Exception as exc:
            raise self._unavailable("list", prefix, exc) from None

    def keys(self, prefix: str) -> Iterator[str]:
        return (entry.key for entry in self.entries(prefix))

    def uri(self, key: str) -> str:
        path = f"{self.where.prefix}/{key}" if self.where.prefix else key
        return f"s3://{self.where.bucket}/{path}"

    def key_for_uri(self, uri: str) -> str | None:
        parsed = urlparse(uri)
        if parsed.scheme != SCHEME or parsed.netloc != self.where.bucket or parsed.query:
            return None
        path = parsed.path.lstrip("/")
        if not self.where.prefix:
            return path or None
        head = self.where.prefix + "/"
        return path[len(head):] if path.startswith(head) and len(path) > len(head) else None


def _prefix(stream: Iterable[Buffer], length: int) -> bytes:
    """The first `length` bytes of a download stream; stops reading once it has them."""
    head = bytearray()
    for piece in stream:
        head += memoryview(piece)[:length - len(head)]
        if len(head) >= length:
            break
    return bytes(head)


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""
