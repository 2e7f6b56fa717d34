"""The desk's settings, with the skeleton's views (bench/skeleton.py) in the URLconf."""

from reviewdesk.settings import *  # noqa: F403

ROOT_URLCONF = "bench.skeleton_urls"
