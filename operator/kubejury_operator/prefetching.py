"""Weights before GPUs: which servers have their weights downloaded ahead, and when that is done.

Why this module exists: a model server that downloads its own weights holds its GPUs for the whole
download. With a model cache claim (the chart's ``modelCache.claimName``, or a run's
``spec.modelCache``) and ``modelCache.prefetch``, the operator first runs a CPU-only Job,
``kubejury prefetch`` (:func:`kubejury_operator.manifests.prefetch_job`), that downloads the weights
into the claim, and creates the server's Deployment only once that Job succeeded; the server then
loads from the cache folder (:mod:`kubejury.files.weight_cache`).

The planner's rules, decided here from what is observed (pure, no clock):

* :func:`prefetches` — an in-cluster server with ``hf://`` or ``s3://`` weights for vLLM or
  llama.cpp, when a claim is in use and prefetch is on;
* :func:`weights_ready` — its prefetch Job succeeded, or its Deployment already exists (it was
  created after the weights were there);
* :func:`wanted_downloads` — the servers whose weights are fetched now: every server the planner
  wants up, the next ``maxConcurrentModels`` evaluated models in bring-up order after them, and every
  judge's server with judging still to do. Downloads are not servers: they take no
  ``maxConcurrentModels`` slot, so the next model's download overlaps the serving of the models
  before it, and its server is Ready moments after its slot frees.
"""

from __future__ import annotations

from collections.abc import Mapping

from kubejury.files.weight_cache import prefetchable
from kubejury_operator.settings import ModelCacheSettings
from kubejury_operator.vocabulary import JOB_NAME_LIMIT, Endpoint, joined_label

COMPONENT = "prefetch"


def prefetch_job_name(run: str, key: str) -> str:
    """``kj-<run>-prefetch-<key>-<hash>``: one Job per server (endpoint key), within the Job limit."""
    return joined_label("kj", run, COMPONENT, key, limit=JOB_NAME_LIMIT)


def prefetches(endpoint: Endpoint, settings: ModelCacheSettings) -> bool:
    """Whether ``endpoint``'s server loads weights a prefetch Job downloaded into the cache claim."""
    return (
        settings.model_cache_prefetch
        and bool(settings.model_cache_pvc)
        and endpoint.in_cluster
        and endpoint.placement is not None
        and prefetchable(endpoint.source, endpoint.runtime)
    )


def weights_ready(
    run: str,
    endpoint: Endpoint,
    settings: ModelCacheSettings,
    jobs_succeeded: Mapping[str, bool],
    deployments: frozenset[str],
    deployment_name: str,
) -> bool:
    """A server may be created: it downloads nothing ahead, its prefetch Job succeeded, or its
    Deployment exists already (``jobs_succeeded``: observed Job name → succeeded)."""
    if not prefetches(endpoint, settings):
        return True
    return jobs_succeeded.get(prefetch_job_name(run, endpoint.key), False) or deployment_name in deployments


def wanted_downloads(
    desired: Mapping[str, int],
    next_models: list[Endpoint],
    judges_with_work: list[Endpoint],
    lookahead: int,
) -> list[str]:
    """Endpoint keys whose weights are fetched now (module docstring): the desired servers, the first
    ``lookahead`` of ``next_models`` (evaluated models still to generate, in bring-up order, not
    desired yet) and the judges' servers with judging to do."""
    keys = [key for key, want in desired.items() if want > 0]
    keys += [m.key for m in next_models if m.key not in desired][: max(1, lookahead)]
    keys += [j.key for j in judges_with_work]
    return list(dict.fromkeys(keys))
