"""vault_agent: the Python SDK for agents run by a vault (docs/sdk-python.md, design §6).

An agent talks to its vault over one inherited Unix stream socket (fd 3, or $VAULT_CHANNEL_FD)
with length-prefixed protobuf frames (proto/vault/v1/hostcall.proto):

    import vault_agent
    agent = vault_agent.Agent.connect()
    state = agent.get_state()                       # bytes, or None
    digest = agent.cas_put(b"hello")                # "sha256:<64 hex>/5"
    agent.exit(0, result=digest)                    # raises SystemExit(0)

States and objects of any size: get_state, checkpoint, cas_put and migrate move what does not fit
in one frame (max_frame_bytes) in pieces, one call each (get_state ranges; the cas_upload_*
streaming put, after which the state is named by its digest). Smaller ones take one frame.

Every method sends one request and waits for its response. A failed call raises HostError
(`code` is a google.rpc.Code, `message` the vault's text); a denial (code 7) raises Denied.
Errors of the channel itself (closed, truncated or oversized frame, a frame that does not parse)
close the channel; every later call raises HostError(14).

Latency: after sending a request the SDK polls the channel for the answer without sleeping for
a short window (50 us, or $VAULT_AGENT_POLL_US microseconds as the vault passes it; the
poll_window_us attribute, 0 turns it off), since a sleeping thread takes tens of microseconds to
be woken on an idle CPU. Calls whose answers keep coming later than the window are polled for
less often (one in 16 after 8 such waits in a row), so this costs at most the window per call.

Thread-safety: calls are serialized by a lock, so an Agent may be shared between threads, but a
thread blocked in receive() holds the channel until it returns. close() may be called from any
thread; a call blocked on the channel then fails with HostError(14).
"""

import array
import collections
import hashlib
import os
import re
import select
import socket
import struct
import threading
import time

from google.protobuf.message import DecodeError

from vault.v1 import agent_pb2, capability_pb2, cas_pb2, hostcall_pb2 as H

__all__ = ["Agent", "HostError", "Denied", "Message", "parse_digest", "format_digest",
           "format_grant", "parse_grant"]

PROTOCOL_VERSION = 1
DEFAULT_MAX_FRAME_BYTES = 1 << 20  # until the Welcome says otherwise
FRAME_OVERHEAD_BYTES = 1024        # room a request keeps beside a piece of data
FRAME_TIMEOUT_S = 30.0             # a frame that has begun must be complete within this
_MAX_FDS = 4                       # ancillary space per recvmsg
_ANC_SPACE = socket.CMSG_SPACE(_MAX_FDS * array.array("i").itemsize)
_CLOEXEC = getattr(socket, "MSG_CMSG_CLOEXEC", 0)
_RECEIVE_SLICE_MS = 60_000         # receive(timeout=None) waits in slices of this
_UINT32_MAX = (1 << 32) - 1
_DEFAULT_POLL_US = 50              # busy-poll window for an answer (see Latency above)
_MAX_POLL_US = 1000
_POLL_MISSES_BEFORE_BACKOFF = 8
_POLL_PROBE_EVERY = 16


def _poll_window_from_env():
    try:
        us = int(os.environ.get("VAULT_AGENT_POLL_US", _DEFAULT_POLL_US))
    except ValueError:
        return _DEFAULT_POLL_US
    return _DEFAULT_POLL_US if us < 0 else min(us, _MAX_POLL_US)

# google.rpc.Code values the SDK raises itself.
DEADLINE_EXCEEDED = 4
PERMISSION_DENIED = 7
ABORTED = 10
DATA_LOSS = 15
RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9
INTERNAL = 13
UNAVAILABLE = 14


class HostError(Exception):
    """A host call failed. `code` is a google.rpc.Code, `message` says why."""

    def __init__(self, code, message):
        super().__init__(f"[code {code}] {message}")
        self.code = code
        self.message = message


class Denied(HostError):
    """The vault refused the call: the agent's grants do not cover it (code 7)."""

    def __init__(self, message):
        super().__init__(PERMISSION_DENIED, message)


