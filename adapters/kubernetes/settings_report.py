"""Refused module settings, told on the ModuleConfig itself.

An edit of `ModuleConfig ai-inference` (or of `global`) that the platform's schema
admits but the controller's own rules refuse — a probe timeout longer than its interval,
which openapi cannot express — keeps the previous settings in force (settings.py). The
administrator who made it looks at the object, not at the controller's log: it gets one
Warning Event `SettingsRefused` naming the offending fields, once per distinct refusal
of that object, and a Normal `SettingsAccepted` once an edit of it is taken again. The
metric `ai_inference_settings_refused` is 1 per refused ModuleConfig, for alerts.

The verdicts are noted where the settings are reloaded (a watch handler); the Events are
written by the class worker (`Controller._class_pass`), under the leader's fence like
every other write, so a slow API server never holds up the ModuleConfig watch.
"""

from __future__ import annotations

import logging
import threading

from adapters import metrics
from adapters.kubernetes import errors
from adapters.kubernetes.world import ClusterCache
from adapters.kubernetes.writing import Writer
from fsm.status import clipped

__all__ = ["KEY_PREFIX", "SettingsReport"]

log = logging.getLogger(__name__)

# Work-queue keys of ModuleConfigs, beside class names (which never hold a "/").
KEY_PREFIX = "ModuleConfig/"
_API_VERSION = "deckhouse.io/v1alpha1"


class SettingsReport:
    """What the controller last concluded of each ModuleConfig it reads, and what it has
    told on the object."""

    def __init__(self, world: ClusterCache, writer: Writer) -> None:
        self._world = world
        self._writer = writer
        self._lock = threading.Lock()
        self._refused: dict[str, str] = {}  # by ModuleConfig name: why its settings are not taken
        # By name: (uid, the refusal told, or None: "accepted" told) of the last Event.
        self._told: dict[str, tuple[str, str | None]] = {}

    def verdict(self, name: str, problem: str | None) -> None:
        """Note whether ModuleConfig `name`'s settings were taken (`problem` None) or
        refused; `tell` says so on the object."""
        with self._lock:
            if problem is None:
                self._refused.pop(name, None)
            else:
                self._refused[name] = problem
        metrics.SETTINGS_REFUSED.labels(module_config=name).set(0 if problem is None else 1)

    def tell(self, name: str) -> None:
        """Write the Event the last verdict on `name` calls for, unless it was told for
        this very object (a ModuleConfig made anew is told anew)."""
        obj = self._world.module_configs.get_by_name(None, name, copy_=False)
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
        involved = {"apiVersion": _API_VERSION, "kind": "ModuleConfig", **obj}
        try:
            if problem is None:
                self._writer.event(
                    involved, "SettingsAccepted", "the settings of this ModuleConfig are in force"
                )
            else:
                message = f"settings refused, the previous ones stay in force: {problem}"
                self._writer.event(
                    involved, "SettingsRefused", clipped(message), event_type="Warning"
                )
        except errors.APIError as exc:
            log.warning("Event about ModuleConfig %s not written: %s", name, exc)
            return
        with self._lock:
            self._told[name] = (uid, problem)
