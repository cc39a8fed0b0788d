#!/usr/bin/env bash
# Vendor `packaging` into the in-container launcher under a private name.
#
# The launcher (rocmenv/launcher/) runs inside foreign containers on Python 3.8+, must not
# depend on the container's own `packaging`, and must answer version questions exactly as
# `packaging.specifiers` does. packaging 24.2 is the last release that supports Python 3.8,
# so we vendor it unmodified: only the modules that `packaging.specifiers` needs, plus the
# licence files. packaging uses relative imports only, so it works under the private name
# `_rocmenv_launcher._vendor.packaging` inside a launcher bundle and never enters
# sys.modules as `packaging`.
#
# Usage: scripts/vendor-packaging.sh            (re-creates rocmenv/launcher/_vendor/packaging)
# Needs: network access to PyPI (pip), python3 >= 3.8. The result is committed.
set -euo pipefail

VERSION="24.2"
# sha256 of packaging-24.2-py3-none-any.whl as published on PyPI
WHEEL_SHA256="09abb1bccd265c01f4a3aa3f7a7db064b36514d2cba19a2f694fe6150451a759"
MODULES=(__init__.py _structures.py version.py specifiers.py utils.py tags.py
         _manylinux.py _musllinux.py _elffile.py)
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

# packaging must only import itself relatively, or the private name would not hold.
python3 - "$work/x/packaging" "${MODULES[@]}" <<'PY'
import ast, sys
bad = []
for name in sys.argv[2:]:
    path = sys.argv[1] + "/" + name
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
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
for l in "${LICENSES[@]}"; do cp "$work/x/packaging-$VERSION.dist-info/$l" "$dest/$l"; done
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
