"""Bad input is answered without importing torch (issue 26): composing the config against its
schema and every check of the pre-flight before `check_machine` (experiments/preflight.py) import
neither torch nor W&B nor pandas, so `python run.py tau=0` says what is wrong before any of them
would load. Checked in fresh interpreters: this test process has imported torch long ago."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import algorithms
from tests.cli import REPO, child_env
from tests.session import once_a_session

HEAVY = ("torch", "wandb", "pandas")

#: every algorithm's config composed and checked as run.py's pre-flight checks it (check_config:
#: keys, values, launcher, output root), then the run's name; prints what got imported
VALIDATE_EVERY_ALGORITHM = """
import json, sys
from hydra import compose, initialize_config_dir
import algorithms
from experiments.config.identity import run_name
from experiments.preflight import check_config

names = sorted(algorithms.CONFIGS)
with initialize_config_dir(config_dir=sys.argv[1], version_base="1.3"):
    for name in names:
        cfg = compose(
            config_name="config",
            overrides=[f"algorithm={name}", f"out_root={sys.argv[2]}"],
            return_hydra_config=True,
        )
        plain, run_dir, launcher, here = check_config(cfg)
        assert plain["algorithm"]["name"] == name and here and launcher is None
        run_name(plain)
heavy = sorted(m for m in HEAVY if m in sys.modules)
print(json.dumps({"checked": names, "heavy": heavy}))
"""

#: run.py's own program on ARGS in this interpreter (run.py as `runpy` runs it: its cli, no
#: os._exit), then what the process had imported when it ended, and the workers' forkserver
#: that run.py started on the way (`startup.warm`) if it is still alive
RUN_PY = """
import json, os, runpy, sys
from multiprocessing import forkserver
from experiments.workers import startup
servers, warm = [], startup.warm
def warm_and_note():
    warm()
    servers.append(forkserver._forkserver._forkserver_pid)
startup.warm = warm_and_note
sys.argv = ["run.py", *sys.argv[1:]]
try:
    runpy.run_path("run.py", run_name="__main__")
    code = 0
except SystemExit as e:
    code = e.code
heavy = sorted(m for m in HEAVY if m in sys.modules)
def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
left = [pid for pid in servers if alive(pid)]
print(json.dumps({"code": code, "heavy": heavy, "servers": len(servers), "left": left}))
"""


def fresh(code: str, *args: str) -> tuple[dict, str]:
    proc = subprocess.run(
        [sys.executable, "-c", f"HEAVY = {HEAVY!r}\n{code}", *args],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_validating_every_algorithms_config_imports_no_torch(tmp_path):
    result, stderr = fresh(VALIDATE_EVERY_ALGORITHM, str(REPO / "conf"), str(tmp_path))
    assert result["checked"] == sorted(algorithms.CONFIGS), stderr
    assert len(result["checked"]) == 14
    assert result["heavy"] == [], f"imported while validating: {result['heavy']}"


@pytest.mark.parametrize(
    "args, line",
    [
        (["tau=0"], "error: tau must be an integer >= 1, got 0"),
        (["algorithm=nope"], "error: unknown algorithm 'nope'; choose from bmuf, cocod_sgd"),
        (["foo=1"], "error: unknown key foo: no code reads it"),
        (["algorithm=easgd", "algorithm.alpha=0.5"], "error: easgd needs workers * alpha < 1"),
        (["out_root={blocker}/out"], "error: output directory {blocker}/out/runs is not writable"),
    ],
)
def test_bad_input_is_answered_without_torch(tmp_path, args, line):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    args, line = [a.format(blocker=blocker) for a in args], line.format(blocker=blocker)
    if not any(a.startswith("out_root=") for a in args):
        args.append(f"out_root={tmp_path / 'out'}")
    result, stderr = fresh(RUN_PY, *args)
    assert result["code"] == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(line), stderr
    assert result["heavy"] == [], f"imported before the answer: {result['heavy']}"
    # run.py started its workers' forkserver before composing, and stopped it on the refusal
    # (startup.stop_server): it would go on importing torch with the command's pipes open
    # (tests/cli.py's in-process commands start none)
    assert result["servers"] >= 1 and result["left"] == [], result


#: run.py's handler of a stop signal before any worker runs, called for SIGHUP: what it raises,
#: and what it imported
SIGHUP_HANDLER = """
import json, signal, sys
import run
try:
    run._raise_stop(signal.SIGHUP, None)
    raised = None
