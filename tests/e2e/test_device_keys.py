"""Device keys in headless Chromium on real processes (daphne, a Celery worker, Redis):
the admin makes a device key on /keys/ and it is pinned as the workers' root; alice makes
hers in another browser; the admin endorses it; alice approves on the approval page, her
browser signs; the real worker, which requires device keys, verifies her signature and
sends the email. Then from the desk's pane: a browser of hers without the key says why and signs
nothing; hers signs with `a`, and the worker verifies that too."""

from __future__ import annotations

import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connections
from playwright.sync_api import expect

from agents.decisions import is_device_signed
from reviewdesk.accounts.models import DeviceKey
from reviewdesk.accounts.services import token_create
from reviewdesk.approvals.models import Decision
from tests.conftest import SEND_EMAIL_SCRIPT
from tests.e2e.conftest import REPO, http, outbox_for, start_stack, wait_for_run
from tests.e2e.test_desk_browser import CHROMIUM, CHROMIUM_ARGS

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def trust_file(tmp_path) -> Path:
    return tmp_path / "trust.json"


@pytest.fixture
def device_stack(tmp_path, trust_file, redis_server, llm_server_session):
    """A stack whose worker requires device-signed decisions and pins `trust_file`."""
    stack = start_stack(
        tmp_path,
        env_extra={
            "DESK_REQUIRE_DEVICE_KEYS": "1",
            "DESK_TRUST_FILE": str(trust_file),
            "DESK_CELERY_QUEUE": f"{settings.CELERY_TASK_DEFAULT_QUEUE}-keys-{uuid.uuid4().hex[:8]}",
        },
    )
    yield stack
    stack.stop()


@pytest.fixture
def logins(personas) -> dict[str, str]:
    for user in (personas.alice, personas.admin):
        user.set_password(f"{user.username}-password")
        user.save()
    _, carol_token = token_create(user=personas.carol, scopes=["submit", "review"])
    return {"carol_token": carol_token}


@pytest.fixture
def browser(logins):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()


def off_the_loop(work):
    """Run ORM work in a thread of its own: Playwright's event loop runs in this one."""

    def run():
        try:
            return work()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()


# The browser's own dialogs (window.confirm...) any page opened: none, the desk asks in #confirm.
NATIVE_DIALOGS: list[str] = []


def logged_in(browser, url: str, username: str):
    """A page in its own browser context (its own IndexedDB: its own device keys)."""
    page = browser.new_context().new_page()
    page.on("dialog", lambda dialog: (NATIVE_DIALOGS.append(dialog.message), dialog.dismiss()))
    page.goto(url)
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", f"{username}-password")
    page.click("button[type=submit]")
    return page


def assert_nothing_to_click_before_the_script(browser, url: str) -> None:
    """Served with keys.js held back, the page offers no button: a click there would have sent
    the form natively (a GET carrying the CSRF token and no key), as a fast click once did."""
    context = browser.new_context()
    context.route("**/keys.js", lambda route: route.abort())
    page = context.new_page()
    page.goto(url)
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", "admin-password")
    page.click("button[type=submit]")
    expect(page.locator("#create-key")).to_be_disabled()
    expect(page.locator("button.endorse").first).to_be_disabled()
    context.close()


def email_run_waiting(stack, token: str, task: str) -> dict:
    """A demo run that emails Ada, submitted over the API, once its call waits for a decision."""
    status, run = http(
        "POST",
        stack.url + "/api/v1/runs",
        token=token,
        body={"agent": "demo", "input": task, "model": {"provider": "scripted", "script": SEND_EMAIL_SCRIPT}},
    )
    assert status == 201, run
    return wait_for_run(stack, token, run["id"], "input_required")


def create_key(page, label: str) -> str:
    page.fill("#key-label", label)
    page.click("#create-key")
    expect(page.locator("#keys-status")).to_contain_text("Fingerprint:")
    row = page.locator("#key-list tr", has_text=label)
    expect(row).to_have_attribute("data-state", "pending", timeout=10_000)
    return row.get_attribute("data-key-id")


def endorse(page, key_id: str) -> None:
    page.reload()
    page.click(f"button.endorse[data-key-id='{key_id}']")
    expect(page.locator(f"#key-list tr[data-key-id='{key_id}']")).to_have_attribute(
        "data-state", "endorsed", timeout=10_000
    )


