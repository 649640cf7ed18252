"""The program's view of a stack: the one settings model (``ground.settings.StackSettings``) plus the
hub models' local files, as a frozen ``InfraConfig``.

Every rule is checked before the first resource is registered, and a broken rule raises ``ConfigError``
whose message starts with the config key (``tpuctl:region: …``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi

from ground import domain
from ground.envs import REPO_ROOT
from ground.errors import ConfigError, UserError
from ground.localtree import scan_tree, user_path
from ground.settings import ARRAY_KEYS, NAMESPACE, PROVIDER_PROJECT_KEY, StackSettings


@dataclass(frozen=True)
class HubModel:
    """One hub handle and the local files that go to ``<prefix>/<sha1(handle)>/<relative path>``."""
    handle: str
    cache_key: str                          # sha1 hex of the handle
    folder: Path                            # <hubCacheSource>/<cache_key>
    files: tuple[tuple[str, Path], ...]     # (posix path relative to folder, absolute path), sorted


@dataclass(frozen=True)
class InfraConfig:
    """What the program builds from: the stack's validated settings (the one model; every derived name comes
    from its methods) and the hub models' files found on disk."""

    settings: StackSettings
    hub_models: tuple[HubModel, ...] = ()
    hub_cache_source: Path = field(default=REPO_ROOT / ".tpuctl-cache/hub")


def _hub_models(handles: tuple[str, ...], source: Path) -> tuple[HubModel, ...]:
    """The local files of each handle (the settings model has checked the handles themselves)."""
    if not handles:
        return ()
    seen = {handle: domain.hub_cache_key(handle) for handle in handles}
    models = []
    if not source.is_dir():
        raise ConfigError(
            "hubCacheSource",
            f"hub cache folder {source} does not exist; fetch the models into it first "
            "(`tpuctl hub-cache fetch HANDLE`, or `--from DIR` for a SavedModel on disk), point hubCacheSource "
            "at a folder in tensorflow_hub cache layout, or remove hubModels",
        )
    for handle, key in seen.items():
        folder = source / key
        if not (folder / "saved_model.pb").is_file():
            raise ConfigError(
                "hubModels",
                f"hub model {handle!r} is not in the cache folder: {folder}/saved_model.pb is missing "
                "(tensorflow_hub needs <cache>/<sha1(handle)>/saved_model.pb; `tpuctl hub-cache fetch HANDLE` "
                "puts it there)",
            )
        try:   # the same walk as `tpuctl hub-cache add`: nothing from outside the folder is uploaded
            tree = scan_tree(folder, f"hub model folder {folder}")
        except UserError as exc:
            raise ConfigError("hubModels", str(exc)) from None
        files = tuple((f.rel, f.path.absolute()) for f in tree)
        models.append(HubModel(handle, key, folder, files))
    return tuple(models)


def load_config(values: Mapping[str, Any], base_dir: Path | None = None) -> InfraConfig:
    """Validate stack config ``values`` (bare or ``tpuctl:`` keys) through the settings model, then find
    the hub models' files.

    ``base_dir`` anchors relative paths (hubCacheSource); default: the project (repository) root.
    Raises ``ConfigError`` naming the key and the rule; nothing is registered before this returns.
    """
    s = StackSettings.from_values(values)
    base = Path(base_dir) if base_dir is not None else REPO_ROOT
    source = user_path(s.hub_cache_source, "hubCacheSource")
    if not source.is_absolute():
        source = base / source
    return InfraConfig(s, _hub_models(s.hub_models, source), source)


# --------------------------------------------------------------------------------------------
# Values as the engine hands them
# --------------------------------------------------------------------------------------------

def from_pulumi_config(root: Path = REPO_ROOT) -> InfraConfig:
    """Config as the engine hands it to the program (defaults from Pulumi.yaml already applied), through the
    public ``pulumi.Config`` API only.

    A key the model does not declare (a typo such as ``tpuctl:regoin``) cannot be read that way, so every key the
    engine handed the program is checked too, and an unknown one is named instead of silently ignored. Those keys
    are ``pulumi.runtime.get_config_env()``: the language host passes the stack's whole config as ``PULUMI_CONFIG``
    (pulumi/pulumi sdk/python/cmd/pulumi-language-python, read 2026-12-07), from whichever file the engine read:
    the project's own ``Pulumi.<stack>.yaml`` or a team's, given with ``pulumi up --config-file``. Relative paths
    are anchored at the project root (the folder of Pulumi.yaml), not at the engine's working directory, which is
    ``main`` (infra/).
    """

    cfg = pulumi.Config(NAMESPACE)
    known = StackSettings.keys()
    values: dict[str, Any] = {}
    for name in known:
        value = cfg.get_object(name) if name in ARRAY_KEYS else cfg.get(name)
        if value is not None:
            values[name] = value
    for key in pulumi.runtime.get_config_env():
        ns, _, bare = key.partition(":")
        if ns == NAMESPACE and bare not in known:
            values[bare] = cfg.get(bare)
    # The provider's project: tpuctl:project defaults to it, and the two must agree when both are set.
    provider_project = pulumi.Config("gcp").get("project")
    if provider_project is not None:
        values[PROVIDER_PROJECT_KEY] = provider_project
    return load_config(values, base_dir=root)
