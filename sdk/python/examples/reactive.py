#!/usr/bin/env python3
"""Reactive service (RFC pattern 3): a message loop that answers queries.

It waits for messages (one second at a time, heartbeating in between) and:
  - answers "vault.query" with a "vault.answer" to the sender, reply_to the query's id; the
    answer is JSON {"question": <the query's text>, "answered": <queries answered so far>};
  - checkpoints its counter on "vault.checkpoint", or when a heartbeat says the vault is
    stopping (checkpoint_requested);
  - checkpoints and exits on "stop".
Other message types are logged and dropped.

Run it:

    cat > reactive.scm <<'SPEC'
    (agent (purpose "answer questions about itself")
           (instructions "(query ANY-TEXT) -> JSON {question, answered}")
           (code-file "reactive.py")
           (capabilities (send (agent "*")) (receive (from "*")))
           (constraints (max-runtime (* 24 3600))))
    SPEC
    vaultctl agent spawn reactive.scm
    vaultctl agent query <agent id> "how many so far?"
    vaultctl agent send <agent id> --type stop
"""

import json

from vault_agent import Agent


def main():
    agent = Agent.connect()
    state = json.loads(agent.get_state() or b"{}")
    answered = int(state.get("answered", 0))

    def checkpoint():
        agent.checkpoint(json.dumps({"answered": answered}).encode())

    while True:
        if agent.heartbeat():
            checkpoint()
        msg = agent.receive(timeout=1.0)
        if msg is None:
            continue
        if msg.type == "vault.query":
            answered += 1
            answer = {"question": msg.data.decode("utf-8", errors="replace"),
                      "answered": answered}
            agent.send(msg.sender, "vault.answer", json.dumps(answer).encode(),
                       reply_to=msg.id)
        elif msg.type == "vault.checkpoint":
            checkpoint()
        elif msg.type == "stop":
            checkpoint()
            agent.exit(0, message=f"stopped by {msg.sender} after {answered} answers")
        else:
            agent.log(f"ignoring a {msg.type!r} message from {msg.sender}", level="debug")


if __name__ == "__main__":
    main()
