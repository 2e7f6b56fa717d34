"""Approvals: the whole life of an interrupt, from the call that needs a human to the signed
decision the gate verifies. Its rooms, each importing only the ones below it (the `layers`
contract in pyproject.toml):

- `deciding/`: checking and recording a decision (`approval_decide`), the one frozen input
  every door hands it, the payload a signature covers, device-signed decisions;
- `grants/`: standing grants, made with an approve, used by the gate, listed and revoked;
- `lifecycle/`: a request's life outside a decision: raised (and routed), handed over, reminded
  and escalated, expired, notified with one-time links;
- `reads/`: the desk's queue, what the worker reads to resume, a call's context, and the one
  shape of an approval's payload;
- `access.py`: who may see an approval and who may decide it;
- `signing.py`: the web tier's key, and whether a tool requires a reviewer's device key;
- `rows.py`: the app's hand-written SQL, each statement with its measured reason;
- `models.py`, `tasks.py` (beat's clock), `admin.py`.
"""
