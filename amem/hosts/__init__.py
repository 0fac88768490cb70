"""Hosts whose own transcripts amem reads and captures (``claude_code``), on top of the
host-capture path (``Scope.capture_transcript``)."""
