"""The lexical index on PostgreSQL, behind the ``postings.Postings`` interface: one row of
``search_postings`` per distinct token of a document (``db.pg_search``), read through its
primary key (persona, project, term, num) as FTS5 reads its doclists.

- A lookup is narrowed by the scope's columns, which lead every key (on Citus, the
  distribution column); a person's recall joins the person's token's postings.
- A conjunction joins its terms' postings on ``num``, newest or oldest first, with a limit:
  one bounded index range read per term, however common.
- A phrase: documents holding its tokens, newer than a floor, whose tokens hold it side by
  side (``' ' || tokens || ' '``).
- BM25's lengths: ``search_docs.length`` (FTS5's docsize), and index-wide totals in
  ``search_totals`` (FTS5's averages record), both kept by the writes here, in the
  writer's transaction.
- Terms are stored and looked up ``fold``-ed, as FTS5's ``unicode61`` tokenizer folds them.

Purging and merging have nothing to do: a removed document's postings are deleted rows,
and ``VACUUM`` frees their space (``docs/postgres.md``).
"""

from __future__ import annotations

import sqlite3
import unicodedata
from collections.abc import Sequence
from contextvars import ContextVar

from ..db.in_lists import marks
from .postings import Count, Eligible, ScopeRows, Sizes, Within
from .text import person_token

LOADING: ContextVar[bool] = ContextVar("loading", default=False)
"""Whether a load of many documents runs in this context (``ops.transfer.load``): ``add``
then leaves ``search_totals`` to it, which counts them once at its end (``recount_totals``).
PostgreSQL keeps every update of that one row as a new version until the transaction ends,
and each update passes over the earlier ones: one per document of a large load made it
quadratic."""

SELECT_SCOPE_BOUNDS = """
select (select persona || char(31) || project from search_docs order by persona, project limit 1),
       (select persona || char(31) || project from search_docs
        order by persona desc, project desc limit 1)
"""


# Each term's oldest postings, up to :limit, in one statement for a batch of terms.
COUNT_TERMS = """
select q.n, count(*), min(s.num), max(s.num)
from unnest(cast(:terms as text[])) with ordinality as q (term, n)
cross join lateral (
    select p.num from search_postings p {narrowed}
    where p.persona = :persona and p.project = :project and p.term = q.term
    order by p.num limit :limit
) as s
group by q.n
"""
NARROWED = """
cross join lateral (
    select 1 from search_postings w where w.persona = p.persona and w.project = p.project
        and w.term = :person and w.num = p.num limit 1
) as w
"""


SELECT_SIZES = "select num, length from search_docs where num in ({})"
SELECT_TOTALS = "select documents, tokens from search_totals"


INSERT_DOC = """
insert into search_docs (persona, project, doc_kind, ref, tokens, length)
values (?, ?, ?, ?, ?, ?)
returning num
"""
INSERT_POSTINGS = """
insert into search_postings (persona, project, term, num)
select :persona, :project, term, :num from unnest(cast(:terms as text[])) as term
"""
DELETE_POSTINGS = """
delete from search_postings
where persona = :persona and project = :project and term = any(cast(:terms as text[]))
    and num = :num
"""
UPDATE_TOKENS = "update search_docs set tokens = ?, length = ? where num = ?"
DELETE_DOC = "delete from search_docs where num = ?"
ADD_TOTALS = "update search_totals set documents = documents + ?, tokens = tokens + ?"
COUNTED_TOTALS = "select count(*) as documents, coalesce(sum(length), 0) as tokens from search_docs"
"""What ``search_totals`` holds, counted from the documents."""
RECOUNT_TOTALS = f"""
update search_totals set documents = d.documents, tokens = d.tokens from ({COUNTED_TOTALS}) d
"""


# Newer than the floor, its tokens, folded like the postings (``translate`` only where a
# letter to fold stands: it reads each character against every one to fold), hold the phrase.
PHRASE_HELD = """
and t0.num > :floor and exists (
    select 1 from search_docs d where d.num = t0.num
    and strpos(' ' || case when d.tokens ~ :foldable then translate(d.tokens, :fold_from, :fold_to)
                      else d.tokens end || ' ', :phrase) > 0)
order by t0.num limit :limit
"""
PHRASE_JOINS = 4
"""Tokens of a phrase whose postings are joined (its rarest, or without their counts its
longest): the text of each document holding them is then read for the phrase itself, so
the others would only add joins."""


