"""PostgreSQL behind the same connection interface as SQLite.

The store speaks one SQL: SQLite's, written so that PostgreSQL can run it after a few
mechanical rewrites (``spelling``). ``PgConnection`` wraps a synchronous psycopg 3
connection so that it looks, to every function of a connection above this module, like
the ``sqlite3.Connection`` it is written for: ``execute`` with ``?`` and ``:name``
parameters, cursors whose ``fetchone`` returns None after a statement with no rows, and
errors raised as ``sqlite3`` exceptions with the SQLite result code that means the same
(a lock timeout is ``SQLITE_BUSY``, a full disk ``SQLITE_FULL``, a constraint
``IntegrityError``), so the writer's group commit, the busy retries and the error codes
callers see stay one copy for both databases.

Writes are serialised as SQLite serialises them: ``begin immediate`` takes a
transaction-scoped advisory lock (``WRITE_LOCK``) that every amem process on the database
shares, so read-then-write paths stay correct across processes and hosts, and row numbers
(``events.seq``, ``search_docs.num``) follow commit order as the search index expects. A
reader's ``begin`` opens a read-only repeatable-read transaction: one snapshot for every
statement, as a WAL read transaction gives.

Values are bound on the client (psycopg's ``ClientCursor``): SQLite infers nothing from a
parameter, and neither should PostgreSQL (``? is null`` has no type to infer).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from decimal import Decimal
from functools import lru_cache
from typing import Any, TypeVar

import anyio

from .drivers import BUSY_TIMEOUT_MS

T = TypeVar("T")


WRITE_LOCK = 0x616D656D
"""The advisory lock a write transaction holds ("amem"): one writer at a time per database."""
LOCK_TIMEOUT_MS = BUSY_TIMEOUT_MS
"""How long a statement waits for another process's lock: as long as a SQLite write waits
for the file's, and the writer's retries then apply alike (``writer.begin_immediate``)."""


def without_password(url: str) -> str:
    """``url`` as amem may show it: its password, if any, left out."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}@{host}" if user else host))


def is_postgres(conn: object) -> bool:
    """Whether a connection handed to a store function is PostgreSQL's."""
    return isinstance(conn, PgConnection)


class PgCursor:
    """The part of ``sqlite3.Cursor`` the store uses, over a psycopg cursor."""

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor

    @property
    def rowcount(self) -> int:
        return int(self._cursor.rowcount)

    @property
    def lastrowid(self) -> int | None:
        """The number of the row an insert into a row-numbered table stored (``spelling``
        makes it return it), None when it stored none (``on conflict do nothing``)."""
        row = self.fetchone()
        return None if row is None else int(row[0])

    @property
    def description(self) -> Any:
        return self._cursor.description

    def fetchone(self) -> tuple[Any, ...] | None:
        if self._cursor.description is None:
            return None
        with translated_errors():
            return self._cursor.fetchone()  # type: ignore[no-any-return]

    def fetchall(self) -> list[tuple[Any, ...]]:
        if self._cursor.description is None:
            return []
        with translated_errors():
            return self._cursor.fetchall()  # type: ignore[no-any-return]

    def fetchmany(self, size: int) -> list[tuple[Any, ...]]:
        if self._cursor.description is None:
            return []
        with translated_errors():
            return self._cursor.fetchmany(size)  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self.fetchall())


Params = Sequence[Any] | Mapping[str, Any]


class PgConnection:
    """A psycopg connection that takes the store's SQLite-spelled statements."""

    def __init__(self, conn: Any, *, readonly: bool) -> None:
        self._conn = conn
        self.readonly = readonly
        self._must_stop: Callable[[], int] | None = None

    def set_progress_handler(self, handler: Callable[[], int] | None, steps: int) -> None:
        """SQLite asks ``handler`` every ``steps`` steps of a statement and interrupts it
        when it returns non-zero; here it is asked before each statement."""
        self._must_stop = handler

    @classmethod
    def connect(cls, url: str, *, readonly: bool) -> PgConnection:
        import psycopg

        with translated_errors():
            conn = psycopg.connect(
                url, autocommit=True, cursor_factory=psycopg.ClientCursor, connect_timeout=10
            )
        booleans, numerics = sqlite_values()
        conn.adapters.register_dumper(bool, booleans)
        conn.adapters.register_loader("numeric", numerics)
        conn.execute(f"set lock_timeout = {LOCK_TIMEOUT_MS}")
        return cls(conn, readonly=readonly)

    @property
    def in_transaction(self) -> bool:
        from psycopg.pq import TransactionStatus

        return bool(self._conn.info.transaction_status != TransactionStatus.IDLE)

    def execute(self, sql: str, params: Params = ()) -> PgCursor:
        if self._must_stop is not None and self._must_stop():
            raise sqlite3.OperationalError("interrupted")
        statement = sql.strip().lower()
        if statement == "begin immediate":
            return self._begin_writing()
        if statement == "begin" and self.readonly:
            sql = "begin isolation level repeatable read read only"
        with translated_errors():
            return PgCursor(self._conn.execute(spelling(sql), bound(params)))

    def executemany(self, sql: str, rows: Sequence[Params]) -> PgCursor:
        with translated_errors():
            cursor = self._conn.cursor()
            cursor.executemany(spelling(sql), [bound(row) for row in rows])
            return PgCursor(cursor)

    def _begin_writing(self) -> PgCursor:
        with translated_errors():
            self._conn.execute("begin")
            try:
                self._conn.execute(f"select pg_advisory_xact_lock({WRITE_LOCK})")
            except BaseException:
                self._conn.execute("rollback")
                raise
            return PgCursor(self._conn.cursor())

    def close(self) -> None:
        self._conn.close()


