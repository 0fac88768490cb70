"""The database schema and its migrations, tracked by ``PRAGMA user_version``.

v1  authoritative tables (events, personas, memories, relations, checkpoints) and the
    rebuildable caches (embeddings; search_docs + search_fts, an external-content FTS5
    index over segmented text)
v2  gists and cue keys on memories, lookup indexes
v3  scoped host-capture cursors
v4  the FTS index rebuilt with a tokenizer that keeps every letter Python knows: SQLite's
    Unicode 6.1 tables call some later letters combining marks (New Tai Lue vowels), so
    ``Mc`` and ``Mn`` count as token characters too (amem's segmented text holds no marks
    of its own, so nothing else changes)
v5  the index rebuilt from the source texts with stemmed tokens (``search.text``: English
    words are stored and looked up as their Snowball stems). No DDL: the caller's
    ``reindex`` re-segments every indexed text inside the migration's transaction, so a
    file is either wholly at v4 with its old index or wholly at v5 with the new one
v6  ``vectors`` replaces ``embeddings``: vectors of memories and of conversation events
    (long events in chunks), numbered in insertion order so a scope's in-memory matrix
    loads only rows it has not seen; ``vector_epochs`` counts each scope's deleted or
    changed vector rows (kept by triggers, so no path can forget), which makes a loaded
    matrix reload. ``erased_events`` holds one tombstone per erased event (a hash of its
    ID and scope, no content); ``scope_limits`` holds optional per-scope capacity limits;
    ``memories.revoke_reason`` says why a memory was retracted
v7  ``scope_usage``: what each scope stores (events, memories, the UTF-8 bytes of their
    text, the bytes of its search documents), kept by triggers on ``events``,
    ``memories`` and ``search_docs`` (so no write path can forget), counted from the rows
    once when the file migrates. Reading it is one lookup: a write checks it against the
    scope's ``scope_limits`` inside its own transaction (``store.capacity``)
v8  tiers: ``memories.tier`` (``working``/``episodic``/``profile``; existing rows get
    their kind's default), ``pinned`` and ``expires_at`` (a working note's TTL); partial
    indexes over current memories by tier and kind, and over current expiring notes, so
    ``consolidate`` reads only what it may change
v9  ``index_removals``: how many search documents have ever left the index or changed
    (kept by triggers on ``search_docs``). Until one does, a common term's oldest
    postings stay what they were (a new document takes a number past every other), so
    readers keep their counts between queries (``recall.lexical.TermCounts``)
v10 ``temp_files`` and ``scrubs`` (below)
v11 people: a registry per scope, who each event and memory belongs to, states (below)
v12 consolidation runs, eviction, lineage kinds (below)

Each migration runs in its own ``BEGIN IMMEDIATE`` transaction and re-reads the version
after taking the write lock, so processes that start at the same time on a new file
migrate it exactly once. A file whose version is newer than ``SCHEMA_VERSION`` is refused
before anything is written to it. Future incompatible changes add a migration here; they
never recreate tables silently.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path

from ..errors import StorageError
from .drivers import open_sqlite
from .postgres import is_postgres

SCHEMA_VERSION = 12

V1 = (
    """
    create table events (
        seq integer primary key autoincrement,
        id text not null unique,
        persona text not null,
        project text not null,
        session text,
        role text not null check (role in ('user', 'assistant', 'system', 'tool')),
        category text not null
            check (category in ('conversation', 'reference', 'persona', 'correction')),
        source text,
        text text not null,
        occurred_at text not null,
        ingested_at text not null,
        status text not null
            check (status in ('stored', 'pending', 'extracted', 'failed', 'amended')),
        error text,
        attempts integer not null default 0
    )
    """,
    """
    create table personas (
        persona text not null,
        version integer not null check (version >= 1),
        text text not null,
        note text,
        created_at text not null,
        primary key (persona, version)
    ) without rowid
    """,
    """
    create table memories (
        num integer primary key autoincrement,
        id text not null unique,
        persona text not null,
        project text not null,
        event_id text not null references events (id),
        text text not null,
        quote text not null,
        quote_start integer not null,
        quote_end integer not null,
        kind text not null check (kind in
            ('fact', 'preference', 'agreement', 'growth', 'episode', 'observation', 'emotion')),
        basis text not null
            check (basis in ('user_statement', 'assistant_expression', 'inference')),
        confidence real not null check (confidence between 0 and 1),
        subject text,
        fact_key text,
        valid_at text not null,
        invalid_at text,
        chain_order integer,
        revoked_at text,
        emotion text,
        valence real,
        arousal real,
        created_at text not null
    )
    """,
    """
    create table relations (
        from_id text not null references memories (id) on delete cascade,
        to_id text not null references memories (id) on delete cascade,
        kind text not null check (kind in ('related', 'corrects')),
        persona text not null,
        project text not null,
        note text,
        created_at text not null,
        primary key (from_id, to_id, kind)
    ) without rowid
    """,
    """
    create table checkpoints (
        num integer primary key autoincrement,
        persona text not null,
        project text not null,
        session text not null,
        goal text not null,
        completed text not null,
        pending text not null,
        constraints text not null,
        next_action text,
        covered_seq integer,
        created_at text not null,
        invalidated_at text
    )
    """,
    """
    create table embeddings (
        memory_id text not null references memories (id) on delete cascade,
        fingerprint text not null,
        dim integer not null,
        vector blob not null,
        text_hash text not null,
        created_at text not null,
        primary key (memory_id, fingerprint)
    ) without rowid
    """,
    """
    create table search_docs (
        num integer primary key,
        persona text not null,
        project text not null,
        doc_kind text not null check (doc_kind in ('memory', 'event')),
        ref text not null,
        tokens text not null,
        unique (doc_kind, ref)
    )
    """,
    """
    create virtual table search_fts using fts5 (
        tokens, content = 'search_docs', content_rowid = 'num',
        tokenize = 'unicode61 remove_diacritics 2'
    )
    """,
)

V2 = (
    "alter table memories add column gist text",
    "alter table memories add column cue_key text",
    "create index events_by_scope_session on events (persona, project, session, seq)",
    "create index events_by_scope_status on events (persona, project, status)",
    "create index memories_by_event on memories (event_id)",
    "create index memories_by_fact on memories (persona, project, subject, fact_key, valid_at)",
    "create index memories_by_scope_kind on memories (persona, project, kind, valid_at)",
    "create index memories_by_scope_recency on memories (persona, project, num)",
    "create index relations_by_target on relations (to_id)",
    "create index checkpoints_by_session on checkpoints (persona, project, session, num)",
    "create index search_docs_by_scope on search_docs (persona, project)",
)

V3 = (
    """
    create table capture_cursors (
        persona text not null,
        project text not null,
        instance text not null,
        position integer not null check (position >= 0),
        last_event_id text,
        updated_at text not null,
        primary key (persona, project, instance)
    ) without rowid
    """,
)

FTS_TOKENIZER = "unicode61 remove_diacritics 2 categories 'L* N* Co Mc Mn'"
"""Splits only on the spaces ``text.segment`` puts between tokens (checked for every
character ``str.isalnum`` accepts by ``tests/test_schema.py``)."""

CREATE_SEARCH_FTS = f"""
create virtual table search_fts using fts5 (
    tokens, content = 'search_docs', content_rowid = 'num', tokenize = "{FTS_TOKENIZER}"
)
"""
SEARCH_FTS_SHADOWS = (
    "search_fts_data",
    "search_fts_idx",
    "search_fts_docsize",
    "search_fts_config",
)
"""The tables FTS5 keeps ``search_fts``'s index in."""

