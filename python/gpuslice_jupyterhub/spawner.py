"""GpusliceSpawner: a JupyterHub 3.0 spawner that runs each single-user server as a gpuslice job.

How it maps JupyterHub's Spawner contract onto the daemon's API (docs/api.md):
  start     submits `jupyterhub-singleuser` as the USER (a child process with the user's uid,
            gid and groups makes the POST /v1/jobs, so the daemon's peer-credential check sees
            the user: its trust model is unchanged), in the `interactive` queue by default,
            with the fraction, memory cap and time limit from user_options / the options form;
            then waits for the job to run. The server's environment (API token included)
            travels in the request body on a pipe, never on a command line or in a file.
  options   the admin's presets (`presets`, like KubeSpawner's profile_list: "small: 0.25
            GPU, 10GiB, 8h") and the free fields the admin allows (`free_fields`), read by
            the daemon's own grammar (`gpuslice units`, options.py). A bad value comes back
            on the form next to its field, and as HTTP 400 with the message in the REST API.
  progress  says why the job waits, in plain words, with its place in the queue and, where
            the running jobs' time limits tell, by when there is room (notice.py).
  poll      maps job states: pending/starting/running/stopping -> None (running); ended ->
            its exit status. A daemon that cannot be reached counts as running (a daemon
            restart must not stop servers; like batchspawner's UNKNOWN). While the server
            runs, poll also reads the server's own /api/status and
            /api/kernels?no_track_activity=1 (directly on 127.0.0.1:port, with the server's
            token) and reports that activity to the daemon (POST /v1/jobs/ID/activity, as the
            hub's root), so a silent running cell counts and an idle open tab does not.
  stop      cancels the job (SIGTERM, then SIGKILL after the daemon's grace) and waits for it.
  state     {"job_id": ...}: a restarted hub re-adopts a running server; after gpuslice
            stopped one (idle reclaim, time limit), what happened, which the hub's home page
            and the notebook's banner tell the user (templates/, gpuslice_notice).

The hub runs as root (as with LocalProcessSpawner); each hub user needs a Unix account of the
same name. Only Debian 12's python3 libraries are used: tornado, traitlets, stdlib.
"""

import asyncio
import json
import os
import pwd
import sys

from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from traitlets import Bool, Dict, Float, List, Unicode, default

from jupyterhub.spawner import Spawner
from jupyterhub.utils import random_port

_PKG_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _PKG_PARENT not in sys.path:  # gpuslice_jupyter sits next to this package
    sys.path.insert(0, _PKG_PARENT)
from gpuslice_jupyter import CONFIG_DIR, DATA_DIR, client  # noqa: E402

from . import notice  # noqa: E402
from .options import (FIELDS, OptionError, check_presets, from_form, human_us,  # noqa: E402
                      options_form, read_units, shown)

