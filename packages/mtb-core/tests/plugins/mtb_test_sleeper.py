"""A stand-in worker for the lifeline tests: says it is ready, then sleeps (no torch)."""

import time

print("ready", flush=True)
time.sleep(120)
