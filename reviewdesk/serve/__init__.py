"""Starting the desk: `make run`'s launcher, the embedded default's Redis and var/ secrets, and
the ASGI handler the web process serves with."""
