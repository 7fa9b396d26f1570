"""gpuslice's classic-notebook (Notebook 6) extension.

Server side (this package, loaded through `nbserver_extensions`):
  GET  <base_url>gpuslice/status  the job's state and any idle / time-limit warning, read from
                                  GET /v1/jobs/$GPUSLICE_JOB_ID over the daemon's socket; not
                                  counted as activity (polling must not keep a session alive).
  POST <base_url>gpuslice/keep    "Keep my session": reports activity now, as the server's own
                                  uid (the job's owner, so the daemon's peer credentials
                                  authorise it).
  Without a hub (plain `gpuslice submit -- jupyter notebook`), it also reports the server's
  activity (its kernel manager: busy kernels, last activity) to the daemon every
  $JUPYTER_GPUSLICE_REPORT_INTERVAL seconds (default 60). Under JupyterHub the spawner
  reports instead; JUPYTER_GPUSLICE_REPORT=1 / 0 forces either way.
Front end (share/nbextensions/gpuslice/main.js): polls the status, shows a banner with the
countdown when gpuslice warns, saves open notebooks, and offers "Keep my session".

Nothing is installed into the user's environment: put this package's parent directory on
PYTHONPATH, etc/ on JUPYTER_CONFIG_PATH and share/ on JUPYTER_PATH (the spawner does;
docs/notebooks.md shows it for plain submit). Importing this module imports nothing from
notebook, so the hub can import gpuslice_jupyter.client without it.
"""

import os

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG_DIR = os.path.join(HERE, "etc")   # for JUPYTER_CONFIG_PATH
DATA_DIR = os.path.join(HERE, "share")   # for JUPYTER_PATH (nbextensions/gpuslice/main.js)


def _jupyter_server_extension_paths():
    return [{"module": "gpuslice_jupyter"}]


def _jupyter_nbextension_paths():
    return [{"section": "notebook", "src": "share/nbextensions/gpuslice",
             "dest": "gpuslice", "require": "gpuslice/main"}]


def load_jupyter_server_extension(nb_app):
    from . import server  # needs notebook and tornado: only inside a notebook server
    server.load(nb_app)
