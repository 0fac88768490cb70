"""``amem inspect``: a read-only web page over one database file, served on 127.0.0.1.

source   opening the file read-only, refusing what it cannot read, one snapshot per request
queries  plain functions of a read-only connection: pages of scopes, events, memories
graph    a memory's corrections and relations, bounded, and their inline SVG drawing
html     the pages: server-rendered HTML, every value escaped
app      the Starlette application: GET routes only
server   uvicorn on a socket bound to 127.0.0.1
"""
