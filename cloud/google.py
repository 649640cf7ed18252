"""Every Google library the ops side uses (and the network libraries under them: grpc, requests), each imported on
its first use: the one room where ``google.*`` is imported (pyproject.toml's contract "Every Google library import
is in the adapter" keeps it so).

    from cloud.google import aiplatform_v1, api_exceptions
    job = aiplatform_v1.CustomJob(display_name="x")      # google.cloud.aiplatform_v1 is imported here, once
    except api_exceptions.NotFound: ...                    # evaluated only when an exception reaches it

Each name is a proxy whose first attribute read runs the real ``import`` statement below it (written out, so
readers and import tools see every dependency); until then nothing of Google's libraries is loaded, which keeps
``tpuctl --help`` and every command's ``--help`` fast (benchmarks/startup.py). SkyPilot's ``sky/adaptors/gcp.py``
is the same idea.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any


class _OnFirstUse:
    """A module, imported by ``load`` when one of its attributes is first read."""

    def __init__(self, load: Callable[[], ModuleType]):
        self._load = load
        self._module: ModuleType | None = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if self._module is None:
            self._module = self._load()
        return getattr(self._module, name)

    def __repr__(self) -> str:
        return f"<Google library, {'loaded' if self._module else 'not loaded yet'}: {self._load.__doc__}>"


def _aiplatform_v1() -> ModuleType:
    """google.cloud.aiplatform_v1"""
    from google.cloud import aiplatform_v1

    return aiplatform_v1


def _api_exceptions() -> ModuleType:
    """google.api_core.exceptions"""
    from google.api_core import exceptions

    return exceptions


def _api_retry() -> ModuleType:
    """google.api_core.retry"""
    from google.api_core import retry

    return retry


def _api_timeout() -> ModuleType:
    """google.api_core.timeout"""
    from google.api_core import timeout

    return timeout


def _api_iam() -> ModuleType:
    """google.api_core.iam"""
    from google.api_core import iam

    return iam


def _artifactregistry_v1() -> ModuleType:
    """google.cloud.artifactregistry_v1"""
    from google.cloud import artifactregistry_v1

    return artifactregistry_v1


def _auth() -> ModuleType:
    """google.auth"""
    import google.auth

    return google.auth


def _auth_credentials() -> ModuleType:
    """google.auth.credentials"""
    from google.auth import credentials

    return credentials


def _auth_exceptions() -> ModuleType:
    """google.auth.exceptions"""
    from google.auth import exceptions

    return exceptions


def _auth_requests() -> ModuleType:
    """google.auth.transport.requests"""
    from google.auth.transport import requests

    return requests


def _billing_v1() -> ModuleType:
    """google.cloud.billing_v1"""
    from google.cloud import billing_v1

    return billing_v1


def _cloudbuild_v1() -> ModuleType:
    """google.cloud.devtools.cloudbuild_v1"""
    from google.cloud.devtools import cloudbuild_v1

    return cloudbuild_v1


def _cloudquotas_v1() -> ModuleType:
    """google.cloud.cloudquotas_v1"""
    from google.cloud import cloudquotas_v1

    return cloudquotas_v1


def _crc32c() -> ModuleType:
    """google_crc32c"""
    import google_crc32c

    return google_crc32c


def _iam_admin_v1() -> ModuleType:
    """google.cloud.iam_admin_v1"""
    from google.cloud import iam_admin_v1

    return iam_admin_v1


def _iam_grpc_transport() -> ModuleType:
    """google.cloud.iam_admin_v1.services.iam.transports.grpc"""
    from google.cloud.iam_admin_v1.services.iam.transports import grpc

    return grpc


def _iam_policy_pb2() -> ModuleType:
    """google.iam.v1.policy_pb2"""
    from google.iam.v1 import policy_pb2

    return policy_pb2


def _logging_v2() -> ModuleType:
    """google.cloud.logging_v2 (with its GAPIC client, services.logging_service_v2.LoggingServiceV2Client)"""
    from google.cloud import logging_v2
    from google.cloud.logging_v2.services import logging_service_v2  # noqa: F401 - loads logging_v2.services

    return logging_v2


def _json_format() -> ModuleType:
    """google.protobuf.json_format"""
    from google.protobuf import json_format

    return json_format


def _duration_pb2() -> ModuleType:
    """google.protobuf.duration_pb2"""
    from google.protobuf import duration_pb2

    return duration_pb2


def _resourcemanager_v3() -> ModuleType:
    """google.cloud.resourcemanager_v3"""
    from google.cloud import resourcemanager_v3

    return resourcemanager_v3


def _service_usage_v1() -> ModuleType:
    """google.cloud.service_usage_v1"""
    from google.cloud import service_usage_v1

    return service_usage_v1


def _storage() -> ModuleType:
    """google.cloud.storage"""
    from google.cloud import storage

    return storage


def _transfer_manager() -> ModuleType:
    """google.cloud.storage.transfer_manager"""
    from google.cloud.storage import transfer_manager

    return transfer_manager


def _grpc() -> ModuleType:
    """grpc (the transport of gRPC clients; not Google's library, but as heavy to load)"""
    import grpc

    return grpc


def _requests() -> ModuleType:
    """requests (the HTTP library Google's REST clients and tpuctl's fetchers share)"""
    import requests

    return requests


def _requests_adapters() -> ModuleType:
    """requests.adapters"""
    from requests import adapters

    return adapters


def _urllib3_exceptions() -> ModuleType:
    """urllib3.exceptions (what a response read byte by byte raises, under requests)"""
    from urllib3 import exceptions

    return exceptions


def _urllib3_connectionpool() -> ModuleType:
    """urllib3.connectionpool (the pools requests sends through: their connections are watched for deadlines)"""
    from urllib3 import connectionpool

    return connectionpool


def _tpu_v2() -> ModuleType:
    """google.cloud.tpu_v2"""
    from google.cloud import tpu_v2

    return tpu_v2


def _tpu_v2alpha1() -> ModuleType:
    """google.cloud.tpu_v2alpha1"""
    from google.cloud import tpu_v2alpha1

    return tpu_v2alpha1


aiplatform_v1: Any = _OnFirstUse(_aiplatform_v1)
api_exceptions: Any = _OnFirstUse(_api_exceptions)
api_retry: Any = _OnFirstUse(_api_retry)
api_iam: Any = _OnFirstUse(_api_iam)
api_timeout: Any = _OnFirstUse(_api_timeout)
artifactregistry_v1: Any = _OnFirstUse(_artifactregistry_v1)
auth: Any = _OnFirstUse(_auth)
auth_credentials: Any = _OnFirstUse(_auth_credentials)
auth_exceptions: Any = _OnFirstUse(_auth_exceptions)
auth_requests: Any = _OnFirstUse(_auth_requests)
billing_v1: Any = _OnFirstUse(_billing_v1)
cloudbuild_v1: Any = _OnFirstUse(_cloudbuild_v1)
cloudquotas_v1: Any = _OnFirstUse(_cloudquotas_v1)
crc32c: Any = _OnFirstUse(_crc32c)
duration_pb2: Any = _OnFirstUse(_duration_pb2)
iam_admin_v1: Any = _OnFirstUse(_iam_admin_v1)
iam_grpc_transport: Any = _OnFirstUse(_iam_grpc_transport)
iam_policy_pb2: Any = _OnFirstUse(_iam_policy_pb2)
json_format: Any = _OnFirstUse(_json_format)
logging_v2: Any = _OnFirstUse(_logging_v2)
resourcemanager_v3: Any = _OnFirstUse(_resourcemanager_v3)
service_usage_v1: Any = _OnFirstUse(_service_usage_v1)
storage: Any = _OnFirstUse(_storage)
transfer_manager: Any = _OnFirstUse(_transfer_manager)
tpu_v2: Any = _OnFirstUse(_tpu_v2)
tpu_v2alpha1: Any = _OnFirstUse(_tpu_v2alpha1)
urllib3_exceptions: Any = _OnFirstUse(_urllib3_exceptions)
urllib3_connectionpool: Any = _OnFirstUse(_urllib3_connectionpool)
grpc: Any = _OnFirstUse(_grpc)
requests: Any = _OnFirstUse(_requests)
requests_adapters: Any = _OnFirstUse(_requests_adapters)
