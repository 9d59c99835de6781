"""The config's schema: Hydra structured configs, so that Hydra checks every key, type and enum
while it composes the config, before any run directory exists: the config is one typed tree
(docs/configuration.md).

The dataclasses below declare each key's type and meaning (the comment above or beside the
field: `python -m experiments.config.config_doc` turns them into docs/config.md); the YAML files of
conf/ fill them in. Where the ConfigStore holds them:

    commsgd_schema             the root (Config): conf/config.yaml's first defaults entry
    schema/<group>/<option>    one per group option: conf/<group>/<option>.yaml opens with
                               `defaults: [/schema/<group>/<option>@_here_, _self_]`
    schema/algorithm/<name>    built from `algorithms.CONFIGS[name]` (plus `name`; torch-free,
                               algorithms/<stem>_config.py), so a new algorithm needs no edit
                               here; its Config's defaults are the schema's

Checks that span several keys (nesterov needs momentum, workers x alpha < 1, ...) stay by hand
in `experiments.preflight.validate`. Hydra lets `+key=value` add keys that no schema declares;
`unknown_keys` finds them (the pre-flight refuses them). `compute.step_time_s`,
`compute.algo_time_s` and `compute.slowdown` take a name or a number (a list), which OmegaConf
cannot type: they are `Any` here and checked by `experiments.training.clock.make_clock`.

Registration happens on import (importing `experiments` imports this module).
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import inspect
import io
import sys
import tokenize
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional  # noqa: UP035 - OmegaConf reads these annotations

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

ROOT = "commsgd_schema"


class StrEnum(str, enum.Enum):
    """An enum whose members are their own value as a string: `"real" == Timing.real`, and
    JSON, YAML and f-strings see the plain name."""

    def __str__(self) -> str:
        return str(self.value)


def _choices(name: str, words: str) -> type[StrEnum]:
    """The StrEnum `name` whose members are `words` (space-separated), each its own value."""
    return StrEnum(name, [(w, w) for w in words.split()], module=__name__, qualname=name)


Timing = _choices("Timing", "real virtual")
DType = _choices("DType", "float32 float64")
WandbMode = _choices("WandbMode", "disabled offline online")
Topology = _choices("Topology", "allreduce ps")
Backend = _choices("Backend", "auto gloo nccl")
Compression = _choices("Compression", "none fp16 bf16 int8")


# --- nested nodes of the root ---------------------------------------------------------------


@dataclass
class Compute:
    # Modeled time (s) of one local step on the reference worker, or `measured`: timing=virtual
    # measures it once before training (the median of a few steps on a copy of the model, the
    # mean over workers; recorded as compute/step_time_s in summary.json); timing=real with
    # emulate_compute sleeps up to it (measured: each step's own time).
    step_time_s: Any = MISSING
    # timing=virtual: modeled time (s) of the algorithm's own work per local step (its hooks
    # outside collectives: compression, elastic or anchor arithmetic), or `measured`: once
    # before training, amortised over whole rounds and scaled as measured algorithm time x
    # step_time_s / measured step time (compute/algo_time_s in summary.json); 0 = not charged.
    algo_time_s: Any = MISSING
    # Worker speeds: none | one_slow | half_slow | lognormal (a factor per worker, drawn once)
    # | lognormal_steps (a factor per step of every worker, drawn from seed, rank and step) |
    # [f_0, ..., f_{m-1}] (a step of worker i takes f_i times the step time).
    slowdown: Any = MISSING
    factor: float = MISSING  # one_slow / half_slow: how many times slower
    sigma: float = MISSING  # lognormal, lognormal_steps: standard deviation of log(slowdown)
    straggler_prob: float = MISSING  # each step, with this probability, a worker's step takes ...
    straggler_factor: float = MISSING  # ... this many times longer


@dataclass
class Checkpoint:
    # SIGUSR1/USR2 (time limit), SIGTERM (preemption), Ctrl-C with checkpoint_every > 0:
    # save a checkpoint, then stop (exit 3); a rerun resumes.
    on_signal: bool = MISSING
    # Workers agree on a pending stop every this many steps (else at the next evaluation).
    poll_steps: int = MISSING
    # Act as if SIGUSR1 arrived at this step (try resuming on a laptop); null = never.
    simulate_signal_at_step: int | None = MISSING


@dataclass
class Wandb:
    # disabled | offline (records under <run>/wandb; `wandb sync` uploads them) | online
    mode: WandbMode = MISSING
    project: str = MISSING  # W&B project
    entity: str | None = MISSING  # W&B entity (user or team); null = the account's default
    # W&B group; null = `experiment_name` (a preset), or, in an ad-hoc sweep, the sweep's start
    # time and the keys it varies (set by the sweeper).
    group: str | None = MISSING


@dataclass
class Comm:
    # Number format of the averaged models / pseudo-gradients on the wire (bytes and modeled
    # time follow the compressed size): none | fp16 | bf16 | int8.
    compression: Compression = MISSING


@dataclass
class ScaleNetwork:
    latency_s: float = MISSING  # alpha (s) of `network=calibrated` at this scale
    bandwidth_gbps: float = MISSING  # B (Gbit/s) of `network=calibrated` at this scale


@dataclass
class Scale:
    name: str = MISSING  # smoke | cpu | paper: the run size the other keys were set by
    target_acc: float = MISSING  # time-to-accuracy target of the presets' tables
    # Workers of the Overlap-Local-SGD paper's tables and figure 5 (table1, table2, fig5): the
    # paper's 16 where the scale can afford them.
    table_workers: int = MISSING
    # Dominant-class share of the non-IID presets (at table_workers workers) that this scale's
    # data allow.
    noniid_fraction: float = MISSING
    # Workers of the Overlap-Local-SGD paper's non-IID presets (table2, fig5): enough for the
    # paper's 0.64 with every class equally present (at least 7 on 10 classes) where the scale
    # runs it, else table_workers.
    noniid_table_workers: int = MISSING
    # Dominant-class share of those presets (table2, fig5): the paper's 0.64 where the scale's
    # data reach it, else noniid_fraction.
    noniid_table_fraction: float = MISSING
    # The seeds of the Overlap-Local-SGD paper's presets (table1, table2, fig4, fig5, low_comm)
    # at this scale, a sweep of seeds: the verdicts' 8 at fmnist, 3 elsewhere.
    table_seeds: str = MISSING
    step_time_s: float = MISSING  # modeled step time of the presets that use the virtual clock
    # The network of `network=calibrated` (the fig4/fig5 presets): the paper's proportions of
    # communication to a step at this scale (calibration stated in conf/scale/<name>.yaml).
    network: ScaleNetwork = MISSING


# --- the root -------------------------------------------------------------------------------


@dataclass
class Config:
    # (The groups, conf/<group>/: each option is typed by its own schema, below.)

    # group: digits (offline default) | cifar10 | fashion_mnist | synthetic
    dataset: Any = MISSING
    model: Any = MISSING  # group: resnet18 | tiny_cnn
    partition: Any = MISSING  # group: iid | noniid | dirichlet
    algorithm: Any = MISSING  # group: one per algorithm (algorithms.TABLE)
    # group: ideal | ethernet40g | ethernet10g | ethernet1g | wan | calibrated (the scale's)
    network: Any = MISSING
    cluster: Any = MISSING  # group: local | sim (threads of one process) | slurm
    # group: steps (`epochs` passes per worker) | time (a virtual-time budget: stragglers)
    budget: Any = MISSING

    # W&B group and the name analysis groups runs by; presets set it.
    experiment_name: str = MISSING
    seed: int = MISSING  # model init (identical on every rank), data order (not the shards)
    workers: int = MISSING  # m: number of worker processes (ranks); set by `scale`
    epochs: int = MISSING  # passes over each worker's shard; set by `scale`
    tau: int = MISSING  # local updates per round, for every round-based algorithm
    batch_size: int = MISSING  # per-worker mini-batch; set by `scale`
    # Base LR for a global batch of 128: the peak LR is lr * batch_size * workers / 128.
    lr: float = MISSING
    momentum: float = MISSING  # local (heavy-ball or Nesterov) momentum, in [0, 1)
    nesterov: bool = MISSING  # Nesterov momentum (needs momentum > 0)
    weight_decay: float = MISSING  # coupled L2 on every parameter (reference code)
    warmup_epochs: float = MISSING  # linear warm-up from lr to the peak LR, per iteration
    # Fractions of `epochs` at which the LR is multiplied by lr_decay.
    lr_decay_at: list[float] = MISSING
    lr_decay: float = MISSING  # LR factor at each lr_decay_at point
    eval_every: int = MISSING  # evaluate every this many epochs (and after the last one)
    eval_batch_size: int = MISSING  # batch size of the evaluation passes
    # real: wall-clock, measured | virtual: modeled, deterministic (timing.md). The metric
    # `time/train_s` (the x-axis of W&B's accuracy and loss charts) is on this clock.
    timing: Timing = MISSING
    emulate_network: bool = MISSING  # timing=real: a collective takes at least its modeled time
    emulate_compute: bool = MISSING  # timing=real: each step sleeps up to its modeled time
    compute: Compute = MISSING  # worker speeds (timing.md)
    comm: Comm = MISSING  # how averages travel
    dtype: DType = MISSING  # float32 | float64 (exact identity tests)
    # Torch intra-op threads per worker; null = the machine's cores / local workers (batched
    # in-process workers, cluster.batched: the cores, for the one pass that computes them all).
    threads_per_worker: int | None = MISSING
    # A collective that waits longer than this fails the run instead of hanging.
    dist_timeout_s: float = MISSING
    progress: bool = MISSING  # rank 0 progress bar (plain log lines when stderr is no terminal)
    # Epochs between checkpoints (at evaluation points); 0 = only on signals. Set by `cluster`.
    checkpoint_every: int = MISSING
    checkpoint: Checkpoint = MISSING  # <run dir>/checkpoint/; a rerun of an unfinished run resumes
    out_root: str = MISSING  # run directories go to <out_root>/runs/<name>-<digest>
    wandb: Wandb = MISSING  # the W&B mirror of the records
    # Recompute this run although its directory holds a finished record of the same config; the
    # previous record moves to <out_root>/runs/.superseded/<name>-<time>/.
    rerun: bool = MISSING
    scale: Scale = MISSING  # set by the `scale` group
    # A preset's report (title, rows, claims, figures): read by analysis/, which checks it.
    report: dict[str, Any] | None = None


# --- group options ------------------------------------------------------------------------


@dataclass
class Dataset:
    name: str = MISSING  # the option's name (= its file stem)
    # Share of the training split held out as a validation set (stratified, fixed seed, the same
    # for every method; experiment=tune chooses learning rates on it). 0 = none. When > 0 the
    # workers train on the rest and every evaluation (the records' `test/*`) is on the
    # validation set: the test set is never seen.
    validation_fraction: float = 0.0


@dataclass
class Cifar10(Dataset):
    root: str | None = (
        MISSING  # folder holding cifar-10-batches-py/; null = $CIFAR10_ROOT or ./data
    )
    download: bool = MISSING  # try torchvision's download when the files are missing
    verify_checksums: bool = MISSING  # md5 check of the batch files (false for repacked copies)
    augment: bool = MISSING  # RandomCrop(32, pad 4) + horizontal flip on the training set
    num_workers: int = MISSING  # DataLoader worker processes per rank


@dataclass
class FashionMnist(Dataset):
    # folder holding FashionMNIST/raw/ (the four uncompressed idx files, torchvision's layout);
    # null = $FASHION_MNIST_ROOT or ./data
    root: str | None = MISSING
    # folder of the gzipped idx files (Debian's dataset-fashion-mnist: `make data`), decompressed
    # into root's FashionMNIST/raw/ when missing there; null = none
    source: str | None = MISSING
    downsample: int = MISSING  # average-pool factor: 1 = 28x28, 2 = 14x14 (means of 2x2 blocks)
    # training images in use, drawn stratified by class with split_seed; null = all 60,000
    train_size: int | None = MISSING
    # test images in use (of the 10,000), drawn the same way; null = all
    test_size: int | None = MISSING
    split_seed: int = MISSING  # seed of the train_size and test_size draws


@dataclass
class Digits(Dataset):
    test_fraction: float = MISSING  # fixed stratified test split
    split_seed: int = MISSING  # seed of that split


@dataclass
class Synthetic(Dataset):
    num_train: int = MISSING  # training samples
    num_test: int = MISSING  # test samples
    num_classes: int = MISSING  # classes (Gaussian prototypes)
    channels: int = MISSING  # image channels
    image_size: int = MISSING  # image height = width
    noise: float = MISSING  # standard deviation of the noise around each prototype
    seed: int = MISSING  # seed of the prototypes and samples


@dataclass
class Model:
    name: str = MISSING  # the option's name (= its file stem)
    width: int = MISSING  # channels of the first stage (ResNet-18: 64 = the paper's)


@dataclass
class Partition:
    name: str = MISSING  # the option's name (= its file stem)
    # Seed of the shards' shuffles; 1234 = the reference code's Random(1234), whatever the run's
    # seed (runs of several seeds share their shards, as in the reference).
    seed: int = MISSING


@dataclass
class NonIID(Partition):
    # Share of each worker's samples from its dominant class (the paper: 2000/3125 = 0.64).
    dominant_fraction: float = MISSING


@dataclass
class Dirichlet(Partition):
    concentration: float = MISSING  # per-worker class proportions ~ Dir(concentration)


@dataclass
class Network:
    name: str = MISSING  # the option's name (= its file stem)
    latency_s: float = MISSING  # alpha: per-message latency (s)
    bandwidth_gbps: float = MISSING  # B: link bandwidth (Gbit/s); .inf = no transfer time
    topology: Topology = MISSING  # allreduce (ring) | ps (parameter server)
    ps_servers: int = MISSING  # topology=ps: number of server shards


@dataclass
class Cluster:
    name: str = MISSING  # the option's name (= its file stem)
    # auto = nccl with one GPU per worker when enough GPUs are present, else gloo.
    backend: Backend = MISSING
    checkpoint_every: int = MISSING  # the default of the top-level checkpoint_every
    # The workers as threads of one process talking through an in-process reducer
    # (experiments/workers/sim.py; needs timing=virtual): cluster=sim, or one SLURM task per run.
    in_process: bool = False
    # With in_process: true = the workers' forward and backward passes as one vectorised call
    # over their stacked replicas (experiments/workers/batched.py), each worker's optimizer,
    # algorithm and data as before; not for OSP/LOSP (collectives at rank-dependent steps).
    # false = a thread per worker. auto = true where the algorithm allows it and it pays: on a
    # GPU, from 8 workers on a CPU, and whenever seeds train in lock-step (lockstep_seeds > 1),
    # so that a seed run alone computes what it computes among the others.
    batched: str = "auto"
    # With in_process and batched: a sweep trains up to this many points that differ only in
    # their seed in one process, as one batched pass over all their workers' replicas
    # (experiments/workers/sim.py, run_lockstep), each point's record bit for bit the one it
    # would have alone. 1 = one run per seed.
    lockstep_seeds: int = 10
    # Where worker processes compute (experiments/workers/dist.py, place): auto = the GPUs when
    # visible (one per worker), else the CPU; cpu; cuda (an error where there is none).
    device: str = "auto"
    # Workers sharing one GPU: 1 = one GPU per worker (NCCL); k > 1 = gloo on CUDA tensors,
    # ceil(workers / k) GPUs per node. Fewer GPUs than that is an error, never the CPU.
    workers_per_gpu: int = 1


@dataclass
class Budget:
    # steps: every worker makes `epochs` passes over its shard and all meet at an evaluation
    # every `eval_every` epochs (the papers' budget with equal workers) | time: each worker
    # steps at its own modeled speed until the virtual clock reaches time_s, and the model the
    # method defines is evaluated as it stood at fixed virtual times, without a barrier
    # (timing=virtual; docs/timing.md, "Budgets").
    name: str = MISSING
    # budget=time: the budget T (virtual seconds); null = the time the slowest worker needs to
    # compute `epochs` passes (epochs x steps per epoch x step time x its slowdown).
    time_s: Optional[float] = MISSING  # noqa: UP045 - OmegaConf reads this annotation
    # budget=time: the evaluation points t_k = k x eval_every_s (and T); null = T / (8 x epochs),
    # an eighth of the slowest worker's epoch.
    eval_every_s: Optional[float] = MISSING  # noqa: UP045
    # budget=time: test images (a fixed stratified subset) that the points before T are scored
    # on; the point at T is scored on the whole test set. null = the whole test set each time.
    eval_images: Optional[int] = MISSING  # noqa: UP045


@dataclass
class SimCluster(Cluster):
    # Where the workers' models live: auto (the first GPU if there is one, else cpu) | cpu |
    # cuda | cuda:N. Every worker on this one device.
    device: str = MISSING


@dataclass
class SlurmCluster(Cluster):
    nodes: int = MISSING  # nodes per run
    tasks_per_node: int = MISSING  # workers per node (one srun task each)
    gpus_per_node: int | None = MISSING  # null = no GPU request
    cpus_per_task: int | None = MISSING  # null = SLURM's default
    mem_gb: int | None = MISSING  # memory per node; null = SLURM's default
    timeout_min: int = MISSING  # the job's time limit
    partition: str | None = MISSING  # SLURM partition
    account: str | None = MISSING  # SLURM account
    qos: str | None = MISSING  # SLURM QOS
    setup: list[str] = MISSING  # shell lines run before srun (module load, venv activation)
    signal_delay_s: int = MISSING  # the time-limit warning (SIGUSR2) comes this long before the end
    max_num_timeout: int = MISSING  # how many time-limit requeues submitit allows
    array_parallelism: int = MISSING  # array tasks running at once
    # Any other sbatch option, e.g. {constraint: a100, mail-type: FAIL}.
    additional_parameters: dict[str, Any] = MISSING


GROUP_SCHEMAS: dict[str, dict[str, type]] = {
    "dataset": {
        "cifar10": Cifar10,
        "digits": Digits,
        "fashion_mnist": FashionMnist,
        "synthetic": Synthetic,
    },
    "model": {"resnet18": Model, "tiny_cnn": Model},
    "partition": {"iid": Partition, "noniid": NonIID, "dirichlet": Dirichlet},
    "network": {
        n: Network
        for n in ("ideal", "ethernet40g", "ethernet10g", "ethernet1g", "wan", "calibrated")
    },
    "cluster": {"local": Cluster, "sim": SimCluster, "slurm": SlurmCluster},
    "budget": {"steps": Budget, "time": Budget},
}

# Groups added after records were made: a record without the group ran with this option.
GROUPS_ADDED_LATER: dict[str, str] = {"budget": "steps"}


# --- the algorithms' schemas, from their Config dataclasses ---------------------------------


def _omegaconf_type(hint: Any, owner: str, key: str) -> Any:
    """An OmegaConf-compatible annotation for the Config field type `hint`: `X | None` ->
    Optional[X]; Literal of strings -> a StrEnum (so Hydra checks the choice); list/tuple ->
    List; anything OmegaConf cannot type -> Any (the Config's __post_init__ still checks it)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2:
            return Optional[_omegaconf_type(rest[0], owner, key)]  # noqa: UP045 - a runtime type
        return Any
    if origin is typing.Literal and all(isinstance(a, str) for a in args):
        name = f"{owner}_{key}"
        members = StrEnum(name, {a: a for a in args})
        members.__module__ = __name__
        setattr(sys.modules[__name__], name, members)  # picklable by reference (SLURM jobs)
        return members
    if origin in (list, tuple, list):
        inner = args[0] if args else Any
        return list[_omegaconf_type(inner, owner, key)]
    if hint in (int, float, bool, str) or (isinstance(hint, type) and issubclass(hint, enum.Enum)):
        return hint
    return Any


def algorithm_schema(name: str) -> type:
    """The schema of `algorithm=<name>`: `name` plus the fields of the algorithm's Config, with
    its types (made OmegaConf-compatible) and its defaults."""
    import algorithms

    config = algorithms.CONFIGS[name]
    hints = typing.get_type_hints(config)
    owner = f"algorithm_{name}"
    fields: list[tuple[str, Any, Any]] = [("name", str, field(default=MISSING))]
    for f in dataclasses.fields(config):
        default = (
            field(default=f.default)
            if f.default is not dataclasses.MISSING
            else field(default_factory=f.default_factory)  # type: ignore[arg-type]
            if f.default_factory is not dataclasses.MISSING
            else field(default=MISSING)
        )
        fields.append((f.name, _omegaconf_type(hints[f.name], owner, f.name), default))
    schema = dataclasses.make_dataclass(owner, fields)
    schema.__module__ = __name__
    schema.__doc__ = f"algorithm={name}: {algorithms.rule_name(name)}.Config plus name."
    schema.__config__ = config  # where the meanings of its fields are written
    setattr(sys.modules[__name__], owner, schema)  # picklable by reference (SLURM jobs)
    return schema


def register() -> None:
    """Store the root schema and one schema per group option in Hydra's ConfigStore."""
    import algorithms

    store = ConfigStore.instance()
    store.store(name=ROOT, node=Config)
    for group, options in GROUP_SCHEMAS.items():
        for option, schema in options.items():
            store.store(group=f"schema/{group}", name=option, node=schema)
    for name in algorithms.CONFIGS:
        store.store(group="schema/algorithm", name=name, node=algorithm_schema(name))


# --- the typed job and its record ---------------------------------------------------------


def typed(cfg: DictConfig) -> Config:
    """The composed job config `cfg` (no `hydra` node) as the schema's dataclasses, every
    interpolation resolved: what the run's code reads (attributes, each default once, here). A
    copy that lost the root's type (`OmegaConf.masked_copy`, as the sweeper leaves out `hydra`)
    gets it back; its group nodes keep theirs."""
    if OmegaConf.get_type(cfg) is not Config:
        cfg = OmegaConf.merge(OmegaConf.structured(Config), cfg)
    return OmegaConf.to_object(cfg)  # type: ignore[return-value]


def record(config: Config) -> dict[str, Any]:
    """The typed job `config` as plain containers, enums as strings, without the request
    `rerun`: what the run writes (config.yaml, the identity, checkpoints, W&B), what the
    pre-flight checks value by value, what crosses to worker processes and threads, and what the
    data loaders read. Its keys are in the composed config's order (the schema's field order,
    which composition follows: tests/test_schema_defaults.py compares every preset)."""
    out: dict[str, Any] = OmegaConf.to_container(OmegaConf.structured(config), enum_to_str=True)
    out.pop("rerun")  # a request, not part of the run
    return out


def from_record(plain: Mapping[str, Any]) -> Config:
    """The typed job of a record (`record`'s output): each group node typed by its option's
    schema, as Hydra types it while composing; a value the schema refuses raises. The record
    holds no `rerun`: the run's directory was settled before any worker reads the job."""
    node = OmegaConf.structured(Config)
    plain = dict(plain)
    for group, option in GROUPS_ADDED_LATER.items():
        if group not in plain:  # made before the group existed: OmegaConf.compose for its option
            plain[group] = added_group_default(group, option)
    for group, options in GROUP_SCHEMAS.items():
        node[group] = OmegaConf.structured(options[plain[group]["name"]])
    # the schema register() made (algorithm_schema makes a new class on every call)
    node.algorithm = OmegaConf.structured(globals()[f"algorithm_{plain['algorithm']['name']}"])
    node.rerun = False
    return OmegaConf.to_object(OmegaConf.merge(node, plain))  # type: ignore[return-value]


def added_group_default(group: str, option: str) -> dict[str, Any]:
    """The values of conf/<group>/<option>.yaml (without its defaults list): what a record made
    before the group existed ran with."""
    from pathlib import Path

    import yaml

    path = Path(__file__).resolve().parents[2] / "conf" / group / f"{option}.yaml"
    values = yaml.safe_load(path.read_text()) or {}
    values.pop("defaults", None)
    return values


# --- keys that no schema declares -----------------------------------------------------------


def unknown_keys(cfg: DictConfig, prefix: str = "") -> list[str]:
    """The dotted keys of the composed job config `cfg` that its schema does not declare (what
    Hydra lets through with `+key=value`). Mapping-typed fields (`report`,
    `cluster.additional_parameters`) and untyped nodes accept any key."""
    found: list[str] = []
    schema = OmegaConf.get_type(cfg)
    declared = (
        {f.name: f for f in dataclasses.fields(schema)} if dataclasses.is_dataclass(schema) else {}
    )
    for key in cfg.keys():
        if key == "hydra" and not prefix:
            continue
        if declared and key not in declared:
            found.append(f"{prefix}{key}")
            continue
        node = cfg._get_node(key)
        if isinstance(node, DictConfig) and not node._is_none() and not node._is_missing():
            if dataclasses.is_dataclass(OmegaConf.get_type(node)):
                found += unknown_keys(node, f"{prefix}{key}.")
    return found


def check_keys(cfg: DictConfig) -> None:
    """Raise UserError (one line) for a key that no schema declares."""
    from experiments.errors import UserError

    unknown = unknown_keys(cfg)
    if not unknown:
        return
    key = unknown[0]
    if key.startswith("algorithm.") and "name" in cfg.algorithm:
        raise UserError(unknown_algorithm_option(str(cfg.algorithm.name), key.split(".", 1)[1]))
    more = f" (and {', '.join(unknown[1:])})" if len(unknown) > 1 else ""
    raise UserError(f"unknown key {key}{more}: no code reads it (the keys: docs/config.md)")


def unknown_algorithm_option(name: str, option: str) -> str:
    """The one-line message of algorithms.make_config for a knob the algorithm does not have."""
    import algorithms

    if name not in algorithms.CONFIGS:
        return f"unknown algorithm {name!r}"
    known = sorted(f.name for f in dataclasses.fields(algorithms.CONFIGS[name]))
    return f"algorithm {name} has no option {option} (options: {', '.join(known) or 'none'})"


# --- the meanings, from the comments of the schema's source ---------------------------------


def field_comments(cls: type) -> dict[str, str]:
    """Each field of dataclass `cls` (and its bases) -> its meaning: the comment lines right
    above the field plus the comment at the end of its line, as one sentence."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or not dataclasses.is_dataclass(klass):
            continue
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):  # built by make_dataclass: no source of its own
            continue
        source = inspect.cleandoc("\n" + source) if source.startswith(" ") else source
        comments: dict[int, str] = {}
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                text = tok.string.lstrip("#").strip()
                if not text.startswith(("noqa", "type:", "fmt:")):
                    comments[tok.start[0]] = text
        lines = source.splitlines()
        (node,) = [n for n in ast.parse(source).body if isinstance(n, ast.ClassDef)]
        for stmt in node.body:
            if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
                continue
            above, line = [], stmt.lineno - 1
            while line >= 1 and lines[line - 1].strip().startswith("#") and line in comments:
                above.insert(0, comments[line])
                line -= 1
            end = stmt.end_lineno or stmt.lineno
            parts = above + [comments[n] for n in range(stmt.lineno, end + 1) if n in comments]
            if parts:
                out[stmt.target.id] = " ".join(parts)
    return out


register()
