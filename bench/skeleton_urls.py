"""The desk's URLconf and the skeleton's two views."""

from bench.skeleton import urlpatterns as skeleton_urlpatterns
from reviewdesk.urls import urlpatterns as desk_urlpatterns

urlpatterns = [*skeleton_urlpatterns, *desk_urlpatterns]
