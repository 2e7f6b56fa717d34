"""Guard-line mutations of the client the tests must kill: each is applied to a copy of
reviewdesk_client, and the tests it names must then fail. One desk serves them all.

    ../../.venv-client/bin/python tests/mutants.py [-k WORD]      (from clients/python)
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent / "reviewdesk_client"

# (name, file, original, mutated, tests)
MUTANTS = [
    ("an unpinned key id is looked up anyway", "verify.py",
     "    if key is None:\n        raise VerificationError(\"unpinned_key\"", "    if False:\n        raise VerificationError(\"unpinned_key\"",
     ["test_core.py::test_a_decision_signed_by_an_unpinned_key_is_refused"]),
    ("the signature is not checked", "verify.py",
     "        key.verify(base64.b64decode(decision.get(\"signature\") or \"\", validate=True), signed)\n", "        pass\n",
     ["test_core.py::test_flipping_any_payload_field_is_refused"]),
    ("the served payload may differ from the signed bytes", "verify.py",
     "    if served is not None and served != payload:", "    if False:",
     ["test_core.py::test_a_payload_served_apart_from_the_signed_bytes_is_refused"]),
    ("the payload may name another key", "verify.py",
     "    if payload.get(\"key_id\") != key_id:", "    if False:",
     ["test_local.py::test_a_payload_naming_another_key_than_its_signer_is_refused"]),
    ("non-canonical signed bytes are read", "verify.py",
     "if not isinstance(payload, dict) or jcs(payload) != signed:", "if not isinstance(payload, dict):",
     ["test_local.py::test_signed_bytes_that_are_not_canonical_are_refused"]),
    ("the ticket binding is not checked", "verify.py",
     "        if payload.get(field) != getattr(ticket, attribute):", "        if False:",
     ["test_core.py::test_a_ticket_of_another_binding_refuses_it",
      "test_core.py::test_another_runs_decision_for_the_same_call_id_is_refused"]),
    ("the audience is not bound", "verify.py", "    (\"audience\", \"audience\"),\n", "",
     ["test_core.py::test_a_ticket_of_another_binding_refuses_it"]),
    ("the external id is not bound", "verify.py", "    (\"external_id\", \"external_id\"),\n", "",
     ["test_core.py::test_a_ticket_of_another_binding_refuses_it"]),
    ("the decision id is not bound", "verify.py",
     "    if payload.get(\"decision_id\") != decision.get(\"id\"):", "    if False:",
     ["test_core.py::test_a_decision_id_or_verdict_served_apart_from_the_payload_is_refused"]),
    ("the verdict served is not bound", "verify.py",
     "    if payload.get(\"verdict\") != decision.get(\"verdict\"):", "    if False:",
     ["test_core.py::test_a_decision_id_or_verdict_served_apart_from_the_payload_is_refused"]),
    ("the reason is not bound", "verify.py",
     "    if payload.get(\"reason_sha256\") != text_sha256(decision.get(\"reason\") or \"\"):", "    if False:",
     ["test_core.py::test_a_reason_other_than_the_signed_one_is_refused"]),
    ("a verdict the ticket does not allow passes", "verify.py",
     "if verdict not in VERDICTS or verdict not in ticket.verdicts:", "if verdict not in VERDICTS:",
     ["test_core.py::test_a_verdict_the_ticket_does_not_allow_is_refused"]),
    ("arguments changed since submission pass", "verify.py",
     "    if args_sha256(current_arguments) != ticket.arguments_sha256:", "    if False:",
     ["test_core.py::test_arguments_changed_after_submission_are_refused"]),
    ("the arguments to run are not checked against the signed hash", "verify.py",
     "    if args_sha256(to_run) != payload.get(\"arguments_sha256\"):", "    if False:",
     ["test_core.py::test_edited_arguments_other_than_the_signed_ones_are_refused"]),
    ("a decision issued in the future passes", "verify.py", "    if issued_at > now + skew:", "    if False:",
     ["test_core.py::test_an_expired_decision_is_refused"]),
    ("an expired decision passes", "verify.py", "    if now >= not_after:", "    if False:",
     ["test_core.py::test_an_expired_decision_is_refused"]),
    ("a nonce consumed here verifies again", "verify.py", "    if consumed(payload[\"nonce\"]):", "    if False:",
     ["test_core.py::test_a_replayed_decision_is_refused"]),
    ("consume does not record the nonce first", "client.py",
     "        if not self.store.claim_nonce(verified.nonce):", "        if not (self.store.claim_nonce(verified.nonce) or True):",
     ["test_core.py::test_a_nonce_consumed_here_is_refused_without_asking_the_desk"]),
    ("a consume the desk refused keeps the nonce spent", "client.py",
     "            self.store.release_nonce(verified.nonce)\n", "            pass\n",
     ["test_core.py::test_a_refused_consume_leaves_the_nonce_usable"]),
    ("the guard runs other arguments than the verified ones", "client.py",
     "        if args_sha256(arguments) != args_sha256(verified.arguments):", "        if False:",
     ["test_core.py::test_edit_runs_the_edited_arguments"]),
    ("the guard lets a reject run the tool", "client.py", "        if not verified.approved:", "        if False:",
     ["test_core.py::test_reject_carries_the_reviewers_reason"]),
    ("an old webhook timestamp passes", "delivery.py",
     "    if abs((time.time() if now is None else now) - t) > tolerance:", "    if False:",
     ["test_delivery.py::test_a_webhook_with_a_bad_hmac_or_an_old_timestamp_is_refused"]),
    ("a wrong webhook HMAC passes", "delivery.py", "    if not hmac.compare_digest(expected, given):", "    if False:",
     ["test_delivery.py::test_a_webhook_with_a_bad_hmac_or_an_old_timestamp_is_refused"]),
    ("the resumer hands a decision over again", "resumer.py",
     "        if not self.desk.store.claim_handled(key):", "        if not (self.desk.store.claim_handled(key) or True):",
     ["test_resumer.py::test_a_handled_decision_is_not_handed_over_again_even_unconsumed"]),
    ("the resumer hands over a decision consumed elsewhere", "resumer.py",
     "        if outcome is None or (outcome.decision or {}).get(\"consumed_at\"):", "        if outcome is None:",
     ["test_resumer.py::test_a_decision_the_agent_consumed_itself_is_not_handed_over"]),
]  # fmt: skip


def start_desk(description: Path) -> subprocess.Popen:
    desk = subprocess.Popen([sys.executable, str(HERE / "conftest.py"), str(description)], cwd=HERE.parent)
    deadline = time.monotonic() + 180
    while not description.exists() or not description.read_text():
        if desk.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the desk did not start")
        time.sleep(0.5)
    return desk


def killed(mutant: tuple, description: Path, work: Path) -> bool:
    """Whether the mutant's tests fail on a copy of the package with the mutation applied (with
    `mutated` equal to `original`: the baseline, which must pass)."""
    name, file, original, mutated, tests = mutant
    copy = work / "reviewdesk_client"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(PACKAGE, copy)
    source = (copy / file).read_text()
    if original != mutated and source.count(original) != 1:
        raise SystemExit(f"{name}: the original occurs {source.count(original)} times in {file}")
    (copy / file).write_text(source.replace(original, mutated))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(work), str(HERE)]),
        "CLIENT_TEST_DESK": str(description),
    }
    done = subprocess.run(
        # -P: the working directory's own reviewdesk_client must not come before the copy.
        [sys.executable, "-P", "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *[f"tests/{t}" for t in tests]],
        cwd=HERE.parent, env=env, capture_output=True, text=True,
    )  # fmt: skip
    return done.returncode != 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("-k", default="", help="only the mutants whose name holds this")
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if args.k in m[0]]
    work = Path(tempfile.mkdtemp(prefix="rd-client-mutants-"))
    description = work / "desk.json"
    desk = start_desk(description)
    survivors = []
    try:
        every_test = sorted({t for m in chosen for t in m[4]})
        if killed(("baseline", "verify.py", "", "", every_test), description, work):
            print("the named tests fail without any mutation: fix them first")
            return 1
        for mutant in chosen:
            verdict = killed(mutant, description, work)
            print(f"{'killed  ' if verdict else 'SURVIVED'} {mutant[0]}", flush=True)
            if not verdict:
                survivors.append(mutant[0])
    finally:
        desk.terminate()
        desk.wait(30)
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{len(chosen) - len(survivors)} of {len(chosen)} killed")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
