"""``doctor``: is this database healthy, and if not, how to fix it.

Checks the schema version, SQLite's ``integrity_check`` and ``foreign_key_check``, the
FTS5 index against its content table (``integrity-check``: ``PRAGMA integrity_check``
does not see FTS drift), search coverage (the index holds exactly what ``search.index``
says it holds: nothing missing, no row pointing at anything else), text that does not
decode, whether an export would import (the rows as export reads them, through import's
own validation), orphans (a correction event without its memory, a memory a correction
revoked without the link to it, links and memories pointing at nothing), ownership
(every person an event, a memory, a memory's ``about`` or a state names is in its
scope's registry; a memory belongs to its source event's person; the folded names match
the registry), extractions left pending or failed, vector coverage and interrupted
reindexes, capacity counters against the rows they count and scopes near their capacity
limits, and reports table counts.

On PostgreSQL the same checks run, but for what the server keeps itself: its pages
(``integrity``: it has checksums and ``amcheck``) and the encoding of text (it checks text
as it stores it; the database's encoding must be UTF-8). Foreign keys are counted from
its catalog (``broken_references``), as SQLite's ``foreign_key_check`` counts them.

Also the index rebuild a schema migration runs when the search tokens change
(``reindex_for_migration``). Every rebuild indexes through ``index.index_doc``, which
reads each row's people, so documents keep their person tokens.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import closing

from ..config import Settings
from ..db.postgres import is_postgres
from ..db.schema import SCHEMA_VERSION, stored_version
from ..models import DoctorCheck, DoctorReport, Progress
from ..search import index, postings, vector_rows
from ..search.text import segment_all
from ..store import capacity, people
from . import archive, catalog

log = logging.getLogger("amem")

COUNTED = (
    "events",
    "memories",
    "relations",
    "checkpoints",
    "personas",
    "capture_cursors",
    "erased_events",
    "vectors",
    "search_docs",
    "people",
    "person_names",
    "assignments",
    "states",
)
UNINDEXED = f"""
select
  (select count(*) from memories m where {index.INDEXED_MEMORY} and not exists
     (select 1 from search_docs d where d.doc_kind = 'memory' and d.ref = m.id))
+ (select count(*) from events e where {index.INDEXED_EVENT} and not exists
     (select 1 from search_docs d where d.doc_kind = 'event' and d.ref = e.id))
"""
ORPHANED = f"""
select count(*) from search_docs d where
  (d.doc_kind = 'memory' and not exists
     (select 1 from memories m where m.id = d.ref and {index.INDEXED_MEMORY}))
  or (d.doc_kind = 'event' and not exists
     (select 1 from events e where e.id = d.ref and {index.INDEXED_EVENT}))
