"""A loopback HTTP fake of the MinT REST API, for driving the real tinker SDK offline.

For: running `python -m mathrl` through the real SDK (`tinker.ServiceClient`,
its retries, futures, heartbeats and telemetry, over real httpx HTTP) against
a server on 127.0.0.1, and switching that server off for a while: `outage`
makes it answer HTTP 503 to everything ("503"), or take every request and
answer none ("silent"), for some seconds, starting now or at the Nth
forward_backward request, and then serve normally again. Not for: anything
the SDK does not call in a mathrl run (forward without backward, the REST
client's checkpoint listing), gRPC, protobuf bodies, signed JWTs, or load.
`hold_samples(N)` holds each sample request until N of them have arrived, so a
test can see that a client sends them all at once (`apart` stays False).

Model semantics are `fake_mint.FakeMintServer`'s, one per created model:
this module parses the SDK's JSON into real `tinker.types`, calls the same
FakeMintServer methods the in-process fake's clients call, and writes their
answers back as the JSON the SDK parses into `tinker.types`. A request the
service refuses becomes a failed future (`{"error", "category": "user"}`),
which the SDK raises as `tinker.RequestFailedError` when its result is
awaited.

Differences from the real service worth knowing:
- Every future is done when its POST returns (no `try_again`, no queue
  states), and training requests run when they arrive, not by `seq_id`;
  `seq_anomalies` records any that arrived out of order or twice (the SDK
  sends them in order, so a test can check it stays empty).
- Every model's checkpoints are named `tinker://fake-run/...`, as in
  FakeMintServer, so two runs print the same `Saved:` lines; a path is
  looked up among the caller's session's models first, then the newest
  model that has it.
- `client/config` turns off pyqwest (`use_pyqwest_transport: false`), so the
  SDK talks plain httpx, and turns on JWT exchange (`pjwt_auth_enabled`),
  without which tinker 0.22.0 refuses MinT's `sk-` keys. `auth/token` trades
  any `sk-` key for an unsigned JWT valid for an hour; a request is let in
  with an `sk-` key or a JWT this server issued, and is a 401 otherwise.
- A request it cannot parse, and any failure of the fake itself, is an HTTP
  400 (which the SDK does not retry), so a fault of the fake ends a run
  rather than hiding behind retries.
- A POST repeated with the same `X-Idempotency-Key` gets the first answer again.
- `answers` replaces a route's answer with given JSON (after the route ran):
  how a test makes the SDK meet a service that is configured, or speaks,
  otherwise (`tests/test_sdk_messages.py`); `pages` makes a route answer
  an HTML page instead (without running it), as a web server at a wrong URL does.
- During a "silent" outage a request is read, held unanswered until the
  outage ends, and then its connection is closed: it never took effect.
  During a "503" outage nothing takes effect either. Timing is the only
  nondeterminism: ids are counters, and the model's randomness is
  FakeBackend's (keyed to the seed, the checkpoint and the request's seed).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import pydantic
import tinker
from tinker import types
from tinker.types.save_weights_for_sampler_request import SaveWeightsForSamplerRequest

from doubles.fake_mint import FakeMintServer
from mathrl_fakes import FakeSampler, PromptKey, Reference

API = "/api/v1"
TOGETHER_SECONDS = 60.0
"""How long sample requests meant to arrive together wait for the rest (a hang, not a timing)."""
OutageMode = Literal["503", "silent"]
Json = dict[str, Any]


class HTTPError(Exception):
    """An HTTP error answer: status and detail."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


@dataclass
class Outage:
    """One outage: its mode and length, and when it started (None: not yet)."""

    mode: OutageMode
    seconds: float
    countdown: int
    """forward_backward requests still to come before it starts; 0 once started."""
    started: float | None = None
    answered: int = 0
    """Requests it turned away: answered 503, or held and dropped."""

    @property
    def ends(self) -> float | None:
        return None if self.started is None else self.started + self.seconds


@dataclass(frozen=True)
class Served:
    """One request: when it arrived (time.monotonic()), its path less /api/v1/, the answer."""

    at: float
    name: str
    answer: int | Literal["held"]
    """The HTTP status, or "held": no answer (a silent outage)."""


@dataclass
class _Model:
    """One created model: its FakeMintServer, and the last training seq_id it ran."""

    model_id: str
    base_model: str
    lora_rank: int
    server: FakeMintServer
    last_seq: int = 0


@dataclass
class _Session:
    session_id: str
    models: list[_Model] = field(default_factory=list)


