"""Image references, parsed and normalised as Docker's ``distribution/reference`` does.

Grammar (https://github.com/distribution/reference)::

    reference        := name [ ":" tag ] [ "@" digest ]
    name             := [domain '/'] remote-name
    domain           := host [':' port-number]
    host             := domain-name | '[' IPv6address ']'
    domain-component := /([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])/
    path-component   := /[a-z0-9]+/ [separator /[a-z0-9]+/]*   separator := /[_.]|__|[-]+/
    tag              := /[\\w][\\w.-]{0,127}/
    digest           := algorithm ":" hex      (sha256/sha384/sha512, lower-case hex)

Normalisation (``ParseNormalizedNamed`` / ``ParseDockerRef``): a first component that is
not ``localhost`` and has no ``.``/``:`` (and is lower case) is not a domain, so
``ubuntu`` → ``docker.io/library/ubuntu``, ``index.docker.io`` → ``docker.io``; a name
with neither tag nor digest gets ``:latest``.

Every rule broken is reported by name (:attr:`ReferenceProblem.rule`), so ``rocmenv ref
parse`` can say which one. Nothing that fails here ever reaches a URL, shell or engine.
"""

from __future__ import annotations

import re

from rocmenv.errors import ConfigError, InvalidReference, ReferenceSyntaxError
from rocmenv.lazy import Pattern
from rocmenv.record import record

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Literal

    Rule = Literal[
        "empty",
        "identifier",
        "uppercase",
        "name-too-long",
        "domain",
        "path-component",
        "tag",
        "digest-format",
        "digest-algorithm",
        "digest-length",
        "format",
    ]

DEFAULT_DOMAIN = "docker.io"
LEGACY_DEFAULT_DOMAIN = "index.docker.io"
OFFICIAL_PREFIX = "library/"
DEFAULT_TAG = "latest"
NAME_MAX = 255
TAG_MAX = 128

_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = _ALNUM + r"(?:" + _SEPARATOR + _ALNUM + r")*"
_REMOTE_NAME = _PATH_COMPONENT + r"(?:/" + _PATH_COMPONENT + r")*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN_NAME = _DOMAIN_COMPONENT + r"(?:\." + _DOMAIN_COMPONENT + r")*"
_IPV6 = r"\[(?:[a-fA-F0-9:]+)\]"
_DOMAIN_AND_PORT = r"(?:" + _DOMAIN_NAME + r"|" + _IPV6 + r")(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][0-9A-Fa-f]{32,}"
_NAME = r"(?:" + _DOMAIN_AND_PORT + r"/)?" + _REMOTE_NAME

# re.ASCII: Go's \w is ASCII-only. fullmatch: Python's `$` would accept a trailing newline.
_REFERENCE_RE = Pattern(r"(" + _NAME + r")(?::(" + _TAG + r"))?(?:@(" + _DIGEST + r"))?", re.ASCII)
_ANCHORED_NAME_RE = Pattern(r"(?:(" + _DOMAIN_AND_PORT + r")/)?(" + _REMOTE_NAME + r")", re.ASCII)
_TAG_RE = Pattern(_TAG, re.ASCII)
_DIGEST_RE = Pattern(_DIGEST, re.ASCII)
_IDENTIFIER_RE = Pattern(r"[a-f0-9]{64}", re.ASCII)
_PATH_COMPONENT_RE = Pattern(_PATH_COMPONENT, re.ASCII)
_DOMAIN_RE = Pattern(_DOMAIN_AND_PORT, re.ASCII)

DIGEST_ALGORITHMS: dict[str, int] = {"sha256": 64, "sha384": 96, "sha512": 128}


RULE_TEXT: dict[str, str] = {
    "empty": "repository name must have at least one component",
    "identifier": "a 64-character hexadecimal string is an image ID, not a repository name",
    "uppercase": "repository name must be lowercase",
    "name-too-long": f"repository path must not be more than {NAME_MAX} characters",
    "domain": "registry domain must be a host name, IPv4 address or [IPv6] address, with an optional :port",
    "path-component": "each path component must be lower-case letters and digits, separated by '.', '_', '__' or '-'",
    "tag": f"tag must match [A-Za-z0-9_][A-Za-z0-9_.-]{{0,{TAG_MAX - 1}}}",
    "digest-format": "digest must be ALGORITHM:HEX (e.g. sha256:<64 lower-case hex digits>)",
    "digest-algorithm": "unsupported digest algorithm (sha256, sha384 or sha512)",
    "digest-length": "digest has the wrong length for its algorithm",
    "format": "invalid reference format",
}


