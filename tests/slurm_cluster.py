"""A real, throw-away SLURM cluster on this one machine, for the tests marked `slurm`.

Debian's slurmctld/slurmd/slurm-client/munge packages; one private munged, one slurmctld and
two slurmd (`-N n1`, `-N n2`) emulating two nodes of 4 CPUs on 127.0.0.1 (`CPUs` is declared,
`SlurmdParameters=config_overrides` lets it exceed the real cores). No cgroups, no systemd:
proctrack/linuxproc, task/none. Everything the cluster writes lives in the work directory and
in RUN_DIR (munge socket, spool, state: short fixed paths, so a new start can clean up after a
crashed one). One cluster per machine at a time: a start stops the daemons of an earlier one.

Accounting is off (accounting_storage/none: the real `sacct` answers "Slurm accounting storage
is disabled"); finished jobs are logged by jobcomp/filetxt. `Cluster.env` puts a small `sacct`
stand-in first on PATH that answers the queries submitit makes (`sacct -o JobID,State,NodeList
--parsable2 -j ID`) from `scontrol show job` and the jobcomp log (see `sacct_main`), so
submitit notices jobs that end without a result (failed, cancelled, killed) too.

Node names n1/n2 must resolve (MASTER_ADDR = first host of SLURM_JOB_NODELIST): when they do
not, `start` appends `127.0.0.1 n1 n2` (with a marker comment) to /etc/hosts, and `stop`
removes the marked line.

    python -m tests.slurm_cluster up [DIR]   # start, keep running, print the exports
    python -m tests.slurm_cluster status
    python -m tests.slurm_cluster down
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
BINARIES = ("munged", "slurmctld", "slurmd", "slurmstepd", "sbatch", "srun", "scontrol", "sinfo")
NODES = ("n1", "n2")
CPUS_PER_NODE = 4
PARTITION = "debug"
RUN_DIR = Path("/tmp/commsgd-slurm")  # munge socket (its dirs must be o+x), spool, state file
STATE_FILE = RUN_DIR / "cluster.json"
MARKER_ENV = "COMMSGD_SLURM_DAEMON"  # in the environment of every daemon (and slurmstepd) we start
HOSTS_FILE = Path("/etc/hosts")
HOSTS_MARKER = "# commsgd-bench test SLURM cluster"
REQUIRE_ENV = "COMMSGD_REQUIRE_SLURM"
REPO = Path(__file__).resolve().parents[1]

TERMINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "PREEMPTED",
        "SPECIAL_EXIT",
    }
)
_SBIN = ("/usr/sbin", "/sbin", "/usr/bin", "/bin")


class SlurmClusterError(RuntimeError):
    pass


def _which(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for d in _SBIN:
        p = Path(d) / name
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    return None


def _missing() -> list[str]:
    return [b for b in BINARIES if _which(b) is None]


def available() -> str | None:
    """None when a cluster can be started here (maybe after `ensure_installed`), else why not."""
    if not sys.platform.startswith("linux"):
        return f"the test SLURM cluster needs Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return "the test SLURM cluster needs root (daemons run as SlurmUser=root)"
    missing = _missing()
    if missing and _which("apt-get") is None:
        return f"SLURM/munge not installed ({', '.join(missing)} missing) and no apt-get to install"
    return None


def ensure_installed(timeout: float = 900) -> None:
    """apt-get install the packages when a binary is missing (a no-op otherwise)."""
    missing = _missing()
    if not missing:
        return
    print(f"slurm_cluster: apt-get install {' '.join(PACKAGES)} ({', '.join(missing)} missing)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    deadline = time.monotonic() + timeout
    for cmd in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES],
    ):
        left = max(10.0, deadline - time.monotonic())
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=left)
        if r.returncode != 0:
            raise SlurmClusterError(
                f"{' '.join(cmd)} failed ({r.returncode}):\n{_tail_text(r.stdout + r.stderr, 30)}"
            )
    still = _missing()
    if still:
        raise SlurmClusterError(f"installed {' '.join(PACKAGES)} but still missing: {still}")


# ---------------------------------------------------------------------------------------------
# processes


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def _alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _terminate(pids: Iterable[int], timeout: float = 15.0) -> None:
    """SIGTERM, wait up to `timeout`, then SIGKILL; returns when all are gone."""
    pids = [p for p in pids if p > 0 and _alive(p)]
    for p in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while True:
        for p in pids:
            _reap(p)
        pids = [p for p in pids if _alive(p)]
        if not pids:
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    for p in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while pids and time.monotonic() < deadline:
        for p in pids:
            _reap(p)
        pids = [p for p in pids if _alive(p)]
        time.sleep(0.1)


def _processes() -> Iterator[tuple[int, str, dict[str, str]]]:
    """(pid, comm, environment) of every other process we may read."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            comm = (d / "comm").read_text().strip()
            raw = (d / "environ").read_bytes()
        except OSError:
            continue
        env = dict(v.split("=", 1) for v in raw.decode(errors="replace").split("\0") if "=" in v)
        yield int(d.name), comm, env