def bound(params: Params) -> Params:
    """SQLite's parameters, as psycopg takes them (a dict stays a dict)."""
    return params if isinstance(params, Mapping) else list(params)


@lru_cache(maxsize=1)
def sqlite_values() -> tuple[type[Any], type[Any]]:
    """The dumper and loader through which PostgreSQL's values read as SQLite's; defined
    on first use, so that psycopg is imported only when a PostgreSQL database is opened."""
    from psycopg.adapt import Dumper, Loader

    class BoolDumper(Dumper):
        """Booleans as 1 and 0, as SQLite stores them (``memories.pinned`` is an integer)."""

        def dump(self, obj: bool) -> bytes:
            return b"1" if obj else b"0"

    class NumericLoader(Loader):
        """``sum`` of integers is ``numeric`` in PostgreSQL and an integer in SQLite."""

        def load(self, data: Any) -> int | float:
            number = Decimal(bytes(data).decode())
            return int(number) if number == number.to_integral_value() else float(number)

    return BoolDumper, NumericLoader


SQLSTATE_CODES = {
    "55P03": (sqlite3.OperationalError, sqlite3.SQLITE_BUSY, "SQLITE_BUSY"),  # lock_timeout
    "40P01": (sqlite3.OperationalError, sqlite3.SQLITE_BUSY, "SQLITE_BUSY"),  # deadlock
    "40001": (sqlite3.OperationalError, sqlite3.SQLITE_BUSY, "SQLITE_BUSY"),  # serialization
    "53100": (sqlite3.OperationalError, sqlite3.SQLITE_FULL, "SQLITE_FULL"),  # disk full
}


@contextmanager
def translated_errors() -> Iterator[None]:
    """Raise a psycopg error as the ``sqlite3`` exception that means the same, with the
    psycopg error as its cause; its message never holds the connection URL."""
    import psycopg

    try:
        yield
    except psycopg.Error as exc:
        raise as_sqlite_error(exc) from exc


def as_sqlite_error(exc: Any) -> sqlite3.Error:
    import psycopg

    state = exc.sqlstate or ""
    kind, code, name = SQLSTATE_CODES.get(
        state, (sqlite3.DatabaseError, sqlite3.SQLITE_ERROR, f"PostgreSQL {state or 'error'}")
    )
    if state.startswith("23"):  # integrity constraint violation
        kind, code, name = sqlite3.IntegrityError, sqlite3.SQLITE_CONSTRAINT, "SQLITE_CONSTRAINT"
    elif isinstance(exc, psycopg.OperationalError) and state not in SQLSTATE_CODES:
        kind, name = sqlite3.OperationalError, f"PostgreSQL {state or 'connection'}"
    primary = getattr(getattr(exc, "diag", None), "message_primary", None)
    error = kind(primary or type(exc).__name__)
    error.sqlite_errorcode = code
    error.sqlite_errorname = name
    return error


# --- spelling: SQLite's SQL as PostgreSQL reads it -------------------------------------

QUOTED = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"")
NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
PARAMETER = r"(?:\?|:[A-Za-z_]\w*)"
IS_VALUE = re.compile(rf"\bis\s+(not\s+)?({PARAMETER}|[a-z_]\w*\.[a-z_]\w*)", re.IGNORECASE)
WORDS = (
    (re.compile(r"\bnot\s+indexed\b", re.IGNORECASE), ""),
    (re.compile(r"\bindexed\s+by\s+\w+", re.IGNORECASE), ""),
    (re.compile(r"\bgroup_concat\(", re.IGNORECASE), "string_agg("),
    (re.compile(r"\bchar\((\d+)\)", re.IGNORECASE), r"chr(\1)"),
    # SQLite's unary + on a column (``+m.persona``) only steers its planner off an index;
    # PostgreSQL has no unary + for text
    (re.compile(r"(^|\(|\band\s|\bor\s|\bwhere\s)(\s*)\+(?=[a-z_]\w*\.\w)", re.I | re.M), r"\1\2"),
)
INSERT_OR_IGNORE = re.compile(r"\binsert\s+or\s+ignore\s+into\b", re.IGNORECASE)
RETURNING = re.compile(r"\breturning\b", re.IGNORECASE)
INSERT_INTO = re.compile(r"^\s*insert\s+(?:or\s+ignore\s+)?into\s+(\w+)", re.IGNORECASE)
ROW_NUMBERS = {
    "events": "seq",
    "memories": "num",
    "search_docs": "num",
    "vectors": "num",
    "checkpoints": "num",
    "assignments": "num",
    "consolidation_runs": "num",
}
"""The row-numbered tables (SQLite's ``integer primary key``) and their number's column:
an insert into one returns the number, which ``PgCursor.lastrowid`` reads (PostgreSQL
has no implicit row ID, and SQLite's ``returning`` costs its insert two thirds more)."""
FUNCTION = re.compile(r"\b(max|min|json_each|cast)\(", re.IGNORECASE)
CAST = re.compile(r"^(.*)\s+as\s+(blob|real|integer)\s*$", re.IGNORECASE | re.DOTALL)
CAST_TYPES = {"real": "double precision", "integer": "bigint"}


