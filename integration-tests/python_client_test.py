#!/usr/bin/env python3
"""The vault's gRPC API from outside C++: python_client/vault_client.py (generic gRPC calls,
messages from protoc --python_out) against a real vaultd, over mutual TLS as a federation member
and over the admin socket. CAS bytes and digests are checked with hashlib; the audit checkpoint's
root is recomputed from the entries, and an inclusion proof is verified per RFC 9162.

Environment (set by ctest): VAULTD, VAULTCTL, PROTOC, PROTO_DIR.
"""

import base64
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

try:
    import grpc
except ImportError:  # python3-grpcio
    grpc = None

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "python_client"))
if grpc is not None:
    import vault_client  # noqa: E402
    from vault_client import VaultClient  # noqa: E402

VAULTD = os.environ.get("VAULTD", "")
VAULTCTL = os.environ.get("VAULTCTL", "")
PROTOC = os.environ.get("PROTOC", "")
PROTO_DIR = os.environ.get("PROTO_DIR", "")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vaultctl(*args, check=True):
    r = subprocess.run([VAULTCTL, *args], capture_output=True, text=True, timeout=60)
    if check and r.returncode != 0:
        raise AssertionError("vaultctl %s: exit %d\n%s%s" % (args, r.returncode, r.stdout, r.stderr))
    return r


class PythonClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="python_client_test.")
        cls.pb = vault_client.load_protos(PROTOC, PROTO_DIR, os.path.join(cls.root, "gen"))
        vaultctl("federation", "create-ca", "--dir", cls.root + "/ca")
        cls.port = free_port()
        cls.address = "127.0.0.1:%d" % cls.port
        cls.a = cls.root + "/a"
        cls.b = cls.root + "/b"   # the client's identity: a member vault that is not running
        cls.x = cls.root + "/x"   # same CA, not a member of a
        vaultctl("init", "--name", "vault-a", "--dir", cls.a, "--ca", cls.root + "/ca",
                 "--listen", cls.address)
        vaultctl("init", "--name", "vault-b", "--dir", cls.b, "--ca", cls.root + "/ca",
                 "--listen", "127.0.0.1:%d" % free_port())
        vaultctl("init", "--name", "vault-x", "--dir", cls.x, "--ca", cls.root + "/ca",
                 "--listen", "127.0.0.1:%d" % free_port())
        vaultctl("federation", "add-member", "--config", cls.a + "/vault.conf",
                 "--peer-config", cls.b + "/vault.conf")
        cls.log = open(cls.root + "/vaultd-a.log", "wb")
        cls.vaultd = subprocess.Popen([VAULTD, "--config", cls.a + "/vault.conf"],
                                      stdout=cls.log, stderr=cls.log)
        ready = cls.a + "/data/vaultd.ready"
        deadline = time.monotonic() + 60
        while not os.path.exists(ready):
            if cls.vaultd.poll() is not None or time.monotonic() > deadline:
                cls.tearDownClass()
                raise AssertionError("vaultd did not start; see its log")
            time.sleep(0.05)
        with open(ready) as f:
            info = json.load(f)
        cls.socket = info["admin_socket"]
        cls.admin = VaultClient.admin(cls.socket, cls.pb)
        cls.member = VaultClient.member(cls.address, "vault-a", cls.b + "/tls/vault.crt",
                                        cls.b + "/tls/vault.key", cls.b + "/tls/ca.crt", cls.pb)

    @classmethod
    def tearDownClass(cls):
        for c in ("admin", "member"):
            if hasattr(cls, c):
                getattr(cls, c).close()
        if cls.vaultd.poll() is None:
            cls.vaultd.send_signal(signal.SIGTERM)
            try:
                cls.vaultd.wait(timeout=30)
            except subprocess.TimeoutExpired:
                cls.vaultd.kill()
                cls.vaultd.wait()
        cls.log.close()
        shutil.rmtree(cls.root, ignore_errors=True)

    def test_health_on_both_listeners(self):
        self.assertEqual(self.admin.health(), "SERVING")
        self.assertEqual(self.member.health(), "SERVING")
        with self.assertRaises(grpc.RpcError) as e:
            self.admin.health("no.such.Service")
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_cas_put_has_get_over_mutual_tls(self):
        data = b"bytes from python over mutual TLS\n" + os.urandom(64)
        d = self.member.digest(data)
        self.assertEqual(d.sha256, hashlib.sha256(data).digest())
        self.assertEqual([(m.sha256, m.size) for m in self.member.find_missing([d])],
                         [(d.sha256, d.size)])
        (result,) = self.member.batch_put([(d, data)])
        self.assertEqual(result.status.code, 0, result.status.message)
        self.assertFalse(result.already_present)
        self.assertEqual((result.digest.sha256, result.digest.size), (d.sha256, d.size))
        self.assertEqual(self.member.find_missing([d]), [])
        (again,) = self.member.batch_put([(d, data)])
        self.assertTrue(again.already_present)
        self.assertEqual(again.seq, result.seq)
        (item,) = self.member.batch_get([d])
        self.assertEqual(item.status.code, 0)
        self.assertEqual(item.data, data)
        self.assertEqual(self.member.get(d), data)
        st = self.member.stat(d)
        self.assertTrue(st.present)
        self.assertEqual(st.seq, result.seq)
        # The C++ CLI agrees on the address, computed here with hashlib.
        text = "sha256:%s/%d" % (hashlib.sha256(data).hexdigest(), len(data))
        self.assertEqual(vault_client.digest_text(data), text)
        self.assertEqual(vaultctl("--vault", self.socket, "cas", "has", text).returncode, 0)

    def test_cas_refuses_bytes_that_do_not_match_their_digest(self):
        data = b"honest bytes"
        lie = self.member.digest(b"other bytes of the same len")
        lie.size = len(data)
        (result,) = self.member.batch_put([(lie, data)])
        self.assertEqual(result.status.code, grpc.StatusCode.INVALID_ARGUMENT.value[0],
                         result.status.message)
        self.assertEqual(len(self.member.find_missing([lie])), 1)

    def test_large_object_streams_in_and_out(self):
        data = os.urandom(5 << 20)  # above the 4 MiB chunking threshold
        result = self.member.put_stream(data)
        self.assertEqual(result.status.code, 0, result.status.message)
        d = self.member.digest(data)
        self.assertEqual(self.member.stat(d).layout, self.pb.cas.StatResponse.CHUNKED)
        back = self.admin.get(d)
        self.assertEqual(hashlib.sha256(back).digest(), hashlib.sha256(data).digest())
        self.assertEqual(back, data)

    def test_non_member_is_unauthenticated(self):
        x = VaultClient.member(self.address, "vault-a", self.x + "/tls/vault.crt",
                               self.x + "/tls/vault.key", self.x + "/tls/ca.crt", self.pb)
        try:
            with self.assertRaises(grpc.RpcError) as e:
                x.find_missing([x.digest(b"")])
            self.assertEqual(e.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
        finally:
            x.close()

    def test_audit_inclusion_proof_verifies_against_the_signed_checkpoint(self):
        data = b"an object the audit log must prove\n" + os.urandom(32)
        d = self.member.put(data)
        # Over TCP a member may not make the vault sign; its operator may.
        with self.assertRaises(grpc.RpcError) as e:
            self.member.checkpoint(issue=True)
        self.assertEqual(e.exception.code(), grpc.StatusCode.PERMISSION_DENIED)
        cp = self.admin.checkpoint(issue=True)
        note = vault_client.Note(cp.note)
        self.assertEqual(note.origin, cp.origin)
        self.assertEqual(note.origin, "vault.audit/vault-a")
        self.assertEqual(note.size, cp.size)
        self.assertEqual(note.root, cp.root)
        self.assertGreaterEqual(cp.size, 2)

        # The root, recomputed here from every entry's bytes (RFC 6962 MTH), and the hash chain.
        entries = self.member.entries(0, cp.size)
        self.assertEqual(len(entries), cp.size)
        leaves = [vault_client.leaf_hash(e) for e in entries]
        self.assertEqual(vault_client.merkle_root(leaves), cp.root)
        prev = b"\x00" * 32
        for i, raw in enumerate(entries):
            entry = self.pb.audit.AuditEntry.FromString(raw)
            self.assertEqual(entry.sequence, i)
            self.assertEqual(entry.prev_hash, prev)
            prev = leaves[i]

        # The cas.put entry that names our object: digests_sha256 = SHA-256 of its address line.
        want = hashlib.sha256((vault_client.digest_text(data) + "\n").encode()).hexdigest()
        found = None
        for i, raw in enumerate(entries):
            entry = self.pb.audit.AuditEntry.FromString(raw)
            details = {x.key: x.value for x in entry.details}
            if entry.action == "cas.put" and details.get("digests_sha256") == want:
                found = i
        self.assertIsNotNone(found, "no cas.put entry for the object")
        self.assertEqual(self.pb.audit.AuditEntry.FromString(entries[found]).decision,
                         self.pb.audit.AuditEntry.ALLOWED)

        for client in (self.member, self.admin):
            proof = client.inclusion_proof(found, cp.size)
            self.assertEqual(proof.index, found)
            self.assertEqual(proof.size, cp.size)
            self.assertEqual(proof.leaf_hash, leaves[found])
            self.assertEqual(proof.root, cp.root)
            self.assertEqual(
                vault_client.verify_inclusion(found, cp.size, leaves[found], list(proof.hashes)),
                cp.root)
        # A proof for another leaf does not prove ours.
        other = (found + 1) % cp.size
        proof = self.member.inclusion_proof(other, cp.size)
        self.assertNotEqual(
            vault_client.verify_inclusion(found, cp.size, leaves[found], list(proof.hashes)),
            cp.root)
        self.assertEqual(self.member.get(d), data)

    def test_checkpoint_signature_verifies_with_the_vault_key(self):
        try:
            import cryptography  # noqa: F401
        except ImportError:
            self.skipTest("python3-cryptography is not installed: signature not checked")
        cp = self.member.checkpoint()
        vk = self.member.verifier_key()
        self.assertEqual(vk.origin, cp.origin)
        name, key_id, key_b64 = vk.verifier_key.split("+", 2)  # base64 may hold "+"
        self.assertEqual(name, "vault-a")
        key = base64.b64decode(key_b64)
        self.assertEqual(key[0], 1)
        self.assertEqual("ed25519:" + key[1:].hex(), vk.public_key)
        self.assertEqual(vault_client.verifier_key_id(name, key[1:]).hex(), key_id)
        note = vault_client.Note(cp.note)
        self.assertTrue(vault_client.verify_note_signature(note, name, key[1:]))
        tampered = vault_client.Note(cp.note.replace("\n%d\n" % cp.size, "\n%d\n" % (cp.size + 1)))
        from cryptography.exceptions import InvalidSignature
        with self.assertRaises(InvalidSignature):
            vault_client.verify_note_signature(tampered, name, key[1:])


class MerkleTest(unittest.TestCase):
    """The client's own hashing against a tree built by brute force."""

    def test_every_proof_of_small_trees(self):
        leaves = [vault_client.leaf_hash(bytes([i])) for i in range(9)]
        self.assertEqual(vault_client.merkle_root([]).hex(),
                         "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        for size in range(1, len(leaves) + 1):
            root = vault_client.merkle_root(leaves[:size])
            for index in range(size):
                proof = path(index, leaves[:size])
                self.assertEqual(vault_client.verify_inclusion(index, size, leaves[index], proof),
                                 root)
            with self.assertRaises(ValueError):
                vault_client.verify_inclusion(size, size, leaves[0], [])


def path(index, leaves):
    """RFC 6962 PATH(m, D[n])."""
    n = len(leaves)
    if n <= 1:
        return []
    k = 1
    while k * 2 < n:
        k *= 2
    if index < k:
        return path(index, leaves[:k]) + [vault_client.merkle_root(leaves[k:])]
    return path(index - k, leaves[k:]) + [vault_client.merkle_root(leaves[:k])]


if __name__ == "__main__":
    missing = [n for n, v in (("VAULTD", VAULTD), ("VAULTCTL", VAULTCTL), ("PROTOC", PROTOC),
                              ("PROTO_DIR", PROTO_DIR)) if not v]
    if missing:
        print("python_client_test: %s not set (run it through ctest)" % ", ".join(missing))
        sys.exit(77)
    if grpc is None:
        print("python_client_test: python3-grpcio is not installed: SKIP")
        sys.exit(77)
    unittest.main(verbosity=2)
