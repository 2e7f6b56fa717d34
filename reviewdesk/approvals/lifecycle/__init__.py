"""A request's life outside a decision: raised and routed (`raising`, `routing`), handed over
(`handover`), reminded and escalated (`clock`), expired (`expiry`), and its assignees told by
email with a one-time link (`notify`, `links`)."""
