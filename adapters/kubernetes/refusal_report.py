"""Objects the controller refuses, told on the objects themselves.

Some objects an administrator writes pass the API server's schema and are still refused
by the controller's own rules, which the schema cannot express (or can only in CEL, which
older servers ignore):

- an edit of `ModuleConfig ai-inference` (or of `global`) with a probe timeout longer
  than its interval: the previous settings stay in force (settings.py);
- a `LaunchRecipe` with vLLM tool calling and no parser: no order is ever given it, and
  an order already on it is moved to another recipe (fsm/placement/recipes.py).

The administrator who made it looks at the object, not at the controller's log: it gets
one Warning Event naming the offending fields, once per distinct refusal of that object,
and a Normal Event once an edit of it is taken again. A gauge per kind is 1 per refused
object, for alerts.

The verdicts are noted where the objects are read (a watch handler); the Events are
written by the class worker (`Controller._class_pass`), under the leader's fence like
every other write, so a slow API server never holds up a watch.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import Gauge

from adapters import metrics
from adapters.kubernetes import errors
from adapters.kubernetes.watching import Informer
from adapters.kubernetes.world import ClusterCache
from adapters.kubernetes.writing import Writer
from fsm.status import clipped

__all__ = ["RECIPES", "SETTINGS", "RefusalReport", "Subject"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Subject:
    """A kind of object the controller can refuse, and how it says so."""

    kind: str
    api_version: str
    informer: Callable[[ClusterCache], Informer]
    refused: str  # the Warning's reason
    accepted: str  # the Normal's reason
    refused_message: str  # before the problem
    accepted_message: str
    gauge: Gauge  # labelled by the object's name
    pass_kind: str  # the `kind` label of the class worker's passes that tell it

    @property
    def key_prefix(self) -> str:
        """Work-queue keys of these objects, beside class names (which never hold "/")."""
        return f"{self.kind}/"


SETTINGS = Subject(
    kind="ModuleConfig",
    api_version="deckhouse.io/v1alpha1",
    informer=lambda world: world.module_configs,
    refused="SettingsRefused",
    accepted="SettingsAccepted",
    refused_message="settings refused, the previous ones stay in force: ",
    accepted_message="the settings of this ModuleConfig are in force",
    gauge=metrics.SETTINGS_REFUSED,
    pass_kind="settings",
)
RECIPES = Subject(
    kind="LaunchRecipe",
    api_version="ai.deckhouse.io/v1alpha1",
    informer=lambda world: world.recipes,
    refused="RecipeRefused",
    accepted="RecipeAccepted",
    refused_message=(
        "recipe refused: no order is planned on it, and orders on it move to another "
        "recipe where one fits: "
    ),
    accepted_message="this launch recipe is usable",
    gauge=metrics.RECIPE_REFUSED,
    pass_kind="recipe",
)


class RefusalReport:
    """What the controller last concluded of each object of one kind it reports on, and
    what it has told on the object."""

    def __init__(self, subject: Subject, world: ClusterCache, writer: Writer) -> None:
        self.subject = subject
        self._world = world
        self._writer = writer
        self._lock = threading.Lock()
        self._refused: dict[str, str] = {}  # by object name: why it is refused
        # By name: (uid, the refusal told, or None: "accepted" told) of the last Event.
        self._told: dict[str, tuple[str, str | None]] = {}

    def verdict(self, name: str, problem: str | None) -> None:
        """Note whether object `name` was taken (`problem` None) or refused; `tell` says
        so on the object."""
        with self._lock:
            if problem is None:
                self._refused.pop(name, None)
            else:
                self._refused[name] = problem
        self.subject.gauge.labels(name).set(0 if problem is None else 1)

    def forget(self, name: str) -> None:
        """Object `name` is gone: nothing to tell, nothing to alert on."""
        with self._lock:
            self._refused.pop(name, None)
            self._told.pop(name, None)
        with contextlib.suppress(KeyError):  # never judged
            self.subject.gauge.remove(name)

    def tell(self, name: str) -> None:
        """Write the Event the last verdict on `name` calls for, unless it was told for
        this very object (an object made anew is told anew)."""
        subject = self.subject
        obj = subject.informer(self._world).get_by_name(None, name, copy_=False)
        if obj is None:
            return
        uid = str((obj.get("metadata") or {}).get("uid", ""))
        with self._lock:
            problem = self._refused.get(name)
            told = self._told.get(name)
        if told == (uid, problem):
            return
        if problem is None and (told is None or told[0] != uid or told[1] is None):
            return  # never refused (or not since it was told accepted): nothing to say
        involved = {"apiVersion": subject.api_version, "kind": subject.kind, **obj}
        try:
            if problem is None:
                self._writer.event(involved, subject.accepted, subject.accepted_message)
            else:
                message = clipped(subject.refused_message + problem)
                self._writer.event(involved, subject.refused, message, event_type="Warning")
        except errors.APIError as exc:
            log.warning("Event about %s %s not written: %s", subject.kind, name, exc)
            return
        with self._lock:
            self._told[name] = (uid, problem)
