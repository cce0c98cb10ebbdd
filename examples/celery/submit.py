#!/usr/bin/python3
"""Send --tasks call_llm tasks to the running Celery workers, wait for them
all, and report what the provider served and refused against its limits,
as a line of text and, last, a line of JSON.
"""
import argparse
import json
import time
import urllib.request

from celery import group

from tasks import app, call_llm


def provider(path, method="GET"):
    request = urllib.request.Request(PROVIDER + path, method=method)
    with urllib.request.urlopen(request) as answer:
        return json.load(answer)


parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--provider", required=True)
parser.add_argument("--tasks", type=int, default=200)
parser.add_argument("--label", default="")
args = parser.parse_args()
PROVIDER = args.provider

# wait until the workers answer, so the run measures work, not start-up
for _ in range(120):
    if app.control.ping(timeout=0.5):
        break
else:
    raise SystemExit("no Celery worker answered")

provider("/reset", "POST")
started = time.monotonic()
outcomes = group(call_llm.s(100, 200) for _ in range(args.tasks))().get(timeout=600)
stats = provider("/stats")

# the most the provider allows over the run: a window's burst, then its rate
per_second = stats["seconds"] / stats["window"]
allowed_requests = stats["rpm"] * (1 + per_second)
allowed_tokens = stats["tpm"] * (1 + per_second)
result = {
    "label": args.label, "tasks": args.tasks, "served": stats["served"],
    "refused": stats["refused"], "tokens": stats["tokens"],
    "timed_out": outcomes.count("timed out"), "seconds": round(stats["seconds"], 2),
    "of_request_limit": round(stats["served"] / allowed_requests, 3),
    "of_token_limit": round(stats["tokens"] / allowed_tokens, 3),
}
result["of_limit"] = max(result["of_request_limit"], result["of_token_limit"])
print(f"{args.label}: {result['served']} served, {result['refused']} refused (429), "
      f"{result['tokens']} tokens in {result['seconds']} s: "
      f"{100 * result['of_request_limit']:.1f}% of the request limit, "
      f"{100 * result['of_token_limit']:.1f}% of the token limit")
print(json.dumps(result))