@dataclass(frozen=True)
class _Sampler:
    sampler_id: str
    model: _Model
    sampler: FakeSampler
    model_path: str | None
    """None: the base model."""


class FakeMintHTTP:
    """The fake service: a ThreadingHTTPServer on 127.0.0.1 in a daemon thread.

    Args:
        references: prompt -> Reference for every model it creates (as FakeMintServer).
        checkpoint_dir: each model writes its checkpoints in a folder of its own here.
        seed: the models' seed when create_model gives no LoRA seed.
    """

    def __init__(
        self, references: Mapping[PromptKey, Reference], checkpoint_dir: Path, seed: int = 0
    ) -> None:
        self.references = references
        self.checkpoint_dir = checkpoint_dir
        self.seed = seed
        self._together: threading.Barrier | None = None
        self.apart = False
        """True when sample requests meant to arrive together (`hold_samples`) did not."""
        self.outages: list[Outage] = []
        self.served: list[Served] = []
        """Every request, in the order they arrived, outages included."""
        self.seq_anomalies: list[str] = []
        """Training requests that arrived with a seq_id not above the model's last one."""
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._ids = itertools.count(1)
        self._sessions: dict[str, _Session] = {}
        self._models: dict[str, _Model] = {}
        self._samplers: dict[str, _Sampler] = {}
        self._futures: dict[str, Json] = {}
        self._replies: dict[str, tuple[int, Json]] = {}
        self._tokens: set[str] = set()
        self.answers: dict[str, Json] = {}
        """Route name -> the JSON it answers instead (200), for an SDK message's test."""
        self.pages: set[str] = set()
        """Route names answered with an HTML page (200, text/html): not a MinT API."""
        self._routes: dict[str, Callable[[Any], Json]] = {
            "client/config": self._client_config,
            "auth/token": self._auth_token,
            "create_session": self._create_session,
            "session_heartbeat": self._heartbeat,
            "telemetry": self._telemetry,
            "create_model": self._create_model,
            "get_info": self._get_info,
            "forward_backward": self._forward_backward,
            "optim_step": self._optim_step,
            "save_weights_for_sampler": self._save_for_sampler,
            "save_weights": self._save_state,
            "load_weights": self._load_state,
            "create_sampling_session": self._create_sampling_session,
            "asample": self._sample,
            "retrieve_future": self._retrieve_future,
        }
        self._http = _Server(("127.0.0.1", 0), _Handler)
        self._http.fake = self
        self.url = f"http://127.0.0.1:{self._http.server_port}"
        self._thread = threading.Thread(
            target=self._http.serve_forever, args=(0.05,), name="fake-mint-http", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Stop serving; requests held by a silent outage are dropped now."""
        self._closed.set()
        self._http.shutdown()
        self._http.server_close()
        self._thread.join()

    # -- the outage switch ----------------------------------------------------

    def outage(
        self, mode: OutageMode, seconds: float, *, at_forward_backward: int | None = None
    ) -> Outage:
        """Turn requests away for `seconds`, from now or from the Nth forward_backward on.

        With `at_forward_backward=N`, the outage starts when the Nth
        forward_backward request from now arrives; that request is the
        first one turned away.
        """
        if mode not in ("503", "silent"):
            raise ValueError(f"mode must be '503' or 'silent' (got {mode!r})")
        if seconds <= 0 or (at_forward_backward is not None and at_forward_backward < 1):
            raise ValueError("need seconds > 0 and at_forward_backward >= 1 (or None)")
        with self._lock:
            outage = Outage(mode, seconds, at_forward_backward or 0)
            if at_forward_backward is None:
                outage.started = time.monotonic()
            self.outages.append(outage)
        return outage

    def turn_away(self, name: str) -> Outage | None:
        """The outage that turns this request away, if one does (it may start now)."""
        with self._lock:
            now = time.monotonic()
            for outage in self.outages:
                if outage.started is None and name == "forward_backward":
                    outage.countdown -= 1
                    if outage.countdown == 0:
                        outage.started = now
                ends = outage.ends
                if outage.started is not None and ends is not None and outage.started <= now < ends:
                    outage.answered += 1
                    return outage
        return None

    def hold_samples(self, count: int) -> None:
        """From now on, hold each sample request until `count` of them have arrived; if they
        do not all arrive within TOGETHER_SECONDS, set `apart` and answer each anyway."""
        self._together = threading.Barrier(count, timeout=TOGETHER_SECONDS)

    def gather(self) -> None:
        """Hold a sample request until enough have arrived (`hold_samples`), if asked to."""
        if self._together is None:
            return
        try:
            self._together.wait()
        except threading.BrokenBarrierError:
            self.apart = True

    def record(self, served: Served) -> None:
        with self._lock:
            self.served.append(served)

    def hold(self, outage: Outage) -> None:
        """Wait, answering nothing, until `outage` ends (or the server closes)."""
        ends = outage.ends
        assert ends is not None
        self._closed.wait(max(0.0, ends - time.monotonic()))

    # -- serving --------------------------------------------------------------

    def serve(
        self, method: str, name: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, Json]:
        """The status and JSON answer to one request (outside any outage)."""
        idempotency = headers.get("x-idempotency-key") if method == "POST" else None
        with self._lock:
            key = headers.get("x-api-key", "")
            if not (key.startswith("sk-") or key in self._tokens):
                return 401, {"detail": "invalid API key"}
            if idempotency is not None and idempotency in self._replies:
                return self._replies[idempotency]
            try:
                reply = 200, self._route(method, name, body)
            except HTTPError as exc:
                reply = exc.status, {"detail": exc.detail}
            except (ValueError, KeyError, TypeError, pydantic.ValidationError) as exc:
                reply = 400, {"detail": f"bad request: {type(exc).__name__}: {exc}"}
            except Exception as exc:  # a bug of the fake's: loud, and not retried by the SDK
                reply = 400, {"detail": f"the fake failed: {type(exc).__name__}: {exc}"}
            if idempotency is not None:
                self._replies[idempotency] = reply
            return reply

    def _route(self, method: str, name: str, body: bytes) -> Json:
        if method == "GET" and name.startswith("samplers/"):
            return self._get_sampler(name.removeprefix("samplers/"))
        route = self._routes.get(name)
        if route is None or method != "POST":
            raise HTTPError(404, f"no route {method} {API}/{name} in the fake")
        answer = route(json.loads(body or b"{}"))
        return self.answers.get(name, answer)

    def _new_id(self, kind: str) -> str:
        return f"{kind}-{next(self._ids)}"

    def _future(self, model_id: str | None, work: Callable[[], Json]) -> Json:
        """Run `work` now; answer an UntypedAPIFuture whose result is its JSON."""
        request_id = self._new_id("request")
        try:
            self._futures[request_id] = work()
        except tinker.RequestFailedError as exc:
            error = str(exc).removeprefix("Request failed: ")
            self._futures[request_id] = {"error": error, "category": exc.category.value}
        return types.UntypedAPIFuture(request_id=request_id, model_id=model_id).model_dump(
            mode="json", exclude_none=True
        )

    def _model(self, model_id: str, seq_id: int | None = None, kind: str = "") -> _Model:
        model = self._models.get(model_id)
        if model is None:
            raise HTTPError(404, f"no model {model_id!r}")
        if seq_id is not None:
            if seq_id <= model.last_seq:
                self.seq_anomalies.append(f"{kind} seq_id {seq_id} after {model.last_seq}")
            model.last_seq = max(model.last_seq, seq_id)
        return model

    def _sampler_file(self, session_id: str, path: str) -> tuple[_Model, FakeSampler]:
        """The sampler behind a `tinker://` path: the session's models first, then the newest."""
        session = self._sessions.get(session_id)
        mine = session.models if session else []
        others = [m for m in reversed(self._models.values()) if m not in mine]
        for model in [*reversed(mine), *others]:
            if ("sampler", path) in model.server.files:
                return model, model.server.load(path)
        raise HTTPError(400, f"no sampler weights at {path!r}")

    # -- the routes -------------------------------------------------------------

    def _client_config(self, body: Json) -> Json:
        types.ClientConfigRequest.model_validate(body)
        config = types.ClientConfigResponse(pjwt_auth_enabled=True, use_pyqwest_transport=False)
        return config.model_dump(mode="json")

    def _auth_token(self, body: Json) -> Json:
        claims = {"sub": self._new_id("user"), "exp": int(time.time()) + 3600}
        parts = [{"alg": "none", "typ": "JWT"}, claims]
        token = ".".join(_base64url(json.dumps(p).encode()) for p in parts) + "."
        self._tokens.add(token)
        return types.AuthTokenResponse(jwt=token).model_dump(mode="json")

    def _create_session(self, body: Json) -> Json:
        types.CreateSessionRequest.model_validate(body)
        session = _Session(self._new_id("session"))
        self._sessions[session.session_id] = session
        return types.CreateSessionResponse(session_id=session.session_id).model_dump(mode="json")

    def _heartbeat(self, body: Json) -> Json:
        request = types.SessionHeartbeatRequest.model_validate(body)
        if request.session_id not in self._sessions:
            raise HTTPError(404, f"no session {request.session_id!r}")
        return types.SessionHeartbeatResponse().model_dump(mode="json")

    def _telemetry(self, body: Json) -> Json:
        types.TelemetrySendRequest.model_validate(body)
        return types.TelemetryResponse(status="accepted").model_dump(mode="json")

    def _create_model(self, body: Json) -> Json:
        request = types.CreateModelRequest.model_validate(body)
        session = self._sessions.get(request.session_id)
        if session is None:
            raise HTTPError(404, f"no session {request.session_id!r}")
        lora = request.lora_config or types.LoraConfig(rank=32)
        model_id = self._new_id("model")
        seed = lora.seed if lora.seed is not None else self.seed
        server = FakeMintServer(
            self.references, seed=seed, checkpoint_dir=self.checkpoint_dir / model_id
        )
        model = _Model(model_id, request.base_model, lora.rank, server)
        self._models[model_id] = model
        session.models.append(model)
        return self._future(model_id, lambda: {"model_id": model_id, "type": "create_model"})

    def _get_info(self, body: Json) -> Json:
        model = self._model(types.GetInfoRequest.model_validate(body).model_id)
        return types.GetInfoResponse(
            type="get_info",
            model_data=types.ModelData(arch="fake", model_name=model.base_model),
            model_id=model.model_id,
            is_lora=True,
            lora_rank=model.lora_rank,
            model_name=model.base_model,
        ).model_dump(mode="json", exclude_none=True)

    def _forward_backward(self, body: Json) -> Json:
        request = body.get("forward_backward_input")
        if not isinstance(request, dict) or not isinstance(request.get("data"), list):
            raise ValueError("forward_backward_input.data must be a list")
        model = self._model(str(body.get("model_id")), body.get("seq_id"), "forward_backward")
        data = [_datum(d) for d in request["data"]]
        loss_fn = request.get("loss_fn")

        def work() -> Json:
            return _output_json(model.server.forward_backward(data, str(loss_fn)))

        return self._future(model.model_id, work)

    def _optim_step(self, body: Json) -> Json:
        request = types.OptimStepRequest.model_validate(body)
        model = self._model(request.model_id, request.seq_id, "optim_step")

        def work() -> Json:
            return model.server.optim_step(request.adam_params).model_dump(mode="json")

        return self._future(model.model_id, work)

    def _save_for_sampler(self, body: Json) -> Json:
        request = SaveWeightsForSamplerRequest.model_validate(body)
        model = self._model(request.model_id, request.seq_id, "save_weights_for_sampler")
        name = request.path

        def work() -> Json:
            if name is None:  # save_weights_and_get_sampling_client: mathrl names its saves
                raise _refused("the fake saves named sampler weights only (give a path)")
            path = model.server.save(name).path
            return {"path": path, "type": "save_weights_for_sampler"}

        return self._future(model.model_id, work)

    def _save_state(self, body: Json) -> Json:
        request = types.SaveWeightsRequest.model_validate(body)
        model = self._model(request.model_id, request.seq_id, "save_weights")
        name = request.path or ""

        def work() -> Json:
            path = model.server.save_state(name, request.overwrite).path
            return {"path": path, "type": "save_weights"}

        return self._future(model.model_id, work)

    def _load_state(self, body: Json) -> Json:
        request = types.LoadWeightsRequest.model_validate(body)
        model = self._model(request.model_id, request.seq_id, "load_weights")

        def work() -> Json:
            if not request.optimizer:  # FakeBackend keeps weights and optimizer state together
                raise _refused("the fake loads weights with their optimizer state only")
            model.server.load_state(request.path)
            return {"path": request.path, "type": "load_weights"}

        return self._future(model.model_id, work)

    def _create_sampling_session(self, body: Json) -> Json:
        request = types.CreateSamplingSessionRequest.model_validate(body)
        if request.model_path is None:
            model = self._base_model(request.base_model)
            sampler, path = model.server.base_sampler(model.base_model), None
        else:
            model, sampler = self._sampler_file(request.session_id, request.model_path)
            path = request.model_path
        sampler_id = self._new_id("sampler")
        self._samplers[sampler_id] = _Sampler(sampler_id, model, sampler, path)
        return types.CreateSamplingSessionResponse(sampling_session_id=sampler_id).model_dump(
            mode="json"
        )

    def _base_model(self, base_model: str | None) -> _Model:
        """A model of its own for sampling the base model: no training client made it."""
        if not base_model:
            raise HTTPError(400, "a sampling session needs a model_path or a base_model")
        model_id = self._new_id("base")
        server = FakeMintServer(
            self.references, seed=self.seed, checkpoint_dir=self.checkpoint_dir / model_id
        )
        return _Model(model_id, base_model, 0, server)

    def _get_sampler(self, sampler_id: str) -> Json:
        found = self._samplers.get(sampler_id)
        if found is None:
            raise HTTPError(404, f"no sampler {sampler_id!r}")
        return types.GetSamplerResponse(
            sampler_id=sampler_id, base_model=found.model.base_model, model_path=found.model_path
        ).model_dump(mode="json")

    def _sample(self, body: Json) -> Json:
        request = types.SampleRequest.model_validate(body)
        found = self._samplers.get(request.sampling_session_id or "")
        if found is None:
            raise HTTPError(404, f"no sampling session {request.sampling_session_id!r}")
        server = found.model.server

        def work() -> Json:
            params = server.check_sampling(
                request.prompt, request.num_samples, request.sampling_params
            )
            sampling = found.sampler.sample(request.prompt.to_ints(), request.num_samples, params)
            completions = asyncio.run(sampling)  # the fake's sampler is a coroutine
            sequences = [server.sequence(c.tokens, c.logprobs, params.stop) for c in completions]
            return {"type": "sample", "sequences": [_sequence_json(s) for s in sequences]}

        return self._future(found.model.model_id, work)

    def _retrieve_future(self, body: Json) -> Json:
        request = types.FutureRetrieveRequest.model_validate(body)
        result = self._futures.get(request.request_id)
        if result is None:
            raise HTTPError(404, f"no request {request.request_id!r}")
        return result


def _base64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _refused(message: str) -> tinker.RequestFailedError:
    return tinker.RequestFailedError(
        message, request_id="fake-http", category=types.RequestErrorCategory.User
    )


def _datum(raw: Any) -> types.Datum:
    """A `types.Datum` from its JSON (the SDK's wire shape)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("loss_fn_inputs"), dict):
        raise ValueError(f"a datum must have model_input and loss_fn_inputs (got {raw!r})")
    inputs = {
        key: types.TensorData(data=value["data"], dtype=value["dtype"], shape=value.get("shape"))
        for key, value in raw["loss_fn_inputs"].items()
    }
    return types.Datum(
        model_input=types.ModelInput.model_validate(raw.get("model_input")),
        loss_fn_inputs=inputs,
    )


def _tensor_json(tensor: types.TensorData) -> Json:
    shape = {} if tensor.shape is None else {"shape": list(tensor.shape)}
    return {"data": tensor.data, "dtype": tensor.dtype, **shape}


def _output_json(output: types.ForwardBackwardOutput) -> Json:
    return {
        "loss_fn_output_type": output.loss_fn_output_type,
        "loss_fn_outputs": [
            {key: _tensor_json(value) for key, value in record.items()}
            for record in output.loss_fn_outputs
        ],
        "metrics": dict(output.metrics),
    }


def _sequence_json(sequence: types.SampledSequence) -> Json:
    return {
        "stop_reason": sequence.stop_reason,
        "tokens": list(sequence.tokens),
        "logprobs": None if sequence.logprobs is None else list(sequence.logprobs),
    }


class _Server(ThreadingHTTPServer):
    """The HTTP side; quiet about clients that hang up (as the SDK does when it gives up)."""

    daemon_threads = True
    fake: FakeMintHTTP

    def handle_error(self, request: object, client_address: object) -> None:
        pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_POST(self) -> None:
        self._serve("POST")

    def do_GET(self) -> None:
        self._serve("GET")

    def _serve(self, method: str) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        path = urlsplit(self.path).path
        name = path.removeprefix(API + "/") if path.startswith(API + "/") else path
        fake = self.server.fake
        arrived = time.monotonic()
        outage = fake.turn_away(name)
        if outage is not None and outage.mode == "silent":
            fake.record(Served(arrived, name, "held"))
            fake.hold(outage)
            self.close_connection = True  # no answer at all: the request is lost
            return
        if outage is None and name in fake.pages:
            fake.record(Served(arrived, name, 200))
            page = b"<!doctype html><html><body><h1>Welcome</h1></body></html>"
            self.send_response(200)
            self.send_header("content-type", "text/html; charset=utf-8")
            self.send_header("content-length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)
            return
        if outage is not None:
            status, answer = 503, {"detail": "service unavailable (fake outage)"}
        else:
            if name == "asample":
                fake.gather()
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, answer = fake.serve(method, name, headers, body)
        fake.record(Served(arrived, name, status))
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass  # keep the test output clean