_ACTIVE = ("pending", "starting", "running", "stopping")


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
    presets = List(
        Dict(), help="Sizes offered on the form, like KubeSpawner's profile_list: dicts with "
                     "'name', optional 'display_name', 'description', 'default', and any of "
                     "'fraction', 'mem', 'time', 'queue', e.g. {'name': 'small', 'fraction': "
                     "'0.25', 'mem': '10GiB', 'time': '8h'}. Users pick one ('preset' in the "
                     "REST body); empty: no presets").tag(config=True)
    free_fields = List(
        Unicode(), default_value=None, allow_none=True,
        help="Which of fraction, mem, time users may set themselves (within min/max_fraction, "
             "max_memory and the queue's limit). None (default): all three without presets, "
             "none with presets").tag(config=True)
    gpuslice_command = Unicode(
        "gpuslice", help="The gpuslice CLI, which reads the options by the daemon's own "
                         "grammar (`gpuslice units`)").tag(config=True)
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
        self.last_end = None  # notice.ended_record of the last server gpuslice ended
        self._progress_text = "Submitting to gpuslice"
        self._activity_error = ""
        self._form_retry = None  # (values, {field: message}) after a refused form

    # ---- state ----

    def get_state(self):
        state = super().get_state()
        if self.job_id:
            state["job_id"] = self.job_id
        if self.last_end:
            state["gpuslice_last_end"] = self.last_end
        return state

    def load_state(self, state):
        super().load_state(state)
        job = str(state.get("job_id", "") or "")
        self.job_id = job if job.isdigit() else ""
        end = state.get("gpuslice_last_end")
        self.last_end = end if isinstance(end, dict) else None

    def clear_state(self):
        # The last end is kept: the hub clears the state when a server stops, and that is when
        # the home page must say why it stopped. A new start forgets it (start()).
        super().clear_state()
        self.job_id = ""

    @property
    def gpuslice_notice(self):
        """{'kind', 'title', 'text'}: why the last server stopped, when gpuslice stopped it (the
        hub's home page shows it, templates/home.html); None otherwise."""
        return notice.ended_notice(self.last_end)

    # ---- options ----

    def free_field_names(self):
        if self.free_fields is None:
            return () if self.presets else FIELDS
        return tuple(f for f in FIELDS if f in self.free_fields)

    def _options_form(self, spawner=None):
        values, errors = self._form_retry or (None, None)
        return options_form(self, values, errors)

    @default("options_from_form")
    def _default_options_from_form(self):
        async def checked(formdata):
            opts = from_form(formdata)
            try:
                await self.resolve_options(opts)
            except OptionError as e:
                # The hub renders the form again with this message; the form puts the values
                # back and the message under the field.
                self._form_retry = (opts, {e.field: str(e)})
                raise ValueError(str(e)) from None
            self._form_retry = None
            return opts
        return checked

    def chosen_queue(self, opts=None, preset=None):
        """The queue of this spawn: `queue`, or the 'queue' option (or the preset's) when
        allowed_queues has it."""
        opts = self.user_options if opts is None else opts
        q = (opts or {}).get("queue") or (preset or {}).get("queue") or self.queue
        if q != self.queue and q not in self.allowed_queues:
            raise OptionError("queue", f"queue {shown(q)} is not offered here (choose from: "
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

    def _preset(self, opts):
        presets = list(self.presets)
        if not presets:
            if opts.get("preset"):
                raise OptionError("preset", f"preset {shown(opts['preset'])} is not offered here "
                                            f"(no presets are defined)")
            return None
        check_presets(presets)
        name = opts.get("preset") or next((p["name"] for p in presets if p.get("default")),
                                          presets[0]["name"])
        for p in presets:
            if p["name"] == name:
                return p
        raise OptionError("preset", f"preset {shown(name)} is not offered here (choose from: "
                                    f"{', '.join(p['name'] for p in presets)})")

    async def resolve_options(self, opts):
        """The queue and the submit fields from `opts` (user_options): the preset's values,
        then the free fields the admin allows, each read by the daemon's grammar and checked
        against this spawner's bounds and the queue's time limit. OptionError names the option
        and the value. Returns (queue, fields)."""
        opts = dict(opts or {})
        free = self.free_field_names()
        known = set(free) | {"queue"} | ({"preset"} if self.presets else set())
        for key in sorted(opts):
            if key in FIELDS and key not in free:
                raise OptionError(key, f"option {key!r} is not offered here" +
                                  (f": choose a preset ({', '.join(p['name'] for p in self.presets)})"
                                   if self.presets else ""))
            if key not in known:
                raise OptionError(None, f"unknown option {shown(key)} (known: "
                                        f"{', '.join(sorted(known)) or 'none'})")
        preset = self._preset(opts)
        queue = self.chosen_queue(opts, preset)
        qinfo = await asyncio.get_running_loop().run_in_executor(None, self._queue_info, queue)
        text = {"fraction": self.default_fraction, "mem": self.default_memory,
                "time": self.default_time}
        for f in FIELDS:
            if preset and preset.get(f):
                text[f] = str(preset[f])
            if f in free and opts.get(f):
                text[f] = str(opts[f])
        text = {f: v for f, v in text.items() if v}
        values = await read_units(self.gpuslice_command, **text)
        if "fraction" in text and "fraction" in free and opts.get("fraction"):
            lo, hi = await read_units(self.gpuslice_command, fraction=self.min_fraction), \
                await read_units(self.gpuslice_command, fraction=self.max_fraction)
            if not lo["fraction"] <= values["fraction"] <= hi["fraction"]:
                raise OptionError("fraction", f"fraction {shown(text['fraction'])} is outside "
                                              f"{self.min_fraction}..{self.max_fraction} allowed here")
        if "mem" in text and "mem" in free and opts.get("mem") and self.max_memory:
            cap = (await read_units(self.gpuslice_command, mem=self.max_memory))["mem"]
            if values["mem"] > cap:
                raise OptionError("mem", f"memory {shown(text['mem'])} is more than {self.max_memory} "
                                         f"allowed here")
        limit_us = int(qinfo.get("time_limit_us") or 0) or int(qinfo.get("max_duration_us") or 0)
        if "time" in text and limit_us and values["time"] > limit_us:
            raise OptionError("time", f"time {shown(text['time'])} is more than queue {queue!r} "
                                      f"allows ({human_us(limit_us)})")
        # The texts the daemon reads again by the same grammar (so nothing is lost in between).
        return queue, text

    # ---- talking to the daemon ----

    async def _call(self, method, path, body=None, timeout=10.0):
        """An API call as the hub's own uid (root): polls, cancels, activity reports."""
        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: client.request(method, path, body, socket_path=self.socket_path,
                                         timeout=timeout))

    def _account(self):
        """The hub user's Unix account. Never uid 0: a hub user named 'root' (or any name that
        maps to uid 0) would otherwise get a server running as root."""
        pw = pwd.getpwnam(self.user.name)
        if pw.pw_uid == 0:
            raise RuntimeError(f"hub user {self.user.name[:64]!r} is uid 0 (root): the gpuslice "
                               f"spawner never starts a server as root; use an ordinary account")
        return pw

    async def _call_as_user(self, method, path, body):
        """An API call made by a child process running as the user (see _as_user.py)."""
        pw = self._account()
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
        try:
            queue, fields = await self.resolve_options(self.user_options)
        except OptionError as e:
            # The REST API answers 400 with the message ("%s": the text is not a format).
            raise web.HTTPError(400, "%s", str(e)) from None
        self.last_end = None  # a new server: the last one's story is told
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
            self._progress_text = (notice.waiting_text(job, queue) if state == "pending"
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
                pct = 20 if text.startswith("Waiting") else 50
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
        # The home page and the notebook's banner say what happened (gpuslice_notice).
        self.last_end = notice.ended_record(job)
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
