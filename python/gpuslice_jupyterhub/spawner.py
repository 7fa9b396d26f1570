"""GpusliceSpawner: a JupyterHub 3.0 spawner that runs each single-user server as a gpuslice job.

How it maps JupyterHub's Spawner contract onto the daemon's API (docs/api.md):
  start     submits `jupyterhub-singleuser` as the USER (a child process with the user's uid,
            gid and groups makes the POST /v1/jobs, so the daemon's peer-credential check sees
            the user: its trust model is unchanged), in the `interactive` queue by default,
            with the fraction, memory cap and time limit from user_options / the options form;
            then waits for the job to run. The server's environment (API token included)
            travels in the request body on a pipe, never on a command line or in a file.
  progress  says why the job waits: the daemon's pending_reason ("pending in interactive: no
            GPU with 250m and 20GiB free").
  poll      maps job states: pending/starting/running/stopping -> None (running); ended ->
            its exit status. A daemon that cannot be reached counts as running (a daemon
            restart must not stop servers; like batchspawner's UNKNOWN). While the server
            runs, poll also reads the server's own /api/status and
            /api/kernels?no_track_activity=1 (directly on 127.0.0.1:port, with the server's
            token) and reports that activity to the daemon (POST /v1/jobs/ID/activity, as the
            hub's root), so a silent running cell counts and an idle open tab does not.
  stop      cancels the job (SIGTERM, then SIGKILL after the daemon's grace) and waits for it.
  state     {"job_id": ...}: a restarted hub re-adopts a running server.

The hub runs as root (as with LocalProcessSpawner); each hub user needs a Unix account of the
same name. Only Debian 12's python3 libraries are used: tornado, traitlets, stdlib.
"""

import asyncio
import html
import json
import os
import pwd
import re
import sys

from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from traitlets import Bool, Float, List, Unicode, default

from jupyterhub.spawner import Spawner
from jupyterhub.utils import random_port

_PKG_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _PKG_PARENT not in sys.path:  # gpuslice_jupyter sits next to this package
    sys.path.insert(0, _PKG_PARENT)
from gpuslice_jupyter import CONFIG_DIR, DATA_DIR, client  # noqa: E402

_ACTIVE = ("pending", "starting", "running", "stopping")
_MAX_OPTION_LEN = 32

# ---- option parsing: the daemon's own units (docs/config.md), checked before submitting ----

_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
          "kb": 1000, "mb": 1000 ** 2, "gb": 1000 ** 3, "tb": 1000 ** 4}
_DUR = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _shown(value):
    text = str(value)
    return repr(text[:_MAX_OPTION_LEN] + ("..." if len(text) > _MAX_OPTION_LEN else ""))


def parse_fraction(text):
    """'0.25' or '250m' -> milli-GPU (1..1000); ValueError naming the value otherwise."""
    t = str(text).strip()
    m = re.fullmatch(r"(\d{1,4})m", t)
    if m:
        milli = int(m.group(1))
    elif re.fullmatch(r"(0|1)?(\.\d{1,3})?", t) and t not in ("", "."):
        milli = round(float(t) * 1000)
    else:
        raise ValueError(f"fraction {_shown(text)} is not a share of one GPU like '0.25' or '250m'")
    if not 1 <= milli <= 1000:
        raise ValueError(f"fraction {_shown(text)} must be more than 0 and at most one GPU")
    return milli


def parse_bytes(text):
    """'10GiB', '512MiB', '0' -> bytes."""
    t = str(text).strip()
    m = re.fullmatch(r"(\d{1,15})\s*([a-zA-Z]{0,3})", t)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"memory {_shown(text)} is not an amount like '10GiB' or '512MiB'")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def parse_duration(text):
    """'1h30m', '90s', '2h' -> seconds (at least 1)."""
    t = str(text).strip()
    parts = re.findall(r"(\d{1,7})([smhd])", t)
    if not t or "".join(n + u for n, u in parts) != t:
        raise ValueError(f"time {_shown(text)} is not a duration like '2h', '90m' or '1h30m'")
    seconds = sum(int(n) * _DUR[u] for n, u in parts)
    if seconds < 1:
        raise ValueError(f"time {_shown(text)} must be at least one second")
    return seconds