"""
SOURCES = f"""
select 'event', id, persona, project, text from events e where {{indexed_event}}
union all
select 'memory', id, persona, project, text from memories m where {index.INDEXED_MEMORY}
"""
SELECT_SOURCES = SOURCES.format(indexed_event=index.INDEXED_EVENT)
MIGRATION_SOURCES = SOURCES.format(indexed_event=index.INDEXED_CATEGORY)
"""What the v5 migration indexes: its file has no ``evicted_at`` yet (nothing is evicted)."""
EXTRACTIONS = (
    "select status, count(*) from events where status in ('pending', 'failed') group by status"
)
FAILED_SHOWN = 5
"""Failed events ``doctor`` names (oldest first); the count covers them all."""
FAILED_EVENTS = f"""
select persona, project, id, error from events where status = 'failed'
order by seq limit {FAILED_SHOWN}
"""
STAGED = "select count(*) from vectors where fingerprint like 'staging:%'"
REBUILD_HINT = "run `amem doctor --rebuild-index` (rebuilds the search index from the data)"
RESTORE_HINT = "restore the latest backup (`amem restore`) into a new file"
REPAIR_HINT = f"{RESTORE_HINT}, or repair or delete the named row with the sqlite3 shell"
REIMPORT_HINT = "export what is readable (`amem export`) and import it into a new file"
RECOUNT_HINT = "run `amem doctor --rebuild-index` (also counts every scope's usage anew)"
ORPHAN_HINT = (
    "erase what is left with `amem delete --event ID --yes` (a correction event) or "
    f"`amem delete --memory ID --yes` (a memory, with its source event), or {RESTORE_HINT}"
)
ORPHANS = (
    (
        "correction events without their memory",
        """select count(*), min(e.id) from events e where e.category = 'correction'
        and not exists (select 1 from memories m where m.event_id = e.id)""",
    ),
    (
        # A retraction may give no reason, so a revoked memory without one is healthy; one
        # revoked by a correction (at the moment its correction event was stored) must
        # still be the target of that correction's link.
        "memories revoked by a correction without the link to it",
        """select count(*), min(m.id) from memories m
        where m.revoked_at is not null and m.revoke_reason is null
        and not exists (select 1 from relations r where r.kind = 'corrects' and r.to_id = m.id)
        and (m.persona, m.project, m.revoked_at) in
            (select persona, project, ingested_at from events where category = 'correction')""",
    ),
    (
        "links pointing at no memory",
        """select count(*), min(r.from_id) from relations r
        where not exists (select 1 from memories m where m.id = r.from_id)
        or not exists (select 1 from memories m where m.id = r.to_id)""",
    ),
    (
        "memories whose source event is gone",
        """select count(*), min(m.id) from memories m
        where not exists (select 1 from events e where e.id = m.event_id)""",
    ),
)
"""What a lost correction lineage (or a write around amem) leaves: each kind of orphan and
the SQL counting it, with its first ID."""
NO_PERSON = """not exists (select 1 from people p
    where p.persona = {row}.persona and p.project = {row}.project and p.id = {column})"""
OWNERSHIP = (
    (
        "events belonging to a person not in their scope's registry",
        f"""select count(*), min(e.id) from events e
        where e.person is not null and {NO_PERSON.format(row="e", column="e.person")}""",
    ),
    (
        "memories belonging to a person not in their scope's registry",
        f"""select count(*), min(m.id) from memories m
        where m.person is not null and {NO_PERSON.format(row="m", column="m.person")}""",
    ),
    (
        "memories about a person not in their scope's registry",
        f"""select count(*), min(m.id) from memories m
        where m.about is not null and case when {{json_list}} then exists (
            select 1 from json_each(m.about) a
            where {NO_PERSON.format(row="m", column="a.value")}) else true end""",
    ),
    (
        "memories belonging to another person than their source event",
        """select count(*), min(m.id) from memories m join events e on e.id = m.event_id
        where m.person is not e.person""",
    ),
    (
        "states of a person not in their scope's registry",
        f"""select count(*), min(s.person) from states s
        where s.person != '' and {NO_PERSON.format(row="s", column="s.person")}""",
    ),
)
"""What a write around amem can leave of ownership: each kind of row naming a person it
must not, and the SQL counting it, with its first ID (``{json_list}``: ``JSON_LIST``)."""
JSON_LIST = "json_valid(m.about)"
"""Whether a memory's ``about`` can be read as JSON (``case`` reads it only then)."""
JSON_SPACE = r"[ \t\n\r]*"
JSON_STRING = r'"([^"\\[:cntrl:]]|\\(["\\/bfnrt]|u[0-9a-fA-F]{4}))*"'
PG_JSON_LIST = (
    rf"m.about ~ '^\[{JSON_SPACE}({JSON_STRING}({JSON_SPACE},{JSON_SPACE}{JSON_STRING})*)?"
    rf"{JSON_SPACE}\]$'"
)
"""The same on PostgreSQL, which has no ``json_valid`` before version 16, and whose cast
to ``json`` fails the whole query: a JSON list of strings, as amem writes it."""
SERVER_ENCODING = "select current_setting('server_encoding')"
PG_ENCODING_HINT = "create the database with ENCODING 'UTF8' and load an export of this one into it"
OWNERSHIP_HINT = (
    "add the missing person with that ID (`upsert_person`), or move the events to a person "
    f"of the registry (`assign`, which moves their memories too); or {RESTORE_HINT}"
)


def examine(
    conn: sqlite3.Connection, settings: Settings, row_checks: Sequence[DoctorCheck] = ()
) -> DoctorReport:
    """Every check, run on one connection (the FTS check needs a writable one), with the
    ``row_checks`` already run on a read snapshot."""
    postgres = is_postgres(conn)
    checks = [
        schema_check(conn),
        *(server_checks(conn) if postgres else file_checks(conn)),
        index_check(conn),
        count_check(conn, "search coverage", UNINDEXED, "current memories or events not indexed"),
        count_check(conn, "search orphans", ORPHANED, "index rows pointing at nothing"),
        *row_checks,
        *extraction_checks(conn),
        *vector_checks(conn, settings),
        capacity_check(conn),
    ]
    counts = {t: conn.execute(f"select count(*) from {t}").fetchone()[0] for t in COUNTED}
    return DoctorReport(
        ok=all(check.ok or check.severity != "error" for check in checks),
        schema_version=stored_version(conn),
        checks=checks,
        counts=counts,
    )


