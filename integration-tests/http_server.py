#!/usr/bin/env python3
"""A loopback HTTP and HTTPS server for the http_get tests (integration-tests/rfc_spec_test.cc).

Usage: http_server.py DIR. Makes a test CA and a certificate for 127.0.0.1 in DIR (ca.pem), serves
HTTP and HTTPS on free loopback ports, then writes "HTTP_PORT HTTPS_PORT" to DIR/ports. Exits when
DIR/ports is removed, or after 120 s. Paths:
  /rss/feed       200 text/plain "papers"
  /rss/away       302 to /private        /rss/here   302 to /rss/feed   /rss/loop  302 to itself
  /private        200 "secret"
  /rss/big        200, 100000 bytes      /rss/slow   waits 3 s, then 200
  /echo           POST: 200, the body back with the request's Content-Type
"""
import datetime, ipaddress, os, ssl, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def make_certs(d):
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "http test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(1)
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(2)
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    with open(os.path.join(d, "ca.pem"), "wb") as f:
        f.write(ca.public_bytes(pem))
    with open(os.path.join(d, "server.pem"), "wb") as f:
        f.write(cert.public_bytes(pem))
        f.write(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, code, body=b"", headers=()):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        p = self.path
        if p == "/rss/feed":
            self.reply(200, b"papers", [("Content-Type", "text/plain")])
        elif p == "/rss/away":
            self.reply(302, b"", [("Location", "/private")])
        elif p == "/rss/here":
            self.reply(302, b"", [("Location", "/rss/feed")])
        elif p == "/rss/loop":
            self.reply(302, b"", [("Location", "/rss/loop")])
        elif p == "/private":
            self.reply(200, b"secret", [("Content-Type", "text/plain")])
        elif p == "/rss/big":
            self.reply(200, b"x" * 100000, [("Content-Type", "application/octet-stream")])
        elif p == "/rss/slow":
            time.sleep(3)
            self.reply(200, b"late", [("Content-Type", "text/plain")])
        else:
            self.reply(404, b"no such page")

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n)
        if self.path == "/echo":
            self.reply(200, body, [("Content-Type", self.headers.get("Content-Type", ""))])
        else:
            self.reply(404)


def main():
    d = sys.argv[1]
    make_certs(d)
    plain = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    tls = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(d, "server.pem"))
    tls.socket = ctx.wrap_socket(tls.socket, server_side=True)
    for s in (plain, tls):
        s.daemon_threads = True
        threading.Thread(target=s.serve_forever, daemon=True).start()
    tmp = os.path.join(d, "ports.tmp")
    with open(tmp, "w") as f:
        f.write("%d %d\n" % (plain.server_address[1], tls.server_address[1]))
    os.rename(tmp, os.path.join(d, "ports"))
    end = time.time() + 120
    while time.time() < end:
        time.sleep(0.2)
        if not os.path.exists(os.path.join(d, "ports")):
            break


if __name__ == "__main__":
    main()
