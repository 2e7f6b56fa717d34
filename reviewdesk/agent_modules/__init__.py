"""The agent modules a process loads (DESK_AGENTS), and how a process refuses to start when one
of them cannot be used: `manage.py check` reports it, the web process, the worker, beat and
`make run` stop with the module's name and the problem."""