def test_alice_enrolls_the_admin_endorses_alice_approves_and_the_worker_verifies(
    device_stack, logins, browser, trust_file
):
    url = device_stack.url
    NATIVE_DIALOGS.clear()
    admin = logged_in(browser, url + "/keys/", "admin")
    admin_key = create_key(admin, "admin laptop")
    # The bootstrap, on the server: the admin's key becomes the workers' pinned root.
    off_the_loop(lambda: call_command("trust", "pin", "--user", "admin", "--out", str(trust_file)))
    endorse(admin, admin_key)  # an admin's own key endorsed by itself: it is the pinned root

    alice = logged_in(browser, url + "/keys/", "alice")
    alice_key = create_key(alice, "alice laptop")
    fingerprint = alice.locator(f"#key-list tr[data-key-id='{alice_key}'] .fingerprint").text_content()
    assert_nothing_to_click_before_the_script(browser, url + "/keys/")
    endorse(admin, alice_key)  # on another page: the admin compared this fingerprint out of band
    assert off_the_loop(lambda: DeviceKey.objects.get(key_id=alice_key).fingerprint) == fingerprint

    run = email_run_waiting(device_stack, logins["carol_token"], "Email Ada.")
    approval_id = run["approvals"][0]["id"]

    alice.goto(f"{url}/approvals/{approval_id}/")
    expect(alice.locator("#device-signing")).to_contain_text(alice_key)
    alice.click("#decide-form button.approve")  # an ordinary email: nothing asks
    expect(alice.locator("#decision-signer")).to_contain_text("device-signed", timeout=10_000)
    assert NATIVE_DIALOGS == []

    finished = wait_for_run(device_stack, logins["carol_token"], run["id"])
    assert finished["status"] == "succeeded", finished
    decision = off_the_loop(lambda: Decision.objects.get(request_id=approval_id))
    assert is_device_signed(decision.payload) and decision.key_id == alice_key
    assert decision.consumed_at is not None  # the gate verified and consumed it
    assert len(outbox_for(run["id"])) == 1

    # The desk's pane signs the same way (issue 35): no detour to the item's page.
    second = email_run_waiting(device_stack, logins["carol_token"], "Email Ada again.")
    second_id = second["approvals"][0]["id"]
    # A browser of alice's that holds none of her keys: the pane says why, and `a` signs nothing.
    elsewhere = logged_in(browser, url + "/", "alice")
    row = elsewhere.locator(f"li.card[data-run='{second['id']}']")
    expect(row.locator(".device-note")).to_contain_text(
        "this browser holds none of your endorsed device keys"
    )
    row.locator(".row").click()
    elsewhere.keyboard.press("a")
    expect(elsewhere.locator("#notices")).to_contain_text(
        "runs only on a decision signed by your own device key"
    )
    assert off_the_loop(lambda: Decision.objects.filter(request_id=second_id).exists()) is False
    # Her own browser: the pane names her key, and `a` signs with it.
    alice.goto(url + "/")
    row = alice.locator(f"li.card[data-run='{second['id']}']")
    expect(row.locator(".device-note")).to_contain_text(alice_key)
    row.locator(".row").click()
    alice.keyboard.press("a")
    expect(row).to_have_count(0)
    expect(alice.locator("#notices")).to_contain_text(f"signed by this browser's device key {alice_key}")
    assert wait_for_run(device_stack, logins["carol_token"], second["id"])["status"] == "succeeded"
    decision = off_the_loop(lambda: Decision.objects.get(request_id=second_id))
    assert is_device_signed(decision.payload) and decision.key_id == alice_key
    assert len(outbox_for(second["id"])) == 1


def test_the_api_path_with_a_key_file_runs_the_tool_on_a_device_required_worker(
    device_stack, logins, tmp_path, trust_file
):
    """examples/sign_decision.py as a subprocess: key files enrolled with manage.py trust, the
    decision signed with alice's key file, the real worker verifying it before sending."""
    admin_file, alice_file = tmp_path / "admin.pem", tmp_path / "alice.pem"
    for command in (
        ("keygen", str(admin_file)),
        ("register", "--user", "admin", "--key", str(admin_file)),
        ("pin", "--user", "admin", "--out", str(trust_file)),
        ("keygen", str(alice_file)),
        ("enroll", "--user", "alice", "--key", str(alice_file), "--signer", str(admin_file)),
    ):
        call_command("trust", *command)
    _, alice_token = token_create(user=DeviceKey.objects.get(user__username="alice").user, scopes=["review"])
    run = email_run_waiting(device_stack, logins["carol_token"], "Email Ada.")

    done = subprocess.run(
        [
            sys.executable,
            "examples/sign_decision.py",
            "--url",
            device_stack.url,
            "--key",
            str(alice_file),
            run["approvals"][0]["id"],
            "approve",
            "--reason",
            "checked",
        ],
        cwd=REPO,
        env={"DESK_TOKEN": alice_token, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "device-signed" in done.stdout

    finished = wait_for_run(device_stack, logins["carol_token"], run["id"])
    assert finished["status"] == "succeeded", finished
    assert len(outbox_for(run["id"])) == 1