except BaseException as e:
    raised = type(e).__name__
heavy = sorted(m for m in HEAVY if m in sys.modules)
print(json.dumps({"raised": raised, "heavy": heavy}))
"""


def test_the_sighup_handler_imports_nothing():
    """A handler runs between two instructions of the main thread, in the middle of whatever it
    was importing: SIGHUP while Hydra composed (numpy half imported) made the handler's own
    import of torch fail ("partially initialized module 'numpy'", exit 2, 2 times in 40)."""
    result, stderr = fresh(SIGHUP_HANDLER)
    assert result == {"raised": "Stopped", "heavy": []}, stderr


def test_the_rules_take_their_facts_from_the_torch_free_configs():
    """REGISTRY (the rules, torch) and CONFIGS (torch-free) are one table: each rule's Config is
    the one the schema and the pre-flight read, and so are its `periodic` and
    `checkpoint_anywhere`."""
    assert list(algorithms.REGISTRY) == list(algorithms.CONFIGS)
    for name, rule in algorithms.REGISTRY.items():
        config = algorithms.CONFIGS[name]
        assert rule.Config is config, name
        assert rule.__name__ == algorithms.rule_name(name)
        assert (rule.periodic, rule.checkpoint_anywhere) == (
            config.periodic,
            config.checkpoint_anywhere,
        )
    non_periodic = {n for n, r in algorithms.REGISTRY.items() if not r.periodic}
    assert non_periodic == {"sync_sgd", "powersgd", "pseudo_sync"}
    assert {n for n, r in algorithms.REGISTRY.items() if not r.checkpoint_anywhere} == {
        "osp",
        "losp",
    }


def test_the_dtype_limits_named_without_torch_are_torchs():
    import torch

    from experiments.preflight import DTYPE_MAX

    assert DTYPE_MAX == {
        "float32": torch.finfo(torch.float32).max,
        "float64": torch.finfo(torch.float64).max,
    }


# --- every key of the schema: its bad value answered without torch, whatever the cluster ------

#: each key of the schema (tests/test_torch_free.py `schema_keys`) -> a command line that gives
#: it a value no run can take (in the group option that has the key), and the start of the
#: answer; None: a key that takes any value of its type (a name, a path, free text), whose
#: wrong type Hydra refuses while composing
BAD_VALUES: dict[str, tuple[str, str] | None] = {
    "dataset": ("dataset=nope", "unknown dataset 'nope'"),
    "model": ("model=nope", "unknown model 'nope'"),
    "partition": ("partition=nope", "unknown partition 'nope'"),
    "algorithm": ("algorithm=nope", "unknown algorithm 'nope'"),
    "network": ("network=nope", "unknown network 'nope'"),
    "cluster": ("cluster=nope", "unknown cluster 'nope'"),
    "budget": ("budget=nope", "unknown budget 'nope'"),
    "experiment_name": None,
    "seed": ("seed=-1", "seed must be an integer in [0, 2^32)"),
    "workers": ("workers=0", "workers must be an integer >= 1"),
    "epochs": ("epochs=0", "epochs must be an integer >= 1"),
    "tau": ("tau=0", "tau must be an integer >= 1"),
    "batch_size": ("batch_size=0", "batch_size must be an integer >= 1"),
    "lr": ("lr=-1", "lr must be a number > 0"),
    "momentum": ("momentum=1", "momentum must be in [0, 1)"),
    "nesterov": ("nesterov=true momentum=0", "nesterov=true needs momentum > 0"),
    "weight_decay": ("weight_decay=-1", "weight_decay must be >= 0"),
    "warmup_epochs": ("warmup_epochs=-1", "warmup_epochs must be >= 0"),
    "lr_decay_at": ("lr_decay_at=[2]", "lr_decay_at holds fractions"),
    "lr_decay": ("lr_decay=0", "lr_decay must be > 0"),
    "eval_every": ("eval_every=0", "eval_every must be an integer >= 1"),
    "eval_batch_size": ("eval_batch_size=0", "eval_batch_size must be an integer >= 1"),
    "timing": ("timing=sometimes", "timing must be one of real, virtual"),
    "emulate_network": ("timing=virtual emulate_network=true", "emulate_network / emulate_compute"),
    "emulate_compute": ("timing=virtual emulate_compute=true", "emulate_network / emulate_compute"),
    "compute.step_time_s": ("compute.step_time_s=-1", "compute.step_time_s must be a number > 0"),
    "compute.algo_time_s": ("compute.algo_time_s=-1", "compute.algo_time_s must be a number >="),
    "compute.slowdown": ("compute.slowdown=bogus", "compute.slowdown must be one of none,"),
    "compute.factor": ("compute.factor=-1 compute.slowdown=one_slow timing=virtual", "compute."),
    "compute.sigma": ("compute.sigma=nan", "compute.sigma must be a finite number"),
    "compute.straggler_prob": ("compute.straggler_prob=2", "compute.straggler_prob must be in"),
    "compute.straggler_factor": (
        "compute.straggler_factor=0.5 compute.straggler_prob=0.1 timing=virtual",
        "compute.straggler_factor must be >= 1",
    ),
    "comm.compression": ("comm.compression=zip", "comm.compression must be one of"),
    "dtype": ("dtype=float16", "dtype must be one of float32, float64"),
    "threads_per_worker": ("threads_per_worker=0", "threads_per_worker must be null"),
    "dist_timeout_s": ("dist_timeout_s=0", "dist_timeout_s must be a number of seconds"),
    "progress": ("progress=maybe", "progress must be true or false"),
    "checkpoint_every": ("checkpoint_every=-1", "checkpoint_every must be an integer >= 0"),
    "checkpoint.on_signal": ("checkpoint.on_signal=maybe", "checkpoint.on_signal must be true"),
    "checkpoint.poll_steps": ("checkpoint.poll_steps=0", "checkpoint.poll_steps must be an"),
    "checkpoint.simulate_signal_at_step": (
        "checkpoint.simulate_signal_at_step=0",
        "checkpoint.simulate_signal_at_step must be null or",
    ),
    "out_root": ("out_root={blocker}/out", "output directory {blocker}/out/runs is not writable"),
    "wandb.mode": ("wandb.mode=sometimes", "wandb.mode must be one of disabled"),
    "wandb.project": None,
    "wandb.entity": None,
    "wandb.group": None,
    "rerun": ("rerun=maybe", "rerun must be true or false"),
    "scale.name": None,
    "scale.target_acc": ("scale.target_acc=2", "scale.target_acc must be in [0, 1]"),
    "scale.table_workers": ("scale.table_workers=0", "scale.table_workers must be an integer"),
    "scale.noniid_fraction": ("scale.noniid_fraction=0", "scale.noniid_fraction must be in"),
    "scale.table_seeds": ("scale.table_seeds=abc", "scale.table_seeds must be seeds separated"),
    "scale.noniid_table_workers": (
        "scale.noniid_table_workers=0",
        "scale.noniid_table_workers must be an integer",
    ),
    "scale.noniid_table_fraction": (
        "scale.noniid_table_fraction=1.5",
        "scale.noniid_table_fraction must be in",
    ),
    "scale.step_time_s": ("scale.step_time_s=0", "scale.step_time_s must be a number > 0"),
    "scale.network.latency_s": ("scale.network.latency_s=-1", "scale.network.latency_s must be"),
    "scale.network.bandwidth_gbps": (
        "scale.network.bandwidth_gbps=0",
        "scale.network.bandwidth_gbps must be > 0",
    ),
    "report": None,  # read and checked by analysis/ (analysis/reports/report.py _check_node)
    "dataset.name": ("dataset=synthetic dataset.name=nope", "unknown dataset.name 'nope'"),
    "dataset.validation_fraction": (
        "dataset.validation_fraction=1",
        "dataset.validation_fraction must be in [0, 1)",
    ),
    "dataset.root": (
        "dataset=cifar10 dataset.root={tmp}/nowhere dataset.download=false",
        "CIFAR-10 not found in {tmp}/nowhere/cifar-10-batches-py",
    ),
    "dataset.download": None,
    "dataset.verify_checksums": None,
    "dataset.augment": ("dataset=cifar10 dataset.augment=maybe", "dataset.augment must be true"),
    "dataset.num_workers": ("dataset=cifar10 dataset.num_workers=-1", "dataset.num_workers must"),
    "dataset.test_fraction": ("dataset.test_fraction=1.5", "dataset.test_fraction must be in"),
    "dataset.split_seed": ("dataset.split_seed=-1", "dataset.split_seed must be an integer"),
    "dataset.source": (
        "dataset=fashion_mnist dataset.root={tmp}/nowhere dataset.source={tmp}/none",
        "Fashion-MNIST not found in {tmp}/nowhere/FashionMNIST/raw",
    ),
    "dataset.downsample": (
        "dataset=fashion_mnist dataset.downsample=0",
        "dataset.downsample must be an integer >= 1",
    ),
    "dataset.train_size": (
        "dataset=fashion_mnist dataset.train_size=5",
        "dataset.train_size must be an integer >= 10",
    ),
    "dataset.test_size": (
        "dataset=fashion_mnist dataset.test_size=5",
        "dataset.test_size must be an integer >= 10",
    ),
    "dataset.num_train": ("dataset=synthetic dataset.num_train=0", "dataset.num_train must be"),
    "dataset.num_test": ("dataset=synthetic dataset.num_test=0", "dataset.num_test must be"),
    "dataset.num_classes": ("dataset=synthetic dataset.num_classes=0", "dataset.num_classes"),
    "dataset.channels": ("dataset=synthetic dataset.channels=0", "dataset.channels must be"),
    "dataset.image_size": ("dataset=synthetic dataset.image_size=0", "dataset.image_size must"),
    "dataset.noise": ("dataset=synthetic dataset.noise=-1", "dataset.noise must be >= 0"),
    "dataset.seed": ("dataset=synthetic dataset.seed=-1", "dataset.seed must be an integer in"),
    "model.name": ("model.name=nope", "unknown model.name 'nope'"),
    "model.width": ("model.width=0", "model.width must be an integer >= 1"),
    "partition.name": ("partition.name=nope", "unknown partition.name 'nope'"),
    "partition.seed": ("partition.seed=-1", "partition.seed must be an integer >= 0"),
    "partition.dominant_fraction": (
        "partition=noniid partition.dominant_fraction=1.5",
        "noniid dominant_fraction must be in (0, 1]",
    ),
    "partition.concentration": (
        "partition=dirichlet partition.concentration=0",
        "dirichlet concentration must be a finite number > 0",
    ),
    "network.name": None,
    "network.latency_s": ("network.latency_s=-1", "network.latency_s must be >= 0"),
    "network.bandwidth_gbps": ("network.bandwidth_gbps=0", "network.bandwidth_gbps must be > 0"),
    "network.topology": ("network.topology=ring", "network.topology must be one of allreduce"),
    "network.ps_servers": (
        "network.topology=ps network.ps_servers=0",
        "network.ps_servers must be >= 1",
    ),
    "cluster.name": None,
    "budget.name": None,
    "budget.time_s": ("budget=time budget.time_s=-1", "budget.time_s must be null or a positive"),
    "budget.eval_every_s": ("budget=time budget.eval_every_s=0", "budget.eval_every_s must be"),
    "budget.eval_images": ("budget=time budget.eval_images=0", "budget.eval_images must be null"),
    "cluster.backend": ("cluster.backend=mpi", "cluster.backend must be one of auto"),
    "cluster.checkpoint_every": (
        "cluster.checkpoint_every=-1",
        "checkpoint_every must be an integer >= 0",
    ),
    "cluster.in_process": ("cluster.in_process=maybe", "cluster.in_process must be true"),
    "cluster.batched": ("cluster.batched=sometimes", "cluster.batched must be auto, true or false"),
    "cluster.lockstep_seeds": ("cluster.lockstep_seeds=0", "cluster.lockstep_seeds must be a"),
    "cluster.device": ("cluster.device=tpu", "cluster.device must be"),
    "cluster.workers_per_gpu": ("cluster.workers_per_gpu=0", "cluster.workers_per_gpu must be"),
    "cluster.nodes": ("cluster=slurm cluster.nodes=0", "cluster.nodes must be an integer >= 1"),
    "cluster.tasks_per_node": (
        "cluster=slurm cluster.tasks_per_node=0",
        "cluster.nodes and cluster.tasks_per_node must be integers >= 1",
    ),
    "cluster.gpus_per_node": ("cluster=slurm cluster.gpus_per_node=-1", "cluster.gpus_per_node"),
    "cluster.cpus_per_task": ("cluster=slurm cluster.cpus_per_task=0", "cluster.cpus_per_task"),
    "cluster.mem_gb": ("cluster=slurm cluster.mem_gb=0", "cluster.mem_gb must be null or"),
    "cluster.timeout_min": ("cluster=slurm cluster.timeout_min=0", "cluster.timeout_min must"),
    "cluster.partition": None,
    "cluster.account": None,
    "cluster.qos": None,
    "cluster.setup": None,
    "cluster.signal_delay_s": ("cluster=slurm cluster.signal_delay_s=-1", "cluster.signal_delay"),
    "cluster.max_num_timeout": ("cluster=slurm cluster.max_num_timeout=-1", "cluster.max_num"),
    "cluster.array_parallelism": ("cluster=slurm cluster.array_parallelism=0", "cluster.array"),
    "cluster.additional_parameters": None,  # any sbatch option: SLURM's to judge
    "algorithm.name": ("algorithm.name=nope", "unknown algorithm 'nope'"),
    "algorithm.bucket_mb": ("algorithm.bucket_mb=-1", "algorithm.bucket_mb must be a number >= 0"),
    "algorithm.outer": ("algorithm=diloco algorithm.outer=adam", "algorithm.outer must be one of"),
    "algorithm.outer_lr": ("algorithm=diloco algorithm.outer_lr=0", "algorithm.outer_lr must be"),
    "algorithm.outer_momentum": (
        "algorithm=diloco algorithm.outer_momentum=1",
        "algorithm.outer_momentum must be null or",
    ),
    "algorithm.outer_divide_by_lr": (
        "algorithm=diloco algorithm.outer_divide_by_lr=maybe",
        "algorithm.outer_divide_by_lr must be",
    ),
    "algorithm.momentum_at_sync": (
        "algorithm=local_sgd algorithm.momentum_at_sync=drop",
        "algorithm.momentum_at_sync must be one of",
    ),
    "algorithm.fragments": (
        "algorithm=streaming_diloco algorithm.fragments=0",
        "algorithm.fragments must be an integer >= 1",
    ),
    "algorithm.sync_delay": (
        "algorithm=streaming_diloco algorithm.sync_delay=-1",
        "algorithm.sync_delay must be null or",
    ),
    "algorithm.mix_alpha": (
        "algorithm=streaming_diloco algorithm.mix_alpha=2",
        "algorithm.mix_alpha must be a number in [0, 1]",
    ),
    "algorithm.rank": ("algorithm=powersgd algorithm.rank=0", "algorithm.rank must be"),
    "algorithm.error_feedback": (
        "algorithm=powersgd algorithm.error_feedback=maybe",
        "algorithm.error_feedback must be true or false",
    ),
    "algorithm.warm_start": (
        "algorithm=powersgd algorithm.warm_start=maybe",
        "algorithm.warm_start must be true or false",
    ),
    "algorithm.start_step": ("algorithm=powersgd algorithm.start_step=-1", "algorithm.start_step"),
    "algorithm.bn_no_weight_decay": (
        "algorithm=powersgd algorithm.bn_no_weight_decay=maybe",
        "algorithm.bn_no_weight_decay must be true or false",
    ),
    "algorithm.log_residual": (
        "algorithm=powersgd algorithm.log_residual=maybe",
        "algorithm.log_residual must be true or false",
    ),
    "algorithm.alpha": ("algorithm=easgd algorithm.alpha=2", "algorithm.alpha must be in [0, 1]"),
    "algorithm.centre_bn": (
        "algorithm=easgd algorithm.centre_bn=median",
        "algorithm.centre_bn must be one of",
    ),
    "algorithm.beta": ("algorithm=overlap_local_sgd algorithm.beta=1", "algorithm.beta must be"),
    "algorithm.confidence": (
        "algorithm=pseudo_sync algorithm.confidence=sure",
        "algorithm.confidence must be one of",
    ),
    "algorithm.c": ("algorithm=pseudo_sync algorithm.c=2", "algorithm.c must be a number in"),
    "algorithm.c_max": ("algorithm=pseudo_sync algorithm.c_max=2", "algorithm.c_max must be"),
    "algorithm.blend_local": (
        "algorithm=pseudo_sync algorithm.blend_local=maybe",
        "algorithm.blend_local must be true or false",
    ),
    "algorithm.momentum": (
        "algorithm=pseudo_sync algorithm.momentum=drop",
        "algorithm.momentum must be one of",
    ),
    "algorithm.max_overlap_steps": (
        "algorithm=osp algorithm.max_overlap_steps=-1",
        "algorithm.max_overlap_steps must be",
    ),
    "algorithm.server_lr": ("algorithm=osp algorithm.server_lr=0", "algorithm.server_lr must be"),
    "algorithm.compensation": (
        "algorithm=losp algorithm.compensation=magic",
        "algorithm.compensation must be one of",
    ),
    "algorithm.lam": ("algorithm=losp algorithm.lam=-1", "algorithm.lam must be a number >= 0"),
}

CLUSTERS = ("local", "sim", "slurm")
#: checked under each of CLUSTERS (the others under one each, in turn): the kinds of key whose
#: bad value was answered after torch's import with cluster=sim (issue 36)
EVERY_CLUSTER = (
    "algorithm.alpha",
    "network.latency_s",
    "compute.straggler_prob",
    "cluster.lockstep_seeds",
    "cluster.device",
    "dataset.num_train",
    "dataset.root",
    "model.width",
    "partition.concentration",
    "out_root",
    "scale.table_workers",
)


def schema_keys() -> list[str]:
    """Every key of the schema: the root's (a group by its name), each group option's and each
    algorithm's, dotted."""
    import dataclasses
    import typing

    from experiments.config import schema

    def walk(cls: type, prefix: str = "") -> list[str]:
        hints = typing.get_type_hints(cls)
        out = []
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints.get(f.name)):
                out += walk(hints[f.name], f"{prefix}{f.name}.")
            else:
                out.append(prefix + f.name)
        return out

    keys = walk(schema.Config)
    for group, options in schema.GROUP_SCHEMAS.items():
        for option in options.values():
            keys += walk(option, f"{group}.")
    for name in algorithms.CONFIGS:
        keys += walk(schema.algorithm_schema(name), "algorithm.")
    return list(dict.fromkeys(keys))


