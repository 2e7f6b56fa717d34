"""The agent runtime. Knows nothing of HTTP, pages or Channels.

It reaches the world only through the small interfaces in `store`, `gate` and
`loop` (checkpoint store, ledger, keyring, host), which `reviewdesk` implements
on the database and tests can implement in memory.
"""
