"""The desk's server-rendered pages, a module per domain (the queue, an approval, runs, grants,
the audit trail, keys, tokens, webhooks, hand-over, one-time links, the API's docs). Each view:
check who asks, fetch by id, call one service, render."""
