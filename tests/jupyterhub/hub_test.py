"""JupyterHub on gpuslice, end to end (started by run.sh, which made the users and GS_TEST_DIR).

Real parts only: `gpuslice serve --simulate 1xH100-80GB` (the GPU is the one fake, scripted
through --simulate-script), Debian's JupyterHub 3.0 + configurable-http-proxy, the classic
notebook as each user's server, headless Chromium (testing/browser/notebook_banner.js).
Cases (docs/notebooks.md, reference section 7): T1 spawn, T2 queued, T3 idle reclaim (with
an idle websocket open: T5), T4 a silent long cell keeps the session, T6 a busy GPU keeps it,
T7 hub restart re-adopts, T8 user stop cancels, T9 time limit; plus the banner in Chromium.
Two users run their cases in parallel to keep the wall time down.
"""

import asyncio
import json
import os
import pwd
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback

import requests

D = os.environ["GS_TEST_DIR"]
BIN = os.environ["GS_BIN"]
SRC = os.environ["GS_SRC"]
PY = os.environ.get("GS_PY", os.path.join(SRC, "python"))  # the users import gpuslice from here
ART = os.environ["GS_ART"]
U1, U2 = os.environ["GS_USERS"].split()
sys.path.insert(0, PY)
from gpuslice_jupyter import client  # noqa: E402

SOCK = os.path.join(D, "gs.sock")
SCRIPT = os.path.join(D, "script.json")
# Short windows; a case keeps its job's GPU scripted busy while it sets up (spawn_busy), as a
# server takes ~15 s to start on a loaded 2-core machine.
WINDOW, GRACE, POLL = 15, 8, 2
PASSWORD = "testpw"
TOKEN = secrets.token_hex(32)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PROXY, PROXY_API, HUB = free_port(), free_port(), free_port()
HUB_API = f"http://127.0.0.1:{HUB}/hub/api"
PROXY_URL = f"http://127.0.0.1:{PROXY}"
_pids_lock = threading.Lock()
_log_lock = threading.Lock()


def log(*a):
    with _log_lock:
        print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


def record_pid(pid):
    with _pids_lock, open(os.path.join(D, "pids"), "a") as f:
        f.write(f"{pid}\n")


def has_activity_api():
    """Whether this gpuslice has `POST /v1/jobs/ID/activity` (its CLI lists `activity`)."""
    r = subprocess.run([BIN, "--help"], capture_output=True, text=True)
    return any(line.split()[:1] == ["activity"] for line in r.stdout.splitlines())


ACTIVITY = has_activity_api()

# ---- the daemon ----

_script = {"jobs": {}}
_script_lock = threading.Lock()


def script_job(job_id, sm):
    with _script_lock:
        if sm is None:
            _script["jobs"].pop(str(job_id), None)
        else:
            _script["jobs"][str(job_id)] = {"sm": sm}
        tmp = SCRIPT + ".tmp"
        with open(tmp, "w") as f:
            json.dump(_script, f)
        os.rename(tmp, SCRIPT)


def daemon_config():
    idle_extra = ""
    signals = '["sm", "memory"]'
    ondemand = ""
    if ACTIVITY:
        # GS_GPU_ONLY=1 leaves the Jupyter signal out (the old GPU-only rule): T4 must fail then.
        if not os.environ.get("GS_GPU_ONLY"):
            signals = '["sm", "memory", "jupyter"]'
        # report_stale: the spawner reports on every hub poll (POLL s); production polls every
        # 30 s against a 10 min staleness. 8 polls of slack here, as a poll cycle (two fetches
        # from the server, one POST) can stall for seconds on a loaded 2-core machine.
        # T4 still fails under the GPU-only rule (GS_GPU_ONLY), which ignores reports.
        idle_extra = 'busy_is_active = true\nbusy_max = "5m"\nreport_stale = "16s"\n'
        # The same queue, but an idle slice is reclaimed only when a waiting job needs it.
        ondemand = f"""
[queues.ondemand]
kinds = ["shared"]
default_kind = "shared"
default_gpu = "250m"
time_limit = "1h"
priority = 10
[queues.ondemand.idle]
enabled = true
threshold = 5
window = "{WINDOW}s"
grace = "{GRACE}s"
signals = {signals}
{idle_extra}reclaim = "on-demand"
"""
    return f"""default_queue = "interactive"
[queues.interactive]
kinds = ["shared"]
default_kind = "shared"
default_gpu = "250m"
time_limit = "1h"
warn_before = "8s"
[queues.interactive.idle]
enabled = true
threshold = 5
window = "{WINDOW}s"
grace = "{GRACE}s"
signals = {signals}
{idle_extra}
[queues.training]
kinds = ["whole"]
default_gpus = 1
[queues.training.idle]
enabled = false
""" + ondemand


DAEMON = [None]


def start_daemon(fresh_script=True):
    cfg = os.path.join(D, "gs.toml")
    with open(cfg, "w") as f:
        f.write(daemon_config())
    if fresh_script:
        script_job(0, None)
    logf = open(os.path.join(D, "daemon.log"), "a")
    p = subprocess.Popen([BIN, "serve", "--simulate", "1xH100-80GB", "--config", cfg,
                          "--simulate-script", SCRIPT, "--grace", "3s", "--socket", SOCK,
                          "--state-dir", os.path.join(D, "gs")], stdout=logf, stderr=logf)
    record_pid(p.pid)
    try:
        wait_for(lambda: check(p.poll() is None, "the daemon exited") or
                 (os.path.exists(SOCK) and dget("/v1/health")), 20, "daemon up")
    except AssertionError:
        print(open(os.path.join(D, "daemon.log")).read())
        raise
    return p


