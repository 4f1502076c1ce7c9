"""Kubernetes: the step pods dagster-k8s builds for this code, the shipped manifests, the Helm values.

Step pods are built the way dagster-k8s's `k8s_job_executor` builds them (K8sStepHandler): the run's
container context (here: what the Helm values give runs) merged with each step's own
`dagster-k8s/config` tag, then `construct_dagster_k8s_job`. Every object is validated against the
Kubernetes OpenAPI schemas with kubernetes-validate (strict: unknown fields fail).
"""

from __future__ import annotations

import dagster as dg
import kubernetes
import kubernetes_validate
import pytest
import yaml
from dagster_k8s.container_context import K8sContainerContext
from dagster_k8s.job import (
    DagsterK8sJobConfig,
    UserDefinedDagsterK8sConfig,
    construct_dagster_k8s_job,
    get_user_defined_k8s_config,
)

from batch_assets.definitions import defs
from batch_assets.models.languages import AMBERNET, PARAKEET_JA, PARAKEET_V2
from batch_assets.settings import Settings, current_settings, env_bool
from batch_assets.storage.resource import REPO_ROOT
from batch_assets.switches import SWITCH_ENV_VARS

GPU_STEP = "gpu_section.gpu_shard"  # one step (one pod, one GPU) per shard of a partition
# and one per shard with flights no shard step of a re-execution processed (batch_assets/gpu/steps/resume.py)
GPU_STEPS = (GPU_STEP, "gpu_section.gpu_leftover")
K8S = REPO_ROOT / "k8s"
KUBERNETES_VERSION = "1.32"
VALUES = yaml.safe_load((K8S / "values.yaml").read_text())
DEPLOYMENT = VALUES["dagster-user-deployments"]["deployments"][0]


def _validate(obj: dict) -> None:
    kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def _run_container_context() -> K8sContainerContext:
    """What a run launched from the user-code deployment carries (includeConfigInLaunchedRuns)."""
    launcher = VALUES["runLauncher"]["config"]["k8sRunLauncher"]
    run_k8s = launcher["runK8sConfig"]
    return K8sContainerContext(
        namespace="batch-assets",
        env=DEPLOYMENT["env"],
        env_secrets=[s["name"] for s in DEPLOYMENT["envSecrets"]],
        volume_mounts=launcher.get("volumeMounts", []),
        volumes=launcher.get("volumes", []),
        run_k8s_config=UserDefinedDagsterK8sConfig.from_dict({"container_config": run_k8s["containerConfig"]}),
    )


def _step_jobs() -> dict[str, dict]:
    """Each step of the asset job as a Kubernetes Job manifest, built by dagster-k8s."""
    job_def = defs.resolve_job_def("transcribe_partition")
    image = f"{DEPLOYMENT['image']['repository']}:{DEPLOYMENT['image']['tag']}"
    config = DagsterK8sJobConfig(
        job_image=image, dagster_home=VALUES["global"]["dagsterHome"], instance_config_map="dagster-instance",
        postgres_password_secret=VALUES["global"]["postgresqlSecretName"],
    )
    api = kubernetes.client.ApiClient()
    jobs = {}
    for name, node in _op_nodes(job_def.graph):
        context = _run_container_context().merge(
            K8sContainerContext(run_k8s_config=get_user_defined_k8s_config(node.tags)))
        job = construct_dagster_k8s_job(
            job_config=config, args=["dagster", "api", "execute_step"],
            job_name=f"dagster-step-{name.replace('_', '-').replace('.', '-')}",
            component="step_worker", user_defined_k8s_config=context.run_k8s_config,
            labels={"dagster/op": node.name}, env_vars=[{"name": "DAGSTER_RUN_STEP_KEY", "value": name}],
        )
        manifest = api.sanitize_for_serialization(job)
        jobs[name] = {"apiVersion": "batch/v1", "kind": "Job", **manifest}
    return jobs


def _op_nodes(graph, prefix: str = ""):
    """(step name, node) of every op, inside graph-backed assets too (each is a step, so a pod, of its own)."""
    for node in graph.nodes:
        if isinstance(node.definition, dg.GraphDefinition):
            yield from _op_nodes(node.definition, f"{prefix}{node.name}.")
        else:
            yield f"{prefix}{node.name}", node