@record
class ReferenceProblem:
    rule: Rule
    detail: str


@record
class Reference:
    """A normalised reference: ``domain/path[:tag][@digest]``."""

    domain: str
    path: str
    tag: str | None = None
    digest: str | None = None

    @property
    def name(self) -> str:
        # The domain is empty only for names Docker itself leaves unqualified (e.g. "a_b.c/d").
        return f"{self.domain}/{self.path}" if self.domain else self.path

    @property
    def repository(self) -> str:
        """Alias of :attr:`name` (domain and path, no tag or digest)."""
        return self.name

    def __str__(self) -> str:
        out = self.name
        if self.tag:
            out += f":{self.tag}"
        if self.digest:
            out += f"@{self.digest}"
        return out

    @property
    def familiar_name(self) -> str:
        if self.domain != DEFAULT_DOMAIN:
            return self.name
        path = self.path
        if path.startswith(OFFICIAL_PREFIX) and "/" not in path[len(OFFICIAL_PREFIX) :]:
            path = path[len(OFFICIAL_PREFIX) :]
        return path

    @property
    def familiar(self) -> str:
        out = self.familiar_name
        if self.tag:
            out += f":{self.tag}"
        if self.digest:
            out += f"@{self.digest}"
        return out

    def with_tag(self, tag: str) -> Reference:
        """This repository at ``tag`` (any digest dropped)."""
        validate_tag(tag)
        return Reference(domain=self.domain, path=self.path, tag=tag)

    def with_digest(self, digest: str) -> Reference:
        validate_digest(digest)
        return Reference(domain=self.domain, path=self.path, tag=self.tag, digest=digest)

    def docker_ref(self) -> Reference:
        """``ParseDockerRef``: tag+digest keeps only the digest; a bare name gets ``latest``."""
        if self.digest:
            return Reference(domain=self.domain, path=self.path, digest=self.digest)
        if not self.tag:
            return Reference(domain=self.domain, path=self.path, tag=DEFAULT_TAG)
        return self

    def to_json(self) -> dict[str, str | None]:
        return {
            "input": None,
            "name": self.name,
            "domain": self.domain,
            "path": self.path,
            "tag": self.tag,
            "digest": self.digest,
            "familiar": self.familiar,
            "canonical": str(self.docker_ref()),
        }


def _diagnose_name(name: str) -> ReferenceProblem:
    """Say which rule a name part (no tag/digest) breaks. ``name`` is ``DOMAIN/PATH``:
    :func:`parse` has put the domain in front and refused upper case in the path already."""
    domain, _, path = name.partition("/")
    if not _DOMAIN_RE.fullmatch(domain):
        return ReferenceProblem(rule="domain", detail=f"{RULE_TEXT['domain']}: {domain!r}")
    for component in path.split("/"):
        if not _PATH_COMPONENT_RE.fullmatch(component):
            shown = component if component else "(empty)"
            return ReferenceProblem(
                rule="path-component", detail=f"{RULE_TEXT['path-component']}: {shown!r}"
            )
    # Not reached: the checks above and _diagnose's are the reference regexp's, part by part.
    # Kept so that a grammar change can never turn into a traceback.
    return ReferenceProblem(rule="format", detail=RULE_TEXT["format"])  # pragma: no mutate


def _diagnose(text: str) -> ReferenceProblem:
    """Explain why ``text`` does not match the reference grammar."""
    rest, at, digest = text.partition("@")
    if at:
        problem = digest_problem(digest)
        if problem:
            return problem
    # A ':' after the last '/' separates the tag (a ':' before it belongs to a port).
    slash = rest.rfind("/")
    colon = rest.rfind(":")
    name, tag = (rest[:colon], rest[colon + 1 :]) if colon > slash else (rest, None)
    if tag is not None and not _TAG_RE.fullmatch(tag):
        return ReferenceProblem(rule="tag", detail=f"{RULE_TEXT['tag']}: {tag!r}")
    return _diagnose_name(name)


