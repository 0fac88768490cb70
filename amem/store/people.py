"""People (seed 001): each scope's registry of the people its persona talks with, whom
each event belongs to, and the versioned states a host keeps for the scope and for each
person. Plain functions of a connection, run by the writer actor (writes) or on a
snapshot (reads).

An event belongs to at most one person's relationship (``events.person``); its memories
belong to the same person (``memories.person``) and may be about others
(``memories.about``). Names are looked up folded (``folded``): Unicode compatibility
forms (full-width letters are letters), case and runs of white space aside.
"""

from __future__ import annotations

import json
import re
import sqlite3
import unicodedata
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..db.in_lists import marks
from ..db.rules import PERSON_MEMORY
from ..db.times import from_db_time
from ..errors import Conflict, InvalidInput, NotFound
from ..limits import MAX_STATE_BYTES
from ..models import Assignment, Person, State
from ..search import index
from .tombstones import missing_event

PERSON_COLUMNS = """
id, persona, project, display_name, aliases, locale, timezone, notes, version, created_at,
updated_at
"""
SELECT_PERSON = f"""
select {PERSON_COLUMNS} from people where persona = ? and project = ? and id = ?
"""
SELECT_PEOPLE = f"""
select {PERSON_COLUMNS} from people where persona = ? and project = ?
order by created_at, id
"""
SELECT_BY_NAME = f"""
select {PERSON_COLUMNS} from people where persona = ? and project = ? and id in (
    select person from person_names where persona = ? and project = ? and name = ?
) order by created_at, id
"""
SELECT_NAMES = "select name, person from person_names where persona = ? and project = ?"
INSERT_PERSON = f"""
insert into people ({PERSON_COLUMNS}) values (?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?)
"""
UPDATE_PERSON = """
update people set display_name = ?, aliases = ?, locale = ?, timezone = ?, notes = ?,
    version = version + 1, updated_at = ?
where persona = ? and project = ? and id = ?
"""
DELETE_NAMES = "delete from person_names where persona = ? and project = ? and person = ?"
INSERT_NAME = """
insert or ignore into person_names (persona, project, name, person) values (?, ?, ?, ?)
"""
DELETE_PERSON = "delete from people where persona = ? and project = ? and id = ?"
OWNS_ANYTHING = f"""
select exists (select 1 from events where persona = :persona and project = :project
                   and person = :person)
    or exists (select 1 from memories m where persona = :persona and project = :project
                   and {PERSON_MEMORY})
    or exists (select 1 from states where persona = :persona and project = :project
                   and person = :person)
"""


def folded(name: str) -> str:
    """A name as lookups compare it: compatibility forms folded (full-width Latin letters
    are the letters they stand for), case folded, white-space runs as one space. Chinese
    names stay as written."""
    return " ".join(unicodedata.normalize("NFKC", name).casefold().split())


def person_model(row: Sequence[Any]) -> Person:
    fields = dict(zip((c.strip() for c in PERSON_COLUMNS.split(",")), row, strict=True))
    fields["aliases"] = json.loads(fields["aliases"])
    fields["created_at"] = from_db_time(fields["created_at"])
    fields["updated_at"] = from_db_time(fields["updated_at"])
    return Person.model_validate(fields)


def load_person(conn: sqlite3.Connection, persona: str, project: str, person: str) -> Person:
    """A person of this scope's registry; ``not_found`` for anyone else."""
    row = conn.execute(SELECT_PERSON, (persona, project, person)).fetchone()
    if row is None:
        raise NotFound("no person with this id in this scope's registry")
    return person_model(row)


def require_people(
    conn: sqlite3.Connection, persona: str, project: str, people: Iterable[str], field: str
) -> None:
    """Refuse (``not_found``) a person ID that is not in this scope's registry."""
    wanted = sorted(set(people))
    if not wanted:
        return
    sql = (
        f"select id from people where persona = ? and project = ? and id in ({marks(len(wanted))})"
    )
    known = {person for (person,) in conn.execute(sql, (persona, project, *wanted))}
    if missing := [p for p in wanted if p not in known]:
        raise NotFound(f"{field}: {len(missing)} person ID(s) not in this scope's registry")


def list_people(conn: sqlite3.Connection, persona: str, project: str) -> list[Person]:
    """Every person of the scope's registry, oldest first."""
    return [person_model(row) for row in conn.execute(SELECT_PEOPLE, (persona, project))]


def find_people(conn: sqlite3.Connection, persona: str, project: str, name: str) -> list[Person]:
    """Every person whose display name or an alias is ``name``, folded; oldest first."""
    key = folded(name)
    rows = conn.execute(SELECT_BY_NAME, (persona, project, persona, project, key))
    return [person_model(row) for row in rows]


