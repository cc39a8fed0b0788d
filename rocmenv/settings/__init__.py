"""Every setting, resolved once (:mod:`~rocmenv.settings.resolve`): the project file, the site
and user files, profiles, registry and Slurm settings, the untrusted policy; where each value
came from (:mod:`~rocmenv.settings.explain`) and the files' JSON Schema.
"""

from __future__ import annotations

from rocmenv.lazy import surface

__all__, __getattr__ = surface(
    __name__,
    {
        "Flags": "resolve",
        "Settings": "resolve",
        "settings_for": "resolve",
        "CASCADE": "resolve",
        "Origin": "resolve",
        "SiteFile": "site",
        "load_site_files": "site",
        "effective": "explain",
        "Project": "project",
        "HostSettings": "host",
        "load_project": "project",
        "Profile": "profiles",
        "ImageSpec": "profiles",
        "Mount": "profiles",
        "Ulimit": "profiles",
        "BUILTIN_PROFILES": "profiles",
        "RegistrySettings": "registry",
        "RESPONSE_LIMITS": "declared",
        "SlurmSettings": "slurm",
        "Policy": "policy",
        "DEFAULT_POLICY": "policy",
        "load_policy": "policy",
        "untrusted_env": "policy",
        "EngineName": "choices",
        "EngineKind": "choices",
        "ENGINE_NAMES": "choices",
        "ENGINE_KINDS": "choices",
        "PullPolicy": "choices",
        "PULL_POLICIES": "choices",
    },
)
