"""Unit tests of vault_agent's codec: the test plays the vault on the other end of a socketpair.

Run with the generated vault/v1/*_pb2.py and vault_agent on PYTHONPATH:
    PYTHONPATH=<build>/sdk/python python3 -m unittest <src>/sdk/python/tests/test_vault_agent.py
Responses are queued before the call that reads them (the socket buffers them), so no threads.
"""

import array
import hashlib
import os
import socket
import struct
import threading
import time
import unittest

import vault_agent
from vault_agent import Agent, Denied, HostError
from vault.v1 import capability_pb2, hostcall_pb2 as H

HEX = "ab" * 32
DIGEST = f"sha256:{HEX}/5"


def frame(msg):
    body = msg.SerializeToString()
    return struct.pack(">I", len(body)) + body


def response(call_id, code=0, message="", **result):
    resp = H.HostResponse(call_id=call_id, code=code, message=message, **result)
    return frame(H.HostFrame(response=resp))


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError(f"got {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def read_guest(sock):
    (n,) = struct.unpack(">I", recv_exact(sock, 4))
    return H.GuestFrame.FromString(recv_exact(sock, n))


def open_fds():
    return set(os.listdir("/proc/self/fd"))


class AgentTest(unittest.TestCase):
    def setUp(self):
        self.vault, agent_end = socket.socketpair()
        self.vault.settimeout(5)
        self.agent_end = agent_end

    def tearDown(self):
        self.vault.close()
        self.agent_end.close()

    def connect(self, **welcome):
        fields = dict(version=1, agent_id="a-1", vault="vault-a", max_frame_bytes=1 << 20,
                      incarnation=3)
        fields.update(welcome)
        self.vault.sendall(frame(H.HostFrame(welcome=H.Welcome(**fields))))
        agent = Agent.connect(self.agent_end)
        self.assertEqual(read_guest(self.vault).WhichOneof("frame"), "hello")
        return agent

    def assert_closed(self):
        """The agent closed its end: the vault side reads EOF."""
        self.assertEqual(self.vault.recv(1), b"")

    # --- handshake ---

    def test_hello_bytes_and_welcome(self):
        self.vault.sendall(frame(H.HostFrame(welcome=H.Welcome(
            version=1, agent_id="a-1", vault="vault-a", max_frame_bytes=4096, incarnation=3))))
        agent = Agent.connect(self.agent_end)
        sdk = b"vault-agent-python/0.1"
        hello = b"\x08\x01\x12" + bytes([len(sdk)]) + sdk       # version=1, sdk=...
        guest = b"\x0a" + bytes([len(hello)]) + hello           # GuestFrame.hello
        self.assertEqual(recv_exact(self.vault, 4 + len(guest)),
                         struct.pack(">I", len(guest)) + guest)
        self.assertEqual((agent.agent_id, agent.vault, agent.incarnation, agent.max_frame_bytes),
                         ("a-1", "vault-a", 3, 4096))

    def test_connect_by_fd_number_and_env(self):
        self.vault.sendall(frame(H.HostFrame(welcome=H.Welcome(version=1))))
        os.environ["VAULT_CHANNEL_FD"] = str(self.agent_end.detach())
        try:
            agent = Agent.connect(sdk_name="t/1")
        finally:
            del os.environ["VAULT_CHANNEL_FD"]
        self.assertEqual(read_guest(self.vault).hello.sdk, "t/1")
        self.assertEqual(agent.max_frame_bytes, vault_agent.DEFAULT_MAX_FRAME_BYTES)
        agent.close()
        self.assert_closed()

    def test_refused_handshake(self):
        self.vault.sendall(frame(H.HostFrame(refused="unknown agent")))
        with self.assertRaises(HostError) as cm:
            Agent.connect(self.agent_end)
        self.assertEqual(cm.exception.code, 9)
        self.assertIn("unknown agent", cm.exception.message)
        read_guest(self.vault)
        self.assert_closed()

    def test_version_mismatch(self):
        self.vault.sendall(frame(H.HostFrame(welcome=H.Welcome(version=2))))
        with self.assertRaises(HostError) as cm:
            Agent.connect(self.agent_end)
        self.assertEqual(cm.exception.code, 9)
        read_guest(self.vault)
        self.assert_closed()

    def test_no_channel(self):
        r, w = os.pipe()
        try:
            with self.assertRaises(HostError) as cm:
                Agent.connect(r)   # not a socket
            self.assertEqual(cm.exception.code, 14)
        finally:
            os.close(r)
            os.close(w)

    # --- requests ---

    def test_request_framing_and_call_ids(self):
        agent = self.connect()
        self.vault.sendall(response(1, heartbeat=H.HeartbeatResult(checkpoint_requested=True)))
        self.vault.sendall(response(2, cas_put=H.CasPutResult(
            digest={"sha256": bytes.fromhex(HEX), "size": 5})))
        self.vault.sendall(response(3))
        self.assertTrue(agent.heartbeat())
        self.assertEqual(agent.cas_put(b"hello"), DIGEST)
        agent.log("hi", level="warn")
        first = read_guest(self.vault).request
        self.assertEqual((first.call_id, first.WhichOneof("call")), (1, "heartbeat"))
        raw = recv_exact(self.vault, 4)
        body = recv_exact(self.vault, struct.unpack(">I", raw)[0])
        expected = H.GuestFrame(request=H.HostRequest(call_id=2,
                                                      cas_put=H.CasPutRequest(data=b"hello")))
        self.assertEqual(body, expected.SerializeToString())
        third = read_guest(self.vault).request
        self.assertEqual(third.call_id, 3)
        self.assertEqual((third.log.level, third.log.message), (H.LogRequest.WARN, "hi"))

    def test_denied_and_other_errors(self):
        agent = self.connect()
        self.vault.sendall(response(1, code=7, message="no read grant for /etc"))
        self.vault.sendall(response(2, code=5, message="no such file"))
        self.vault.sendall(response(3, read_file=H.ReadFileResult(data=b"x", size=1)))
        with self.assertRaises(Denied) as cm:
            agent.read_file("/etc/passwd")
        self.assertEqual((cm.exception.code, cm.exception.message), (7, "no read grant for /etc"))
        with self.assertRaises(HostError) as cm:
            agent.read_file("/vault/pub/missing")
        self.assertNotIsInstance(cm.exception, Denied)
        self.assertEqual((cm.exception.code, cm.exception.message), (5, "no such file"))
        self.assertEqual(agent.read_file("/vault/pub/x", offset=1, limit=2), b"x")  # still open
        reqs = [read_guest(self.vault).request for _ in range(3)]
        self.assertEqual([r.call_id for r in reqs], [1, 2, 3])
        self.assertEqual((reqs[2].read_file.offset, reqs[2].read_file.limit), (1, 2))

    def test_oversized_frame_closes(self):
        agent = self.connect(max_frame_bytes=64)
        self.vault.sendall(struct.pack(">I", 65))  # the body never comes: refused before it
        with self.assertRaises(HostError) as cm:
            agent.heartbeat()
        self.assertEqual(cm.exception.code, 8)
        read_guest(self.vault)
        self.assert_closed()
        with self.assertRaises(HostError) as cm:
            agent.heartbeat()
        self.assertEqual(cm.exception.code, 14)

    def test_oversized_request_not_sent(self):
        agent = self.connect(max_frame_bytes=64)
        with self.assertRaises(HostError) as cm:
            agent.write_file("/vault/a", b"x" * 100)
        self.assertEqual(cm.exception.code, 8)
        self.vault.sendall(response(2, heartbeat=H.HeartbeatResult()))
        self.assertFalse(agent.heartbeat())
        self.assertEqual(read_guest(self.vault).request.call_id, 2)

    def test_truncated_frame(self):
        agent = self.connect()
        whole = response(1, heartbeat=H.HeartbeatResult(checkpoint_requested=True))
        self.vault.sendall(whole[:-1])
        self.vault.shutdown(socket.SHUT_WR)
        with self.assertRaises(HostError) as cm:
            agent.heartbeat()
        self.assertEqual(cm.exception.code, 14)
        self.assertIn("middle of a frame", cm.exception.message)

    def test_frame_begun_but_stalled(self):
        agent = self.connect()
        self.vault.sendall(b"\x00\x00")  # half a header, then nothing
        saved, vault_agent.FRAME_TIMEOUT_S = vault_agent.FRAME_TIMEOUT_S, 0.1
        try:
            with self.assertRaises(HostError) as cm:
                agent.heartbeat()
        finally:
            vault_agent.FRAME_TIMEOUT_S = saved
        self.assertEqual(cm.exception.code, 4)

    def test_frame_that_does_not_parse(self):
        agent = self.connect()
        self.vault.sendall(struct.pack(">I", 3) + b"\xff\xff\xff")
        with self.assertRaises(HostError) as cm:
            agent.heartbeat()
        self.assertEqual(cm.exception.code, 13)
        read_guest(self.vault)
        self.assert_closed()

    def test_wrong_call_id_closes(self):
        agent = self.connect()
        self.vault.sendall(response(9, heartbeat=H.HeartbeatResult()))
        with self.assertRaises(HostError) as cm:
            agent.heartbeat()
        self.assertEqual(cm.exception.code, 13)

    # --- descriptors ---

    def send_with_fd(self, data, fd):
        self.vault.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                     array.array("i", [fd]))])

    def test_net_connect_returns_socket(self):
        agent = self.connect()
        mine, theirs = socket.socketpair()
        self.send_with_fd(response(1, net_connect=H.NetConnectResult(address="10.0.0.1:443")),
                          theirs.fileno())
        theirs.close()
        conn = agent.net_connect("api.example.com", 443, timeout_ms=100)
        self.assertIsInstance(conn, socket.socket)
        conn.sendall(b"ping")
        self.assertEqual(mine.recv(4), b"ping")
        conn.close()
        mine.close()
        req = read_guest(self.vault).request.net_connect
        self.assertEqual((req.host, req.port, req.timeout_ms), ("api.example.com", 443, 100))

    def test_net_connect_without_fd(self):
        agent = self.connect()
        self.vault.sendall(response(1, net_connect=H.NetConnectResult()))
        with self.assertRaises(HostError) as cm:
            agent.net_connect("h", 1)
        self.assertEqual(cm.exception.code, 13)

    def test_unexpected_fd_is_closed(self):
        agent = self.connect()
        r, w = os.pipe()
        before = open_fds()
        self.send_with_fd(response(1, heartbeat=H.HeartbeatResult()), r)
        with self.assertRaises(HostError) as cm:
            agent.heartbeat()
        self.assertEqual(cm.exception.code, 13)
        self.assertEqual(open_fds(), before)  # the received copy was closed
        os.close(r)
        os.close(w)

    # --- the other calls ---

    def test_state_and_checkpoint(self):
        agent = self.connect()
        self.vault.sendall(response(1, get_state=H.StateResult(present=False)))
        self.vault.sendall(response(2, get_state=H.StateResult(present=True, state=b"")))
        self.vault.sendall(response(3, checkpoint=H.CheckpointResult(
            digest={"sha256": bytes.fromhex(HEX), "size": 5})))
        self.assertIsNone(agent.get_state())
        self.assertEqual(agent.get_state(), b"")
        self.assertEqual(agent.checkpoint(b"state"), DIGEST)

    def test_large_state_is_read_in_pieces(self):
        agent = self.connect(max_frame_bytes=4096)  # pieces of 3072 bytes
        state = bytes(range(256)) * 40               # 10240 bytes
        d = {"sha256": hashlib.sha256(state).digest(), "size": len(state)}
        for call, at in enumerate(range(0, len(state), 3072), start=1):
            self.vault.sendall(response(call, get_state=H.StateResult(
                present=True, size=len(state), digest=d, state=state[at:at + 3072])))
        self.assertEqual(agent.get_state(), state)
        reqs = [read_guest(self.vault).request.get_state for _ in range(4)]
        self.assertEqual([(r.offset, r.limit) for r in reqs],
                         [(0, 3072), (3072, 3072), (6144, 3072), (9216, 3072)])

    def test_state_that_changes_while_read_is_read_again(self):
        agent = self.connect(max_frame_bytes=4096)
        old, new = b"o" * 5000, b"n" * 4000

        def piece(call, state, at):
            d = {"sha256": hashlib.sha256(state).digest(), "size": len(state)}
            return response(call, get_state=H.StateResult(present=True, size=len(state), digest=d,
                                                          state=state[at:at + 3072]))
        self.vault.sendall(piece(1, old, 0) + piece(2, new, 3072) + piece(3, new, 0) +
                           piece(4, new, 3072))
        self.assertEqual(agent.get_state(), new)

    def test_large_checkpoint_goes_in_pieces_then_by_digest(self):
        agent = self.connect(max_frame_bytes=4096)
        state = b"z" * 7000
        text = f"sha256:{hashlib.sha256(state).hexdigest()}/7000"
        d = vault_agent.parse_digest(text)
        self.vault.sendall(response(1, cas_upload_start=H.CasUploadStartResult(upload_id=3)))
        for call in (2, 3, 4):
            self.vault.sendall(response(call, cas_upload_append=H.CasUploadAppendResult()))
        self.vault.sendall(response(5, cas_upload_finish=H.CasUploadFinishResult(digest=d)))
        self.vault.sendall(response(6, checkpoint=H.CheckpointResult(digest=d)))
        self.assertEqual(agent.checkpoint(state), text)
        self.assertEqual(read_guest(self.vault).request.cas_upload_start.digest, d)
        appends = [read_guest(self.vault).request.cas_upload_append for _ in range(3)]
        self.assertEqual([(a.upload_id, a.offset) for a in appends], [(3, 0), (3, 3072), (3, 6144)])
        self.assertEqual(b"".join(a.data for a in appends), state)
        self.assertFalse(read_guest(self.vault).request.cas_upload_finish.abort)
        self.assertEqual(read_guest(self.vault).request.checkpoint.state_digest, d)
        # A small one still takes one frame.
        self.vault.sendall(response(7, checkpoint=H.CheckpointResult(digest=d)))
        agent.checkpoint(b"s" * 3072)
        self.assertEqual(read_guest(self.vault).request.checkpoint.state, b"s" * 3072)

    def test_failed_piece_aborts_the_upload(self):
        agent = self.connect(max_frame_bytes=4096)
        self.vault.sendall(response(1, cas_upload_start=H.CasUploadStartResult(upload_id=9)))
        self.vault.sendall(response(2, code=8, message="quota"))
        self.vault.sendall(response(3, cas_upload_finish=H.CasUploadFinishResult()))
        with self.assertRaises(HostError) as cm:
            agent.cas_put(b"q" * 5000)
        self.assertEqual(cm.exception.code, 8)
        self.assertTrue(read_guest(self.vault).request.HasField("cas_upload_start"))
        self.assertTrue(read_guest(self.vault).request.HasField("cas_upload_append"))
        finish = read_guest(self.vault).request.cas_upload_finish
        self.assertEqual((finish.upload_id, finish.abort), (9, True))

    def test_large_migrate_puts_the_state_first(self):
        agent = self.connect(max_frame_bytes=4096)
        state = b"m" * 5000
        d = vault_agent.parse_digest(f"sha256:{hashlib.sha256(state).hexdigest()}/5000")
        self.vault.sendall(response(1, cas_upload_start=H.CasUploadStartResult(upload_id=1)))
        self.vault.sendall(response(2, cas_upload_append=H.CasUploadAppendResult()))
        self.vault.sendall(response(3, cas_upload_append=H.CasUploadAppendResult()))
        self.vault.sendall(response(4, cas_upload_finish=H.CasUploadFinishResult(digest=d)))
        self.vault.sendall(response(5, code=10, message="refused"))
        with self.assertRaises(HostError) as cm:
            agent.migrate("b", state)
        self.assertEqual(cm.exception.code, 10)
        reqs = [read_guest(self.vault).request for _ in range(5)]
        self.assertEqual(reqs[4].migrate.vault, "b")
        self.assertEqual(reqs[4].migrate.state, b"")
        self.assertEqual(reqs[4].migrate.state_digest, d)

    def test_receive(self):
        agent = self.connect()
        msg = H.Message(id=4, type="vault.query", data=b"q", sent_unix_ms=7, reply_to=0)
        setattr(msg, "from", "operator")
        self.vault.sendall(response(1, receive=H.ReceiveResult(message=msg)))
        self.vault.sendall(response(2, receive=H.ReceiveResult(timed_out=True)))
        self.assertEqual(agent.receive(timeout=0.25),
                         vault_agent.Message(4, "operator", "vault.query", b"q", 7, 0))
        self.assertIsNone(agent.receive(timeout=0))
        self.assertEqual(read_guest(self.vault).request.receive.timeout_ms, 250)
        self.assertEqual(read_guest(self.vault).request.receive.timeout_ms, 0)

    def test_poll_window_from_environment(self):
        old = os.environ.get("VAULT_AGENT_POLL_US")
        try:
            for value, want in (("20", 20), ("0", 0), ("999999", 1000), ("fast", 50)):
                os.environ["VAULT_AGENT_POLL_US"] = value
                with Agent(socket.socket()) as a:
                    self.assertEqual(a.poll_window_us, want, value)
            del os.environ["VAULT_AGENT_POLL_US"]
            with Agent(socket.socket()) as a:
                self.assertEqual(a.poll_window_us, 50)
        finally:
            if old is not None:
                os.environ["VAULT_AGENT_POLL_US"] = old

    def test_late_answers_are_read_and_a_long_wait_sleeps(self):
        """Answers that come after the poll window are still read (the read sleeps for them),
        and a call waiting 1 s uses little CPU (the window is spent once, then it sleeps)."""
        agent = self.connect()
        agent.poll_window_us = 1000

        def vault():
            for i in range(1, 21):
                req = read_guest(self.vault).request
                time.sleep(0.002 if i % 2 else 0)
                if i == 20:
                    time.sleep(1)
                self.vault.sendall(response(req.call_id, heartbeat=H.HeartbeatResult()))

        t = threading.Thread(target=vault)
        t.start()
        for _ in range(19):
            agent.heartbeat()
        cpu0, t0 = time.thread_time(), time.monotonic()
        agent.heartbeat()
        cpu, waited = time.thread_time() - cpu0, time.monotonic() - t0
        t.join()
        self.assertGreater(waited, 0.9)
        self.assertLess(cpu, 0.05)

    def test_list_send_share_write(self):
        agent = self.connect()
        self.vault.sendall(response(1, list=H.ListResult(entries=[
            H.ListResult.Entry(name="d", directory=True), H.ListResult.Entry(name="f", size=3)])))
        self.vault.sendall(response(2, send=H.SendResult(message_id=11)))
        self.vault.sendall(response(3, share=H.ShareResult()))
        self.vault.sendall(response(4, write_file=H.WriteFileResult(size=9)))
        self.assertEqual(agent.list("/vault/pub"), [
            {"name": "d", "directory": True, "size": 0},
            {"name": "f", "directory": False, "size": 3}])
        self.assertEqual(agent.send("operator", "vault.answer", b"42", reply_to=4), 11)
        self.assertIsNone(agent.share(DIGEST, ["a-2"]))
        self.assertEqual(agent.write_file("/vault/out", b"abc", append=True), 9)
        reqs = [read_guest(self.vault).request for _ in range(4)]
        self.assertEqual(reqs[1].send.reply_to, 4)
        self.assertEqual(list(reqs[2].share.agents), ["a-2"])
        self.assertEqual(reqs[2].share.digest.size, 5)
        self.assertTrue(reqs[3].write_file.append)

    def test_self_inspect_and_spawn_child(self):
        agent = self.connect()
        G = capability_pb2.Grant
        self.vault.sendall(response(1, self_inspect=H.SelfInspectResult(
            agent_id="a-1", grants=[G(kind=G.READ, path="/vault/pub"),
                                    G(kind=G.NETWORK, host="x.org")],
            constraints=capability_pb2.Constraints(max_memory_bytes=0),
            runtime_remaining_ms=-1)))
        self.vault.sendall(response(2, spawn_child=H.SpawnChildResult(
            agent_id="a-2", grants=[G(kind=G.CAS_READ)], narrowed=True)))
        info = agent.self_inspect()
        self.assertEqual(info["grants"], ["read /vault/pub", "network x.org:*"])
        self.assertEqual(info["constraints"], {"max_memory_bytes": 0})
        self.assertEqual((info["runtime_remaining_ms"], info["hop"]), (-1, 0))
        child = agent.spawn_child({"purpose": "p", "code": DIGEST,
                                   "grants": ["cas-read", "network:x.org:443"],
                                   "constraints": {"max_runtime_ms": 1000}}, state=b"s")
        self.assertEqual(child, {"agent_id": "a-2", "grants": ["cas-read"], "narrowed": True})
        read_guest(self.vault)
        req = read_guest(self.vault).request.spawn_child
        self.assertEqual((req.state, req.has_state), (b"s", True))
        self.assertEqual(req.spec.grants[1], G(kind=G.NETWORK, host="x.org", port=443))
        self.assertEqual(req.spec.constraints.max_runtime_ms, 1000)
        with self.assertRaises(ValueError):
            agent.spawn_child({"purpose": "p", "bogus": 1})

    def test_migrate_returns_only_on_failure(self):
        agent = self.connect()
        self.vault.sendall(response(1, code=10, message="migration to b refused"))
        self.vault.sendall(response(2, code=7, message="no migrate grant names c"))
        self.vault.sendall(response(3))
        with self.assertRaises(HostError) as cm:
            agent.migrate("b", b"phase=process\0")
        self.assertEqual((cm.exception.code, cm.exception.message), (10, "migration to b refused"))
        with self.assertRaises(Denied):
            agent.migrate("c", bytearray(b"s"))
        # An OK answer breaks the protocol: the vault answers a migrate only when it failed.
        with self.assertRaises(HostError) as cm:
            agent.migrate("b", b"")
        self.assertEqual(cm.exception.code, vault_agent.INTERNAL)
        with self.assertRaises(TypeError):
            agent.migrate("b", "not bytes")
        reqs = [read_guest(self.vault).request for _ in range(3)]
        self.assertEqual([r.call_id for r in reqs], [1, 2, 3])
        self.assertEqual((reqs[0].migrate.vault, reqs[0].migrate.state), ("b", b"phase=process\0"))
        self.assertEqual((reqs[1].migrate.vault, reqs[1].migrate.state), ("c", b"s"))

    def test_self_inspect_reports_vault_and_hop(self):
        agent = self.connect()
        self.vault.sendall(response(1, self_inspect=H.SelfInspectResult(vault="vault-b", hop=2)))
        info = agent.self_inspect()
        self.assertEqual((info["vault"], info["hop"]), ("vault-b", 2))

    def test_exit(self):
        agent = self.connect()
        self.vault.sendall(response(1, code=5, message="result not in the CAS"))
        self.vault.sendall(response(2))
        with self.assertRaises(HostError):
            agent.exit(0, result=DIGEST)
        with self.assertRaises(SystemExit) as cm:
            agent.exit(3, message="failed")
        self.assertEqual(cm.exception.code, 3)
        self.assertEqual(read_guest(self.vault).request.exit.result.size, 5)
        self.assertEqual(read_guest(self.vault).request.exit.code, 3)
        self.assert_closed()

    def test_exit_when_vault_closes_first(self):
        agent = self.connect()
        self.vault.shutdown(socket.SHUT_WR)
        with self.assertRaises(SystemExit):
            agent.exit()

    def test_bad_log_level(self):
        agent = self.connect()
        with self.assertRaises(ValueError):
            agent.log("x", level="loud")


