"""Kafka ACLs kept in step with the catalog, on a cluster whose broker runs an authorizer.

Each stream's grants (``model/acls.py``) sit on PREFIXED patterns of its topics' prefix, so a topic
created later is covered at once. A change of a stream's catalog document (create, edit, delete,
replica or upstream add and remove) replaces exactly the entries under that prefix that differ,
inside the catalog transaction and before its commit: a change whose ACLs the caller may not set
(Kafka asks for ALTER on the cluster) is refused in one line and leaves the catalog as it was.
A cluster without an authorizer answers SECURITY_DISABLED, and then nothing is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException

# confluent-kafka's admin package re-exports these from private modules without declaring them (__all__):
# an error under --strict (no implicit re-export) only, hence unused-ignore for the project's own settings.
from confluent_kafka.admin import (  # type: ignore[attr-defined, unused-ignore]
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from streamrep.errors import InvalidArgument, PermissionDenied, RetryNow, StreamrepError
from streamrep.model.acls import Grant, Principals, entry_grants, installation_grants, one_way_replica
from streamrep.model.catalog import StreamEntry
from streamrep.model.naming import naming_for
from streamrep.store.kafka.client import TIMEOUT_SECONDS
from streamrep.store.kafka.parts import StoreCore

_RESOURCES = {
    "topic": ResourceType.TOPIC,
    "group": ResourceType.GROUP,
    "transactional_id": ResourceType.TRANSACTIONAL_ID,
    "cluster": ResourceType.BROKER,
}


def _fields(grant: Grant) -> tuple[ResourceType, str, ResourcePatternType, str, str, AclOperation, AclPermissionType]:
    return (
        _RESOURCES[grant.resource],
        grant.name,
        ResourcePatternType.PREFIXED if grant.prefixed else ResourcePatternType.LITERAL,
        f"User:{grant.principal}",
        "*",
        AclOperation[grant.operation],
        AclPermissionType.ALLOW if grant.allow else AclPermissionType.DENY,
    )


def _binding(grant: Grant) -> AclBinding:
    return AclBinding(*_fields(grant))


def _grant(binding: AclBinding) -> Grant | None:
    """The grant an ACL entry holds, or None for an entry streamrep never writes."""
    restype, operation = binding.restype, binding.operation
    if not isinstance(restype, ResourceType) or not isinstance(operation, AclOperation):
        return None  # the client makes both enums: described entries always have them
    resource = {v: k for k, v in _RESOURCES.items()}.get(restype)
    if resource is None or not binding.principal.startswith("User:") or binding.host != "*":
        return None
    return Grant(
        resource,
        binding.name,
        binding.resource_pattern_type == ResourcePatternType.PREFIXED,
        binding.principal[len("User:") :],
        operation.name,
        binding.permission_type == AclPermissionType.ALLOW,
    )


class _NoAuthorizer(Exception):
    """The broker keeps no ACLs."""


__all__ = ["KafkaAcls", "one_way_replica"]


class KafkaAcls:
    """The ACLs of one streamrep installation on one Kafka cluster.

    :param store: the installation's store (its namespace, settings and admin client)
    :param settings: the cluster's settings (groups mapping, gateway principal)
    """

    def __init__(self, store: StoreCore, admin: Callable[[], AdminClient], settings: Mapping[str, Any]):
        self._store = store
        self._admin = admin
        self.principals = Principals.from_settings(settings)
        self._enforced: bool | None = None  # whether the broker runs an authorizer; asked once

    def _fail(self, exc: KafkaException, what: str) -> StreamrepError | RetryNow:
        return self._store._translate(exc, what)

    def _describe(self, pattern: AclBindingFilter) -> list[AclBinding]:
        future = self._admin().describe_acls(pattern, request_timeout=TIMEOUT_SECONDS)
        bindings: list[AclBinding] = future.result()
        return bindings

    def enforced(self) -> bool:
        """Whether the broker runs an authorizer. Kafka 4 answers a look at the ACLs of a cluster
        without one with an empty list, and only a change with SECURITY_DISABLED: so the first
        change, the installation's own grants, is the probe."""
        if self._enforced is None:
            try:
                self._create(
                    installation_grants(self._store.internal_prefix, self._group_prefix(), self.principals),
                    "cannot set streamrep's ACLs",
                )
                self._enforced = True
            except _NoAuthorizer:
                self._enforced = False
            except PermissionDenied:
                self._enforced = True  # a principal that may not set ACLs (the gateway): they are an admin's
        return self._enforced

    def _group_prefix(self) -> str:
        return f"{self._store.namespace}." if self._store.namespace else ""

    def grants(self, doc: Mapping[str, Any] | None) -> tuple[str | None, set[Grant]]:
        """The topic prefix of a stream's catalog document and the grants it calls for."""
        if doc is None:
            return None, set()
        entry = StreamEntry.from_dict(dict(doc))
        prefix = naming_for(entry.naming, entry.path, self._store.namespace).kafka_topic("")
        what = f"stream {entry.path} on cluster {self._store.cluster}"
        return prefix, entry_grants(entry, prefix, self.principals, what)

    def sync_stream(self, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> None:
        """Make the ACL entries under the stream's topic prefix those its new document calls for.

        Nothing is asked of the broker when the grants did not change (a replica's state, say), so
        the gateway, which may not set ACLs, can keep writing states.
        """
        if not self.enforced():
            return
        (old_prefix, old_grants), (new_prefix, new_grants) = self.grants(old), self.grants(new)
        if (old_prefix, old_grants) == (new_prefix, new_grants):
            return
        for prefix in {p for p in (old_prefix, new_prefix) if p}:
            self._replace(prefix, {g for g in new_grants if g.name == prefix and prefix == new_prefix})

    def _replace(self, prefix: str, wanted: set[Grant]) -> None:
        pattern = AclBindingFilter(
            ResourceType.TOPIC,
            prefix,
            ResourcePatternType.PREFIXED,
            None,  # type: ignore[arg-type]  # a filter's None matches any principal; the stubs allow only str
            None,  # type: ignore[arg-type]  # and any host
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        what = f"cannot set the ACLs of Kafka topics {prefix}*"
        try:
            present = {g for g in map(_grant, self._describe(pattern)) if g is not None}
        except KafkaException as exc:
            raise self._fail(exc, what) from None
        stale = present - wanted
        if stale:
            filters = [AclBindingFilter(*_fields(g)) for g in sorted(stale)]
            try:
                for future in self._admin().delete_acls(filters, request_timeout=TIMEOUT_SECONDS).values():
                    future.result()
            except KafkaException as exc:
                raise self._fail(exc, what) from None
        self._create(wanted - present, what)

    def _create(self, grants: set[Grant], what: str) -> None:
        if not grants:
            return
        try:
            for future in (
                self._admin()
                .create_acls([_binding(g) for g in sorted(grants)], request_timeout=TIMEOUT_SECONDS)
                .values()
            ):
                future.result()
        except KafkaException as exc:
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if err is not None and err.code() == KafkaError.SECURITY_DISABLED:
                raise _NoAuthorizer() from None
            raise self._fail(exc, what) from None
        except (ValueError, TypeError) as exc:  # a name Kafka's client refuses
            raise InvalidArgument(f"cluster {self._store.cluster}: {what}: {exc}") from None