def dget(path):
    try:
        return client.request("GET", path, socket_path=SOCK)
    except client.Unreachable:
        return None


def dpost(path, body=None):
    return client.request("POST", path, body or {}, socket_path=SOCK)


def job(job_id):
    return dget(f"/v1/jobs/{job_id}")["job"]


def events(job_id):
    return dget(f"/v1/events?job={job_id}&limit=1000")["events"]


def user_jobs(user, state="active"):
    return dget(f"/v1/jobs?user={user}&state={state}")["jobs"]


# ---- the hub ----

class Hub:
    def __init__(self):
        self.proc = None

    def config(self):
        return f"""
c = get_config()  # noqa
D = {D!r}
c.JupyterHub.ip = '127.0.0.1'
c.JupyterHub.port = {PROXY}
c.JupyterHub.hub_ip = '127.0.0.1'
c.JupyterHub.hub_port = {HUB}
c.ConfigurableHTTPProxy.api_url = 'http://127.0.0.1:{PROXY_API}'
c.ConfigurableHTTPProxy.pid_file = D + '/chp.pid'
c.JupyterHub.db_url = 'sqlite:///' + D + '/jupyterhub.sqlite'
c.JupyterHub.cookie_secret_file = D + '/cookie'
c.JupyterHub.pid_file = D + '/hub.pid'
c.JupyterHub.authenticator_class = 'dummy'
c.DummyAuthenticator.password = {PASSWORD!r}
c.Authenticator.allowed_users = {{{U1!r}, {U2!r}}}
c.JupyterHub.spawner_class = 'gpuslice_jupyterhub.GpusliceSpawner'
c.GpusliceSpawner.socket_path = {SOCK!r}
c.GpusliceSpawner.gpuslice_command = {BIN!r}
c.GpusliceSpawner.max_memory = '40GiB'
c.GpusliceSpawner.allowed_queues = ['ondemand']
# Presets, and every field free as well (the admin allows it): the cases below ask for sizes.
c.GpusliceSpawner.presets = [
    {{'name': 'small', 'display_name': 'Small', 'fraction': '0.25', 'mem': '10GiB', 'description': 'notebooks'}},
    {{'name': 'half', 'display_name': 'Half a GPU', 'fraction': '0.5', 'mem': '20GiB', 'time': '30m'}}]
c.GpusliceSpawner.free_fields = ['fraction', 'mem', 'time']
import gpuslice_jupyterhub
c.JupyterHub.template_paths = [gpuslice_jupyterhub.TEMPLATE_DIR]
c.Spawner.poll_interval = {POLL}
c.Spawner.http_timeout = 60
c.JupyterHub.cleanup_servers = False
c.JupyterHub.last_activity_interval = 10
c.JupyterHub.tornado_settings = {{'slow_spawn_timeout': 3}}
c.Spawner.environment = {{'PATH': '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
                          'JUPYTERHUB_ACTIVITY_INTERVAL': '10',
                          'JUPYTER_GPUSLICE_POLL_INTERVAL': '1'}}
c.JupyterHub.services = [{{'name': 'gpuslice-test', 'api_token': {TOKEN!r}}}]
c.JupyterHub.load_roles = [{{'name': 'gpuslice-test', 'services': ['gpuslice-test'],
    'scopes': ['list:users', 'read:users', 'read:users:activity', 'read:servers', 'servers',
               'admin:users', 'tokens', 'access:servers', 'admin:server_state']}}]
"""

    def start(self):
        path = os.path.join(D, "jupyterhub_config.py")
        with open(path, "w") as f:
            f.write(self.config())
        env = dict(os.environ, NODE_PATH="/usr/share/nodejs:/usr/lib/nodejs",
                   PYTHONPATH=PY)
        logf = open(os.path.join(D, "hub.log"), "a")
        self.proc = subprocess.Popen(["jupyterhub", "-f", path], cwd=D, env=env,
                                     stdout=logf, stderr=logf)
        record_pid(self.proc.pid)
        try:
            wait_for(lambda: self._up(), 60, "hub up")
        except AssertionError:
            print(open(os.path.join(D, "hub.log")).read()[-5000:])
            raise

    def _up(self):
        try:
            return requests.get(HUB_API + "/", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)

    def api(self, method, path, **kw):
        kw.setdefault("timeout", 30)
        return requests.request(method, HUB_API + path,
                                headers={"Authorization": f"token {TOKEN}"}, **kw)


HUBP = Hub()


def wait_for(fn, timeout, what, every=0.5):
    end = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def server_model(user):
    r = HUBP.api("GET", f"/users/{user}")
    r.raise_for_status()
    return r.json().get("servers", {}).get("")


def user_token(user):
    r = HUBP.api("POST", f"/users/{user}/tokens", json={"expires_in": 3600})
    check(r.status_code == 201, f"token for {user}: {r.status_code} {r.text}")
    return r.json()["token"]


def spawn(user, options=None, expect_ready=True):
    """POST the server; returns (status code, seconds until ready or None)."""
    t0 = time.monotonic()
    r = HUBP.api("POST", f"/users/{user}/server", json=options or {})
    if not expect_ready:
        return r, None
    check(r.status_code in (201, 202), f"spawn {user}: {r.status_code} {r.text}")
    wait_for(lambda: (server_model(user) or {}).get("ready"), 90, f"{user}'s server ready")
    return r, time.monotonic() - t0


