"""A hub answer is taken only by the question it answers (seen by the crash tests).

The order's model is asked for off the worker (background.py); the answer is kept until
a pass takes it. Once the hub's cache holds it, passes read the cache and the kept copy
stayed behind — to be taken by the next lookup that missed the cache: after a model edit,
the old model's facts were judged for the new spec, planned and rolled out, and the real
answer replanned it once more (replanCount 2 for one edit).
"""

from __future__ import annotations

import threading
from typing import Any

from adapters.kubernetes.background import Background
from adapters.kubernetes.observing import Observer
from adapters.kubernetes.settings import Settings
from adapters.models import ModelFound
from adapters.models.huggingface import HubResolver, HubSettings
from adapters.simulator.hub import StandInHub
from fsm.identity import OrderRef
from fsm.values import ModelRef, ModelSource

SMALL = "Qwen/Qwen2.5-0.5B-Instruct"
BIG = "Qwen/Qwen2.5-7B-Instruct"


def test_an_answer_about_the_model_before_an_edit_never_answers_for_the_new_one(
    module_hub: StandInHub,
) -> None:
    woken = threading.Event()
    background = Background(lambda _uid: woken.set(), workers=1)
    resolver = HubResolver(HubSettings(endpoint=module_hub.url))
    world: Any = None  # a HuggingFace model without a Secret reads nothing of the cluster
    observer = Observer(world, resolver, Settings, background)
    order = OrderRef("edited", "support", "uid-edited")
    small = ModelRef(src=ModelSource.HUGGING_FACE, name=SMALL)
    big = ModelRef(src=ModelSource.HUGGING_FACE, name=BIG)
    try:
        assert observer._lookup(order, small) is None  # asked off the worker
        assert woken.wait(30)
        found = observer._lookup(order, small)  # the hub's cache has it now
        assert isinstance(found, ModelFound) and found.facts.name == SMALL
        woken.clear()
        # The model is edited: the answer about the old one must not answer this.
        answer = observer._lookup(order, big)
        assert answer is None or (isinstance(answer, ModelFound) and answer.facts.name == BIG)
        assert woken.wait(30)
        found = observer._lookup(order, big)
        assert isinstance(found, ModelFound) and found.facts.name == BIG
    finally:
        background.stop()
