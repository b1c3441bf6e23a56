"""API keys for the REST and MCP servers: who may call which method on which bank and scope.

The key file format (YAML or JSON, `--keys FILE` or `ADK_MEMORY_API_KEYS_FILE`) is in README
§"REST server". Permissions are named like Agent Platform's IAM permissions, with or without the
`aiplatform.` prefix, or a family wildcard; an unknown one fails the load, so a typo never
silently grants nothing. A key bound to a scope (`scope`, or a signed token's claims through
`scope_claims`) confines every call to scopes carrying those entries (`Principal.check_scope`,
`confine_filter`; a memory named in a request passes `check_in_scope`), and a wildcard never
grants it bank writes: those must be listed by name.

A server without keys trusts whoever can reach it, so it must refuse what a web page can send
it: `RequestGuard` allows only the `Host` names it serves (loopback names by default, against DNS
rebinding; never `*` without keys, whatever address is bound) and, without keys, only requests
from its own origin or a configured CORS origin. `GuardMiddleware` applies it to every request
of the REST app and of the MCP app alike.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Request, Security
from fastapi.security import (
    APIKeyHeader,
    HTTPAuthorizationCredentials,
    HTTPBearer,
    SecurityScopes,
)
from joserfc import jwt
from joserfc.errors import ExpiredTokenError, JoseError
from joserfc.jwk import OctKey
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    model_validator,
)
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from adk_memory._hosts import is_loopback
from adk_memory.engine.paging import tokens_for
from adk_memory.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unauthenticated,
)
from adk_memory.filters import parse_filter, quote_string
from adk_memory.names import Names, scoped_memory_id
from adk_memory.scope import MAX_SCOPE_PAIRS, scope_key, validate_scope
from adk_memory.server.wire import error_response
from adk_memory.wording import option

if TYPE_CHECKING:
    from adk_memory._async_client import AsyncClient

__all__ = [
    "PERMISSIONS",
    "ApiKey",
    "ApiKeys",
    "GuardMiddleware",
    "Principal",
    "RequestGuard",
    "authenticate",
    "authorize",
    "check_in_scope",
    "is_loopback",
    "normalize_permission",
    "principal_of",
]

PERMISSIONS: frozenset[str] = frozenset(
    {
        "reasoningEngines.create",
        "reasoningEngines.get",
        "reasoningEngines.list",
        "reasoningEngines.update",
        "reasoningEngines.delete",
        "memories.create",
        "memories.get",
        "memories.list",
        "memories.update",
        "memories.delete",
        "memories.generate",
        "memories.retrieve",
        "memoryRevisions.get",
        "memoryRevisions.list",
        "memoryRevisions.rollback",
    }
)
"""Every permission a route can require, named like Agent Platform's IAM permissions without
the `aiplatform.` prefix. `memories:ingestEvents` needs `memories.generate`,
`memories:retrieveProfiles` needs `memories.retrieve` and `memories:purge` needs
`memories.delete`; reading an operation needs any permission on its bank."""

_FAMILIES = frozenset(name.split(".")[0] for name in PERMISSIONS)
_PREFIX = "aiplatform."
_MIN_KEY_LENGTH = 16
_BANK_WRITES = frozenset(
    {"reasoningEngines.create", "reasoningEngines.update", "reasoningEngines.delete"}
)


def normalize_permission(name: str) -> str:
    """The canonical spelling of a permission or wildcard (`aiplatform.` prefix removed).

    Raises:
        ValueError: The name is not a known permission or wildcard.
    """
    bare = name.strip().removeprefix(_PREFIX)
    family, _, rest = bare.partition(".")
    if bare in PERMISSIONS or bare == "*" or (rest == "*" and family in _FAMILIES):
        return bare
    raise ValueError(
        f"unknown permission {name[:60]!r}; use one of {', '.join(sorted(PERMISSIONS))}, "
        f"a family wildcard such as 'memories.*', or '*'"
    )


def _bank_id(name: str) -> str:
    try:
        return Names.parse_bank_id(name.strip(), field="banks")
    except InvalidArgument as exc:
        raise ValueError(str(exc)) from None


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8")).digest()


_ScopeEntries = dict[
    Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")],
    Annotated[str, Field(min_length=1)],
]


class ApiKey(BaseModel):
    """One API key: its label, its secret (or the secret's SHA-256) and what it may do."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=128)
    """A label for logs and error messages (never the secret)."""
    key: SecretStr | None = None
    """The secret as sent by clients, at least 16 characters. Exactly one of `key` and
    `key_sha256` is set."""
    key_sha256: str | None = Field(None, pattern=r"^[0-9a-fA-F]{64}$")
    """The hex SHA-256 of the secret, so that the key file need not hold the secret itself."""
    permissions: frozenset[Annotated[str, AfterValidator(normalize_permission)]] = Field(
        min_length=1
    )
    """Permissions (`memories.retrieve`, `aiplatform.memories.generate`, `memories.*`, `*`)."""
    banks: frozenset[Annotated[str, AfterValidator(_bank_id)]] | None = Field(None, min_length=1)
    """Bank ids (or full bank names) the key may use; None means every bank."""
    token_secret: SecretStr | None = None
    """An HS256 secret (32+ characters): the key is any signed token (JWT) with an `exp` that
    verifies with it, instead of one fixed secret."""
    scope: _ScopeEntries | None = Field(None, min_length=1)
    """Scope entries every call with the key is confined to."""
    scope_claims: _ScopeEntries | None = Field(None, min_length=1)
    """Scope entries taken from a token's claims: scope key -> claim name (`{user_id: sub}`)."""

    @model_validator(mode="after")
    def _one_secret(self) -> ApiKey:
        secrets = (self.key, self.key_sha256, self.token_secret)
        if sum(secret is not None for secret in secrets) != 1:
            raise ValueError(
                "set exactly one of key and key_sha256 (or token_secret for signed tokens)"
            )
        if self.token_secret is not None and len(self.token_secret.get_secret_value()) < 32:
            raise ValueError("token_secret must have at least 32 characters (HS256)")
        if self.scope_claims is not None and self.token_secret is None:
            raise ValueError("scope_claims needs token_secret: only a signed token has claims")
        if len({**(self.scope or {}), **(self.scope_claims or {})}) > MAX_SCOPE_PAIRS:
            raise ValueError(f"a scope has at most {MAX_SCOPE_PAIRS} entries")
        if self.key is not None and len(self.key.get_secret_value()) < _MIN_KEY_LENGTH:
            raise ValueError(f"key must have at least {_MIN_KEY_LENGTH} characters")
        return self

    @property
    def digest(self) -> bytes:
        """The SHA-256 of the secret (of the token secret for a token key)."""
        if self.key is not None:
            return _digest(self.key.get_secret_value())
        if self.token_secret is not None:
            return _digest(self.token_secret.get_secret_value())
        return bytes.fromhex(self.key_sha256 or "")

    @property
    def bound(self) -> bool:
        """Whether the key is confined to a scope."""
        return self.scope is not None or self.scope_claims is not None

    def grants(self, permission: str) -> bool:
        """Whether the permission set includes `permission` (directly or by wildcard)."""
        if self.bound and permission in _BANK_WRITES:
            return permission in self.permissions
        family = permission.split(".")[0]
        return bool({permission, f"{family}.*", "*"} & self.permissions)

    def scope_of(self, token: str) -> dict[str, str] | None:
        """The scope a signed token binds this token key to, or None if it does not verify.

        A token must be HS256, signed with `token_secret`, unexpired (`exp` is required) and
        carry every claim of `scope_claims` as a non-empty string.
        """
        try:
            claims = self._claims(token)
        except (JoseError, ValueError):
            return None
        scope = dict(self.scope or {})
        for entry, claim in (self.scope_claims or {}).items():
            value = claims.get(claim)
            if not isinstance(value, str) or not value:
                return None
            scope[entry] = value
        return scope

    def expired(self, token: str) -> bool:
        """Whether `token` is one this key signed whose `exp` has passed."""
        try:
            self._claims(token)
        except ExpiredTokenError:
            return True
        except (JoseError, ValueError):
            return False
        return False

    def _claims(self, token: str) -> dict[str, Any]:
        """The claims of an unexpired token signed with `token_secret`.

        Raises:
            JoseError: Not signed by this key, expired (`ExpiredTokenError`) or without `exp`.
            ValueError: Not a token at all.
        """
        if self.token_secret is None:
            raise JoseError("not a token key")
        secret = OctKey.import_key(self.token_secret.get_secret_value())
        claims: dict[str, Any] = jwt.decode(token, secret, algorithms=["HS256"]).claims
        jwt.JWTClaimsRegistry(exp={"essential": True}).validate(claims)
        return claims


class ApiKeys(BaseModel):
    """The configured keys; loadable from a YAML or JSON file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    keys: tuple[ApiKey, ...] = Field(min_length=1)
    """At least one key; a server without keys is configured by passing no `ApiKeys` at all."""

    @model_validator(mode="after")
    def _unique(self) -> ApiKeys:
        names = [key.name for key in self.keys]
        if len(set(names)) != len(names):
            raise ValueError("key names must be unique")
        digests = [key.digest for key in self.keys]
        if len(set(digests)) != len(digests):
            raise ValueError("two keys have the same secret")
        return self

    @classmethod
    def of(cls, keys: ApiKeys | Sequence[ApiKey | Mapping[str, Any]]) -> ApiKeys:
        """`ApiKeys` from itself or a list of keys (models or dicts)."""
        if isinstance(keys, ApiKeys):
            return keys
        return cls.model_validate({"keys": list(keys)})

    @classmethod
    def from_file(cls, path: str | Path) -> ApiKeys:
        """Loads a key file: JSON when it ends in `.json`, else YAML (which also reads JSON).

        Raises:
            InvalidArgument: The file is missing, does not parse, or breaks a rule above; the
                message names the entry and field, never a secret.
        """
        source = Path(path)
        try:
            text = source.read_text(encoding="utf-8")
        except OSError as exc:
            raise InvalidArgument(
                f"Cannot read the API key file {str(source)!r}: {exc.strerror}.", field="keys"
            ) from None
        try:
            if source.suffix.lower() == ".json":
                data = json.loads(text)
            else:
                import yaml  # type: ignore[import-untyped]

                data = yaml.safe_load(text)
        except Exception as exc:  # any parser error is the same user mistake
            raise InvalidArgument(
                f"The API key file {str(source)!r} does not parse ({type(exc).__name__}).",
                field="keys",
            ) from None
        if isinstance(data, list):
            data = {"keys": data}
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "keys"
            raise InvalidArgument(
                f"The API key file {str(source)!r} is invalid at {where}: {first['msg']}.",
                field="keys",
            ) from None

    def find(self, presented: str) -> ApiKey | None:
        """The key whose secret is `presented`, comparing digests in constant time."""
        digest = _digest(presented)
        found: ApiKey | None = None
        for key in self.keys:  # no early exit: the time does not depend on which key matched
            if key.token_secret is None and hmac.compare_digest(digest, key.digest):
                found = key
        return found

    def identify(self, presented: str) -> Principal | None:
        """The caller presenting a secret or a signed token; None if nothing accepts it."""
        key = self.find(presented)
        if key is not None:
            return Principal(key, key.scope)
        if presented.count(".") == 2:
            for key in self.keys:
                scope = key.scope_of(presented)
                if scope is not None:
                    return Principal(key, scope)
        return None

    def expired(self, presented: str) -> bool:
        """Whether `presented` is a token of one of the keys whose `exp` has passed."""
        return presented.count(".") == 2 and any(key.expired(presented) for key in self.keys)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a configured key, or anyone when the server has no keys (loopback only)."""

    key: ApiKey | None
    scope: dict[str, str] | None = None
    """The scope entries every call is confined to; None: not confined."""

    def covers(self, scope: object) -> bool:
        """Whether `scope` carries every entry the caller is bound to."""
        if self.scope is None:
            return True
        return isinstance(scope, Mapping) and all(
            scope.get(entry) == value for entry, value in self.scope.items()
        )

    def check_scope(self, scope: object, *, field: str = "scope") -> None:
        """Raises PermissionDenied unless `scope` carries every entry the caller is bound to."""
        if not self.covers(scope):
            raise PermissionDenied(
                f"The API key {self.label!r} is bound to the scope {self.scope}; every request "
                f"must name a scope carrying those entries in {field}.",
                field=field,
            )

    def memory_id_for(self, chosen: str | None, scope: Mapping[str, str]) -> str | None:
        """The id a create names for `chosen` (None: a new random id).

        A caller bound to a scope chooses ids in the namespace of the memory's scope
        (`names.scoped_memory_id`): another scope's ids, live, deleted or not yet used, answer
        exactly as free ones do (they are other ids), and none of its own can be taken in
        advance from outside its scope. Unbound callers name ids as they are.
        """
        if chosen is None or self.scope is None:
            return chosen
        return scoped_memory_id(chosen, scope_key(validate_scope(dict(scope))), field="memory_id")

    def confine_filter(self, text: str | None) -> str | None:
        """A list or purge filter ANDed with the caller's scope.

        Raises:
            InvalidArgument: `text` does not parse on its own. Only a complete expression is
                wrapped, so that no unbalanced parenthesis or quote can take the appended
                conditions apart.
        """
        if self.scope is None:
            return text
        conditions = [
            f"scope.{entry} = {quote_string(value)}" for entry, value in self.scope.items()
        ]
        if text is not None and parse_filter(text, allow_scope=True) is not None:
            conditions.insert(0, f"({text})")
        return " AND ".join(conditions)

    @property
    def label(self) -> str:
        """The key's name for logs, or `anonymous`."""
        return self.key.name if self.key is not None else "anonymous"

    @property
    def audience(self) -> str:
        """Who the caller's page tokens belong to: the key, and the scope it is bound to.

        Key names are unique in a key file, so the servers that share one accept each other's
        tokens; two users of one token key differ by their bound scope.
        """
        return json.dumps([self.label, sorted((self.scope or {}).items())])

    @property
    def banks(self) -> frozenset[str] | None:
        """The bank ids the key is limited to; None: every bank."""
        return self.key.banks if self.key is not None else None

    def may_use_bank(self, bank_id: str) -> bool:
        """Whether the key is not limited to other banks."""
        return self.key is None or self.key.banks is None or bank_id in self.key.banks

    def require(self, permission: str | None, bank_id: str | None) -> None:
        """Raises PermissionDenied unless the key has `permission` on `bank_id`.

        Args:
            permission: The permission, or None for "any permission on the bank" (operations).
            bank_id: The bank the request touches, or None for collection-level requests.
        """
        if self.key is None:
            return
        if bank_id is not None and not self.may_use_bank(bank_id):
            raise PermissionDenied(
                f"The API key {self.key.name!r} may not use memory bank {bank_id!r}; add it to "
                "the key's `banks` in the key file.",
                field="name",
            )
        if permission is None:
            return
        if not self.key.grants(permission):
            raise PermissionDenied(
                f"The API key {self.key.name!r} lacks the permission {permission!r} "
                f"(aiplatform.{permission}); add it to the key's `permissions`.",
                field="permissions",
            )
        if permission == "reasoningEngines.create" and self.key.banks is not None:
            raise PermissionDenied(
                f"The API key {self.key.name!r} is limited to some banks, so it cannot create "
                "new ones; use a key without `banks`.",
                field="banks",
            )


async def check_in_scope(
    client: AsyncClient, name: str, allowed: Callable[[dict[str, str]], bool]
) -> None:
    """Passes if the memory `name`'s scope is `allowed` (REST: `Principal.covers`).

    The scope is the live memory's or, once it is deleted, that of the revisions kept for
    rollback (`MemoryOps.scope_of`): a caller confined to a scope lists the history of its own
    deleted memory and rolls it back, as the route and the MCP tool promise.

    Raises:
        NotFound: The id names neither a memory nor a kept history, or one of a scope the
            caller may not see (the same answer, so that a bound key learns nothing about
            other scopes).
    """
    bank_id, memory_id = Names.parse_memory(name)
    if not allowed(await client.engine.memories.scope_of(bank_id, memory_id)):
        full = client.engine.names.memory(bank_id, memory_id)
        raise NotFound(f"Memory {full!r} does not exist or has expired.", field="name")


def authenticate(
    keys: ApiKeys | None, api_key: str | None, bearer: HTTPAuthorizationCredentials | None
) -> Principal:
    """The caller behind the `x-goog-api-key` header or the `Authorization: Bearer` token.

    Raises:
        Unauthenticated: Keys are configured and the request carries none, an unknown one, or
            an expired token (`field` is "credentials" for a wrong or expired one).
    """
    if keys is None:
        return Principal(None)
    presented = api_key or (bearer.credentials.strip() if bearer is not None else None)
    if not presented:
        raise Unauthenticated(
            "This server requires an API key: send it as 'x-goog-api-key: KEY' or "
            f"'Authorization: Bearer KEY' ({option('credentials')}).",
        )
    principal = keys.identify(presented)
    if principal is not None:
        return principal
    if keys.expired(presented):
        raise Unauthenticated(
            f"The token has expired (its exp claim is past); put a new one in "
            f"{option('credentials')}.",
            field="credentials",
        )
    raise Unauthenticated(
        f"The API key is not valid for this server; check the key in {option('credentials')}.",
        field="credentials",
    )


async def principal_of(request: Request, keys: ApiKeys | None) -> Principal:
    """`authenticate` for a request outside FastAPI's dependencies (the MCP server's)."""
    return authenticate(keys, await _API_KEY(request), await _BEARER(request))


_API_KEY = APIKeyHeader(name="x-goog-api-key", scheme_name="apiKey", auto_error=False)
_BEARER = HTTPBearer(scheme_name="bearer", auto_error=False)


async def authorize(
    request: Request,
    required: SecurityScopes,
    api_key: Annotated[str | None, Security(_API_KEY)],
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_BEARER)],
) -> AsyncIterator[Principal]:
    """The caller, checked for the route's permission on the bank in the path.

    The permission is the route's one security scope (none: any permission on the bank); the
    keys are the app's `state.api_keys`. The request's page tokens are the caller's own
    (`paging.tokens_for`), so no other key or bound scope can use them.
    """
    principal = authenticate(request.app.state.api_keys, api_key, bearer)
    request.state.key_label = principal.label
    request.state.principal = principal
    permission = required.scopes[0] if required.scopes else None
    principal.require(permission, request.path_params.get("bank"))
    with tokens_for(principal.audience):
        yield principal


