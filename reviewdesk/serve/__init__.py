"""Starting the desk: `make run`'s launcher, the embedded default's Redis, and the ASGI handler
the web process serves with. (The secrets it keeps in var/ are read by `conf/var.py`.)"""
