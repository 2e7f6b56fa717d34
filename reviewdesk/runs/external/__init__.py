"""External runs: agents built with another framework (OpenAI Agents, LangGraph, Pydantic AI,
the Claude Agent SDK, an MCP gateway) that pause for approval in their own process and use the
desk to decide (issue 37, docs/external-runs.md).

The framework submits its gated calls (`submit`); each becomes an approval request on a run of
kind "external", which the desk's Celery tasks, leases and sweeper never touch. The reviewers
decide as for any call; the framework verifies the signed decision in its own process, consumes
it once, with the ledger row in the same transaction (`consume`), and reports the tool's outcome
and the run's end (`report`). A consumed call never reported becomes `unknown` after
DESK_EXTERNAL_CONFIRM_SECONDS (`unknown`), and a human reconciles it.
"""
