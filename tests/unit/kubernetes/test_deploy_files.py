"""deploy/ is generated from the models and committed; it must never drift from them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from phalanx.services.kubernetes.install import InstallRequest, deploy_files, render_install

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
FIX = "deploy/ is stale: run scripts/generate-deploy and commit the result"


@pytest.mark.parametrize("relative", sorted(deploy_files()))
def test_the_committed_file_is_what_the_models_generate(relative: str) -> None:
    path = DEPLOY / relative
    assert path.is_file(), f"{relative} is missing; {FIX}"
    assert path.read_text(encoding="utf-8") == deploy_files()[relative], FIX


def test_no_generated_crd_file_is_left_over_from_a_removed_kind() -> None:
    committed = {f"crds/{path.name}" for path in (DEPLOY / "crds").glob("*")}
    assert committed == {name for name in deploy_files() if name.startswith("crds/")}, FIX


def test_install_yaml_is_what_install_print_prints() -> None:
    assert deploy_files()["install.yaml"] == render_install(InstallRequest())


def test_the_crd_files_hold_the_crds_of_the_install() -> None:
    install = [d for d in yaml.safe_load_all(deploy_files()["install.yaml"]) if d["kind"] == "CustomResourceDefinition"]
    singles = [yaml.safe_load(text) for name, text in sorted(deploy_files().items()) if name.startswith("crds/")]
    assert sorted(install, key=lambda d: d["metadata"]["name"]) == sorted(singles, key=lambda d: d["metadata"]["name"])


def test_no_workloads_leaves_out_the_components_and_keeps_everything_they_need() -> None:
    full = [d for d in yaml.safe_load_all(render_install(InstallRequest())) if d]
    bare_text = render_install(InstallRequest(workloads=False))
    bare = [d for d in yaml.safe_load_all(bare_text) if d]
    assert {d["kind"] for d in full} - {d["kind"] for d in bare} == {"Deployment", "DaemonSet"}
    assert [d for d in full if d["kind"] not in ("Deployment", "DaemonSet")] == bare
    assert "phalanx install --print --no-workloads | kubectl apply -f -" in bare_text


def test_the_kubelet_configuration_is_mounted_into_the_node_agents_and_the_namespace_admits_it() -> None:
    documents = list(yaml.safe_load_all(render_install(InstallRequest(kubelet_config="/var/lib/kubelet/config.yaml"))))
    [agents] = [d for d in documents if d and d["kind"] == "DaemonSet"]
    spec = agents["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert container["args"][-2:] == ["--kubelet-config", "/etc/phalanx/kubelet/config.yaml"]
    assert {"name": "kubelet-config", "mountPath": "/etc/phalanx/kubelet/config.yaml", "readOnly": True} in (
        container["volumeMounts"]
    )
    assert {"name": "kubelet-config", "hostPath": {"path": "/var/lib/kubelet/config.yaml", "type": "File"}} in (
        spec["volumes"]
    )
    [namespace] = [d for d in documents if d and d["kind"] == "Namespace"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


def test_a_relative_kubelet_configuration_path_is_refused_naming_the_option() -> None:
    with pytest.raises(ValueError, match=r"--kubelet-config 'config\.yaml' must be the file's absolute path"):
        render_install(InstallRequest(kubelet_config="config.yaml"))


def test_dra_is_chosen_for_the_operator_and_slices_for_the_agents_by_the_install() -> None:
    def env_of(request: InstallRequest, kind: str) -> dict[str, str]:
        documents = [d for d in yaml.safe_load_all(render_install(request)) if d]
        [workload] = [d for d in documents if d["kind"] == kind and "agent" in d["metadata"]["name"]] or [
            d for d in documents if d["kind"] == kind and d["metadata"]["name"] == "phalanx-operator"
        ]
        return {v["name"]: v.get("value", "") for v in workload["spec"]["template"]["spec"]["containers"][0]["env"]}

    assert env_of(InstallRequest(), "Deployment")["PHALANX_GPU_ALLOCATION"] == "device-plugin"
    assert env_of(InstallRequest(), "DaemonSet")["PHALANX_RESOURCE_SLICES"] == "false"
    chosen = InstallRequest(gpu_allocation="dra", resource_slices=True)
    assert env_of(chosen, "Deployment")["PHALANX_GPU_ALLOCATION"] == "dra"
    assert env_of(chosen, "DaemonSet")["PHALANX_RESOURCE_SLICES"] == "true"
    with pytest.raises(ValueError, match="--gpu-allocation 'claims': choose one of device-plugin, dra"):
        render_install(InstallRequest(gpu_allocation="claims"))


def test_workload_options_without_the_workloads_are_refused_naming_where_they_go() -> None:
    request = InstallRequest(workloads=False, gpu_allocation="dra", resource_slices=True)
    with pytest.raises(ValueError, match="--gpu-allocation, --resource-slices configure the components'") as caught:
        render_install(request)
    assert "give the processes phalanx-operator --gpu-allocation dra; phalanx-node-agent --resource-slices" in str(
        caught.value
    )
    with pytest.raises(ValueError, match="--gpu-allocation configures the components'"):
        render_install(InstallRequest(workloads=False, gpu_allocation="dra"))
