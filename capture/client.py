"""The vLLM server's control surface: preflight, ``/start_profile``, ``/stop_profile``.

vLLM (0.13+, started with ``--profiler-config``) serves ``POST /start_profile`` and ``POST /stop_profile``; the
stop writes every worker's trace before it answers, which can take minutes (symbolicating Python stacks costs
milliseconds per event), and nothing retries or times it out on the server side.

Rules this module keeps:

- ``/stop_profile`` is sent **once** per session this run started, with a long read timeout, and never
  retried: on older servers a second stop answers 500 or crashes the front end (vLLM issues #51676,
  #26479).  Whatever comes back (empty 200, 500, a timeout, a reset connection) is reported as a short
  status string; the caller then looks at the files.
- 404 on the profiler routes means "profiling not enabled" (:class:`ProfilingDisabled`, whose message
  carries the exact ``--profiler-config`` to add); 409 on start means someone else's session is active
  (:class:`SessionActive`): we never stop a session we did not start.
- On 0.32+ the start body carries ``profile_prefix`` (so our files are told apart from anyone
  else's) and, when asked, ``delay_iterations`` / ``max_iterations``.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass

import httpx


class CaptureError(Exception):
    """A failure that ends the capture with a one-line message."""


class ProfilingDisabled(CaptureError):
    """The profiler routes answer 404: the server was started without profiling (the message says how)."""


class SessionActive(CaptureError):
    """/start_profile answered 409: someone else's session is active (never ours to stop)."""


class StartOutcomeUnknown(CaptureError):
    """``/start_profile`` was sent but no answer came (read timeout, connection closed): the server may be
    profiling now, or start to later.  The caller must send the one stop (or warn loudly)."""

    def __init__(self, status: str, seconds: float, detail: str):
        self.status = status  # "timeout" | "reset"
        self.seconds = seconds
        self.detail = detail
        super().__init__(f"/start_profile got no answer ({status} after {seconds:,.1f}s: {detail})")


def check_url(url: str) -> str:
    """The server's base URL, checked: ``http(s)://host[:port][/prefix]``; raises :class:`CaptureError`.

    Returns it without surrounding blanks and trailing slashes.  Malformed URLs (an unclosed IPv6
    bracket, a port that is not a number or out of range, no host, another scheme, a query) get a
    one-line reason instead of an httpx traceback."""
    text = str(url).strip()
    example = "e.g. http://127.0.0.1:8000 or http://[::1]:8000"
    if not text:
        raise CaptureError(f"--url is empty; give the server's base URL, {example}")
    if "://" not in text:
        raise CaptureError(f"--url {text!r} has no scheme; did you mean http://{text} ?")
    try:
        u = httpx.URL(text)
    except (httpx.InvalidURL, ValueError, TypeError) as e:
        why = str(e)
        authority = text.split("://", 1)[1].split("/", 1)[0]
        if "[" in authority and "]" not in authority:
            why = "unclosed '[' in an IPv6 address"
        raise CaptureError(f"--url {text!r} is not a valid URL ({why}); {example}") from None
    if u.scheme not in ("http", "https"):
        raise CaptureError(f"--url {text!r}: the scheme must be http or https, not {u.scheme!r}")
    if not u.host:
        raise CaptureError(f"--url {text!r} has no host; {example}")
    if u.port is not None and not 1 <= u.port <= 65535:
        raise CaptureError(f"--url {text!r}: port {u.port} is out of range (1-65535)")
    if u.query or u.fragment:
        raise CaptureError(f"--url {text!r}: give the server's base URL, without a ?query or #fragment")
    return text.rstrip("/")


def suggested_profiler_config(trace_dir: str) -> str:
    """The ``--profiler-config`` that keeps ``/stop_profile`` short: no Python stacks (their symbolication is the
    slow part of the export), no key-averages table, no front-end trace."""
    cfg = {
        "profiler": "torch",
        "torch_profiler_dir": trace_dir,
        "torch_profiler_with_stack": False,
        "torch_profiler_dump_cuda_time_total": False,
        "ignore_frontend": True,
    }
    return "--profiler-config '" + json.dumps(cfg, separators=(",", ":")) + "'"


