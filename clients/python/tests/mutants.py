"""Guard-line mutations of the client the tests must kill: each is applied to reviewdesk_client
in place (and undone after), and the tests it names must then fail. One desk serves them all.
In place, not in a copy: the gateway, resumer and paused-graph tests start processes of their
own that import the package from clients/python.

    ../../.venv-client/bin/python tests/mutants.py [-k WORD]      (from clients/python)
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
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
    # The adapters and the MCP gateway. Their tests run parts of the client in processes of
    # their own (the gateway, a resumer, a paused graph), so the runner mutates the package in
    # place. Left out: the OpenAI wrapper's check that the model's arguments hash to the ticket's
    # (`args_sha256(model_arguments) != ticket.arguments_sha256`) survives deletion, as it is
    # redundant: verify() and guard() both refuse arguments other than the reviewed ones. Two
    # LangGraph mutations are equivalent, not listed: `take_verified(...) or None` (a Verified is always
    # truthy) and the resumer also walking a `self._seen` that never exists.
    ("openai: a call approved without a verified decision runs", "adapters/openai_agents.py",
     "        if verified is None:\n            return REFUSED.format(why=\"no verified reviewer decision for this call\")\n", "",
     ["test_adapter_openai_agents.py::test_a_call_approved_only_inside_the_stored_state_is_refused_by_the_wrapper"]),
    ("openai: a decision verified for another call runs this one", "adapters/openai_agents.py",
     "    if ticket is None or verified.approval_id != ticket.approval_id:\n        return \"the decision is not for this call\"\n", "",
     ["test_adapter_openai_agents.py::test_a_decision_verified_for_another_call_is_refused_by_the_wrapper"]),
    ("openai: the wrapper neither guards nor consumes", "adapters/openai_agents.py",
     "            await _io(self.desk.guard, verified, to_run)", "            pass",
     ["test_adapter_openai_agents.py::test_approve_runs_the_tool_once_after_a_restart",
      "test_adapter_openai_agents.py::test_replayed_decision_is_refused_here_and_by_the_desk"]),
    ("openai: a decision verify refused approves the call", "adapters/openai_agents.py",
     "                refused[item.call_id] = str(error)\n                continue",
     "                refused[item.call_id] = str(error)\n                state.approve(item); applied += 1\n                continue",
     ["test_adapter_openai_agents.py::test_forged_decision_is_refused_before_the_tool_runs",
      "test_adapter_openai_agents.py::test_decision_for_another_run_with_the_same_call_id_is_refused",
      "test_adapter_openai_agents.py::test_decision_signed_by_an_unpinned_key_is_refused",
      "test_adapter_openai_agents.py::test_tampered_run_state_is_refused"]),
    ("openai: a lapsed approval is approved", "adapters/openai_agents.py",
     "                state.reject(item, rejection_message=LAPSED.format(status=outcome.status))", "                state.approve(item)",
     ["test_adapter_openai_agents.py::test_cancelled_run_becomes_a_rejection_the_model_reads"]),
    ("openai: an approve covers the tool for the rest of the run", "adapters/openai_agents.py",
     "                state.approve(item)\n            applied += 1", "                state.approve(item, always_approve=True)\n            applied += 1",
     ["test_adapter_openai_agents.py::test_one_of_two_decided_runs_that_one_and_the_other_waits_without_a_model_call"]),
    ("pydantic: a call approved without a verified decision runs", "adapters/pydantic_ai.py",
     "        if verified is None:\n            raise ToolFailed(REFUSED.format(why=\"no verified reviewer decision for this call\"))\n", "",
     ["test_adapter_pydantic_ai.py::test_approvals_made_without_the_desk_are_refused_by_the_guard"]),
    ("pydantic: a decision verified for another call runs this one", "adapters/pydantic_ai.py",
     "        if ticket is None or ticket.approval_id != verified.approval_id or ticket.tool != call.tool_name:\n            raise ToolFailed(REFUSED.format(why=\"the decision is not for this call\"))\n", "",
     ["test_adapter_pydantic_ai.py::test_a_decision_verified_for_another_call_is_refused_by_the_guard"]),
    ("pydantic: the guard neither guards nor consumes", "adapters/pydantic_ai.py",
     "            await _io(self.desk.guard, verified, call.args_as_dict())", "            pass",
     ["test_adapter_pydantic_ai.py::test_approve_runs_the_tool_once_after_a_restart",
      "test_adapter_pydantic_ai.py::test_replayed_decision_is_refused_here_and_by_the_desk"]),
    ("pydantic: a tool that asks for approval itself is not guarded", "adapters/pydantic_ai.py",
     "if tool_def.kind == \"unapproved\" or ctx.tool_call_approved:", "if tool_def.kind == \"unapproved\":",
     ["test_adapter_pydantic_ai.py::test_a_tool_that_asks_for_approval_itself_is_gated_the_same_way"]),
    ("pydantic: a turn resumes with calls waiting or refused", "adapters/pydantic_ai.py",
     "        if answers.waiting or answers.refused:", "        if False:",
     ["test_adapter_pydantic_ai.py::test_one_of_two_decided_does_not_resume_and_both_decided_resume_once",
      "test_adapter_pydantic_ai.py::test_forged_decision_is_refused_before_the_tool_runs",
      "test_adapter_pydantic_ai.py::test_decision_for_another_run_with_testmodels_constant_call_id_is_refused",
      "test_adapter_pydantic_ai.py::test_decision_signed_by_an_unpinned_key_is_refused",
      "test_adapter_pydantic_ai.py::test_tampered_history_is_refused"]),
    ("pydantic: a lapsed approval is approved", "adapters/pydantic_ai.py",
     "                answers.approvals[call_id] = ToolDenied(LAPSED.format(status=outcome.status))\n                continue",
     "                answers.approvals[call_id] = ToolApproved()\n                continue",
     ["test_adapter_pydantic_ai.py::test_cancelled_run_becomes_a_denial_the_model_reads"]),
    ("langgraph: a gated call without a decision runs ungated", "adapters/langgraph.py",
     "if ticket is None and not _gated_now(config, request):", "if True:",
     ["test_adapter_langgraph.py::test_a_hand_made_approve_without_a_desk_decision_is_refused_by_the_guard"]),
    ("langgraph: the guard takes no call as gated", "adapters/langgraph.py",
     "return True if when is None else bool(when(request))", "return False",
     ["test_adapter_langgraph.py::test_a_gated_call_that_never_reached_the_desk_is_refused_by_the_guard"]),
    ("langgraph: a reject runs the call", "adapters/langgraph.py",
     "if verified.verdict == \"reject\":\n                return self._refuse(", "if False:\n                return self._refuse(",
     ["test_adapter_langgraph.py::test_a_when_predicate_that_flips_on_resume_cannot_run_a_rejected_call"]),
    ("langgraph: a decision filed under another call runs this one", "adapters/langgraph.py",
     "if verified.tool_call_id != call[\"id\"]:", "if False:",
     ["test_adapter_langgraph.py::test_a_verified_decision_filed_under_another_call_is_refused_by_the_guard"]),
    ("langgraph: the guard does not check the arguments", "adapters/langgraph.py",
     "self.desk.guard(verified, call[\"args\"])", "self.desk.consume(verified)",
     ["test_adapter_langgraph.py::test_arguments_changed_between_verification_and_the_tool_are_refused_by_the_guard"]),
    ("langgraph: the guard does not consume", "adapters/langgraph.py",
     "self.desk.guard(verified, call[\"args\"])",
     "None if args_sha256(call[\"args\"]) == args_sha256(verified.arguments) else 1/0",
     ["test_adapter_langgraph.py::test_approve_runs_the_call_once_and_the_desk_run_succeeds"]),
    ("langgraph: the decision is trusted unverified", "adapters/langgraph.py",
     "verified = self.desk.verify(decision, ticket, current_arguments=request[\"args\"])",
     "import base64 as _b, json as _j, datetime as _d; from reviewdesk_client import Verified as _V; _p = _j.loads(_b.b64decode(decision[\"payload_b64\"])); verified = _V(decision[\"verdict\"], decision.get(\"arguments\") if decision[\"verdict\"] == \"edit\" else request[\"args\"], decision.get(\"reason\") or \"\", \"\", decision[\"id\"], _p[\"nonce\"], ticket.approval_id, ticket.tool_call_id, _d.datetime.now(_d.UTC) + _d.timedelta(hours=1), ticket.run_id)",
     ["test_adapter_langgraph.py::test_a_forged_decision_is_refused_before_the_tool_runs",
      "test_adapter_langgraph.py::test_a_decision_signed_by_an_unpinned_key_is_refused"]),
    ("claude: the decision is trusted unverified", "adapters/claude.py",
     "verified = self.desk.verify(decision, ticket, current_arguments=tool_input)",
     "import base64 as _b, json as _j, datetime as _d; from reviewdesk_client import Verified as _V; _p = _j.loads(_b.b64decode(decision[\"payload_b64\"])); verified = _V(decision[\"verdict\"], decision.get(\"arguments\") if decision[\"verdict\"] == \"edit\" else tool_input, decision.get(\"reason\") or \"\", \"\", decision[\"id\"], _p[\"nonce\"], ticket.approval_id, ticket.tool_call_id, _d.datetime.now(_d.UTC) + _d.timedelta(hours=1), ticket.run_id)",
     ["test_adapter_claude.py::test_a_forged_decision_is_denied",
      "test_adapter_claude.py::test_a_decision_signed_by_an_unpinned_key_is_denied"]),
    ("claude: the decision is not consumed", "adapters/claude.py", "            self.desk.consume(verified)\n", "",
     ["test_adapter_claude.py::test_approve_allows_the_input_as_asked_and_spends_the_decision"]),
    ("claude: a parked approval is not marked used", "adapters/claude.py",
     "        self._mark_used(ticket)\n        if verified.verdict", "        if verified.verdict",
     ["test_adapter_claude.py::test_park_mode_allows_exactly_that_call_once_after_the_decision"]),
    ("claude: a parked approval covers other arguments", "adapters/claude.py",
     "ticket.tool == tool_name and ticket.arguments_sha256 == sha and", "ticket.tool == tool_name and",
     ["test_adapter_claude.py::test_park_mode_allows_exactly_that_call_once_after_the_decision"]),
    ("claude: a parked approval covers another tool with the same input", "adapters/claude.py",
     "ticket.tool == tool_name and ticket.arguments_sha256", "ticket.arguments_sha256",
     ["test_adapter_claude.py::test_park_mode_allows_exactly_that_call_once_after_the_decision"]),
    ("gateway: a changed or removed definition is served", "mcp_gateway/proxy.py",
     "        if state not in (PinState.PINNED, PinState.NEW):\n            return error_result(refusal(name, state))\n", "",
     ["test_mcp_gateway.py::test_a_changed_definition_is_refused_until_accepted"]),
    ("gateway: a definition changed while the call waits runs", "mcp_gateway/desk.py",
     "            or (await call.served_digest()) != call.digest\n", "",
     ["test_mcp_gateway.py::test_a_definition_changed_while_the_call_waits_is_refused_before_it_runs"]),
    ("gateway: a decision under another definition runs", "mcp_gateway/desk.py",
     "            ticket.external_checkpoint != f\"{ticket.tool_call_id}@{call.digest}\"\n            or ", "            ",
     ["test_mcp_gateway.py::test_a_call_decided_under_one_definition_never_runs_under_another"]),
    ("gateway: a forged pin is read", "mcp_gateway/pins.py",
     "            if tool_digest(pin[\"definition\"]) != pin[\"digest\"]:\n", "            if False:\n",
     ["test_mcp_gateway.py::test_a_pins_file_of_another_server_or_with_a_forged_pin_is_refused"]),
    ("gateway: another server's pins are read", "mcp_gateway/pins.py",
     "        if data.get(\"server\") != self.server:\n", "        if False:\n",
     ["test_mcp_gateway.py::test_a_pins_file_of_another_server_or_with_a_forged_pin_is_refused"]),
    ("gateway: the call neither guards nor consumes", "mcp_gateway/desk.py",
     "            await self._io(self.desk.guard, verified, arguments)\n", "            pass\n",
     ["test_mcp_gateway.py::test_a_replayed_decision_is_refused_before_the_tool_runs"]),
    ("gateway: a reject runs the call", "mcp_gateway/desk.py",
     "        if not verified.approved:\n            return await self._rejected(pending, verified)\n", "",
     ["test_mcp_gateway.py::test_a_rejected_call_is_an_error_with_the_reason_and_never_runs"]),
    ("gateway: identical calls at once are not serialised", "mcp_gateway/desk.py",
     "            async with lock:\n", "            if True:\n",
     ["test_mcp_gateway.py::test_identical_calls_at_once_run_the_tool_once"]),
]  # fmt: skip


def start_desk(description: Path) -> subprocess.Popen:
    desk = subprocess.Popen([sys.executable, str(HERE / "conftest.py"), str(description)], cwd=HERE.parent)
    deadline = time.monotonic() + 180
    while not description.exists() or not description.read_text():
        if desk.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the desk did not start")
        time.sleep(0.5)
    return desk


def killed(mutant: tuple, description: Path) -> bool:
    """Whether the mutant's tests fail with the mutation applied to the package (with `mutated`
    equal to `original`: the baseline, which must pass). The file is restored whatever happens."""
    name, file, original, mutated, tests = mutant
    path = PACKAGE / file
    source = path.read_text()
    if original != mutated and source.count(original) != 1:
        raise SystemExit(f"{name}: the original occurs {source.count(original)} times in {file}")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(HERE)]),
        "CLIENT_TEST_DESK": str(description),
    }
    try:
        path.write_text(source.replace(original, mutated))
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-x",
                "-p",
                "no:cacheprovider",
                *[f"tests/{t}" for t in tests],
            ],
            cwd=HERE.parent,
            env=env,
            capture_output=True,
            text=True,
        )
    finally:
        path.write_text(source)
    return done.returncode != 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("-k", default="", help="only the mutants whose name holds this")
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if args.k in m[0]]
    # A terminated run still restores the mutated file (killed's finally).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = Path(tempfile.mkdtemp(prefix="rd-client-mutants-"))
    description = work / "desk.json"
    desk = start_desk(description)
    survivors = []
    try:
        every_test = sorted({t for m in chosen for t in m[4]})
        if killed(("baseline", "verify.py", "", "", every_test), description):
            print("the named tests fail without any mutation: fix them first")
            return 1
        for mutant in chosen:
            verdict = killed(mutant, description)
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
