#!/usr/bin/env python3
"""Periodic task (RFC pattern 1): do the work, heartbeat, checkpoint a counter, sleep; repeat.

Each round lists /vault/pub and logs how many entries it holds. The counter of rounds done is
checkpointed every round, so after a vault restart the agent resumes where it was. It stops
after `iterations` rounds (default 5), `interval_s` seconds apart (default 2), both read from
its initial state (JSON); keep interval_s well below the spec's heartbeat timeout.

Run it (the spec in S-expression form, code uploaded from the local file):

    cat > periodic.scm <<'SPEC'
    (agent (purpose "count the entries of /vault/pub every few seconds")
           (code-file "periodic.py")
           (capabilities (read (path "/vault/pub")))
           (constraints (max-runtime 3600)))
    SPEC
    vaultctl agent spawn periodic.scm --state '{"iterations": 10, "interval_s": 1}'
    vaultctl agent logs <agent id> -f
"""

import json
import time

from vault_agent import Agent, HostError


def main():
    agent = Agent.connect()
    state = json.loads(agent.get_state() or b"{}")
    iterations = int(state.get("iterations", 5))
    interval_s = float(state.get("interval_s", 2))
    done = int(state.get("done", 0))
    if done:
        agent.log(f"resuming after {done} rounds (incarnation {agent.incarnation})")

    while done < iterations:
        try:
            entries = agent.list("/vault/pub")
            agent.log(f"round {done + 1}: /vault/pub holds {len(entries)} entries")
        except HostError as e:  # Denied included: log it and carry on
            agent.log(f"round {done + 1}: list failed: {e.message}", level="warn")
        done += 1
        agent.heartbeat()  # a checkpoint request is honoured just below, every round
        agent.checkpoint(json.dumps(dict(state, done=done)).encode())
        if done < iterations:
            time.sleep(interval_s)

    agent.exit(0, message=f"{done} rounds")


if __name__ == "__main__":
    main()