def test_every_key_of_the_schema_has_a_bad_value_in_the_table():
    """A key added to the schema gets its line in BAD_VALUES (or None, with why)."""
    keys = schema_keys()
    assert len(keys) >= 130
    assert sorted(set(keys) - set(BAD_VALUES)) == [], "keys without a bad value"
    assert sorted(set(BAD_VALUES) - set(keys)) == [], "BAD_VALUES names keys the schema lacks"


#: each command line of argv[3] (a JSON list), composed and checked as run.py's pre-flight checks
#: it before anything needs torch (check_config), in a child forked from this interpreter (which
#: has imported Hydra and the suite, not torch): what it answered, in how long, what it imported
FORKED_CHECKS = """
import json, os, sys, time
from hydra import compose, initialize_config_dir
import experiments
from experiments.preflight import check_config, describe

cases = json.loads(sys.argv[3])
with initialize_config_dir(config_dir=sys.argv[1], version_base="1.3"):
    # warm: what every check imports (numpy for the clock, the algorithms' configs) is imported
    # once here, as it is in one run.py command; a fork then costs its own composition only
    check_config(compose(config_name="config", overrides=[f"out_root={sys.argv[2]}"],
                         return_hydra_config=True))
    for overrides in cases:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                check_config(compose(config_name="config", overrides=overrides,
                                     return_hydra_config=True))
                said = None
            except BaseException as e:
                said = describe(e)
            out = {"said": said, "heavy": sorted(m for m in HEAVY if m in sys.modules)}
            os.write(w, json.dumps(out).encode())
            os._exit(0)
        os.close(w)
        data = b""
        while chunk := os.read(r, 1 << 16):
            data += chunk
        os.close(r)
        os.waitpid(pid, 0)
        print(json.dumps({"case": overrides, **json.loads(data)}), flush=True)
"""