@dataclass(frozen=True, slots=True)
class RequestGuard:
    """Which `Host` names and browser origins the server answers."""

    allowed_hosts: frozenset[str] | None
    """Host names served (`*` for any, with keys only); None: loopback names only without keys,
    any with keys."""
    cors_origins: frozenset[str]
    """Origins (`https://app.example`) whose pages may call the server."""
    keyless: bool
    """Whether the server has no keys, so that the origin of a request is all that tells a web
    page from a local program."""

    @classmethod
    def of(
        cls, allowed_hosts: Sequence[str] | None, cors_origins: Sequence[str], *, keyless: bool
    ) -> RequestGuard:
        """A checked guard.

        Raises:
            InvalidArgument: A host has a port or is not a host name, or an origin is not
                `scheme://host[:port]`.
            FailedPrecondition: CORS for every origin, or every Host name (`*`), on a server
                without keys.
        """
        hosts = [str(host).strip().lower() for host in allowed_hosts or ()]
        if "*" in hosts and keyless:
            raise FailedPrecondition(
                "Answering every Host name on a server without API keys would let any web page "
                "point a name of its own at this machine (DNS rebinding) and read and change "
                "every memory; list the names, or configure keys.",
                field="allowed_hosts",
            )
        for host in hosts:
            if host != "*" and _hostname(host) != host.strip("[]"):
                raise InvalidArgument(
                    f"allowed_hosts needs host names without a port, e.g. 'memory.internal'; "
                    f"{host[:100]!r} is not one.",
                    field="allowed_hosts",
                )
        for origin in cors_origins:
            if origin == "*" and keyless:
                raise FailedPrecondition(
                    "CORS for every origin on a server without API keys would let any web page "
                    "read and change every memory; list the origins, or configure keys.",
                    field="cors_origins",
                )
            if origin != "*" and not _ORIGIN.fullmatch(origin):
                raise InvalidArgument(
                    f"cors_origins needs origins like 'https://app.example:8443' (scheme, host "
                    f"and port, no path); {origin[:100]!r} is not one.",
                    field="cors_origins",
                )
        return cls(
            frozenset(h.strip("[]") for h in hosts) or None, frozenset(cors_origins), keyless
        )

    def check(self, host: str | None, origin: str | None) -> None:
        """Raises PermissionDenied for a foreign `Host`, or a foreign `Origin` without keys."""
        hostname = _hostname(host or "")
        if self.allowed_hosts is None:
            allowed = is_loopback(hostname) if self.keyless else True
        else:
            allowed = "*" in self.allowed_hosts or hostname in self.allowed_hosts
        if not allowed:
            raise PermissionDenied(
                f"This server does not answer to the host name {hostname[:100]!r} (a page on "
                "another site can point its own name at this machine). Call it as localhost, "
                "or allow the name with --allowed-host.",
                field="host",
            )
        if not self.keyless or origin is None or origin in self.cors_origins:
            return
        if origin.lower() not in (f"http://{host}".lower(), f"https://{host}".lower()):
            raise PermissionDenied(
                f"This server has no API keys, so it refuses requests from web pages of other "
                f"origins ({origin[:100]!r}); allow the origin with --cors-origin, or configure "
                "keys.",
                field="origin",
            )


_HOST = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[^\s:/@\[\]]+)(?::[0-9]{1,5})?")
_ORIGIN = re.compile(r"https?://" + _HOST.pattern)


def _hostname(host: str) -> str:
    """`Host` without its port, lowercase (`[::1]:8080` is `::1`); "" when malformed."""
    found = _HOST.fullmatch(host)
    return found[1].strip("[]").lower() if found else ""


class GuardMiddleware:
    """ASGI middleware that applies a `RequestGuard` to every HTTP request before the app.

    The one Host/Origin check of every HTTP surface: the REST app and the MCP app both wrap
    themselves in it, so a request the guard refuses (403 in the Google error envelope) never
    reaches a route, a tool or the MCP SDK's own transport.
    """

    def __init__(self, app: ASGIApp, *, policy: RequestGuard) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Checks an HTTP request's `Host` and `Origin`, then passes it on (or answers 403)."""
        if scope["type"] == "http":
            headers = Headers(scope=scope)
            try:
                self.policy.check(headers.get("host"), headers.get("origin"))
            except PermissionDenied as exc:
                await error_response(exc)(scope, receive, send)
                return
        await self.app(scope, receive, send)
