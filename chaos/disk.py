"""Real disk faults for a node's data directory: power loss, disk full, slow fsync.

A `LoopDisk` is an ext4 image mounted through a loop device. Faults, all done by the
kernel rather than simulated in our code:

- Power loss: the EXT4_IOC_SHUTDOWN ioctl with EXT4_GOING_FLAGS_NOLOGFLUSH. From then
  on every I/O on the file system fails with EIO and nothing more reaches the image:
  what was not fsynced (or committed by ext4's own journal) is gone. The caller kills
  the processes that used it; `power_cycle()` then unmounts and mounts the image
  again, which shows exactly the state a machine would find after the power came back.
- Disk full: a filler file takes all free space but `leave_bytes`.
- Slow disk: cgroup v1 blkio throttling of writes to the loop device, for chosen
  processes (fsync submits its writes in the caller's context, so it is what slows).

Mounts must never outlive a run or leak into the host: `mount()` refuses to run
outside a private mount namespace (see `private_mount_namespace_argv`), and the loop
device is set up by `mount -o loop`, which detaches it when the file system is
unmounted -- including by the kernel when the namespace's last process exits.
"""
from __future__ import annotations

import errno
import fcntl
import functools
import os
import shutil
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import Iterable

EXT4_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32)
EXT4_GOING_FLAGS_NOLOGFLUSH = 2  # drop the journal's uncommitted transactions too
BLKIO_ROOT = Path("/sys/fs/cgroup/blkio")
FILLER = ".disk-fill"
BLOCK = 4096
TOOLS = ("unshare", "mount", "umount", "losetup", "mkfs.ext4")
UNMOUNT_TIMEOUT_S = 10.0


class DiskFaultError(RuntimeError):
    pass


@functools.cache
def unavailable_reason() -> str | None:
    """Why disk faults cannot run on this machine, or None if they can."""
    if not sys.platform.startswith("linux"):
        return f"disk faults need Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return "disk faults need root (loop devices, mounts, cgroups)"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"missing tools: {', '.join(missing)}"
    if not Path("/dev/loop-control").exists():
        return "no loop device support (/dev/loop-control)"
    if not (BLKIO_ROOT / "blkio.throttle.write_iops_device").exists():
        return f"no cgroup v1 blkio controller with throttling at {BLKIO_ROOT}"
    if _run(["losetup", "--find"], check=False).returncode != 0:
        return "no free loop device"
    if _run(private_mount_namespace_argv(["true"]), check=False).returncode != 0:
        return "cannot create a private mount namespace (unshare --mount)"
    return None


def private_mount_namespace_argv(argv: list[str]) -> list[str]:
    """argv run in a new mount namespace whose mounts never propagate to the host's;
    the kernel drops them (and so the loop devices) when its last process exits."""
    return ["unshare", "--mount", "--propagation", "private", *argv]


def in_private_mount_namespace() -> bool:
    """True if some ancestor process lives in another mount namespace, i.e. ours was
    created below it (pid 1's namespace is not always readable, even for root)."""
    own = os.readlink("/proc/self/ns/mnt")
    pid = os.getppid()
    while pid > 1:
        try:
            if os.readlink(f"/proc/{pid}/ns/mnt") != own:
                return True
            pid = _parent_of(pid)
        except OSError:
            return False
    return False


def _parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[1])