def spawn_busy(user, options=None):
    """Spawns with the job's GPU scripted busy from its first second, so that a slow start on a
    loaded machine cannot run into the idle window; the case makes it idle when it is ready.
    Returns (hub answer, seconds until ready, job)."""
    t0 = time.monotonic()
    r = HUBP.api("POST", f"/users/{user}/server", json=options or {})
    check(r.status_code in (201, 202), f"spawn {user}: {r.status_code} {r.text}")
    j = wait_for(lambda: (user_jobs(user) or [None])[0], 20, f"{user}'s job submitted")
    script_job(j["id"], 80)
    wait_for(lambda: (server_model(user) or {}).get("ready"), 90, f"{user}'s server ready")
    return r, time.monotonic() - t0, j


def wait_stopped(user, timeout):
    wait_for(lambda: server_model(user) is None, timeout, f"hub shows {user}'s server stopped")


def via_proxy(user, token, method, path, **kw):
    kw.setdefault("timeout", 15)
    return requests.request(method, f"{PROXY_URL}/user/{user}/{path}",
                            headers={"Authorization": f"token {token}"}, **kw)


def active_job(user):
    jobs = user_jobs(user)
    check(len(jobs) == 1, f"{user} has {len(jobs)} active gpuslice jobs, want 1: {jobs}")
    return jobs[0]


def procs_of(uid):
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            if os.stat(f"/proc/{p}").st_uid == uid:
                out.append(int(p))
        except OSError:
            pass
    return out


def kernel_ws(user, token, kernel_id):
    """An open kernel websocket through the proxy (what a browser tab holds)."""
    from tornado import httpclient, websocket
    url = f"ws://127.0.0.1:{PROXY}/user/{user}/api/kernels/{kernel_id}/channels"
    req = httpclient.HTTPRequest(url, headers={"Authorization": f"token {token}"})
    return websocket.websocket_connect(req)


def shell_msg(msg_type, content):
    mid = secrets.token_hex(8)
    return json.dumps({"header": {"msg_id": mid, "msg_type": msg_type, "username": "t",
                                  "session": secrets.token_hex(8), "version": "5.3", "date": ""},
                       "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
                       "content": content})


def execute_msg(code):
    return shell_msg("execute_request", {"code": code, "silent": False, "store_history": True,
                                         "user_expressions": {}, "allow_stdin": False,
                                         "stop_on_error": True})


def start_kernel(user, token):
    r = via_proxy(user, token, "POST", "api/kernels", json={"name": "python3"})
    check(r.status_code == 201, f"kernel start: {r.status_code} {r.text}")
    return r.json()["id"]


def kernel_state(user, token, kid):
    r = via_proxy(user, token, "GET", f"api/kernels/{kid}?no_track_activity=1")
    return r.json().get("execution_state") if r.status_code == 200 else None


async def wait_kernel_idle(user, token, kid, ws, timeout=90):
    # The kernel says "idle" once a client talks to it: the server's kernel_info nudge on
    # connect, and (as a front end does when that is lost on a loaded machine) our own
    # kernel_info_request every 10 s.
    end = time.monotonic() + timeout
    next_ask = time.monotonic() + 5
    while (state := kernel_state(user, token, kid)) != "idle":
        check(time.monotonic() < end, f"kernel {kid} not idle after {timeout}s (state {state!r})")
        if time.monotonic() >= next_ask:
            ws.write_message(shell_msg("kernel_info_request", {}))
            next_ask = time.monotonic() + 10
        await asyncio.sleep(0.5)


def gs_status(user, token):
    r = via_proxy(user, token, "GET", "gpuslice/status")
    check(r.status_code == 200, f"/gpuslice/status: {r.status_code} {r.text[:200]}")
    return r.json()


def warned(job_id):
    return [e for e in events(job_id) if e["type"] == "warn"]


# ---- the cases ----

FIGURES = {}
TIME_WARNINGS = {}  # job -> the warning as the job showed it (T9)


def t1_spawn(user):
    token = user_token(user)
    r, ready_s, _ = spawn_busy(user, {"fraction": "0.5", "mem": "20GiB", "time": "30m"})
    FIGURES.setdefault("spawn_to_ready_s", []).append(round(ready_s, 2))
    log(f"T1 spawn-to-ready {ready_s:.2f}s (hub answered {r.status_code})")
    j = active_job(user)
    pw = pwd.getpwnam(user)
    check(j["uid"] == pw.pw_uid, f"job uid {j['uid']} != {pw.pw_uid}")
    check(j["queue"] == "interactive", f"queue {j}")
    check(j["milli"] == 500, f"milli {j['milli']}")
    check(j["memory"] == 20 << 30, f"memory cap {j['memory']}")
    check(j["time_limit_us"] == 1800 * 10**6, f"time limit {j['time_limit_us']}")
    check(j["state"] == "running" and j["pid"], f"state {j['state']}")
    # The server process itself runs as the user, and its token is on no command line.
    st = open(f"/proc/{j['pid']}/status").read()
    kids = [p for p in procs_of(pw.pw_uid)]
    check(kids, f"no process of uid {pw.pw_uid}")
    environ = b""
    for p in kids:
        try:
            environ = open(f"/proc/{p}/environ", "rb").read()
        except OSError:
            continue
        if b"JUPYTERHUB_API_TOKEN=" in environ:
            break
    tok = [v.split(b"=", 1)[1] for v in environ.split(b"\0") if v.startswith(b"JUPYTERHUB_API_TOKEN=")]
    check(tok and tok[0], "server has no JUPYTERHUB_API_TOKEN")
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                cmd = open(f"/proc/{p}/cmdline", "rb").read()
            except OSError:
                continue
            check(tok[0] not in cmd, f"the server's API token is on the command line of pid {p}")
    check(tok[0].decode() not in json.dumps(j), "the token shows in the job object")
    del st
    r = via_proxy(user, token, "GET", "api/status")
    check(r.status_code == 200, f"/api/status via the proxy: {r.status_code}")
    s = gs_status(user, token)
    check(s["job"]["id"] == j["id"] and s["job"]["state"] == "running", f"/gpuslice/status {s}")
    return token