def _daemons() -> dict[int, tuple[str, str]]:
    """{pid: (comm, workdir)} of the daemons (and slurmstepd) started by `start`, found by the
    marker in their environment (slurmd passes its environment on to slurmstepd)."""
    return {
        pid: (comm, env[MARKER_ENV])
        for pid, comm, env in _processes()
        if MARKER_ENV in env and (comm.startswith("slurm") or comm == "munged")
    }


def _job_processes(conf: Path) -> list[int]:
    """Processes of jobs of the cluster configured by `conf` (SLURM_CONF and SLURM_JOB_ID in
    their environment): batch scripts, srun, tasks left behind when slurmstepd was killed."""
    return [
        pid
        for pid, _, env in _processes()
        if env.get("SLURM_CONF") == str(conf) and "SLURM_JOB_ID" in env
    ]


def _kill_stale() -> None:
    """Stop the daemons (and jobs) of clusters started earlier and never stopped."""
    by_workdir: dict[str, dict[str, int]] = {}
    for pid, (comm, workdir) in _daemons().items():
        by_workdir.setdefault(workdir, {})[f"{comm}.{pid}"] = pid
    for workdir, pids in by_workdir.items():
        print(f"slurm_cluster: stopping {len(pids)} daemon(s) of an earlier cluster ({workdir})")
        Cluster(Path(workdir), [], pids).stop(timeout=15)
    _remove_hosts_line()


# ---------------------------------------------------------------------------------------------
# /etc/hosts


def _resolvable(name: str) -> bool:
    try:
        socket.getaddrinfo(name, None)
        return True
    except OSError:
        return False


def _add_hosts_line() -> bool:
    if all(_resolvable(n) for n in NODES):
        return False
    text = HOSTS_FILE.read_text() if HOSTS_FILE.exists() else ""
    if text and not text.endswith("\n"):
        text += "\n"
    HOSTS_FILE.write_text(text + f"127.0.0.1 {' '.join(NODES)} {HOSTS_MARKER}\n")
    return True


def _remove_hosts_line() -> None:
    with contextlib.suppress(OSError):
        text = HOSTS_FILE.read_text()
        if HOSTS_MARKER in text:
            keep = [ln for ln in text.splitlines(keepends=True) if HOSTS_MARKER not in ln]
            HOSTS_FILE.write_text("".join(keep))


# ---------------------------------------------------------------------------------------------
# the cluster


def _tail_text(text: str, n: int) -> str:
    return "\n".join(text.splitlines()[-n:])


def _tail(path: Path, n: int = 30) -> str:
    try:
        return _tail_text(path.read_text(errors="replace"), n)
    except OSError as e:
        return f"({e})"


