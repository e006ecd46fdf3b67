"""The module carries its CRDs with their CEL rules (deploy/crds/, generated).

Deckhouse installs a module's `crds/` as it is, without kustomize: the rules of
crds/cel/ must already be in. scripts/gen_docs.py writes them; this fails while a
committed file is stale, or differs from what `kubectl kustomize crds/` renders (the
plain install's CRDs).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import yaml

from tests.deploy.conftest import REPO
from tests.support.kustomize import kustomize


def _generator() -> ModuleType:
    path = REPO / "scripts" / "gen_docs.py"
    spec = importlib.util.spec_from_file_location("gen_docs", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_module_crds_are_generated_and_up_to_date() -> None:
    generator = _generator()
    names = generator.crd_names()
    assert names == sorted(p.stem for p in (REPO / "crds").glob("*.yaml"))
    committed = sorted(p.stem for p in (REPO / "deploy" / "crds").glob("*.yaml"))
    assert committed == names
    for name in names:
        path: Path = REPO / "deploy" / "crds" / f"{name}.yaml"
        assert path.read_text(encoding="utf-8") == generator.module_crd(name), (
            f"{path} is stale: run scripts/gen_docs.py"
        )
    assert generator.main(["--check"]) == 0


def test_the_module_crds_are_the_plain_installs_with_every_cel_rule() -> None:
    plain = {d["metadata"]["name"]: d for d in kustomize(REPO / "crds")}
    module = {
        d["metadata"]["name"]: d
        for path in sorted((REPO / "deploy" / "crds").glob("*.yaml"))
        for d in yaml.safe_load_all(path.read_text(encoding="utf-8"))
        if d
    }
    assert module == plain
    rules = [rule for crd in module.values() for rule in _validations(crd)]
    assert any("minReplicas <= self.maxReplicas" in r["rule"] for r in rules)
    assert any("customCertificate.secretName" in r["rule"] for r in rules)


def _validations(node: object) -> list[dict[str, str]]:
    if isinstance(node, dict):
        found = list(node.get("x-kubernetes-validations") or [])
        for value in node.values():
            found += _validations(value)
        return found
    if isinstance(node, list):
        return [rule for value in node for rule in _validations(value)]
    return []
