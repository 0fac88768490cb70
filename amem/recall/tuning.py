"""Every number recall is tuned by, in one place; docs/retrieval.md lists them.

What each was measured against is in docs/decisions/. A number changes only when the
whole quality suite (``bench/quality.py``: every set, query style and language, with the
plain baselines in the same run) says it helps everywhere.
"""

# --- how much of the index one query reads ------------------------------------------------

PER_TERM = 200
"""Most recent eligible in-scope documents taken per query token."""

TERM_SCAN = 2000
"""Most recent in-scope postings examined per query token to find them."""

MAX_TERMS = 64
"""Most informative query terms (fewest documents in the scope) scored."""

POSTINGS = 8 * PER_TERM
"""Postings read for candidates, the rarest terms' first: every term of a query over a
small scope, the eight most informative common ones (``PER_TERM`` postings each) over a
large one."""

STATS_BATCH = 100
"""Tokens whose document frequency one statement reads (SQLite allows 500 compound terms)."""

KNOWN_TERMS = 50_000
"""Most common terms' counts kept between queries (``TermCounts``): about 13 MB."""

CONJOINED = 4
"""Most terms one conjunction holds (its most informative ones)."""

CONJUNCTIONS = 8
"""Most conjunctions looked up per query."""

CONJOINED_KEPT = 100
"""Most documents found by conjunctions that are scored."""

PHRASE_TOKENS = 16
"""Longest query (in tokens) also looked up as a phrase."""

PHRASE_WINDOW = 250_000
"""Newest documents a phrase lookup reads (the phrase of an older one still counts when
it is a candidate already)."""

SCORED_CHARS = 8000
"""Characters of a candidate's stored tokens that BM25 reads. Every memory and nearly
every message is shorter and is scored exactly; a longer one (an event may hold 100,000
characters) is scored on its first tokens (``lexical.Scanned``), so a recall costs the
same however long the events it finds are."""

# --- how many candidates ------------------------------------------------------------------

RANKED = 50
"""Candidates of each kind gathered first: lexical ones scored with BM25 (by idf-weighted
presence first) and nearest ones by cosine, or ``limit`` if more. The same for every limit
up to it, so a smaller limit returns a prefix of a larger one's items. Past 50, a lexical
candidate holds few of the query's terms and a near one is as near as many others."""

MAX_DEPTH = 16 * RANKED
"""Most candidates of each kind gathered when copies of one text crowd out the rest: the
``occurrences`` of a text held by more are counted up to this."""

RAW_CHARS = 2000
"""Characters of a raw event an item shows (``truncated`` when it has more)."""

# --- BM25 ---------------------------------------------------------------------------------

K1 = 1.2
"""BM25's term-frequency saturation (FTS5's own)."""

B = 0.75
"""BM25's length normalisation (FTS5's own)."""

SOURCE_EVENT_DISCOUNT = 0.8
"""A memory found through its source event's text scores this share of that match."""

# --- fast mode's score: evidence scaled by priors -----------------------------------------

EVIDENCE_WEIGHTS = {"lexical": 0.40, "semantic": 0.25, "link": 0.10}
"""How strongly the query matched, by kind of evidence (``ranking.score``)."""

LEXICAL_EVIDENCE = {"lexical": 0.40, "link": 0.10}
"""The evidence of words alone: what hybrid recall breaks its ties by."""

PRIOR_WEIGHTS = {"basis": 0.08, "confidence": 0.05, "freshness": 0.12}
"""How much to trust what matched: each lowers the score by its weight times its shortfall."""

WEIGHTS = EVIDENCE_WEIGHTS | PRIOR_WEIGHTS
"""Every weight of ``ranking.score`` by component name."""

BASIS_WEIGHT = {"user_statement": 1.0, "assistant_expression": 0.8, "inference": 0.5}
"""The ``basis`` prior of a memory by how it is known: said by the user, by the assistant,
or inferred."""

RAW_BASIS = 0.3
"""The ``basis`` prior of a raw event: no memory vouches for it."""

RAW_CONFIDENCE = 0.5
"""The ``confidence`` prior of a raw event."""

# --- hybrid recall ------------------------------------------------------------------------

REPLIED = 3
"""The replies of the best ``REPLIED`` turns are candidates too..."""

REPLY_SHARE = 0.8
"""...with at least this share of the fusion score of the turn they answer."""

COVERED = 0.95
"""Share of the scope's memories and events with a vector below which hybrid recall warns."""

SIMULATED = 1024
"""Scopes up to this many vectors have the chance standing of their nearest vector
simulated (``nearest.chance_standing``); past it, Blom's formula is within a few
hundredths of the simulation."""