def t1_bad_options(user):
    """A bad value is refused before anything is submitted: the REST API answers 400 with the
    message naming the option and the value (the form's case is in the browser: form_errors)."""
    for opts, want in (({"fraction": "2"}, "fraction '2'"), ({"time": "2h"}, "time '2h'"),
                       ({"mem": "70GiB"}, "memory '70GiB'"), ({"gpu": "1"}, "unknown option"),
                       ({"queue": "training"}, "queue 'training' is not offered"),
                       ({"preset": "huge"}, "preset 'huge' is not offered"),
                       ({"mem": "1e9"}, "1e9")):
        r, _ = spawn(user, opts, expect_ready=False)
        try:
            msg = r.json().get("message", "")
        except ValueError:
            msg = r.text
        check(r.status_code == 400 and want in msg, f"options {opts}: HTTP {r.status_code} {msg[:300]}")
        check(not user_jobs(user), f"options {opts} submitted a job")
        wait_for(lambda: server_model(user) is None, 20, "failed spawn cleared")
    # A preset with nothing else: its values.
    r, _ = spawn(user, {"preset": "half", "time": "20m"})
    j = active_job(user)
    check(j["milli"] == 500 and j["memory"] == 20 << 30 and j["time_limit_us"] == 1200 * 10**6,
          f"preset 'half' (time 20m): {j['milli']} milli, memory {j['memory']}, limit {j['time_limit_us']}")
    t8_user_stop(user)
    log("T1 bad options: HTTP 400 naming the option and value, no job; preset 'half' as asked")


def t8_user_stop(user):
    j = active_job(user)
    t0 = time.monotonic()
    r = HUBP.api("DELETE", f"/users/{user}/server")
    check(r.status_code in (202, 204), f"DELETE: {r.status_code} {r.text}")
    wait_stopped(user, 20)
    script_job(j["id"], None)
    log(f"T8 {user}: stop answered {r.status_code}, stopped in {time.monotonic() - t0:.2f}s")
    jj = job(j["id"])
    check(jj["state"] == "cancelled", f"job {j['id']} is {jj['state']}, want cancelled")
    uid = pwd.getpwnam(user).pw_uid
    try:
        # The job's group is gone (cancelled); a loaded machine may take a while to reap it.
        wait_for(lambda: not procs_of(uid), 20, f"no process of {user} left")
    except AssertionError as e:
        raise AssertionError(f"{e}: {describe_procs(procs_of(uid))}") from None


def describe_procs(pids):
    out = []
    for p in pids:
        try:
            cmd = open(f"/proc/{p}/cmdline", "rb").read().replace(b"\0", b" ").decode("utf-8", "replace")
            stat = open(f"/proc/{p}/stat").read().split()
            out.append(f"pid {p} state {stat[2]} ppid {stat[3]} pgrp {stat[4]}: {cmd[:120]}")
        except OSError:
            out.append(f"pid {p}: gone")
    return "; ".join(out)


def t3_t5_idle_reclaim(user, token):
    # The GPU is busy while the case sets up (a kernel starts slowly on a loaded machine), so
    # the idle window starts when the case says so.
    _, ready_s, j = spawn_busy(user)
    FIGURES.setdefault("spawn_to_ready_s", []).append(round(ready_s, 2))
    home = pwd.getpwnam(user).pw_dir
    r = via_proxy(user, token, "PUT", "api/contents/keep.txt",
                  json={"type": "file", "format": "text", "content": "written before the reclaim"})
    check(r.status_code in (200, 201), f"PUT file: {r.status_code} {r.text}")
    kid = start_kernel(user, token)

    async def hold_ws_until_reclaimed():
        ws = await kernel_ws(user, token, kid)  # T5: an idle tab's websocket stays open
        await wait_kernel_idle(user, token, kid, ws)
        script_job(j["id"], None)  # idle from now on
        t_warn = None
        try:
            while True:
                jj = job(j["id"])
                if jj["state"] not in ("pending", "starting", "running", "stopping"):
                    return t_warn, jj
                if t_warn is None and jj.get("warning"):
                    s = gs_status(user, token)  # the extension shows it to the notebook
                    check(s["job"]["warning"] and s["job"]["warn_deadline_us"], f"status {s}")
                    t_warn = time.monotonic()
                    log(f"T3 {user}: warned: {jj['warning']!r}")
                await asyncio.sleep(0.5)
        finally:
            ws.close()

    t0 = time.monotonic()
    t_warn, jj = asyncio.run(hold_ws_until_reclaimed())
    check(jj["state"] == "reclaimed", f"job {j['id']} ended {jj['state']}, want reclaimed")
    check(t_warn is not None, "no warning was seen through /gpuslice/status before the reclaim")
    log(f"T3/T5 {user}: reclaimed {time.monotonic() - t0:.1f}s after going idle, websocket open")
    t_end = time.monotonic()
    wait_stopped(user, 2 * POLL + 3)
    log(f"T3 {user}: hub saw it stopped {time.monotonic() - t_end:.1f}s after the reclaim")
    with open(os.path.join(home, "keep.txt")) as f:
        check(f.read() == "written before the reclaim", "keep.txt changed")
    # "Start" again: a new slice.
    _, again_s = spawn(user)
    j2 = active_job(user)
    check(j2["id"] != j["id"], "the restart reused the old job")
    log(f"T3 {user}: restarted as job {j2['id']} in {again_s:.2f}s")
    t8_user_stop(user)


