"""``TrainConfig``: every knob of local training, reconciliation and the round loop.

Defaults follow docs/design.md#reconciliation-rounds (τ = 0.5, μ = 1 for the
contrastive term; KD with temperature T for S student steps). The resolved config is written next to every
checkpoint, and ``--resume`` refuses a run directory whose config differs in a field
that changes the result.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from asepr.storage.errors import format_problem

__all__ = ["AUTO_BATCH_MAX", "AUTO_BATCH_MIN", "AUTO_BATCH_STEPS", "DEFAULT_EVAL_SAMPLE", "DEVICES", "EVAL_MODES", "FDS_PARTITIONERS", "MODELS", "RECONCILE_PARTS", "REMOVED_FIELDS",
           "SERVER_OPTIMIZERS", "STRATEGIES", "TASKS", "TrainConfig", "load_config", "parse_batch_size",
           "parse_reconcile", "removed_conflicts", "resolve_batch_size"]

MODELS = ("sage", "gcn", "gat")
#: ``--fds-partition``: the fds baseline's vertex partition (:mod:`asepr.training.fds.partition`).
FDS_PARTITIONERS = ("auto", "metis", "hash")
TASKS = ("node", "link")
#: ``--eval``: the global model's exact whole-graph metrics, or the cheap partition-local ones.
EVAL_MODES = ("exact", "local")
#: ``eval_sample``'s default (see :data:`asepr.training.evaluation.eval_sample.DEFAULT_EVAL_SAMPLE`).
DEFAULT_EVAL_SAMPLE = 5_000
#: ``--device``: where the model, the batches and the evaluation run (auto: CUDA when present).
DEVICES = ("auto", "cuda", "cpu")
#: The building blocks of a reconciliation strategy, joined by "+".
RECONCILE_PARTS = ("avg", "kd", "con", "corr", "scaffold")
#: ``--server-opt``: the server optimisers of :mod:`asepr.training.reconcile.server`.
SERVER_OPTIMIZERS = ("fedavg", "fedavgm", "fedadam")
#: The named strategies the benchmark compares (any "+"-combination containing avg is valid).
STRATEGIES = ("avg", "avg+kd", "avg+con", "avg+kd+con", "avg+corr", "avg+scaffold")

#: ``batch_size="auto"``: the centralized run's batch gives it at least this many optimiser
#: steps per epoch, between :data:`AUTO_BATCH_MIN` and :data:`AUTO_BATCH_MAX` seeds
#: (:func:`resolve_batch_size`); each rank of a node task takes its share of that batch.
AUTO_BATCH_STEPS = 4
#: The largest automatic batch: a centralized run with at least ``AUTO_BATCH_STEPS · 256 - 3``
#: training seeds trains with 256.
AUTO_BATCH_MAX = 256
#: The smallest automatic batch (a rank with a handful of training seeds).
AUTO_BATCH_MIN = 16


def parse_batch_size(text: str) -> int | str:
    """``--batch-size``: ``"auto"`` or an integer >= 0; ValueError otherwise."""
    text = str(text).strip()
    if text == "auto":
        return "auto"
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f'Unsupported batch size "{text}". Valid values are "auto" or an integer >= 0 '
                         "(0: full-batch).")
    return value


def resolve_batch_size(batch_size: int | str, num_train: int, total_train: int | None = None) -> int:
    """The seeds per step of a rank holding ``num_train`` of the ``total_train`` training
    seeds of all ranks (nodes, or edges for link prediction; ``None``: this rank holds them
    all): ``batch_size`` itself when it is an integer (0: full-batch).

    ``"auto"``: the centralized batch ``B = min(256, max(16, ceil(total_train / 4)))`` (at
    least :data:`AUTO_BATCH_STEPS` steps per epoch), and this rank's share of it,
    ``ceil(B · num_train / total_train)``, at least :data:`AUTO_BATCH_MIN`. Every rank then
    takes about as many optimiser steps per epoch as the centralized run, whatever the
    number of ranks: averaging W ranks' steps of ``B / W`` seeds is one step of ``B``.
    With batches of 256 on every rank, W ranks take W times fewer steps per epoch than
    the centralized run, and the global model falls behind it at large W
    (docs/results/train-headline).
    """
    if batch_size != "auto":
        return int(batch_size)
    num_train = int(num_train)
    total = num_train if total_train is None else max(int(total_train), num_train)
    central = min(AUTO_BATCH_MAX, max(AUTO_BATCH_MIN, math.ceil(total / AUTO_BATCH_STEPS)))
    if total <= 0:
        return central
    return min(central, max(AUTO_BATCH_MIN, math.ceil(central * num_train / total)))


# Fields that may differ between a run and its resumption (they do not change the result).
_RESUMABLE = frozenset({"rounds", "timeout_s", "threads", "device", "eval_every", "eval_mode", "patience"})

#: Fields of version 0.1 that are gone, each with the value whose behaviour is now built
#: in (``None``: the value followed another field, as the built-in behaviour does). A
#: saved config (``RUN/config.json``) that holds one at that value is read as before; at
#: any other value it is refused, naming the field: this version cannot reproduce that
#: run. The results pages that used them keep their commands (docs/results/train-*).
REMOVED_FIELDS: dict[str, Any] = {
    # Did not help (docs/results/train-scaffold, train-scaffold-global, train-tuning/drift,
    # earlier link-prediction runs): the options and their code are gone.
    "scaffold_memory": 0.0, "scaffold_shrink": False, "scaffold_threshold": 0.0, "scaffold_control": "path",
    "scaffold_batches": 0, "scaffold_weigh_segments": True, "sync_warmup": 0.0, "negative_pool": 0,
    "remote_negatives": 0.5,
    # Settings of the kd, con, corr and fedadam strategies, now fixed at their defaults
    # (asepr.training.reconcile.distill, .contrastive, .correct, .server).
    "kd_steps": 10, "kd_temperature": 2.0, "kd_lr": None, "mu": None, "tau": 0.5, "server_beta2": 0.99,
    "server_tau": 1e-3, "corr_steps": 4, "corr_batch_size": 256, "corr_lr": None,
    # The link evaluation's candidate sample (asepr.training.tasks.EVAL_POOL).
    "link_eval_pool": 1 << 14,
}


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
    if annotation == "int | str":  # an integer or a keyword ("auto"), checked by __post_init__
        return None if _is_int(value) or isinstance(value, str) else "a JSON integer or string"
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
    elif base == "tuple[float, ...]":
        ok = isinstance(value, (list, tuple)) and all(_is_int(v) or isinstance(v, float) for v in value)
        expected = "a JSON array of numbers"
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
        ``"scaffold"`` (:mod:`asepr.training.reconcile`). Default ``"avg+scaffold"`` for both
        tasks (link prediction: chosen on Cora, where ``avg`` fell 10 % or more below
        centralized MRR on one seed of three and ``avg+scaffold`` on none;
        docs/results/train-link-scaffold). ``kd``, ``con`` and ``corr`` run with fixed
        settings (:mod:`asepr.training.reconcile.distill`, :mod:`~asepr.training.reconcile.contrastive`,
        :mod:`~asepr.training.reconcile.correct`).
    batch_size, fanouts
        Mini-batches of ``batch_size`` seeds (training nodes, or training edges for link
        prediction) with a uniform neighbour sampler of ``fanouts`` per layer (one per
        layer, default ``(10, 10)``); 0 trains full-batch on the local partition. The
        default ``"auto"`` (:func:`resolve_batch_size`) gives the centralized run
        ``min(256, max(16, ceil(n_train / 4)))`` seeds per step and each rank of a node
        task its share of that batch, in proportion to its training seeds (at least 16):
        every rank then takes about as many steps per epoch as the centralized run. A
        link-prediction rank resolves the centralized rule on its own training edges
        (its cells were measured under that rule). fds, a trainer of its own with a step
        per batch on every rank together, keeps its batch of 256.
    sync_every
        N > 0 (default 10 for node classification): every rank takes the same number of
        optimiser steps per round
        (``local_epochs`` epochs of the whole training set, see
        :func:`asepr.training.loop.local.steps_per_round`) and the ranks reconcile after every N
        of them (full-batch, a step is an epoch). 0 (default for link prediction): they
        reconcile once per round, after ``local_epochs`` epochs each.
    scaffold_clip
        ``scaffold``: > 0 bounds each step's correction to this multiple of the raw
        gradient's norm (:class:`asepr.training.reconcile.scaffold.ControlVariates`); 0: unbounded.
        Default 0.5: unbounded, the correction lowered coauthor-cs's plateau by 0.4
        points; at 0.5 it is level with ``avg`` there and keeps amazon-photo's gain
        (docs/results/train-tuning/drift).
    server_opt, server_lr, server_momentum
        The server optimiser applied to each round's averaged update
        (:class:`asepr.training.reconcile.server.ServerOptimizer`): ``"fedavg"`` (the average
        itself at ``server_lr`` 1), ``"fedavgm"`` (momentum ``server_momentum``) or
        ``"fedadam"`` (β₁ ``server_momentum``). ``server_lr`` defaults to 1 for fedavg and
        fedavgm and to 0.01 for fedadam.

    The defaults of ``reconcile``, ``batch_size``, ``sync_every`` and ``server_opt`` are
    those that measured best on the tuning graphs (docs/results/train-tuning).
    link_val_fraction, link_test_fraction, link_eval_negatives
        Link prediction: the held-out shares of the edges (chosen by a hash of the
        global edge, so every rank and the centralized run hold out the same edges), and
        the negatives ranked against each held-out edge, drawn uniformly among every
        vertex of the whole graph (or, on larger graphs, a seeded sample shared by all
        ranks, :data:`asepr.training.tasks.EVAL_POOL`), whose embeddings the ranks gather once
        per evaluation: the same candidates for every strategy.
    feature_norm
        ``"l2"`` (default) divides each node's feature row by its L2 norm (rows of zeros
        stay zero), ``"l1"`` by its L1 norm (PyG's ``NormalizeFeatures``), ``"none"``
        keeps the stored values. A per-row operation, so every rank and the centralized
        run normalise identically. On amazon-computers (767-d bag of words) l1 left the
        model at the majority class, whose rows of up to 700 ones become values too small
        to learn from at lr 0.01.
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
        torch CPU threads per process (0: its share of the idle cores of its machine,
        :func:`asepr.training.loop.rounds.threads`).
    device
        ``"cuda"``: the model, the batches and the evaluation on the rank's GPU (NCCL
        between ranks); ``"cpu"`` (gloo); ``"auto"`` (default): CUDA when present.
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
        (:class:`asepr.training.evaluation.inference.Evaluator`); ``"local"``: each rank scores its own
        master nodes with the model run on its partition only (cheaper, not exact).
    eval_sample
        The exact evaluation of a node task scores about this many validation (and
        test) masters, a sample seeded by ``seed`` and the same in every round and on
        every rank, with the metric's 95 % interval (:mod:`asepr.training.evaluation.eval_sample`); a
        split of at most twice this many is scored whole. 0: every master. Default
        :data:`DEFAULT_EVAL_SAMPLE` (5,000).
    patience
        P > 0: stop training once the validation metric has not improved for P
        evaluations in a row (early stopping, :func:`asepr.training.protocol.patience_spent`),
        at most after ``rounds`` rounds; every rank sees the same global metric, so all
        stop after the same round. 0 (default): train every round.
    speeds, measure_speeds
        Capacity-aware training (:mod:`asepr.training.group.capacity`): in each synchronised segment of
        ``sync_every`` steps rank r takes ``max(1, round(sync_every · speed_r / max_speed))``,
        and the reconciliation normalises each rank's update by its steps (FedNova).
        ``speeds``: one relative speed per rank, declared (``--speeds``, or a cluster file's
        machines, ``--cluster``); ``measure_speeds``: each rank's seconds per step measured
        over the first segment the run trains. Neither (default): every rank takes the same
        steps, as before.
    deadline
        F > 0: a segment closes at F times the fastest rank's segment time; each rank takes
        the steps that fit at its speed (declared, or measured as with ``measure_speeds``),
        at least one and at most the segment's, and the updates are normalised by their
        steps. 0 (default): every segment waits for every rank's steps.
    slowdown
        One factor per rank (default none: 1 each): the modelled cluster time counts rank
        r's measured CPU seconds times its factor (``compute_s_cum_max``,
        :class:`asepr.training.protocol.ComputeClock`), and a measured speed is divided by it. A
        declared, modelled heterogeneity: training itself is unchanged.
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
    batch_size: int | str = "auto"
    fanouts: tuple[int, ...] = field(default=(10, 10))
    sync_every: int | None = None
    scaffold_clip: float = 0.5
    server_opt: str = "fedavg"
    server_lr: float | None = None
    server_momentum: float = 0.9
    link_val_fraction: float = 0.05
    link_test_fraction: float = 0.10
    link_eval_negatives: int = 100
    feature_norm: str = "l2"
    feature_projection: int = 0
    seed: int = 0
    timeout_s: float = 300.0
    threads: int = 0
    device: str = "auto"
    eval_every: int = 0
    eval_mode: str = "exact"
    eval_sample: int = DEFAULT_EVAL_SAMPLE
    patience: int = 0
    speeds: tuple[float, ...] = ()
    measure_speeds: bool = False
    deadline: float = 0.0
    slowdown: tuple[float, ...] = ()

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
        if self.device not in DEVICES:
            raise ValueError(f'Unsupported device "{self.device}". Valid choices are "auto", "cuda", "cpu".')
        # Task-dependent defaults (measured on Cora): dot-product link prediction with
        # GraphSAGE collapses to a constant embedding at lr 0.01 (MRR 0.02, chance level),
        # and learns at lr 0.001 without dropout (MRR 0.53 after 60 epochs).
        if self.lr is None:
            object.__setattr__(self, "lr", 0.01 if self.task == "node" else 0.001)
        if self.dropout is None:
            object.__setattr__(self, "dropout", 0.5 if self.task == "node" else 0.0)
        if self.sync_every is None:
            object.__setattr__(self, "sync_every", 10 if self.task == "node" else 0)
        object.__setattr__(self, "fanouts", tuple(int(f) for f in self.fanouts))
        for name in ("hidden", "num_layers", "heads", "rounds", "local_epochs"):
            if int(getattr(self, name)) < 1:
                raise bad(name, "an integer >= 1")
        if self.server_opt not in SERVER_OPTIMIZERS:
            raise ValueError(f'Unsupported server_opt "{self.server_opt}". Valid choices are '
                             + ", ".join(f'"{k}"' for k in SERVER_OPTIMIZERS) + ".")
        if self.server_lr is None:
            object.__setattr__(self, "server_lr", 0.01 if self.server_opt == "fedadam" else 1.0)
        if not 0 <= float(self.server_momentum) < 1:
            raise bad("server_momentum", "a number in [0, 1)")
        if isinstance(self.batch_size, str) and self.batch_size != "auto":
            raise bad("batch_size", '"auto" or an integer >= 0')
        for name in ("sync_every", "threads", "link_eval_negatives", "feature_projection",
                     "eval_every", "patience", "eval_sample"):
            if int(getattr(self, name)) < 0:
                raise bad(name, "an integer >= 0")
        if self.batch_size != "auto" and int(self.batch_size) < 0:
            raise bad("batch_size", '"auto" or an integer >= 0')
        for name in ("lr", "timeout_s", "server_lr"):
            if not float(getattr(self, name)) > 0:
                raise bad(name, "a number > 0")
        if not float(self.scaffold_clip) >= 0:
            raise bad("scaffold_clip", "a number >= 0")
        if not float(self.weight_decay) >= 0:
            raise bad("weight_decay", "a number >= 0")
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
        self._check_capacity(bad)

    def _check_capacity(self, bad) -> None:
        """``speeds``, ``measure_speeds``, ``deadline`` and ``slowdown`` (one message per
        problem, naming the field's flag)."""
        for name in ("speeds", "slowdown"):
            values = tuple(float(v) for v in getattr(self, name))
            object.__setattr__(self, name, values)
            if not all(math.isfinite(v) and v > 0 for v in values):
                raise bad(name, "one number > 0 per rank")
        if not (math.isfinite(float(self.deadline)) and float(self.deadline) >= 0):
            raise bad("deadline", "a number >= 0 (0: wait for every rank)")
        if self.speeds and self.measure_speeds:
            raise bad("speeds", "declared speeds or measure_speeds, not both")
        if self.capacity_aware and not self.sync_every:
            raise bad("sync_every", "N > 0 with --speeds, --cluster or --deadline (the ranks' steps are counted "
                                    "per synchronised segment)")

    @property
    def parts(self) -> tuple[str, ...]:
        return parse_reconcile(self.reconcile)

    @property
    def eval_interval(self) -> int:
        """Epochs between evaluations: ``eval_every``, or ``local_epochs`` when it is 0."""
        return int(self.eval_every or self.local_epochs)

    @property
    def capacity_aware(self) -> bool:
        """Whether each rank's local steps follow its speed (:mod:`asepr.training.group.capacity`)."""
        return bool(self.speeds) or bool(self.measure_speeds) or float(self.deadline) > 0

    @property
    def uses_kd(self) -> bool:
        return "kd" in self.parts

    @property
    def uses_con(self) -> bool:
        return "con" in self.parts

    @property
    def uses_scaffold(self) -> bool:
        return "scaffold" in self.parts

    @property
    def uses_corr(self) -> bool:
        return "corr" in self.parts

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["fanouts"] = list(self.fanouts)
        for name in ("speeds", "slowdown"):
            d[name] = list(d[name])
        return d

    @classmethod
    def from_dict(cls, d: Any, source: str = "TrainConfig") -> TrainConfig:
        """The config a JSON object describes (as :meth:`to_dict` writes it), strictly checked.

        Fields left out take their defaults. An unknown field, or a value of another JSON
        type than the field's (a string for a number, a boolean for an integer, ...), is
        refused. A field of :data:`REMOVED_FIELDS` is dropped when it holds the value whose
        behaviour is now built in, and refused otherwise.

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
        removed = removed_conflicts(d)
        if removed:
            raise ValueError(format_problem(source, "the removed fields at the values version 0.2 builds in",
                                            ", ".join(removed), "start a new run, or use version 0.1 for this one."))
        d = {k: v for k, v in d.items() if k not in REMOVED_FIELDS}
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
        """Fields (other than ``rounds``, timeouts, threads, ``patience``) that differ from
        a saved config, and removed fields the saved config set to another behaviour."""
        mine = self.to_dict()
        differ = [k for k, v in saved.items() if k in mine and k not in _RESUMABLE and mine[k] != v]
        return sorted(differ + [c.split("=")[0] for c in removed_conflicts(saved)])


def _builtin(name: str, saved: dict[str, Any]) -> Any:
    """The value of removed field ``name`` whose behaviour version 0.2 builds in, for a
    saved config ``saved`` (some followed the learning rate or the task)."""
    value = REMOVED_FIELDS[name]
    if value is not None:
        return value
    lr = saved.get("lr")
    if name == "kd_lr":
        return None if lr is None else lr / 10
    if name == "corr_lr":
        return lr
    return 1.0 if saved.get("task", "node") == "node" else 0.01  # mu


def removed_conflicts(saved: Any) -> list[str]:
    """``"field=value"`` for each removed field that ``saved`` (a config as JSON) holds
    at another value than the built-in one: a run this version cannot reproduce."""
    if not isinstance(saved, dict):
        return []
    out = []
    for name in REMOVED_FIELDS:
        if name in saved and saved[name] is not None and saved[name] != _builtin(name, saved):
            if name == "remote_negatives" and not saved.get("negative_pool"):
                continue  # the share of a pool there was none of
            out.append(f"{name}={saved[name]!r}")
    return out


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
