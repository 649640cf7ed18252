"""What Google credentials look like on disk, so a project folder never ships them (tpuctl/services/usercode.py),
and what the Cloud Storage JSON API's answers hold, so an answer of another shape is refused before a client
library reads it (cloud/clients.py).

Sources (read 2026-12-07):
- Google Cloud SDK 528.0.0, ``lib/googlecloudsdk/core/config.py``: gcloud's configuration folder holds
  ``credentials.db`` (``credentials_db_path``), ``access_tokens.db`` and ``legacy_credentials/<account>/``;
  ``lib/googlecloudsdk/core/credentials/creds.py``: both are SQLite databases, made with
  ``CREATE TABLE IF NOT EXISTS "credentials" (account_id TEXT PRIMARY KEY, value BLOB)`` and
  ``CREATE TABLE IF NOT EXISTS "access_tokens" (account_id TEXT PRIMARY KEY, access_token TEXT, …)``;
  ``lib/third_party/google/auth/_cloud_sdk.py``: Application Default Credentials are
  ``application_default_credentials.json`` in that folder.
- google-auth 2.62.2, ``google/auth/_default.py``: a credentials file's ``"type"`` is ``"service_account"`` or
  ``"authorized_user"`` (and others); ``google/oauth2/service_account.py``: a key file has ``client_email`` and
  ``token_uri`` and its ``private_key``; ``google/oauth2/credentials.py``: user credentials need
  ``refresh_token``, ``client_id`` and ``client_secret``.
- https://cloud.google.com/storage/docs/json_api/v1/objects (the Objects resource): ``name``, ``bucket``,
  ``crc32c``, ``md5Hash``, ``etag`` are strings; ``generation``, ``metageneration`` ("long") and ``size``
  ("unsigned long") are 64-bit integers, which the JSON API writes as strings of digits; ``objects.list`` answers
  ``items`` (objects), ``prefixes`` (strings) and ``nextPageToken`` (a string); a bucket's ``projectNumber`` is
  an unsigned long too (https://cloud.google.com/storage/docs/json_api/v1/buckets).
"""

from __future__ import annotations

#: Files of gcloud's configuration folder that hold tokens (any copy of them is a secret).
GCLOUD_CREDENTIAL_FILES = ("credentials.db", "access_tokens.db", "application_default_credentials.json")
#: Its folder of per-account credential files.
GCLOUD_CREDENTIAL_FOLDERS = ("legacy_credentials",)
#: The tables of gcloud's SQLite token databases.
GCLOUD_TOKEN_TABLES = ("credentials", "access_tokens")
#: ``"type"`` of a service-account key file; the field holding its key.
SERVICE_ACCOUNT_TYPE = "service_account"
PRIVATE_KEY_FIELD = "private_key"
#: The fields of OAuth user credentials (``gcloud auth application-default login``'s file, ``adc.json``).
USER_CREDENTIAL_FIELDS = ("refresh_token", "client_id", "client_secret")

#: The storage JSON API's list fields and what each holds (an object resource: dict; a prefix: str).
STORAGE_LIST_FIELDS: dict[str, type] = {"items": dict, "prefixes": str, "bindings": dict}
#: Its 64-bit integer fields (strings of digits) and text fields of object and bucket resources.
STORAGE_NUMBER_FIELDS = ("size", "generation", "metageneration", "projectNumber")
STORAGE_TEXT_FIELDS = ("name", "bucket", "crc32c", "md5Hash", "etag", "updated", "timeCreated", "contentType",
                       "selfLink")