def t6_t9_busy_gpu_then_time_limit(user, token):
    # The time limit (40s, warned 8s before) ends a server whose GPU is busy the whole time:
    # no idle warning in between (T6), then the time-limit warning and timed_out (T9).
    r = HUBP.api("POST", f"/users/{user}/server", json={"time": "40s"})
    check(r.status_code in (201, 202), f"spawn: {r.status_code} {r.text}")
    j = wait_for(lambda: (user_jobs(user) or [None])[0], 20, "job submitted")
    script_job(j["id"], 80)
    wait_for(lambda: (server_model(user) or {}).get("ready"), 60, "ready")
    t0 = time.monotonic()

    def ended_or_note():
        x = job(j["id"])
        if x.get("warning") and j["id"] not in TIME_WARNINGS:
            TIME_WARNINGS[j["id"]] = {"warning": x["warning"], "warning_kind": x.get("warning_kind")}
        return x if x["state"] not in ("pending", "starting", "running", "stopping") else None
    jj = wait_for(ended_or_note, 45, "time limit", every=0.3)
    ws = warned(j["id"])
    check(jj["state"] == "timed_out", f"job ended {jj['state']}, want timed_out")
    seen = TIME_WARNINGS.get(j["id"])
    check(seen and seen["warning_kind"] == "time-limit" and " in " in seen["warning"],
          f"the time-limit warning as the job showed it: {seen}")
    check(len(ws) == 1 and "time" in ws[0]["message"].lower(),
          f"want exactly one (time-limit) warning on a busy GPU: {ws}")
    t_end = time.monotonic()
    wait_stopped(user, 2 * POLL + 3)
    log(f"T6/T9 {user}: busy GPU never warned idle; timed_out after {t_end - t0:.1f}s; hub "
        f"saw it stopped {time.monotonic() - t_end:.1f}s later")
    script_job(j["id"], None)


def t2_queued(user):
    # The blocker has a time limit: the spawn page can say by when there is room at the latest.
    blocker = dpost("/v1/jobs", {"argv": ["sleep", "600"], "queue": "training", "gpus": 1, "time": "10m",
                                 "cwd": "/", "env": {"PATH": "/usr/bin:/bin"}})["job"]
    try:
        t2_queued_behind(user, blocker)
    finally:  # a failed check must not leave the GPU full for the other cases
        if job(blocker["id"])["state"] in ("pending", "starting", "running"):
            dpost(f"/v1/jobs/{blocker['id']}/cancel")


def t2_queued_behind(user, blocker):
    wait_for(lambda: job(blocker["id"])["state"] == "running", 10, "blocker running")
    t0 = time.monotonic()
    r = HUBP.api("POST", f"/users/{user}/server", json={})
    check(r.status_code == 202, f"spawn on a full GPU answered {r.status_code}, want 202")
    m = server_model(user)
    check(m and m["pending"] == "spawn" and not m["ready"], f"server model {m}")
    msgs = progress_messages(user, t0)
    pend = [x for x in msgs if x.startswith("Waiting for a GPU in queue interactive")]
    check(pend, f"no progress event says why it waits: {msgs}")
    # In plain words (not "GPU 0 of node 1 ..."), with the place in the queue and the bound.
    check("every GPU is busy" in pend[0] and "Place in the queue: 1 of 1." in pend[0] and
          "at the latest" in pend[0] and "node" not in pend[0], f"waiting text: {pend[0]}")
    log(f"T2 {user}: 202 after {time.monotonic() - t0:.1f}s, progress: {pend[0]!r}")
    dpost(f"/v1/jobs/{blocker['id']}/cancel")
    t1 = time.monotonic()
    wait_for(lambda: (server_model(user) or {}).get("ready"), 60, "ready after the blocker left")
    log(f"T2 {user}: ready {time.monotonic() - t1:.2f}s after the blocker was cancelled")
    t8_user_stop(user)


