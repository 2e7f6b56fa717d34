from django.apps import AppConfig


class AgentModulesConfig(AppConfig):
    name = "reviewdesk.agent_modules"
    label = "agent_modules"

    def ready(self) -> None:
        from reviewdesk.agent_modules import checks  # noqa: F401  (registers the system check)
        from reviewdesk.agent_modules.loading import load_configured_agents

        # Every process that sets Django up (web, worker, beat, manage.py) loads the same set.
        # A failure is kept, not raised, so that `manage.py check` can report it as a check;
        # the processes that serve or run refuse to start on it (loading.refuse_to_start_if_broken).
        load_configured_agents()
