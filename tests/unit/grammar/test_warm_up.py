"""``warm_up`` pays classifying's first costs ahead: afterwards parse_tag and sort_key compile
and import nothing."""

from __future__ import annotations

import subprocess
import sys


def test_after_warm_up_classifying_a_tag_list_compiles_and_imports_nothing() -> None:
    probe = (
        "import sys, re\n"
        "from rocmenv.grammar import tags\n"
        "assert 'rocmenv.launcher._vendor.packaging.version' not in sys.modules\n"
        "tags.warm_up()\n"
        "before = set(sys.modules)\n"
        "re.purge()\n"
        "compiled = []\n"
        "real = re.compile\n"
        "re.compile = lambda *a, **k: compiled.append(a[0]) or real(*a, **k)\n"
        "infos = [tags.parse_tag(t) for t in ('v0.5.8-rocm700-mi30x-20260215', 'v0.5.8-rocm700',"
        " 'miles-rocm720-mi35x', '20260101')]\n"
        "sorted(infos, key=tags.sort_key)\n"
        "assert not compiled, compiled\n"
        "assert set(sys.modules) == before, set(sys.modules) - before\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