def t2_queued_on_demand(user_a, user_b):
    """T2 with the "on demand" reclaim: A's idle server in queue `ondemand` holds the whole GPU
    past window + grace and keeps running while nobody waits; B's spawn then waits (202, the
    progress says why), A's idle slice is reclaimed for it, and B's server starts."""
    _, _, ja = spawn_busy(user_a, {"queue": "ondemand", "fraction": "1"})
    check(ja["queue"] == "ondemand", f"A's job in {ja['queue']}")
    script_job(ja["id"], None)  # idle from now on
    time.sleep(WINDOW + GRACE + 4)
    check(job(ja["id"])["state"] == "running",
          f"on-demand: an idle slice nobody needs was stopped ({job(ja['id'])['state']})")
    log(f"T2/on-demand: {user_a}'s idle slice still running {WINDOW + GRACE + 4}s later "
        f"(warnings: {[e['message'] for e in warned(ja['id'])]})")
    t0 = time.monotonic()
    # B's job finds no room; the reclaimable idle slice is reclaimed for it and B is placed in
    # the same scheduling step (so B is "starting" at once, not "pending": T2 covers that).
    r = HUBP.api("POST", f"/users/{user_b}/server", json={})
    check(r.status_code in (201, 202), f"spawn: {r.status_code} {r.text}")
    jj = wait_for(lambda: (lambda x: x if x["state"] not in ("running", "stopping") else None)(
        job(ja["id"])), 30, f"{user_a}'s idle slice reclaimed for the waiting job")
    check(jj["state"] == "reclaimed", f"A's job ended {jj['state']}, want reclaimed")
    wait_for(lambda: (server_model(user_b) or {}).get("ready"), 60, f"{user_b} ready")
    log(f"T2/on-demand: {user_a}'s idle slice reclaimed for {user_b}, ready "
        f"{time.monotonic() - t0:.1f}s after asking")
    wait_stopped(user_a, 2 * POLL + 3)
    t8_user_stop(user_b)


def progress_messages(user, t0, limit_s=15):
    msgs = []
    with HUBP.api("GET", f"/users/{user}/server/progress", stream=True, timeout=10) as resp:
        for line in resp.iter_lines(decode_unicode=True):
            if line and line.startswith("data:"):
                msgs.append(json.loads(line[5:]).get("message", ""))
                if any(x.startswith("Waiting for a GPU") and "Place in the queue" in x for x in msgs):
                    break
            if time.monotonic() - t0 > limit_s:
                break
    return msgs


def t4_silent_cell(user, token):
    if not ACTIVITY:
        log("T4 SKIPPED: this gpuslice has no activity API (POST /v1/jobs/ID/activity)")
        return
    _, _, j = spawn_busy(user)
    kid = start_kernel(user, token)
    cell = WINDOW + GRACE + 8

    async def run_cell():
        ws = await kernel_ws(user, token, kid)
        await wait_kernel_idle(user, token, kid, ws)
        ws.write_message(execute_msg(f"import time; time.sleep({cell})"))
        await asyncio.sleep(1)
        script_job(j["id"], None)  # the GPU idles from now on: only the busy kernel counts
        ws.close()  # the tab is closed; the cell goes on, silently

    asyncio.run(run_cell())
    t0 = time.monotonic()
    # What the daemon received while the cell ran, for the failure message: (seconds into the
    # cell, received_us, busy) each time a new report arrived.
    seen, done = [], threading.Event()

    def watch():
        last = None
        while not done.wait(1):
            try:
                rep = job(j["id"]).get("activity_report") or {}
            except Exception:  # the failure message says what was seen before
                continue
            if rep.get("received_us") != last:
                last = rep.get("received_us")
                seen.append((round(time.monotonic() - t0, 1), last, rep.get("busy")))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    time.sleep(WINDOW + GRACE + 4)
    done.set()
    watcher.join()
    jj = job(j["id"])
    gaps = [round((b[1] - a[1]) / 1e6, 1) for a, b in zip(seen, seen[1:]) if a[1] and b[1]]
    check(jj["state"] == "running",
          f"a silent running cell lost its session: {jj['state']} ({jj.get('reason')}); "
          f"reports seen (s into the cell, received_us, busy): {seen}; largest gap between "
          f"reports: {max(gaps, default=None)} s")
    check(not warned(j["id"]), f"warned while a cell ran: {warned(j['id'])}")
    log(f"T4 {user}: no warning {time.monotonic() - t0:.0f}s into a silent {cell}s cell")
    jj = wait_for(lambda: (lambda x: x if x["state"] == "reclaimed" else None)(job(j["id"])),
                  cell + WINDOW + GRACE + 15, "reclaimed after the cell ended")
    log(f"T4 {user}: reclaimed {time.monotonic() - t0 - cell:.1f}s after the cell ended")
    wait_stopped(user, 2 * POLL + 3)


