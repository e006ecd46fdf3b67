"""Placement: where an order's replicas can run, and who gives way by priority.

The second half of the pure core (the first is the order's state machine in `fsm/`).
From DRA objects as the API returns them it reads a capacity snapshot (`inventory`,
into `capacity`), selects devices with CEL (`cel`), sizes the model (`sizing`), picks a
launch recipe (`recipes`) and plans a place (`planner`); other orders' plans count as
demand (`demand`), and capacity moves between orders by priority (`arbitration`). No I/O, no
clock: the controller passes the world in and records the verdicts as events.

The façade below is what the rest of the project uses; the modules stay importable for
their tests and for details.
"""

from __future__ import annotations

from fsm.placement.arbitration import OrderView, Ruling, Take, Taking, rule, take
from fsm.placement.capacity import ORDER_UID_LABEL, Snapshot
from fsm.placement.demand import Demand, free_units, with_demand
from fsm.placement.inventory import parse_snapshot
from fsm.placement.planner import PlanRequest, plan, plan_devices, room_for
from fsm.placement.recipes import Recipe, parse_recipes

__all__ = [
    "ORDER_UID_LABEL",
    "Demand",
    "OrderView",
    "PlanRequest",
    "Recipe",
    "Ruling",
    "Snapshot",
    "Take",
    "Taking",
    "free_units",
    "parse_recipes",
    "parse_snapshot",
    "plan",
    "plan_devices",
    "room_for",
    "rule",
    "take",
    "with_demand",
]
