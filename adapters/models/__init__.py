"""Model sources: what the HuggingFace hub and the ai-models catalog say about a model.

The controller calls `HubResolver.resolve` (HuggingFace refs) or `facts_from_catalog` /
`CatalogReader.read` (ai-models refs, after `catalog_gate` and `foreign_model_refusal`),
and gets a `ModelLookup`: `ModelFound(facts)` or `ModelUnavailable(reason, message)`.
"""

from adapters.models.catalog import (
    CatalogReader,
    catalog_gate,
    catalog_target,
    facts_from_catalog,
    foreign_model_refusal,
)
from adapters.models.huggingface import HubResolver, HubSettings, is_repo_id, token_problem
from adapters.models.lookup import ModelFound, ModelLookup, ModelUnavailable

__all__ = [
    "CatalogReader",
    "HubResolver",
    "HubSettings",
    "ModelFound",
    "ModelLookup",
    "ModelUnavailable",
    "catalog_gate",
    "catalog_target",
    "facts_from_catalog",
    "foreign_model_refusal",
    "is_repo_id",
    "token_problem",
]
