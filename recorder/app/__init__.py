"""The composition root: one config builds the recorder and everything around it
(``compose``), for ``recorder proxy``, ``recorder demo`` and the mitmproxy script
(``script``)."""

from recorder.app.banner import banner_lines
from recorder.app.compose import App, StartError, build, open_store, quiet_migrations

__all__ = ["App", "StartError", "banner_lines", "build", "open_store", "quiet_migrations"]
