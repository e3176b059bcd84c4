#!/usr/bin/env python3
"""Mobile agent (RFC pattern 4): gather at home, migrate, process remotely, come home with results.

A shopping list lives on the home vault, a price list on a remote one. The agent takes the list
to the prices (the price list never leaves its vault), prices it there, and brings the report
home. The journey has three phases, one per stay:

    phase    where    what
    gather   home     read /vault/pub/mobile/list.txt ("ITEM QTY" lines), migrate to the remote
    price    remote   price each item from /vault/pub/mobile/prices.txt ("ITEM CENTS" lines),
                      migrate home
    report   home     store the report in the CAS; exit 0 with it as the result

Mobility is weak: each vault starts the same code afresh, with the state handed to migrate() as
its get_state(). So the state carries everything: the phase, the home vault, what was gathered
and the results. self_inspect() says where the agent runs now ("vault") and how many hops it has
made ("hop"). migrate() returns only on failure (it raises); on success the process ends here and
the agent goes on over there. Each phase can safely run again: after a vault restart the agent
resumes from the state it arrived with.

The initial state names the remote vault, {"remote": "vault-b"}, or several to visit in turn,
{"remotes": ["vault-b", "vault-c"]}: the agent prices the list at each, and the report it brings
home has a section per vault and, with more than one, the cheapest. The vaults must trust the
principal that spawns it (vaultctl policy trust) with a ceiling that keeps the spec's grants,
"migrate:vault-a,vault-b" and "cas-write" included: a vault narrows the grants to its ceiling,
and the agent comes home with what it held on the remote vault.

Run it from this folder on a two-vault federation (deploy/quickstart.sh up --vaults 2), with
list.txt in vault-a's files/pub/mobile/ and prices.txt in vault-b's:

    echo '{"remote": "vault-b"}' > /tmp/remote.json
    vaultctl agent spawn mobile.scm --state /tmp/remote.json --as owner.key   # on vault-a
    vaultctl agent status <agent id>       # on vault-a: COMPLETED, hop 2, result: the report
    vaultctl cas get <result digest>
"""

import json

from vault_agent import Agent, HostError

LIST = "/vault/pub/mobile/list.txt"      # on the home vault: what to buy
PRICES = "/vault/pub/mobile/prices.txt"  # on the remote vault: what it costs, in cents


def parse_lines(text):
    """ "WORD NUMBER" lines -> [(word, number)]; blank lines are skipped, anything else is a
    ValueError."""
    pairs = []
    for line in text.splitlines():
        if line.strip():
            word, number = line.split()
            pairs.append((word, int(number)))
    return pairs


def price(shopping_list, price_list, where):
    """The report: a line per item, then the total."""
    prices = dict(parse_lines(price_list))
    lines, total = [], 0
    for item, qty in parse_lines(shopping_list):
        if item in prices:
            total += qty * prices[item]
            lines.append(f"{item} {qty} x {prices[item]} = {qty * prices[item]}")
        else:
            lines.append(f"{item} {qty}: no price at {where}")
    lines.append(f"total {total} (priced at {where})")
    return "\n".join(lines) + "\n"


def main():
    agent = Agent.connect()
    state = json.loads(agent.get_state() or b"{}")  # where the agent is in its journey
    here = agent.self_inspect()                      # where it runs now
    phase = state.get("phase", "gather")
    agent.log(f"phase {phase} on {here['vault']} (hop {here['hop']})")
    try:
        if phase == "gather":  # at home: take the list along, remember the way back
            remotes = state["remotes"] if "remotes" in state else [state["remote"]]
            if not remotes or not all(isinstance(r, str) for r in remotes):
                raise ValueError("the initial state names no remote vault")
            state = {"phase": "price", "home": here["vault"], "remotes": remotes,
                     "list": agent.read_file(LIST).decode(), "reports": []}
            agent.migrate(remotes[0], json.dumps(state).encode())  # goes, or raises
        elif phase == "price" and here["vault"] == state["remotes"][len(state["reports"])]:
            report = price(state["list"], agent.read_file(PRICES).decode(), here["vault"])
            state = dict(state, reports=state["reports"] + [report])
            done = len(state["reports"]) == len(state["remotes"])
            if done:
                state["phase"] = "report"
            agent.migrate(state["home"] if done else state["remotes"][len(state["reports"])],
                          json.dumps(state).encode())
        elif phase == "report" and here["vault"] == state["home"]:
            result = agent.cas_put(summarize(state["remotes"], state["reports"]).encode())
            agent.exit(0, message=f"home after {here['hop']} hops", result=result)
        else:
            raise ValueError(f"phase {phase!r} does not belong on {here['vault']}")
    except (HostError, KeyError, IndexError, ValueError) as e:  # a denial, a failed hop, bad data
        agent.exit(1, message=f"phase {phase} on {here['vault']}: {e}")


def summarize(remotes, reports):
    """The reports one after the other; with more than one, the vault with the lowest total."""
    if len(reports) == 1:
        return reports[0]
    totals = [int(r.rsplit("total ", 1)[1].split()[0]) for r in reports]
    best = min(range(len(totals)), key=lambda i: totals[i])
    return "".join(reports) + f"cheapest at {remotes[best]}: {totals[best]}\n"


if __name__ == "__main__":
    main()
