"""Which credentials and CA the DGD actuator uses: ``host=`` overrides only the API server's
address, keeping what the kubeconfig (or the pod's service account) provides; ``token_file=``
and ``ca=`` override those; a 401 and a 403 say different things.

Real components: the test API server checks a bearer token (and serves TLS with a certificate
made here by the ``openssl`` command), and the kubeconfig is a real file that ``$KUBECONFIG``
names, read by the ``kubernetes`` client's own loader.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.config import incluster_config

from connectors.dgd import DgdActuator
from connectors.dgd_graph import DgdValidationError
from flows.endpoints import wire
from schemas import PlannerConfig

from .apiserver import ApiServer
from .conftest import DGD_NAMESPACE, api_client, create_dgd, register_dgd_crd

pytestmark = pytest.mark.services

TOKEN = "s3cret-token"
NOWHERE = "http://127.0.0.1:1"
"""The kubeconfig's own server address: wrong, so only ``host=`` can reach the server."""
EXPECTED = {"prefill": "VllmPrefillWorker", "decode": "VllmDecodeWorker"}


def serve_dgd(server: ApiServer) -> None:
    """The DGD CRD and the vLLM disagg DGD, created with the server's token."""
    client = api_client(server.url, server.token, ca=server.tls[0] if server.tls else None)
    register_dgd_crd(client)
    create_dgd(server, client)
    client.close()


@pytest.fixture
def guarded() -> Iterator[ApiServer]:
    """A test API server that wants ``Bearer s3cret-token``, serving the DGD."""
    with ApiServer(token=TOKEN) as server:
        serve_dgd(server)
        yield server


def write_kubeconfig(path: Path, server: str, *, token: str = TOKEN, ca: str | None = None) -> None:
    """A kubeconfig with one context: ``server``, the bearer ``token``, the ``ca`` file."""
    cluster: dict[str, Any] = {"server": server}
    if ca is not None:
        cluster["certificate-authority"] = ca
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": cluster}],
        "users": [{"name": "planner", "user": {"token": token}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "planner"}}],
        "current-context": "test",
    }
    path.write_text(yaml.safe_dump(config))


