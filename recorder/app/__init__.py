"""The composition root: one config builds the recorder and everything around it
(``compose``), for ``recorder proxy``, ``recorder demo`` and the mitmproxy script
(``script``)."""

import logging

# Alembic logs at INFO when it is imported (its plugins) and at every migration
# step: under mitmdump, whose console shows INFO, that is a screenful of noise on
# every start. The store imports it below, so this comes first.
logging.getLogger("alembic").setLevel(logging.WARNING)

from recorder.app.banner import banner_lines  # noqa: E402
from recorder.app.compose import App, StartError, build, open_store, quiet_migrations  # noqa: E402

__all__ = ["App", "StartError", "banner_lines", "build", "open_store", "quiet_migrations"]