class DigestTest(unittest.TestCase):
    def test_round_trip(self):
        d = vault_agent.parse_digest(DIGEST)
        self.assertEqual((d.sha256, d.size), (bytes.fromhex(HEX), 5))
        self.assertEqual(vault_agent.format_digest(d), DIGEST)
        self.assertEqual(vault_agent.parse_digest(f"sha256:{HEX}/0").size, 0)
        big = f"sha256:{HEX}/{(1 << 64) - 1}"
        self.assertEqual(vault_agent.format_digest(vault_agent.parse_digest(big)), big)

    def test_strict(self):
        for bad in [f"sha256:{HEX.upper()}/5", f"sha256:{HEX[:-2]}/5", f"sha256:{HEX}/05",
                    f"sha256:{HEX}/+5", f"sha256:{HEX}/", f"sha256:{HEX}", f"SHA256:{HEX}/5",
                    f"sha256:{HEX}/5\n", f" sha256:{HEX}/5", f"sha256:{HEX}/{1 << 64}",
                    f"sha256:{HEX}/\u0665", "", None, b"sha256:x/1"]:
            with self.assertRaises(ValueError, msg=repr(bad)):
                vault_agent.parse_digest(bad)

    def test_grants(self):
        G = capability_pb2.Grant
        self.assertEqual(vault_agent.parse_grant("migrate:b,a,b"),
                         G(kind=G.MIGRATE, vaults=["a", "b"]))
        self.assertEqual(vault_agent.parse_grant("network:h:*"), G(kind=G.NETWORK, host="h"))
        # One trailing "/" is dropped, as vaultctl's shorthand does; "//" stays (the vault refuses it).
        self.assertEqual(vault_agent.parse_grant("read:/vault/pub/"),
                         G(kind=G.READ, path="/vault/pub"))
        self.assertEqual(vault_agent.parse_grant("write:/vault//"), G(kind=G.WRITE, path="/vault//"))
        self.assertEqual(vault_agent.parse_grant("read:/"), G(kind=G.READ, path="/"))
        self.assertEqual(vault_agent.format_grant(G(kind=G.READ, hash=b"\x01" * 32)),
                         "read sha256:" + "01" * 32)
        for bad in ["read", "cas-read:x", "network:h:70000", "migrate:a,,b", "fly:x"]:
            with self.assertRaises(ValueError, msg=bad):
                vault_agent.parse_grant(bad)


if __name__ == "__main__":
    unittest.main()