def _human_seconds(s):
    if s % 3600 == 0:
        return f"{s // 3600}h"
    if s % 60 == 0:
        return f"{s // 60}m"
    return f"{s}s"


class GpusliceSpawner(Spawner):
    """Runs the user's server as a gpuslice job of the user (see the module docstring)."""

    socket_path = Unicode(
        help="The gpuslice daemon's Unix socket (default: $GPUSLICE_SOCKET, else "
             "/run/gpuslice/gpuslice.sock, as the CLI)").tag(config=True)

    @default("socket_path")
    def _default_socket(self):
        return client.default_socket()

    queue = Unicode("interactive", help="gpuslice queue of the servers").tag(config=True)
    allowed_queues = List(
        Unicode(), help="Other queues a user may choose with the 'queue' option (e.g. one "
                        "with reclaim = \"on-demand\"); empty: only `queue`").tag(config=True)
    kind = Unicode("", help="Slice kind (shared, mps); empty: the queue's default").tag(config=True)
    default_fraction = Unicode(
        "", help="Share of a GPU when the user asks for none (e.g. '0.25'); empty: the "
                 "queue's default_gpu").tag(config=True)
    default_memory = Unicode(
        "", help="Memory cap when the user asks for none (e.g. '10GiB'); empty: the "
                 "queue's default (proportional to the share)").tag(config=True)
    default_time = Unicode(
        "", help="Time limit when the user asks for none (e.g. '4h'); empty: the queue's "
                 "time_limit").tag(config=True)
    min_fraction = Unicode("50m", help="Smallest share a user may ask for").tag(config=True)
    max_fraction = Unicode("1", help="Largest share a user may ask for").tag(config=True)
    max_memory = Unicode("", help="Largest memory cap a user may ask for; empty: any the "
                                  "daemon accepts").tag(config=True)
    report_activity = Bool(
        True, help="Report the server's own kernel activity to gpuslice on every poll "
                   "(POST /v1/jobs/ID/activity), so the idle policy sees notebook use").tag(config=True)
    notebook_extension = Bool(
        True, help="Load gpuslice_jupyter (the warning banner) into the server, from "
                   "gpuslice's directory: nothing is installed for the user").tag(config=True)
    stop_wait = Float(30.0, help="Seconds stop() waits for the job to end").tag(config=True)
    submit_python = Unicode(
        "/usr/bin/python3",
        help="Python that runs the submit helper as the user (Debian's)").tag(config=True)

    @default("cmd")
    def _default_cmd(self):
        return ["jupyterhub-singleuser"]

    @default("ip")
    def _default_ip(self):
        return "127.0.0.1"

    @default("start_timeout")
    def _default_start_timeout(self):
        return 300  # a server may queue for capacity; progress() says why

    @default("options_form")
    def _default_options_form(self):
        return self._options_form

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.job_id = ""
        self._progress_text = "Submitting to gpuslice"
        self._activity_error = ""

    # ---- state ----

    def get_state(self):
        state = super().get_state()
        if self.job_id:
            state["job_id"] = self.job_id
        return state

    def load_state(self, state):
        super().load_state(state)
        job = str(state.get("job_id", "") or "")
        self.job_id = job if job.isdigit() else ""

    def clear_state(self):
        super().clear_state()
        self.job_id = ""

    # ---- options ----

    def _options_form(self, spawner=None):
        def field(name, label, value, hint):
            return (f'<div class="form-group"><label for="gs-{name}">{html.escape(label)}</label>'
                    f'<input class="form-control" id="gs-{name}" name="{name}" '
                    f'value="{html.escape(value)}" placeholder="{html.escape(hint)}"></div>')
        queues = ""
        if self.allowed_queues:
            opts = "".join(f'<option value="{html.escape(q)}">{html.escape(q)}</option>'
                           for q in [self.queue] + list(self.allowed_queues))
            queues = (f'<div class="form-group"><label for="gs-queue">gpuslice queue</label>'
                      f'<select class="form-control" id="gs-queue" name="queue">{opts}</select></div>')
        return queues + "".join([
            field("fraction", f"Share of a GPU ({self.min_fraction} to {self.max_fraction})",
                  self.default_fraction, "e.g. 0.25 or 250m"),
            field("mem", "GPU memory cap" + (f" (at most {self.max_memory})" if self.max_memory else ""),
                  self.default_memory, "e.g. 10GiB; empty: in proportion to the share"),
            field("time", "Time limit", self.default_time, "e.g. 4h; empty: the queue's limit"),
        ])

    @default("options_from_form")
    def _default_options_from_form(self):
        def from_form(formdata):
            out = {}
            for key in ("fraction", "mem", "time", "queue"):
                v = formdata.get(key, [""])
                v = v[0] if isinstance(v, list) and v else v
                if isinstance(v, bytes):
                    v = v.decode("utf-8", "replace")
                if isinstance(v, str) and v.strip():
                    out[key] = v.strip()
            return out
        return from_form

    def chosen_queue(self):
        """The queue of this spawn: `queue`, or the 'queue' option when allowed_queues has it."""
        q = (self.user_options or {}).get("queue") or self.queue
        if q != self.queue and q not in self.allowed_queues:
            raise ValueError(f"queue {_shown(q)} is not offered here (choose from: "
                             f"{', '.join([self.queue] + list(self.allowed_queues))})")
        return q

    def _queue_info(self, queue):
        try:
            ans = client.request("GET", "/v1/queues", socket_path=self.socket_path)
        except client.Unreachable as e:
            raise RuntimeError(f"gpuslice is not reachable: {e}") from None
        for q in ans.get("queues", []):
            if q.get("name") == queue:
                return q
        raise RuntimeError(f"gpuslice has no queue {queue!r} (GpusliceSpawner.queue)")

    def validated_options(self, queue_info):
        """The submit fields from user_options, checked against this spawner's bounds and the
        queue's time limit. ValueError names the option and the value."""
        opts = dict(self.user_options or {})
        unknown = sorted(set(opts) - {"fraction", "mem", "time", "queue"})
        if unknown:
            raise ValueError(f"unknown option {_shown(unknown[0])} (known: fraction, mem, time"
                             f"{', queue' if self.allowed_queues else ''})")
        fields = {}
        frac = opts.get("fraction") or self.default_fraction
        if frac:
            milli = parse_fraction(frac)
            lo, hi = parse_fraction(self.min_fraction), parse_fraction(self.max_fraction)
            if not lo <= milli <= hi:
                raise ValueError(f"fraction {_shown(frac)} is outside {self.min_fraction}.."
                                 f"{self.max_fraction} allowed here")
            fields["fraction"] = f"{milli}m"
        mem = opts.get("mem") or self.default_memory
        if mem:
            b = parse_bytes(mem)
            if self.max_memory and b > parse_bytes(self.max_memory):
                raise ValueError(f"memory {_shown(mem)} is more than {self.max_memory} allowed here")
            fields["mem"] = str(mem).strip()
        t = opts.get("time") or self.default_time
        if t:
            sec = parse_duration(t)
            limit_us = int(queue_info.get("time_limit_us") or 0)
            if limit_us and sec * 1_000_000 > limit_us:
                raise ValueError(f"time {_shown(t)} is more than queue {queue_info.get('name')!r} allows "
                                 f"({_human_seconds(limit_us // 1_000_000)})")
            fields["time"] = f"{sec}s"
        return fields

    # ---- talking to the daemon ----

    async def _call(self, method, path, body=None, timeout=10.0):
        """An API call as the hub's own uid (root): polls, cancels, activity reports."""
        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: client.request(method, path, body, socket_path=self.socket_path,
                                         timeout=timeout))

    async def _call_as_user(self, method, path, body):
        """An API call made by a child process running as the user (see _as_user.py)."""
        pw = pwd.getpwnam(self.user.name)
        req = json.dumps({"method": method, "path": path, "body": body,
                          "socket": self.socket_path}).encode()
        kwargs = {}
        if os.geteuid() == 0:
            kwargs = {"user": pw.pw_uid, "group": pw.pw_gid,
                      "extra_groups": os.getgrouplist(pw.pw_name, pw.pw_gid)}
        elif os.geteuid() != pw.pw_uid:
            raise RuntimeError(f"the hub runs as uid {os.geteuid()}, not root: it cannot start "
                               f"servers for {self.user.name} (uid {pw.pw_uid})")
        helper = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_as_user.py")
        proc = await asyncio.create_subprocess_exec(
            self.submit_python, "-I", helper, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd="/",
            env={"LANG": "C.UTF-8"}, **kwargs)
        out, err = await proc.communicate(req)
        try:
            ans = json.loads(out.decode("utf-8", "replace"))
        except ValueError:
            raise RuntimeError(f"gpuslice submit helper failed (exit {proc.returncode}): "
                               f"{err.decode('utf-8', 'replace')[-500:]}") from None
        if not ans.get("ok"):
            raise client.DaemonError(ans.get("status", 500), ans.get("code", "INTERNAL"),
                                     ans.get("message", ""))
        return ans["answer"]

    # ---- the environment of the server ----

    def get_env(self):
        env = super().get_env()
        # Debian 12's jupyterhub-singleuser would pick jupyter_server's ServerApp, which has no
        # frontend there (404 on /tree); the classic notebook is what Debian ships.
        env.setdefault("JUPYTERHUB_SINGLEUSER_APP", "notebook.notebookapp.NotebookApp")
        env["JUPYTER_GPUSLICE_SOCKET"] = self.socket_path  # for the banner's extension
        if self.notebook_extension:
            def prepend(name, value):
                old = env.get(name, "")
                env[name] = value + (os.pathsep + old if old else "")
            prepend("PYTHONPATH", _PKG_PARENT)
            prepend("JUPYTER_CONFIG_PATH", CONFIG_DIR)
            prepend("JUPYTER_PATH", DATA_DIR)
        return env

    # ---- the Spawner contract ----

    async def start(self):
        try:
            pw = pwd.getpwnam(self.user.name)
        except KeyError:
            raise RuntimeError(f"no Unix user {self.user.name!r}: each hub user needs an "
                               f"account of the same name") from None
        queue = self.chosen_queue()  # ValueError: the hub shows it to the user
        qinfo = await asyncio.get_running_loop().run_in_executor(None, self._queue_info, queue)
        fields = self.validated_options(qinfo)
        self.port = random_port()
        env = self.get_env()  # after the port: JUPYTERHUB_SERVICE_URL carries it
        body = {"argv": self.cmd + self.get_args(), "queue": queue, "env": env,
                "cwd": pw.pw_dir, **fields}
        if self.kind:
            body["kind"] = self.kind
        self._progress_text = f"Submitting to gpuslice queue {queue}"
        try:
            ans = await self._call_as_user("POST", "/v1/jobs", body)
        except client.DaemonError as e:
            raise RuntimeError(f"gpuslice refused the server: {e.message or e.code}") from None
        job = ans["job"]
        self.job_id = str(job["id"])
        self.log.info("gpuslice job %s for %s: queue %s, %s milli-GPU, memory %s", self.job_id,
                      self.user.name, job.get("queue"), job.get("milli"), job.get("memory"))
        while True:
            state = job.get("state")
            if state == "running":
                return (self.ip, self.port)
            if state not in _ACTIVE or state == "stopping":
                why = job.get("reason") or state
                raise RuntimeError(f"gpuslice job {self.job_id} ended before the server started "
                                   f"({state}: {why}); see `gpuslice logs {self.job_id}`")
            pr = job.get("pending_reason") or {}
            self._progress_text = (pr.get("text") if state == "pending" and pr.get("text")
                                   else f"gpuslice job {self.job_id} is {state}")
            await asyncio.sleep(0.5)
            try:
                job = (await self._call("GET", f"/v1/jobs/{self.job_id}"))["job"]
            except client.Unreachable as e:
                self._progress_text = f"gpuslice is not reachable; still waiting ({e})"

    async def progress(self):
        last = None
        while self._spawn_pending:
            text = self._progress_text
            if text != last:
                last = text
                pct = 20 if text.startswith("pending") else 50
                yield {"progress": pct, "message": text}
            await asyncio.sleep(1)

    async def poll(self):
        if not self.job_id:
            return 0
        try:
            job = (await self._call("GET", f"/v1/jobs/{self.job_id}"))["job"]
        except client.Unreachable as e:
            # A daemon restart or outage is not the server's end (batchspawner's UNKNOWN).
            self.log.warning("gpuslice unreachable while polling job %s: %s", self.job_id, e)
            return None
        except client.DaemonError as e:
            if e.code == "NOT_FOUND":
                self.log.warning("gpuslice does not know job %s any more", self.job_id)
                return 0
            self.log.warning("gpuslice answered %s while polling job %s", e, self.job_id)
            return None
        state = job.get("state")
        if state in _ACTIVE:
            if state == "running" and self.report_activity:
                await self._report_activity()
            return None
        self.log.info("gpuslice job %s of %s ended: %s %s", self.job_id, self.user.name, state,
                      job.get("reason") or "")
        if isinstance(job.get("exit_code"), int):
            return job["exit_code"]
        if isinstance(job.get("exit_signal"), int):
            return 128 + job["exit_signal"]
        return 0 if state == "succeeded" else 1

    async def _report_activity(self):
        """Reads the server's own activity (not the hub's last_activity, which an open tab keeps
        fresh and a silent cell leaves stale) and reports it to the daemon. Failures are
        logged once per cause: with no reports the daemon falls back to its GPU-only rule."""
        if not self.port or not self.server or not self.api_token:
            return
        base = f"http://127.0.0.1:{self.port}{self.server.base_url}"
        headers = {"Authorization": f"token {self.api_token}"}
        http = AsyncHTTPClient()
        try:
            status = json.loads((await http.fetch(HTTPRequest(
                base + "api/status", headers=headers, request_timeout=5))).body)
            kernels = json.loads((await http.fetch(HTTPRequest(
                base + "api/kernels?no_track_activity=1", headers=headers,
                request_timeout=5))).body)
            if not isinstance(kernels, list) or not isinstance(status, dict):
                raise ValueError("unexpected answer shape")
            body = client.summarise_kernels(kernels, client.iso_to_us(status.get("last_activity")),
                                            status.get("connections"))
            await self._call("POST", f"/v1/jobs/{self.job_id}/activity", body, timeout=5)
            self._activity_error = ""
        except Exception as e:  # the server starting or stopping, or an older daemon
            msg = f"{type(e).__name__}: {e}"
            if msg != self._activity_error:
                self._activity_error = msg
                self.log.warning("gpuslice activity report for job %s (%s) failed: %s",
                                 self.job_id, self.user.name, msg)

    async def stop(self, now=False):
        if not self.job_id:
            return
        try:
            await self._call("POST", f"/v1/jobs/{self.job_id}/cancel")
        except client.DaemonError as e:
            if e.code not in ("FAILED_PRECONDITION", "NOT_FOUND"):  # already ended / gone
                raise RuntimeError(f"gpuslice could not cancel job {self.job_id}: {e}") from None
            return
        except client.Unreachable as e:
            raise RuntimeError(f"gpuslice unreachable; job {self.job_id} not cancelled: {e}") from None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.stop_wait
        while loop.time() < deadline:
            try:
                job = (await self._call("GET", f"/v1/jobs/{self.job_id}"))["job"]
                if job.get("state") not in _ACTIVE:
                    return
            except (client.Unreachable, client.DaemonError):
                pass
            await asyncio.sleep(0.3)
        self.log.warning("gpuslice job %s still stopping after %ss", self.job_id, self.stop_wait)
