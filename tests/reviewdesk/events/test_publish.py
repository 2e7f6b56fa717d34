"""Pushes from sync code, published by the calling thread (events/publish.py), over the real
Redis channel layer: what a Celery worker's thread publishes reaches desk sockets in order."""

from __future__ import annotations

import asyncio
import threading

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from channels_redis.pubsub import RedisPubSubChannelLayer
from django.conf import settings as django_settings

from reviewdesk.events.models import DeskEvent
from reviewdesk.events.publish import publisher_for
from reviewdesk.events.services import REVIEWERS_GROUP, _send, event_push
from tests.reviewdesk.desk.test_desk_socket import communicator, receive_until, session_headers

pytestmark = pytest.mark.django_db(transaction=True)


def in_plain_thread(fn) -> None:
    """Run `fn` in a new thread with no event loop and none of asgiref's, as a Celery task runs."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive()
    if errors:
        raise errors[0]


def assert_sent_from_a_thread_reaches_a_joined_channel(layer, message: dict) -> None:
    """`_send` from a plain thread, as a Celery task sends, reaches a channel that joined the
    reviewers' group through `layer` itself."""

    async def scenario():
        channel = await layer.new_channel()
        await layer.group_add(REVIEWERS_GROUP, channel)
        await sync_to_async(in_plain_thread, thread_sensitive=False)(
            lambda: _send(layer, REVIEWERS_GROUP, message)
        )
        assert await asyncio.wait_for(layer.receive(channel), 5) == message
        await layer.group_discard(REVIEWERS_GROUP, channel)

    async_to_sync(scenario)()


def test_events_pushed_from_a_worker_thread_reach_the_socket_in_commit_order(personas):
    headers = session_headers(personas.alice)
    DeskEvent.objects.bulk_create(
        DeskEvent(type="run.updated", data={"n": n, "text": "é" * 500}, audience=[]) for n in range(3)
    )
    events = list(DeskEvent.objects.order_by("-id")[:3])[::-1]

    async def scenario():
        comm = communicator(headers)
        assert (await comm.connect())[0]
        await receive_until(comm, "snapshot")

        def push_all() -> None:
            for event in events:
                event_push(event)

        await sync_to_async(in_plain_thread, thread_sensitive=False)(push_all)
        received = [await receive_until(comm, "run.updated") for _ in events]
        assert received == [event.as_message() for event in events]
        await comm.disconnect()

    async_to_sync(scenario)()


def test_a_publish_reaches_a_channel_the_layer_joined_under_another_prefix(settings):
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [django_settings.CHANNEL_REDIS_ADDRESS], "prefix": "push-test"},
        }
    }
    layer = get_channel_layer()
    assert publisher_for(layer) is not None, "the desk's pub/sub layer is published to directly"
    message = {"type": "desk.event", "event": {"seq": 7, "type": "approval.created", "data": {"k": [1, "é"]}}}

    assert_sent_from_a_thread_reaches_a_joined_channel(layer, message)


def test_another_channel_layer_gets_channels_own_group_send(settings):
    """A layer that is not the pub/sub one keeps its own `group_send` (lists, not PUBLISH)."""
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [django_settings.CHANNEL_REDIS_ADDRESS], "prefix": "push-test-core"},
        }
    }
    layer = get_channel_layer()
    message = {"type": "desk.event", "event": {"seq": 8, "type": "run.updated", "data": {}}}

    assert_sent_from_a_thread_reaches_a_joined_channel(layer, message)


def test_a_sentinel_managed_layer_keeps_its_own_group_send(settings):
    """The direct publish builds plain clients only: under Sentinel (the layer finds the master
    itself) `publisher_for` declines, and pushes go through the layer's own `group_send`."""
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {
                "hosts": [{"sentinels": [("127.0.0.1", 26379)], "master_name": "desk"}],
                "prefix": "push-test-sentinel",
            },
        }
    }
    layer = get_channel_layer()
    assert isinstance(layer, RedisPubSubChannelLayer)
    assert publisher_for(layer) is None


def test_another_channels_redis_release_is_refused_loudly_not_published_to(monkeypatch):
    """The publisher reuses channels_redis's private channel naming: a release it was not checked
    against is a system-check error and a refused push, never a push no consumer hears."""
    import channels_redis
    from django.core.exceptions import ImproperlyConfigured

    from reviewdesk.events.apps import channels_redis_checked
    from reviewdesk.events.publish import _publishers

    assert channels_redis_checked() == []
    monkeypatch.setattr(channels_redis, "__version__", "5.0.0")
    (error,) = channels_redis_checked()
    assert error.id == "reviewdesk.E001" and "channels_redis 5.0.0" in error.msg
    layer = get_channel_layer()
    _publishers.pop(layer, None)
    with pytest.raises(ImproperlyConfigured, match=r"5\.0\.0"):
        publisher_for(layer)


def test_the_group_channel_is_the_one_the_layer_itself_names():
    """What `group_channel` copies from the installed layer, asked of the layer itself."""
    from reviewdesk.events.publish import group_channel

    layer = get_channel_layer()
    assert isinstance(layer, RedisPubSubChannelLayer)
    prefix = django_settings.CHANNEL_LAYERS["default"]["CONFIG"].get("prefix", "asgi")

    async def named_by_the_layer() -> str:
        return layer._get_group_channel_name("desk.reviewers")  # the layer of this event loop

    assert group_channel(prefix, "desk.reviewers") == async_to_sync(named_by_the_layer)()