def _resources(job: dict) -> dict:
    return job["spec"]["template"]["spec"]["containers"][0].get("resources", {})


def test_gpu_step_pod_requests_one_gpu_and_cpu_steps_none():
    jobs = _step_jobs()
    assert {*GPU_STEPS, "fetched_audio", "prepared_flights", "gpu_section.plan_gpu_shards",
            "gpu_section.list_leftover_flights", "gpu_section.assemble_gpu_tables"} <= set(jobs)
    for step in GPU_STEPS:
        gpu = jobs.pop(step)
        assert _resources(gpu)["limits"]["nvidia.com/gpu"] == "1"
        assert _resources(gpu)["requests"]["nvidia.com/gpu"] == "1"
        assert _resources(gpu)["requests"]["cpu"] == str(current_settings().gpu_step_cpu)
        pod = gpu["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    for name, job in jobs.items():  # the CPU steps (and the checks) ask for no GPU and tolerate no GPU taint
        for section in ("limits", "requests"):
            assert "nvidia.com/gpu" not in _resources(job).get(section, {}), name
        assert not job["spec"]["template"]["spec"].get("tolerations"), name


def test_every_gpu_step_pod_mounts_the_model_cache_the_loaders_read():
    """Each GPU step pod finds parakeet and community-1 in one shared cache instead of downloading them (issue 20)."""
    fill = {d["kind"]: d for d in yaml.safe_load_all((K8S / "model-cache.yaml").read_text()) if d}
    claim = fill["PersistentVolumeClaim"]["metadata"]["name"]
    fill_env = {e["name"]: e["value"] for e in fill["Job"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert fill["Job"]["spec"]["template"]["spec"]["containers"][0]["command"] == ["batch-assets", "models", "fetch"]
    jobs = _step_jobs()
    for step in GPU_STEPS:
        pod = jobs[step]["spec"]["template"]["spec"]
        container = pod["containers"][0]
        env = {e["name"]: e.get("value") for e in container["env"]}
        [volume] = [v for v in pod["volumes"] if v.get("persistentVolumeClaim", {}).get("claimName") == claim]
        [mount] = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
        assert mount["readOnly"] is True and volume["persistentVolumeClaim"]["readOnly"] is True
        for variable in ("HF_HOME", "NEMO_CACHE_DIR", "BATCH_ASSETS_MODEL_CACHE"):  # where NeMo (hub and NGC
            # models), pyannote and the builtins look
            assert env[variable].startswith(mount["mountPath"] + "/"), (step, variable, env[variable])
            assert env[variable] == fill_env[variable]  # the Job fills exactly the cache the steps read
        assert env["HF_HUB_OFFLINE"] == "1"  # a missing model fails at once instead of downloading in every pod


@pytest.mark.slow
def test_models_fetch_fills_the_cache_and_says_how_large_it_is(tmp_path):
    import os
    import subprocess
    import sys

    env = os.environ | {"HF_HOME": str(tmp_path / "hf"), "BATCH_ASSETS_MODEL_CACHE": str(tmp_path / "models"),
                        "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([sys.executable, "-m", "batch_assets.cli", "models", "fetch"], env=env, capture_output=True,
                          check=False, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"BATCH_ASSETS_MODEL_CACHE: {tmp_path / 'models'}: " in done.stdout and f"{tmp_path / 'hf'}" in done.stdout
    assert any((tmp_path / "models").rglob("config.yaml"))  # the builtin pipeline folder, built into the cache


def test_every_step_pods_requests_fit_its_limits():
    """The API server refuses a pod whose request exceeds its limit; schema validation does not catch it."""
    from kubernetes.utils import parse_quantity

    jobs = _step_jobs()
    for name, job in jobs.items():
        resources = _resources(job)
        for resource, limit in resources.get("limits", {}).items():
            request = resources.get("requests", {}).get(resource)
            if request is not None:
                assert parse_quantity(request) <= parse_quantity(limit), (name, resource, request, limit)
    gpu = _resources(jobs[GPU_STEP])
    assert parse_quantity(gpu["limits"]["memory"]) >= parse_quantity("24Gi")


def test_the_image_can_reach_the_charts_instance():
    """The chart configures Postgres run/event/schedule storage; run and step pods load it from this image."""
    from dagster_postgres import (
        PostgresEventLogStorage,
        PostgresRunStorage,
        PostgresScheduleStorage,
    )

    assert all(isinstance(c, type) for c in (PostgresEventLogStorage, PostgresRunStorage, PostgresScheduleStorage))


def test_step_pods_carry_the_deployment_env_and_secrets():
    for name, job in _step_jobs().items():
        container = job["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["BATCH_ASSETS_EXECUTOR"] == "k8s" and env["DAGSTER_RUN_STEP_KEY"] == name
        for variable in SWITCH_ENV_VARS.values():
            assert variable in env, (name, variable)
        secrets = {s["secretRef"]["name"] for s in container.get("envFrom", []) if "secretRef" in s}
        assert {"batch-assets-s3", "batch-assets-huggingface"} <= secrets


def test_step_pod_manifests_validate_against_kubernetes_schemas():
    jobs = _step_jobs()
    for job in jobs.values():
        _validate(job)
    broken = jobs[GPU_STEP]
    broken["spec"]["template"]["spec"]["containers"][0]["resources"]["limit"] = {"nvidia.com/gpu": "1"}  # typo'd field
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(broken)


@pytest.mark.parametrize("path", sorted(p.name for p in K8S.glob("*.yaml") if p.name != "values.yaml"))
def test_shipped_manifests_validate_against_kubernetes_schemas(path):
    documents = [d for d in yaml.safe_load_all((K8S / path).read_text()) if d]
    assert documents
    for document in documents:
        _validate(document)


def test_helm_values_match_the_code():
    assert VALUES["runLauncher"]["type"] == "K8sRunLauncher"
    assert VALUES["postgresql"]["enabled"] is False and VALUES["postgresql"]["postgresqlHost"]
    assert DEPLOYMENT["dagsterApiGrpcArgs"] == ["--module-name", "batch_assets.definitions"]
    assert DEPLOYMENT["includeConfigInLaunchedRuns"]["enabled"] is True
    env = {e["name"]: e["value"] for e in DEPLOYMENT["env"]}
    for variable in SWITCH_ENV_VARS.values():
        assert isinstance(env_bool(variable, True, env), bool)  # a valid kill-switch value
    routing = Settings.from_env(env).asr_models  # the values' routing parses, and is production's
    assert routing["en"] == PARAKEET_V2 and routing["ja"] == PARAKEET_JA and len(routing) == 26
    assert env["BATCH_ASSETS_LANGUAGE_ID_MODEL"] == AMBERNET
    # the GPU step pods' requests come from the values (sized in docs/deployment.md), not from the code's defaults
    from batch_assets.gpu.assets import gpu_k8s_config

    requests = gpu_k8s_config(Settings.from_env(env))["container_config"]["resources"]["requests"]
    assert requests["cpu"] == env["BATCH_ASSETS_GPU_STEP_CPU"]
    assert requests["memory"] == env["BATCH_ASSETS_GPU_STEP_MEMORY_GIB"] + "Gi"
    pools = VALUES["concurrency"]
    assert pools["enabled"] is True and pools["pools"]["granularity"] == "op" and pools["pools"]["defaultLimit"] >= 1
    assert VALUES["dagsterDaemon"]["runRetries"]["enabled"] is True
    deployed = Settings.from_env(env)  # the schedule and the unwatched days' sensors start on where it is deployed
    assert deployed.schedule_running and deployed.sensors_running and deployed.webserver_url
    # Every secret the pods read is one the shipped Secret manifests define.
    shipped = {d["metadata"]["name"] for d in yaml.safe_load_all((K8S / "secrets.example.yaml").read_text()) if d}
    wanted = {s["name"] for s in DEPLOYMENT["envSecrets"]} | {VALUES["global"]["postgresqlSecretName"]}
    assert wanted <= shipped


def test_k8s_executor_is_selected_by_env():
    """`k8s`: dagster-k8s's executor. Unset: Dagster's default (a run config may choose `in_process`), its step
    processes forked from a forkserver unless the run config names a start method."""
    from dagster_k8s import k8s_job_executor

    from batch_assets.orchestration.executor import FORKSERVER_PRELOAD, executor_for
    from batch_assets.settings import Settings

    assert executor_for(Settings.from_env({"BATCH_ASSETS_EXECUTOR": "k8s"})) is k8s_job_executor
    local = executor_for(Settings.from_env({}))
    assert local.name == dg.multi_or_in_process_executor.name

    def resolved(config: dict) -> dict:
        return local.config_schema.resolve_config({"config": config}).value["config"]

    forked = {"forkserver": {"preload_modules": list(FORKSERVER_PRELOAD)}}
    assert resolved({"multiprocess": {"max_concurrent": 2}})["multiprocess"]["start_method"] == forked
    assert resolved({"multiprocess": {"start_method": {"spawn": {}}}})["multiprocess"]["start_method"] == {"spawn": {}}
    assert list(resolved({"in_process": {}})) == ["in_process"]
    with pytest.raises(ValueError, match="BATCH_ASSETS_EXECUTOR"):
        Settings.from_env({"BATCH_ASSETS_EXECUTOR": "kubernetes please"})


def test_dockerfile_builds_the_code_location_on_a_cuda_base():
    lines = (K8S / "Dockerfile").read_text().splitlines()
    base = next(line for line in lines if line.startswith("FROM "))
    assert base.startswith("FROM nvidia/cuda:") and "cudnn" in base
    text = "\n".join(lines)
    assert "download.pytorch.org/whl/cu" in text and "batch_assets.definitions" in text


def test_a_step_pod_lost_with_its_node_fails_its_step_and_a_refused_run_is_not_retried(tmp_path):
    """A GPU node vanishing under a step pod (dagster #33755: a step left IN_PROGRESS when a Job starts a second pod
    for one attempt). Every step Job gets no second pod (backoffLimit 0, no pod failure policy), so the executor's
    health check fails the step and its RetryPolicy reruns it in a new pod. Past those retries the run fails; the
    instance the chart renders from these values relaunches such a run from failure, but not one a step refused
    (orchestration/run_retries.py). Decided by Dagster's own run-retry rule on real failed runs, on the rendered
    dagster.yaml (its Postgres storage swapped for SQLite here; tests/test_deployed.py runs it on Postgres)."""
    from dagster._core.events import RunFailureReason
    from dagster._core.execution.retries import auto_reexecution_should_retry_run

    from batch_assets.orchestration.run_retries import refusals_are_not_retried

    from .deployments import helm_instance_yaml

    for name, job in _step_jobs().items():
        assert job["spec"]["backoffLimit"] == 0 and "podFailurePolicy" not in job["spec"], name
    rendered = helm_instance_yaml("127.0.0.1", 5432)
    assert rendered["run_monitoring"]["enabled"] and rendered["run_retries"]["enabled"]
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump({k: v for k, v in rendered.items() if k != "storage"}))

    @dg.asset(hooks={refusals_are_not_retried})
    def lost_pod():
        raise RuntimeError("the step's pod was lost with its node")  # what the health check reports: a step failure

    @dg.asset(hooks={refusals_are_not_retried})
    def refused():
        raise dg.Failure("a guard refused", allow_retries=False)

    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        assert instance.run_monitoring_enabled and instance.run_retries_enabled
        decisions = {}
        for asset in (lost_pod, refused):
            result = dg.materialize([asset], instance=instance, raise_on_error=False)
            run = instance.get_run_by_id(result.run_id)
            assert run.tags["dagster/failure_reason"] == "STEP_FAILURE"
            decisions[asset.key.to_user_string()] = auto_reexecution_should_retry_run(
                instance, run, RunFailureReason.STEP_FAILURE)
    assert decisions == {"lost_pod": True, "refused": False}
