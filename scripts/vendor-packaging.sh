#!/usr/bin/env bash
# Vendor `packaging` into the in-container launcher under a private name.
#
# The launcher (rocmenv/launcher/) runs inside foreign containers on Python 3.8+, must not
# depend on the container's own `packaging`, and must answer version questions exactly as
# `packaging.specifiers` does. packaging 26.2 is the newest release that supports Python 3.8
# (26.3 requires 3.9, 26.4 3.10; PyPI's Requires-Python), so we vendor it unmodified: only the
# modules that `packaging.specifiers` needs, plus the licence files. The host answers every
# PEP 440 question with this same copy (rocmenv does not depend on `packaging`), so the host
# and the container decide a shim alike by construction. packaging uses relative imports only, so it works under the private name
# `_rocmenv_launcher._vendor.packaging` inside a launcher bundle and never enters
# sys.modules as `packaging`.
#
# Usage: scripts/vendor-packaging.sh            (re-creates rocmenv/launcher/_vendor/packaging)
# Needs: network access to PyPI (pip), python3 >= 3.8. The result is committed.
set -euo pipefail

VERSION="26.2"
# sha256 of packaging-26.2-py3-none-any.whl as published on PyPI (its simple index)
WHEEL_SHA256="5fc45236b9446107ff2415ce77c807cee2862cb6fac22b8a73826d0693b0980e"
MODULES=(__init__.py version.py specifiers.py utils.py tags.py _manylinux.py _musllinux.py
         _elffile.py)
LICENSES=(LICENSE LICENSE.APACHE LICENSE.BSD)

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/rocmenv/launcher/_vendor/packaging"
pip=("${PIP:-python3 -m pip}")
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

${pip[*]} download --quiet --no-deps --only-binary :all: --dest "$work" "packaging==$VERSION"
wheel="$work/packaging-$VERSION-py3-none-any.whl"
got="$(sha256sum "$wheel" | cut -d' ' -f1)"
if [[ "$got" != "$WHEEL_SHA256" ]]; then
  echo "vendor-packaging: $wheel has sha256 $got, expected $WHEEL_SHA256" >&2
  exit 1
fi
python3 - "$wheel" "$work/x" <<'PY'
import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])
PY

# packaging must only import itself relatively, or the private name would not hold; and the
# launcher runs on Python 3.8+, so the vendored modules must parse as 3.8.
python3 - "$work/x/packaging" "${MODULES[@]}" <<'PY'
import ast, sys
bad = []
for name in sys.argv[2:]:
    path = sys.argv[1] + "/" + name
    try:
        tree = ast.parse(open(path, encoding="utf-8").read(), feature_version=(3, 8))
    except SyntaxError as err:
        sys.exit(f"vendor-packaging: {path}:{err.lineno} is not Python 3.8 syntax: {err.msg}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bad += [f"{path}:{node.lineno}" for a in node.names if a.name.split(".")[0] == "packaging"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] == "packaging":
            bad.append(f"{path}:{node.lineno}")
if bad:
    sys.exit("vendor-packaging: absolute 'packaging' import (the private name would break): "
             + ", ".join(bad))
PY

rm -rf "$dest"
mkdir -p "$dest"
for m in "${MODULES[@]}"; do cp "$work/x/packaging/$m" "$dest/$m"; done
for l in "${LICENSES[@]}"; do cp "$work/x/packaging-$VERSION.dist-info/licenses/$l" "$dest/$l"; done
cat > "$root/rocmenv/launcher/_vendor/__init__.py" <<'PY'
"""Third-party code vendored for the in-container launcher (see scripts/vendor-packaging.sh)."""
PY
cat > "$dest/VENDORED.txt" <<TXT
packaging $VERSION, unmodified, from packaging-$VERSION-py3-none-any.whl (sha256 $WHEEL_SHA256).
Modules: ${MODULES[*]}
Licensed under Apache-2.0 or BSD-2-Clause (see LICENSE, LICENSE.APACHE, LICENSE.BSD).
Regenerate with scripts/vendor-packaging.sh; do not edit by hand.
TXT
echo "vendor-packaging: packaging $VERSION -> ${dest#"$root"/}"