# A message from receive(). `sender` is the proto's `from`: an agent id, or "operator".
# A message from another agent also carries what its sending vault signed (docs/messages.md):
# the sender's sequence number, that vault, the sender's principal, the signed record and its
# Ed25519 signature ("vault.message.v1\0" || signed_record, by from_vault's key).
Message = collections.namedtuple(
    "Message",
    "id sender type data sent_unix_ms reply_to seq from_vault from_principal signed_record "
    "signature",
    defaults=(0, "", "", b"", b""))
HttpResponse = collections.namedtuple("HttpResponse", "status content_type body url")

_DIGEST_RE = re.compile(r"sha256:([0-9a-f]{64})/(0|[1-9][0-9]{0,19})")


def parse_digest(text):
    """"sha256:<64 lowercase hex>/<decimal size>" -> cas_pb2.Digest; ValueError otherwise."""
    m = _DIGEST_RE.fullmatch(text) if isinstance(text, str) else None
    if m is None or int(m[2]) > (1 << 64) - 1:
        raise ValueError(f"bad digest {text!r}: expected sha256:<64 lowercase hex>/<size>")
    return cas_pb2.Digest(sha256=bytes.fromhex(m[1]), size=int(m[2]))


def format_digest(digest):
    """cas_pb2.Digest -> "sha256:<hex>/<size>"; ValueError when the hash is not 32 bytes."""
    if len(digest.sha256) != 32:
        raise ValueError(f"bad digest: a {len(digest.sha256)}-byte hash")
    return f"sha256:{digest.sha256.hex()}/{digest.size}"


_G = capability_pb2.Grant
_KIND_NAMES = {_G.READ: "read", _G.WRITE: "write", _G.CAS_READ: "cas-read",
               _G.CAS_WRITE: "cas-write", _G.NETWORK: "network", _G.SEND: "send",
               _G.RECEIVE: "receive", _G.MIGRATE: "migrate", _G.SPAWN: "spawn"}


def format_grant(grant):
    """A Grant as vaultctl shows it: "read /vault/pub", "network *.example.com:443",
    "send agent-7 types=ping,stop"."""
    parts = [_KIND_NAMES.get(grant.kind, f"kind({grant.kind})")]
    if grant.path:
        parts.append(grant.path)
    if grant.hash:
        parts.append("sha256:" + grant.hash.hex())
    if grant.host:
        parts.append(f"{grant.host}:{grant.port or '*'}")
    if grant.agent:
        parts.append(grant.agent)
    parts.extend(grant.vaults)
    if grant.message_types:
        parts.append("types=" + ",".join(grant.message_types))
    return " ".join(parts)


def parse_grant(text):
    """vaultctl's grant shorthand -> Grant: "read:/vault/pub", "write:/p", "read-hash:sha256:<hex>",
    "cas-read", "cas-write", "spawn", "network:host:443" (port "*" or omitted: any),
    "send:agent-7", "receive:*", "send:agent-7:ping,stop" (only those message types),
    "migrate:vault-b,vault-c". The vault validates the scope."""
    kind, sep, arg = text.partition(":")
    if kind in ("read", "write") and arg:
        # As vaultctl's shorthand: one trailing "/" is dropped ("/vault/pub/" is "/vault/pub").
        if len(arg) > 1 and arg.endswith("/") and not arg.endswith("//"):
            arg = arg[:-1]
        return _G(kind=_G.READ if kind == "read" else _G.WRITE, path=arg)
    if kind == "read-hash" and re.fullmatch(r"sha256:[0-9a-f]{64}", arg):
        return _G(kind=_G.READ, hash=bytes.fromhex(arg[7:]))
    if kind in ("cas-read", "cas-write", "spawn") and not sep:
        return _G(kind={"cas-read": _G.CAS_READ, "cas-write": _G.CAS_WRITE, "spawn": _G.SPAWN}[kind])
    if kind == "network" and arg:
        host, colon, port = arg.rpartition(":")
        if not colon:
            return _G(kind=_G.NETWORK, host=arg)
        if port == "*" or (port.isdigit() and port.isascii() and int(port) <= 65535):
            return _G(kind=_G.NETWORK, host=host, port=0 if port == "*" else int(port))
    if kind in ("send", "receive") and arg:
        agent, colon, types = arg.partition(":")
        if not colon or (types and "" not in types.split(",")):
            return _G(kind=_G.SEND if kind == "send" else _G.RECEIVE, agent=agent,
                      message_types=sorted(set(types.split(","))) if colon else [])
    if kind == "migrate" and arg and "" not in arg.split(","):
        return _G(kind=_G.MIGRATE, vaults=sorted(set(arg.split(","))))
    raise ValueError(f"bad grant {text!r}")


