"""A call named by its module path, made where it is called: the supervising process hands work
to its children without importing the code (and torch) itself."""
from __future__ import annotations

import importlib
from typing import Any


class Deferred:
    """`Deferred("pkg.module:name", *args, **kwargs)(*more)` imports `pkg.module` and calls
    `name(*args, *more, **kwargs)`. Picklable when its arguments are."""

    def __init__(self, target: str, *args: Any, **kwargs: Any) -> None:
        module, sep, name = target.partition(":")
        if not (module and sep and name):
            raise ValueError(f"a deferred target is 'module:name', got {target!r}")
        self.target, self.args, self.kwargs = target, args, kwargs

    def resolve(self) -> Any:
        module, _, name = self.target.partition(":")
        return getattr(importlib.import_module(module), name)

    def __call__(self, *more: Any) -> Any:
        return self.resolve()(*self.args, *more, **self.kwargs)

    def __repr__(self) -> str:
        return f"Deferred({self.target!r})"
