"""Everything that knows a chat platform: payload shapes (``payloads``), request signing (``signing``), what an
answer means (``answers``), rate limits (``limits``) and the one HTTP sender (``sender``, httpx).

All but ``sender`` are pure (no I/O, no clock, no httpx, kopf or kubernetes: an import-linter contract in
``pyproject.toml`` holds them to that). The budget planner (``modalscale.costmodel``) only decides what to say
and to whom; the outbox there keeps it until each target accepted it.
"""
