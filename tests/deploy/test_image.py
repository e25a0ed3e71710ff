"""deploy/Dockerfile built and run for real: three coordinator containers configured
as the StatefulSet configures its pods, a checkpoint through the gRPC API, and the
leader's container stopped.

The image is built on a local Debian base (tests/support/containers.py) from wheels
built here, as docs/image.md describes. Each container gets the rendered ConfigMap
as its environment plus its pod name, the TLS, Raft password and auth files as
read-only directories (the Secret and ConfigMap mounts), a volume for /data (its
PVC), a read-only root file system and the non-root user of the pod's
securityContext. Stable names are pinned with --add-host (podman's DNS answers
NXDOMAIN for a moment while containers join); the gRPC ports are published on
127.0.0.1 only. Skips where podman or mmdebstrap is missing or cannot run.
"""
from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

import coordinator
from agent_client.connection import Connection
from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.channels import ClientTLS
from coordinator.harness.certs import LocalCA
from coordinator.harness.local_cluster import free_ports, node_status, wait_for
from tests.deploy.test_manifests import GRPC, PASSWORD_KEY, TLS_FILES, coordinator_container, effective_env, one
from tests.support.containers import Podman, base_image_or_skip, podman_or_skip
from tests.support.manifests import kustomize

# The first run makes the Debian base (mmdebstrap) and every run builds wheels and the image.
pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[2]
UID = GID = 10001
LEADER_WAIT_S = 60
STOP_GRACE_S = 20
CHECKPOINT = pb.CheckpointMeta(group="g", agent_id="a", index=1, kind=pb.BASIC, blob_uri="file:///b/1",
                               sha256="e" * 64, size=1)
WRITTEN = [(CHECKPOINT.index, CHECKPOINT.blob_uri, CHECKPOINT.sha256)]


def build_wheels(wheelhouse: Path) -> None:
    """Both distributions and their dependencies as wheels, at the pinned versions."""
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(wheelhouse),
                           "-c", "constraints.txt", "./distributions/raftpoint-agent", "."],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"pip wheel failed: {done.stderr[-2000:]}"


def build_image(podman: Podman, base: str, context: Path, tag: str) -> None:
    """deploy/Dockerfile on a context holding what it reads: constraints.txt and wheelhouse/."""
    shutil.copy(ROOT / "constraints.txt", context / "constraints.txt")
    build_wheels(context / "wheelhouse")
    podman.run("build", "-q", "-f", str(ROOT / "deploy" / "Dockerfile"), "--build-arg", f"BASE_IMAGE={base}",
               "--build-arg", f"VERSION={coordinator.__version__}", "-t", tag, str(context), timeout=600)


def mounted_dir(path: Path, files: dict[str, bytes]) -> Path:
    """A directory as a Secret volume shows it: root-owned files the pod's group reads."""
    path.mkdir()
    for name, data in files.items():
        (path / name).write_bytes(data)
        if os.geteuid() == 0:
            os.chown(path / name, 0, GID)
            os.chmod(path / name, 0o440)
        else:  # rootless podman maps 10001 elsewhere
            os.chmod(path / name, 0o444)
    return path


def mount_path(docs: list[dict], volume: str) -> str:
    [path] = [m["mountPath"] for m in coordinator_container(docs)["volumeMounts"] if m["name"] == volume]
    return path