V4 = (
    "drop table search_fts",
    CREATE_SEARCH_FTS,
    "insert into search_fts (search_fts) values ('rebuild')",
)

V6 = (
    """
    create table vectors (
        num integer primary key autoincrement,
        persona text not null,
        project text not null,
        doc_kind text not null check (doc_kind in ('memory', 'event')),
        ref text not null,
        chunk integer not null check (chunk >= 0),
        fingerprint text not null,
        dim integer not null,
        vector blob not null,
        text_hash text not null,
        created_at text not null,
        unique (fingerprint, doc_kind, ref, chunk)
    )
    """,
    "create index vectors_by_scope on vectors (persona, project, fingerprint, num)",
    "create index vectors_by_ref on vectors (doc_kind, ref)",
    """
    insert into vectors
        (persona, project, doc_kind, ref, chunk, fingerprint, dim, vector, text_hash, created_at)
    select m.persona, m.project, 'memory', v.memory_id, 0, v.fingerprint, v.dim, v.vector,
        v.text_hash, v.created_at
    from embeddings v join memories m on m.id = v.memory_id
    order by m.num
    """,
    "drop table embeddings",
    """
    create table vector_epochs (
        persona text not null,
        project text not null,
        epoch integer not null,
        primary key (persona, project)
    ) without rowid
    """,
    """
    create trigger vectors_deleted after delete on vectors begin
        insert into vector_epochs (persona, project, epoch) values (old.persona, old.project, 1)
        on conflict (persona, project) do update set epoch = vector_epochs.epoch + 1;
    end
    """,
    """
    create trigger vectors_changed after update on vectors begin
        insert into vector_epochs (persona, project, epoch) values (old.persona, old.project, 1)
        on conflict (persona, project) do update set epoch = vector_epochs.epoch + 1;
    end
    """,
    """
    create table erased_events (
        digest text primary key,
        erased_at text not null
    ) without rowid
    """,
    """
    create table scope_limits (
        persona text not null,
        project text not null,
        max_events integer check (max_events > 0),
        max_text_bytes integer check (max_text_bytes > 0),
        primary key (persona, project)
    ) without rowid
    """,
    "alter table memories add column revoke_reason text",
)

