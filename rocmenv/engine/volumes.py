"""Volumes and a container's files, for both engine adapters: the scratch volumes of the
untrusted checkout's overlay (:mod:`rocmenv.engine.overlay`) — created, removed, listed by
label for ``rocmenv gc`` — and the files ``--output`` copies out, as the tar stream the
engine makes of them (:mod:`rocmenv.run.output` reads it).

The Engine API adapter sends ``POST /volumes/create``, ``DELETE /volumes/NAME``,
``GET /volumes`` and ``GET /containers/ID/archive``; the CLI adapter runs ``volume create``,
``volume inspect``, ``volume rm``, ``volume ls`` and ``cp ID:PATH -`` of docker or podman.
The adapters' methods of the same names are these functions (``self``: the adapter).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping

from rocmenv.engine.cli_command import CliError
from rocmenv.engine.protocol import VolumeInfo
from rocmenv.errors import EngineError, EngineProtocolError
from rocmenv.redact import redact

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    import subprocess
    from typing import Any, Protocol

    from rocmenv.engine.wire import Wire

    class DockerApiEngine(Protocol):
        """What these functions use of :class:`rocmenv.engine.docker_api.DockerApiEngine`."""

        wire: Wire

        def _json(self, method: str, path: str, *, action: str, kind: type | None = None,
                  **kw: Any) -> Any: ...  # fmt: skip

        def _call(self, method: str, path: str, *, action: str = "",
                  ok: tuple[int, ...] = ...) -> tuple[int, bytes]: ...  # fmt: skip

    class CliEngine(Protocol):
        """What these functions use of :class:`rocmenv.engine.cli_engine.CliEngine`."""

        kind: str
        _cmd: list[str]
        _env: dict[str, str]

        def _cli(self, *args: str) -> str: ...

        def _fail(self, action: str, err: CliError) -> EngineError: ...


#: What the CLIs say of a volume that is gone.
_GONE = ("no such volume", "not found", "no volume with name")


def _text_ok(text: str) -> bool:
    """A data directory rocmenv accepts from an engine: it goes into a mount option string
    (no control characters, nothing the guard refuses in a checkout's path either)."""
    return bool(text) and all(0x20 <= ord(c) != 0x7F and c not in ",:\\" for c in text)


# -- the Engine API -------------------------------------------------------------------------


def api_create_volume(self: DockerApiEngine, name: str, labels: Mapping[str, str]) -> str:
    doc = self._json(
        "POST", "/volumes/create", action=f"creating volume {name}", kind=dict,
        body={"Name": name, "Driver": "local", "Labels": dict(labels)},
    )  # fmt: skip
    return _mountpoint(doc, name, "docker-api")


def api_remove_volume(self: DockerApiEngine, name: str) -> None:
    from rocmenv.engine.wire import WireStatus

    try:
        self._call("DELETE", f"/volumes/{name}", action=f"removing volume {name}",
                   ok=(200, 204, 404))  # fmt: skip
    except WireStatus as err:
        raise EngineError(
            f"docker-api: removing volume {name} failed: {redact(err.message)}"
        ) from None


def api_list_volumes(
    self: DockerApiEngine, *, labels: Mapping[str, str | None]
) -> list[VolumeInfo]:
    filters = json.dumps({"label": [k if v is None else f"{k}={v}" for k, v in labels.items()]})
    doc = self._json(
        "GET", "/volumes", query={"filters": filters}, action="listing volumes", kind=dict
    )
    return [_volume(v, "docker-api") for v in doc.get("Volumes") or ()]


def api_export(self: DockerApiEngine, container_id: str, path: str) -> Iterator[bytes]:
    from rocmenv.engine.wire import WireTimeout, WireUnavailable

    try:
        status, error, body = self.wire.stream(
            f"/containers/{container_id}/archive", query={"path": path}, timeout=120.0
        )
    except (WireUnavailable, WireTimeout) as err:
        raise EngineError(f"docker-api: copying {path} out: {redact(str(err))}") from None
    if status == 404:
        return iter(())  # nothing at the path: nothing to copy
    if status >= 400:
        from rocmenv.engine.wire import _message

        raise EngineError(f"docker-api: copying {path} out failed: {redact(_message(error))}")
    return _guarded(body, f"docker-api: copying {path} out")


def _guarded(chunks: Iterator[bytes], what: str) -> Iterator[bytes]:
    from rocmenv.engine.wire import WireTimeout, WireUnavailable

    try:
        yield from chunks
    except (WireUnavailable, WireTimeout) as err:
        raise EngineError(f"{what}: {redact(str(err))}") from None
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


# -- the CLI --------------------------------------------------------------------------------


def cli_create_volume(self: CliEngine, name: str, labels: Mapping[str, str]) -> str:
    flags = [f"--label={k}={v}" for k, v in sorted(labels.items())]
    try:
        self._cli("volume", "create", "--driver=local", *flags, name)
        doc = json.loads(self._cli("volume", "inspect", name))
    except CliError as err:
        raise self._fail(f"creating volume {name}", err) from None
    except ValueError:
        raise EngineProtocolError(f"{self.kind}: volume inspect {name}: not JSON") from None
    return _mountpoint(doc[0] if isinstance(doc, list) and doc else doc, name, self.kind)


def cli_remove_volume(self: CliEngine, name: str) -> None:
    try:
        self._cli("volume", "rm", "--force", name)
    except CliError as err:
        if any(g in err.stderr.lower() for g in _GONE):
            return
        raise self._fail(f"removing volume {name}", err) from None


def cli_list_volumes(self: CliEngine, *, labels: Mapping[str, str | None]) -> list[VolumeInfo]:
    filters = [f"--filter=label={k if v is None else f'{k}={v}'}" for k, v in labels.items()]
    try:
        names = self._cli("volume", "ls", "--quiet", *filters).split()
    except CliError as err:
        raise self._fail("listing volumes", err) from None
    docs: list[Any] = []
    for name in names:  # one by one: one may go away meanwhile
        try:
            docs += json.loads(self._cli("volume", "inspect", name))
        except CliError as err:
            if not any(g in err.stderr.lower() for g in _GONE):
                raise self._fail("listing volumes", err) from None
        except ValueError:
            raise EngineProtocolError(f"{self.kind}: volume inspect: not JSON") from None
    return [_volume(d, self.kind) for d in docs]


def cli_export(self: CliEngine, container_id: str, path: str) -> Iterator[bytes]:
    """``docker|podman cp ID:PATH -``: the tar stream on the CLI's stdout."""
    import subprocess

    argv = [*self._cmd, "cp", f"{container_id}:{path}", "-"]
    try:
        proc = subprocess.Popen(
            argv, env=self._env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
    except OSError as err:
        raise EngineError(f"{self.kind}: cannot run {argv[0]}: {err}") from None
    return _cli_chunks(proc, self.kind, path)


def _cli_chunks(proc: subprocess.Popen[bytes], kind: str, path: str) -> Iterator[bytes]:
    assert proc.stdout is not None and proc.stderr is not None
    finished = False
    try:
        while chunk := proc.stdout.read1(1 << 16):  # type: ignore[attr-defined]
            yield chunk
        finished = True
    finally:
        if not finished:  # closed early (the size cap): the CLI need not finish
            proc.kill()
        code = proc.wait()
        err = proc.stderr.read().decode(errors="replace").strip()
        proc.stdout.close()
        proc.stderr.close()
    if code != 0:
        low = err.lower()
        if "no such file" in low or "could not find the file" in low or "not exist" in low:
            return  # nothing at the path: nothing to copy
        raise EngineError(f"{kind}: copying {path} out failed: {redact(err)}")


# -- shared ---------------------------------------------------------------------------------


def _mountpoint(doc: Any, name: str, kind: str) -> str:
    found = doc.get("Mountpoint") if isinstance(doc, dict) else None
    if not isinstance(found, str) or not found.startswith("/") or not _text_ok(found):
        raise EngineProtocolError(f"{kind}: volume {name}: the engine gave no data directory")
    return found


def _volume(doc: Any, kind: str) -> VolumeInfo:
    if not isinstance(doc, dict) or not isinstance(doc.get("Name"), str):
        raise EngineProtocolError(f"{kind}: listing volumes: an entry is not a volume")
    labels = doc.get("Labels") or {}
    return VolumeInfo(
        name=doc["Name"],
        labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())),
    )
