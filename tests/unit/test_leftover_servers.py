"""A stack whose owner died leaves servers behind; `localstack down` (stop_leftovers) must
stop every one it recorded, nginx too, which retitles itself ("nginx: master process ...")
so its cmdline no longer reads as the argv that started it. A real nginx, no stand-in."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from localstack.process import PidRecord, cmdline, stop_leftovers

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.skipif(not Path(NGINX).exists(), reason="nginx is not installed (the TLS front's)")
def test_a_leftover_nginx_is_recognised_and_stopped(tmp_path: Path) -> None:
    conf = tmp_path / "nginx.conf"
    conf.write_text(
        f"daemon off;\npid {tmp_path}/nginx.pid;\nerror_log stderr warn;\n"
        "events { worker_connections 16; }\n"
        f"http {{ access_log off; client_body_temp_path {tmp_path}/body; "
        f"proxy_temp_path {tmp_path}/proxy; fastcgi_temp_path {tmp_path}/fcgi; "
        f"uwsgi_temp_path {tmp_path}/uwsgi; scgi_temp_path {tmp_path}/scgi; "
        f"server {{ listen 127.0.0.1:{free_port()}; }} }}\n"
    )
    argv = [NGINX, "-c", str(conf), "-p", str(tmp_path)]
    process = subprocess.Popen(argv, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        # Until nginx has retitled itself (a process just started may show no cmdline yet).
        while "master process" not in (cmdline(process.pid) or "") and process.poll() is None:
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert "master process" in (cmdline(process.pid) or ""), (
            process.poll(),
            process.stderr.read() if process.poll() is not None else b"",
        )
        pids = tmp_path / "pids"
        pids.mkdir()
        PidRecord(process.pid, " ".join(argv)).save(pids / "temporal-tls.pid")
        assert PidRecord(process.pid, " ".join(argv)).alive()
        assert stop_leftovers(pids) == ["temporal-tls"]
        assert process.wait(timeout=20) is not None
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_recycled_pid_is_not_ours() -> None:
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        deadline = time.monotonic() + 20
        while cmdline(sleeper.pid) != "sleep 30" and time.monotonic() < deadline:
            time.sleep(0.05)  # a process just started may show no cmdline yet
        assert not PidRecord(sleeper.pid, "/usr/sbin/nginx -c /elsewhere.conf").alive()
        assert PidRecord(sleeper.pid, "sleep 30").alive()
    finally:
        sleeper.kill()
        sleeper.wait()