# --- v7: capacity accounting ------------------------------------------------------------

COUNTED_USAGE = """
select persona, project, sum(events), sum(memories), sum(text_bytes), sum(token_bytes)
from (
    select persona, project, count(*) as events, 0 as memories,
        sum(length(cast(text as blob))) as text_bytes, 0 as token_bytes
    from events group by persona, project
    union all
    select persona, project, 0, count(*), sum(length(cast(text as blob))), 0
    from memories group by persona, project
    union all
    select persona, project, 0, 0, 0, sum(length(cast(tokens as blob)))
    from search_docs group by persona, project
) as counted
group by persona, project
"""
"""Each scope's usage counted from its rows, in ``scope_usage``'s column order."""
COUNT_USAGE = f"""
insert into scope_usage (persona, project, events, memories, text_bytes, token_bytes)
{COUNTED_USAGE}
"""
"""Fills an empty ``scope_usage`` from the rows (the migration; ``doctor`` recounts)."""


def _text_usage_triggers(table: str) -> tuple[str, ...]:
    """The triggers that keep ``scope_usage``'s row count and text bytes for ``table``
    (``events`` or ``memories``: the column of the count is the table's name)."""
    return (
        f"""
    create trigger {table}_usage_added after insert on {table} begin
        insert into scope_usage (persona, project, {table}, text_bytes)
        values (new.persona, new.project, 1, length(cast(new.text as blob)))
        on conflict (persona, project) do update set
            {table} = scope_usage.{table} + 1,
            text_bytes = scope_usage.text_bytes + excluded.text_bytes;
    end
    """,
        f"""
    create trigger {table}_usage_removed after delete on {table} begin
        update scope_usage
        set {table} = {table} - 1, text_bytes = text_bytes - length(cast(old.text as blob))
        where persona = old.persona and project = old.project;
    end
    """,
        f"""
    create trigger {table}_usage_changed after update of text on {table} begin
        update scope_usage
        set text_bytes = text_bytes - length(cast(old.text as blob))
            + length(cast(new.text as blob))
        where persona = old.persona and project = old.project;
    end
    """,
    )