def disabled_message(url: str, trace_dir: str, version: str | None) -> str:
    """What to tell the user when profiling is off: how to restart this vLLM version with it on."""
    v = parse_version(version)
    lines = [f"{url}: the profiler routes answer 404, so profiling is not enabled on this server."]
    if v is not None and v < (0, 13):
        lines.append(
            f"vLLM {version} is older than 0.13: restart it with VLLM_TORCH_PROFILER_DIR={trace_dir} "
            "VLLM_TORCH_PROFILER_WITH_STACK=0 in the API server's environment."
        )
    else:
        lines.append("Restart vLLM with:")
        lines.append("  " + suggested_profiler_config(trace_dir))
        lines.append(
            "(stack capture and the key-averages table off, front end ignored: these keep "
            '/stop_profile short; add "max_iterations": N to bound the window.)'
        )
        lines.append("Or run with --no-profile for load and latency numbers only.")
    return "\n".join(lines)


def parse_version(text: str | None) -> tuple[int, int] | None:
    """(major, minor) of a version string such as ``0.32.0`` or ``v0.11.1rc2``; None when it is not one."""
    if not text:
        return None
    m = re.match(r"v?(\d+)\.(\d+)", text.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


def supports_start_body(version: str | None) -> bool:
    """0.32+ takes ``{"profile_prefix", "delay_iterations", "max_iterations"}`` on /start_profile."""
    v = parse_version(version)
    return v is not None and v >= (0, 32)


_RUNNING = re.compile(r"^vllm:num_requests_running(?:\{[^}]*\})?\s+(\S+)", re.M)


def parse_running_requests(text: str) -> int | None:
    """Sum of the ``vllm:num_requests_running`` samples in a Prometheus text page; None if absent."""
    total, found = 0.0, False
    for m in _RUNNING.finditer(text):
        try:
            v = float(m.group(1))
        except ValueError:
            continue
        if v == v and v not in (float("inf"), float("-inf")):
            total += v
            found = True
    return int(round(total)) if found else None


@dataclass
class ServerInfo:
    """What preflight found out about the server."""

    url: str
    version: str | None
    models: list[str]
    max_model_len: int | None
    profiler_routes: bool | None  # None: not probed
    server_args: dict | None
    tokenize: bool


@dataclass
class StopResult:
    """How the one /stop_profile call ended (a short status, never an exception) and how long it took."""

    status: str  # "200", "500", "timeout", "reset", "connect-error", "interrupted", ...
    seconds: float
    detail: str | None = None


class ControlClient:
    """Short control calls share one client; the stop call gets its own long-timeout client."""

    def __init__(self, url: str, api_key: str | None = None, timeout: float = 30.0):
        self.url = check_url(url)
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout = timeout
        self.http = httpx.AsyncClient(base_url=self.url, headers=self.headers, timeout=timeout)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def preflight(self, trace_dir: str | None, want_profiler: bool) -> ServerInfo:
        """Health, version, models (and their max_model_len), the profiler routes when ``want_profiler``, the
        server args (dev mode only) and whether /tokenize works; :class:`CaptureError` when it cannot go on."""
        try:
            r = await self.http.get("/health")
        except httpx.HTTPError as e:
            raise CaptureError(f"{self.url}/health: cannot reach the server ({type(e).__name__}: {e})") from e
        if r.status_code != 200:
            raise CaptureError(f"{self.url}/health answered {r.status_code}: the server is not ready")
        version = None
        try:
            r = await self.http.get("/version")
            if r.status_code == 200:
                version = str(r.json().get("version"))
        except (httpx.HTTPError, ValueError, AttributeError):
            pass
        models: list[str] = []
        max_len = None
        try:
            r = await self.http.get("/v1/models")
        except httpx.HTTPError as e:
            raise CaptureError(f"{self.url}/v1/models: {type(e).__name__}: {e}") from e
        if r.status_code == 401:
            raise CaptureError(f"{self.url}/v1/models answered 401: pass --api-key")
        if r.status_code != 200:
            raise CaptureError(f"{self.url}/v1/models answered {r.status_code}")
        try:
            for m in r.json().get("data", []):
                models.append(m["id"])
                if max_len is None and isinstance(m.get("max_model_len"), int):
                    max_len = m["max_model_len"]
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CaptureError(f"{self.url}/v1/models: unexpected answer ({e})") from e
        if not models:
            raise CaptureError(f"{self.url}/v1/models lists no model")
        routes = None
        if want_profiler:
            routes = await self.profiler_routes_present()
            if routes is False:
                raise ProfilingDisabled(disabled_message(self.url, trace_dir or "/abs/trace/dir", version))
        server_args = None
        try:  # only served with VLLM_SERVER_DEV_MODE=1; optional
            r = await self.http.get("/server_info")
            if r.status_code == 200:
                body = r.json()
                server_args = body if isinstance(body, dict) else {"server_info": body}
        except (httpx.HTTPError, ValueError):
            pass
        tok = False
        try:
            r = await self.http.post("/tokenize", json={"model": models[0], "prompt": "hello"})
            tok = r.status_code == 200 and isinstance(r.json().get("tokens"), list)
        except (httpx.HTTPError, ValueError, AttributeError):
            pass
        return ServerInfo(self.url, version, models, max_len, routes, server_args, tok)

    async def profiler_routes_present(self) -> bool:
        """GET on the POST-only routes: 405 (or anything but 404) means registered, 404 means not."""
        r = await self.http.get("/start_profile")
        if r.status_code == 404:
            return False
        r2 = await self.http.get("/stop_profile")
        return r2.status_code != 404

    async def running_requests(self) -> int | None:
        """``vllm:num_requests_running`` now, summed over engines (data-parallel ranks), from ``/metrics``.

        None when the page lacks the gauge; :class:`CaptureError` when there is no such page (404, …);
        httpx errors propagate."""
        r = await self.http.get("/metrics")
        if r.status_code != 200:
            raise CaptureError(f"/metrics answered {r.status_code}")
        return parse_running_requests(r.text)

    async def tokenize(self, model: str, text: str) -> list[int]:
        """The server's own token ids for ``text`` (prompts of an exact token count)."""
        r = await self.http.post("/tokenize", json={"model": model, "prompt": text, "add_special_tokens": False})
        r.raise_for_status()
        return list(r.json()["tokens"])

    async def start_profile(
        self, body: dict | None, trace_dir: str, version: str | None, timeout: float | None = None
    ) -> None:
        """One POST /start_profile. Raises on anything but 200 (404/409 with their own errors).

        Not connected (connect error or timeout, no pooled connection): :class:`CaptureError`, the
        server never saw the call.  Sent but unanswered (read/write timeout, connection closed or reset):
        :class:`StartOutcomeUnknown`, the server may be profiling."""
        t0 = time.monotonic()
        kw: dict = {"json": body} if body else {}
        t = timeout if timeout is not None else self.timeout
        try:
            # a fresh connection: a reset then means the server had the request, never a stale pooled socket
            async with httpx.AsyncClient(
                base_url=self.url,
                headers=self.headers,
                timeout=httpx.Timeout(t, connect=min(t, self.timeout)),
                transport=httpx.AsyncHTTPTransport(retries=0),
            ) as c:
                r = await c.post("/start_profile", **kw)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol) as e:
            raise CaptureError(f"/start_profile failed: {type(e).__name__}: {e}") from e
        except httpx.TimeoutException as e:
            raise StartOutcomeUnknown("timeout", time.monotonic() - t0, type(e).__name__) from e
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as e:
            raise StartOutcomeUnknown("reset", time.monotonic() - t0, f"{type(e).__name__}: {e}") from e
        except httpx.HTTPError as e:
            raise CaptureError(f"/start_profile failed: {type(e).__name__}: {e}") from e
        if r.status_code == 200:
            return
        if r.status_code == 404:
            raise ProfilingDisabled(disabled_message(self.url, trace_dir, version))
        if r.status_code == 409:
            raise SessionActive(
                "/start_profile answered 409: a profiling session is already active on this server "
                "(someone else's). Not stopping it; wait for it to end, then run again."
            )
        text = r.text[:300].replace("\n", " ")
        raise CaptureError(f"/start_profile answered {r.status_code}: {text}")

    async def stop_profile(self, read_timeout: float) -> StopResult:
        """Exactly one POST /stop_profile, never retried. Returns how it ended, never raises httpx errors."""
        timeout = httpx.Timeout(connect=30.0, read=read_timeout, write=30.0, pool=30.0)
        t0 = time.monotonic()
        # A dedicated client without pooled connections: the call must not be replayed on a stale socket.
        transport = httpx.AsyncHTTPTransport(retries=0)
        async with httpx.AsyncClient(
            base_url=self.url, headers=self.headers, timeout=timeout, transport=transport
        ) as c:
            try:
                r = await c.post("/stop_profile")
                detail = None if not r.content else r.text[:300].replace("\n", " ")
                return StopResult(str(r.status_code), time.monotonic() - t0, detail)
            except httpx.TimeoutException as e:
                return StopResult("timeout", time.monotonic() - t0, f"{type(e).__name__}")
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as e:
                return StopResult("reset", time.monotonic() - t0, f"{type(e).__name__}: {e}")
            except httpx.ConnectError as e:
                return StopResult("connect-error", time.monotonic() - t0, f"{e}")
            except httpx.HTTPError as e:
                return StopResult("error", time.monotonic() - t0, f"{type(e).__name__}: {e}")