def schema_check(conn: sqlite3.Connection) -> DoctorCheck:
    version = stored_version(conn)
    return DoctorCheck(
        name="schema version",
        ok=version == SCHEMA_VERSION,
        detail=f"version {version}",
        fix=None if version == SCHEMA_VERSION else "open the database with amem once to migrate it",
    )


def skipped(name: str, why: str) -> DoctorCheck:
    """A check this database does not take, and why: it passes, saying so."""
    return DoctorCheck(name=name, ok=True, detail=f"not checked on PostgreSQL: {why}", fix=None)


def file_checks(conn: sqlite3.Connection) -> list[DoctorCheck]:
    """SQLite's own checks of the file: its pages, and every foreign key."""
    return [
        pragma_check(conn, "integrity", "pragma integrity_check", ["ok"], RESTORE_HINT),
        pragma_check(conn, "foreign keys", "pragma foreign_key_check", [], REIMPORT_HINT),
    ]


def server_checks(conn: sqlite3.Connection) -> list[DoctorCheck]:
    """On PostgreSQL the server keeps its own pages; the foreign keys are counted anew
    (PostgreSQL enforces them, but a write with triggers off, as a replica's, does not)."""
    return [
        skipped("integrity", "the server checks its own pages (data checksums, amcheck)"),
        verdict("foreign keys", broken_references(conn), REIMPORT_HINT),
    ]


PG_FOREIGN_KEYS = """
select child.relname, parent.relname,
  array(select a.attname from unnest(k.conkey) with ordinality as c(attnum, n)
        join pg_catalog.pg_attribute a on a.attrelid = k.conrelid and a.attnum = c.attnum
        order by c.n),
  array(select a.attname from unnest(k.confkey) with ordinality as c(attnum, n)
        join pg_catalog.pg_attribute a on a.attrelid = k.confrelid and a.attnum = c.attnum
        order by c.n)
from pg_catalog.pg_constraint k
join pg_catalog.pg_class child on child.oid = k.conrelid
join pg_catalog.pg_class parent on parent.oid = k.confrelid
join pg_catalog.pg_namespace n on n.oid = k.connamespace
where k.contype = 'f' and n.nspname = current_schema()
order by child.relname, k.conname
"""


def broken_references(conn: sqlite3.Connection) -> str | None:
    """Rows whose foreign key names no row (a key with a NULL in it names none, as in
    SQLite's ``foreign_key_check``), counted per constraint from PostgreSQL's catalog."""
    problems = []
    for child, parent, columns, keys in conn.execute(PG_FOREIGN_KEYS).fetchall():
        present = " and ".join(f"c.{column} is not null" for column in columns)
        same = " and ".join(
            f"p.{key} = c.{column}" for key, column in zip(keys, columns, strict=True)
        )
        sql = f"""select count(*) from {child} c where {present}
            and not exists (select 1 from {parent} p where {same})"""
        count = conn.execute(sql).fetchone()[0]
        if count:
            problems.append(f"{count} in {child}")
    if not problems:
        return None
    return f"{len(problems)} problem(s), first: {problems[0]}"


def verdict(name: str, problem: str | None, fix: str) -> DoctorCheck:
    """A check that failed if it found a ``problem`` (which ``fix`` resolves)."""
    ok = problem is None
    return DoctorCheck(name=name, ok=ok, detail=problem or "ok", fix=None if ok else fix)


def counted_rows(conn: sqlite3.Connection, queries: Iterable[tuple[str, str]]) -> str | None:
    """The problem ``queries`` find (``(what, sql)`` pairs, the SQL counting the rows
    that are ``what`` with the first one's ID), each kind found named; None when none."""
    found = []
    for what, sql in queries:
        count, first = conn.execute(sql).fetchone()
        if count:
            found.append(f"{count} {what} (first: {first})")
    return "; ".join(found) or None