V7 = (
    """
    create table scope_usage (
        persona text not null,
        project text not null,
        events integer not null default 0,
        memories integer not null default 0,
        text_bytes integer not null default 0,
        token_bytes integer not null default 0,
        primary key (persona, project)
    ) without rowid
    """,
    COUNT_USAGE,
    *_text_usage_triggers("events"),
    *_text_usage_triggers("memories"),
    """
    create trigger search_docs_usage_added after insert on search_docs begin
        insert into scope_usage (persona, project, token_bytes)
        values (new.persona, new.project, length(cast(new.tokens as blob)))
        on conflict (persona, project) do update set
            token_bytes = scope_usage.token_bytes + excluded.token_bytes;
    end
    """,
    """
    create trigger search_docs_usage_removed after delete on search_docs begin
        update scope_usage set token_bytes = token_bytes - length(cast(old.tokens as blob))
        where persona = old.persona and project = old.project;
    end
    """,
    """
    create trigger search_docs_usage_changed after update of tokens on search_docs begin
        update scope_usage
        set token_bytes = token_bytes - length(cast(old.tokens as blob))
            + length(cast(new.tokens as blob))
        where persona = old.persona and project = old.project;
    end
    """,
)
"""``scope_usage`` and the triggers that keep it (a scope's row appears with its first
row; it is not removed when the scope empties, it reads zeros)."""

V8 = (
    """
    alter table memories add column tier text not null default 'episodic'
        check (tier in ('working', 'episodic', 'profile'))
    """,
    "alter table memories add column pinned integer not null default 0 check (pinned in (0, 1))",
    "alter table memories add column expires_at text",
    # the kind defaults as they stood at v8 (``models.DEFAULT_TIERS``): a migration is history
    """
    update memories set tier = 'profile'
    where kind in ('fact', 'preference', 'agreement', 'growth')
    """,
    """
    create index memories_by_tier on memories (persona, project, tier, kind)
    where revoked_at is null
    """,
    """
    create index memories_by_expiry on memories (persona, project, expires_at)
    where expires_at is not null and revoked_at is null
    """,
    # a context pack reads a scope's pins first, whatever its size
    """
    create index memories_pinned on memories (persona, project, valid_at)
    where pinned = 1 and revoked_at is null
    """,
)


def _counter(trigger: str, event: str, table: str, update: str) -> str:
    """A trigger that runs ``update`` (a one-row counter's) after each ``event`` on ``table``."""
    return f"""
    create trigger {trigger} after {event} on {table} begin
        {update};
    end
    """


COUNT_REMOVAL = "update index_removals set removed = removed + 1"
COUNT_ERASURE = "update scrubs set erased = erased + 1"

V9 = (
    "create table index_removals (removed integer not null)",
    "insert into index_removals (removed) values (0)",
    _counter("search_docs_removed", "delete", "search_docs", COUNT_REMOVAL),
    _counter("search_docs_changed", "update", "search_docs", COUNT_REMOVAL),
)
"""One row: search documents removed or changed since the file reached v9."""

V10 = (
    """
    create table temp_files (
        path text primary key,
        created_at text not null
    ) without rowid
    """,
    "create table scrubs (erased integer not null, scrubbed integer not null)",
    "insert into scrubs (erased, scrubbed) values (0, 0)",
    _counter("events_erased", "delete", "events", COUNT_ERASURE),
    _counter("memories_erased", "delete", "memories", COUNT_ERASURE),
)
"""``temp_files``: the temporary files exports and backups of this database are writing
(each beside its target): one a killed process left is removed by the next process that
opens the file. ``scrubs``, one row: events and memories deleted so far, and how many of
those deletions the last scrub covered, so a scrub a killed process never ran is run by
the next process that opens the file (``store.erasure.scrub``)."""