def upsert_person(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    *,
    person_id: str | None,
    display_name: str,
    aliases: Sequence[str],
    locale: str | None,
    timezone: str | None,
    notes: str | None,
    now: str,
) -> Person:
    """Add a person (a new ID when ``person_id`` is None) or make an existing one exactly
    this; an unchanged person keeps its version."""
    person = person_id or f"per_{uuid.uuid4().hex}"
    listed = json.dumps(list(aliases), ensure_ascii=False)
    fields = (display_name, listed, locale, timezone, notes)
    row = conn.execute(SELECT_PERSON, (persona, project, person)).fetchone()
    if row is None:
        conn.execute(INSERT_PERSON, (person, persona, project, *fields, now, now))
    elif tuple(row[3:8]) != fields:
        conn.execute(UPDATE_PERSON, (*fields, now, persona, project, person))
    else:
        return person_model(row)
    write_names(conn, persona, project, person, display_name, aliases)
    return load_person(conn, persona, project, person)


def names_of(display_name: str, aliases: Iterable[str]) -> set[str]:
    """The folded names a person is found by: the display name and every alias."""
    return {folded(display_name), *map(folded, aliases)}


def write_names(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    person: str,
    display_name: str,
    aliases: Iterable[str],
) -> None:
    """Make ``person_names`` hold exactly the person's ``names_of`` (after an upsert, an
    import, a rebuild)."""
    conn.execute(DELETE_NAMES, (persona, project, person))
    for name in sorted(names_of(display_name, aliases)):
        conn.execute(INSERT_NAME, (persona, project, name, person))


SELECT_ALL_PEOPLE = "select persona, project, id, display_name, aliases from people"
SELECT_ALL_NAMES = "select persona, project, person, name from person_names"


def names_drift(conn: sqlite3.Connection) -> int:
    """How many people's ``person_names`` rows differ from their ``names_of`` (a name
    missing or too many; rows of no person count too)."""
    expected = {
        (persona, project, person): names_of(name, stored_aliases(aliases))
        for persona, project, person, name, aliases in conn.execute(SELECT_ALL_PEOPLE)
    }
    stored: dict[tuple[str, str, str], set[str]] = {}
    for persona, project, person, name in conn.execute(SELECT_ALL_NAMES):
        stored.setdefault((persona, project, person), set()).add(name)
    return sum(expected.get(key, set()) != stored.get(key, set()) for key in {*expected, *stored})


def rebuild_names(conn: sqlite3.Connection) -> None:
    """Write ``person_names`` anew from ``people`` (``doctor --rebuild-index``)."""
    conn.execute("delete from person_names")
    for persona, project, person, name, aliases in conn.execute(SELECT_ALL_PEOPLE).fetchall():
        write_names(conn, persona, project, person, name, stored_aliases(aliases))


def stored_aliases(text: str) -> list[str]:
    """A person's stored aliases; none when the cell holds no JSON list of names (a write
    around amem, which ``doctor``'s archive check names)."""
    try:
        aliases = json.loads(text)
    except (TypeError, ValueError):
        return []
    if not isinstance(aliases, list):
        return []
    return [alias for alias in aliases if isinstance(alias, str)]


def remove_person(conn: sqlite3.Connection, persona: str, project: str, person: str) -> Person:
    """Take a person out of the registry; refused (``person_in_use``) while any event or
    memory belongs to them or is about them, or they have a state."""
    removed = load_person(conn, persona, project, person)
    key = {"persona": persona, "project": project, "person": person}
    if conn.execute(OWNS_ANYTHING, key).fetchone()[0]:
        raise Conflict(
            "this person still owns events, memories or a state; erase them first "
            "(erase(person=...)) or assign the events to someone else",
            code="person_in_use",
        )
    conn.execute(DELETE_PERSON, (persona, project, person))
    return removed


NAME_EDGE = re.compile(r"\w")


def named_in(conn: sqlite3.Connection, persona: str, project: str, query: str) -> list[str]:
    """The people of the scope whose display name or alias the query says, as a whole
    word (letters or digits on neither side; Chinese names, which stand between other
    characters, anywhere); sorted IDs."""
    text = folded(query)
    named = set()
    for name, person in conn.execute(SELECT_NAMES, (persona, project)):
        start = text.find(name)
        while start >= 0 and person not in named:
            end = start + len(name)
            if stands_alone(text, start, end, name):
                named.add(person)
            start = text.find(name, start + 1)
    return sorted(named)


def stands_alone(text: str, start: int, end: int, name: str) -> bool:
    """Whether ``name`` at ``text[start:end]`` is a word of its own: a name that starts or
    ends with a letter written without spaces between words (Chinese, Japanese) counts
    anywhere, another only with no letter or digit touching it."""
    before = text[start - 1] if start else " "
    after = text[end] if end < len(text) else " "
    if spaceless(name[0]) or spaceless(name[-1]):
        return True
    return not (NAME_EDGE.match(before) or NAME_EDGE.match(after))


def spaceless(char: str) -> bool:
    return unicodedata.east_asian_width(char) in ("W", "F") and char.isalpha()


# --- ownership ---------------------------------------------------------------------------

SELECT_OWNER = "select persona, project, person from events where id = ?"
SET_EVENT_PERSON = "update events set person = ? where id = ?"
SET_MEMORIES_PERSON = "update memories set person = ? where event_id = ?"
SELECT_EVENT_MEMORIES = "select id from memories where event_id = ? order by num"
INSERT_ASSIGNMENT = """
insert into assignments (persona, project, event_id, from_person, to_person, reason, assigned_at)
values (?, ?, ?, ?, ?, ?, ?)
"""