@pytest.fixture
def kubeconfig(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Where ``$KUBECONFIG`` points (the file is the test's to write)."""
    path = tmp_path / "kubeconfig"
    monkeypatch.setenv("KUBECONFIG", str(path))
    return path


def actuator(**options: Any) -> DgdActuator:
    return DgdActuator.from_environment(
        name="vllm-disagg", namespace=DGD_NAMESPACE, sleep=lambda s: None, **options
    )


def test_host_keeps_the_kubeconfig_credentials(guarded: ApiServer, kubeconfig: Path):
    write_kubeconfig(kubeconfig, NOWHERE)
    assert actuator(host=guarded.url).validate() == EXPECTED
    assert guarded.requests[-1].status == 200


def test_a_dgd_address_with_host_keeps_the_kubeconfig_credentials(
    guarded: ApiServer, kubeconfig: Path
):
    write_kubeconfig(kubeconfig, NOWHERE)
    address = f"dgd://{DGD_NAMESPACE}/vllm-disagg?deployment=llama&host={guarded.url}"
    wiring = wire([], [address], {"llama": PlannerConfig(mode="disagg")})
    assert wiring.actuators[0].actuator_factory().validate() == EXPECTED


def test_host_works_with_no_configuration_at_all(apiserver: ApiServer, dgd: Any):
    assert actuator(host=apiserver.url).validate() == EXPECTED  # no kubeconfig, no token


def test_a_token_file_is_read_again_for_every_request(guarded: ApiServer, tmp_path: Path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    planner = actuator(host=guarded.url, token_file=str(token_file))
    assert planner.validate() == EXPECTED
    guarded.token = "rotated"
    token_file.write_text("rotated")
    assert planner.read_inventory().ready_num_decode == 1


def test_a_token_file_empty_at_start_is_read_once_it_is_written(guarded: ApiServer, tmp_path: Path):
    # protects: the client refreshes its token only while one is set, so a file empty when the
    # client was built (a projected volume not filled yet) was never read again: 401 for good
    token_file = tmp_path / "token"
    token_file.write_text("")
    planner = actuator(host=guarded.url, token_file=str(token_file))
    token_file.write_text(TOKEN)
    assert planner.validate() == EXPECTED


def in_cluster(monkeypatch: pytest.MonkeyPatch, folder: Path, server: str) -> None:
    """Simulate a pod: a service-account token (:data:`TOKEN`) and CA, and ``server`` as the
    ``KUBERNETES_SERVICE_*`` address (the loader makes it ``https://``), read by the
    ``kubernetes`` client's in-cluster loader."""
    token, ca = folder / "sa-token", folder / "sa-ca.crt"
    token.write_text(TOKEN)
    ca.write_text("unused: the loader only checks that it exists")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    host, port = server.removeprefix("http://").rsplit(":", 1)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)


def read_twice(planner: DgdActuator) -> int:
    """Validate, then read the inventory once more (no retry): the loaders' refresh hooks
    first run, and assign themselves again, on the first request."""
    assert planner.validate() == EXPECTED
    return planner.read_inventory(retry=False).ready_num_decode


def test_host_holds_after_the_first_request_with_a_kubeconfig_token(
    guarded: ApiServer, kubeconfig: Path
):
    write_kubeconfig(kubeconfig, NOWHERE)
    planner = actuator(host=guarded.url, max_attempts=1)
    assert [read_twice(planner), planner.read_inventory(retry=False).ready_num_decode] == [1, 1]


def test_a_token_file_holds_after_the_first_request_with_a_kubeconfig_token(
    guarded: ApiServer, kubeconfig: Path, tmp_path: Path
):
    write_kubeconfig(kubeconfig, guarded.url, token="stale-kubeconfig-token")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    assert read_twice(actuator(token_file=str(token_file), max_attempts=1)) == 1


def test_host_and_token_file_hold_after_the_first_request_in_a_pod(
    guarded: ApiServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    in_cluster(monkeypatch, tmp_path, NOWHERE)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    planner = actuator(host=guarded.url, token_file=str(token_file), max_attempts=1)
    assert read_twice(planner) == 1
    guarded.token = "rotated"
    token_file.write_text("rotated")  # the service account's own token is now the stale one
    assert planner.read_inventory(retry=False).ready_num_decode == 1


def test_a_wrong_token_is_unauthorised(guarded: ApiServer, kubeconfig: Path):
    write_kubeconfig(kubeconfig, NOWHERE, token="stale")
    with pytest.raises(DgdValidationError) as err:
        actuator(host=guarded.url).validate()
    assert str(err.value) == (
        "not authenticated to read DynamoGraphDeployment dynamo/vllm-disagg: cannot read DGD "
        "dynamo/vllm-disagg: HTTP 401: Unauthorized (unauthorised: the token is missing, "
        "expired or wrong)"
    )


def test_a_forbidden_read_names_the_grants(guarded: ApiServer, kubeconfig: Path):
    write_kubeconfig(kubeconfig, NOWHERE)
    path = f"/apis/nvidia.com/v1alpha1/namespaces/{DGD_NAMESPACE}/dynamographdeployments"
    guarded.inject(f"{path}/vllm-disagg", 403, method="GET")
    with pytest.raises(DgdValidationError) as err:
        actuator(host=guarded.url).validate()
    message = str(err.value)
    assert message.startswith("not allowed to read DynamoGraphDeployment dynamo/vllm-disagg")
    assert message.endswith(
        "(forbidden: the service account needs get/patch on "
        "dynamographdeployments.nvidia.com (and on dynamographdeploymentscalingadapters/scale "
        "for services with a scaling adapter))"
    )
    assert "unauthorised" not in message


# ---------------------------------------------------------------------- TLS with a private CA
@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 (its own CA) and its key."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = str(folder / "server.crt"), str(folder / "server.key")
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            key,
            "-out",
            cert,
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.fixture
def private_tls(certificate: tuple[str, str]) -> Iterator[ApiServer]:
    """The guarded server over TLS, its certificate signed by a CA no system trusts."""
    with ApiServer(token=TOKEN, tls=certificate) as server:
        serve_dgd(server)
        yield server


def test_host_keeps_the_kubeconfig_ca(
    private_tls: ApiServer, kubeconfig: Path, certificate: tuple[str, str]
):
    write_kubeconfig(kubeconfig, "https://127.0.0.1:1", ca=certificate[0])
    assert private_tls.url.startswith("https://")
    assert actuator(host=private_tls.url).validate() == EXPECTED


def test_ca_and_token_file_options_reach_a_private_server(
    private_tls: ApiServer, certificate: tuple[str, str], tmp_path: Path
):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    address = (
        f"dgd://{DGD_NAMESPACE}/vllm-disagg?deployment=llama&host={private_tls.url}"
        f"&ca={certificate[0]}&token_file={token_file}"
    )
    wiring = wire([], [address], {"llama": PlannerConfig(mode="disagg")})
    assert wiring.actuators[0].actuator_factory().validate() == EXPECTED


def test_a_private_server_is_refused_without_its_ca(private_tls: ApiServer, tmp_path: Path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    with pytest.raises(DgdValidationError, match="CERTIFICATE_VERIFY_FAILED"):
        actuator(host=private_tls.url, token_file=str(token_file), max_attempts=1).validate()
