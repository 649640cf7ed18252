"""What Google credentials (and the other credential files a project folder may hold by mistake) look like on disk,
so a project folder never ships them (tpuctl/services/usercode.py), and what the Cloud Storage JSON API's answers
hold, so an answer of another shape is refused before a client library reads it (cloud/clients.py).

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
- [unverified] Google OAuth 2.0 access tokens begin ``ya29.``: Google's own documentation calls them opaque; the
  prefix is what every token gcloud and google-auth hand out shows, and what
  https://api-aomint.aodocs.com/authentication/access-apis-with-bearer-tokens says ("access tokens
  usually start with the string ya29."). Twenty token characters after it is this module's bound, not Google's.

Other clouds' and tools' credential files (read 2026-12-07):
- https://docs.aws.amazon.com/cli/latest/userguide/cli-config-files.html: the AWS CLI's ``credentials`` file is
  sections (``[default]``) of ``setting_name=value`` lines, ``aws_access_key_id`` and ``aws_secret_access_key``
  among them; the example ``aws configure`` session of
  https://www.ibm.com/docs/en/coss/3.20.1?topic=csiscf-create-aws-shared-credentials shows a key id of 20
  upper-case letters and digits (``AKIAIOSFODNN7EXAMPLE``) and a secret of 40 base64 characters.
- containers-auth.json(5) (https://manpages.ubuntu.com/manpages/lunar/man5/containers-auth.json.5.html, which
  reads ``$HOME/.docker/config.json`` as well): ``"auths"`` maps a registry to ``{"auth": "…"}``, the base64 of
  ``username:password``.
- https://kubernetes.io/docs/reference/setup-tools/kubeadm/generated/kubeadm_kubeconfig/kubeadm_kubeconfig_user and
  https://fig.io/manual/kubectl/config/set-credentials: a kubeconfig's user entry holds a bearer ``token`` or a
  client key (``--embed-certs``: embedded in the file); kubernetes/client-go ``tools/clientcmd/api/v1/types.go``
  (read 2026-12-07): ``Config.users`` is a list of ``{name, user}``, and a user's ``AuthInfo`` holds
  ``client-key-data``, ``token`` and ``password`` (json and yaml tags alike).
- docker/cli ``cli/config/types/authconfig.go`` (read 2026-12-07): an ``auths`` entry (``AuthConfig``) holds
  ``auth``, ``password``, ``identitytoken`` or ``registrytoken``.
- git-config(1) (https://git-scm.com/docs/git-config, ``remote.<name>.url``) and RFC 3986 section 3.2.1: a
  remote's URL may carry ``user:password@`` (userinfo) before its host.
- https://github.blog/changelog/2021-03-31-authentication-token-format-updates-are-generally-available/: GitHub
  tokens begin ``ghp_`` (personal access), ``gho_`` (OAuth), ``ghu_``/``ghs_`` (GitHub App user-to-server and
  server-to-server) or ``ghr_`` (refresh), in ``[A-Za-z0-9_]``, their length unchanged (36 characters after the
  prefix: [unverified], what tokens show); fine-grained personal access tokens begin ``github_pat_``
  (https://github.com/r-lib/gh/issues/171: ``^github_pat_[A-Za-z0-9_]+$``; [unverified] in GitHub's own words).
- https://gitlab.com/gitlab-org/gitlab/-/issues/342327 (2021, "Update default Personal Access Token (PAT) prefix to
  glpat"): GitLab personal access tokens begin ``glpat-``; ``glpat-[A-Za-z0-9_/-]{20,}`` is the pattern secret
  scanners use (https://github.com/sirwart/ripsecrets/issues/62, citing GitLab's docs).
- https://huggingface.co/docs/hub/security-tokens: Hugging Face user access tokens (``HF_TOKEN``,
  ``~/.cache/huggingface/token``); [unverified] that they begin ``hf_`` followed by 34 letters: what tokens show and
  the examples of its client libraries (``hf_xxx``), not the page's words.
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
#: What a Google OAuth 2.0 access token begins with ([unverified], above).
ACCESS_TOKEN_PREFIX = "ya29."

#: The AWS CLI credentials file's settings for an access key (its id and its secret).
AWS_KEY_SETTINGS = ("aws_access_key_id", "aws_secret_access_key")
#: A Docker (or Podman) client configuration's map of registries and the fields of an entry that hold a secret
#: (``auth``: base64 user:password; docker/cli ``cli/config/types/authconfig.go``).
DOCKER_AUTHS_FIELD, DOCKER_AUTH_FIELD = "auths", "auth"
DOCKER_SECRET_FIELDS = ("auth", "password", "identitytoken", "registrytoken")
#: A kubeconfig's list of user entries, the entry's credentials and their fields that hold a secret (client-go
#: ``tools/clientcmd/api/v1/types.go``, ``AuthInfo``'s json tags).
KUBECONFIG_USERS_FIELD, KUBECONFIG_USER_FIELD = "users", "user"
KUBECONFIG_SECRET_FIELDS = ("token", "client-key-data", "password")
#: GitHub's token prefixes (classic tokens: 36 characters follow) and a fine-grained personal access token's.
GITHUB_TOKEN_PREFIXES = ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")
GITHUB_FINE_GRAINED_PREFIX = "github_pat_"
#: A GitLab personal access token's prefix (20 or more of ``[A-Za-z0-9_/-]`` follow) and a Hugging Face user access
#: token's ([unverified]: 34 letters follow).
GITLAB_TOKEN_PREFIX = "glpat-"
HUGGING_FACE_TOKEN_PREFIX = "hf_"

#: The storage JSON API's list fields and what each holds (an object resource: dict; a prefix: str).
STORAGE_LIST_FIELDS: dict[str, type] = {"items": dict, "prefixes": str, "bindings": dict}
#: Its 64-bit integer fields (strings of digits) and text fields of object and bucket resources.
STORAGE_NUMBER_FIELDS = ("size", "generation", "metageneration", "projectNumber")
STORAGE_TEXT_FIELDS = ("name", "bucket", "crc32c", "md5Hash", "etag", "updated", "timeCreated", "contentType",
                       "selfLink")
