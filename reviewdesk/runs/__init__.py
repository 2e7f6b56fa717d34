"""Runs: submitted tasks, their attempts with leases and fencing, the message log and
checkpoints, the side-effect ledger, and the Celery tasks and sweeper that drive them."""