class PgPostings:
    """``postings.Postings`` on a PostgreSQL connection (``db.postgres.PgConnection``)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def within(self, persona: str, project: str, person: str | None = None) -> Within:
        if person is not None:
            return ScopeRows(persona, project, person_token(persona, project, person), False)
        first, last = self.conn.execute(SELECT_SCOPE_BOUNDS).fetchone()
        alone = first == last == f"{persona}\x1f{project}"
        return ScopeRows(persona, project, None, alone)

    def whole(self, within: Within) -> bool:
        return rows_of(within).alone

    def for_own_token(self, within: Within) -> Within:
        return within  # the scope's columns narrow every lookup: its token adds nothing

    def newest(
        self, within: Within, terms: Sequence[str], limit: int, sizes: Sizes = ()
    ) -> list[int]:
        sql, params = holding(rows_of(within), terms, joined(sizes))
        return self._nums(f"select t0.num {sql} order by t0.num desc limit :limit", params, limit)

    def oldest(
        self, within: Within, terms: Sequence[str], limit: int, sizes: Sizes = ()
    ) -> list[int]:
        sql, params = holding(rows_of(within), terms, joined(sizes))
        return self._nums(f"select t0.num {sql} order by t0.num limit :limit", params, limit)

    def counts(self, within: Within, terms: Sequence[str], limit: int) -> list[Count]:
        rows = rows_of(within)
        narrowed = NARROWED if rows.person_token is not None else ""
        params = {
            "persona": rows.persona,
            "project": rows.project,
            "person": rows.person_token,
            "terms": [fold(term) for term in terms],
            "limit": limit,
        }
        found = [Count(0, 0, 0)] * len(terms)
        for n, count, first, oldest_last in self.conn.execute(
            COUNT_TERMS.format(narrowed=narrowed), params
        ):
            found[n - 1] = Count(count, first, oldest_last)
        return found

    def phrase(
        self, within: Within, tokens: Sequence[str], floor: int, limit: int, sizes: Sizes = ()
    ) -> list[int]:
        if sizes:  # the rarest tokens, rarest first
            size = dict(zip(tokens, sizes, strict=True))
            chosen = sorted(size, key=size.__getitem__)[:PHRASE_JOINS]
            merged = joined([size[token] for token in chosen])
        else:
            chosen = sorted(dict.fromkeys(tokens), key=len, reverse=True)[:PHRASE_JOINS]
            merged = False
        sql, params = holding(rows_of(within), chosen, merged)
        params |= {"floor": floor, "phrase": f" {fold(' '.join(tokens))} ", **FOLDING}
        return self._nums(f"select t0.num {sql} {PHRASE_HELD}", params, limit)

    def eligible_newest(self, within: Within, term: str, eligible: Eligible) -> list[int]:
        sql, found = holding(rows_of(within), [term])
        return self._nums(
            f"""
            select d.num from (
                select t0.num {sql} order by t0.num desc limit :scan
            ) f join search_docs d on d.num = f.num
            where {eligible.condition}
            order by d.num desc limit :limit
            """,
            {**eligible.params, **found, "scan": eligible.scan},
            eligible.limit,
        )

    def _nums(self, sql: str, params: dict[str, object], limit: int) -> list[int]:
        return [num for (num,) in self.conn.execute(sql, {**params, "limit": limit})]

    def sizes(self, nums: Sequence[int]) -> dict[int, int]:
        return dict(self.conn.execute(SELECT_SIZES.format(marks(len(nums))), list(nums)).fetchall())

    def average_length(self) -> float:
        documents, tokens = self.conn.execute(SELECT_TOTALS).fetchone()
        return tokens / documents if documents else 0.0

    def add(self, persona: str, project: str, doc_kind: str, ref: str, tokens: str) -> int:
        length = len(tokens.split())
        row = (persona, project, doc_kind, ref, tokens, length)
        [num] = self.conn.execute(INSERT_DOC, row).fetchone()
        self._write(INSERT_POSTINGS, persona, project, num, terms_of(tokens))
        if not LOADING.get():
            self.conn.execute(ADD_TOTALS, (1, length))
        return int(num)

    def retoken(self, num: int, persona: str, project: str, old: str, new: str) -> None:
        before, after = terms_of(old), terms_of(new)
        self._write(DELETE_POSTINGS, persona, project, num, before - after)
        self._write(INSERT_POSTINGS, persona, project, num, after - before)
        length = len(new.split())
        self.conn.execute(UPDATE_TOKENS, (new, length, num))
        self.conn.execute(ADD_TOTALS, (0, length - len(old.split())))

    def remove(self, num: int, persona: str, project: str, tokens: str) -> None:
        self._write(DELETE_POSTINGS, persona, project, num, terms_of(tokens))
        self.conn.execute(DELETE_DOC, (num,))
        self.conn.execute(ADD_TOTALS, (-1, -len(tokens.split())))

    def _write(self, sql: str, persona: str, project: str, num: int, terms: set[str]) -> None:
        if terms:
            params = {"persona": persona, "project": project, "num": num, "terms": sorted(terms)}
            self.conn.execute(sql, params)

    def purge(self) -> None:
        """Nothing to merge: a removed document's postings are deleted rows, whose space
        ``VACUUM`` frees."""

    def merge_step(self) -> bool:
        return False  # a B-tree needs no merging

    def recount_totals(self) -> None:
        """Set ``search_totals`` from the documents (after a load: ``LOADING``)."""
        self.conn.execute(RECOUNT_TOTALS)

    def clear(self) -> None:
        self.conn.execute("delete from search_postings")
        self.conn.execute("delete from search_docs")
        self.conn.execute("update search_totals set documents = 0, tokens = 0")

    def check(self) -> str | None:
        """The totals against the documents, postings of no document, and documents
        without their first (the scope's) token's posting: a document written without
        its postings, or its postings without it."""
        found = []
        for what, sql in CHECKS:
            count = self.conn.execute(sql).fetchone()[0]
            if count:
                found.append(f"{count} {what}")
        return f"the index does not match its content ({'; '.join(found)})" if found else None


CHECKS = (
    (
        "total(s) out of step",
        f"""
        select (t.documents != d.documents)::int + (t.tokens != d.tokens)::int
        from search_totals t, ({COUNTED_TOTALS}) d
        """,
    ),
    (
        "posting(s) of no document",
        """
        select count(*) from search_postings p where not exists (
            select 1 from search_docs d
            where d.num = p.num and d.persona = p.persona and d.project = p.project)
        """,
    ),
    (
        "document(s) not indexed",
        """
        select count(*) from search_docs d where not exists (
            select 1 from search_postings p
            where p.persona = d.persona and p.project = d.project
                and p.term = split_part(d.tokens, ' ', 1) and p.num = d.num)
        """,
    ),
)


def rows_of(within: Within) -> ScopeRows:
    if not isinstance(within, ScopeRows):
        raise TypeError("a narrowing made for another database")
    return within


# A document's posting of another term, looked up by its whole key. The limit keeps the
# planner from flattening it into a join it may plan as a scan of the term's every posting
# (it did, 200 times slower, on a table not analyzed since it grew): the lookups stay
# bounded by the first term's postings, whatever the statistics say.
PROBE = """
cross join lateral (
    select 1 from search_postings t{n} where t{n}.persona = t0.persona
        and t{n}.project = t0.project and t{n}.term = :term{n} and t{n}.num = t0.num limit 1
) as h{n}
"""
# The other term's postings joined on ``num``: both read in ``num`` order, the planner
# merges them, and the read stops at the limit.
JOIN = """
join search_postings t{n} on t{n}.persona = t0.persona and t{n}.project = t0.project
    and t{n}.term = :term{n} and t{n}.num = t0.num
"""
PROBE_COST = 12
"""Postings a merge join reads in the time one probe takes (PostgreSQL 15, warm: 21,008
probes of two terms each took 81 ms; merging the same three terms' 129,222 postings took
21 ms: docs/decisions/postgres.md)."""


def joined(sizes: Sizes) -> bool:
    """Whether a conjunction of terms held by ``sizes`` documents each (the first the
    rarest) costs less merged than probed: probing reads every posting of the first term
    and looks each up in every other's, merging reads at most all of them."""
    if len(sizes) < 2:
        return False
    return sizes[0] * (len(sizes) - 1) * PROBE_COST > sum(sizes)


def holding(
    rows: ScopeRows, terms: Sequence[str], merged: bool = False
) -> tuple[str, dict[str, object]]:
    """``from ... where ...`` of the documents ``t0.num`` of the scope holding every term
    (and the person's token, for a person's recall), and its parameters: the first term's
    postings in order, each probed for the others' (pass the rarest first), or, if
    ``merged``, the terms' postings joined (``joined``); a person's token is probed."""
    wanted = list(dict.fromkeys([fold(term) for term in terms]))
    if rows.person_token is not None:
        wanted = list(dict.fromkeys([*wanted, rows.person_token]))
    params: dict[str, object] = {"persona": rows.persona, "project": rows.project}
    joins = []
    for n, term in enumerate(wanted):
        params[f"term{n}"] = term
        if n:
            shape = JOIN if merged and term != rows.person_token else PROBE
            joins.append(shape.format(n=n))
    where = "where t0.persona = :persona and t0.project = :project and t0.term = :term0"
    return f"from search_postings t0 {' '.join(joins)} {where}", params


def terms_of(tokens: str) -> set[str]:
    """The distinct terms a document of ``tokens`` is indexed under."""
    return {fold(token) for token in tokens.split()}


COMBINING_DIACRITICS = range(0x300, 0x370)
"""Unicode's combining diacritical marks: what ``remove_diacritics`` leaves out."""
LATIN = [*range(0xC0, 0x250), *range(0x1E00, 0x1F00)]
"""The letters whose diacritics FTS5 removes: Latin-1 to Latin Extended-B, and Latin
Extended Additional (not Greek's, nor Cyrillic's)."""
KEPT = {"\u01e0", "\u01e1"}
"""Latin letters FTS5's table leaves as they are: A with dot above and macron."""
CASE_FOLDS = {
    "µ": "μ",
    "ſ": "s",
    "ς": "σ",
    "ϐ": "β",
    "ϑ": "θ",
    "ϕ": "φ",
    "ϖ": "π",
    "ϰ": "κ",
    "ϱ": "ρ",
    "ϵ": "ε",
    "ẛ": "s",
    "\u1fbe": "ι",  # GREEK PROSGEGRAMMENI
}
"""Lower-case letters FTS5 folds further, as Unicode's case folding does (a final sigma is
a sigma)."""


def bare(char: str) -> str | None:
    """A Latin letter without its diacritics (None when it has none)."""
    decomposed = unicodedata.normalize("NFD", char)
    base, accents = decomposed[0], decomposed[1:]
    if base.isascii() and accents and all(ord(mark) in COMBINING_DIACRITICS for mark in accents):
        return base
    return None


FOLDS = str.maketrans(
    {chr(mark): None for mark in COMBINING_DIACRITICS}
    | {char: base for char in map(chr, LATIN) if char not in KEPT and (base := bare(char))}
    | CASE_FOLDS
)


def fold(token: str) -> str:
    """``token`` as FTS5's ``unicode61 remove_diacritics 2`` indexes it: ``café`` is
    ``cafe``, a final sigma a sigma. amem's tokens are lower-cased already; most are ASCII,
    which folding leaves as it is (``tests/test_lexical_parity.py`` compares every letter
    and digit with FTS5's own folding)."""
    return token if token.isascii() else token.translate(FOLDS)


FOLDING = {
    "foldable": f"[{''.join(map(chr, FOLDS))}]",
    "fold_from": "".join(chr(c) for c, to in FOLDS.items() if to)
    + "".join(chr(c) for c, to in FOLDS.items() if not to),
    "fold_to": "".join(to for to in FOLDS.values() if to),
}
"""``fold`` in PostgreSQL's words: the characters it changes (a regular expression), and
``translate``'s arguments (those it removes last, with nothing to become)."""
