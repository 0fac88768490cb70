"""The ``amem`` command (``python -m amem``): argparse subcommands over the async API."""

from .app import main

__all__ = ["main"]
