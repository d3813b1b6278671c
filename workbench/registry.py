"""Named registries: every paper's change is a function registered under a name.

The training loop looks units up by name (``ADVANTAGES.get(cfg.estimator)``) and never
branches on a paper. An unknown name raises ``ValueError`` listing the valid choices,
with a did-you-mean suggestion.

A unit also says how to see it act (:class:`Activity`): the logged metric that is the fraction
of tokens, responses or groups it touched in a step, or why it has none (it acts on everything
it sees). ``workbench compare`` reads it to call a comparison whose knob barely acted "not
testable" (:mod:`workbench.compare.activity`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from workbench.errors import suggest_and_list

T = TypeVar("T")


@dataclass(frozen=True)
class Activity:
    """How much a registered unit acts in a run.

    ``metric``: a logged per-step fraction (in [0, 1]) of the ``unit``s (``"tokens"``,
    ``"responses"``, ``"groups"``) the unit touched: a clip bound's clipped tokens, a filter's
    dropped groups. ``None`` when there is none to log, with the ``reason`` (it acts on every
    token or response it sees, or nothing measures it): a comparison that changes such a unit is
    always tested. ``params``: knobs of the unit with a metric of their own (a loss's clip bounds).
    """

    metric: str | None = None
    unit: str = ""
    reason: str = ""
    params: Mapping[str, Activity] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if (self.metric is None) == (not self.reason):
            raise ValueError("an Activity has either a metric (with its unit) or the reason it has none")
        if self.metric is not None and self.unit not in ("tokens", "responses", "groups"):
            raise ValueError(f"Activity unit must be tokens, responses or groups, got {self.unit!r}")

    @classmethod
    def always(cls, reason: str, **params: Activity) -> Activity:
        """No activity metric: the unit acts on everything it sees (``reason`` says how)."""
        return cls(reason=reason, params=params)


class Registry(Generic[T]):
    """A mapping from names to units (functions or classes). Open to additions (users register
    their own import adapters, docs/import.md) unless :meth:`freeze` closes it.

    ``activity``: the :class:`Activity` of every unit of this kind that declares none itself
    (for kinds whose units all act on everything, e.g. advantage estimators).

    ``selected_by``: the dotted config key whose value names the unit(s) of this kind a run uses
    (``"algorithm.correction"``); ``settings``: the config keys that tune the selected unit and mean
    nothing without one (``"algorithm.correction_cap"``). ``compare`` gates a change of either on the
    unit's activity and ``plan``'s lint flags a setting of an unselected kind, both from these facts."""

    def __init__(
        self,
        kind: str,
        *,
        activity: Activity | None = None,
        selected_by: str | None = None,
        settings: tuple[str, ...] = (),
    ) -> None:
        if settings and selected_by is None:
            raise ValueError(f"{kind}: settings tune a selected unit, so the registry needs selected_by")
        self.kind = kind  # e.g. "advantage estimator": used in error messages
        self.selected_by = selected_by
        self.settings = settings
        self._items: dict[str, T] = {}
        self._activity: dict[str, Activity] = {}
        self._default_activity = activity
        self._frozen = False

    def register(self, *names: str, activity: Activity | None = None) -> Callable[[T], T]:
        """Decorator: ``@ADVANTAGES.register("grpo")``; several names make aliases. ``activity``:
        how to see this unit act (:class:`Activity`), when the registry's default does not say."""

        def add(obj: T) -> T:
            if self._frozen:
                raise RuntimeError(f"{self.kind} registry is frozen; cannot add {names}")
            for name in names:
                if name in self._items and self._items[name] is not obj:
                    raise ValueError(f"{self.kind} {name!r} is already registered")
                self._items[name] = obj
                if activity is not None:
                    self._activity[name] = activity
            return obj

        return add

    def activity(self, name: str) -> Activity | None:
        """The registered unit's :class:`Activity` (its own, else the registry's); ``None`` if it
        declared none. Raises ``ValueError`` for an unknown name."""
        self.get(name)
        return self._activity.get(name, self._default_activity)

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
