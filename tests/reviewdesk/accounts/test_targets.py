"""Names that point at people, resolved for a page at once (UsernamesNamed) as one at a time
(usernames_named). In-process, on the test database."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.db import connection
from django.test.utils import CaptureQueriesContext

from reviewdesk.accounts.targets import UsernamesNamed, usernames_named
from tests.conftest import make_user

pytestmark = pytest.mark.django_db

PAGE = [
    [],
    ["alice"],
    ["nobody", "alice"],  # no group: names pass as given, in their order
    ["group:billing"],
    ["group:billing", "group:legal"],  # alice in both: once
    ["bob", "group:legal"],  # bob by name, in no group of the page
    ["nobody", "group:billing"],  # beside a group, only names of users
    ["group:empty"],
    ["group:unknown", "carol"],
]


@pytest.fixture
def groups(personas):
    billing, legal, _ = (Group.objects.get_or_create(name=n)[0] for n in ("billing", "legal", "empty"))
    billing.user_set.add(personas.alice, make_user("dora"))
    legal.user_set.add(personas.alice, personas.olivia)


def test_a_page_resolves_every_list_as_one_at_a_time_does_in_one_query(groups):
    expected = [usernames_named(targets) for targets in PAGE]
    assert expected[4] == ["alice", "dora", "olivia"] and expected[5] == ["alice", "bob", "olivia"]
    assert expected[6] == ["alice", "dora"] and expected[8] == ["carol"]
    with CaptureQueriesContext(connection) as queries:
        named = UsernamesNamed(PAGE)
    assert len(queries) == 1
    with CaptureQueriesContext(connection) as queries:
        assert [named(targets) for targets in PAGE] == expected
    assert len(queries) == 0


def test_a_page_naming_no_group_reads_nothing(groups):
    with CaptureQueriesContext(connection) as queries:
        named = UsernamesNamed([["alice"], [], ["nobody", "bob"]])
        assert named(["nobody", "bob"]) == ["nobody", "bob"]
    assert len(queries) == 0


def test_a_group_with_an_empty_name_is_expanded_as_one_at_a_time_does(groups, personas):
    """Routing refuses "group:" today; the page's expansion still answers as usernames_named."""
    Group.objects.create(name="").user_set.add(personas.carol)
    targets = ["group:", "bob"]
    assert UsernamesNamed([targets])(targets) == usernames_named(targets) == ["bob", "carol"]
