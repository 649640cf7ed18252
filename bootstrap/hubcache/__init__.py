"""TF-Hub models in tensorflow_hub's cache layout, in a bucket (``hub-cache add``, ``bucket``) or locally
(``fetch``, ``model``). The layout itself (object names, descriptor, manifest) is ``domain.hub_layout``.
"""

from bootstrap.hubcache.bucket import (
    CacheEntry,
    HubStatus,
    UploadResult,
    hub_status,
    list_cache,
    upload_model,
)
from bootstrap.hubcache.model import (
    DEFAULT_LOCAL_CACHE,
    Materialized,
    handle_from_descriptor,
    install_local,
    materialize,
)

__all__ = ["DEFAULT_LOCAL_CACHE", "CacheEntry", "HubStatus", "Materialized", "UploadResult", "handle_from_descriptor",
           "hub_status", "install_local", "list_cache", "materialize", "upload_model"]
