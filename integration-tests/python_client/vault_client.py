"""An independent Python client of a vault's gRPC API: Cas, Audit and gRPC health.

It shares no code with the C++ tree: the messages come from the .proto files through
`protoc --python_out` (load_protos), the calls are gRPC generic calls by method path, and the
audit log's Merkle tree and proofs are checked here with hashlib, per RFC 6962 / RFC 9162.

    pb = load_protos("/usr/bin/protoc", "proto", "/tmp/gen")
    client = VaultClient.admin("/var/lib/vault/node/data/vault.sock", pb)        # Unix socket
    client = VaultClient.member("127.0.0.1:7701", "vault-a", cert, key, ca, pb)  # mutual TLS
    digest = client.put(b"hello")            # sha256 computed here; the vault re-hashes it
    assert client.get(digest) == b"hello"
    cp = client.checkpoint()
    proof = client.inclusion_proof(3, cp.size)
    assert verify_inclusion(3, cp.size, proof.leaf_hash, list(proof.hashes)) == cp.root

Requires python3-grpcio and python3-protobuf (Debian 12); python3-cryptography only to check
checkpoint signatures (verify_note_signature).
"""

import base64
import hashlib
import importlib
import os
import subprocess
import sys

import grpc

DEFAULT_TIMEOUT = 30.0
PROTOS = ("vault/v1/cas.proto", "vault/v1/audit.proto")


class Protos:
    """The generated message modules: cas (vault.v1 Cas) and audit (vault.v1 Audit)."""

    def __init__(self, cas, audit):
        self.cas = cas
        self.audit = audit


def load_protos(protoc, proto_root, out_dir):
    """Generates vault/v1/{cas,audit}_pb2.py into out_dir with protoc and imports them."""
    os.makedirs(out_dir, exist_ok=True)
    subprocess.run([protoc, "--python_out=" + out_dir, "-I", proto_root, *PROTOS], check=True)
    for pkg in ("vault", "vault/v1"):
        open(os.path.join(out_dir, pkg, "__init__.py"), "a").close()
    if out_dir not in sys.path:
        sys.path.insert(0, out_dir)
    return Protos(importlib.import_module("vault.v1.cas_pb2"),
                  importlib.import_module("vault.v1.audit_pb2"))


# --- digests ---------------------------------------------------------------------------------

def digest_text(data):
    """The vault's address of `data`: sha256:<hex>/<size>, as sha256sum computes it."""
    return "sha256:%s/%d" % (hashlib.sha256(data).hexdigest(), len(data))


# --- RFC 6962 / 9162 Merkle tree ----------------------------------------------------------------

def leaf_hash(entry_bytes):
    return hashlib.sha256(b"\x00" + entry_bytes).digest()


def node_hash(left, right):
    return hashlib.sha256(b"\x01" + left + right).digest()


def merkle_root(leaf_hashes):
    """MTH of RFC 6962 section 2.1 over leaf hashes (the empty tree: SHA-256 of nothing)."""
    n = len(leaf_hashes)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return leaf_hashes[0]
    k = 1
    while k * 2 < n:
        k *= 2
    return node_hash(merkle_root(leaf_hashes[:k]), merkle_root(leaf_hashes[k:]))


def verify_inclusion(index, size, leaf, proof):
    """The root that an RFC 9162 (2.1.3.2) inclusion proof gives; ValueError if malformed."""
    if index >= size:
        raise ValueError("index %d is not below tree size %d" % (index, size))
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            raise ValueError("inclusion proof is too long")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ValueError("inclusion proof is too short")
    return r


# --- checkpoints (C2SP signed notes) ------------------------------------------------------------