class LoopDisk:
    def __init__(self, image: Path, mountpoint: Path, size_mb: int) -> None:
        self.image = Path(image).resolve()
        self.mountpoint = Path(mountpoint).resolve()
        self.size_mb = size_mb
        self.device: str | None = None  # /dev/loopN while mounted
        self.maj_min: str | None = None  # "7:3" while mounted
        self._cgroup: Path | None = None
        self._home_cgroups: dict[int, Path] = {}  # throttled pid -> the blkio cgroup it came from
        self._ever_mounted = False

    # ---- lifecycle ------------------------------------------------------------------
    def create(self) -> None:
        """A fresh, empty ext4 file system of size_mb (no reserved blocks)."""
        self.image.parent.mkdir(parents=True, exist_ok=True)
        with open(self.image, "wb") as f:
            f.truncate(self.size_mb << 20)
        _run(["mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=0,lazy_journal_init=0", str(self.image)])

    def mount(self) -> None:
        if not in_private_mount_namespace():
            raise DiskFaultError("refusing to mount outside a private mount namespace: "
                                 "run the caller through private_mount_namespace_argv()")
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        self._ever_mounted = True
        _run(["mount", "-t", "ext4", "-o", "loop", str(self.image), str(self.mountpoint)])
        self.maj_min, self.device = _mounted_device(self.mountpoint)

    def unmount(self) -> None:
        """Waits (bounded) for processes that still hold files to let go."""
        if self.device is None:
            return
        end = time.monotonic() + UNMOUNT_TIMEOUT_S
        while (result := _run(["umount", str(self.mountpoint)], check=False)).returncode != 0:
            if time.monotonic() > end:
                raise DiskFaultError(f"umount {self.mountpoint}: {result.stderr.strip()}")
            time.sleep(0.05)
        self.device = self.maj_min = None

    def close(self) -> None:
        """Unthrottle, unmount, detach the loop device, remove the cgroup. Idempotent."""
        self.unthrottle(list(self._home_cgroups))
        if self._cgroup is not None:
            for pid in _cgroup_pids(self._cgroup):  # e.g. children of a throttled process
                _move(pid, BLKIO_ROOT)
            self._cgroup.rmdir()
            self._cgroup = None
        try:
            self.unmount()
        except DiskFaultError:  # a process still holds a file: detach now, free when it exits
            _run(["umount", "--lazy", str(self.mountpoint)], check=False)
            self.device = self.maj_min = None
        if self._ever_mounted:  # the autoclear flag normally detached it already
            for line in _run(["losetup", "--associated", str(self.image)], check=False).stdout.splitlines():
                _run(["losetup", "--detach", line.split(":", 1)[0]], check=False)

    def __enter__(self) -> "LoopDisk":
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # ---- power loss -----------------------------------------------------------------
    def power_cut(self) -> None:
        """From now on the file system fails every I/O and keeps only what was durable."""
        fd = os.open(self.mountpoint, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_NOLOGFLUSH))
        finally:
            os.close(fd)

    def power_cycle(self) -> None:
        """After power_cut() and after the caller killed every process using the disk:
        mount the durable state again."""
        self.unmount()
        self.mount()

    # ---- disk full ------------------------------------------------------------------
    def free_bytes(self) -> int:
        st = os.statvfs(self.mountpoint)
        return st.f_bavail * st.f_frsize

    def fill(self, leave_bytes: int) -> None:
        """Grow a filler file until less than leave_bytes + one block stay free. The
        extents of the filler need metadata blocks too, so a request for all the free
        space fails: allocate in halving steps instead."""
        fd = os.open(self.mountpoint / FILLER, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            size, step = os.fstat(fd).st_size, self.size_mb << 20
            while (excess := self.free_bytes() - leave_bytes) >= BLOCK and step >= BLOCK:
                want = min(step, excess) // BLOCK * BLOCK
                try:
                    os.posix_fallocate(fd, size, want)
                    size += want
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    step = want // 2
            os.fsync(fd)
        finally:
            os.close(fd)

    def unfill(self) -> None:
        (self.mountpoint / FILLER).unlink(missing_ok=True)

    # ---- slow disk ------------------------------------------------------------------
    def throttle(self, pids: Iterable[int], write_bps: int, write_iops: int) -> None:
        """Limit writes of these processes (and children they start later) to this disk."""
        if self.maj_min is None:
            raise DiskFaultError("throttle needs a mounted disk")
        if self._cgroup is None:
            self._cgroup = BLKIO_ROOT / f"raftpoint-disk-{uuid.uuid4().hex[:12]}"
            self._cgroup.mkdir()
        (self._cgroup / "blkio.throttle.write_bps_device").write_text(f"{self.maj_min} {write_bps}")
        (self._cgroup / "blkio.throttle.write_iops_device").write_text(f"{self.maj_min} {write_iops}")
        for pid in pids:
            self._home_cgroups.setdefault(pid, _blkio_cgroup_of(pid))
            _move(pid, self._cgroup)

    def unthrottle(self, pids: Iterable[int]) -> None:
        for pid in pids:
            home = self._home_cgroups.pop(pid, None)
            if home is not None:
                _move(pid, home)


def _run(argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if check and result.returncode != 0:
        raise DiskFaultError(f"{' '.join(argv)}: {result.stderr.strip() or result.returncode}")
    return result


def _mounted_device(mountpoint: Path) -> tuple[str, str]:
    """(MAJ:MIN, source device) of the file system mounted at mountpoint."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == str(mountpoint):
            return fields[2], fields[fields.index("-") + 2]
    raise DiskFaultError(f"{mountpoint} is not a mount point")


def _blkio_cgroup_of(pid: int) -> Path:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "blkio" in controllers.split(","):
            return BLKIO_ROOT / path.lstrip("/")
    return BLKIO_ROOT


def _cgroup_pids(cgroup: Path) -> list[int]:
    return [int(p) for p in (cgroup / "cgroup.procs").read_text().split()]


def _move(pid: int, cgroup: Path) -> None:
    """Move a whole process; one that has exited is simply gone."""
    try:
        (cgroup / "cgroup.procs").write_text(str(pid))
    except ProcessLookupError:
        pass
