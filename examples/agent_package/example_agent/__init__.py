"""An agent package for Review Desk: `DESK_AGENTS=example_agent.agents` loads its agent."""
