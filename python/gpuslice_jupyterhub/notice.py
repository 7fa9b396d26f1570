"""What GpusliceSpawner tells people in words: why a spawn waits (the daemon's plain-words
reason, the place in the queue, and by when the room is there at the latest), and, after
gpuslice stopped a server, what happened, when, after how long, and that the files are kept
(shown on the hub's home page and "not running" page by templates/, and to the notebook's
banner).
"""

import datetime
import re
import time


def utc(us):
    """µs since the epoch -> '14:32 UTC' (today) or '2026-12-01 14:32 UTC'."""
    d = datetime.datetime.fromtimestamp(us / 1e6, tz=datetime.timezone.utc)
    today = datetime.datetime.now(tz=datetime.timezone.utc).date()
    return d.strftime("%H:%M UTC") if d.date() == today else d.strftime("%Y-%m-%d %H:%M UTC")


def ago(seconds):
    s = max(0, int(seconds))
    if s < 60:
        return "just now" if s < 10 else f"{s} seconds ago"
    if s < 3600:
        return f"{s // 60} minute{'s' if s // 60 != 1 else ''} ago"
    if s < 86400:
        return f"{s // 3600} hour{'s' if s // 3600 != 1 else ''} ago"
    return f"{s // 86400} day{'s' if s // 86400 != 1 else ''} ago"


def spell_duration(text):
    """The daemon's '40m', '1h30m', '2m5s' -> '40 minutes', '1 hour 30 minutes', ..."""
    names = {"d": "day", "h": "hour", "m": "minute", "s": "second"}
    parts = re.findall(r"(\d+)(ms|[dhms])", text or "")
    words = [f"{n} {names[u]}{'s' if n != '1' else ''}" for n, u in parts if u in names]
    return " ".join(words[:2]) or text


def waiting_text(job, queue):
    """The spawn page's line while the job waits (the daemon's pending_reason, docs/api.md)."""
    pr = job.get("pending_reason") or {}
    why = pr.get("plain") or pr.get("text") or f"gpuslice job {job.get('id')} is waiting"
    msg = f"Waiting for a GPU in queue {queue}: {why}."
    pos, n = pr.get("position"), pr.get("queue_length")
    if isinstance(pos, int) and isinstance(n, int):
        msg += f" Place in the queue: {pos} of {n}."
    ready = pr.get("ready_by_us")
    if isinstance(ready, int) and ready > 0:
        msg += (f" Room for it by {utc(ready)} at the latest (when the jobs in the way reach their "
                f"time limits).")
    return msg


def ended_record(job):
    """What to keep of a job gpuslice ended (poll saw it end): kept in the hub's state."""
    return {"job_id": job.get("id"), "state": job.get("state"), "reason": job.get("reason") or "",
            "start_time_us": job.get("start_time_us") or 0,
            "end_time_us": job.get("end_time_us") or int(time.time() * 1e6),
            "time_limit_us": job.get("time_limit_us") or 0,
            "deadline_us": job.get("deadline_us") or 0}


def ended_notice(rec, now=None):
    """{'kind', 'title', 'text'} for people from an ended_record; None for an end they chose
    (a stop from the hub is not news) or one that says nothing."""
    if not rec or not rec.get("state"):
        return None
    now = time.time() if now is None else now
    end = rec.get("end_time_us") or 0
    when = f"at {utc(end)} ({ago(now - end / 1e6)})" if end else ""
    kept = ("Your files are kept; what was only in memory (variables, loaded models) is gone. "
            "Start the server again when you need it (it may wait for a free GPU).")
    state, reason = rec["state"], rec.get("reason") or ""
    if state == "reclaimed":
        m = re.search(r"idle for (\S+)", reason)
        idle = f" after it had been idle for {spell_duration(m.group(1))}" if m else " because it was idle"
        return {"kind": "idle", "title": "Your server was stopped because it was idle.",
                "text": f"gpuslice stopped it {when}{idle}. {kept}"}
    if state == "timed_out":
        start, deadline = rec.get("start_time_us") or 0, rec.get("deadline_us") or 0
        limit = f" of {spell_duration(_dur(deadline - start))}" if start and deadline > start else ""
        return {"kind": "time-limit", "title": "Your server reached its time limit.",
                "text": f"gpuslice stopped it {when}, at the end of its time limit{limit}. {kept}"}
    if state in ("failed", "lost", "cancelled"):
        why = f" ({reason})" if reason else ""
        return {"kind": "ended", "title": f"Your server ended: {state}.",
                "text": f"It ended {when}{why}. {kept}"}
    return None


def _dur(us):
    s = int(us // 1_000_000)
    out = ""
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if s >= n:
            out += f"{s // n}{unit}"
            s %= n
    return out or "0s"
