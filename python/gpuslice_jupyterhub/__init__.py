"""JupyterHub on gpuslice: each user's single-user server is a gpuslice job of that user.

    c.JupyterHub.spawner_class = "gpuslice_jupyterhub.GpusliceSpawner"

See docs/notebooks.md. Needs only what Debian 12 ships (jupyterhub 3.0, tornado, traitlets).
"""

from .spawner import GpusliceSpawner, parse_fraction, parse_bytes, parse_duration

__all__ = ["GpusliceSpawner", "parse_fraction", "parse_bytes", "parse_duration"]
