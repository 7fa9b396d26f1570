"""The server half of gpuslice_jupyter (see __init__.py). Runs inside the notebook server."""

import json
import os

from tornado import web
from tornado.ioloop import IOLoop, PeriodicCallback

from notebook.base.handlers import APIHandler
from notebook.utils import url_path_join

from . import client

_JOB_FIELDS = ("id", "state", "reason", "warning", "warning_kind", "warn_deadline_us",
               "deadline_us", "time_limit_us", "queue", "milli", "memory", "start_time_us",
               "end_time_us", "activity_report", "idle_state", "idle_reclaim_mode", "idle_since_us")


def _hub_home():
    """The hub's home page (where the banner finds why a stopped server stopped), or None
    without a hub."""
    if not os.environ.get("JUPYTERHUB_API_TOKEN"):
        return None
    base = os.environ.get("JUPYTERHUB_BASE_URL") or "/"
    return base.rstrip("/") + "/hub/home"


def _socket():
    # JUPYTER_GPUSLICE_SOCKET, not GPUSLICE_SOCKET: `gpuslice submit` does not pass the
    # submitter's GPUSLICE_* variables on to the job.
    return os.environ.get("JUPYTER_GPUSLICE_SOCKET") or client.default_socket()


def _job_id():
    j = os.environ.get("GPUSLICE_JOB_ID", "")
    return j if j.isdigit() else ""


class _Base(APIHandler):
    def initialize(self, state):
        self.gs = state


class StatusHandler(_Base):
    # Polling the banner's status is not use of the notebook: it must not postpone a reclaim.
    _track_activity = False

    async def _idle_window(self, queue):
        """The queue's idle window (µs; None without idle reclaim), asked once: the banner says
        after how long unused the next warning comes."""
        cache = self.gs.setdefault("idle_window", {})
        if queue not in cache:
            try:
                ans = await IOLoop.current().run_in_executor(
                    None, lambda: client.request("GET", "/v1/queues", timeout=5, socket_path=_socket()))
                q = next((x for x in ans.get("queues", []) if x.get("name") == queue), {})
                cache[queue] = q.get("idle_window_us") if q.get("idle_reclaim") else None
            except (client.Unreachable, client.DaemonError):
                return None
        return cache[queue]

    @web.authenticated
    async def get(self):
        job = _job_id()
        out = {"job_id": job or None, "now_us": client.now_us(),
               "poll_seconds": self.gs["poll_seconds"], "error": None, "job": None,
               "hub_home": _hub_home()}
        if not job:
            out["error"] = "not running as a gpuslice job (GPUSLICE_JOB_ID unset)"
        else:
            try:
                ans = await IOLoop.current().run_in_executor(
                    None, lambda: client.request("GET", f"/v1/jobs/{job}", 
                    timeout=5, socket_path=_socket()))
                j = ans.get("job") or {}
                out["job"] = {k: j.get(k) for k in _JOB_FIELDS}
                out["idle_window_us"] = await self._idle_window(j.get("queue"))
            except (client.Unreachable, client.DaemonError) as e:
                out["error"] = str(e)
        self.finish(json.dumps(out))


class KeepHandler(_Base):
    # A click on "Keep my session" is use of the notebook: tracked, and reported now.
    @web.authenticated
    async def post(self):
        job = _job_id()
        if not job:
            raise web.HTTPError(409, "not running as a gpuslice job (GPUSLICE_JOB_ID unset)")
        # Busy: only a busy report may postpone a reclaim (within the queue's busy_max); an
        # idle one, whatever last activity it claims, decides nothing (docs/api.md).
        body = {"source": "jupyter", "busy": True, "last_activity_us": client.now_us()}
        try:
            ans = await IOLoop.current().run_in_executor(
                None, lambda: client.request("POST", f"/v1/jobs/{job}/activity", body, 
                    timeout=5, socket_path=_socket()))
        except client.DaemonError as e:
            self.set_status(502 if e.status >= 500 else 409)
            self.finish(json.dumps({"ok": False, "error": str(e)}))
            return
        except client.Unreachable as e:
            self.set_status(503)
            self.finish(json.dumps({"ok": False, "error": str(e)}))
            return
        j = ans.get("job") or {}
        self.finish(json.dumps({"ok": True, "warning": j.get("warning", "")}))


def _should_report():
    v = os.environ.get("JUPYTER_GPUSLICE_REPORT", "").strip().lower()
    if v in ("1", "true", "yes"):
        return True
    if v in ("0", "false", "no"):
        return False
    # Under JupyterHub the spawner probes the server and reports; without it, we do.
    return not os.environ.get("JUPYTERHUB_API_TOKEN")


def _interval(name, default):
    try:
        v = float(os.environ.get(name, default))
    except ValueError:
        v = default
    return min(max(v, 1.0), 3600.0)


def current_activity(nb_app):
    """The activity body from this server's own kernel manager (what /api/kernels and
    /api/status would say), without a request that would count as activity."""
    km = nb_app.kernel_manager
    kernels = km.list_kernels()
    try:
        last = nb_app.web_app.last_activity()
        last_us = int(last.timestamp() * 1_000_000)
    except Exception:  # an unknown time stays unknown
        last_us = None
    return client.summarise_kernels(kernels, last_us)


def load(nb_app):
    state = {"poll_seconds": _interval("JUPYTER_GPUSLICE_POLL_INTERVAL", 15.0)}
    base = nb_app.web_app.settings["base_url"]
    nb_app.web_app.add_handlers(".*$", [
        (url_path_join(base, "gpuslice/status"), StatusHandler, {"state": state}),
        (url_path_join(base, "gpuslice/keep"), KeepHandler, {"state": state}),
    ])
    job = _job_id()
    if not job or not _should_report():
        nb_app.log.info("gpuslice: status at %sgpuslice/status (activity reported by the hub's "
                        "spawner or not at all)", base)
        return
    warned = {"once": False}

    async def report():
        try:
            body = current_activity(nb_app)
            await IOLoop.current().run_in_executor(
                None, lambda: client.request("POST", f"/v1/jobs/{job}/activity", body, 
                    timeout=5, socket_path=_socket()))
            warned["once"] = False
        except (client.Unreachable, client.DaemonError) as e:
            if not warned["once"]:  # one line per outage, not one per period
                nb_app.log.warning("gpuslice: activity report for job %s failed: %s", job, e)
                warned["once"] = True

    every = _interval("JUPYTER_GPUSLICE_REPORT_INTERVAL", 60.0)
    PeriodicCallback(report, every * 1000).start()
    IOLoop.current().add_callback(report)
    nb_app.log.info("gpuslice: reporting activity of job %s every %gs", job, every)
