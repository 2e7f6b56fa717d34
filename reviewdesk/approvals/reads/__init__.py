"""Reads of approvals: the desk's queue (`queue`), what the worker reads of a call's decisions
(`decisions`), what a reviewer sees of a call beyond its arguments (`context`), and the one
shape of an approval's payload for every client (`representation`)."""
