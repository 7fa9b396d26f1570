"""GpusliceSpawner's options (presets, free fields, the daemon's grammar through `gpuslice
units`), its words for people (notice.py) and the activity summary, against a real
`gpuslice serve --simulate` but without a hub (the end-to-end cases are in hub_test.py).
Run: /usr/bin/python3 spawner_unit_test.py GPUSLICE_BINARY"""

import asyncio
import os
import subprocess
import sys
import tempfile
import time
import types
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from gpuslice_jupyter import client  # noqa: E402
from gpuslice_jupyterhub import GpusliceSpawner  # noqa: E402
from gpuslice_jupyterhub import notice  # noqa: E402
from gpuslice_jupyterhub.options import OptionError, options_form, read_units  # noqa: E402

BIN = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else os.environ.get("GS_BIN", "")
DAEMON = {}


def setUpModule():
    d = tempfile.mkdtemp(prefix="gs-spawner-unit-")
    cfg = os.path.join(d, "gs.toml")
    with open(cfg, "w") as f:
        f.write('[queues.interactive]\ntime_limit = "1h"\n[queues.ondemand]\nkinds = ["shared"]\n'
                'time_limit = "2h"\n[queues.training]\n')
    sock = os.path.join(d, "sock")
    p = subprocess.Popen([BIN, "serve", "--simulate", "1xH100-80GB", "--config", cfg, "--socket", sock,
                          "--state-dir", os.path.join(d, "state")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    DAEMON.update(proc=p, sock=sock, dir=d)
    for _ in range(100):
        try:
            client.request("GET", "/v1/health", socket_path=sock)
            return
        except client.Unreachable:
            time.sleep(0.1)
    raise RuntimeError("gpuslice serve did not start")


def tearDownModule():
    DAEMON["proc"].terminate()
    DAEMON["proc"].wait(10)
    subprocess.run(["rm", "-rf", DAEMON["dir"]], check=False)


def spawner(**kw):
    kw.setdefault("gpuslice_command", BIN)
    kw.setdefault("socket_path", DAEMON["sock"])
    return GpusliceSpawner(user=types.SimpleNamespace(name="alice", url="/user/alice/"), **kw)


def resolve(s, opts):
    return asyncio.run(s.resolve_options(opts))


class DaemonGrammar(unittest.TestCase):
    """The review's finding: the spawner read '1.5GiB', '500ms' and '90' differently from the
    daemon. Now the daemon's own parser reads them."""

    def test_accepts_what_the_daemon_accepts(self):
        got = asyncio.run(read_units(BIN, fraction="0.25", mem="1.5GiB", time="1500ms"))
        self.assertEqual(got, {"fraction": 250, "mem": 3 << 29, "time": 1_500_000})
        self.assertEqual(asyncio.run(read_units(BIN, time="90"))["time"], 90_000_000)
        self.assertEqual(asyncio.run(read_units(BIN, fraction="250m"))["fraction"], 250)
        self.assertEqual(asyncio.run(read_units(BIN, mem="80GB"))["mem"], 80 * 1000 ** 3)

    def test_refuses_naming_the_field_and_value(self):
        for field, bad in (("fraction", "2"), ("fraction", "-0.5"), ("fraction", "0.25; rm -rf /"),
                           ("mem", "10 parsecs"), ("time", "1h30"), ("time", "0s"),
                           ("fraction", "--help"), ("mem", "1e9")):
            with self.assertRaises(OptionError) as e:
                asyncio.run(read_units(BIN, **{field: bad}))
            self.assertEqual(e.exception.field, field, str(e.exception))
            self.assertIn(bad, str(e.exception))
        # A time limit under a second is the daemon's own refusal, said the same way.
        with self.assertRaises(OptionError) as e:
            asyncio.run(read_units(BIN, time="500ms"))
        self.assertIn("less than the minimum 1s", str(e.exception))

    def test_long_values_are_refused_before_running_anything(self):
        with self.assertRaises(OptionError) as e:
            asyncio.run(read_units("/nonexistent/gpuslice", fraction="9" * 10000))
        self.assertLess(len(str(e.exception)), 200)


class Accounts(unittest.TestCase):
    def test_a_hub_user_that_is_root_is_refused_before_anything_is_submitted(self):
        import asyncio
        s = GpusliceSpawner(user=types.SimpleNamespace(name="root", url="/user/root/"))
        with self.assertRaises(RuntimeError) as e:
            asyncio.run(s._call_as_user("POST", "/v1/jobs", {"argv": ["true"]}))
        self.assertIn("uid 0", str(e.exception))
        self.assertIn("never starts a server as root", str(e.exception))

    def test_an_ordinary_account_passes(self):
        import pwd
        ordinary = next((p for p in pwd.getpwall() if p.pw_uid != 0), None)
        if ordinary is None:
            self.skipTest("no account other than root here")
        s = GpusliceSpawner(user=types.SimpleNamespace(name=ordinary.pw_name, url="/user/x/"))
        self.assertEqual(s._account().pw_uid, ordinary.pw_uid)


class Options(unittest.TestCase):
    def test_free_fields_within_bounds(self):
        s = spawner(max_fraction="0.5", max_memory="40GiB")
        self.assertEqual(resolve(s, {"fraction": "0.5", "mem": "20GiB", "time": "30m"}),
                         ("interactive", {"fraction": "0.5", "mem": "20GiB", "time": "30m"}))
        # The daemon's grammar throughout: 1.5GiB and 90 (seconds) pass.
        self.assertEqual(resolve(s, {"mem": "1.5GiB", "time": "90"})[1], {"mem": "1.5GiB", "time": "90"})

    def test_defaults_apply_when_unset(self):
        s = spawner(default_fraction="0.25", default_time="45m")
        self.assertEqual(resolve(s, {})[1], {"fraction": "0.25", "time": "45m"})
        self.assertEqual(resolve(spawner(), {})[1], {})  # the queue's defaults

    def test_out_of_bounds_refused_naming_the_field(self):
        cases = [({"fraction": "0.75"}, "fraction", "outside"), ({"fraction": "10m"}, "fraction", "outside"),
                 ({"mem": "50GiB"}, "mem", "more than 40GiB"), ({"time": "2h"}, "time", "allows (1h)"),
                 ({"gpus": "8"}, None, "unknown option 'gpus'"), ({"queue": "training"}, "queue", "not offered"),
                 ({"fraction": "2"}, "fraction", "more than one GPU")]
        for opts, field, want in cases:
            with self.assertRaises(OptionError) as e:
                resolve(spawner(max_fraction="0.5", max_memory="40GiB"), opts)
            self.assertEqual(e.exception.field, field, opts)
            self.assertIn(want, str(e.exception), opts)

    def test_allowed_queue_and_its_own_limit(self):
        s = spawner(allowed_queues=["ondemand"])
        self.assertEqual(resolve(s, {"queue": "ondemand", "time": "90m"})[0], "ondemand")

    def test_presets(self):
        presets = [{"name": "small", "fraction": "0.25", "mem": "10GiB", "time": "8h"},
                   {"name": "large", "display_name": "Large", "fraction": "0.5", "mem": "40GiB",
                    "time": "30m", "default": True}]
        s = spawner(presets=presets)
        # No preset named: the default one. Its time (8h) is over the queue's 1h: refused there.
        self.assertEqual(resolve(s, {}), ("interactive", {"fraction": "0.5", "mem": "40GiB", "time": "30m"}))
        with self.assertRaises(OptionError) as e:
            resolve(s, {"preset": "small"})
        self.assertEqual(e.exception.field, "time")
        with self.assertRaises(OptionError) as e:
            resolve(s, {"preset": "huge"})
        self.assertIn("choose from: small, large", str(e.exception))
        # With presets, no free field unless the admin allows it.
        with self.assertRaises(OptionError) as e:
            resolve(s, {"preset": "large", "mem": "1GiB"})
        self.assertEqual(e.exception.field, "mem")
        self.assertIn("choose a preset", str(e.exception))
        t = spawner(presets=presets, free_fields=["time"])
        self.assertEqual(resolve(t, {"preset": "large", "time": "10m"})[1]["time"], "10m")

    def test_form_puts_values_back_with_the_error_under_the_field(self):
        s = spawner(presets=[{"name": "small", "fraction": "0.25", "description": "<b>notebooks</b>"}],
                    free_fields=["fraction"])
        html = options_form(s, {"preset": "small", "fraction": "<2>"}, {"fraction": "fraction '<2>' is bad"})
        self.assertIn('value="&lt;2&gt;"', html)
        self.assertIn('id="gs-fraction-error"', html)
        self.assertIn("fraction &#x27;&lt;2&gt;&#x27; is bad", html)
        self.assertIn("&lt;b&gt;notebooks&lt;/b&gt;", html)  # the admin's text is text too
        self.assertNotIn('name="mem"', html)  # not a free field
        self.assertIn('value="small" checked', html)

    def test_state_round_trip_keeps_the_last_end(self):
        s = spawner()
        s.job_id = "42"
        s.last_end = notice.ended_record({"id": 42, "state": "reclaimed", "reason": "idle reclaim: idle for 40m",
                                          "end_time_us": 1_800_000_000_000_000})
        t = spawner()
        t.load_state(s.get_state())
        self.assertEqual(t.job_id, "42")
        t.clear_state()  # the hub clears the state when the server stops: the story stays
        self.assertEqual(t.gpuslice_notice["kind"], "idle")
        t.load_state({"job_id": "../../etc"})  # a tampered state adopts nothing
        self.assertEqual(t.job_id, "")


class Words(unittest.TestCase):
    def test_reclaim_notice_says_what_when_how_long_and_files_kept(self):
        end = int(time.time() * 1e6) - 120 * 10**6
        n = notice.ended_notice(notice.ended_record(
            {"id": 3, "state": "reclaimed", "reason": "idle reclaim: idle for 40m", "end_time_us": end}))
        self.assertIn("idle", n["title"])
        self.assertIn("idle for 40 minutes", n["text"])
        self.assertIn("2 minutes ago", n["text"])
        self.assertIn("UTC", n["text"])
        self.assertIn("files are kept", n["text"])
        t = notice.ended_notice({"state": "timed_out", "start_time_us": 0, "deadline_us": 0, "end_time_us": end})
        self.assertIn("time limit", t["title"])
        self.assertIsNone(notice.ended_notice({"state": "succeeded", "end_time_us": end}))

    def test_waiting_text(self):
        job = {"id": 7, "pending_reason": {"text": "pending in interactive: no GPU with 250m free",
                                           "plain": "every GPU is busy", "position": 2, "queue_length": 3,
                                           "ready_by_us": 1_800_000_000_000_000}}
        w = notice.waiting_text(job, "interactive")
        self.assertTrue(w.startswith("Waiting for a GPU in queue interactive: every GPU is busy."), w)
        self.assertIn("Place in the queue: 2 of 3.", w)
        self.assertIn("at the latest", w)
        self.assertNotIn("at the latest", notice.waiting_text({"pending_reason": {"plain": "x"}}, "q"))


class Activity(unittest.TestCase):
    def test_silent_busy_cell_is_busy(self):
        ks = [{"execution_state": "busy", "last_activity": "2026-12-01T10:00:00.000000Z",
               "connections": 0},
              {"execution_state": "idle", "last_activity": "2026-12-01T10:05:00Z", "connections": 2}]
        b = client.summarise_kernels(ks, client.iso_to_us("2026-12-01T09:00:00Z"))
        self.assertTrue(b["busy"])
        self.assertEqual(b["kernels"], 2)
        self.assertEqual(b["connections"], 2)
        self.assertEqual(b["last_activity_us"], client.iso_to_us("2026-12-01T10:05:00Z"))

    def test_unknown_time_stays_unknown(self):
        b = client.summarise_kernels([{"execution_state": "idle", "last_activity": "garbage"}], None)
        self.assertFalse(b["busy"])
        self.assertNotIn("last_activity_us", b)  # never 0


if __name__ == "__main__":
    if not BIN or not os.access(BIN, os.X_OK):
        print("usage: spawner_unit_test.py GPUSLICE_BINARY")
        sys.exit(2)
    unittest.main()
