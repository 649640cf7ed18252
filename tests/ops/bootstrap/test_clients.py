"""cloud.clients: endpoint redirects and credentials choice."""

from __future__ import annotations

import pytest
from google.auth.credentials import AnonymousCredentials

from cloud import clients


def test_no_redirect_keeps_google_and_adc(monkeypatch):
    monkeypatch.delenv("TPUCTL_CRM_ENDPOINT", raising=False)
    assert clients.endpoint_for("crm") is None
    assert clients.client_kwargs("crm") == {"transport": "rest"}
    assert clients.base_url("crm") == "https://cloudresourcemanager.googleapis.com"
    assert clients.base_url("vertex", region="europe-west4") == "https://europe-west4-aiplatform.googleapis.com"


@pytest.mark.parametrize("value, anonymous", [
    ("http://127.0.0.1:8080", True), ("http://localhost:9000/", True), ("http://[::1]:9", True),
    ("https://127.0.0.1:8443", False),            # TLS endpoint: a real mirror, keep credentials
    ("http://10.1.2.3:80", False), ("https://crm.mirror.example.com", False),
])
def test_loopback_http_gets_anonymous_credentials(monkeypatch, value, anonymous):
    monkeypatch.setenv("TPUCTL_CRM_ENDPOINT", value)
    kw = clients.client_kwargs("crm")
    assert kw["transport"] == "rest" and kw["client_options"] == {"api_endpoint": value.rstrip("/")}
    assert isinstance(kw.get("credentials"), AnonymousCredentials) is anonymous


def test_storage_emulator_host_without_scheme(monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "127.0.0.1:9023")
    assert clients.endpoint_for("storage") == "http://127.0.0.1:9023"
    assert clients.uses_anonymous("storage")


def test_real_clients_accept_the_kwargs(monkeypatch):
    from google.cloud import aiplatform_v1, iam_admin_v1, resourcemanager_v3

    for var in ("TPUCTL_CRM_ENDPOINT", "TPUCTL_IAM_ENDPOINT", "TPUCTL_VERTEX_ENDPOINT"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    assert resourcemanager_v3.ProjectsClient(**clients.client_kwargs("crm"))._transport._host == "http://127.0.0.1:9"
    assert aiplatform_v1.JobServiceClient(**clients.client_kwargs("vertex"))._transport._host == "http://127.0.0.1:9"
    assert iam_admin_v1.IAMClient(**clients.client_kwargs("iam", transport="grpc"))._transport._host == "127.0.0.1:9"


def test_unknown_service():
    with pytest.raises(ValueError, match="unknown service"):
        clients.endpoint_for("bigtable")