V11 = (
    """
    create table people (
        persona text not null,
        project text not null,
        id text not null,
        display_name text not null,
        aliases text not null,
        locale text,
        timezone text,
        notes text,
        version integer not null check (version >= 1),
        created_at text not null,
        updated_at text not null,
        primary key (persona, project, id)
    ) without rowid
    """,
    """
    create table person_names (
        persona text not null,
        project text not null,
        name text not null,
        person text not null,
        primary key (persona, project, name, person),
        foreign key (persona, project, person) references people (persona, project, id)
            on delete cascade
    ) without rowid
    """,
    "alter table events add column person text",
    """
    create index events_by_person on events (persona, project, person, seq)
    where person is not null
    """,
    "alter table memories add column person text",
    "alter table memories add column about text",
    """
    create index memories_by_person on memories (persona, project, person, num)
    where person is not null
    """,
    """
    create table assignments (
        num integer primary key autoincrement,
        persona text not null,
        project text not null,
        event_id text not null references events (id) on delete cascade,
        from_person text,
        to_person text,
        reason text,
        assigned_at text not null
    )
    """,
    "create index assignments_by_event on assignments (event_id)",
    """
    create table states (
        persona text not null,
        project text not null,
        person text not null,
        data text not null,
        version integer not null check (version >= 1),
        updated_at text not null,
        primary key (persona, project, person)
    ) without rowid
    """,
)
"""People (seed 001): ``people`` is each scope's registry, ``person_names`` its display
names and aliases folded for lookup (``store.people.folded``); ``events.person`` is the
person whose relationship an event belongs to, ``memories.person`` its memories' (the
same), ``memories.about`` the people a memory is about (a JSON list of IDs);
``assignments`` records every move of an event between people; ``states`` holds the
scope's own state (``person = ''``) and each person's, versioned for compare-and-set."""

V12 = (
    "alter table events add column evicted_at text",
    """
    create table relations_v12 (
        from_id text not null references memories (id) on delete cascade,
        to_id text not null references memories (id) on delete cascade,
        kind text not null check (kind in ('related', 'corrects', 'merged_into', 'supersedes')),
        persona text not null,
        project text not null,
        note text,
        created_at text not null,
        primary key (from_id, to_id, kind)
    ) without rowid
    """,
    "insert into relations_v12 select from_id, to_id, kind, persona, project, note, created_at"
    " from relations",
    "drop table relations",
    "alter table relations_v12 rename to relations",
    "create index relations_by_target on relations (to_id)",
    """
    create table consolidation_runs (
        num integer primary key autoincrement,
        id text not null unique,
        persona text not null,
        project text not null,
        session text,
        status text not null
            check (status in ('prepared', 'applied', 'failed', 'invalidated')),
        input text not null,
        candidate text,
        error text,
        result text,
        digest text,
        next_seq integer not null,
        next_offset integer not null,
        created_at text not null,
        updated_at text not null
    )
    """,
    """
    create index consolidation_runs_by_scope
    on consolidation_runs (persona, project, session, status, num)
    """,
    """
    create table consolidation_sources (
        run_id text not null references consolidation_runs (id) on delete cascade,
        event_id text not null,
        primary key (run_id, event_id)
    ) without rowid
    """,
    "create index consolidation_sources_by_event on consolidation_sources (event_id)",
)
"""Consolidation (seed 001): ``events.evicted_at`` marks an event whose raw text was let go
after its memories were derived (the text is emptied, the row and its memories stay);
``relations`` is rebuilt with two more kinds, ``merged_into`` (a duplicate merged into the
survivor) and ``supersedes`` (a successor that closed a fact's interval);
``consolidation_runs`` holds each run's frozen input, the host's last rejected candidate
and its error, and the applied patch's digest and result, with the position the next run
of the same session starts from; ``consolidation_sources`` lists the events each run
froze, so erasing one finds the runs to invalidate and scrub."""

MIGRATIONS: tuple[tuple[int, Sequence[str]], ...] = (
    (1, V1),
    (2, V2),
    (3, V3),
    (4, V4),
    (5, ()),
    (6, V6),
    (7, V7),
    (8, V8),
    (9, V9),
    (10, V10),
    (11, V11),
    (12, V12),
)
"""Each version and its statements; a version in ``RETOKENIZED`` also rebuilds the index."""
RETOKENIZED = frozenset({5})
"""Versions whose search tokens differ from the version before (v5: stemming): reaching
one re-segments every indexed text, which only the search layer can do (``Reindex``)."""

Reindex = Callable[[sqlite3.Connection], object]
"""Rebuilds ``search_docs`` and ``search_fts`` from the source texts with the current
tokens, inside the caller's transaction (``ops.doctor.reindex_for_migration``)."""


