"""Runs one gpuslice API call as the user it is started as (the spawner starts it with the
user's uid, gid and groups): the daemon trusts the socket's peer credentials, so the job it
submits is the user's own. The request comes on stdin, never on the command line, because it
carries the server's API token. Answer: one JSON object on stdout,
{"ok": true, "answer": ...} or {"ok": false, "code": ..., "status": ..., "message": ...}.

Started as `python3 -I _as_user.py` (isolated: the user's environment cannot change what runs).
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from gpuslice_jupyter import client  # noqa: E402


def main():
    req = json.load(sys.stdin)
    try:
        ans = client.request(req["method"], req["path"], req.get("body"),
                             socket_path=req.get("socket"), timeout=req.get("timeout", 30))
        out = {"ok": True, "answer": ans}
    except client.DaemonError as e:
        out = {"ok": False, "code": e.code, "status": e.status, "message": e.message}
    except client.Unreachable as e:
        out = {"ok": False, "code": "UNAVAILABLE", "status": 503, "message": str(e)}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
