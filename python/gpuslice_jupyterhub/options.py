"""The spawn options of GpusliceSpawner: the admin's presets (like KubeSpawner's profile_list),
the free fields the admin allows, their checks and the options form.

Amounts are read by the daemon's own grammar: `gpuslice units` (apps/gpuslice/cmd_units.cc)
parses them with the same functions as the daemon and `gpuslice submit`, so "1.5GiB", "500ms"
and "90" mean here what they mean there; this module has no unit parser of its own.

Errors are OptionError: which option (the form shows the message next to that field) and a
message naming the value.
"""

import asyncio
import html
import json

FIELDS = ("fraction", "mem", "time")
_MAX_OPTION_LEN = 32
_LABELS = {"fraction": "Share of a GPU", "mem": "GPU memory cap", "time": "Time limit"}


class OptionError(ValueError):
    """A refused option: `field` names it (None: not one field), str(e) says why."""

    def __init__(self, field, message):
        super().__init__(message)
        self.field = field


def shown(value):
    text = str(value)
    return repr(text[:_MAX_OPTION_LEN] + ("..." if len(text) > _MAX_OPTION_LEN else ""))


async def read_units(command, **amounts):
    """{'fraction': '0.25', 'mem': '10GiB', 'time': '2h'} (any subset) -> {'fraction': milli,
    'mem': bytes, 'time': µs}, read by `gpuslice units`. OptionError names the refused one."""
    args = []
    for name, value in amounts.items():
        if value is None:
            continue
        text = str(value)
        if len(text) > _MAX_OPTION_LEN or "\0" in text or not text.strip():
            raise OptionError(name, f"{name} {shown(text)} is not a value gpuslice reads "
                                    f"(at most {_MAX_OPTION_LEN} characters)")
        # --name=value: a value starting with '-' stays a value, never an option.
        args.append(f"--{name}={text.strip()}")
    if not args:
        return {}
    try:
        proc = await asyncio.create_subprocess_exec(
            command, "units", *args, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={"LANG": "C.UTF-8", "PATH": "/usr/local/bin:/usr/bin:/bin"})
    except OSError as e:
        raise RuntimeError(f"cannot run {command!r} to read the options "
                           f"(GpusliceSpawner.gpuslice_command): {e}") from None
    out, err = await proc.communicate()
    text = err.decode("utf-8", "replace").strip()
    if text.startswith("error: "):
        text = text[len("error: "):]
    if proc.returncode == 2:
        # "fraction '2' is more than one GPU", "mem: memory '10 parsecs': ...": the field first.
        field = next((f for f in FIELDS if text.startswith(f)), None)
        raise OptionError(field, text or "refused by gpuslice units")
    if proc.returncode != 0:
        raise RuntimeError(f"{command} units failed (exit {proc.returncode}): {text[-300:]}")
    got = json.loads(out.decode())
    return {"fraction": got.get("fraction_milli"), "mem": got.get("mem_bytes"),
            "time": got.get("time_us")}


