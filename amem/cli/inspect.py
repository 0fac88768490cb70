"""``inspect``: the read-only web page over the database (``amem.inspector``)."""

from __future__ import annotations

import argparse
import sys

from ..errors import InvalidInput
from .common import Command, settings_for
from .options import database_of, refuse_sqlite_only


def add_commands(command: Command) -> None:
    inspect = command(
        "inspect",
        run_inspect,
        "browse the database in a local web page (read-only)",
        (
            "Serve a read-only web page on 127.0.0.1 (never on another address) over the "
            "database: scopes with their counts, each scope's memories with their validity "
            "intervals (and an as_of control), its timeline of events, search with score "
            "components, and each memory's corrections and relations drawn as a small graph. "
            "The file is opened read-only: never created, never migrated, never written. "
            "The URL goes to stderr (with --persona/--project: that scope's page); Ctrl-C "
            "stops. Runs on asyncio."
        ),
    )
    inspect.add_argument(
        "--port", type=int, default=0, help="TCP port on 127.0.0.1 (default 0: a free one)"
    )
    inspect.add_argument("--open", action="store_true", help="open the page in a web browser")


async def run_inspect(args: argparse.Namespace) -> int:
    from urllib.parse import urlencode

    import anyio.to_thread

    # imported here: only this command needs starlette and uvicorn loaded
    from ..inspector.app import create_app
    from ..inspector.server import serve
    from ..inspector.source import readable_file

    if args.backend != "asyncio":  # uvicorn serves on asyncio only
        raise InvalidInput("amem inspect runs on asyncio; leave out --backend trio")
    if not 0 <= args.port <= 65535:
        raise InvalidInput("--port must be between 0 and 65535")
    settings = settings_for(args)
    database = database_of(args, settings)
    if isinstance(database, str):  # a PostgreSQL URL: the inspector reads a file
        refuse_sqlite_only("inspect")
    path = await anyio.to_thread.run_sync(readable_file, database)
    scope = {"persona": settings.default_persona, "project": settings.default_project}
    start = "/scope?" + urlencode(scope) if args.persona or args.project else "/"

    def announce(url: str) -> None:
        print(f"amem inspect: serving {path} read-only at {url} (Ctrl-C stops)", file=sys.stderr)

    await serve(
        create_app(path, settings),
        port=args.port,
        path=start,
        announce=announce,
        open_browser=args.open,
    )
    return 0
