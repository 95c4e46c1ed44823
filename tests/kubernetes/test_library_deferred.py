"""kubernetes-asyncio loaded without its package roots' imports (``_library``): the driver loads
none of the generated API classes and models, and code that uses them afterwards (a user's, the
tests') sees the whole library, with the same classes. Each case runs in a fresh interpreter:
what is loaded first decides."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_driver_loads_no_generated_api_or_model() -> None:
    out = _run(
        """
        import sys
        import asyncdeploy.drivers.kubernetes
        loaded = [m for m in sys.modules if m.startswith("kubernetes_asyncio")]
        generated = [m for m in loaded if m.startswith(
            ("kubernetes_asyncio.client.api.", "kubernetes_asyncio.client.models."))]
        print(len(loaded), len(generated), "kubernetes_asyncio.client.api" in sys.modules)
        """
    )
    count, generated, api_package = out.split()
    assert (generated, api_package) == ("0", "False"), out
    assert 0 < int(count) < 40, out  # the client, its configuration and the kubeconfig loader


def test_the_library_used_afterwards_is_whole_with_the_same_classes() -> None:
    out = _run(
        """
        import asyncio
        from asyncdeploy.drivers.kubernetes import _library
        from kubernetes_asyncio.client import ApiClient, Configuration, CoreV1Api, V1Pod
        import kubernetes_asyncio
        from kubernetes_asyncio import watch
        from kubernetes_asyncio.client.models import V1ObjectMeta
        assert ApiClient is _library.ApiClient and Configuration is _library.Configuration
        assert kubernetes_asyncio.client.CoreV1Api is CoreV1Api
        assert kubernetes_asyncio.client.models.V1Pod is V1Pod and watch.Watch
        assert kubernetes_asyncio.__version__

        class Answer:
            data = '{"metadata": {"name": "demo"}}'

        async def main():
            async with ApiClient(Configuration()) as client:  # models reached through the client
                pod = client.deserialize(Answer(), "V1Pod")
                assert isinstance(pod.metadata, V1ObjectMeta), pod
                return pod.metadata.name

        print(asyncio.run(main()))
        try:
            kubernetes_asyncio.client.NoSuchName
        except AttributeError as exc:
            print("AttributeError", exc)
        """
    )
    assert out.splitlines() == [
        "demo",
        "AttributeError module 'kubernetes_asyncio.client' has no attribute 'NoSuchName'",
    ], out


def test_a_library_loaded_first_is_left_as_it_is() -> None:
    out = _run(
        """
        import kubernetes_asyncio
        from kubernetes_asyncio.client import ApiClient
        from asyncdeploy.drivers.kubernetes import _library
        import sys
        deferred = [n for n in _library.DEFERRED if "__getattr__" in vars(sys.modules[n])]
        print(deferred, _library.ApiClient is ApiClient)
        """
    )
    assert out.split() == ["[]", "True"], out