class PodLikeContainers:
    """The StatefulSet's pods as containers on their own podman network, removed with
    their volumes and the network by close()."""

    def __init__(self, podman: Podman, image: str, docs: list[dict], files: Path, ca: LocalCA) -> None:
        self.podman, self.image, self.docs = podman, image, docs
        self.prefix = f"raftpoint-test-{secrets.token_hex(4)}"
        self.replicas = one(docs, "StatefulSet")["spec"]["replicas"]
        self.headless = one(docs, "StatefulSet")["spec"]["serviceName"]
        self.env = {k: v for k, v in effective_env(docs, coordinator_container(docs)).items() if isinstance(v, str)}
        self.ports = free_ports(self.replicas)
        self.network = ""
        self.started: list[int] = []
        self.ips: list[str] = []
        self.mounts = self._mounts(files, ca)

    def _mounts(self, files: Path, ca: LocalCA) -> list[str]:
        """The Secret and ConfigMap volumes of the pod spec, as read-only directories."""
        # Every pod's stable name: gRPC's hostname check matches no wildcard against a
        # two-label name such as raftpoint-0.raftpoint-peers.
        node = ca.server("node", [f"raftpoint-{j}.{self.headless}" for j in range(self.replicas)])
        tls = {"tls.crt": node.cert_file.read_bytes(), "tls.key": node.key_file.read_bytes(),
               "ca.crt": ca.ca_file.read_bytes()}
        assert set(tls) == set(TLS_FILES.values())
        bindings = one(self.docs, "ConfigMap", "raftpoint-auth")["data"]["bindings.toml"].encode()
        sources = {"tls": mounted_dir(files / "tls", tls),
                   "secrets": mounted_dir(files / "secrets", {PASSWORD_KEY: b"image-test-raft-password\n"}),
                   "auth": mounted_dir(files / "auth", {"bindings.toml": bindings})}
        return [f"{sources[name]}:{mount_path(self.docs, name)}:ro" for name in sources]

    def name(self, i: int) -> str:
        return f"{self.prefix}-{i}"

    def grpc(self, i: int) -> str:
        return f"127.0.0.1:{self.ports[i]}"

    def create_network(self) -> None:
        self.network = self.podman.out("network", "create", self.prefix)
        subnet = ipaddress.ip_network(self.podman.out("network", "inspect", self.network, "--format",
                                                      "{{range .Subnets}}{{.Subnet}}{{end}}"))
        self.ips = [str(subnet[11 + i]) for i in range(self.replicas)]

    def start(self, i: int) -> None:
        volume = f"{self.name(i)}-data"
        self.podman.run("volume", "create", volume)
        self.started.append(i)
        hosts = [f"--add-host=raftpoint-{j}.{self.headless}:{ip}" for j, ip in enumerate(self.ips)]
        env = [f"--env={k}={v}" for k, v in {**self.env, "RAFTPOINT_POD_NAME": f"raftpoint-{i}"}.items()]
        mounts = [f"--volume={m}" for m in [f"{volume}:{self.env['RAFTPOINT_DATA_DIR']}", *self.mounts]]
        self.podman.run("run", "--detach", f"--name={self.name(i)}", f"--network={self.network}", f"--ip={self.ips[i]}",
                        f"--hostname=raftpoint-{i}", *hosts, *env, *mounts,
                        # the pod's securityContext; --read-only keeps a tmpfs on /tmp (the emptyDir)
                        f"--user={UID}:{GID}", "--read-only", "--cap-drop=ALL", "--security-opt=no-new-privileges",
                        f"--publish=127.0.0.1:{self.ports[i]}:{GRPC}", self.image)

    def logs(self) -> str:
        return "\n".join(f"--- {self.name(i)}:\n" + self.podman.run("logs", "--tail", "15", self.name(i),
                                                                     check=False).stderr[-3000:]
                         for i in self.started)

    def close(self) -> None:
        names = [self.name(i) for i in self.started]
        if names:
            self.podman.run("rm", "--force", "--time=0", *names, check=False)
            self.podman.run("volume", "rm", "--force", *[f"{n}-data" for n in names], check=False)
        if self.network:
            self.podman.run("network", "rm", "--force", self.network, check=False)


def roles(cluster: PodLikeContainers, admin: ClientTLS, among: list[int]) -> dict[int, str]:
    statuses = {i: node_status(cluster.grpc(i), timeout=2, tls=admin) for i in among}
    return {i: "no answer" if s is None else s.role for i, s in statuses.items()}


def leader_among(cluster: PodLikeContainers, admin: ClientTLS, among: list[int]) -> int:
    """The one container of `among` that says it leads; on timeout, what each said last
    and the containers' logs."""
    seen: dict[int, str] = {}

    def one_leader() -> bool:
        seen.update(roles(cluster, admin, among))
        return list(seen.values()).count("leader") == 1
    try:
        wait_for(one_leader, f"one leader among containers {among}", LEADER_WAIT_S, 0.2)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}; last saw {seen}\n{cluster.logs()}") from None
    return next(i for i, role in seen.items() if role == "leader")


