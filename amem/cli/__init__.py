"""The ``amem`` command (``python -m amem``): argparse subcommands over the async API."""

from .commands import main

__all__ = ["main"]
