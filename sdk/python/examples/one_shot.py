#!/usr/bin/env python3
"""One-shot processing (RFC pattern 2): CAS object in, CAS object out, then exit.

Its initial state names the input: {"input": "sha256:<64 hex>/<size>"}. It reads that object
(in frame-sized pieces), upper-cases the text, counts its lines, stores
{"lines": N, "text": "..."} (JSON) in the CAS and exits with that object as its result.

Run it:

    vaultctl cas put notes.txt                     # prints sha256:<hex>/<size>
    cat > one_shot.scm <<'SPEC'
    (agent (purpose "upper-case a text and count its lines")
           (code-file "one_shot.py")
           (capabilities (cas-read) (cas-write))
           (constraints (max-runtime 60)))
    SPEC
    vaultctl agent spawn one_shot.scm --state '{"input": "sha256:<hex>/<size>"}'
    vaultctl agent status <agent id>               # state COMPLETED, result: the output digest
"""

import json

import vault_agent
from vault_agent import Agent


def read_object(agent, digest):
    size = vault_agent.parse_digest(digest).size
    piece = agent.max_frame_bytes // 2  # leaves room for the response's framing
    data = bytearray()
    while len(data) < size:
        chunk = agent.cas_get(digest, offset=len(data), limit=piece)
        if not chunk:
            raise vault_agent.HostError(vault_agent.INTERNAL, "object shorter than its digest")
        data += chunk
    return bytes(data)


def main():
    agent = Agent.connect()
    try:
        digest = json.loads(agent.get_state() or b"{}")["input"]
        vault_agent.parse_digest(digest)
    except (ValueError, KeyError, TypeError) as e:
        agent.exit(2, message=f'initial state must be {{"input": "sha256:<hex>/<size>"}}: {e}')

    text = read_object(agent, digest).decode("utf-8", errors="replace")
    lines = len(text.splitlines())
    out = json.dumps({"lines": lines, "text": text.upper()}).encode()
    result = agent.cas_put(out)  # must fit in one frame (max_frame_bytes)
    agent.log(f"{digest}: {lines} lines -> {result}")
    agent.exit(0, message=f"{lines} lines", result=result)


if __name__ == "__main__":
    main()