def read_checkpoints(conn: Connection) -> list[tuple[int, str, str]]:
    found = conn.call("AdminService", "ListCheckpoints", pb.ListCheckpointsRequest(group="g", agent_id="a"))
    return [(c.index, c.blob_uri, c.sha256) for c in found.checkpoints]


@pytest.fixture(scope="module")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Podman:
    return podman_or_skip(tmp_path_factory.mktemp("podman"))


@pytest.fixture(scope="module")
def image(podman: Podman, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tag = f"localhost/raftpoint-test:{secrets.token_hex(4)}"
    context = tmp_path_factory.mktemp("context")
    build_image(podman, base_image_or_skip(podman, context.parent), context, tag)
    try:
        yield tag
    finally:
        podman.run("rmi", "--force", tag, check=False)


def test_image_labels_and_user(podman: Podman, image: str) -> None:
    config = podman.out("image", "inspect", image, "--format",
                        '{{.Config.User}} {{index .Labels "org.opencontainers.image.version"}}')
    assert config == f"{UID}:{GID} {coordinator.__version__}"


def test_the_wait_for_own_dns_init_container_runs_in_the_image(podman: Podman, image: str) -> None:
    docs = kustomize(ROOT / "deploy" / "base")
    [init] = one(docs, "StatefulSet")["spec"]["template"]["spec"]["initContainers"]
    env = {k: v for k, v in effective_env(docs, init).items() if isinstance(v, str)}
    pod_ip, name = "10.1.2.3", f"raftpoint-0.{env['RAFTPOINT_HEADLESS_SERVICE']}"
    env.update(RAFTPOINT_POD_NAME="raftpoint-0", POD_IP=pod_ip, WAIT_FOR_DNS_SECONDS="10")
    command, *args = init["command"]
    done = podman.run("run", "--rm", "--read-only", "--network=none", f"--add-host={name}:{pod_ip}",
                      *(f"--env={k}={v}" for k, v in env.items()), f"--entrypoint={command}", image, *args,
                      check=False)
    assert done.returncode == 0 and f"{name} resolves to {pod_ip}" in done.stdout, done


def test_statefulset_configured_containers_elect_serve_and_survive_the_leaders_stop(
        podman: Podman, image: str, tmp_path: Path) -> None:
    ca = LocalCA.create(tmp_path / "ca")
    admin = ca.client_tls("admin")
    cluster = PodLikeContainers(podman, image, kustomize(ROOT / "deploy" / "base"), tmp_path, ca)
    try:
        cluster.create_network()
        for i in range(cluster.replicas):
            cluster.start(i)
        everyone = list(range(cluster.replicas))
        first = leader_among(cluster, admin, everyone)
        # Followers redirect by stable names only the containers resolve: call the leader's port.
        with Connection([cluster.grpc(first)], deadline=30, tls=admin) as conn:
            conn.call("AdminService", "CreateGroup", pb.CreateGroupRequest(
                request_id="img-g", spec=pb.GroupSpec(group="g", mode=pb.CIC_BCS, lease_ttl_s=3600)))
            conn.call("AgentService", "Register", pb.RegisterRequest(
                secret=b"s" * 16, request_id="img-r", group="g", agent_id="a"))
            conn.call("AgentService", "CommitCheckpoint", pb.CommitCheckpointRequest(
                request_id="img-c", token=pb.FencingToken(secret=b"s" * 16, incarnation=1), checkpoint=CHECKPOINT))
            assert read_checkpoints(conn) == WRITTEN

        podman.run("stop", f"--time={STOP_GRACE_S}", cluster.name(first), timeout=STOP_GRACE_S + 60)
        exit_code = podman.out("inspect", cluster.name(first), "--format", "{{.State.ExitCode}}")
        assert exit_code == "0", f"the stopped leader exited with {exit_code}:\n{cluster.logs()}"
        rest = [i for i in everyone if i != first]
        second = leader_among(cluster, admin, rest)
        with Connection([cluster.grpc(second)], deadline=30, tls=admin) as conn:
            assert read_checkpoints(conn) == WRITTEN
    finally:
        cluster.close()