def run_browser(mode, user, env_extra=None, on_line=None, timeout=240):
    bdir = os.path.join(SRC, "testing", "browser")
    env = dict(os.environ, HUB_URL=PROXY_URL, NB_USER=user, NB_PASSWORD=PASSWORD, ART=ART, **(env_extra or {}))
    p = subprocess.Popen(["node", os.path.join(bdir, "notebook_banner.js"), mode], cwd=bdir, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = []
    for line in p.stdout:
        out.append(line.rstrip())
        if on_line:
            on_line(line)
    rc = p.wait(timeout)
    log(f"browser {mode}:", "\n    ".join(out))
    check(rc == 0, f"notebook_banner.js {mode} failed ({rc})")
    return out


def form_errors(user):
    """The spawn form in Chromium: presets offered; a bad value comes back on the form with the
    field's error and what was typed, not as HTTP 500; nothing is submitted."""
    run_browser("form", user)
    check(not user_jobs(user), "the refused form submitted a job")
    check(os.path.getsize(os.path.join(ART, "spawn-form-error.png")) > 1000, "no screenshot of the form")


def browser_banner(user):
    """Chromium opens a notebook through the proxy; the banner goes warning -> kept -> warning
    -> stopping -> stopped, saving at each warning (autosave is off), and after the reclaim the
    notebook and the hub's home page say what happened (testing/browser/notebook_banner.js)."""
    _, _, j = spawn_busy(user)
    token = user_token(user)
    home = pwd.getpwnam(user).pw_dir
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "metadata": {},
                     "outputs": [], "source": "1 + 1"}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    r = via_proxy(user, token, "PUT", "api/contents/banner.ipynb",
                  json={"type": "notebook", "content": nb})
    check(r.status_code in (200, 201), f"PUT notebook: {r.status_code} {r.text[:200]}")
    if not ACTIVITY:
        log("browser SKIPPED: 'Keep my session' needs the activity API")
        t8_user_stop(user)
        return

    # The GPU is busy until the page is loaded and edited, so the idle window starts then,
    # however slowly the browser loads (the idle warning must find an unsaved edit).
    def on_line(line):
        if line.startswith("EDITED"):
            script_job(j["id"], None)
            log(f"browser {user}: notebook open and edited; the GPU goes idle now")

    run_browser("banner", user, {"NB_FILE": os.path.join(home, "banner.ipynb")}, on_line)
    jj = job(j["id"])
    evs = [e["type"] for e in events(j["id"])]
    check(jj["state"] == "reclaimed", f"job {j['id']} ended {jj['state']}, want reclaimed")
    check(evs.count("warn") == 2 and evs.count("unwarn") >= 1,
          f"want two warnings and the keep between them: {evs}")
    for shot in ("notebook-banner.png", "notebook-reclaimed.png", "hub-home-reclaimed.png"):
        check(os.path.getsize(os.path.join(ART, shot)) > 1000, f"no screenshot {shot}")
    wait_stopped(user, 2 * POLL + 3)
    log(f"browser {user}: warned, kept, warned and saved again, reclaimed and told")


def t7_hub_restart(user):
    r = HUBP.api("POST", f"/users/{user}/server", json={})
    j = wait_for(lambda: (user_jobs(user) or [None])[0], 20, "job submitted")
    script_job(j["id"], 80)  # the GPU is busy: the hub's outage must not lose the server
    wait_for(lambda: (server_model(user) or {}).get("ready"), 60, "ready")
    del r
    HUBP.stop()
    log(f"T7 {user}: hub stopped")
    time.sleep(2 * POLL)
    check(job(j["id"])["state"] == "running", "the server died with the hub")
    HUBP.start()
    m = wait_for(lambda: (server_model(user) or {}).get("ready") and server_model(user), 30,
                 "re-adopted")
    check(m["state"].get("job_id") == str(j["id"]), f"re-adopted state {m['state']}")
    token = user_token(user)
    r = via_proxy(user, token, "GET", "api/status")
    check(r.status_code == 200, f"/api/status after the restart: {r.status_code}")
    log(f"T7 {user}: restarted hub re-adopted job {j['id']} (route back, 200)")
    # A daemon restart: while the socket is gone the spawner's polls fail, and the server
    # must still count as running; the daemon re-adopts the job.
    DAEMON[0].terminate()
    DAEMON[0].wait(20)
    time.sleep(2 * POLL + 1)
    check((server_model(user) or {}).get("ready"), "the hub dropped the server while the daemon was down")
    DAEMON[0] = start_daemon(fresh_script=False)
    check(job(j["id"])["state"] == "running", f"after the daemon restart: {job(j['id'])['state']}")
    time.sleep(POLL + 1)
    check((server_model(user) or {}).get("ready"), "the hub dropped the server after the daemon restart")
    r = via_proxy(user, token, "GET", "api/status")
    check(r.status_code == 200, f"/api/status after the daemon restart: {r.status_code}")
    log(f"T7 {user}: daemon restarted; the server kept running and the hub kept it")
    t8_user_stop(user)
    script_job(j["id"], None)


