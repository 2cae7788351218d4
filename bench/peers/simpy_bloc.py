"""The peer of bench/sim-throughput.sh: examples/bloc.yaml's 40x10 least-request run in SimPy.

The same model as tailguard's simulator runs (100 closed-loop clients -> a gateway balancing with
P2C least-request over 40 frontends -> each frontend balancing with P2C least-request over its own
in-flight counts to 10 single-worker FIFO backends of 250 ms, 250 us per one-way hop), written the
way a SimPy user would. Prints one JSON line: requests simulated per second of wall time.
"""

import json
import random
import sys
import time

import simpy

HOP = 0.000250
SERVICE = 0.250
CLIENTS, FRONTENDS, BACKENDS = 100, 40, 10


def p2c(rng: random.Random, in_flight: list[int]) -> int:
    a, b = rng.sample(range(len(in_flight)), 2)
    return b if in_flight[b] < in_flight[a] else a


def main(virtual_seconds: float, seed: int) -> dict:
    rng = random.Random(seed)
    env = simpy.Environment()
    backends = [simpy.Resource(env, capacity=1) for _ in range(BACKENDS)]
    gateway_in_flight = [0] * FRONTENDS
    frontend_in_flight = [[0] * BACKENDS for _ in range(FRONTENDS)]
    done = [0]

    def backend(b: int):
        with backends[b].request() as slot:
            yield slot
            yield env.timeout(SERVICE)

    def frontend(f: int):
        b = p2c(rng, frontend_in_flight[f])
        frontend_in_flight[f][b] += 1
        yield env.timeout(HOP)
        yield env.process(backend(b))
        yield env.timeout(HOP)
        frontend_in_flight[f][b] -= 1

    def client():
        while True:
            yield env.timeout(HOP)
            f = p2c(rng, gateway_in_flight)
            gateway_in_flight[f] += 1
            yield env.timeout(HOP)
            yield env.process(frontend(f))
            yield env.timeout(HOP)
            gateway_in_flight[f] -= 1
            yield env.timeout(HOP)
            done[0] += 1

    for _ in range(CLIENTS):
        env.process(client())
    started = time.perf_counter()
    env.run(until=virtual_seconds)
    wall = time.perf_counter() - started
    return {"peer": "simpy", "requests": done[0], "wall_s": wall, "requests_per_s": done[0] / wall}


if __name__ == "__main__":
    print(json.dumps(main(float(sys.argv[1]) if len(sys.argv) > 1 else 300.0, 42)))