def _spec_from_dict(d):
    """{"purpose", "instructions", "code": digest text, "grants": [shorthand or Grant],
    "constraints": {field: int}, "sandbox", "heartbeat_timeout_ms", "code_signer"} -> AgentSpec."""
    d = dict(d)
    spec = agent_pb2.AgentSpec(
        purpose=d.pop("purpose", ""), instructions=d.pop("instructions", ""),
        sandbox=d.pop("sandbox", ""), heartbeat_timeout_ms=d.pop("heartbeat_timeout_ms", 0),
        code_signer=d.pop("code_signer", ""))
    if "code" in d:
        spec.code_digest.CopyFrom(parse_digest(d.pop("code")))
    for g in d.pop("grants", []):
        spec.grants.append(g if isinstance(g, _G) else parse_grant(g))
    if "constraints" in d:
        spec.constraints.CopyFrom(capability_pb2.Constraints(**d.pop("constraints")))
    if d:
        raise ValueError(f"unknown agent spec keys: {sorted(d)}")
    return spec


def _close_fds(fds):
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
    fds.clear()


class Agent:
    """The agent's end of its vault channel. Create it with Agent.connect()."""

    def __init__(self, sock):
        self._sock = sock
        self._lock = threading.Lock()
        self._last_call_id = 0
        self.max_frame_bytes = DEFAULT_MAX_FRAME_BYTES
        self.agent_id, self.vault, self.incarnation = "", "", 0
        self.poll_window_us = _poll_window_from_env()
        self._poller = None
        self._poll_stats = {}  # call name -> [misses in a row, calls skipped while backing off]

    @classmethod
    def connect(cls, fd=None, sdk_name="vault-agent-python/0.1"):
        """Takes over the channel (an fd, default $VAULT_CHANNEL_FD or 3, or a socket object),
        says Hello and reads the Welcome. HostError(9) when the vault refuses or speaks another
        protocol version; HostError(14) when there is no channel."""
        if fd is None:
            fd = int(os.environ.get("VAULT_CHANNEL_FD", "3"))
        try:
            sock = fd if isinstance(fd, socket.socket) else socket.socket(fileno=fd)
            sock.set_inheritable(False)  # the channel is not for the agent's own children
        except OSError as e:
            raise HostError(UNAVAILABLE, f"no vault channel on fd {fd}: {e}") from None
        agent = cls(sock)
        agent._send_frame(H.GuestFrame(hello=H.Hello(version=PROTOCOL_VERSION, sdk=sdk_name)))
        frame, fds = agent._read_frame()
        kind = frame.WhichOneof("frame")
        if fds or kind not in ("welcome", "refused"):
            _close_fds(fds)
            agent._fail(INTERNAL, f"expected a Welcome, got {kind or 'an empty frame'}")
        if kind == "refused":
            agent._fail(FAILED_PRECONDITION, f"the vault refused the handshake: {frame.refused}")
        w = frame.welcome
        if w.version != PROTOCOL_VERSION:
            agent._fail(FAILED_PRECONDITION,
                        f"the vault speaks protocol {w.version}, this SDK {PROTOCOL_VERSION}")
        agent.agent_id, agent.vault, agent.incarnation = w.agent_id, w.vault, w.incarnation
        agent.max_frame_bytes = w.max_frame_bytes or DEFAULT_MAX_FRAME_BYTES
        return agent

    # --- host calls ---------------------------------------------------------------------------

    _LEVELS = {"info": H.LogRequest.INFO, "debug": H.LogRequest.DEBUG,
               "warn": H.LogRequest.WARN, "warning": H.LogRequest.WARN,
               "error": H.LogRequest.ERROR}

    def log(self, message, level="info"):
        if level not in self._LEVELS:
            raise ValueError(f"bad log level {level!r}: expected info, debug, warn or error")
        self._call("log", H.LogRequest(level=self._LEVELS[level], message=message))

    def heartbeat(self):
        """Returns True when the vault asks for a checkpoint now (it is stopping)."""
        return self._call("heartbeat", H.HeartbeatRequest()).checkpoint_requested

    @property
    def max_piece_bytes(self):
        """The most bytes of data one call carries or brings (a state, an object, a piece)."""
        f = self.max_frame_bytes
        return f - FRAME_OVERHEAD_BYTES if f > 2 * FRAME_OVERHEAD_BYTES else f // 2

    def get_state(self):
        """The last checkpoint (or the initial state), bytes; None when there is none. A state
        larger than max_piece_bytes is read in pieces; one that changes meanwhile (a checkpoint
        from another thread) is read again."""
        piece = self.max_piece_bytes
        for _ in range(4):
            first = self._call("get_state", H.GetStateRequest(offset=0, limit=piece))
            if not first.present:
                return None
            size = max(first.size, len(first.state))  # (a vault without ranges sends no size)
            parts, got = [first.state], len(first.state)
            while got < size:
                r = self._call("get_state", H.GetStateRequest(offset=got, limit=piece))
                if not r.present or r.size != size or r.digest.sha256 != first.digest.sha256:
                    break  # changed meanwhile: read it again
                if not r.state:
                    raise HostError(DATA_LOSS, f"the state ended after {got} of {size} bytes")
                parts.append(r.state)
                got += len(r.state)
            else:
                return b"".join(parts)
        raise HostError(ABORTED, "the state kept changing while it was read")

    def get_state_range(self, offset, limit=0):
        """Bytes [offset, offset + limit) of the state (limit 0: to the end; the answer must fit
        in a frame, else HostError 8): {"present", "state", "size" (the whole state's),
        "digest" (text, or None)}. HostError 11 for an offset past the end."""
        r = self._call("get_state", H.GetStateRequest(offset=offset, limit=limit))
        return {"present": r.present, "state": r.state, "size": r.size,
                "digest": format_digest(r.digest) if r.present else None}

    def checkpoint(self, state):
        """Stores `state` (bytes, any size) durably; returns its digest. A state larger than
        max_piece_bytes is put in pieces (cas_upload_*: needs cas-write, counts against the
        storage quota), then named by its digest."""
        if len(state) > self.max_piece_bytes:
            return self.checkpoint_digest(self._upload(state))
        return format_digest(self._call("checkpoint", H.CheckpointRequest(state=state)).digest)

    def checkpoint_digest(self, digest):
        """Makes the CAS object `digest` (text) the agent's state. The agent must be able to
        read it (it put it, it was shared with it, or a read grant covers its hash): Denied
        otherwise; HostError 5 when the vault does not hold it."""
        req = H.CheckpointRequest(state_digest=parse_digest(digest))
        return format_digest(self._call("checkpoint", req).digest)

    def cas_upload_start(self, digest):
        """Begins a streaming put of the object `digest` (text: its SHA-256 and size); returns
        the upload id. Needs cas-write; reserves the size in the storage quota (HostError 8 past
        it, or with 4 uploads open already)."""
        return self._call("cas_upload_start",
                          H.CasUploadStartRequest(digest=parse_digest(digest))).upload_id

    def cas_upload_append(self, upload_id, offset, data):
        """Sends the next bytes (`offset`: the bytes sent so far; at most max_piece_bytes);
        returns the bytes received."""
        req = H.CasUploadAppendRequest(upload_id=upload_id, offset=offset, data=data)
        return self._call("cas_upload_append", req).received

    def cas_upload_finish(self, upload_id, abort=False):
        """Stores the object once every byte came and they hash to its digest (HostError 3
        otherwise: nothing is stored); returns its digest. With abort, drops the upload (None)."""
        r = self._call("cas_upload_finish",
                       H.CasUploadFinishRequest(upload_id=upload_id, abort=abort))
        return None if abort else format_digest(r.digest)

    def _upload(self, data):
        data = bytes(data)
        digest = f"sha256:{hashlib.sha256(data).hexdigest()}/{len(data)}"
        upload_id = self.cas_upload_start(digest)
        piece = self.max_piece_bytes
        view = memoryview(data)
        try:
            for at in range(0, len(data), piece):
                self.cas_upload_append(upload_id, at, bytes(view[at:at + piece]))
        except HostError:
            try:
                self.cas_upload_finish(upload_id, abort=True)  # its quota back
            except HostError:
                pass
            raise
        return self.cas_upload_finish(upload_id)

    def cas_get(self, digest, offset=0, limit=0):
        req = H.CasGetRequest(digest=parse_digest(digest), offset=offset, limit=limit)
        return self._call("cas_get", req).data

    def cas_put(self, data):
        """Stores an object of any size (larger than max_piece_bytes: in pieces)."""
        if len(data) > self.max_piece_bytes:
            return self._upload(data)
        return format_digest(self._call("cas_put", H.CasPutRequest(data=data)).digest)

    def read_file(self, path, offset=0, limit=0):
        req = H.ReadFileRequest(path=path, offset=offset, limit=limit)
        return self._call("read_file", req).data

    def write_file(self, path, data, append=False):
        """Returns the file's size afterwards. Without append the file is replaced atomically."""
        req = H.WriteFileRequest(path=path, data=data, append=append)
        return self._call("write_file", req).size

    def list(self, path):
        entries = self._call("list", H.ListRequest(path=path)).entries
        return [{"name": e.name, "directory": e.directory, "size": e.size} for e in entries]

    def net_connect(self, host, port, timeout_ms=0):
        """The vault connects (if a network grant covers host:port) and hands the connected
        socket over with its response: returned as a socket.socket."""
        req = H.NetConnectRequest(host=host, port=port, timeout_ms=timeout_ms)
        _, fds = self._call("net_connect", req, want_fds=True)
        if len(fds) != 1:
            _close_fds(fds)
            raise HostError(INTERNAL, "net_connect answered without exactly one socket")
        return socket.socket(fileno=fds[0])

    def http_get(self, url, method="GET", body=b"", content_type="", timeout=None,
                 max_bytes=0):
        """The vault fetches `url` for the agent (GET, or POST with method="POST" and a body)
        under a url grant (read or network for GET, write or network for POST), following only
        the redirects those grants cover. Returns HttpResponse(status, content_type, body, url),
        `url` being where the last redirect led. timeout: seconds for the whole fetch."""
        req = H.HttpGetRequest(url=url, method=method, body=body, content_type=content_type,
                               timeout_ms=0 if timeout is None else max(1, int(timeout * 1000)),
                               max_bytes=max_bytes)
        r = self._call("http_get", req)
        return HttpResponse(r.status, r.content_type, r.body, r.final_url)

    def send(self, to, type, data=b"", reply_to=0):
        """Sends to the agent `to` names, on this vault or any member (docs/messages.md).
        Returns the message's sequence number once it is accepted: durable in the receiver's
        mailbox, or kept by this vault until the receiver's vault can be reached. Raises
        HostError with code 8 (RESOURCE_EXHAUSTED) when the receiver's mailbox is full: the
        message was not taken, and sending it again is safe."""
        req = H.SendRequest(to=to, type=type, data=data, reply_to=reply_to)
        return self._call("send", req).message_id

    def receive(self, timeout=None):
        """The next message, or None when none came within `timeout` seconds (0: do not wait;
        None: wait until one comes). The vault may end a wait early (None is then returned)."""
        if timeout is not None and timeout < 0:
            raise ValueError("negative timeout")
        while True:
            ms = _RECEIVE_SLICE_MS if timeout is None else min(int(timeout * 1000 + 0.999),
                                                               _UINT32_MAX)
            r = self._call("receive", H.ReceiveRequest(timeout_ms=ms))
            if not r.timed_out:
                m = r.message
                return Message(m.id, getattr(m, "from"), m.type, m.data, m.sent_unix_ms,
                               m.reply_to, m.seq, m.from_vault, m.from_principal,
                               m.signed_record, m.signature)
            if timeout is not None:
                return None

    def share(self, digest, agents):
        self._call("share", H.ShareRequest(digest=parse_digest(digest), agents=list(agents)))

    def self_inspect(self):
        """Every SelfInspectResult field by name; grants as strings (format_grant), constraints
        as a dict of the limits that are set."""
        r = self._call("self_inspect", H.SelfInspectRequest())
        out = {}
        for f in r.DESCRIPTOR.fields:
            v = getattr(r, f.name)
            if f.name == "grants":
                v = [format_grant(g) for g in v]
            elif f.name == "constraints":
                v = {c.name: x for c, x in v.ListFields()}
            out[f.name] = v
        return out

    def spawn_child(self, spec, state=None):
        """spec: an AgentSpec (code as code_digest) or a dict (see _spec_from_dict).
        Returns {"agent_id", "grants": [str], "narrowed"}."""
        if isinstance(spec, dict):
            spec = _spec_from_dict(spec)
        req = H.SpawnChildRequest(spec=spec, state=state or b"", has_state=state is not None)
        r = self._call("spawn_child", req)
        return {"agent_id": r.agent_id, "grants": [format_grant(g) for g in r.grants],
                "narrowed": r.narrowed}

    def migrate(self, vault, state):
        """Moves the agent to the member vault named `vault`, which starts the same code with
        `state` (bytes) as its get_state(). Needs a migrate grant naming `vault`.

        Returns only on failure: on success the vault ends this process once the destination has
        taken the agent over, so the call never returns. Raises Denied when the grants or
        max-migrations do not allow the hop, HostError otherwise (e.g. code 10 ABORTED when the
        destination refused or could not be reached); the agent then goes on here."""
        if not isinstance(state, (bytes, bytearray)):
            raise TypeError("migrate: state must be bytes")
        if len(state) > self.max_piece_bytes:  # put in pieces first, then handed over by digest
            return self.migrate_digest(vault, self._upload(state))
        self._call("migrate", H.MigrateRequest(vault=vault, state=bytes(state)))
        # The vault answers a migrate only when it failed; an OK answer breaks the protocol.
        raise HostError(INTERNAL, "the vault answered a migrate call with success")

    def migrate_digest(self, vault, digest):
        """migrate() with a state already in the CAS (text digest) that the agent may read."""
        self._call("migrate", H.MigrateRequest(vault=vault, state_digest=parse_digest(digest)))
        raise HostError(INTERNAL, "the vault answered a migrate call with success")

    def exit(self, code=0, message="", result=None):
        """Ends the agent: the vault records code (0: completed) and result (a digest text), the
        channel is closed and SystemExit(code) raised. An error response raises HostError
        instead (the channel stays open); a channel the vault already closed is not an error."""
        req = H.ExitRequest(code=code, message=message)
        if result is not None:
            req.result.CopyFrom(parse_digest(result))
        try:
            self._call("exit", req)
        except HostError:
            if self._sock is not None:
                raise
        self.close()
        raise SystemExit(code)

    def close(self):
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- framing ------------------------------------------------------------------------------

    def _call(self, name, request, want_fds=False):
        """Sends HostRequest{call_id, <name>: request}; returns the response's <name> result
        (None for log and exit), and with want_fds (result, fds). A call the vault refused
        because the agent is being handed to another vault (it did not run) is sent again until
        the hop is settled: if the agent went, this process ends meanwhile; if not, it runs."""
        deadline = time.monotonic() + 60
        while True:
            try:
                return self._call_once(name, request, want_fds)
            except HostError as e:
                if (e.code != UNAVAILABLE or not e.message.startswith("the agent is migrating")
                        or time.monotonic() > deadline):
                    raise
            time.sleep(0.02)

    def _call_once(self, name, request, want_fds):
        with self._lock:
            self._last_call_id += 1
            call_id = self._last_call_id
            frame = H.GuestFrame()
            frame.request.call_id = call_id
            getattr(frame.request, name).CopyFrom(request)
            self._send_frame(frame)
            self._poll_answer(name)
            host, fds = self._read_frame()
        kind = host.WhichOneof("frame")
        if kind != "response" or host.response.call_id != call_id:
            _close_fds(fds)
            got = f"call id {host.response.call_id}" if kind == "response" else kind or "nothing"
            self._fail(INTERNAL, f"expected the response to call {call_id}, got {got}")
        resp = host.response
        if fds and (not want_fds or resp.code != 0):
            _close_fds(fds)
            if resp.code == 0:
                raise HostError(INTERNAL, f"unexpected descriptor with the {name} response")
        if resp.code == PERMISSION_DENIED:
            raise Denied(resp.message)
        if resp.code != 0:
            raise HostError(resp.code, resp.message)
        which = resp.WhichOneof("result")
        if which is not None and which != name:
            _close_fds(fds)
            raise HostError(INTERNAL, f"a {which} result for a {name} call")
        result = getattr(resp, name) if name in resp.DESCRIPTOR.fields_by_name else None
        return (result, fds) if want_fds else result

    def _fail(self, code, message):
        self.close()
        raise HostError(code, message)

    def _live(self):
        if self._sock is None:
            raise HostError(UNAVAILABLE, "the vault channel is closed")
        return self._sock

    def _send_frame(self, frame):
        body = frame.SerializeToString()
        if len(body) > self.max_frame_bytes:  # the vault would end the agent
            raise HostError(RESOURCE_EXHAUSTED,
                            f"a {len(body)}-byte request exceeds the {self.max_frame_bytes}-byte "
                            "frame limit")
        sock = self._live()
        try:
            sock.sendall(struct.pack(">I", len(body)) + body)
        except OSError as e:
            self._fail(UNAVAILABLE, f"the vault channel broke: {e}")

    def _poll_answer(self, name):
        """Polls the channel for up to poll_window_us before the read sleeps (nothing is read
        here, so nothing can be missed)."""
        window = self.poll_window_us
        if window <= 0 or self._sock is None:
            return
        stats = self._poll_stats.setdefault(name, [0, 0])
        if stats[0] >= _POLL_MISSES_BEFORE_BACKOFF:
            stats[1] += 1
            if stats[1] % _POLL_PROBE_EVERY:
                return
        if self._poller is None:
            self._poller = select.poll()
            self._poller.register(self._sock.fileno(), select.POLLIN)
        poll, now = self._poller.poll, time.monotonic_ns
        end = now() + min(window, _MAX_POLL_US) * 1000
        while not poll(0):
            if now() >= end:
                if stats[0] < _POLL_MISSES_BEFORE_BACKOFF:
                    stats[0] += 1
                return
        stats[0] = stats[1] = 0

    def _read_frame(self):
        """One HostFrame and the descriptors that came with it. Any failure, or an interruption,
        closes the channel (the stream could no longer be framed)."""
        sock, fds = self._live(), []
        try:
            (n,) = struct.unpack(">I", self._recv_exact(sock, 4, fds, False))
            if n > self.max_frame_bytes:
                raise HostError(RESOURCE_EXHAUSTED,
                                f"a {n}-byte frame exceeds the {self.max_frame_bytes}-byte limit")
            body = self._recv_exact(sock, n, fds, True)
            sock.settimeout(None)
            frame = H.HostFrame()
            try:
                frame.ParseFromString(body)
            except DecodeError:
                raise HostError(INTERNAL, "the vault sent a frame that does not parse") from None
            return frame, fds
        except BaseException as e:
            _close_fds(fds)
            self.close()
            if isinstance(e, socket.timeout):
                raise HostError(DEADLINE_EXCEEDED,
                                f"a frame incomplete after {FRAME_TIMEOUT_S} s") from None
            if isinstance(e, OSError):
                raise HostError(UNAVAILABLE, f"the vault channel broke: {e}") from None
            raise

    @staticmethod
    def _recv_exact(sock, n, fds, begun):
        buf = bytearray()
        while len(buf) < n:
            data, anc, flags, _ = sock.recvmsg(n - len(buf), _ANC_SPACE, _CLOEXEC)
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    a = array.array("i")
                    a.frombytes(payload[:len(payload) - len(payload) % a.itemsize])
                    fds.extend(a)
            if flags & socket.MSG_CTRUNC:
                raise HostError(INTERNAL, "too many descriptors with a frame")
            if not data:
                raise HostError(UNAVAILABLE, "the vault closed the channel"
                                + (" in the middle of a frame" if buf or begun else ""))
            if not buf and not begun:
                sock.settimeout(FRAME_TIMEOUT_S)  # the frame has begun: it must complete
            buf += data
        return bytes(buf)
