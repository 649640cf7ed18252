"""``grant-access --via acl``: fine-grained (ACL) access for existing buckets without uniform access.

A bucket ACL entry (READER for read buckets, WRITER for write buckets) plus a default object ACL
READER entry (objects written later); ``--existing-objects`` adds READER to each object already
there. Writes carry ``if_metageneration_match`` of the metadata they read, so a concurrent change
makes the server answer 412 and the same conflict retry as IAM re-reads and re-applies.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

from bootstrap.grants import Change, compute_changes, conflict_retry
from cloud import clients
from ground.errors import UserError

_ENTITY_PREFIX = {"user": "user", "serviceAccount": "user", "group": "group", "domain": "domain"}


def acl_entity(member: str) -> str:
    """IAM member -> ACL entity (``serviceAccount:x`` -> ``user-x``)."""
    kind, _, rest = member.partition(":")
    if kind not in _ENTITY_PREFIX or (kind == "serviceAccount" and "@" not in rest):   # a GKE KSA has no e-mail
        raise UserError(f"{member} cannot be given an ACL entry (only users, service accounts with an e-mail, "
                        "groups and domains); "
                        "use bucket IAM (drop --via acl)")
    return f"{_ENTITY_PREFIX[kind]}-{rest}"


def _acl_bindings(acl) -> list[dict]:
    """ACL entries as IAM-like bindings so compute_changes can diff them (role = READER/WRITER)."""
    by_role: dict[str, set[str]] = {}
    for entry in acl:
        by_role.setdefault(entry["role"], set()).add(entry["entity"])
    return [{"role": r, "members": m} for r, m in by_role.items()]


def _satisfied(bindings: list[dict], entity: str, role: str) -> bool:
    """WRITER/OWNER already include READER; do not add a weaker entry next to a stronger one."""
    order = {"READER": 0, "WRITER": 1, "OWNER": 2}
    return any(entity in b["members"] and order.get(b["role"], -1) >= order[role] for b in bindings)


@dataclass
class BucketAcl:
    """Bucket ACL (``kind="acl"``) or default object ACL (``kind="defaultObjectAcl"``)."""
    client: Any
    name: str
    kind: str = "acl"

    @property
    def resource(self) -> str:
        return f"gs://{self.name} ({'bucket ACL' if self.kind == 'acl' else 'default object ACL'})"

    def check_exists(self):
        bucket = clients.get_bucket(self.client, self.name)
        if bucket.iam_configuration.uniform_bucket_level_access_enabled:
            raise UserError(
                f"gs://{self.name} uses uniform bucket-level access, where ACLs are disabled; "
                "grant bucket IAM roles instead (drop --via acl)"
            )
        return bucket

    def _acl(self, bucket):
        return bucket.acl if self.kind == "acl" else bucket.default_object_acl

    def read(self):
        bucket = self.client.bucket(self.name)
        with clients.google_errors(
            not_found=f"bucket gs://{self.name} does not exist",
            forbidden=f"permission denied reading the ACL of gs://{self.name}: you need storage.buckets.get "
                      "and OWNER access to the bucket",
            bad_request=f"gs://{self.name} refuses ACL access (uniform bucket-level access?); "
                        "grant bucket IAM roles instead (drop --via acl)",
        ):
            bucket.reload(projection="noAcl")   # metageneration first: a later ACL change then fails the write
            self._acl(bucket).reload()
        return bucket

    write_permission = "OWNER access to the bucket"

    def changes(self, bucket, wanted: Iterable[tuple[str, str]], revoke: bool) -> list[Change]:
        current = _acl_bindings(self._acl(bucket))
        if revoke:
            return compute_changes(self.resource, current, wanted, True)
        todo = [(e, r) for e, r in wanted if not _satisfied(current, e, r)]
        return compute_changes(self.resource, current, todo, False)

    def write(self, bucket, changes: list[Change]) -> None:
        acl = self._acl(bucket)
        for c in changes:
            kind, _, ident = c.member.partition("-")
            entity = acl.entity(kind, ident)
            if c.action == "+":
                entity.grant(c.role)
            else:
                entity.revoke(c.role)
        acl.save(if_metageneration_match=bucket.metageneration)


def grant_existing_objects(client, bucket_name: str, entities: list[str], revoke: bool = False,
                           workers: int = 16, progress: Callable[[int], None] | None = None,
                           on_total: Callable[[int], None] | None = None) -> int:
    """READER for ``entities`` on every object in the bucket, in parallel. Returns objects changed."""
    blobs = list(client.list_blobs(bucket_name))
    if on_total:
        on_total(len(blobs))

    def one(blob) -> bool:
        def attempt() -> bool:
            blob.reload(projection="noAcl")
            blob.acl.reload()
            changed = False
            for e in entities:
                kind, _, ident = e.partition("-")
                entity = blob.acl.entity(kind, ident)
                has = "READER" in entity.get_roles() or "OWNER" in entity.get_roles()
                if revoke and "READER" in entity.get_roles():
                    entity.revoke_read()
                    changed = True
                elif not revoke and not has:
                    entity.grant_read()
                    changed = True
            if changed:
                blob.acl.save(if_metageneration_match=blob.metageneration)
            return changed

        return conflict_retry()(attempt)()

    changed = 0
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(one, b) for b in blobs]
        for fut in as_completed(futures):
            changed += bool(fut.result())
            if progress:
                progress(1)
    return changed
