"""The Python half of scripts/setup.sh: build and push the image family, the tag set, the
auth registry's seed tags, and print the summary.

    python scripts/lib/testenv_setup.py shell-env        # constants as shell assignments
    python scripts/lib/testenv_setup.py family           # build (if inputs changed) + push
    python scripts/lib/testenv_setup.py tagset           # ~3000 tags on rocm/sgl-dev
    python scripts/lib/testenv_setup.py auth-seed        # a few tags on the auth registry
    python scripts/lib/testenv_setup.py summary

Every step is idempotent and cheap when nothing changed: an image is rebuilt only when the
hash of its inputs (family entry, stand-in sources, recipes, this file, the base image ID)
differs from its ``org.rocmenv.test.recipe-hash`` label, and pushed only when the
registry's manifest does not name the local image's config.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.support import tagset as tagset_mod  # noqa: E402
from tests.support import testenv as te  # noqa: E402

HASH_LABEL = "org.rocmenv.test.recipe-hash"
STANDINS = te.IMAGES_DIR / "standins"
RECIPES = te.IMAGES_DIR / "recipes"


def log(msg: str) -> None:
    print(f"  {msg}", flush=True)


def run(cmd: Sequence[str], *, env: dict[str, str] | None = None, quiet: bool = True) -> str:
    proc = subprocess.run(
        list(cmd),
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout)
        raise SystemExit(f"setup: `{shlex.join(cmd)}` failed with exit code {proc.returncode}")
    if not quiet:
        sys.stdout.write(proc.stdout)
    return proc.stdout


def docker_inspect(ref: str) -> dict[str, Any] | None:
    proc = subprocess.run(
        ["docker", "image", "inspect", ref], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        return None
    data = json.loads(proc.stdout)
    return data[0] if data else None


# --------------------------------------------------------------------------- build context


def _record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _normalise(dist: str) -> str:
    return dist.replace("-", "_").replace(".", "_").lower()


def _write(path: Path, text: str | bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode() if isinstance(text, str) else text
    path.write_bytes(data)
    path.chmod(mode)


def _copy_tree(src: Path, dst: Path) -> None:
    for item in sorted(src.rglob("*")):
        if "__pycache__" in item.parts or item.suffix == ".pyc":
            continue
        target = dst / item.relative_to(src)
        if item.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            _write(target, item.read_bytes(), 0o755 if os.access(item, os.X_OK) else 0o644)


def _install_dist(
    site: Path, dist: str, version: str, packages: Sequence[str], summary: str
) -> None:
    """Write ``<dist>-<version>.dist-info`` for packages already copied into ``site``."""
    info = site / f"{_normalise(dist)}-{version}.dist-info"
    files: list[Path] = []
    for pkg in packages:
        files.extend(sorted(p for p in (site / pkg).rglob("*") if p.is_file()))
    _write(
        info / "METADATA",
        f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\nSummary: {summary}\n",
    )
    _write(info / "INSTALLER", "rocmenv-testenv\n")
    _write(info / "top_level.txt", "".join(f"{p}\n" for p in packages))
    files.extend([info / "METADATA", info / "INSTALLER", info / "top_level.txt"])
    lines = []
    for f in files:
        data = f.read_bytes()
        lines.append(f"{f.relative_to(site).as_posix()},{_record_hash(data)},{len(data)}")
    lines.append(f"{(info / 'RECORD').relative_to(site).as_posix()},,")
    _write(info / "RECORD", "\n".join(lines) + "\n")


def build_context(image: te.FamilyImage, ctx: Path) -> None:
    """The Docker build context of one family image: ``rootfs/`` plus a Dockerfile."""
    if ctx.exists():
        shutil.rmtree(ctx)
    rootfs = ctx / "rootfs"
    site = rootfs / image.site_packages.lstrip("/")
    site.mkdir(parents=True)

    # torch
    _copy_tree(STANDINS / "torch", site)
    _write(
        site / "torch" / "version.py",
        f"__version__ = {image.torch_version!r}\nhip = {image.rocm_version!r}\ncuda = None\n",
    )
    _install_dist(site, "torch", image.torch_version, ["torch"], "rocmenv test stand-in for torch")

    # aiter: common files, then the layout's files on top
    _copy_tree(STANDINS / "aiter" / "common", site)
    _copy_tree(STANDINS / "aiter" / image.layout, site)
    _write(site / "aiter" / "_version.py", f"__version__ = {image.aiter_version!r}\n")
    _write(
        site / "aiter" / "_standin_info.py",
        f"LAYOUT = {image.layout!r}\nDIST = {image.aiter_dist!r}\n",
    )
    _install_dist(
        site,
        image.aiter_dist,
        image.aiter_version,
        ["aiter"],
        f"rocmenv test stand-in for aiter ({image.layout} layout)",
    )

    # sglang
    if image.sglang_version:
        _copy_tree(STANDINS / "sglang", site)
        _write(site / "sglang" / "version.py", f"__version__ = {image.sglang_version!r}\n")
        _install_dist(
            site, "sglang", image.sglang_version, ["sglang"], "rocmenv test stand-in for sglang"
        )

    # dist-info only distributions
    for dist, version in sorted(image.extra_dists.items()):
        _install_dist(site, dist, version, [], f"rocmenv test stand-in for {dist} (no code)")

    # ROCm bits
    _write(rootfs / "opt/rocm/.info/version", f"{image.rocm_build}\n")
    smi = (RECIPES / "rocm-smi.in").read_text()
    for key, value in {
        "@ROCM_VERSION@": image.rocm_version,
        "@ROCM_BUILD@": image.rocm_build,
        "@GFX@": image.gpu.gfx,
        "@PRODUCT@": image.gpu.product,
        "@DEVICE_ID@": image.gpu.device_id,
        "@PWRCAP@": image.gpu.power_cap,
    }.items():
        smi = smi.replace(key, value)
    _write(rootfs / "usr/local/bin/rocm-smi", smi, 0o755)
    # The sgl-dev images answer to `python` as well as `python3` (the README's demo uses it).
    (rootfs / "usr/local/bin/python").symlink_to("/usr/bin/python3")

    # extra files
    for dest, src in sorted(image.files.items()):
        _copy_tree(te.IMAGES_DIR / src, rootfs / dest.lstrip("/"))

    # every directory 0755 regardless of umask
    for d in [rootfs, *(p for p in rootfs.rglob("*") if p.is_dir())]:
        d.chmod(0o755)

    lines = [f"FROM {image.base.image}", "COPY rootfs/ /"]
    env = dict(image.env)
    env.setdefault("ROCM_PATH", "/opt/rocm")
    lines += [f"ENV {k}={json.dumps(v)}" for k, v in sorted(env.items())]
    labels = {
        "org.opencontainers.image.title": image.image,
        "org.opencontainers.image.version": image.tag,
        "org.opencontainers.image.description": image.purpose,
        "org.rocmenv.test.entry": image.name,
        "org.rocmenv.test.aiter": f"{image.aiter_dist}=={image.aiter_version} ({image.layout})",
        "com.amd.rocm.version": image.rocm_version,
    }
    lines += [f"LABEL {k}={json.dumps(v)}" for k, v in sorted(labels.items())]
    (ctx / "Dockerfile").write_text("\n".join(lines) + "\n")


def context_hash(ctx: Path, base_id: str) -> str:
    h = hashlib.sha256()
    h.update(base_id.encode())
    h.update(Path(__file__).read_bytes())
    for p in sorted(ctx.rglob("*")):
        rel = p.relative_to(ctx).as_posix()
        if p.is_symlink():  # hash the link, never what it points at on this host
            h.update(f"{rel}\0->{os.readlink(p)}\0".encode())
            continue
        h.update(f"{rel}\0{p.stat().st_mode & 0o777:o}\0".encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


# --------------------------------------------------------------------------- family


def _config_digest_in_registry(client: te.RegistryClient, repo: str, tag: str) -> str | None:
    try:
        manifest = client.get_manifest(repo, tag)
    except te.RegistryHTTPError as exc:
        if exc.status == 404:
            return None
        raise
    doc = manifest.json()
    if manifest.is_index:
        return None
    return str(doc["config"]["digest"])


def ensure_pushed(client: te.RegistryClient, local_ref: str, repo: str, tags: Sequence[str]) -> int:
    info = docker_inspect(local_ref)
    if info is None:
        raise SystemExit(f"setup: local image {local_ref} is missing")
    image_id = str(info["Id"])
    pushed = 0
    for tag in tags:
        if _config_digest_in_registry(client, repo, tag) == image_id:
            continue
        ref = f"{client.host}/{repo}:{tag}"
        if ref != local_ref:
            run(["docker", "tag", local_ref, ref])
        run(["docker", "push", ref])
        pushed += 1
    return pushed


def cmd_family(args: argparse.Namespace) -> int:
    family = te.load_family()
    state = te.state_dir()
    build_root = state / "build"
    build_root.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, object]] = {}
    with te.RegistryClient(host=family.registry) as client:
        # the bases, so tests can pull or build on them from the registry too
        for base in family.bases.values():
            repo, _, tag = base.image.partition(":")
            if docker_inspect(base.image) is None:
                raise SystemExit(
                    f"setup: base image {base.image} is missing (run scripts/setup.sh)"
                )
            run(["docker", "tag", base.image, f"{family.registry}/{base.image}"])
            if ensure_pushed(client, f"{family.registry}/{base.image}", repo, [tag]):
                log(f"pushed base {family.registry}/{base.image}")
        for image in family:
            if args.only and image.name not in args.only:
                continue
            t0 = time.monotonic()
            base_info = docker_inspect(image.base.image)
            assert base_info is not None
            ctx = build_root / image.name
            build_context(image, ctx)
            want = context_hash(ctx, str(base_info["Id"]))
            have = docker_inspect(image.ref)
            labels = ((have or {}).get("Config") or {}).get("Labels") or {}
            built = False
            if labels.get(HASH_LABEL) != want:
                cmd = ["docker", "build", "-q", "--label", f"{HASH_LABEL}={want}"]
                for ref in image.refs:
                    cmd += ["-t", ref]
                run([*cmd, str(ctx)], env={"DOCKER_BUILDKIT": "0"})
                built = True
            else:
                for ref in image.refs[1:]:
                    run(["docker", "tag", image.ref, ref])
            pushed = ensure_pushed(client, image.ref, image.repository, image.tags)
            info = docker_inspect(image.ref)
            assert info is not None
            digest = client.head_manifest(image.repository, image.tag)
            results[image.name] = {
                "ref": image.ref,
                "refs": list(image.refs),
                "digest": digest,
                "image_id": info["Id"],
                "size": info["Size"],
                "built": built,
                "pushed": pushed,
            }
            what = ("built" if built else "up to date") + (
                f", pushed {pushed} tag(s)" if pushed else ""
            )
            log(f"{image.ref:62} {what} ({time.monotonic() - t0:.1f} s)")
    (state / "family.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    return 0


# --------------------------------------------------------------------------- tag set


def _registry_storage(name: str) -> Path:
    return te.state_dir() / f"registry-{name}" / "storage"


def cmd_tagset(args: argparse.Namespace) -> int:
    family = te.load_family()
    ts = tagset_mod.generate_tagset()
    skip = frozenset(t for i in family if i.repository == te.SGL_DEV_REPO for t in i.tags)
    missing_family = skip - set(ts.tags)
    if missing_family:
        raise SystemExit(f"setup: family tags not in the tag set: {sorted(missing_family)}")
    stamp = te.state_dir() / "registry-open" / "tagset.stamp"
    plan = te.tagset_plan_hash(ts.entries)
    force = not stamp.exists() or stamp.read_text().strip() != plan
    with te.RegistryClient(host=te.OPEN_REGISTRY) as client:
        report = te.push_tagset(client, te.SGL_DEV_REPO, ts.entries, skip=skip, force=force)
        extra = sorted(set(client.list_tags(te.SGL_DEV_REPO)) - set(ts.tags))
    # Tags nobody wants any more (an older plan, a test that wrote here): Distribution 2.x
    # cannot delete a tag by name over the API, so remove the tag link from storage.
    tags_dir = (
        _registry_storage("open")
        / f"docker/registry/v2/repositories/{te.SGL_DEV_REPO}/_manifests/tags"
    )
    for tag in extra:
        shutil.rmtree(tags_dir / tag, ignore_errors=True)
    stamp.write_text(plan + "\n")
    log(
        f"{te.OPEN_REGISTRY}/{te.SGL_DEV_REPO}: {report.wanted + report.skipped} tags "
        f"({report.pushed} pushed, {report.already} already there, {report.skipped} family images, "
        f"{len(extra)} stray removed) in {report.seconds:.1f} s, {report.requests} requests"
    )
    return 0


# --------------------------------------------------------------------------- auth registry


def cmd_auth_seed(args: argparse.Namespace) -> int:
    family = te.load_family()
    demo = family["demo"]
    with (
        te.RegistryClient(host=te.OPEN_REGISTRY) as src,
        te.RegistryClient(
            host=te.AUTH_REGISTRY, username=te.TEST_USERNAME, password=te.TEST_PASSWORD
        ) as dst,
    ):
        want = src.head_manifest(demo.repository, demo.tag)
        done = 0
        for repo, tags in (
            (te.SGL_DEV_REPO, te.AUTH_PRIVATE_TAGS),
            (te.PUBLIC_REPO, te.AUTH_PUBLIC_TAGS),
        ):
            for tag in tags:
                if dst.head_manifest(repo, tag) == want:
                    continue
                te.copy_image(src, demo.repository, demo.tag, dst, repo, tag)
                done += 1
        log(
            f"{te.AUTH_REGISTRY}: {te.SGL_DEV_REPO}:{{{','.join(te.AUTH_PRIVATE_TAGS)}}} and "
            f"{te.PUBLIC_REPO}:{{{','.join(te.AUTH_PUBLIC_TAGS)}}} -> demo image "
            f"({done} pushed, {dst.requests} requests)"
        )
    return 0


# --------------------------------------------------------------------------- prune


def cmd_prune(args: argparse.Namespace) -> int:
    """Remove scratch repositories (``unique_repo`` names) older than the limit."""
    import re

    pattern = re.compile(r"^[a-z0-9-]+-[0-9a-f]{8}$")
    cutoff = time.time() - args.older_than_hours * 3600
    removed = 0
    for name in ("open", "auth"):
        parent = _registry_storage(name) / "docker/registry/v2/repositories/rocmenv-test"
        if not parent.is_dir():
            continue
        for repo in parent.iterdir():
            if pattern.match(repo.name) and repo.stat().st_mtime < cutoff:
                shutil.rmtree(repo, ignore_errors=True)
                removed += 1
    log(f"removed {removed} scratch repositories older than {args.older_than_hours} h")
    return 0


# --------------------------------------------------------------------------- summary / env


def _mb(n: float) -> str:
    return f"{n / 1e6:.0f} MB"


def cmd_summary(args: argparse.Namespace) -> int:
    family = te.load_family()
    state = te.state_dir()
    results = (
        json.loads((state / "family.json").read_text()) if (state / "family.json").exists() else {}
    )
    print(f"  state dir       {state}")
    print(f"  open registry   http://{te.OPEN_REGISTRY}  (no auth)")
    print(
        f"  auth registry   http://{te.AUTH_REGISTRY}  (token realm {te.TOKEN_REALM}, "
        f"user {te.TEST_USERNAME})"
    )
    hub = te.HubTLS()
    print(
        f"  TLS hub         https://{hub.registry} (certs.d), https://{hub.registry_cafile} "
        f"(SSL_CERT_FILE={hub.ca_file}); proxy http://{hub.proxy}: {hub.problem() or 'up'}"
    )
    for base in family.bases.values():
        info = docker_inspect(base.image)
        size = _mb(float(info["Size"])) if info else "MISSING"
        print(f"  base            {base.image:28} {base.suite:9} python {base.python:5} {size}")
    with te.RegistryClient(host=te.OPEN_REGISTRY) as client:
        for image in family:
            r = results.get(image.name, {})
            digest = str(r.get("digest") or "?")
            size = _mb(float(r["size"])) if "size" in r else "?"
            extra = f" (+{len(image.also_tags)} tag)" if image.also_tags else ""
            print(
                f"  image  {image.name:21} {image.repository}:{image.tag}{extra}  "
                f"py{image.python} {image.aiter_dist}=={image.aiter_version}/{image.layout}  "
                f"{digest[:19]}  {size}"
            )
        n = len(client.list_tags(te.SGL_DEV_REPO))
    print(f"  tag set         {n} tags on {te.OPEN_REGISTRY}/{te.SGL_DEV_REPO}")
    return 0


def cmd_shell_env(args: argparse.Namespace) -> int:
    values = {
        "OPEN_REGISTRY": te.OPEN_REGISTRY,
        "AUTH_REGISTRY": te.AUTH_REGISTRY,
        "TOKEN_LISTEN": te.TOKEN_SERVER_LISTEN,
        "TOKEN_REALM": te.TOKEN_REALM,
        "TOKEN_SERVICE": te.TOKEN_SERVICE,
        "TOKEN_ISSUER": te.TOKEN_ISSUER,
        "TEST_USERNAME": te.TEST_USERNAME,
    }
    family = te.load_family()
    bases = " ".join(f"{b.key}:{b.suite}:{b.image}" for b in family.bases.values())
    values["BASES"] = bases
    values["FAMILY_REFS"] = " ".join(i.ref for i in family)
    for key, value in values.items():
        print(f"TE_{key}={shlex.quote(value)}")
    return 0


def cmd_users_file(args: argparse.Namespace) -> int:
    print(f"{te.TEST_USERNAME}:{te.TEST_PASSWORD}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="testenv_setup.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("family", help="build and push the image family")
    p.add_argument("--only", nargs="*", help="image names (default: all)")
    p.set_defaults(func=cmd_family)
    sub.add_parser("tagset", help="push the generated tag set").set_defaults(func=cmd_tagset)
    sub.add_parser("auth-seed", help="push a few tags to the auth registry").set_defaults(
        func=cmd_auth_seed
    )
    sub.add_parser("summary", help="print the environment").set_defaults(func=cmd_summary)
    p = sub.add_parser("prune", help="remove old scratch repositories (rocmenv-test/*-<hex>)")
    p.add_argument("--older-than-hours", type=float, default=24.0)
    p.set_defaults(func=cmd_prune)
    sub.add_parser("shell-env", help="constants for setup.sh").set_defaults(func=cmd_shell_env)
    sub.add_parser("users-file", help="USER:PASSWORD lines for the token server").set_defaults(
        func=cmd_users_file
    )
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
