"""The agent distribution installed from its sdist alone runs the README's "Connect an agent"
section on a `raftpoint cluster up` cluster, over TLS, as an agent identity of its own.

One sdist build and one fresh virtualenv: pip installs the sdist into it (building the
wheel with hatchling, the one build requirement, shown to the virtualenv; no index),
and afterwards the virtualenv sees only the agent's declared dependency closure. Its
programs run from a temporary folder with PYTHONPATH unset, so nothing of the checkout
is importable there. The cluster and the `raftpoint` commands run from this (full)
environment, as an operator's host would; the agent's `raftpoint-data` is what the
operator hands an agent's host: endpoints.json, the CA and the agent's own certificate,
no admin certificate, so a program that used the admin's would fail here.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import venv
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Iterator

import pytest

from coordinator.harness.local_cluster import wait_for
from raftpoint.cli.main import main as raftpoint
from tests.support.cluster_up import RAFTPOINT, stop
from tests.support.distributions import (AGENT_PROJECT, ROOT, SERVER_ONLY_MODULES, build_sdist, dependency_closure,
                                         show_only, site_packages)
from tests.support.readme import CONNECT_AN_AGENT, README_DATA_DIR, fenced, readme_section, shell_commands

pytestmark = [pytest.mark.slow, pytest.mark.cluster]
QUICKSTART_DONE = "{'notes': ['outline the report']}"

# Run in the virtualenv: where agent_client comes from, that the server's modules are
# absent (and the in-process coordinator says what to install), and that the agent
# identity may not create a group.
CHECK = """
import importlib.util, json
import agent_client
from agent_client import ClientTLS, connect, testing
from agent_client.connection import Rejected
from coordinator.endpoints_file import read_endpoints
try:
    testing.coordinator()
    in_process = None
except testing.ServerNotInstalled as exc:
    in_process = str(exc)
tls = ClientTLS(ca_file="{data}/tls/ca.crt", cert_file="{data}/tls/client-reporter.crt",
                key_file="{data}/tls/client-reporter.key")
try:
    with connect(read_endpoints("{data}"), identity="reporter", tls=tls, deadline=20) as rp:
        rp.group("not-the-reporters", mode="bcs", create=True)
    refused = None
except Rejected as exc:
    refused = [exc.code.name, exc.reason_name]
print(json.dumps({{"agent_client": agent_client.__file__, "refused": refused, "in_process": in_process,
                  "server_only": [m for m in {server_only!r} if importlib.util.find_spec(m) is not None]}}))
"""


def agent_venv(work: Path) -> Path:
    """A fresh virtualenv with the agent distribution installed from its sdist; its python."""
    sdist = build_sdist(AGENT_PROJECT, work / "sdist")
    env_dir = work / "agent-env"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    show_only(env_dir, dependency_closure(["hatchling"], set()), work / "build-backend")
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                           "--no-index", "--no-build-isolation", str(sdist)],
                          capture_output=True, text=True, timeout=300, env=without_checkout(), cwd=work)
    assert done.returncode == 0, done.stdout + done.stderr
    [installed] = metadata.distributions(name="raftpoint-agent", path=[str(site_packages(env_dir))])
    show_only(env_dir, dependency_closure(installed.requires or [], set()), work / "agent-requirements")
    return python


def agent_copy(data_dir: Path, identity: str, target: Path) -> None:
    """What an agent's host needs of a `cluster up` data dir, and nothing more."""
    (target / "tls").mkdir(parents=True)
    shutil.copy(data_dir / "endpoints.json", target)
    for name in ("ca.crt", f"client-{identity}.crt", f"client-{identity}.key"):
        shutil.copy(data_dir / "tls" / name, target / "tls")


def without_checkout() -> dict[str, str]:
    """This process's environment without PYTHONPATH (the checkout) or RAFTPOINT_* settings."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("RAFTPOINT_")}


@contextmanager
def cluster_up(data_dir: Path, log: Path) -> Iterator[None]:
    """`raftpoint cluster up -n 3` until it has written endpoints.json and found a leader;
    stopped afterwards, whatever happened."""
    with log.open("w") as out:
        up = subprocess.Popen([*RAFTPOINT, "cluster", "up", "-n", "3", "--data-dir", str(data_dir)], stdout=out,
                              stderr=subprocess.STDOUT)
    try:
        # Printed (and flushed) once a leader is known and endpoints.json is written.
        try:
            wait_for(lambda: up.poll() is not None or "endpoints written to" in log.read_text(),
                     "cluster up to find a leader", timeout=90)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}; it printed: {log.read_text()}") from None
        assert up.poll() is None and (data_dir / "endpoints.json").is_file(), log.read_text()
        yield
    finally:
        stop(up)


def test_the_agent_sdist_runs_the_readme_and_the_quickstart_as_an_agent_identity(tmp_path: Path) -> None:
    python = agent_venv(tmp_path)
    work = tmp_path / "agent-cwd"  # the agent's working directory, where the README's data dir is
    work.mkdir()
    data_dir = tmp_path / "cluster"
    quickstart = shutil.copy(ROOT / "examples" / "quickstart.py", work / "quickstart.py")
    section = readme_section(CONNECT_AN_AGENT)

    def in_venv(*argv: str) -> subprocess.CompletedProcess:
        """Run in the virtualenv; one still running after 120 s fails with every thread's stack."""
        with subprocess.Popen([str(python), "-X", "faulthandler", *argv], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=work, env=without_checkout()) as running:
            try:
                out, err = running.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                running.send_signal(signal.SIGABRT)  # -X faulthandler: it prints every thread's stack, then ends
                out, err = running.communicate()
                raise AssertionError(f"{argv} still ran after 120 s; it printed {out!r}; its threads:\n{err}") from None
        return subprocess.CompletedProcess(running.args, running.returncode, out, err)

    with cluster_up(data_dir, tmp_path / "cluster-up.log"):
        for argv in shell_commands(section):  # as admin: the group, then the agent identity
            argv = [str(data_dir) if word == README_DATA_DIR else word for word in argv]
            assert argv[0] == "raftpoint" and raftpoint(argv[1:]) == 0, argv
        agent_copy(data_dir, "reporter", work / README_DATA_DIR)

        checked = in_venv("-c", CHECK.format(data=README_DATA_DIR, server_only=SERVER_ONLY_MODULES))
        assert checked.returncode == 0, checked.stdout + checked.stderr
        seen = json.loads(checked.stdout)
        assert seen["agent_client"].startswith(str(site_packages(python.parents[1]))), seen
        assert seen["server_only"] == [] and "pip install" in (seen["in_process"] or ""), seen
        assert seen["refused"] == ["PERMISSION_DENIED", "REASON_ROLE_FORBIDS"], seen

        readme = in_venv("-c", fenced(section, "python"))
        assert readme.returncode == 0 and readme.stdout.strip() == "{'pages': 1}", readme.stdout + readme.stderr

        for run in (1, 2):  # the second run resumes the first one's agents from their checkpoints
            done = in_venv(str(quickstart), README_DATA_DIR, "--identity", "reporter", "--group", "team")
            assert done.returncode == 0, f"run {run}: {done.stdout}{done.stderr}"
            assert done.stdout.strip() == QUICKSTART_DONE, f"run {run}: {done.stdout}{done.stderr}"