def t10_plain_submit(user):
    """Item 5: `gpuslice submit -- jupyter notebook` without a hub, the extension enabled by
    the environment only (docs/notebooks.md): /gpuslice/status answers, and the server reports
    its own activity to the daemon, as the user."""
    port, tok = free_port(), secrets.token_hex(16)
    py = PY
    pw = pwd.getpwnam(user)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": pw.pw_dir, "LANG": "C.UTF-8",
           "JUPYTER_TOKEN": tok, "PYTHONPATH": py,
           "JUPYTER_CONFIG_PATH": os.path.join(py, "gpuslice_jupyter", "etc"),
           "JUPYTER_PATH": os.path.join(py, "gpuslice_jupyter", "share"),
           "JUPYTER_GPUSLICE_REPORT_INTERVAL": "2", "JUPYTER_GPUSLICE_SOCKET": SOCK}
    # As the user (the daemon trusts the socket's peer credentials); the CLI sends this env.
    r = subprocess.run([BIN, "submit", "--socket", SOCK, "--json", "--", "jupyter", "notebook",
                        "--no-browser", "--ip", "127.0.0.1", f"--port={port}"],
                       env=env, cwd=pw.pw_dir, capture_output=True, text=True,
                       user=pw.pw_uid, group=pw.pw_gid, extra_groups=[])
    check(r.returncode == 0, f"gpuslice submit as {user}: {r.returncode} {r.stderr}")
    jid = json.loads(r.stdout)["job"]["id"]
    try:
        script_job(jid, 80)
        check(job(jid)["uid"] == pw.pw_uid, "the plain job is not the user's")
        url = f"http://127.0.0.1:{port}/"
        hdr = {"Authorization": f"token {tok}"}

        def status():
            try:
                x = requests.get(url + "gpuslice/status", headers=hdr, timeout=5)
                return x.json() if x.status_code == 200 else None
            except requests.RequestException:
                # A server that has exited will never answer: stop waiting at once.
                if job(jid)["state"] not in ("pending", "starting", "running"):
                    raise AssertionError("the notebook's job ended before /gpuslice/status answered")
                return None
        def logs():
            return subprocess.run([BIN, "logs", "--socket", SOCK, str(jid)],
                                  capture_output=True, text=True).stdout
        try:
            s = wait_for(status, 60, "plain notebook's /gpuslice/status")
        except AssertionError as e:  # say where it stood: still pending, or the server's own words
            j = job(jid)
            raise AssertionError(f"{e}; job {jid} is {j['state']} ({j.get('reason')}), "
                                 f"its log ends: {logs()[-1500:]!r}") from None
        check(s["job"] and s["job"]["id"] == jid, f"/gpuslice/status {s}")
        wait_for(lambda: f"reporting activity of job {jid}" in logs(), 20,
                 "the extension reporting activity")
        if ACTIVITY:
            rep = wait_for(lambda: job(jid).get("activity_report"), 20, "an activity report")
            log(f"T10 {user}: plain notebook job {jid} reports: {rep}")
            k = requests.post(url + "gpuslice/keep", headers=hdr, json={}, timeout=10)
            check(k.status_code == 200 and k.json().get("ok"), f"keep: {k.status_code} {k.text}")
        else:
            log(f"T10 {user}: plain notebook job {jid} runs the reporter (no activity API to take it)")
    finally:
        try:
            dpost(f"/v1/jobs/{jid}/cancel")
        except client.DaemonError:
            pass
        script_job(jid, None)
        wait_for(lambda: job(jid)["state"] not in ("pending", "starting", "running", "stopping"),
                 20, "plain job ended")


# ---- runner ----

RESULTS = []


def run(name, fn, *a):
    only = os.environ.get("GS_ONLY")  # debugging: GS_ONLY="browser,T7" runs just those
    if only and not any(o.strip() and o.strip() in name for o in only.split(",")):
        return None
    t0 = time.monotonic()
    try:
        out = fn(*a)
        RESULTS.append((name, "ok", time.monotonic() - t0))
        return out
    except Exception as e:  # one case's failure is reported with the others
        RESULTS.append((name, f"FAIL: {e}", time.monotonic() - t0))
        log(f"{name} FAILED:\n{traceback.format_exc()}")
        for u in [x for x in a if x in (U1, U2)]:  # leave this case's users stopped; the
            try:                                    # other lane goes on
                HUBP.api("DELETE", f"/users/{u}/server")
            except Exception:
                pass
        return None


def lane_a():
    token = run("T1 spawn", t1_spawn, U1)
    run("T8 user stop", t8_user_stop, U1)
    run("T1 bad options", t1_bad_options, U1)
    if token:
        run("T3+T5 idle reclaim, open websocket", t3_t5_idle_reclaim, U1, token)
    run("T6+T9 busy GPU, time limit", t6_t9_busy_gpu_then_time_limit, U1, token)
    run("T10 plain submit, no hub", t10_plain_submit, U1)


def lane_b():
    token = user_token(U2)
    run("T4 silent long cell", t4_silent_cell, U2, token)
    if os.path.isdir(os.path.join(SRC, "testing", "browser", "node_modules", "playwright-core")):
        run("browser form errors", form_errors, U2)
        run("browser banner", browser_banner, U2)
    else:  # npm could not fetch it (scripts/install-deps said so): the rest still runs
        RESULTS.append(("browser", "SKIP: testing/browser has no playwright-core", 0.0))


def main():
    t0 = time.monotonic()
    log(f"activity API: {'yes' if ACTIVITY else 'no'}")
    DAEMON[0] = start_daemon()
    try:
        HUBP.start()
        log(f"daemon and hub up in {time.monotonic() - t0:.1f}s")
        run("T2 queued", t2_queued, U2)
        if ACTIVITY:
            run("on-demand reclaim", t2_queued_on_demand, U1, U2)
        ta, tb = threading.Thread(target=lane_a), threading.Thread(target=lane_b)
        ta.start(), tb.start()
        ta.join(), tb.join()
        run("T7 hub restart, daemon restart", t7_hub_restart, U2)
    finally:
        for jb in dget("/v1/jobs?state=active")["jobs"] if dget("/v1/health") else []:
            try:
                dpost(f"/v1/jobs/{jb['id']}/cancel")
            except Exception:
                pass
        try:
            HUBP.stop()
        except Exception:
            pass
        time.sleep(1)
        DAEMON[0].terminate()
        DAEMON[0].wait(20)
        for name in ("hub.log", "daemon.log"):
            src = os.path.join(D, name)
            if os.path.exists(src):
                with open(src, "rb") as f, open(os.path.join(ART, name), "wb") as g:
                    g.write(f.read())
    print("\n==== results ====")
    for name, res, secs in RESULTS:
        print(f"{name:40s} {res}  ({secs:.1f}s)")
    print(f"spawn-to-ready (s): {FIGURES.get('spawn_to_ready_s')}")
    print(f"total {time.monotonic() - t0:.1f}s; logs in {ART}")
    return 0 if not any(r.startswith("FAIL") for _, r, _ in RESULTS) else 1


if __name__ == "__main__":
    sys.exit(main())
