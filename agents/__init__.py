"""The agent runtime. Knows nothing of HTTP, pages or Channels.

It reaches the world only through the small interfaces in `store`, `gate` and
`loop` (checkpoint store, ledger, keyring, host), which `reviewdesk` implements
on the database and tests can implement in memory (`agents.testing`, never
imported by production code). What a signed decision is, and how it is
verified, is defined once in `decisions`. It imports no Django.
"""
