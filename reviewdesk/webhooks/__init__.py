"""Webhooks: signed deliveries of a user's runs' events, made from the desk's event log after a
cursor, retried with backoff, re-sendable."""