def assign(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    event_id: str,
    person: str | None,
    reason: str | None,
    now: str,
) -> Assignment:
    """Move an event, with every memory derived from it, into ``person``'s relationship
    (None: no one's); its role, text and times stay. The move is recorded in
    ``assignments``; an event already there is left as it is."""
    row = conn.execute(SELECT_OWNER, (event_id,)).fetchone()
    if row is None or tuple(row[:2]) != (persona, project):
        raise missing_event(conn, persona, project, event_id)
    if person is not None:
        load_person(conn, persona, project, person)
    previous = row[2]
    memory_ids = [m for (m,) in conn.execute(SELECT_EVENT_MEMORIES, (event_id,))]
    if previous != person:
        conn.execute(SET_EVENT_PERSON, (person, event_id))
        conn.execute(SET_MEMORIES_PERSON, (person, event_id))
        index.reindex_people(conn, "event", event_id)
        for memory_id in memory_ids:
            index.reindex_people(conn, "memory", memory_id)
        conn.execute(INSERT_ASSIGNMENT, (persona, project, event_id, previous, person, reason, now))
    return Assignment(
        event_id=event_id,
        person=person,
        previous=previous,
        reason=reason,
        memory_ids=memory_ids,
        assigned_at=from_db_time(now),
    )


# --- states ------------------------------------------------------------------------------

SCOPE_STATE = ""
"""The ``states.person`` of the scope's own state."""
SELECT_STATE = """
select data, version, updated_at from states where persona = ? and project = ? and person = ?
"""
UPSERT_STATE = """
insert into states (persona, project, person, data, version, updated_at) values (?, ?, ?, ?, ?, ?)
on conflict (persona, project, person) do update set
    data = excluded.data, version = excluded.version, updated_at = excluded.updated_at
"""


def load_state(conn: sqlite3.Connection, persona: str, project: str, person: str | None) -> State:
    """The scope's state (``person`` None) or a person's; version 0 and no data before the
    first save."""
    if person is not None:
        load_person(conn, persona, project, person)
    row = conn.execute(SELECT_STATE, (persona, project, person or SCOPE_STATE)).fetchone()
    data, version, updated = ({}, 0, None) if row is None else (json.loads(row[0]), *row[1:])
    return State(
        persona=persona,
        project=project,
        person=person,
        data=data,
        version=version,
        updated_at=None if updated is None else from_db_time(updated),
    )


def save_state(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    person: str | None,
    data: Mapping[str, Any],
    expected_version: int | None,
    now: str,
) -> State:
    """Store ``data`` as the state, one version on; refused (``version_conflict``) when
    ``expected_version`` is given and the stored version is another."""
    current = load_state(conn, persona, project, person)
    if expected_version is not None and expected_version != current.version:
        raise version_conflict(current.version)
    return store_state(conn, current, data, now)


def patch_state(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    person: str | None,
    base: Mapping[str, Any],
    new: Mapping[str, Any],
    now: str,
) -> State:
    """Apply to the stored state only the top-level keys that ``new`` changes from
    ``base`` (set, changed or removed); refused (``version_conflict``) when one of those
    keys no longer holds what ``base`` holds. Keys nobody changed stay as stored."""
    current = load_state(conn, persona, project, person)
    missing = object()
    changed = [key for key in {*base, *new} if base.get(key, missing) != new.get(key, missing)]
    if not changed:
        return current
    data = dict(current.data)
    for key in changed:
        if data.get(key, missing) != base.get(key, missing):
            raise version_conflict(current.version, key)
        if key in new:
            data[key] = new[key]
        else:
            del data[key]
    return store_state(conn, current, data, now)


def store_state(
    conn: sqlite3.Connection, current: State, data: Mapping[str, Any], now: str
) -> State:
    stored = state_json(data)
    version = current.version + 1
    key = (current.persona, current.project, current.person or SCOPE_STATE)
    conn.execute(UPSERT_STATE, (*key, stored, version, now))
    return current.model_copy(
        update={"data": json.loads(stored), "version": version, "updated_at": from_db_time(now)}
    )


def state_json(data: Mapping[str, Any]) -> str:
    """``data`` as stored: a JSON object of at most ``MAX_STATE_BYTES``."""
    if not isinstance(data, Mapping) or not all(isinstance(key, str) for key in data):
        raise InvalidInput("state data must be an object with string keys")
    try:
        stored = json.dumps(dict(data), ensure_ascii=False, allow_nan=False, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(
            "state data must be JSON: strings, numbers, booleans, null, lists and objects"
        ) from exc
    if len(stored.encode()) > MAX_STATE_BYTES:
        raise InvalidInput(f"state data holds at most {MAX_STATE_BYTES:,} bytes of JSON")
    return stored


def version_conflict(version: int, key: str | None = None) -> Conflict:
    what = "a key this patch changes" if key is not None else "the state"
    return Conflict(
        f"{what} changed since it was read (now at version {version}); read it again and retry",
        code="version_conflict",
    )
