"""The partitioner's configuration: one frozen dataclass, validated at the door."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from asepr.pipeline.capacity import normalise_capacities, shares_of
from asepr.storage.errors import InputError

__all__ = ["ALGORITHMS", "SCORINGS", "TUNING_SET", "PartitionConfig"]

#: The benchmark graphs ASEP's default weights were chosen on (every report marks them).
TUNING_SET = ("amazon-computers", "coauthor-physics")

if TYPE_CHECKING:
    from asepr.storage.inputs.directory import InputDir

ALGORITHMS = ("asep", "2ps-l", "2ps-hdrf", "hdrf", "dbh", "greedy", "hash", "metis")
SCORINGS = ("candidates", "hdrf")


def _choices(values) -> str:
    return ", ".join(f'"{v}"' for v in values)


@dataclass(frozen=True)
class PartitionConfig:
    """How to partition.

    Attributes
    ----------
    num_parts
        k, the number of partitions.
    algo
        ``asep`` (default) or a baseline: ``2ps-l``, ``2ps-hdrf`` (the published
        two-phase algorithms, :mod:`asepr.pipeline.assign.twophase`), ``hdrf``, ``dbh``,
        ``greedy``, ``hash``, ``metis`` (in memory, small graphs only).
    scoring
        ASEP only: ``hdrf`` (default) scores all k partitions with an added HDRF
        balance term; ``candidates`` scores only the two community partitions (O(1)
        per edge, as 2PS-L).
    alpha
        Attribute weight of structural clustering: a move into a community of a
        different attribute cluster is allowed only while the target community's
        volume stays under ``(1 - alpha) * cap``. 0 is 2PS-L; 1 forbids every such move.
    beta
        Weight of the attribute-home term of the edge score. alpha = beta = 0.5 by
        default: the lowest mean replication factor against 2PS-HDRF (with the
        two-phase fallback) on the tuning set :data:`TUNING_SET`, both edge orders,
        k = 4, 8, 16, 32, in a sweep of alpha in {0, 0.1, 0.25, 0.5, 0.75} and beta in
        {0, 0.1, 0.25, 0.5, 0.75, 1, 1.5} (``docs/results/asep-tuning``).
    num_attr_clusters
        C; default ``k`` (more clusters cost replication without reaching the
        homogeneity target; ``docs/results/partition-sweep``).
    attr_column
        Use this categorical node column as the attribute clusters instead of k-means.
    lift_reference
        Scale alpha and beta by ``min(1, lift / lift_reference)``, where ``lift`` is
        the measured attribute lift (:mod:`asepr.pipeline.stages.attr_lift`); 0 (default)
        disables scaling, which at the earlier alpha = beta = 0.25 won as many replication cells
        or more (``docs/results/partition-sweep``).
    cluster_passes
        Streaming passes of structural clustering (2PS-L uses 1; more re-stream).
    restream_passes
        ASEP with ``scoring="hdrf"`` and no memory budget *(our choice)*: after its
        stream, stream the edges again this many times, each pass steered by the
        previous one's masters (:mod:`asepr.pipeline.assign.restream`); 0 is the single
        stream.
    keep_attr_together
        ASEP's community mapping keeps an attribute cluster's communities on one
        partition (True) or packs by volume alone like 2PS-L (False).
    epsilon
        Balance slack: the cap is ``ceil((1 + epsilon) * |E| / k)`` edges, or with
        ``capacities`` ``ceil((1 + epsilon) * share_p * |E|)`` for partition p.
    capacities
        k positive numbers, each partition's machine's capacity (``--capacities``, or
        from a cluster file, :func:`asepr.pipeline.capacity.read_cluster_file`); partition p
        takes the share ``W_p / sum(W)`` of the edges and masters
        (:mod:`asepr.pipeline.capacity`). None (default), or all equal (stored as None), is
        an equal share each.
    hdrf_lambda
        Weight of HDRF's balance term.
    two_phase_fallback
        ASEP only *(our choice)*: after its own stream, stream the edges again the way
        the published 2PS-HDRF does (its clustering, mapping, pre-partitioning pass and
        scoring) and keep whichever assignment replicates fewer vertices: a safety net.
        Before the restreaming (``restream_passes``) the two-phase stream was lower on
        most graphs (``docs/results/asep-tuning``); with it ASEP's own stream is lower on
        most cells (``docs/results/asep-stream``). With the fallback ASEP is never above
        2PS-HDRF, for two more edge passes and one more clustering pass.
    concurrent_fallback
        Run the fallback's stream on a thread beside ASEP's own (default): on a spare
        core it then costs little wall time, for a second O(|V|) kernel state held at
        the same time (the plan counts it). False runs it after ASEP's; the assignment
        is the same either way.
    memory_budget
        ``asep`` and ``hdrf``: bytes the hybrid assignment may hold beyond the O(|V|)
        state (:mod:`asepr.pipeline.assign.hybrid`): the edges of the vertices up to a degree
        threshold are held and partitioned by neighbourhood expansion, the rest are
        streamed. 0 (default) is pure streaming; about 12 bytes per edge plus 28 per
        vertex holds the whole graph (``docs/results/hybrid``).
    seed
        Seeds k-means, the projection and the hash baselines.
    projection_dim, projection_threshold
        k-means runs on features wider than ``projection_threshold`` after a seeded
        random projection to ``projection_dim`` dimensions. Default 256 and 256: 64
        dimensions lost the clusters' signal on the wide shared datasets, 256 kept it
        (``docs/results/partition-sweep``).
    kmeans_max_passes, kmeans_tol, kmeans_sample
        k-means (:func:`asepr.pipeline.stages.attr_cluster.attribute_clusters`) fits on a
        uniform sample of ``max(kmeans_sample, 1024 · C)`` rows (at most 128 MiB
        embedded) with up to ``kmeans_max_passes`` Lloyd updates per restart, stopping
        when no centroid moves by ``kmeans_tol``; one further pass labels every node
        (``docs/results/kmeans``).
    undirected
        Whether each edge row stands for both directions (default: the input's meta).
    """

    num_parts: int
    algo: str = "asep"
    scoring: str = "hdrf"
    alpha: float = 0.5
    beta: float = 0.5
    num_attr_clusters: int | None = None
    attr_column: str | None = None
    lift_reference: float = 0.0
    cluster_passes: int = 1
    restream_passes: int = 1
    keep_attr_together: bool = True
    epsilon: float = 0.05
    hdrf_lambda: float = 1.0
    two_phase_fallback: bool = True
    concurrent_fallback: bool = True
    memory_budget: int = 0
    seed: int = 0
    kmeans_max_passes: int = 10
    kmeans_tol: float = 1e-4
    kmeans_sample: int = 20_000
    projection_dim: int = 256
    projection_threshold: int = 256
    batch_rows: int = 1 << 20
    undirected: bool | None = None
    capacities: tuple[float, ...] | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.algo not in ALGORITHMS:
            raise InputError(
                f'Unsupported algorithm "{self.algo}". Valid choices are {_choices(ALGORITHMS)}.'
            )
        if self.scoring not in SCORINGS:
            raise InputError(
                f'Unsupported scoring "{self.scoring}". Valid choices are {_choices(SCORINGS)}.'
            )
        if not isinstance(self.num_parts, int) or self.num_parts < 1:
            raise InputError(f"-k: expected a positive number of partitions, found {self.num_parts!r}.")
        if self.num_parts > 32767:
            raise InputError(f"-k: at most 32767 partitions are supported, found {self.num_parts}.")
        if not 0.0 <= self.alpha <= 1.0:
            raise InputError(f"--alpha: expected a value in [0, 1], found {self.alpha}.")
        if self.beta < 0:
            raise InputError(f"--beta: expected a value >= 0, found {self.beta}.")
        if not self.hdrf_lambda > 0:
            raise InputError(f"hdrf_lambda: expected a value > 0, found {self.hdrf_lambda}.")
        if self.epsilon < 0:
            raise InputError(f"--epsilon: expected a value >= 0, found {self.epsilon}.")
        if self.num_attr_clusters is not None and self.num_attr_clusters < 1:
            raise InputError(
                f"--attr-clusters: expected a positive count, found {self.num_attr_clusters}."
            )
        if not isinstance(self.memory_budget, int) or self.memory_budget < 0:
            raise InputError(f"--memory-budget: expected a byte count >= 0, found {self.memory_budget!r}.")
        if self.memory_budget > 0 and self.algo not in ("asep", "hdrf"):
            raise InputError(f"--memory-budget: the hybrid runs with --algo asep or hdrf, found {self.algo!r}.")
        if not isinstance(self.restream_passes, int) or self.restream_passes < 0:
            raise InputError(f"--restream-passes: expected a count >= 0, found {self.restream_passes!r}.")
        if self.cluster_passes < 1:
            raise InputError(f"--cluster-passes: expected >= 1, found {self.cluster_passes}.")
        if self.batch_rows < 1:
            raise InputError(f"--batch-rows: expected a positive count, found {self.batch_rows}.")
        object.__setattr__(self, "capacities", normalise_capacities(self.capacities, self.num_parts))

    @property
    def shares(self) -> tuple[float, ...] | None:
        """Each partition's share of the edges and masters; None for equal shares."""
        return shares_of(self.capacities)

    @property
    def attr_clusters(self) -> int:
        return self.num_attr_clusters or self.num_parts

    @property
    def uses_communities(self) -> bool:
        return self.algo in ("asep", "2ps-l", "2ps-hdrf")

    @property
    def uses_attributes(self) -> bool:
        return self.algo == "asep"

    @property
    def uses_restream(self) -> bool:
        """ASEP's streaming run with all-k scoring restreams (:mod:`asepr.pipeline.assign.restream`)."""
        return (self.algo == "asep" and self.restream_passes > 0 and self.scoring == "hdrf"
                and self.memory_budget == 0)

    @property
    def uses_two_phase_fallback(self) -> bool:
        return self.algo == "asep" and self.two_phase_fallback

    def two_phase_config(self) -> PartitionConfig:
        """The configuration ASEP's two-phase fallback streams: 2PS-HDRF's (no budget)."""
        return replace(self, algo="2ps-hdrf", memory_budget=0).effective()

    def resolved(self, source: InputDir) -> PartitionConfig:
        """This configuration with what the input decides filled in.

        ``undirected`` left as None takes the input's ``meta.json`` value (else False).
        The one place a run resolves it.
        """
        if self.undirected is not None:
            return self
        return replace(self, undirected=source.undirected)

    def effective(self) -> "PartitionConfig":
        """The configuration the kernels actually run: baselines pin alpha/beta/scoring."""
        if self.algo == "2ps-l":
            return replace(self, alpha=0.0, beta=0.0, scoring="candidates", cluster_passes=1,
                           two_phase_fallback=False)
        if self.algo == "2ps-hdrf":
            return replace(self, alpha=0.0, beta=0.0, scoring="hdrf", cluster_passes=1, two_phase_fallback=False)
        return self

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON-ready values; ``capacities`` only when they are not all equal
        (so that a uniform run's manifest, state and run key are what they always were)."""
        out = asdict(self)
        out["num_attr_clusters"] = self.attr_clusters
        if self.capacities is None:
            del out["capacities"]
        else:
            out["capacities"] = list(self.capacities)
        return out
