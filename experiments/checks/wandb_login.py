"""The pre-flight's check of `wandb.mode=online` (experiments/preflight.py, `check_values`):
credentials, and a W&B server that answers and accepts them, asked once per command."""

from __future__ import annotations

import netrc
import os
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from experiments.errors import UserError

if TYPE_CHECKING:
    from experiments.checks.machine import Launcher


# wandb.mode=online is checked once per command (a sweep's points share it: `_WANDB_ANSWERS`),
# before any work, by asking the W&B server who the key belongs to: no network, a server that
# does not answer within WANDB_CHECK_TIMEOUT_S or a key it refuses is one line and exit 2, rather
# than wandb.init's 90 s wait and a worker's traceback (issue 36 item 4). Stdlib only (torch-free,
# wandb-free: wandb's own login retries for minutes). A W&B lost after this check costs the run
# nothing: experiments/store/log.py goes on offline and never fails a finished run.
WANDB_CHECK_TIMEOUT_S = 8.0  # the whole check: name lookup, connection, TLS, answer
WANDB_DEFAULT_URL = "https://api.wandb.ai"
OFFLINE_HINT = "(or run with wandb.mode=offline and `wandb sync` the records later)"
_WANDB_ANSWERS: dict[tuple[str, str], str | None] = {}  # (url, key) -> problem, None: fine


def wandb_base_url() -> str:
    """The W&B server this process talks to: WANDB_BASE_URL, else W&B's cloud."""
    return os.environ.get("WANDB_BASE_URL", "").strip().rstrip("/") or WANDB_DEFAULT_URL


def wandb_api_key() -> str | None:
    """The key W&B logs in with, without asking: WANDB_API_KEY, or the password of a netrc
    entry for the W&B host (what `wandb login` writes); None without one."""
    key = os.environ.get("WANDB_API_KEY", "").strip()
    if key:
        return key
    host = urlparse(wandb_base_url()).hostname or ""
    try:
        entry = netrc.netrc(os.environ.get("NETRC")).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        return None
    return entry[2] if entry and entry[2] else None


def has_wandb_credentials() -> bool:
    """Whether W&B can log in without asking (`wandb_api_key`)."""
    return wandb_api_key() is not None


def wandb_login_problem(timeout_s: float | None = None) -> str | None:
    """Why W&B online cannot work from here, in a phrase, or None: the server at
    `wandb_base_url()` must answer a query for the key's user within `timeout_s` (default
    WANDB_CHECK_TIMEOUT_S) and know the key. Asked once per server and key in a process."""
    import threading

    timeout_s = WANDB_CHECK_TIMEOUT_S if timeout_s is None else timeout_s
    base, key = wandb_base_url(), wandb_api_key() or ""
    if (base, key) in _WANDB_ANSWERS:
        return _WANDB_ANSWERS[(base, key)]
    answer: list[str | None] = []
    # A thread with a deadline: a socket timeout does not bound the name lookup.
    asking = threading.Thread(
        target=lambda: answer.append(_ask_wandb(base, key, timeout_s)),
        name="commsgd-wandb-check",
        daemon=True,
    )
    asking.start()
    asking.join(timeout_s)
    if answer:
        problem = answer[0]
    else:
        problem = f"W&B at {base} did not answer within {timeout_s:g} s"
    _WANDB_ANSWERS[(base, key)] = problem
    return problem


def _ask_wandb(base: str, key: str, timeout_s: float) -> str | None:
    """One query of the W&B GraphQL API for the key's user: None when it knows the key."""
    import base64
    import http.client
    import json
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        f"{base}/graphql",
        data=json.dumps({"query": "query CommsgdViewer { viewer { id username } }"}).encode(),
        headers={
            "Content-Type": "application/json",
            "Authorization": "Basic " + base64.b64encode(f"api:{key}".encode()).decode(),
            "User-Agent": "commsgd-bench (W&B login check)",
        },
    )
    rejected = (
        f"W&B at {base} does not accept the API key: check WANDB_API_KEY or run "
        "`wandb login --relogin`"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = response.read(1 << 20)
    except urllib.error.HTTPError as e:
        return rejected if e.code in (401, 403) else f"W&B at {base} answered HTTP {e.code}"
    except (OSError, http.client.HTTPException, ValueError) as e:  # URLError is an OSError
        reason = e.reason if isinstance(e, urllib.error.URLError) else e
        if isinstance(reason, TimeoutError):  # as the deadline says it, whichever comes first
            return f"W&B at {base} did not answer within {timeout_s:g} s"
        return f"cannot reach W&B at {base} ({_reason(reason)})"
    try:
        viewer = (json.loads(body).get("data") or {}).get("viewer")
    except (ValueError, AttributeError):
        return f"{base} does not answer as W&B's API does (check WANDB_BASE_URL)"
    return None if viewer else rejected


def _reason(error: object) -> str:
    """An error's reason in a few words, on one line."""
    if isinstance(error, BaseException):
        text = getattr(error, "strerror", None) or str(error) or type(error).__name__
    else:
        text = str(error)
    return " ".join(text.split())[:200]


def check_wandb(cfg: dict[str, Any], launcher: Launcher | None = None) -> None:
    """wandb.mode=online needs credentials and, where this process logs to W&B (not a worker of
    rank > 0 under a launcher: only rank 0 logs), a W&B that answers and accepts them."""
    if cfg["wandb"]["mode"] != "online":
        return
    if not has_wandb_credentials():
        raise UserError(
            "wandb.mode=online needs W&B credentials: set WANDB_API_KEY or run `wandb login` "
            + OFFLINE_HINT
        )
    if launcher is not None and launcher.rank != 0:
        return
    problem = wandb_login_problem()
    if problem is not None:
        raise UserError(f"wandb.mode=online: {problem} {OFFLINE_HINT}")