def client_env(conf: Path, bindir: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (os.environ) with SLURM_CONF, the sacct stand-in first on PATH, and no SLURM_* /
    SBATCH_* / SRUN_* / SALLOC_* variables inherited from an enclosing job."""
    base = dict(os.environ if base is None else base)
    env = {
        k: v
        for k, v in base.items()
        if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_")) and k != MARKER_ENV
    }
    path = [str(bindir), *[p for p in env.get("PATH", "").split(os.pathsep) if p]]
    path += [d for d in _SBIN if d not in path]
    env["PATH"] = os.pathsep.join(path)
    env["SLURM_CONF"] = str(conf)
    return env


def _slurm_conf(workdir: Path, ports: list[int], first_job_id: int) -> str:
    nodes = "\n".join(
        f"NodeName={n} NodeHostname=localhost NodeAddr=127.0.0.1 Port={p} "
        f"CPUs={CPUS_PER_NODE} RealMemory=32000 State=UNKNOWN"
        for n, p in zip(NODES, ports[1:], strict=True)
    )
    return f"""\
# commsgd-bench test cluster, written by tests/slurm_cluster.py
ClusterName=commsgdtest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ports[0]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# own munged; cred_expire: a requeued job may start again after cred_expire + 1 s (default 120)
AuthInfo=socket={RUN_DIR}/munge.sock,cred_expire=10
StateSaveLocation={RUN_DIR}/ctld
SlurmdSpoolDir={RUN_DIR}/spool/%n
SlurmctldPidFile={RUN_DIR}/slurmctld.pid
SlurmdPidFile={RUN_DIR}/slurmd.%n.pid
SlurmctldLogFile={workdir}/slurmctld.log
SlurmdLogFile={workdir}/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig={workdir}/plugstack.conf
MailProg=/bin/true
# no cgroups, no systemd in a container
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
# no slurmdbd: sacct is the stand-in in {workdir}/bin, reading the jobcomp log and scontrol
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={workdir}/jobcomp.txt
SlurmdParameters=config_overrides
ReturnToService=2
FirstJobId={first_job_id}
MinJobAge=300
KillWait=10
InactiveLimit=0
Waittime=0
JobRequeue=1
MessageTimeout=10
SlurmctldTimeout=30
SlurmdTimeout=60
{nodes}
PartitionName={PARTITION} Nodes={",".join(NODES)} Default=YES MaxTime=INFINITE State=UP
"""


_SACCT_SHIM = """\
#!{python}
# sacct stand-in of the commsgd-bench test cluster (accounting_storage/none): answers from
# `scontrol show job` and the jobcomp/filetxt log. See tests/slurm_cluster.py (sacct_main).
import sys

sys.path.insert(0, {repo!r})
from tests.slurm_cluster import sacct_main

sys.exit(sacct_main(sys.argv[1:]))
"""


class Cluster:
    """A running test cluster. `env` is what client commands (sbatch, srun, scontrol, squeue,
    sacct, submitit, run.py) need: pass it as `env=` to subprocess."""

    def __init__(
        self,
        workdir: Path,
        ports: list[int],
        pids: dict[str, int],
        procs: dict[str, subprocess.Popen] | None = None,
        hosts_added: bool = False,
    ) -> None:
        self.workdir = Path(workdir)
        self.conf = self.workdir / "slurm.conf"
        self.bindir = self.workdir / "bin"
        self.jobcomp = self.workdir / "jobcomp.txt"
        self.ports = ports
        self.pids = pids
        self.procs = procs or {}
        self.hosts_added = hosts_added
        self.env = client_env(self.conf, self.bindir)
        self.nodes = NODES
        self.partition = PARTITION

    # -- commands ------------------------------------------------------------------------------

    def run(
        self, cmd: list[str], *, check: bool = True, timeout: float = 60, cwd=None
    ) -> subprocess.CompletedProcess:
        """Run a client command with `env`; output captured as text."""
        r = subprocess.run(
            cmd, env=self.env, cwd=cwd, capture_output=True, text=True, timeout=timeout
        )
        if check and r.returncode != 0:
            raise SlurmClusterError(
                f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n{r.stdout}{r.stderr}"
            )
        return r

    def sbatch(self, args: list[str], cwd=None) -> str:
        """`sbatch --parsable ARGS`; returns the job id (for an array: the array's job id)."""
        r = self.run(["sbatch", "--parsable", *map(str, args)], cwd=cwd)
        return r.stdout.strip().split(";")[0]

    def records(self) -> list[dict[str, str]]:
        return job_records(self.env, self.jobcomp)

    def states(self, job_id: str | int) -> dict[str, str]:
        """{sacct-style job id: state} of a job, or of each task of an array job."""
        return {
            _sacct_id(r): r.get("JobState", "UNKNOWN")
            for r in self.records()
            if _matches(r, str(job_id))
        }

    def state(self, job_id: str | int) -> str:
        """State of a job ("UNKNOWN" when SLURM does not know it); for an array job id, the
        common state of its tasks, else "A_0:STATE A_1:STATE ..." ."""
        states = self.states(job_id)
        if not states:
            return "UNKNOWN"
        values = set(states.values())
        if len(values) == 1:
            return values.pop()
        return " ".join(f"{k}:{v}" for k, v in states.items())

    def info(self, job_id: str | int) -> dict[str, str]:
        """`scontrol show job` fields of a job (or its jobcomp record once purged)."""
        for r in self.records():
            if _sacct_id(r) == str(job_id) or r.get("JobId") == str(job_id):
                return r
        return {}

    def wait(
        self, job_id: str | int, timeout: float = 120, until: Iterable[str] | None = None
    ) -> str:
        """Poll until the job (every task of an array) is in a state of `until` (default: ended:
        COMPLETED, FAILED, CANCELLED, TIMEOUT, ...); returns `state(job_id)`. Raises
        TimeoutError with the queue and the daemon logs after `timeout` seconds."""
        wanted = TERMINAL_STATES if until is None else frozenset(until)
        deadline = time.monotonic() + timeout
        while True:
            states = self.states(job_id)
            if states and all(s.split()[0] in wanted for s in states.values()):
                return self.state(job_id)
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"job {job_id} not in {sorted(wanted)} after {timeout:.0f}s: {states}\n"
                    f"{self.run(['squeue'], check=False).stdout}\n{self.logs()}"
                )
            time.sleep(0.5)

    def wait_for_files(self, paths: Iterable[Path], timeout: float = 60) -> None:
        """Poll until all `paths` exist (tasks signalling that they are up)."""
        paths = [Path(p) for p in paths]
        deadline = time.monotonic() + timeout
        while not all(p.exists() for p in paths):
            if time.monotonic() > deadline:
                missing = [str(p) for p in paths if not p.exists()]
                raise TimeoutError(
                    f"missing after {timeout:.0f}s: {missing}\n"
                    f"{self.run(['squeue'], check=False).stdout}\n{self.logs()}"
                )
            time.sleep(0.2)

    @contextlib.contextmanager
    def activate(self) -> Iterator[Cluster]:
        """os.environ = `env` inside the block, for in-process clients (submitit executors)."""
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(self.env)
        try:
            yield self
        finally:
            os.environ.clear()
            os.environ.update(saved)

    def logs(self, lines: int = 25) -> str:
        """Tails of the daemons' logs, for failure messages."""
        parts = []
        names = ["munged.log", "slurmctld.log", *[f"slurmd.{n}.log" for n in NODES]]
        names += sorted(p.name for p in self.workdir.glob("*.out"))
        for name in names:
            path = self.workdir / name
            if path.exists() and path.stat().st_size:
                parts.append(f"--- {path} (last {lines} lines)\n{_tail(path, lines)}")
        return "\n".join(parts)

    def exports(self) -> str:
        return f"export SLURM_CONF={self.conf} PATH={self.bindir}:$PATH"

    # -- lifecycle -----------------------------------------------------------------------------

    def stop(self, timeout: float = 30) -> None:
        """Cancel every job, stop the daemons this cluster started and wait for them to exit."""
        ctld = [p for n, p in self.pids.items() if n.startswith("slurmctld")]
        if ctld and _alive(ctld[0]) and self.conf.exists():
            with contextlib.suppress(Exception):
                self.run(["scancel", f"--partition={PARTITION}"], check=False, timeout=20)
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline:
                    q = self.run(["squeue", "-h", "-o", "%A"], check=False, timeout=20)
                    if q.returncode != 0 or not q.stdout.strip():
                        break
                    time.sleep(0.3)
        for kind in ("slurmd", "slurmctld", "munged", ""):  # "": anything else (slurmscriptd)
            pids = [p for n, p in self.pids.items() if n.startswith(kind)]
            _terminate(pids, timeout=15)
            for proc in self.procs.values():
                if proc.pid in pids:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=5)
        # slurmstepd and job processes of jobs that did not end (a crashed or killed controller)
        _terminate([p for p, (_, w) in _daemons().items() if w == str(self.workdir)], timeout=5)
        _terminate(_job_processes(self.conf), timeout=5)
        if self.hosts_added:
            _remove_hosts_line()
        with contextlib.suppress(OSError, ValueError):
            if json.loads(STATE_FILE.read_text()).get("workdir") == str(self.workdir):
                STATE_FILE.unlink()
        self.pids = {}

    def _save(self) -> None:
        STATE_FILE.write_text(
            json.dumps(
                {
                    "workdir": str(self.workdir),
                    "ports": self.ports,
                    "pids": self.pids,
                    "hosts_added": self.hosts_added,
                }
            )
        )

    @classmethod
    def load(cls) -> Cluster | None:
        """The cluster recorded in STATE_FILE (one started by `up`), if any."""
        try:
            state = json.loads(STATE_FILE.read_text())
        except (OSError, ValueError):
            return None
        return cls(
            Path(state["workdir"]), state["ports"], state["pids"], None, state["hosts_added"]
        )


