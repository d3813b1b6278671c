"""Named registries: every paper's change is a function registered under a name.

The training loop looks units up by name (``ADVANTAGES.get(cfg.estimator)``) and never
branches on a paper. An unknown name raises ``ValueError`` listing the valid choices,
with a did-you-mean suggestion.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from workbench.errors import suggest_and_list

T = TypeVar("T")


class Registry(Generic[T]):
    """A mapping from names to units (functions or classes). Open to additions (users register
    their own import adapters, docs/import.md) unless :meth:`freeze` closes it."""

    def __init__(self, kind: str) -> None:
        self.kind = kind  # e.g. "advantage estimator": used in error messages
        self._items: dict[str, T] = {}
        self._frozen = False

    def register(self, *names: str) -> Callable[[T], T]:
        """Decorator: ``@ADVANTAGES.register("grpo")``; several names make aliases."""

        def add(obj: T) -> T:
            if self._frozen:
                raise RuntimeError(f"{self.kind} registry is frozen; cannot add {names}")
            for name in names:
                if name in self._items and self._items[name] is not obj:
                    raise ValueError(f"{self.kind} {name!r} is already registered")
                self._items[name] = obj
            return obj

        return add

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise ValueError(self.unknown_message(name)) from None

    def unknown_message(self, name: str) -> str:
        return f"unknown {self.kind} {name!r}{suggest_and_list(name, sorted(self._items))}"

    def freeze(self) -> None:
        """Refuse further additions (``HEALTH_RULES`` is frozen once its module has registered them)."""
        self._frozen = True

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def __len__(self) -> int:
        return len(self._items)