def pragma_check(
    conn: sqlite3.Connection, name: str, sql: str, healthy: list[str], fix: str
) -> DoctorCheck:
    rows = [str(row[0]) for row in conn.execute(sql).fetchmany(20)]
    problem = None if rows == healthy else f"{len(rows)} problem(s), first: {rows[0][:200]}"
    return verdict(name, problem, fix)


def index_check(conn: sqlite3.Connection) -> DoctorCheck:
    """The index's own check against ``search_docs`` (``Postings.check``)."""
    return verdict("search index", postings.of(conn).check(), REBUILD_HINT)


def count_check(conn: sqlite3.Connection, name: str, sql: str, what: str) -> DoctorCheck:
    count = conn.execute(sql).fetchone()[0]
    return verdict(name, f"{count} {what}" if count else None, REBUILD_HINT)


def row_checks(conn: sqlite3.Connection) -> list[DoctorCheck]:
    """The checks that read every row (about 40 s for a million events): run them on a
    read snapshot, so writers are not kept waiting for the write lock meanwhile."""
    return [
        text_check(conn),
        archive_check(conn),
        usage_check(conn),
        orphan_check(conn),
        ownership_check(conn),
        names_check(conn),
    ]


def ownership_check(conn: sqlite3.Connection) -> DoctorCheck:
    """Every person a row names is in its scope's registry, and a memory belongs to the
    person its source event belongs to."""
    json_list = PG_JSON_LIST if is_postgres(conn) else JSON_LIST
    queries = [(what, sql.format(json_list=json_list)) for what, sql in OWNERSHIP]
    return verdict("ownership", counted_rows(conn, queries), OWNERSHIP_HINT)


def names_check(conn: sqlite3.Connection) -> DoctorCheck:
    """``person_names`` holds exactly each person's folded display name and aliases."""
    drifted = people.names_drift(conn)
    problem = f"{drifted} people found by other names than they have" if drifted else None
    return verdict("person names", problem, REBUILD_HINT)


def orphan_check(conn: sqlite3.Connection) -> DoctorCheck:
    """Rows that lost what they belong to: correction events without their memory, memories
    a correction revoked without the link to it, links and memories pointing at nothing."""
    return verdict("orphans", counted_rows(conn, ORPHANS), ORPHAN_HINT)


def text_check(conn: sqlite3.Connection) -> DoctorCheck:
    """Every text cell of every table decodes as UTF-8. SQLite stores whatever bytes it
    is given; a cell written around amem can hold bytes no reader can decode. PostgreSQL
    checks text against the database's encoding as it stores it: there, the encoding must
    be UTF-8 (``SQL_ASCII`` checks nothing)."""
    if is_postgres(conn):
        [encoding] = conn.execute(SERVER_ENCODING).fetchone()
        problem = None if encoding == "UTF8" else f"the database's encoding is {encoding}"
        return verdict("text encoding", problem, PG_ENCODING_HINT)
    with archive.decoding(conn):
        bad = next(filter(None, (undecodable_row(conn, table) for table in COUNTED)), None)
    problem = None if bad is None else f"{bad}: a text cell is not valid UTF-8"
    return verdict("text encoding", problem, REPAIR_HINT)


def undecodable_row(conn: sqlite3.Connection, table: str) -> str | None:
    """The first row of ``table`` holding undecodable text, by name (blobs unread)."""
    columns = [column.name for column in catalog.columns(conn, table) if not column.blob]
    cursor = conn.execute(f"select {', '.join(columns)} from {table}")
    for number, values in enumerate(cursor, start=1):
        if any(value is archive.UNDECODABLE for value in values):
            return archive.row_name(table, dict(zip(columns, values, strict=True)), number)
    return None


def archive_check(conn: sqlite3.Connection) -> DoctorCheck:
    """Would this database's export import? Its rows, read as export reads them, through
    import's validation, each looked up against the database's other rows."""
    try:
        with closing(archive.dump_rows(conn)) as rows:
            for table, values, where in rows:
                archive.checked_row(conn, table, values, where)
        problem = None
    except archive.BadRow as exc:
        problem = f"an export would not import: {exc}"
    return verdict("archive", problem, REPAIR_HINT)


