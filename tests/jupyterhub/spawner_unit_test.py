"""GpusliceSpawner's option checks and the activity summary, without a hub or a daemon
(the end-to-end cases are in hub_test.py). Run: /usr/bin/python3 spawner_unit_test.py"""

import os
import sys
import types
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from gpuslice_jupyter import client  # noqa: E402
from gpuslice_jupyterhub import GpusliceSpawner, parse_bytes, parse_duration, parse_fraction  # noqa: E402

QUEUE = {"name": "interactive", "time_limit_us": 3600 * 10**6}


def spawner(**kw):
    s = GpusliceSpawner(user=types.SimpleNamespace(name="alice", url="/user/alice/"), **kw)
    return s


class Parsing(unittest.TestCase):
    def test_units(self):
        self.assertEqual(parse_fraction("0.25"), 250)
        self.assertEqual(parse_fraction("250m"), 250)
        self.assertEqual(parse_fraction("1"), 1000)
        self.assertEqual(parse_bytes("10GiB"), 10 << 30)
        self.assertEqual(parse_bytes("512MiB"), 512 << 20)
        self.assertEqual(parse_duration("1h30m"), 5400)

    def test_hostile_values_name_the_value(self):
        for f, bad in ((parse_fraction, "2"), (parse_fraction, "0"), (parse_fraction, "-0.5"),
                       (parse_fraction, "0.25; rm -rf /"), (parse_bytes, "10 parsecs"),
                       (parse_duration, "1h30"), (parse_duration, "0s"), (parse_duration, "")):
            with self.assertRaises(ValueError) as e:
                f(bad)
            self.assertIn(repr(bad[:32]), str(e.exception))

    def test_long_values_are_cut_in_messages(self):
        with self.assertRaises(ValueError) as e:
            parse_fraction("9" * 10000)
        self.assertLess(len(str(e.exception)), 200)


class Options(unittest.TestCase):
    def test_within_bounds(self):
        s = spawner(max_fraction="0.5", max_memory="40GiB")
        s.user_options = {"fraction": "0.5", "mem": "20GiB", "time": "30m"}
        self.assertEqual(s.validated_options(QUEUE),
                         {"fraction": "500m", "mem": "20GiB", "time": "1800s"})

    def test_defaults_apply_when_unset(self):
        s = spawner(default_fraction="0.25", default_time="45m")
        s.user_options = {}
        self.assertEqual(s.validated_options(QUEUE), {"fraction": "250m", "time": "2700s"})
        self.assertEqual(spawner().validated_options(QUEUE), {})  # the queue's defaults

    def test_out_of_bounds_refused(self):
        cases = [({"fraction": "0.75"}, "outside"), ({"fraction": "10m"}, "outside"),
                 ({"mem": "50GiB"}, "more than 40GiB"), ({"time": "2h"}, "allows (1h)"),
                 ({"gpus": "8"}, "unknown option 'gpus'"), ({"queue": "training"}, "not offered")]
        for opts, want in cases:
            s = spawner(max_fraction="0.5", max_memory="40GiB")
            s.user_options = opts
            with self.assertRaises(ValueError) as e:
                s.chosen_queue()
                s.validated_options(QUEUE)
            self.assertIn(want, str(e.exception), opts)

    def test_allowed_queue(self):
        s = spawner(allowed_queues=["ondemand"])
        s.user_options = {"queue": "ondemand"}
        self.assertEqual(s.chosen_queue(), "ondemand")

    def test_state_round_trip(self):
        s = spawner()
        s.job_id = "42"
        t = spawner()
        t.load_state(s.get_state())
        self.assertEqual(t.job_id, "42")
        t.load_state({"job_id": "../../etc"})  # a tampered state adopts nothing
        self.assertEqual(t.job_id, "")


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
    unittest.main()