@lru_cache(maxsize=2048)
def spelling(sql: str) -> str:
    """``sql`` (SQLite's) as PostgreSQL and psycopg take it: ``%s`` and ``%(name)s``
    parameters, a literal ``%`` doubled, and SQLite's functions and clauses in
    PostgreSQL's words. Quoted text is left as it is (but for ``%``)."""
    pieces = []
    last = 0
    for quoted in QUOTED.finditer(sql):
        pieces.append(_spell_code(sql[last : quoted.start()]))
        pieces.append(quoted.group().replace("%", "%%"))
        last = quoted.end()
    pieces.append(_spell_code(sql[last:]))
    text = "".join(pieces)
    if INSERT_OR_IGNORE.search(text):
        text = INSERT_OR_IGNORE.sub("insert into", text) + " on conflict do nothing"
    inserted = INSERT_INTO.match(text)
    if inserted and inserted.group(1).lower() in ROW_NUMBERS and not RETURNING.search(text):
        text = f"{text.rstrip()} returning {ROW_NUMBERS[inserted.group(1).lower()]}"
    return text


def _spell_code(code: str) -> str:
    code = code.replace("%", "%%")
    code = IS_VALUE.sub(_is_value, code)
    for pattern, replacement in WORDS:
        code = pattern.sub(replacement, code)
    code = _spell_functions(code)
    code = code.replace("?", "%s")
    return NAMED.sub(r"%(\1)s", code)


def _is_value(found: re.Match[str]) -> str:
    """``x is ?`` compares with NULL as equal; PostgreSQL says that ``is not distinct from``."""
    negated, value = found.group(1), found.group(2)
    if value.lower() in ("null", "not"):
        return found.group()
    return f"is {'' if negated else 'not '}distinct from {value}"


def _spell_functions(code: str) -> str:
    """``max(a, b)`` is ``greatest``, ``min(a, b)`` ``least`` (one argument: the
    aggregate, as it is); ``json_each(x)`` is ``json_array_elements_text``; a cast to
    ``blob`` is the text's UTF-8 bytes, to ``real`` and ``integer`` their 64-bit types."""
    out = []
    position = 0
    while (found := FUNCTION.search(code, position)) is not None:
        name = found.group(1).lower()
        start = found.end()
        end, commas = _closing(code, start)
        inner = _spell_functions(code[start:end])
        out.append(code[position : found.start()])
        cast = CAST.match(inner) if name == "cast" else None
        if name == "json_each":
            out.append(f"json_array_elements_text(cast({inner} as json))")
        elif cast is not None and cast.group(2).lower() == "blob":  # its UTF-8 bytes
            out.append(f"convert_to({cast.group(1)}, 'UTF8')")
        elif cast is not None:
            out.append(f"cast({cast.group(1)} as {CAST_TYPES[cast.group(2).lower()]})")
        elif commas:
            out.append(f"{'greatest' if name == 'max' else 'least'}({inner})")
        else:
            out.append(f"{found.group(1)}({inner})")
        position = end + 1
    out.append(code[position:])
    return "".join(out)


def _closing(code: str, start: int) -> tuple[int, bool]:
    """The index of the parenthesis closing the one before ``start``, and whether a comma
    stands at its top level."""
    depth, commas = 0, False
    for index in range(start, len(code)):
        char = code[index]
        if char == "(":
            depth += 1
        elif char == ")":
            if depth == 0:
                return index, commas
            depth -= 1
        elif char == "," and depth == 0:
            commas = True
    raise ValueError(f"unbalanced parentheses in: {code[:80]}")


# --- the driver ---------------------------------------------------------------------------


class PgDriver:
    """A ``PgConnection`` behind the driver interface of ``drivers.Connection``: each job
    runs in a worker thread, one at a time, on asyncio and trio alike. A caller cancelled
    while its job runs waits for it to finish (the job is never cut in half)."""

    def __init__(self, conn: PgConnection) -> None:
        self._conn: PgConnection | None = conn
        self._one_at_a_time = anyio.CapacityLimiter(1)

    @classmethod
    async def open(cls, url: str, *, readonly: bool) -> PgDriver:
        conn = await anyio.to_thread.run_sync(lambda: PgConnection.connect(url, readonly=readonly))
        return cls(conn)

    async def run(self, fn: Callable[[Any], T]) -> T:
        conn = self._conn
        if conn is None:
            raise ValueError("connection closed")
        return await anyio.to_thread.run_sync(fn, conn, limiter=self._one_at_a_time)

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(conn.close, limiter=self._one_at_a_time)