def start(workdir: str | os.PathLike, timeout: float = 60) -> Cluster:
    """Write the configuration into `workdir`, start munged, slurmctld, slurmd -N n1/n2 and wait
    until both nodes are idle. Daemons of an earlier cluster are stopped first."""
    workdir = Path(workdir).resolve()
    for name in ("munged", "slurmctld", "slurmd"):
        if _which(name) is None:
            raise SlurmClusterError(f"{name} not found: call ensure_installed() first")
    _kill_stale()
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    RUN_DIR.chmod(0o755)
    for sub in ("ctld", "spool"):
        shutil.rmtree(RUN_DIR / sub, ignore_errors=True)
    (RUN_DIR / "ctld").mkdir(mode=0o700)
    for n in NODES:
        (RUN_DIR / "spool" / n).mkdir(parents=True, mode=0o755)
    for stale in RUN_DIR.glob("*.pid"):
        stale.unlink()
    with contextlib.suppress(FileNotFoundError):
        (RUN_DIR / "munge.sock").unlink()

    workdir.mkdir(parents=True, exist_ok=True)
    workdir.chmod(0o700)  # munged refuses a key/log dir writable by others
    for old in [*workdir.glob("*.log"), workdir / "jobcomp.txt"]:
        old.unlink(missing_ok=True)
    key = workdir / "munge.key"
    key.unlink(missing_ok=True)
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(secrets.token_bytes(1024))
    ports = _free_ports(1 + len(NODES))
    first_job_id = 1000 + int(time.time() * 100) % 60_000_000  # no id reuse across clusters
    (workdir / "slurm.conf").write_text(_slurm_conf(workdir, ports, first_job_id))
    (workdir / "plugstack.conf").write_text("")
    bindir = workdir / "bin"
    bindir.mkdir(exist_ok=True)
    shim = bindir / "sacct"
    shim.write_text(_SACCT_SHIM.format(python=sys.executable, repo=str(REPO)))
    shim.chmod(0o755)

    hosts_added = _add_hosts_line()
    cluster = Cluster(workdir, ports, {}, {}, hosts_added)
    daemon_env = {**cluster.env, MARKER_ENV: str(workdir)}
    conf = str(cluster.conf)

    def spawn(name: str, cmd: list[str]) -> None:
        out = open(workdir / f"{name}.out", "wb")  # noqa: SIM115 - the daemon keeps it
        proc = subprocess.Popen(
            cmd,
            env=daemon_env,
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        out.close()
        cluster.procs[name] = proc
        cluster.pids[name] = proc.pid
        cluster._save()

    try:
        spawn(
            "munged",
            [
                _which("munged"),
                "--foreground",
                f"--socket={RUN_DIR}/munge.sock",
                f"--key-file={key}",
                f"--log-file={workdir}/munged.log",
                f"--pid-file={RUN_DIR}/munged.pid",
                f"--seed-file={workdir}/munged.seed",
            ],
        )
        _wait_until(lambda: (RUN_DIR / "munge.sock").exists(), 15, "munged socket", cluster)
        spawn("slurmctld", [_which("slurmctld"), "-D", "-c", "-f", conf])
        for n in NODES:
            spawn(f"slurmd.{n}", [_which("slurmd"), "-D", "-N", n, "-f", conf])
        _wait_until(lambda: _nodes_idle(cluster), timeout, "both nodes idle in sinfo", cluster)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _nodes_idle(cluster: Cluster) -> bool:
    r = cluster.run(["sinfo", "-h", "-N", "-o", "%N %t"], check=False, timeout=20)
    states = dict(ln.split() for ln in r.stdout.splitlines() if len(ln.split()) == 2)
    return r.returncode == 0 and all(states.get(n) == "idle" for n in NODES)


def _wait_until(cond, timeout: float, what: str, cluster: Cluster) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        dead = [n for n, p in cluster.procs.items() if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            why = f"daemon(s) exited: {dead}" if dead else f"timeout after {timeout:.0f}s"
            outs = "\n".join(
                f"--- {p}\n{_tail(p, 10)}" for p in sorted(cluster.workdir.glob("*.out"))
            )
            raise SlurmClusterError(
                f"test SLURM cluster: no {what} ({why})\n{cluster.logs()}\n{outs}"
            )
        time.sleep(0.2)


# ---------------------------------------------------------------------------------------------
# job records: `scontrol show job` (jobs slurmctld still holds) over the jobcomp log (ended jobs)

_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=")


def _parse_fields(line: str) -> dict[str, str]:
    """`Key=value Key=value ...` (values may contain spaces) -> dict."""
    matches = list(_KEY.finditer(line))
    out = {}
    for m, nxt in zip(matches, [*matches[1:], None], strict=True):
        end = nxt.start() if nxt is not None else len(line)
        out.setdefault(m.group(1), line[m.end() : end].strip())
    return out


_ALIASES = {"Name": "JobName", "NodeCnt": "NumNodes", "ProcCnt": "NumCPUs"}


def job_records(env: dict[str, str], jobcomp: Path | None = None) -> list[dict[str, str]]:
    """One dict of `scontrol show job` fields per job (array tasks separate), ordered by id."""
    records: dict[str, dict[str, str]] = {}
    if jobcomp is not None and jobcomp.exists():
        for line in jobcomp.read_text(errors="replace").splitlines():
            rec = _parse_fields(line)
            if "JobId" in rec:
                rec = {_ALIASES.get(k, k): v for k, v in rec.items()}
                rec["Source"] = "jobcomp"
                records[rec["JobId"]] = rec  # the last record of a job wins (requeue: 2)
    r = subprocess.run(
        ["scontrol", "show", "job", "-o"], env=env, capture_output=True, text=True, timeout=30
    )
    if r.returncode == 0:
        for line in r.stdout.splitlines():
            rec = _parse_fields(line)
            if "JobId" in rec:
                rec["Source"] = "scontrol"
                records[rec["JobId"]] = rec
    return sorted(records.values(), key=lambda rec: int(rec["JobId"]))


def _is_array(rec: dict[str, str]) -> bool:
    return rec.get("ArrayJobId", "") not in ("", "(null)", "0") and "ArrayTaskId" in rec


def _sacct_id(rec: dict[str, str]) -> str:
    if _is_array(rec):
        task = rec["ArrayTaskId"]
        if not task.isdigit():  # pending remainder "1-3" / "2,4"
            task = f"[{task}]"
        return f"{rec['ArrayJobId']}_{task}"
    return rec["JobId"]


def _matches(rec: dict[str, str], wanted: str) -> bool:
    if "_" in wanted:
        return _sacct_id(rec) == wanted
    return rec["JobId"] == wanted or (_is_array(rec) and rec["ArrayJobId"] == wanted)


def _elapsed(rec: dict[str, str]) -> str:
    return rec.get("RunTime", "")


_SACCT_FIELDS = {
    "jobid": _sacct_id,
    "jobidraw": lambda r: r["JobId"],
    "jobname": lambda r: r.get("JobName", ""),
    "state": lambda r: r.get("JobState", "UNKNOWN"),
    "nodelist": lambda r: (
        "None assigned" if r.get("NodeList", "(null)") in ("", "(null)") else r["NodeList"]
    ),
    "exitcode": lambda r: r.get("ExitCode", ""),
    "derivedexitcode": lambda r: r.get("DerivedExitCode", ""),
    "partition": lambda r: r.get("Partition", ""),
    "nnodes": lambda r: r.get("NumNodes", ""),
    "ncpus": lambda r: r.get("NumCPUs", ""),
    "alloccpus": lambda r: r.get("NumCPUs", ""),
    "submit": lambda r: r.get("SubmitTime", ""),
    "start": lambda r: r.get("StartTime", ""),
    "end": lambda r: r.get("EndTime", ""),
    "elapsed": _elapsed,
    "user": lambda r: r.get("UserId", "").split("(")[0],
    "account": lambda r: r.get("Account", "") if r.get("Account") != "(null)" else "",
    "workdir": lambda r: r.get("WorkDir", ""),
    "reason": lambda r: r.get("Reason", ""),
}
_DEFAULT_FORMAT = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode"
_WITH_VALUE = {"-S", "--starttime", "-E", "--endtime", "-u", "--user", "-M", "--clusters"}
_WITH_VALUE |= {"-s", "--state", "-A", "--accounts", "-r", "--partition", "--name"}


def sacct_main(argv: list[str]) -> int:
    """The `sacct` stand-in: -j/--jobs, -o/--format, -P/--parsable2, -p/--parsable,
    -n/--noheader, -b/--brief; -X/--allocations implied (no steps); other filters ignored."""
    fmt, jobs, delim, trailing, header = _DEFAULT_FORMAT, [], None, False, True
    args = list(argv)
    while args:
        a = args.pop(0)
        name, eq, value = a.partition("=")
        if name in ("-j", "--jobs", "-o", "--format") or (a[:2] in ("-j", "-o") and len(a) > 2):
            if a[:2] in ("-j", "-o") and len(a) > 2 and not a.startswith("--"):
                name, value = a[:2], a[2:]
            elif not eq:
                if not args:
                    print(f"sacct: option {a} needs a value", file=sys.stderr)
                    return 1
                value = args.pop(0)
            if name in ("-j", "--jobs"):
                jobs += [j for j in value.split(",") if j]
            else:
                fmt = value
        elif a in ("-P", "--parsable2"):
            delim, trailing = "|", False
        elif a in ("-p", "--parsable"):
            delim, trailing = "|", True
        elif a in ("-n", "--noheader"):
            header = False
        elif a in ("-b", "--brief"):
            fmt = "JobID,State,ExitCode"
        elif name in _WITH_VALUE:
            if not eq and args:
                args.pop(0)
        elif a.startswith("-"):
            continue  # -X, -a, -L, -D, --noconvert, ...: no effect here
        else:
            print(f"sacct: unexpected argument {a!r}", file=sys.stderr)
            return 1
    fields = [f.split("%")[0] for f in fmt.split(",") if f]
    unknown = [f for f in fields if f.lower() not in _SACCT_FIELDS]
    if unknown:
        print(
            f"sacct (test cluster stand-in): unsupported field(s) {unknown}; "
            f"supported: {', '.join(sorted(_SACCT_FIELDS))}",
            file=sys.stderr,
        )
        return 1
    conf = os.environ.get("SLURM_CONF")
    jobcomp = None
    if conf and Path(conf).exists():
        m = re.search(r"^JobCompLoc=(.*)$", Path(conf).read_text(), re.M)
        jobcomp = Path(m.group(1).strip()) if m else None
    records = job_records(dict(os.environ), jobcomp)
    if jobs:
        records = [r for r in records if any(_matches(r, j) for j in jobs)]
    rows = [[_SACCT_FIELDS[f.lower()](r) for f in fields] for r in records]
    if delim is not None:
        end = delim if trailing else ""
        if header:
            print(delim.join(fields) + end)
        for row in rows:
            print(delim.join(row) + end)
        return 0
    widths = [max(10, len(f), *(len(row[i]) for row in rows)) for i, f in enumerate(fields)]
    if header:
        print(" ".join(f.rjust(w) for f, w in zip(fields, widths, strict=True)))
        print(" ".join("-" * w for w in widths))
    for row in rows:
        print(" ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)))
    return 0


# ---------------------------------------------------------------------------------------------
# pytest fixture


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A started test cluster for the session; skips (fails under COMMSGD_REQUIRE_SLURM=1) when
    this machine cannot run one."""
    reason = available()
    if reason is None:
        try:
            ensure_installed()
        except (SlurmClusterError, OSError, subprocess.TimeoutExpired) as e:
            reason = f"could not install SLURM: {e}"
    if reason is not None:
        if os.environ.get(REQUIRE_ENV, "") not in ("", "0"):
            pytest.fail(f"{REQUIRE_ENV} is set but no test SLURM cluster: {reason}")
        pytest.skip(reason)
    cluster = start(tmp_path_factory.mktemp("slurm"))
    try:
        yield cluster
    finally:
        cluster.stop()


# ---------------------------------------------------------------------------------------------
# command line


def main(argv: list[str]) -> int:
    cmd = argv[0] if argv else "status"
    if cmd == "up":
        reason = available()
        if reason:
            print(f"cannot start: {reason}", file=sys.stderr)
            return 1
        ensure_installed()
        workdir = Path(argv[1]) if len(argv) > 1 else RUN_DIR / "dev"
        t0 = time.monotonic()
        cluster = start(workdir)
        print(f"test SLURM cluster up in {time.monotonic() - t0:.1f}s; workdir {cluster.workdir}")
        print(cluster.exports())
        return 0
    cluster = Cluster.load()
    if cmd == "down":
        if cluster is not None:
            cluster.stop()
        _kill_stale()
        print("test SLURM cluster down")
        return 0
    if cmd == "status":
        if cluster is None or not _alive(cluster.pids.get("slurmctld", -1)):
            print("no test SLURM cluster running")
            return 1
        print(f"workdir {cluster.workdir}; daemons {cluster.pids}")
        print(cluster.run(["sinfo"], check=False).stdout)
        print(cluster.run(["squeue"], check=False).stdout)
        print(cluster.exports())
        return 0
    print("usage: python -m tests.slurm_cluster up [DIR] | down | status", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