def usage_check(conn: sqlite3.Connection) -> DoctorCheck:
    """The capacity counters (``scope_usage``) agree with the rows they count."""
    drifted = capacity.usage_drift(conn)
    problem = None
    if drifted:
        persona, project = drifted[0]
        problem = (
            f"{len(drifted)} scope(s) counted wrong, first: {persona}/{project} "
            "(a write made around amem)"
        )
    return verdict("capacity accounting", problem, RECOUNT_HINT)


def capacity_check(conn: sqlite3.Connection) -> DoctorCheck:
    """A warning for every scope at ``NEAR_LIMIT`` (90%) or more of one of its limits."""
    limited, near = capacity.near_limits(conn)
    if not near:
        detail = (
            f"{limited} scope(s) with limits, none at 90% of one" if limited else "no limits set"
        )
        return DoctorCheck(
            name="capacity limits", ok=True, detail=detail, fix=None, severity="warning"
        )
    shown = "; ".join(
        f"{n.persona}/{n.project} holds {n.used:,} of {n.limit:,} {n.what} ({n.used / n.limit:.0%})"
        for n in near[:5]
    )
    more = f" (and {len(near) - 5} more)" if len(near) > 5 else ""
    return DoctorCheck(
        name="capacity limits",
        ok=False,
        severity="warning",
        detail=f"{shown}{more}",
        fix=(
            "raise the limit (`amem limits --persona P --project Q --max-events N "
            "--max-text-bytes N`) or delete what is no longer needed; at the limit, writes "
            "are refused (capacity_exceeded)"
        ),
    )


def extraction_checks(conn: sqlite3.Connection) -> list[DoctorCheck]:
    waiting = dict(conn.execute(EXTRACTIONS).fetchall())
    failed, pending = waiting.get("failed", 0), waiting.get("pending", 0)
    return [
        DoctorCheck(
            name="failed extractions",
            ok=not failed,
            detail=f"{failed} events failed extraction{failed_events(conn, failed)}",
            fix=(
                "fix the cause, then `amem retry --persona P --project Q` (each event's scope)"
                if failed
                else None
            ),
        ),
        DoctorCheck(
            name="pending extractions",
            ok=not pending,
            severity="warning",
            detail=f"{pending} events wait for extraction",
            fix="`amem retry` extracts them now (no daemon does)" if pending else None,
        ),
    ]


def failed_events(conn: sqlite3.Connection, failed: int) -> str:
    """``: P/Q ID (error); ...`` for the oldest failed events, ``(and N more)`` after them."""
    if not failed:
        return ""
    shown = "; ".join(
        f"{persona}/{project} {event_id} ({(error or 'no error recorded')[:200]})"
        for persona, project, event_id, error in conn.execute(FAILED_EVENTS)
    )
    more = f" (and {failed - FAILED_SHOWN} more)" if failed > FAILED_SHOWN else ""
    return f": {shown}{more}"


def vector_checks(conn: sqlite3.Connection, settings: Settings) -> list[DoctorCheck]:
    checks = []
    staged = conn.execute(STAGED).fetchone()[0]
    if staged:
        checks.append(
            DoctorCheck(
                name="interrupted reindex",
                ok=False,
                severity="warning",
                detail=f"{staged} staged vectors of an interrupted reindex",
                fix="`amem reindex` replaces them",
            )
        )
    if settings.embed_fingerprint is not None:
        checks.append(coverage_check(conn, settings.embed_fingerprint))
    return checks


def coverage_check(conn: sqlite3.Connection, fingerprint: str) -> DoctorCheck:
    """A warning when current memories or indexed events have no vector of the configured
    model, with the scopes that hold the most of them."""
    total = conn.execute(COUNT_SOURCES).fetchone()[0]
    scopes = vector_rows.unembedded_by_scope(conn, fingerprint)
    missing = sum(count for _, _, count in scopes)
    detail = (
        f"{total - missing} of {total} memories and events have a vector of the configured model"
    )
    if missing:
        shown = "; ".join(f"{persona}/{project} {count}" for persona, project, count in scopes[:5])
        more = f" (and {len(scopes) - 5} more scopes)" if len(scopes) > 5 else ""
        detail += f"; {missing} have none: {shown}{more}"
    return DoctorCheck(
        name="vector coverage",
        ok=not missing,
        severity="warning",
        detail=detail,
        fix=(
            "the next process that opens the file with embeddings configured (`amem serve`, "
            "`amem.open`, any amem command) embeds them in the background; "
            "`amem reindex --persona P --project Q` embeds a scope now"
            if missing
            else None
        ),
    )


