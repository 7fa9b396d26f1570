"""JupyterHub on gpuslice: each user's single-user server is a gpuslice job of that user.

    c.JupyterHub.spawner_class = "gpuslice_jupyterhub.GpusliceSpawner"
    c.JupyterHub.template_paths = [gpuslice_jupyterhub.TEMPLATE_DIR]  # why a server stopped

See docs/notebooks.md. Needs only what Debian 12 ships (jupyterhub 3.0, tornado, traitlets).
"""

import os

from .spawner import GpusliceSpawner

# The hub's home and "not running" pages with what gpuslice did to the last server (an idle
# reclaim, a time limit): they extend the hub's own templates.
TEMPLATE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")

__all__ = ["GpusliceSpawner", "TEMPLATE_DIR"]