def digest_problem(digest: str) -> ReferenceProblem | None:
    """go-digest's ``Validate``: format, then algorithm, then length and hex case."""
    algorithm, _, encoded = digest.partition(":")
    if not encoded:  # no ':', or nothing after it (an empty algorithm fails the regexp below)
        return ReferenceProblem(
            rule="digest-format", detail=f"{RULE_TEXT['digest-format']}: {digest!r}"
        )
    if algorithm not in DIGEST_ALGORITHMS:
        if not _DIGEST_RE.fullmatch(digest):
            return ReferenceProblem(
                rule="digest-format", detail=f"{RULE_TEXT['digest-format']}: {digest!r}"
            )
        return ReferenceProblem(
            rule="digest-algorithm", detail=f"{RULE_TEXT['digest-algorithm']}: {algorithm!r}"
        )
    if len(encoded) != DIGEST_ALGORITHMS[algorithm]:
        return ReferenceProblem(
            rule="digest-length",
            detail=f"{algorithm} needs {DIGEST_ALGORITHMS[algorithm]} hex digits, got {len(encoded)}",
        )
    if not re.fullmatch(r"[a-f0-9]+", encoded):
        return ReferenceProblem(
            rule="digest-format", detail=f"{RULE_TEXT['digest-format']}: {digest!r}"
        )
    return None


def validate_digest(digest: str) -> str:
    problem = digest_problem(digest)
    if problem:
        raise ReferenceSyntaxError(digest, problem.rule, problem.detail)
    return digest


def _split_docker_domain(name: str) -> tuple[str, str]:
    first, sep, rest = name.partition("/")
    if not sep:
        return DEFAULT_DOMAIN, OFFICIAL_PREFIX + name
    if first == "localhost":
        domain, remote = first, rest
    elif first == LEGACY_DEFAULT_DOMAIN:
        domain, remote = DEFAULT_DOMAIN, rest
    elif "." in first or ":" in first or first.lower() != first:
        domain, remote = first, rest
    else:
        domain, remote = DEFAULT_DOMAIN, name
    if domain == DEFAULT_DOMAIN and "/" not in remote:
        remote = OFFICIAL_PREFIX + remote
    return domain, remote


def parse(text: str) -> Reference:
    """Parse and normalise like ``reference.ParseNormalizedNamed`` (no default tag added)."""
    if not isinstance(text, str) or text == "":
        raise ReferenceSyntaxError("", "empty", RULE_TEXT["empty"])
    if _IDENTIFIER_RE.fullmatch(text):
        raise ReferenceSyntaxError(
            text,
            "identifier",
            RULE_TEXT["identifier"],
            hint="to name an image by digest use NAME@sha256:<hex>",
        )
    domain, remainder = _split_docker_domain(text)
    remote = remainder.partition(":")[0]
    if remote.lower() != remote:
        remote_path = text.partition("@")[0].rsplit(":", 1)[0] if "/" in text else remote
        raise ReferenceSyntaxError(text, "uppercase", f"{RULE_TEXT['uppercase']}: {remote_path!r}")
    full = f"{domain}/{remainder}"
    match = _REFERENCE_RE.fullmatch(full)
    if match is None:
        problem = _diagnose(full)
        raise ReferenceSyntaxError(text, problem.rule, problem.detail)
    name, tag, digest = match.group(1), match.group(2), match.group(3)
    name_match = _ANCHORED_NAME_RE.fullmatch(name)
    assert name_match is not None  # the reference regexp already matched this name
    parsed_domain, path = name_match.group(1) or "", name_match.group(2)
    if len(path) > NAME_MAX:
        raise ReferenceSyntaxError(
            text, "name-too-long", f"{RULE_TEXT['name-too-long']} (got {len(path)})"
        )
    if digest:
        digest_issue = digest_problem(digest)
        if digest_issue:
            raise ReferenceSyntaxError(text, digest_issue.rule, digest_issue.detail)
    return Reference(domain=parsed_domain, path=path, tag=tag or None, digest=digest or None)


def parse_docker_ref(text: str) -> Reference:
    """``reference.ParseDockerRef``: normalise, drop the tag of tag+digest, default ``latest``."""
    return parse(text).docker_ref()


def parse_repository(text: str) -> Reference:
    """A repository name: no tag, no digest (``rocm/sgl-dev``, ``127.0.0.1:5000/rocm/sgl-dev``)."""
    ref = parse(text)
    if ref.tag or ref.digest:
        raise ReferenceSyntaxError(
            text,
            "format",
            "a repository is expected here, without :TAG or @DIGEST",
            hint=f"pass {ref.familiar_name!r} and give the tag separately",
        )
    return ref


