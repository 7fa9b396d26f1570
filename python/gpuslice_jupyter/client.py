"""A small client for the gpuslice daemon's HTTP/JSON API over its Unix socket (stdlib only).

Shared by the JupyterHub spawner (gpuslice_jupyterhub, run by the hub) and the notebook
server extension (gpuslice_jupyter, run inside the user's server). Identity on the socket is
the caller's uid as the kernel reports it (SO_PEERCRED): nothing sent here can claim another
user, so whoever calls this acts as the process's own uid.

Blocking calls with a timeout; async callers run them in an executor.
"""

import datetime
import http.client
import json
import os
import socket
import time

__all__ = ["DEFAULT_SOCKET", "DaemonError", "Unreachable", "request", "now_us",
           "iso_to_us", "summarise_kernels"]

DEFAULT_SOCKET = "/run/gpuslice/gpuslice.sock"


def default_socket():
    """$GPUSLICE_SOCKET, else the CLI's default (the same rule as `gpuslice`)."""
    return os.environ.get("GPUSLICE_SOCKET") or DEFAULT_SOCKET


class DaemonError(Exception):
    """The daemon answered with an error object: code (e.g. NOT_FOUND), HTTP status, message."""

    def __init__(self, status, code, message):
        super().__init__(f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message


class Unreachable(Exception):
    """The daemon could not be reached (socket missing, refused, timed out): transient."""


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self._path)
        except OSError:
            s.close()
            raise
        self.sock = s


def request(method, path, body=None, socket_path=None, timeout=10.0):
    """One API call; returns the decoded JSON answer.

    Raises Unreachable when the daemon cannot be reached or answers garbage, DaemonError
    when it answers an error object.
    """
    sp = socket_path or default_socket()
    conn = _UnixConnection(sp, timeout)
    try:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
        status = resp.status
    except (OSError, http.client.HTTPException) as e:
        raise Unreachable(f"gpuslice daemon at {sp} unreachable: {e}") from e
    finally:
        conn.close()
    try:
        answer = json.loads(raw.decode("utf-8", "replace")) if raw else {}
    except ValueError as e:
        raise Unreachable(f"gpuslice daemon at {sp} answered {status} with non-JSON") from e
    if status >= 400:
        err = answer.get("error", {}) if isinstance(answer, dict) else {}
        raise DaemonError(status, err.get("code", str(status)), err.get("message", ""))
    return answer


def now_us():
    return time.time_ns() // 1000


def iso_to_us(text):
    """Jupyter's ISO 8601 time ('2026-12-01T11:00:00.123456Z') -> µs since the epoch; None if
    absent or not a time (unknown stays unknown, never 0)."""
    if not text or not isinstance(text, str):
        return None
    t = text.strip()
    if t.endswith("Z"):
        t = t[:-1] + "+00:00"
    try:
        d = datetime.datetime.fromisoformat(t)
    except ValueError:
        return None
    if d.tzinfo is None:
        d = d.replace(tzinfo=datetime.timezone.utc)
    return int(d.timestamp() * 1_000_000)


def summarise_kernels(kernels, server_last_activity_us, connections=None):
    """The activity body for POST /v1/jobs/ID/activity from a list of kernel models
    ({execution_state, last_activity, connections}) and the server's own last activity.

    busy: some kernel is executing (a silent long cell is busy, though its last_activity stays
    at the cell's start). last_activity_us: the latest of the server's and the kernels' times,
    left out when none is known.
    """
    busy = any(isinstance(k, dict) and k.get("execution_state") == "busy" for k in kernels)
    times = [server_last_activity_us] if server_last_activity_us else []
    conns = 0
    for k in kernels:
        if not isinstance(k, dict):
            continue
        t = iso_to_us(k.get("last_activity"))
        if t:
            times.append(t)
        c = k.get("connections")
        if isinstance(c, int) and c > 0:
            conns += c
    body = {"source": "jupyter", "busy": busy, "kernels": len(kernels),
            "connections": connections if isinstance(connections, int) else conns}
    if times:
        body["last_activity_us"] = max(times)
    return body