class Note:
    """A parsed checkpoint: origin, size, root, and its signature lines (name, key id, sig)."""

    def __init__(self, text):
        body, sep, sigs = text.partition("\n\n")
        if not sep:
            raise ValueError("a signed note needs a blank line before its signatures")
        self.body = body + "\n"
        lines = body.split("\n")
        if len(lines) < 3:
            raise ValueError("a checkpoint has origin, size and root lines")
        self.origin = lines[0]
        self.size = int(lines[1])
        self.root = base64.b64decode(lines[2], validate=True)
        self.signatures = []
        for line in sigs.rstrip("\n").split("\n"):
            dash, name, blob = line.split(" ")
            if dash != "\u2014":
                raise ValueError("a signature line starts with an em dash: %r" % line)
            raw = base64.b64decode(blob, validate=True)
            self.signatures.append((name, raw[:4], raw[4:]))


def verifier_key_id(name, public_key):
    """The note key ID: the first 4 bytes of SHA-256(name || 0x0A || 0x01 || key)."""
    return hashlib.sha256(name.encode() + b"\n\x01" + public_key).digest()[:4]


def verify_note_signature(note, name, public_key):
    """Checks `name`'s Ed25519 signature of the note; needs python3-cryptography."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    want_id = verifier_key_id(name, public_key)
    for signer, key_id, sig in note.signatures:
        if signer == name and key_id == want_id:
            Ed25519PublicKey.from_public_bytes(public_key).verify(sig, note.body.encode())
            return True
    raise ValueError("no signature of %s with key id %s" % (name, want_id.hex()))


# --- gRPC health, without generated messages -----------------------------------------------------

HEALTH_STATUS = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}


def _health_request(service):
    data = service.encode()
    if not data:
        return b""
    out, n = bytearray(b"\x0a"), len(data)
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            break
    return bytes(out) + data


def _health_response(data):
    # HealthCheckResponse {ServingStatus status = 1}: absent means 0 (UNKNOWN).
    if not data:
        return "UNKNOWN"
    if data[0] != 0x08:
        raise ValueError("unexpected HealthCheckResponse bytes %r" % data)
    return HEALTH_STATUS.get(data[1], "UNKNOWN")


# --- the client ----------------------------------------------------------------------------------

class VaultClient:
    """Calls one vault over one channel. Every call carries a deadline (timeout seconds)."""

    def __init__(self, channel, pb, timeout=DEFAULT_TIMEOUT):
        self.channel = channel
        self.pb = pb
        self.timeout = timeout

    @classmethod
    def admin(cls, socket_path, pb, timeout=DEFAULT_TIMEOUT):
        """The admin socket: plaintext gRPC over a Unix socket (mode 0600)."""
        return cls(grpc.insecure_channel("unix:" + os.path.abspath(socket_path)), pb, timeout)

    @classmethod
    def member(cls, address, server_name, cert_file, key_file, ca_file, pb,
               timeout=DEFAULT_TIMEOUT):
        """Mutual TLS as a federation member: its certificate and key, the federation CA, and
        the name in the server's certificate (the vault's name)."""
        def read(path):
            with open(path, "rb") as f:
                return f.read()
        creds = grpc.ssl_channel_credentials(root_certificates=read(ca_file),
                                             private_key=read(key_file),
                                             certificate_chain=read(cert_file))
        options = [("grpc.ssl_target_name_override", server_name),
                   ("grpc.max_receive_message_length", 64 << 20)]
        return cls(grpc.secure_channel(address, creds, options=options), pb, timeout)

    def close(self):
        self.channel.close()

    def _unary(self, method, request, response_type):
        call = self.channel.unary_unary(method, request_serializer=type(request).SerializeToString,
                                        response_deserializer=response_type.FromString)
        return call(request, timeout=self.timeout)

    def _stream_out(self, method, request, response_type):
        call = self.channel.unary_stream(method,
                                         request_serializer=type(request).SerializeToString,
                                         response_deserializer=response_type.FromString)
        return call(request, timeout=self.timeout)

    # gRPC health (grpc.health.v1.Health/Check)
    def health(self, service=""):
        call = self.channel.unary_unary("/grpc.health.v1.Health/Check",
                                        request_serializer=lambda b: b,
                                        response_deserializer=lambda b: b)
        return _health_response(call(_health_request(service), timeout=self.timeout))

    # Cas
    def digest(self, data):
        return self.pb.cas.Digest(sha256=hashlib.sha256(data).digest(), size=len(data))

    def find_missing(self, digests):
        req = self.pb.cas.FindMissingRequest(digests=digests)
        return list(self._unary("/vault.v1.Cas/FindMissing", req,
                                self.pb.cas.FindMissingResponse).missing)

    def batch_put(self, items):
        """items: [(Digest, bytes)]; returns the PutResults in order."""
        req = self.pb.cas.BatchPutRequest(
            items=[self.pb.cas.BatchPutRequest.Item(digest=d, data=b) for d, b in items])
        return list(self._unary("/vault.v1.Cas/BatchPut", req,
                                self.pb.cas.BatchPutResponse).results)

    def put(self, data):
        """Stores `data` with one BatchPut; returns its Digest. RuntimeError if refused."""
        d = self.digest(data)
        (result,) = self.batch_put([(d, data)])
        if result.status.code != 0:
            raise RuntimeError("put refused: %d %s" % (result.status.code, result.status.message))
        return d

    def put_stream(self, data, piece=1 << 20):
        """Stores `data` with the streaming Put (any size); returns the PutResult."""
        d = self.digest(data)

        def requests():
            yield self.pb.cas.PutRequest(digest=d, offset=0, data=data[:piece])
            for off in range(piece, len(data), piece):
                yield self.pb.cas.PutRequest(data=data[off:off + piece])

        call = self.channel.stream_unary("/vault.v1.Cas/Put",
                                         request_serializer=self.pb.cas.PutRequest.SerializeToString,
                                         response_deserializer=self.pb.cas.PutResponse.FromString)
        return call(requests(), timeout=self.timeout).result

    def batch_get(self, digests):
        req = self.pb.cas.BatchGetRequest(digests=digests)
        return list(self._unary("/vault.v1.Cas/BatchGet", req, self.pb.cas.BatchGetResponse).items)

    def get(self, digest):
        """The whole object through the streaming Get, pieces checked to be contiguous."""
        out = bytearray()
        for resp in self._stream_out("/vault.v1.Cas/Get", self.pb.cas.GetRequest(digest=digest),
                                     self.pb.cas.GetResponse):
            if resp.offset != len(out):
                raise ValueError("Get sent offset %d after %d bytes" % (resp.offset, len(out)))
            out += resp.data
        return bytes(out)

    def stat(self, digest):
        return self._unary("/vault.v1.Cas/Stat", self.pb.cas.StatRequest(digest=digest),
                           self.pb.cas.StatResponse)

    # Audit
    def checkpoint(self, log="", issue=False):
        return self._unary("/vault.v1.Audit/GetCheckpoint",
                           self.pb.audit.GetCheckpointRequest(log=log, issue=issue),
                           self.pb.audit.GetCheckpointResponse)

    def entries(self, start, end, log=""):
        """The raw bytes of entries [start, end), exactly as the vault hashed them."""
        out = []
        for page in self._stream_out("/vault.v1.Audit/GetEntries",
                                     self.pb.audit.GetEntriesRequest(log=log, to=end,
                                                                     **{"from": start}),
                                     self.pb.audit.GetEntriesResponse):
            if page.first != start + len(out):
                raise ValueError("GetEntries page starts at %d, expected %d" %
                                 (page.first, start + len(out)))
            out.extend(page.entries)
        return out

    def inclusion_proof(self, index, size=0, log=""):
        return self._unary("/vault.v1.Audit/GetInclusionProof",
                           self.pb.audit.GetInclusionProofRequest(log=log, index=index, size=size),
                           self.pb.audit.GetInclusionProofResponse)

    def verifier_key(self, log=""):
        return self._unary("/vault.v1.Audit/GetVerifierKey",
                           self.pb.audit.GetVerifierKeyRequest(log=log),
                           self.pb.audit.GetVerifierKeyResponse)
