"""Image drift: what moved behind the pinned tags of a lockfile, and what changed inside.

:mod:`~rocmenv.drift.check` asks the registry (moved, newer, could not check),
:mod:`~rocmenv.drift.inspect` probes and compares the images (``--inspect``),
:mod:`~rocmenv.drift.report` renders the results (text, markdown, JSON).
"""