def check_existing(path: Path) -> None:
    """Refuse, without writing a byte, a file amem must not migrate.

    That is a newer schema version, a SQLite file holding someone else's tables, or
    something that is not SQLite at all. A missing or empty file is fine (it is new).
    """
    if not path.exists() or path.stat().st_size == 0:
        return
    try:
        conn = open_sqlite(str(path), readonly=True)
    except sqlite3.Error as exc:
        raise StorageError("the database file cannot be opened", code="not_a_database") from exc
    try:
        version, tables = version_and_tables(conn)
        refuse_newer(version)
        if version == 0:
            refuse_foreign(tables)
    except sqlite3.OperationalError as exc:
        if not needs_recovery(exc):
            raise StorageError("the file is not a SQLite database", code="not_a_database") from exc
    except sqlite3.DatabaseError as exc:
        raise StorageError("the file is not a SQLite database", code="not_a_database") from exc
    finally:
        conn.close()


def needs_recovery(exc: sqlite3.OperationalError) -> bool:
    """A process died mid-write (a hot rollback journal, or a WAL index to rebuild): only a
    writable connection may repair that, so the read-only look cannot judge the file. The
    writer repairs it as any SQLite client would, and ``migrate`` then makes the same
    checks under its lock."""
    return getattr(exc, "sqlite_errorname", "").startswith("SQLITE_READONLY_")


def stored_version(conn: sqlite3.Connection) -> int:
    """The schema version the database is at, 0 when amem has no tables there; creates
    nothing (on PostgreSQL, ``amem_schema`` holds it)."""
    if is_postgres(conn):
        if not conn.execute("select to_regclass('amem_schema') is not null").fetchone()[0]:
            return 0
        return int(conn.execute("select max(version) from amem_schema").fetchone()[0] or 0)
    return int(conn.execute("pragma user_version").fetchone()[0])


def refuse_newer(version: int) -> None:
    if version > SCHEMA_VERSION:
        raise StorageError(
            f"the database was written by a newer amem (schema version {version}, this "
            f"amem reads up to {SCHEMA_VERSION}); upgrade amem to open it",
            code="schema_too_new",
        )


def migrate(conn: sqlite3.Connection, reindex: Reindex | None = None) -> int:
    """Bring the database up to ``SCHEMA_VERSION``, one transaction per step.

    ``reindex`` rebuilds the search index where the tokens changed; without it, only a file
    whose index is empty (a new one) can pass such a version. A step that fails or is
    killed leaves the file at the version before it, retried at the next open."""
    for target, statements in MIGRATIONS:
        conn.execute("begin immediate")
        try:
            version, tables = version_and_tables(conn)
            refuse_newer(version)
            if version == 0 and target == 1:
                refuse_foreign(tables)
            if version == target - 1:
                for statement in statements:
                    conn.execute(statement)
                if target in RETOKENIZED:
                    retokenize(conn, reindex)
                conn.execute(f"pragma user_version = {target}")
            conn.execute("commit")
        except BaseException:
            conn.execute("rollback")
            raise
    return SCHEMA_VERSION


def retokenize(conn: sqlite3.Connection, reindex: Reindex | None) -> None:
    if reindex is not None:
        reindex(conn)
    elif conn.execute("select exists (select 1 from search_docs)").fetchone()[0]:
        raise StorageError(
            "this file's search index must be rebuilt with new tokens; open it with amem.open",
            code="storage_error",
        )


SELECT_VERSION_AND_TABLES = """
select (select user_version from pragma_user_version),
       (select count(*) from sqlite_master where name not like 'sqlite_%')
"""


def version_and_tables(conn: sqlite3.Connection) -> tuple[int, int]:
    """The file's schema version and how many tables, indexes and triggers it holds, read
    in one statement: one snapshot. Read apart, a process migrating the file between the
    two reads (its first step creates the tables and sets version 1 together) made a new
    file look like version 0 with someone else's tables."""
    version, tables = conn.execute(SELECT_VERSION_AND_TABLES).fetchone()
    return int(version), int(tables)


def refuse_foreign(tables: int) -> None:
    """A version-0 file that already holds tables belongs to someone else."""
    if tables:
        raise StorageError(
            "the file holds tables that amem did not create; point amem at a new file",
            code="not_amem_database",
        )
