"""Settings helpers, read by reviewdesk/settings.py: reading the environment, and one module
each for the database, Redis, logging, security, mail, the API's framework and the secrets
kept in var/. Plain data and
functions only: settings import them before Django is set up."""