def index_sources(conn: sqlite3.Connection) -> list[index.Document]:
    """Everything the index should hold, with its text (events first)."""
    return [index.Document(*map(str, row)) for row in conn.execute(SELECT_SOURCES)]


def rebuild_index(conn: sqlite3.Connection, docs: Iterable[index.Document]) -> int:
    """Drop and recreate the search tables, then index ``docs`` (their text segmented), in
    one transaction: whatever state the old index was in, the new one is built from the data.
    ``docs`` is read once the tables are empty, so it may read the sources as it goes.

    Each document gets its row's people's tokens (``index.index_doc`` reads them), except
    while a migration rebuilds a file older than people (schema 11), whose rows have none."""
    owners = None if has_people(conn) else ()
    postings.of(conn).clear()
    count = 0
    for doc in docs:
        index.index_doc(
            conn, doc.persona, doc.project, doc.doc_kind, doc.ref, doc.text, people=owners
        )
        count += 1
    return count


def has_people(conn: sqlite3.Connection) -> bool:
    """Whether the file's events can belong to people yet (schema 11 on)."""
    return any(column.name == "person" for column in catalog.columns(conn, "events"))


def rebuild(conn: sqlite3.Connection, docs: Iterable[index.Document]) -> int:
    """``doctor --rebuild-index``: ``rebuild_index``, then every scope's capacity counters
    counted anew from the rows (a migration to v5 rebuilds the index before they exist)
    and every person's folded names written anew from the registry."""
    count = rebuild_index(conn, docs)
    capacity.recount_usage(conn)
    people.rebuild_names(conn)
    return count


COUNTED_SOURCES = f"""
select (select count(*) from events e where {{indexed_event}})
     + (select count(*) from memories m where {index.INDEXED_MEMORY})
"""
COUNT_SOURCES = COUNTED_SOURCES.format(indexed_event=index.INDEXED_EVENT)
COUNT_MIGRATION_SOURCES = COUNTED_SOURCES.format(indexed_event=index.INDEXED_CATEGORY)
MIGRATION_BATCH = 2_000
"""Documents read and segmented at a time: memory stays bounded on a file of millions."""
LOG_SECONDS = 5.0
"""How often a long rebuild logs how far it has come."""


def reindex_for_migration(conn: sqlite3.Connection, progress: Progress | None = None) -> int:
    """Rebuild the index from the source texts with the current tokens, inside the
    migration's transaction (``db.schema.migrate``), in batches, logging how far it has
    come on amem's logger (stderr, never stdout) and calling ``progress(done, total)``
    after each batch; returns how many documents it indexed.

    It runs on the write connection's thread, never on an event loop, and holds the write
    lock throughout: other processes opening the file wait for it (and give up with
    ``database_busy`` after the busy timeout), and none ever sees a half-built index."""
    total = conn.execute(COUNT_MIGRATION_SOURCES).fetchone()[0]
    started = time.monotonic()
    if total:  # a new file has nothing to rebuild, and nothing to say
        log.warning("%s: 0 of %s documents", REBUILDING, f"{total:,}")
    done = rebuild_index(conn, segmented_sources(conn, total, progress, started))
    if total:
        seconds = time.monotonic() - started
        log.warning("%s: done, %s documents in %.1f s", REBUILDING, f"{done:,}", seconds)
    return done


REBUILDING = "rebuilding the search index for English stemming (schema version 5)"


def segmented_sources(
    conn: sqlite3.Connection, total: int, progress: Progress | None, started: float
) -> Iterator[index.Document]:
    """``index_sources``, read and segmented ``MIGRATION_BATCH`` at a time."""
    cursor = conn.execute(MIGRATION_SOURCES)
    done, logged = 0, started
    while batch := [index.Document(*map(str, row)) for row in cursor.fetchmany(MIGRATION_BATCH)]:
        segmented = segment_all([doc.text for doc in batch])
        yield from (doc._replace(text=t) for doc, t in zip(batch, segmented, strict=True))
        done += len(batch)
        if progress is not None:
            progress(done, total)
        if time.monotonic() - logged >= LOG_SECONDS and done < total:
            logged = time.monotonic()
            log.warning("%s: %s of %s documents", REBUILDING, f"{done:,}", f"{total:,}")
