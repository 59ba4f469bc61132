"""``TrainConfig``: every knob of local training, reconciliation and the round loop.

Defaults follow docs/design.md#reconciliation-rounds (τ = 0.5, μ = 1 for the
contrastive term; KD with temperature T for S student steps). The resolved config is written next to every
checkpoint, and ``--resume`` refuses a run directory whose config differs in a field
that changes the result.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from storage.errors import format_problem

__all__ = ["EVAL_MODES", "FDS_PARTITIONERS", "MODELS", "RECONCILE_PARTS", "SCAFFOLD_CONTROLS", "SERVER_OPTIMIZERS",
           "STRATEGIES", "TASKS", "TrainConfig", "load_config", "parse_reconcile"]

MODELS = ("sage", "gcn", "gat")
#: ``--fds-partition``: the fds baseline's vertex partition (:mod:`training.fds.partition`).
FDS_PARTITIONERS = ("auto", "metis", "hash")
TASKS = ("node", "link")
#: ``--eval``: the global model's exact whole-graph metrics, or the cheap partition-local ones.
EVAL_MODES = ("exact", "local")
#: The building blocks of a reconciliation strategy, joined by "+".
RECONCILE_PARTS = ("avg", "kd", "con", "corr", "scaffold")
#: ``--server-opt``: the server optimisers of :mod:`training.reconcile.server`.
SERVER_OPTIMIZERS = ("fedavg", "fedavgm", "fedadam")
#: ``--scaffold-control``: where ``scaffold``'s control variates are estimated
#: (:mod:`training.reconcile.scaffold`).
SCAFFOLD_CONTROLS = ("path", "global")
#: The named strategies the benchmark compares (any "+"-combination containing avg is valid).
STRATEGIES = ("avg", "avg+kd", "avg+con", "avg+kd+con", "avg+corr", "avg+scaffold")

# Fields that may differ between a run and its resumption (they do not change the result).
_RESUMABLE = frozenset({"rounds", "timeout_s", "threads", "eval_every", "eval_mode"})


def parse_reconcile(text: str) -> tuple[str, ...]:
    """``"avg+kd+con"`` → ``("avg", "kd", "con")`` in canonical order; ValueError otherwise."""
    parts = [p.strip() for p in str(text).split("+") if p.strip()]
    bad = [p for p in parts if p not in RECONCILE_PARTS]
    if bad or not parts:
        raise ValueError(
            f'Unsupported reconciliation "{text}". Valid parts are '
            + ", ".join(f'"{p}"' for p in RECONCILE_PARTS)
            + ' joined by "+", e.g. "avg+kd+con".'
        )
    if "avg" not in parts:
        raise ValueError(
            f'Reconciliation "{text}" has no "avg": the global model is the (weighted) average of '
            'the local models, which kd and con refine. Use e.g. "avg+kd".'
        )
    return tuple(p for p in RECONCILE_PARTS if p in parts)


_JSON_NAMES = {"int": "integer", "float": "number", "str": "string", "bool": "boolean"}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _json_type_problem(annotation: str, value: Any) -> str | None:
    """What a field annotated ``annotation`` expects, when ``value`` is not that; else None."""
    base, _, optional = annotation.partition("|")
    base = base.strip()
    if value is None:
        return None if optional.strip() == "None" else "a JSON " + _JSON_NAMES.get(base, "array")
    if base == "int":
        ok, expected = _is_int(value), "a JSON integer"
    elif base == "float":
        ok, expected = _is_int(value) or isinstance(value, float), "a JSON number"
    elif base == "str":
        ok, expected = isinstance(value, str), "a JSON string"
    elif base == "bool":
        ok, expected = isinstance(value, bool), "a JSON boolean"
    else:  # tuple[int, ...]
        ok = isinstance(value, (list, tuple)) and all(_is_int(v) for v in value)
        expected = "a JSON array of integers"
    return None if ok else expected + (" or null" if optional.strip() == "None" else "")


@dataclass(frozen=True)
class TrainConfig:
    """Local training, reconciliation and round-loop settings.

    Parameters
    ----------
    task
        ``"node"`` (classification: accuracy, or ROC-AUC with two classes) or ``"link"``
        (prediction: MRR, Hits@50 and AUC over held-out edges).
    model
        ``"sage"``, ``"gcn"`` or ``"gat"`` (``torch_geometric.nn`` convolutions).
    hidden, num_layers, dropout, heads
        Width, depth, dropout and (GAT only) attention heads of the hidden layers.
        Dropout defaults to 0.5 for node classification and 0 for link prediction.
    lr, weight_decay
        Adam on the local model (its moments persist across rounds and are checkpointed).
        ``lr`` defaults to 0.01 for node classification and 0.001 for link prediction.
    rounds, local_epochs
        R reconciliation rounds of E local epochs each.
    reconcile
        ``"avg"`` joined by ``"+"`` with any of ``"kd"``, ``"con"``, ``"corr"``,
        ``"scaffold"`` (:mod:`training.reconcile`). Default ``"avg+scaffold"`` for both
        tasks (link prediction: chosen on Cora, where ``avg`` fell 10 % or more below
        centralized MRR on one seed of three and ``avg+scaffold`` on none;
        docs/results/train-link-scaffold).
    mu, tau
        Weight and temperature of the cross-layer contrastive loss. ``mu`` defaults to
        1 for node classification and 0.01 for link prediction.
    kd_steps, kd_temperature, kd_lr
        Ensemble distillation: S student steps at temperature T with Adam(kd_lr);
        ``kd_lr`` defaults to ``lr / 10``.
    server_opt, server_lr, server_momentum, server_beta2, server_tau
        The server optimiser applied to each round's averaged update
        (:class:`training.reconcile.server.ServerOptimizer`): ``"fedavg"`` (the average
        itself at ``server_lr`` 1), ``"fedavgm"`` (momentum ``server_momentum``) or
        ``"fedadam"`` (β₁ ``server_momentum``, β₂ ``server_beta2``, τ ``server_tau``).
        ``server_lr`` defaults to 1 for fedavg and fedavgm and to 0.01 for fedadam.
    corr_steps, corr_batch_size, corr_lr
        ``corr`` (:mod:`training.reconcile.correct`): per round, ``corr_steps`` Adam
        steps at ``corr_lr`` (default ``lr``) on the global model, each on
        ``corr_batch_size`` seeds per rank sampled with their whole-graph neighbourhoods.
    batch_size, fanouts
        Mini-batches of ``batch_size`` seeds (default 256: training nodes, or training
        edges for link prediction) with a uniform neighbour sampler of ``fanouts`` per
        layer (one per layer, default ``(10, 10)``); 0 trains full-batch on the local
        partition.
    sync_every
        N > 0 (default 10 for node classification): every rank takes the same number of
        optimiser steps per round
        (``local_epochs`` epochs of the whole training set, see
        :func:`training.local.steps_per_round`) and the ranks reconcile after every N
        of them (full-batch, a step is an epoch). 0 (default for link prediction): they
        reconcile once per round, after ``local_epochs`` epochs each.
    scaffold_clip
        ``scaffold``: > 0 bounds each step's correction to this multiple of the raw
        gradient's norm (:class:`training.reconcile.scaffold.ControlVariates`); 0: unbounded.
        Default 0.5: unbounded, the correction lowered coauthor-cs's plateau by 0.4
        points; at 0.5 it is level with ``avg`` there and keeps amazon-photo's gain
        (docs/results/train-tuning/drift).
    scaffold_memory
        ``scaffold``: in [0, 1), the weight of a rank's previous control variate in the
        next (an exponential average over synchronisation segments, whose single means are
        noisy estimates); 0: each segment's mean alone.
    scaffold_shrink
        ``scaffold``: scale the correction by the ranks' mean cosine between each rank's
        last two corrections, an estimate of the share that is drift rather than noise
        (:class:`training.reconcile.scaffold.ControlVariates`). Default off: on the tuning
        graphs (coauthor-cs, amazon-photo, facebook-pagepage, k = 8) it is level with the
        ungated correction, and on the report graphs it trades amazon-computers k = 8
        (−0.7 points) for coauthor-physics k = 8 (docs/results/train-scaffold).
    scaffold_threshold
        ``scaffold`` with ``scaffold_shrink``: in [0, 1]; > 0 opens the gate fully while
        the agreement is at least this and closes it below (a test, not a weight); 0
        scales by the agreement.
    scaffold_weigh_segments
        ``scaffold`` along the path with ``sync_every`` > 0: a segment shorter than
        ``sync_every`` steps (a round's tail) moves the control variate only by its share
        of a full segment (:class:`training.reconcile.scaffold.ControlVariates`). Default
        on: on the tuning graphs (coauthor-cs, amazon-photo, facebook-pagepage, k = 8) it
        is +0.1 on the mean, and it removes coauthor-physics k = 8's miss against fds
        (docs/results/train-scaffold/README.md).
    scaffold_control, scaffold_batches
        ``scaffold``: where a rank's control variate is estimated
        (:mod:`training.reconcile.scaffold`): ``"path"`` (default), the mean gradient of
        the segment of local steps just trained; ``"global"``, the gradient at the
        synchronised global model, over ``scaffold_batches`` mini-batches (0: the whole
        local training set in one full-batch pass), computed after every
        synchronisation (docs/results/train-scaffold-global).
    sync_warmup
        Epochs at the start of the run in which the ranks reconcile after every
        optimiser step (with ``sync_every`` > 0), before local SGD takes over: post-local
        SGD (Lin et al., "Don't Use Large Mini-Batches, Use Local SGD", ICLR 2020). Early
        in training the ranks' local steps point in different directions and their
        average keeps little of them; synchronous steps there cost bytes, not progress.
        A fraction of an epoch is allowed; 0: local SGD from the first step.

    The defaults of ``reconcile``, ``batch_size``, ``sync_every`` and ``server_opt`` are
    those that measured best on the tuning graphs (docs/results/train-tuning).
    link_val_fraction, link_test_fraction, link_eval_negatives
        Link prediction: the held-out shares of the edges (chosen by a hash of the
        global edge, so every rank and the centralized run hold out the same edges), and
        the negatives ranked against each held-out edge, drawn uniformly among every
        vertex of the whole graph (or, above ``link_eval_pool`` vertices, a seeded sample
        of that many shared by all ranks), whose embeddings the ranks gather once per
        evaluation: the same candidates for every strategy.
    negative_pool, remote_negatives
        Link prediction with several ranks: each rank receives about ``negative_pool``
        vertices of the other partitions with their sampled computation graph (once, at
        setup; :mod:`training.negatives`), and draws a share ``remote_negatives`` (in
        [0, 1]) of its training negatives among them, embedded by its own model; the
        rest are uniform among its own rows. ``negative_pool`` 0 (the default): none.
    feature_norm
        ``"l2"`` (default) divides each node's feature row by its L2 norm (rows of zeros
        stay zero), ``"l1"`` by its L1 norm (PyG's ``NormalizeFeatures``), ``"none"``
        keeps the stored values. A per-row operation, so every rank and the centralized
        run normalise identically. Measured on amazon-computers (767-d bag of words,
        GraphSAGE, centralized, 30 epochs): validation accuracy 0.737 with l2, 0.375
        (the majority class) with l1, whose rows of up to 700 ones become values too
        small to learn from at lr 0.01; with raw features, 4 ranks stayed at the majority
        class for 6 rounds (first loss 4.4).
    feature_projection
        0 (default) trains on the stored features. P > 0 first multiplies features wider
        than P by one seeded Gaussian matrix (d × P, scaled by 1/√P; the same on every
        rank and in the centralized run), which roughly preserves distances
        (Johnson–Lindenstrauss) and makes the first layer d/P times cheaper: for
        bag-of-words features with thousands of dimensions.
    seed
        All randomness (init, dropout, sampling, negatives) derives from it, per round
        and rank, so a resumed run reproduces an uninterrupted one.
    timeout_s
        Process-group timeout: a rank blocked on a dead peer fails after this long.
    threads
        torch CPU threads per rank (0: cores / ranks, at least 1).
    eval_every
        Evaluate the global model (and log a metrics row) every this many epochs of
        training; 0 (default): every ``local_epochs`` epochs, i.e. every round. A
        strategy with a global model after every step (centralized, fds) is evaluated
        exactly every ``eval_every`` epochs; ASEPR has one only at a synchronisation
        point, so it is evaluated at the end of the first round that reaches each
        multiple of ``eval_every`` epochs (every round when ``eval_every <=
        local_epochs``). With ``eval_every`` a multiple of ``local_epochs`` every
        strategy is evaluated after the same epochs. The last round is always evaluated.
    eval_mode
        ``"exact"`` (default): the global model's metrics on the whole graph
        (:class:`training.inference.Evaluator`); ``"local"``: each rank scores its own
        master nodes with the model run on its partition only (cheaper, not exact).
    """

    task: str = "node"
    model: str = "sage"
    hidden: int = 128
    num_layers: int = 2
    dropout: float | None = None
    heads: int = 4
    lr: float | None = None
    weight_decay: float = 5e-4
    rounds: int = 10
    local_epochs: int = 5
    reconcile: str = "avg+scaffold"
    mu: float | None = None
    tau: float = 0.5
    kd_steps: int = 10
    kd_temperature: float = 2.0
    kd_lr: float | None = None
    batch_size: int = 256
    fanouts: tuple[int, ...] = field(default=(10, 10))
    sync_every: int | None = None
    sync_warmup: float = 0.0
    scaffold_clip: float = 0.5
    scaffold_memory: float = 0.0
    scaffold_shrink: bool = False
    scaffold_threshold: float = 0.0
    scaffold_weigh_segments: bool = True
    scaffold_control: str = "path"
    scaffold_batches: int = 0
    server_opt: str = "fedavg"
    server_lr: float | None = None
    server_momentum: float = 0.9
    server_beta2: float = 0.99
    server_tau: float = 1e-3
    corr_steps: int = 4
    corr_batch_size: int = 256
    corr_lr: float | None = None
    link_val_fraction: float = 0.05
    link_test_fraction: float = 0.10
    link_eval_negatives: int = 100
    link_eval_pool: int = 1 << 14
    negative_pool: int = 0
    remote_negatives: float = 0.5
    feature_norm: str = "l2"
    feature_projection: int = 0
    seed: int = 0
    timeout_s: float = 300.0
    threads: int = 0
    eval_every: int = 0
    eval_mode: str = "exact"

    def __post_init__(self) -> None:
        def bad(name: str, expected: str) -> ValueError:
            return ValueError(
                format_problem(f"TrainConfig.{name}", expected, repr(getattr(self, name)),
                               f"pass a valid --{name.replace('_', '-')}.")
            )

        if self.task not in TASKS:
            raise ValueError(f'Unsupported task "{self.task}". Valid choices are "node", "link".')
        if self.feature_norm not in ("l2", "l1", "none"):
            raise ValueError(f'Unsupported feature_norm "{self.feature_norm}". Valid choices are "l1", "l2", "none".')
        if self.model not in MODELS:
            raise ValueError(f'Unsupported model "{self.model}". Valid choices are "sage", "gcn", "gat".')
        object.__setattr__(self, "reconcile", "+".join(parse_reconcile(self.reconcile)))
        if self.eval_mode not in EVAL_MODES:
            raise ValueError(f'Unsupported eval_mode "{self.eval_mode}". Valid choices are "exact", "local".')
        # Task-dependent defaults (measured on Cora): dot-product link prediction with
        # GraphSAGE collapses to a constant embedding at lr 0.01 (MRR 0.02, chance level),
        # and learns at lr 0.001 without dropout (MRR 0.53 after 60 epochs).
        if self.lr is None:
            object.__setattr__(self, "lr", 0.01 if self.task == "node" else 0.001)
        if self.dropout is None:
            object.__setattr__(self, "dropout", 0.5 if self.task == "node" else 0.0)
        if self.mu is None:
            # The contrastive gradient is cosine-based, ~1/|z|, while the dot-product link
            # loss's grows with |z|: at mu 1 it was 10x the link loss's on Cora and, Adam
            # following the larger one, kept the link loss at chance (2 ln 2). At 0.01 it is
            # a tenth of it (docs/results/train-tuning).
            object.__setattr__(self, "mu", 1.0 if self.task == "node" else 0.01)
        if self.sync_every is None:
            object.__setattr__(self, "sync_every", 10 if self.task == "node" else 0)
        if not 0 <= float(self.remote_negatives) <= 1:
            raise bad("remote_negatives", "a share in [0, 1]")
        if self.kd_lr is None:
            # Measured on amazon-computers, 4 ranks, 6 rounds: kd_lr = lr/2 left avg+kd at
            # 0.654 test accuracy against avg's 0.716; lr/10 at 0.703.
            object.__setattr__(self, "kd_lr", self.lr / 10)
        object.__setattr__(self, "fanouts", tuple(int(f) for f in self.fanouts))
        for name in ("hidden", "num_layers", "heads", "rounds", "local_epochs"):
            if int(getattr(self, name)) < 1:
                raise bad(name, "an integer >= 1")
        if self.server_opt not in SERVER_OPTIMIZERS:
            raise ValueError(f'Unsupported server_opt "{self.server_opt}". Valid choices are '
                             + ", ".join(f'"{k}"' for k in SERVER_OPTIMIZERS) + ".")
        if self.server_lr is None:
            object.__setattr__(self, "server_lr", 0.01 if self.server_opt == "fedadam" else 1.0)
        if self.corr_lr is None:
            object.__setattr__(self, "corr_lr", self.lr)
        for name in ("server_momentum", "server_beta2"):
            if not 0 <= float(getattr(self, name)) < 1:
                raise bad(name, "a number in [0, 1)")
        for name in ("sync_every", "corr_steps", "corr_batch_size"):
            if int(getattr(self, name)) < 0:
                raise bad(name, "an integer >= 0")
        for name in ("kd_steps", "batch_size", "threads", "link_eval_negatives", "feature_projection", "eval_every",
                     "negative_pool", "link_eval_pool"):
            if int(getattr(self, name)) < 0:
                raise bad(name, "an integer >= 0")
        for name in ("lr", "kd_lr", "tau", "kd_temperature", "timeout_s", "server_lr", "server_tau", "corr_lr"):
            if not float(getattr(self, name)) > 0:
                raise bad(name, "a number > 0")
        if not float(self.scaffold_clip) >= 0:
            raise bad("scaffold_clip", "a number >= 0")
        if not 0 <= float(self.scaffold_memory) < 1:
            raise bad("scaffold_memory", "a number in [0, 1)")
        if not 0 <= float(self.scaffold_threshold) <= 1:
            raise bad("scaffold_threshold", "a number in [0, 1]")
        if self.scaffold_control not in SCAFFOLD_CONTROLS:
            raise ValueError(f'Unsupported scaffold_control "{self.scaffold_control}". Valid choices are '
                             + ", ".join(f'"{k}"' for k in SCAFFOLD_CONTROLS) + ".")
        if int(self.scaffold_batches) < 0:
            raise bad("scaffold_batches", "an integer >= 0")
        if not float(self.sync_warmup) >= 0:
            raise bad("sync_warmup", "a number of epochs >= 0")
        for name in ("mu", "weight_decay"):
            if not float(getattr(self, name)) >= 0:
                raise bad(name, "a number >= 0")
        if not 0 <= self.dropout < 1:
            raise bad("dropout", "a number in [0, 1)")
        if self.batch_size and len(self.fanouts) != self.num_layers:
            raise bad("fanouts", f"one fanout per layer ({self.num_layers} numbers)")
        if self.batch_size and any(f < 1 for f in self.fanouts):
            raise bad("fanouts", "fanouts >= 1")
        if not (0 <= self.link_val_fraction and 0 <= self.link_test_fraction
                and self.link_val_fraction + self.link_test_fraction < 0.5):
            raise bad("link_test_fraction", "val and test fractions >= 0 that sum to under 0.5")
        if self.model == "gat" and self.hidden % self.heads:
            raise bad("hidden", f"a multiple of heads={self.heads} for GAT")

    @property
    def parts(self) -> tuple[str, ...]:
        return parse_reconcile(self.reconcile)

    @property
    def eval_interval(self) -> int:
        """Epochs between evaluations: ``eval_every``, or ``local_epochs`` when it is 0."""
        return int(self.eval_every or self.local_epochs)

    @property
    def uses_kd(self) -> bool:
        return "kd" in self.parts

    @property
    def uses_con(self) -> bool:
        return "con" in self.parts and self.mu > 0

    @property
    def uses_scaffold(self) -> bool:
        return "scaffold" in self.parts

    @property
    def uses_corr(self) -> bool:
        return "corr" in self.parts and self.corr_steps > 0 and self.corr_batch_size > 0

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["fanouts"] = list(self.fanouts)
        return d

    @classmethod
    def from_dict(cls, d: Any, source: str = "TrainConfig") -> TrainConfig:
        """The config a JSON object describes (as :meth:`to_dict` writes it), strictly checked.

        Fields left out take their defaults. An unknown field, or a value of another JSON
        type than the field's (a string for a number, a boolean for an integer, ...), is
        refused.

        Parameters
        ----------
        d
            The decoded JSON object.
        source
            What ``d`` was read from (a file path), named in the error.

        Raises
        ------
        ValueError
            ``d`` is not an object, has an unknown field or a value of the wrong type, or
            the values are out of range (:meth:`__post_init__`).
        """
        fix = "write it with `asepr train` (RUN/config.json), or correct the field."
        if not isinstance(d, dict):
            raise ValueError(format_problem(source, "a JSON object of TrainConfig fields", type(d).__name__, fix))
        fields = {f.name: str(f.type) for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - set(fields))
        if unknown:
            raise ValueError(format_problem(source, "TrainConfig fields only", f"unknown fields {unknown}", fix))
        for name, value in d.items():
            expected = _json_type_problem(fields[name], value)
            if expected:
                raise ValueError(format_problem(f"{source}, field {name!r}", expected, repr(value), fix))
        try:
            return cls(**d)
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from None

    def resume_conflicts(self, saved: dict[str, Any]) -> list[str]:
        """Fields (other than ``rounds``, timeouts, threads) that differ from a saved config."""
        mine = self.to_dict()
        return sorted(k for k, v in saved.items() if k in mine and k not in _RESUMABLE and mine[k] != v)


def load_config(path: str | Path) -> TrainConfig:
    """The :class:`TrainConfig` of a JSON file (``RUN/config.json``), strictly checked.

    Raises
    ------
    ValueError
        Naming ``path``: it is missing or unreadable, not JSON, or not a valid config
        (:meth:`TrainConfig.from_dict`).
    """
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ValueError(format_problem(f"config file {path}", "a TrainConfig as JSON",
                                        exc.strerror or str(exc), "pass the config.json that `asepr train` wrote.")) \
            from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(format_problem(f"config file {path}", "a TrainConfig as JSON", f"invalid JSON ({exc})",
                                        "pass the config.json that `asepr train` wrote.")) from None
    return TrainConfig.from_dict(data, source=f"config file {path}")