def validate_tag(tag: str) -> str:
    """A tag on its own. A full reference where a tag is expected gets a specific hint."""
    if _TAG_RE.fullmatch(tag):
        return tag
    if "/" in tag or ":" in tag:  # perhaps NAME:TAG or NAME@DIGEST
        try:
            ref = parse(tag)
        except InvalidReference:
            pass
        else:
            raise ReferenceSyntaxError(
                tag,
                "tag",
                "a tag is expected here, not a full image reference",
                kind="tag",
                hint=f"pass the tag alone, e.g. {ref.tag or DEFAULT_TAG!r}, and the repository "
                f"{ref.familiar_name!r} separately",
            )
    if not tag:
        detail = "tag is empty"
    elif len(tag) > TAG_MAX:
        detail = f"tag is {len(tag)} characters long; at most {TAG_MAX} are allowed"
    elif not re.match(r"\w", tag, re.ASCII):
        detail = f"tag must start with a letter, digit or '_': {tag!r}"
    else:
        bad = sorted({c for c in tag if not re.fullmatch(r"[\w.-]", c, re.ASCII)})
        detail = f"tag contains characters that are not allowed: {''.join(bad)!r}"
    raise ReferenceSyntaxError(
        tag,
        "tag",
        detail,
        kind="tag",
        hint=f"tags match [A-Za-z0-9_][A-Za-z0-9_.-]{{0,{TAG_MAX - 1}}}",
    )


def is_loopback_host(domain: str) -> bool:
    """Exactly ``localhost`` or a loopback IP address (``127.0.0.0/8``, ``::1``).

    Decided with :mod:`ipaddress`: ``127.attacker.example`` is a name, not a loopback address.
    """
    import ipaddress

    host = host_of(domain)
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_HOST_PORT_RE = Pattern(r"(?:\[(?P<v6>[^\]]*)\]|(?P<name>[^:@/\[\]]*))(?::[0-9]*)?", re.ASCII)


def host_of(domain: str) -> str:
    """The host part of ``domain[:port]`` (brackets of an IPv6 address removed).

    Anything else comes back whole: a URL's netloc with user info is not ``HOST[:PORT]``
    (the host of ``localhost:5000@evil.example`` or ``[::1]@evil.example`` is after the ``@``).
    """
    match = _HOST_PORT_RE.fullmatch(domain)
    if match is None:
        return domain
    v6 = match.group("v6")
    return v6 if v6 is not None else match.group("name")


# -- registry hosts (mirrors, insecure registries) ---------------------------------------

_HOST_LABEL = Pattern(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?", re.ASCII)


def host_problem(text: str) -> str | None:
    """Why ``text`` is not a registry ``HOST[:PORT]`` (a DNS name of labels of at most 63
    characters, an IPv4 address, or ``[IPv6]``; port 1-65535), or ``None``."""
    import ipaddress

    if not text:
        return "it is empty"
    if "@" in text:
        return "it carries credentials ('@'): mirrors get none; put them in the Docker config"
    if "/" in text:
        return "it has a scheme or a path ('/'): give the host and port only"
    if len(text) > 261:
        return "it is longer than 261 characters"
    if text.startswith("["):
        addr, bracket, rest = text[1:].partition("]")
        if not bracket:
            return "'[' without a closing ']'"
        try:
            ipaddress.IPv6Address(addr)
        except ValueError:
            return f"{addr!r} is not an IPv6 address"
        if rest and not rest.startswith(":"):
            return f"{rest!r} after the address is not :PORT"
        port = rest[1:] if rest else None
    else:
        name, colon, port_text = text.partition(":")
        port = port_text if colon else None
        if len(name) > 253:
            return "the host name is longer than 253 characters"
        for label in name.split("."):
            if len(label) > 63:
                return f"the label {label[:20]!r}... is longer than 63 characters"
            if not _HOST_LABEL.fullmatch(label):
                return f"{label!r} is not a host name label (letters, digits, inner '-')"
    if port is not None and not (
        port.isascii() and port.isdigit() and len(port) <= 5 and 1 <= int(port) <= 65535
    ):
        return f"port {port!r} is not a number from 1 to 65535"
    return None


def check_host(text: str, where: str) -> str:
    problem = host_problem(text)
    if problem is not None:
        shown = text.rpartition("@")[2]  # never echo what came before an '@'
        shown = ("***@" if "@" in text else "") + (
            shown if len(shown) <= 80 else shown[:77] + "..."
        )
        raise ConfigError(
            f"{where}: {shown!r} is not a registry HOST[:PORT]: {problem}",
            hint="write e.g. mirror.example.com, 127.0.0.1:5000 or [::1]:5000 (no scheme, no path)",
        )
    return text