def human_us(us):
    s = int(us // 1_000_000)
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if s and s % n == 0:
            return f"{s // n}{unit}"
    return f"{s}s"


def preset_summary(p):
    """'0.25 GPU, 10GiB, 8h' from a preset's values."""
    parts = []
    if p.get("fraction"):
        parts.append(f"{p['fraction']} GPU")
    if p.get("mem"):
        parts.append(str(p["mem"]))
    if p.get("time"):
        parts.append(str(p["time"]))
    if p.get("queue"):
        parts.append(f"queue {p['queue']}")
    return ", ".join(parts) or "the queue's defaults"


def check_presets(presets):
    """The admin's presets must be a list of dicts with a unique 'name' and known keys."""
    known = {"name", "display_name", "description", "default", "queue"} | set(FIELDS)
    names = set()
    for i, p in enumerate(presets):
        if not isinstance(p, dict) or not isinstance(p.get("name"), str) or not p["name"]:
            raise RuntimeError(f"GpusliceSpawner.presets[{i}]: each preset needs a 'name'")
        extra = sorted(set(p) - known)
        if extra:
            raise RuntimeError(f"GpusliceSpawner.presets[{i}] ({p['name']}): unknown key "
                               f"{extra[0]!r} (known: {', '.join(sorted(known))})")
        if p["name"] in names:
            raise RuntimeError(f"GpusliceSpawner.presets: {p['name']!r} is defined twice")
        names.add(p["name"])


def options_form(spawner, values=None, errors=None):
    """The form's HTML. `values` (what the user sent last) are put back, `errors` ({field:
    message}) shown under their fields. Every text is escaped."""
    values = values or {}
    errors = errors or {}
    esc = html.escape
    out = []

    def error_of(name):
        msg = errors.get(name)
        return (f'<span class="help-block gpuslice-error" id="gs-{name}-error">{esc(msg)}</span>'
                if msg else "")

    presets = list(spawner.presets)
    if presets:
        chosen = values.get("preset") or next((p["name"] for p in presets if p.get("default")),
                                              presets[0]["name"])
        items = []
        for p in presets:
            pid = esc(p["name"])
            title = esc(p.get("display_name") or p["name"])
            desc = esc(p.get("description") or "")
            checked = " checked" if p["name"] == chosen else ""
            items.append(
                f'<div class="radio"><label><input type="radio" name="preset" value="{pid}"{checked}> '
                f'<strong>{title}</strong>: {esc(preset_summary(p))}'
                f'{f" <span class=text-muted>{desc}</span>" if desc else ""}</label></div>')
        cls = "form-group has-error" if errors.get("preset") else "form-group"
        out.append(f'<div class="{cls}" id="gs-presets"><label>Size</label>{"".join(items)}'
                   f'{error_of("preset")}</div>')
    if spawner.allowed_queues:
        q = values.get("queue") or spawner.queue
        opts = "".join(f'<option value="{esc(x)}"{" selected" if x == q else ""}>{esc(x)}</option>'
                       for x in [spawner.queue] + list(spawner.allowed_queues))
        out.append(f'<div class="form-group"><label for="gs-queue">gpuslice queue</label>'
                   f'<select class="form-control" id="gs-queue" name="queue">{opts}</select>'
                   f'{error_of("queue")}</div>')
    free = spawner.free_field_names()
    if presets and free:
        out.append('<p class="text-muted">Optional: change the preset\'s values below '
                   '(empty: the preset\'s).</p>')
    hints = {"fraction": f"e.g. 0.25 or 250m ({spawner.min_fraction} to {spawner.max_fraction})",
             "mem": "e.g. 10GiB" + (f"; at most {spawner.max_memory}" if spawner.max_memory else "")
                    + "; empty: in proportion to the share",
             "time": "e.g. 4h; empty: the queue's limit"}
    defaults = {"fraction": spawner.default_fraction, "mem": spawner.default_memory,
                "time": spawner.default_time}
    for name in FIELDS:
        if name not in free:
            continue
        value = values.get(name, "" if presets else defaults[name])
        cls = "form-group has-error" if errors.get(name) else "form-group"
        out.append(f'<div class="{cls}"><label for="gs-{name}">{esc(_LABELS[name])}</label>'
                   f'<input class="form-control" id="gs-{name}" name="{name}" value="{esc(str(value))}" '
                   f'placeholder="{esc(hints[name])}">{error_of(name)}</div>')
    if errors.get(None):
        out.append(f'<p class="text-danger gpuslice-error">{esc(errors[None])}</p>')
    return "".join(out)


def from_form(formdata):
    """The submitted form as user_options: the known fields that are not empty."""
    out = {}
    for key in FIELDS + ("queue", "preset"):
        v = formdata.get(key, [""])
        v = v[0] if isinstance(v, list) and v else v
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        if isinstance(v, str) and v.strip():
            out[key] = v.strip()
    return out
