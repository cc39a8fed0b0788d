"""``rocmenv bootstrap``, one module per step: :mod:`~rocmenv.bootstrap.steps` (the order,
exports, report), :mod:`~rocmenv.bootstrap.gpuwait`, :mod:`~rocmenv.bootstrap.procs`,
:mod:`~rocmenv.bootstrap.refs` + :mod:`~rocmenv.bootstrap.overrides`,
:mod:`~rocmenv.bootstrap.envreport`; commands run through :mod:`~rocmenv.bootstrap.commands`.
"""
