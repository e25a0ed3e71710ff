"""podman for the image tests: a private containers.conf, a local Debian base image,
and a skip (with the reason) wherever containers cannot run.

No registry images: the base is made with mmdebstrap and `podman import`, once, and
found again by its tag. It stands in for python:3.11-slim: Debian's python3.11 and
pip, with pip allowed to install into the system as it is in the official image.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

BASE_TAG = "localhost/raftpoint-test-base:bookworm-python3.11"
BASE_PACKAGES = "python3,python3-pip,python-is-python3"
BASE_TIMEOUT_S = 600
# Root lacks CAP_SYS_RESOURCE on these machines (any rlimit above the hard one in the
# spec is EPERM), and crun refuses a hybrid cgroup setup.
CONTAINERS_CONF = '[containers]\ndefault_ulimits = []\n\n[engine]\nruntime = "runc"\n'


class Podman:
    """Runs podman with the private containers.conf; every call has a timeout."""

    def __init__(self, directory: Path) -> None:
        conf = directory / "containers.conf"
        conf.write_text(CONTAINERS_CONF)
        self.env = {**os.environ, "CONTAINERS_CONF": str(conf)}

    def run(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run(["podman", *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)} exited with {done.returncode}: {done.stderr.strip()}")
        return done

    def out(self, *args: str, timeout: float = 120) -> str:
        return self.run(*args, timeout=timeout).stdout.strip()


def podman_or_skip(directory: Path) -> Podman:
    """A Podman that can run containers here, or a skip saying why not.

    The image tests build a base, wheels and an image (30-40 s, about 3 minutes the
    first time) and fill the disk with layers, so they run when asked for, with
    RAFTPOINT_IMAGE_TEST=1."""
    if os.environ.get("RAFTPOINT_IMAGE_TEST") != "1":
        pytest.skip("the image tests build and run containers: set RAFTPOINT_IMAGE_TEST=1 to run them")
    for tool in ("podman", "mmdebstrap"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install podman buildah runc mmdebstrap netavark "
                        "aardvark-dns containernetworking-plugins uidmap fuse-overlayfs slirp4netns)")
    podman = Podman(directory)
    try:
        info = podman.run("info", "--format", "{{.Host.OCIRuntime.Name}}", timeout=60, check=False)
    except subprocess.TimeoutExpired:
        pytest.skip("podman info did not answer within 60 s")
    if info.returncode != 0:
        pytest.skip(f"podman cannot run here: {info.stderr.strip()[-300:]}")
    return podman


def base_image_or_skip(podman: Podman, directory: Path) -> str:
    """The tag of the local Debian base, made on first use (about 25 s); a skip when
    Debian's mirror cannot be reached."""
    if podman.run("image", "exists", BASE_TAG, check=False).returncode == 0:
        return BASE_TAG
    rootfs = directory / "base.tar"
    made = subprocess.run(["mmdebstrap", "--variant=minbase", f"--include={BASE_PACKAGES}",
                           "--customize-hook=rm -f \"$1\"/usr/lib/python3*/EXTERNALLY-MANAGED",
                           "bookworm", str(rootfs)], capture_output=True, text=True, timeout=BASE_TIMEOUT_S)
    if made.returncode != 0:
        pytest.skip(f"mmdebstrap could not make a Debian base: {made.stderr.strip()[-300:]}")
    podman.run("import", str(rootfs), BASE_TAG, timeout=BASE_TIMEOUT_S)
    rootfs.unlink()
    return BASE_TAG
