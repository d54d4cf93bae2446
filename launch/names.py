"""The checkout's top-level packages are imported from the checkout: another installed package of
the same name (PyPI has an `envs`, for one) would otherwise be imported in its place, silently."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("a2c", "clips", "envs", "launch", "pref_interface", "reward_predictor", "runtime")


def shadowed_packages() -> list[str]:
    """Those of our package names that the import system finds outside this checkout, as
    'name (path)'."""
    out = []
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        origin = Path(spec.origin).resolve() if spec is not None and spec.origin else None
        if origin is None or ROOT not in origin.parents:
            out.append(f"{name} ({origin or 'not found'})")
    return out


def check_names() -> None:
    """ImportError, in one line, if another package takes one of our names."""
    shadowed = shadowed_packages()
    if shadowed:
        raise ImportError(f"these packages are not this checkout's ({ROOT}): "
                          f"{', '.join(shadowed)}; uninstall them, or use the project's own "
                          "venv (`pipenv run`)")