@pytest.fixture(scope="module")
def bad_value_answers(tmp_path_factory, worker_id) -> dict[tuple[str, str], dict]:
    """(key, cluster) -> how the pre-flight answered the key's bad value under that cluster (the
    cluster the line names, else each of CLUSTERS): all in one fresh interpreter, once a
    session (tests/session.py: each of `make test`'s processes asked again before, 47 s each on
    a loaded machine)."""

    def ask(folder: Path) -> None:
        found = _bad_value_answers(folder)
        (folder / "answers.json").write_text(json.dumps([[*k, v] for k, v in found.items()]))

    folder = once_a_session(tmp_path_factory, worker_id, "bad-values", ask)
    answers = json.loads((folder / "answers.json").read_text())
    return {(key, cluster): v for key, cluster, v in answers}


def _bad_value_answers(tmp: Path) -> dict[tuple[str, str], dict]:
    blocker = tmp / "a_file"
    blocker.write_text("not a directory")
    cases, index = [], []
    checked = [(k, v) for k, v in BAD_VALUES.items() if v is not None]
    for i, (key, bad) in enumerate(checked):
        args = bad[0].format(tmp=tmp, blocker=blocker).split()
        own = [a.split("=", 1)[1] for a in args if a.startswith("cluster=")]
        # each key under its own cluster, else under one of CLUSTERS in turn (a fork is ~0.1 s),
        # and one key of each kind that was slow with cluster=sim under every cluster
        clusters = own or (CLUSTERS if key in EVERY_CLUSTER else [CLUSTERS[i % len(CLUSTERS)]])
        for cluster in clusters:
            line = [*args, f"cluster={cluster}"] if not own else args
            if not any(a.startswith("out_root=") for a in line):
                line.append(f"out_root={tmp / 'out'}")
            cases.append(line)
            index.append((key, cluster))
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            f"HEAVY = {HEAVY!r}\n{FORKED_CHECKS}",
            str(REPO / "conf"),
            str(tmp / "out"),
            json.dumps(cases),
        ],  # fmt: skip
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    answers = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(answers) == len(cases), proc.stderr[-3000:]
    return {
        k: {**a, "expected": BAD_VALUES[k[0]][1].format(tmp=tmp, blocker=blocker)}
        for k, a in zip(index, answers, strict=True)
    }


@pytest.mark.parametrize("key", [k for k, v in BAD_VALUES.items() if v is not None])
def test_a_bad_value_of_every_key_is_answered_without_torch_whatever_the_cluster(
    bad_value_answers, key
):
    """Issue 36: a bad `algorithm.*`, `network.*`, `compute.*`, `cluster.*` or `dataset.*` value
    with cluster=sim, the free-space and writability checks, answered after torch's import
    (1.5-5 s). Every key's refusal now comes from the torch-free checks, under every cluster."""
    answers = {c: a for (k, c), a in bad_value_answers.items() if k == key}
    assert answers
    for cluster, answer in answers.items():
        said = f"{key} under cluster={cluster}: {answer}"
        assert answer["said"] is not None and answer["said"].startswith(answer["expected"]), said
        assert answer["heavy"] == [], said  # the cause of a quick answer, not a time bound
