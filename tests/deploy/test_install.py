"""The plain-cluster install: the kustomizations, and the README's commands run as written.

`kubectl kustomize` renders crds/, the base deploy/ and the overlays install/sqlite and
install/postgres; the shapes a platform team relies on are checked on the rendered
objects. Then the README's "Install in a cluster" commands run against the local API
server as a server-side dry run (the Deployment would get no pods here). The server is
1.20, so `kubectl apply -k DIR` runs as its two halves with two lowerings in between,
both for what 1.20 lacks: the PodDisruptionBudget goes as policy/v1beta1 (same fields)
and the CRDs without their CEL rules (which 1.20 cannot take; test_api checks each CEL
patch against this server on its own).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy.engine import make_url

from tests.deploy.conftest import REPO
from tests.support.kustomize import kustomize

README = REPO / "README.md"
CONTROLLER = "ai-inference-controller"
NAMESPACE = "d8-ai-inference"
Doc = dict[str, Any]


def one(docs: list[Doc], kind: str, name: str | None = None) -> Doc:
    found = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, f"{kind} {name}: {len(found)}"
    return found[0]


def container(deployment: Doc) -> Doc:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(only)


def test_base_holds_every_object_the_module_installs() -> None:
    base = yaml.safe_load((REPO / "deploy" / "Kustomization").read_text(encoding="utf-8"))
    deploy = REPO / "deploy"
    expected = {"namespace.yaml", "controller.yaml"} | {
        str(p.relative_to(deploy))
        for folder in ("rbac", "classes", "recipes")
        for p in (deploy / folder).glob("*.yaml")
    }
    assert set(base["resources"]) == expected


def test_crds_kustomization_carries_every_cel_rule() -> None:
    docs = kustomize(REPO / "crds")
    assert sorted(d["metadata"]["name"] for d in docs) == sorted(
        p.stem for p in (REPO / "crds").glob("*.yaml")
    )
    for patch in sorted((REPO / "crds" / "cel").glob("*.json")):
        crd = one(docs, "CustomResourceDefinition", patch.stem)
        for op in json.loads(patch.read_text(encoding="utf-8")):
            node: Any = crd
            for step in op["path"].strip("/").split("/"):
                node = node[int(step)] if isinstance(node, list) else node[step]
            assert node == op["value"], op["path"]


def test_sqlite_overlay_keeps_one_writer_on_a_volume() -> None:
    docs = kustomize(REPO / "install" / "sqlite")
    deployment = one(docs, "Deployment", CONTROLLER)
    spec = deployment["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}
    volumes = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
    claim = one(docs, "PersistentVolumeClaim")
    assert volumes["data"] == {
        "name": "data",
        "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]},
    }
    assert claim["metadata"]["namespace"] == NAMESPACE
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    args = container(deployment)["args"]
    mounts = {m["name"]: m["mountPath"] for m in container(deployment)["volumeMounts"]}
    store = make_url(args[args.index("--store") + 1])
    assert store.get_backend_name() == "sqlite"
    assert Path(str(store.database)).parent == Path(mounts["data"])
    assert one(docs, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1


def test_postgres_overlay_runs_a_leader_and_a_standby_with_the_password_from_a_secret() -> None:
    docs = kustomize(REPO / "install" / "postgres")
    deployment = one(docs, "Deployment", CONTROLLER)
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    # A new pod is ready as a standby, so the rollout never waits for the Lease.
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    main = container(deployment)
    assert main["readinessProbe"]["httpGet"]["path"] == "/readyz"
    env = {e["name"]: e for e in main["env"]}
    assert {"POD_NAME", "POD_NAMESPACE"} <= set(env)  # the base's env is kept
    assert main["args"] == ["controller", "--store", "$(AI_INFERENCE_STORE_URL)"]
    ref = env["AI_INFERENCE_STORE_URL"]["valueFrom"]["configMapKeyRef"]
    config = one(docs, "ConfigMap", ref["name"])
    url = make_url(config["data"][ref["key"]])
    assert url.get_backend_name() == "postgresql"
    assert url.password is None
    assert env["PGPASSWORD"]["valueFrom"] == {
        "secretKeyRef": {"name": "ai-inference-store", "key": "password"}
    }
    assert "Secret" not in {d["kind"] for d in docs}  # the platform team creates it
    # One at a time: the leader's node drains, the standby takes the Lease.
    assert one(docs, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1


# --- the README's commands against the local API server --------------------------------


def _section(text: str, title: str) -> str:
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else None]


def readme_blocks(language: str) -> list[str]:
    section = _section(README.read_text(encoding="utf-8"), "Install in a cluster")
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.DOTALL)


def readme_commands() -> list[list[str]]:
    return [
        shlex.split(line, comments=True)
        for block in readme_blocks("bash")
        for line in block.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def _lowered(docs: list[Doc], served: set[str], minor: int) -> list[Doc]:
    out = []
    for rendered in docs:
        doc = rendered
        if doc["kind"] == "PodDisruptionBudget" and doc["apiVersion"] not in served:
            doc = {**doc, "apiVersion": "policy/v1beta1"}
        if doc["kind"] == "CustomResourceDefinition" and minor < 25:
            doc = _without_cel(doc)
        assert doc["apiVersion"] in served, f"{doc['kind']} {doc['apiVersion']}"
        out.append(doc)
    return out


def _without_cel(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_cel(v) for k, v in node.items() if k != "x-kubernetes-validations"}
    if isinstance(node, list):
        return [_without_cel(v) for v in node]
    return node


def _apply_rendered(cluster: Any, folder: Path) -> int:
    served = set(cluster.kubectl("admin", "api-versions").stdout.split())
    version = json.loads(cluster.kubectl("admin", "version", "-o", "json").stdout)
    minor = int(re.sub(r"\D", "", version["serverVersion"]["minor"]))
    docs = _lowered(kustomize(folder), served, minor)
    result = cluster.kubectl(
        "admin", "apply", "--server-side", "--dry-run=server", "-f", "-",
        input=yaml.safe_dump_all(docs),
    )  # fmt: skip
    assert result.stdout.count("(server dry run)") == len(docs), result.stdout
    return len(docs)


@pytest.mark.cluster
def test_readme_install_commands_are_accepted(cluster: Any) -> None:
    commands = readme_commands()
    applied: dict[str, int] = {}
    namespace_first = False
    shipped = list(yaml.safe_load_all((REPO / "deploy/controller.yaml").read_text("utf-8")))
    controller_image = container(one(shipped, "Deployment"))["image"]
    for argv in commands:
        match argv:
            case ["make", "image"]:
                # tests/deploy/test_image.py builds and runs it through the same script.
                makefile = (REPO / "Makefile").read_text(encoding="utf-8")
                # It needs neither setup's Kubernetes build nor its PostgreSQL.
                assert "\nimage:\n\tbash scripts/build-image.sh\n" in makefile
            case ["skopeo", "copy", source, destination]:
                # No registry here to push to: the source is what `make image` writes and
                # the destination what deploy/controller.yaml pulls.
                assert source == f"oci:build/image:{_version()}"
                assert destination == f"docker://{controller_image}"
            case ["kubectl", "apply", "--server-side", "-k", folder]:
                applied[folder] = _apply_rendered(cluster, REPO / folder)
            case ["kubectl", "wait", "--for", "condition=Established", *crds]:
                assert sorted(c.removeprefix("crd/") for c in crds) == sorted(
                    p.stem for p in (REPO / "crds").glob("*.yaml")
                )
                cluster.kubectl("admin", "wait", "--for", "condition=Established", *crds)
            case ["kubectl", "create", "namespace", namespace]:
                # Before the Secret, which a fresh cluster cannot hold without it (the
                # applies here are dry runs: the module's namespace is the bed's own).
                assert namespace == NAMESPACE
                made = cluster.kubectl(
                    "admin", "create", "namespace", namespace, "--dry-run=server", check=False
                )
                assert made.returncode == 0 or "AlreadyExists" in made.stderr, made.stderr
                namespace_first = True
            case ["kubectl", "-n", namespace, "create", "secret", *rest]:
                assert namespace_first, "the README creates the Secret before its namespace"
                assert namespace == NAMESPACE
                result = cluster.kubectl(
                    "admin", "-n", namespace, "create", "secret", *rest, "--dry-run=server"
                )
                assert "(server dry run)" in result.stdout
            case _:
                raise AssertionError(f"the README runs a command this test does not: {argv}")
    assert set(applied) == {"crds/", "install/sqlite", "install/postgres"}


def _version() -> str:
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(r'^version = "(.+)"$', text, flags=re.MULTILINE)
    assert match is not None
    return match.group(1)


@pytest.mark.cluster
def test_readme_own_overlay_names_the_image_and_the_database(cluster: Any, tmp_path: Path) -> None:
    (block,) = readme_blocks("yaml")
    (tmp_path / "ai-inference").symlink_to(REPO)  # "next to a checkout in ai-inference/"
    (tmp_path / "my-install").mkdir()
    (tmp_path / "my-install" / "kustomization.yaml").write_text(block, encoding="utf-8")
    docs = kustomize(tmp_path / "my-install")
    own = yaml.safe_load(block)
    (image,) = own["images"]
    deployment = one(docs, "Deployment", CONTROLLER)
    assert container(deployment)["image"] == f"{image['newName']}:{image['newTag']}"
    ref = {e["name"]: e for e in container(deployment)["env"]}["AI_INFERENCE_STORE_URL"]
    config = one(docs, "ConfigMap", ref["valueFrom"]["configMapKeyRef"]["name"])
    (literal,) = own["configMapGenerator"][0]["literals"]
    assert config["data"]["url"] == literal.removeprefix("url=")
    assert _apply_rendered(cluster, tmp_path / "my-install") == len(docs)
