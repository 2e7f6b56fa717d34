"""Desk events, the transport only: written in the change's transaction, pushed on commit to
chosen groups, replayed after a sequence number. The apps build what they say."""
