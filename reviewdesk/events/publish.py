"""`group_send` from sync code, done by the calling thread (`make bench` #1, push).

The desk's channel layer is channels_redis's pub/sub layer: its `group_send` is one PUBLISH of
the layer's serialised message on the group's Redis channel, and Redis hands it to every
process whose consumers joined the group. From sync code (a Celery task, a sync view under
daphne), `async_to_sync(group_send)` or a push loop in another thread hands the call to an
event loop and waits for it: a thread hop there and one back on every push. Timed in the bench,
that hop was about a quarter of a push's extra time over a bare `group_send`, more when the
machine was busy. The thread that committed PUBLISHes the same bytes on the same
channel itself, with redis-py's blocking client: the layer's own `serialize`, its channel
names and its shard choice. `tests/reviewdesk/events/test_publish.py` checks it against a
consumer joined through the real layer.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, cast

import channels_redis
import redis
from channels import DEFAULT_CHANNEL_LAYER
from channels_redis.pubsub import RedisPubSubChannelLayer
from channels_redis.utils import _consistent_hash, decode_hosts
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

# A push that cannot reach Redis fails after this, rather than holding the worker.
PUBLISH_TIMEOUT_SECONDS = 10

# The pub/sub layer's group channel names and its shard choice (`_consistent_hash`) are private
# to channels_redis: this module was checked against these releases. Another one is refused
# (by a system check, events/apps.py, and by `publisher_for`) rather than left to publish where
# no consumer listens: read its pubsub.py, then add its version here.
CHANNELS_REDIS_CHECKED = ("4.3.0",)


def channels_redis_problem(version: str | None = None) -> str | None:
    """Why this channels_redis cannot be trusted to name its channels as `group_channel` does."""
    version = channels_redis.__version__ if version is None else version
    if version in CHANNELS_REDIS_CHECKED:
        return None
    return (
        f"channels_redis {version} is installed; reviewdesk/events/publish.py reuses its private "
        f"channel naming and was checked against {', '.join(CHANNELS_REDIS_CHECKED)} only"
    )


def group_channel(prefix: str, group: str) -> str:
    """The Redis channel of a group on the pub/sub layer (its `_get_group_channel_name`)."""
    return f"{prefix}__group__{group}"


class GroupPublisher:
    """The pub/sub layer's `group_send`, blocking, from any thread (redis-py's pools are
    thread-safe, and reset themselves in a forked child)."""

    def __init__(self, layer: RedisPubSubChannelLayer, shards: list[redis.Redis], prefix: str) -> None:
        self.serialize = layer.serialize
        self.shards = shards
        self.prefix = prefix

    def group_send(self, group: str, message: dict[str, Any]) -> None:
        channel = group_channel(self.prefix, group)
        shard = self.shards[_consistent_hash(channel, len(self.shards))]
        shard.publish(channel, self.serialize(message))


def _shard(host: dict[str, Any]) -> redis.Redis | None:
    """A blocking client for one of the layer's hosts, as `channels_redis.utils.create_pool`
    builds its pool; None for a Sentinel-managed host (the layer keeps those)."""
    options = {
        "socket_timeout": PUBLISH_TIMEOUT_SECONDS,
        "socket_connect_timeout": PUBLISH_TIMEOUT_SECONDS,
        **host,
    }
    if "master_name" in options:
        return None
    address = options.pop("address", None)
    if address is not None:
        return redis.Redis(connection_pool=redis.ConnectionPool.from_url(address, **options))
    return redis.Redis(connection_pool=redis.ConnectionPool(**options))


_publishers: weakref.WeakKeyDictionary[Any, GroupPublisher | None] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def publisher_for(layer: Any) -> GroupPublisher | None:
    """The blocking publisher for `layer`, the default channel layer; None unless it is the
    pub/sub layer (then Channels' own `async_to_sync(group_send)` it is)."""
    if not isinstance(layer, RedisPubSubChannelLayer):
        return None
    with _lock:
        if layer not in _publishers:
            if problem := channels_redis_problem():  # once per layer, not once per push
                raise ImproperlyConfigured(problem)
            config = settings.CHANNEL_LAYERS[DEFAULT_CHANNEL_LAYER].get("CONFIG", {})
            shards = [_shard(host) for host in decode_hosts(config.get("hosts"))]
            simple = all(shard is not None for shard in shards)
            prefix = config.get("prefix", "asgi")
            _publishers[layer] = (
                GroupPublisher(layer, cast(list[redis.Redis], shards), prefix) if simple else None
            )
        return _publishers[layer]
