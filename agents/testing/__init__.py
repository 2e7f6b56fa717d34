"""In-memory implementations of the runtime's interfaces, for tests and for writing agents.

    host = InMemoryHost(run_input="Refund Ada's order")
    outcome = advance(agent=get_agent("demo"), provider=ScriptedProvider(script), host=host)
    # Waiting(...): a reviewer decides, as the desk would, with a signed decision
    host.approve(outcome.call_ids[0])
    outcome = advance(agent=get_agent("demo"), provider=ScriptedProvider(script), host=host)
    assert host.world.emails[0].to == "ada@example.com"

One module per job:

    keys     signing keys, a static keyring, decisions and grants signed as the desk signs them
    ledger   the side-effect ledger and decision consumption, with the database's guarantees
    world    the demo agent's world, recording every email and refund
    host     the loop's host for one run, wiring the three together

Production code never imports this package: the desk implements these
interfaces on its database.
"""

from agents.testing.host import InMemoryHost
from agents.testing.keys import StaticKeyring, generate_signing_key, sign_decision, sign_grant
from agents.testing.ledger import InMemoryLedger, LedgerConflict, LedgerRow, Transactional
from agents.testing.world import RecordingWorld, Refund, SentEmail

__all__ = [
    "InMemoryHost",
    "InMemoryLedger",
    "LedgerConflict",
    "LedgerRow",
    "RecordingWorld",
    "Refund",
    "SentEmail",
    "StaticKeyring",
    "Transactional",
    "generate_signing_key",
    "sign_decision",
    "sign_grant",
]
